//! The decoder, top to bottom in the order data flows. Shapes in comments use
//! `n` = tokens in this call, `d` = hidden, `hd` = head_dim, `f` = intermediate.
//! Weight matrices are row-major `(out, in)`, the layout GGUF and safetensors
//! share.

use super::{Weight, WeightSource};
use crate::config::ModelConfig;
use crate::error::{LoadError, Result};

/// How RoPE pairs the dimensions of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeLayout {
    /// (i, i + hd/2): Hugging Face `rotate_half`, ggml NEOX mode.
    Halves,
    /// (2i, 2i + 1): ggml mode 0, for GGUF llama whose q/k rows were permuted.
    Interleaved,
}

/// y (n, out) = x (n, in) · Wᵀ (+ b)
fn linear(x: &[f32], w: &[f32], b: Option<&[f32]>, n_in: usize, n_out: usize) -> Vec<f32> {
    let n = x.len() / n_in;
    let mut y = vec![0.0f32; n * n_out];
    for t in 0..n {
        let xr = &x[t * n_in..(t + 1) * n_in];
        for o in 0..n_out {
            let wr = &w[o * n_in..(o + 1) * n_in];
            let mut acc = 0.0f32;
            for i in 0..n_in {
                acc += xr[i] * wr[i];
            }
            y[t * n_out + o] = acc + b.map_or(0.0, |b| b[o]);
        }
    }
    y
}

/// RMSNorm over each row of `dim` elements, in place.
fn rms_norm(x: &mut [f32], w: &[f32], dim: usize, eps: f32) {
    for row in x.chunks_exact_mut(dim) {
        let ms = row.iter().map(|v| v * v).sum::<f32>() / dim as f32;
        let scale = 1.0 / (ms + eps).sqrt();
        for (v, g) in row.iter_mut().zip(w) {
            *v *= scale * g;
        }
    }
}

/// Precomputed RoPE frequencies.
#[derive(Clone, Debug)]
pub struct RotaryEmbedding {
    inv_freq: Vec<f32>, // (hd/2)
    layout: RopeLayout,
}

impl RotaryEmbedding {
    /// Frequencies `θ^(-2i/hd)`, each divided by the config's
    /// [`ModelConfig::rope_freq_divisors`] (Llama 3 and linear scaling);
    /// YaRN is an error.
    pub fn new(cfg: &ModelConfig, layout: RopeLayout) -> Result<Self> {
        let hd = cfg.head_dim;
        let divisors = cfg.rope_freq_divisors()?;
        let inv_freq: Vec<f32> = (0..hd / 2)
            .map(|i| {
                let f = 1.0 / cfg.rope_theta.powf(2.0 * i as f32 / hd as f32);
                divisors.as_ref().map_or(f, |d| f / d[i])
            })
            .collect();
        Ok(RotaryEmbedding { inv_freq, layout })
    }

    /// Rotates every head of `x` (n_heads × hd) at position `pos`, in place.
    pub fn apply(&self, x: &mut [f32], hd: usize, pos: usize) {
        let half = hd / 2;
        for head in x.chunks_exact_mut(hd) {
            for (i, &f) in self.inv_freq.iter().enumerate() {
                let (sin, cos) = (pos as f32 * f).sin_cos();
                let (a, b) = match self.layout {
                    RopeLayout::Halves => (i, i + half),
                    RopeLayout::Interleaved => (2 * i, 2 * i + 1),
                };
                let (x0, x1) = (head[a], head[b]);
                head[a] = x0 * cos - x1 * sin;
                head[b] = x0 * sin + x1 * cos;
            }
        }
    }
}

/// SwiGLU feed-forward: down(silu(gate(x)) * up(x)).
#[derive(Clone, Debug)]
pub struct Mlp {
    gate: Vec<f32>, // (f, d)
    up: Vec<f32>,   // (f, d)
    down: Vec<f32>, // (d, f)
    d: usize,
    f: usize,
}

impl Mlp {
    pub fn new(cfg: &ModelConfig, w: &dyn WeightSource, l: usize) -> Result<Self> {
        let (d, f) = (cfg.hidden, cfg.intermediate);
        Ok(Mlp {
            gate: w.load(Weight::Gate(l), f * d)?,
            up: w.load(Weight::Up(l), f * d)?,
            down: w.load(Weight::Down(l), d * f)?,
            d,
            f,
        })
    }

    pub fn forward(&self, x: &[f32]) -> Vec<f32> {
        let mut g = linear(x, &self.gate, None, self.d, self.f); // (n, f)
        let u = linear(x, &self.up, None, self.d, self.f); // (n, f)
        for (g, u) in g.iter_mut().zip(&u) {
            *g = *g / (1.0 + (-*g).exp()) * u;
        }
        linear(&g, &self.down, None, self.f, self.d) // (n, d)
    }
}

/// Keys and values of past positions, one buffer per layer.
#[derive(Clone, Debug, Default)]
pub struct KvCache {
    k: Vec<Vec<f32>>, // layer → (pos, n_kv × hd)
    v: Vec<Vec<f32>>,
}

impl KvCache {
    /// Positions stored.
    pub fn len(&self, kv_dim: usize) -> usize {
        self.k.first().map_or(0, |k| k.len() / kv_dim)
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.k.first().is_none_or(Vec::is_empty)
    }
}

/// Grouped-query attention with optional qkv bias (Qwen2) and per-head
/// q/k RMSNorm (Qwen3).
#[derive(Clone, Debug)]
pub struct Attention {
    q: Vec<f32>, // (n_heads × hd, d)
    k: Vec<f32>, // (n_kv × hd, d)
    v: Vec<f32>, // (n_kv × hd, d)
    o: Vec<f32>, // (d, n_heads × hd)
    bias: Option<[Vec<f32>; 3]>,
    qk_norm: Option<[Vec<f32>; 2]>, // (hd) each
    n_heads: usize,
    n_kv: usize,
    hd: usize,
    d: usize,
    eps: f32,
}

impl Attention {
    pub fn new(cfg: &ModelConfig, w: &dyn WeightSource, l: usize) -> Result<Self> {
        let (d, hd, nh, nkv) = (cfg.hidden, cfg.head_dim, cfg.n_heads, cfg.n_kv_heads);
        let bias = if cfg.qkv_bias {
            Some([
                w.load(Weight::QBias(l), nh * hd)?,
                w.load(Weight::KBias(l), nkv * hd)?,
                w.load(Weight::VBias(l), nkv * hd)?,
            ])
        } else {
            None
        };
        let qk_norm = if cfg.qk_norm {
            Some([w.load(Weight::QNorm(l), hd)?, w.load(Weight::KNorm(l), hd)?])
        } else {
            None
        };
        Ok(Attention {
            q: w.load(Weight::Q(l), nh * hd * d)?,
            k: w.load(Weight::K(l), nkv * hd * d)?,
            v: w.load(Weight::V(l), nkv * hd * d)?,
            o: w.load(Weight::O(l), d * nh * hd)?,
            bias,
            qk_norm,
            n_heads: nh,
            n_kv: nkv,
            hd,
            d,
            eps: cfg.rms_eps,
        })
    }

    /// `x` (n, d) at positions start.., appending to the layer's cache.
    pub fn forward(
        &self,
        x: &[f32],
        start: usize,
        rope: &RotaryEmbedding,
        k_cache: &mut Vec<f32>,
        v_cache: &mut Vec<f32>,
    ) -> Vec<f32> {
        let (nh, nkv, hd) = (self.n_heads, self.n_kv, self.hd);
        let n = x.len() / self.d;
        let b = |i: usize| self.bias.as_ref().map(|b| b[i].as_slice());
        let mut q = linear(x, &self.q, b(0), self.d, nh * hd); // (n, nh × hd)
        let mut k = linear(x, &self.k, b(1), self.d, nkv * hd); // (n, nkv × hd)
        let v = linear(x, &self.v, b(2), self.d, nkv * hd); // (n, nkv × hd)
        if let Some([qn, kn]) = &self.qk_norm {
            rms_norm(&mut q, qn, hd, self.eps);
            rms_norm(&mut k, kn, hd, self.eps);
        }
        for t in 0..n {
            rope.apply(&mut q[t * nh * hd..(t + 1) * nh * hd], hd, start + t);
            rope.apply(&mut k[t * nkv * hd..(t + 1) * nkv * hd], hd, start + t);
        }
        k_cache.extend_from_slice(&k);
        v_cache.extend_from_slice(&v);
        let group = nh / nkv;
        let scale = 1.0 / (hd as f32).sqrt();
        let mut out = vec![0.0f32; n * nh * hd]; // (n, nh × hd)
        let mut scores = Vec::new();
        for t in 0..n {
            let visible = start + t + 1; // causal: positions 0..=start+t
            for h in 0..nh {
                let kvh = h / group;
                let qh = &q[(t * nh + h) * hd..(t * nh + h + 1) * hd];
                scores.clear();
                for p in 0..visible {
                    let kp = &k_cache[(p * nkv + kvh) * hd..(p * nkv + kvh + 1) * hd];
                    scores.push(qh.iter().zip(kp).map(|(a, b)| a * b).sum::<f32>() * scale);
                }
                let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let mut sum = 0.0;
                for s in scores.iter_mut() {
                    *s = (*s - max).exp();
                    sum += *s;
                }
                let oh = &mut out[(t * nh + h) * hd..(t * nh + h + 1) * hd];
                for (p, s) in scores.iter().enumerate() {
                    let vp = &v_cache[(p * nkv + kvh) * hd..(p * nkv + kvh + 1) * hd];
                    for (o, vv) in oh.iter_mut().zip(vp) {
                        *o += s / sum * vv;
                    }
                }
            }
        }
        linear(&out, &self.o, None, nh * hd, self.d) // (n, d)
    }
}

/// Pre-norm transformer block.
#[derive(Clone, Debug)]
pub struct DecoderLayer {
    attn_norm: Vec<f32>, // (d)
    attn: Attention,
    ffn_norm: Vec<f32>, // (d)
    mlp: Mlp,
}

impl DecoderLayer {
    pub fn new(cfg: &ModelConfig, w: &dyn WeightSource, l: usize) -> Result<Self> {
        Ok(DecoderLayer {
            attn_norm: w.load(Weight::AttnNorm(l), cfg.hidden)?,
            attn: Attention::new(cfg, w, l)?,
            ffn_norm: w.load(Weight::FfnNorm(l), cfg.hidden)?,
            mlp: Mlp::new(cfg, w, l)?,
        })
    }

    pub fn forward(
        &self,
        x: &mut [f32],
        start: usize,
        rope: &RotaryEmbedding,
        eps: f32,
        k: &mut Vec<f32>,
        v: &mut Vec<f32>,
    ) {
        let d = self.attn_norm.len();
        let mut h = x.to_vec();
        rms_norm(&mut h, &self.attn_norm, d, eps);
        let a = self.attn.forward(&h, start, rope, k, v);
        x.iter_mut().zip(&a).for_each(|(x, a)| *x += a);
        let mut h = x.to_vec();
        rms_norm(&mut h, &self.ffn_norm, d, eps);
        let m = self.mlp.forward(&h);
        x.iter_mut().zip(&m).for_each(|(x, m)| *x += m);
    }
}

/// The whole decoder.
#[derive(Clone, Debug)]
pub struct Model {
    cfg: ModelConfig,
    embed: Vec<f32>, // (vocab, d)
    layers: Vec<DecoderLayer>,
    norm: Vec<f32>,            // (d)
    lm_head: Option<Vec<f32>>, // (vocab, d); None when tied to `embed`
    rope: RotaryEmbedding,
}

impl Model {
    /// Loads every weight as f32. The output projection is the embedding when
    /// the config says tied or the source has no separate one.
    pub fn new(cfg: &ModelConfig, w: &dyn WeightSource) -> Result<Self> {
        let (vocab, d) = (cfg.vocab, cfg.hidden);
        let layers = (0..cfg.n_layers)
            .map(|l| DecoderLayer::new(cfg, w, l))
            .collect::<Result<Vec<_>>>()?;
        let lm_head = if !cfg.tied_embeddings && w.has(Weight::Output) {
            Some(w.load(Weight::Output, vocab * d)?)
        } else {
            None
        };
        Ok(Model {
            cfg: cfg.clone(),
            embed: w.load(Weight::TokenEmbedding, vocab * d)?,
            layers,
            norm: w.load(Weight::OutputNorm, d)?,
            lm_head,
            rope: RotaryEmbedding::new(cfg, w.rope_layout(cfg))?,
        })
    }

    /// The configuration it was built from.
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// A cache sized for this model.
    pub fn new_cache(&self) -> KvCache {
        KvCache {
            k: vec![Vec::new(); self.layers.len()],
            v: vec![Vec::new(); self.layers.len()],
        }
    }

    /// Runs `tokens` after the positions already in `cache`; returns the
    /// logits of every token, (n, vocab) row-major.
    pub fn forward(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Vec<f32>> {
        let (d, vocab) = (self.cfg.hidden, self.cfg.vocab);
        let kv_dim = self.cfg.n_kv_heads * self.cfg.head_dim;
        let start = cache.len(kv_dim);
        if start + tokens.len() > self.cfg.max_pos {
            return Err(LoadError::Config(format!(
                "{} positions exceed the model's context of {}",
                start + tokens.len(),
                self.cfg.max_pos
            )));
        }
        let mut x = Vec::with_capacity(tokens.len() * d); // (n, d)
        for &t in tokens {
            let t = t as usize;
            if t >= vocab {
                return Err(LoadError::Tokenizer(format!(
                    "token id {t} is outside the {vocab}-token vocabulary"
                )));
            }
            x.extend_from_slice(&self.embed[t * d..(t + 1) * d]);
        }
        for (l, layer) in self.layers.iter().enumerate() {
            layer.forward(
                &mut x,
                start,
                &self.rope,
                self.cfg.rms_eps,
                &mut cache.k[l],
                &mut cache.v[l],
            );
        }
        rms_norm(&mut x, &self.norm, d, self.cfg.rms_eps);
        let head = self.lm_head.as_deref().unwrap_or(&self.embed);
        Ok(linear(&x, head, None, d, vocab))
    }
}
