//! Paged attention for LLM inference: causal, grouped-query attention of a
//! block of query rows against a [`PagedKvCache`], for decode (one row) and
//! prefill (many rows).
//!
//! The softmax is online (FlashAttention-style): the kernel walks the
//! visible keys page by page, keeps a running max `m`, a running sum `l`
//! and an unnormalized output accumulator, and rescales both by `e^(m_old -
//! m_new)` whenever a page raises the max; the full score row is never
//! materialized. Only a page's scores (`page_size` floats) live at a time.
//! Those, the per-row statistics and the split-K partial states are an
//! [`AttnScratch`] the caller keeps between calls
//! ([`paged_attention_scratch`]), so a warmed call allocates nothing; the
//! threads are forked with `rayon::join` inside the pool (stack-held jobs).
//!
//! Shapes: `q` and `out` are `[q_rows, n_q_heads, head_dim]` (token-major, as
//! a QKV projection writes them); query head `h` reads KV head
//! `h / (n_q_heads / n_kv_heads)` (GQA; MHA when the ratio is 1). Query row
//! `i` sits at position `pos0 + i` and sees KV positions `0..=pos0 + i`.
//! Scores are `q·k · scale`, `scale = 1/√head_dim` unless overridden.
//!
//! Optional attention probabilities (`[n_q_heads, q_rows, kv_len]`, zero at
//! masked positions; the output token-pruning methods read) are **slower**:
//! once each row's final max and sum are known, a second pass recomputes
//! every score to normalize it, so the keys are read twice.
//!
//! The unit of work is one query row's group of heads that share a KV
//! head: the kernels take the whole group, so each key or value vector is
//! loaded (and widened) once for several heads, and the next page is
//! prefetched while one is computed. Threads split the
//! `q_rows × n_kv_heads` units; with `kv_block > 0` each unit's keys are
//! also split into blocks of `kv_block` positions computed independently,
//! and the partial `(max, sum, acc)` states are merged at the end (split-K
//! "flash decoding"), which keeps all cores busy in decode when there are
//! fewer KV heads than threads.
//!
//! Variants: scalar (f32 dot products and axpys, one head at a time, the
//! reference the SIMD variants are held to), AVX2, AVX-512 and NEON, one
//! body for f32, f16 and Q8_0 pages (f16 widened and Q8_0 values
//! dequantized in registers, `d · qs` per vector), and AVX-VNNI, AVX-512
//! VNNI and NEON dotprod, which differ only in scoring Q8_0 keys with their
//! int8 dot product. Q8_0 keys are scored on every variant against the
//! query quantized to Q8_0 blocks (once per call, `query.rs`): per block an
//! exact integer dot product, then the two scales, as llama.cpp does.
//! [`dense_reference`] is the independent oracle the tests compare everything with: plain f64
//! attention over contiguous K/V.

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod body;
mod cache;
mod query;
pub mod scalar;
mod segments;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "aarch64")]
mod neon;

pub use cache::{PAGE_SIZES, PagedKvCache, SeqId, default_page_size};
pub use scalar::{dense_q8_value_bound, dense_reference};
pub use segments::{SEG_PAGE, SegScratch, SegShape, segment_attention, segments_reference};

use crate::eltwise::resolve_isa_of;
use crate::error::check_len;
use crate::pool::pool;
use crate::quant::QK;
use crate::tune::{CpuCaps, Tunable};
use crate::{Isa, KernelError, Result};
use cache::{Q8Col, Store};
use half::f16;
use query::QBlock;
use serde::{Deserialize, Serialize};

/// The dtype KV pages are stored in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum KvDtype {
    F32,
    F16,
    /// llama.cpp's Q8_0: per 32 values an f16 scale and 32 int8
    /// (`head_dim` must be a multiple of 32).
    Q8_0,
}

impl KvDtype {
    pub const ALL: [KvDtype; 3] = [KvDtype::F32, KvDtype::F16, KvDtype::Q8_0];

    pub fn name(self) -> &'static str {
        match self {
            KvDtype::F32 => "f32",
            KvDtype::F16 => "f16",
            KvDtype::Q8_0 => "q8_0",
        }
    }

    /// Elements of the K pool per token of one head. Every K page holds
    /// its keys by columns (`head_dim` rows of `page_size` values: element
    /// `d` of key `t` at `d · page_size + t`), V pages by rows. By columns,
    /// the score kernels put keys in the vector lanes: each lane's dot
    /// product is summed in one register and one key vector serves every
    /// head of the group, where row-wise dot products of `head_dim` 64
    /// spent about as much on horizontal sums as on the multiply-adds.
    /// Q8_0 keys keep llama.cpp's blocks (a scale per 32 values of a key),
    /// split into an int8 part and a scale part ([`cache::Q8Col`]).
    pub(crate) fn k_row_elems(self, head_dim: usize) -> usize {
        match self {
            KvDtype::Q8_0 => cache::Q8Col::per_key(head_dim),
            _ => head_dim,
        }
    }

    /// The query values the score kernels multiply with keys of this
    /// dtype, for a reference computation: `q` itself, or for Q8_0 each
    /// 32 values quantized to a Q8_0 block and back (the scale kept as f32).
    pub fn query_as_scored(self, q: &[f32]) -> Vec<f32> {
        match self {
            KvDtype::Q8_0 => q
                .chunks_exact(QK)
                .flat_map(|x| {
                    let b = QBlock::quantize(x);
                    b.qs.map(|v| b.d * v as f32)
                })
                .collect(),
            _ => q.to_vec(),
        }
    }

    /// Elements of the V pool per token row of one head (Q8_0: the same
    /// blocks as a key's, in quads of positions, [`cache::Q8Col`]).
    pub(crate) fn v_row_elems(self, head_dim: usize) -> usize {
        self.k_row_elems(head_dim)
    }
}

/// Problem shape of one attention call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttnShape {
    pub n_q_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub q_rows: usize,
    pub kv_len: usize,
}

/// The query block of one call: `q_rows` rows of `n_q_heads` heads, the
/// first at position `pos0`, and the score scale.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttnQuery {
    pub n_q_heads: usize,
    pub q_rows: usize,
    pub pos0: usize,
    pub scale: f32,
}

impl AttnQuery {
    /// A query block with the usual scale `1/√head_dim`.
    pub fn new(n_q_heads: usize, q_rows: usize, pos0: usize, head_dim: usize) -> Self {
        AttnQuery {
            n_q_heads,
            q_rows,
            pos0,
            scale: 1.0 / (head_dim.max(1) as f32).sqrt(),
        }
    }

    /// The same block with another score scale.
    pub fn with_scale(self, scale: f32) -> Self {
        AttnQuery { scale, ..self }
    }
}

/// Tunable parameters.
///
/// - `threads` (`1..=256`): workers over (row, head) pairs and KV blocks.
/// - `kv_block`: `0` for no KV split, else the KV positions per split-K
///   block (`16..=1<<20`); blocks need not align with pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttnParams {
    pub threads: usize,
    pub kv_block: usize,
}

/// Below this many multiply-adds (`2 · pairs · kv · head_dim`) one thread wins.
const PAR_MIN_FLOPS: usize = 1 << 20;
/// Smallest split-K block the default picks: shorter blocks spend more on
/// the merge than they save.
const MIN_DEFAULT_BLOCK: usize = 256;
const MIN_KV_BLOCK: usize = 16;
const MAX_KV_BLOCK: usize = 1 << 20;

impl Tunable for AttnParams {
    type Shape = AttnShape;

    /// One thread for small problems, else one per core. KV split only when
    /// the units (row × KV head) cannot give each thread 4 of them and the
    /// context is long: then blocks of ≥ 256 positions, rounded to 64,
    /// enough for about 4 tasks per thread. (K/V of one head over a block,
    /// 256 × 128 × 2 B × 2 = 128 KiB in f16, stays within L2.)
    fn default_for(shape: &AttnShape, cpu: &CpuCaps) -> Self {
        let pairs = shape.q_rows * shape.n_q_heads;
        let units = shape.q_rows * shape.n_kv_heads;
        let work = 2 * pairs * shape.kv_len * shape.head_dim;
        let threads = if work < PAR_MIN_FLOPS {
            1
        } else {
            cpu.cores.clamp(1, 256)
        };
        let mut kv_block = 0;
        if threads > 1 && units < 4 * threads && shape.kv_len >= 2 * MIN_DEFAULT_BLOCK {
            let blocks = (4 * threads).div_ceil(units.max(1));
            kv_block = shape
                .kv_len
                .div_ceil(blocks)
                .next_multiple_of(64)
                .clamp(MIN_DEFAULT_BLOCK, MAX_KV_BLOCK);
        }
        AttnParams { threads, kv_block }
    }

    fn candidates(shape: &AttnShape, cpu: &CpuCaps) -> Vec<Self> {
        let mut v = vec![Self::default_for(shape, cpu)];
        let mut threads = vec![1];
        let mut t = 2;
        while t < cpu.cores {
            threads.push(t);
            t *= 2;
        }
        if cpu.cores > 1 {
            threads.push(cpu.cores.min(256));
        }
        for &threads in &threads {
            for kv_block in [0, 256, 512, 1024, 2048, 4096] {
                if kv_block != 0 && kv_block >= shape.kv_len {
                    continue;
                }
                let p = AttnParams { threads, kv_block };
                if !v.contains(&p) {
                    v.push(p);
                }
            }
        }
        v
    }

    fn validate(&self) -> Result<()> {
        crate::pool::check_threads("paged_attention", self.threads)?;
        if self.threads > 256 {
            return Err(KernelError::InvalidParams {
                op: "paged_attention",
                reason: format!("threads = {} exceeds 256", self.threads),
            });
        }
        if self.kv_block != 0 && !(MIN_KV_BLOCK..=MAX_KV_BLOCK).contains(&self.kv_block) {
            return Err(KernelError::InvalidParams {
                op: "paged_attention",
                reason: format!(
                    "kv_block = {} must be 0 (no split) or in {MIN_KV_BLOCK}..={MAX_KV_BLOCK}",
                    self.kv_block
                ),
            });
        }
        Ok(())
    }
}

/// The ISA variants this family implements: the element-wise family's,
/// and those with an int8 dot-product instruction, which score Q8_0 K
/// pages with it (f32 and f16 pages run their base ISA's kernels there).
pub const ISAS: [Isa; 7] = [
    Isa::Scalar,
    Isa::Avx2,
    Isa::AvxVnni,
    Isa::Avx512,
    Isa::Avx512Vnni,
    Isa::Neon,
    Isa::NeonDotprod,
];

/// The best variant of [`ISAS`] the running CPU supports.
pub fn best_isa() -> Isa {
    Isa::best_of(&ISAS)
}

/// The variants of [`ISAS`] the running CPU can execute, scalar first.
pub fn available_isas() -> Vec<Isa> {
    ISAS.iter().copied().filter(|i| i.is_available()).collect()
}

/// Whether variant `isa` multiplies Q8_0 values by int8 weights: the ISAs
/// with an int8 dot product round each value weight (probability times the
/// value's scale) to a Q8_0 block of 32 positions, which moves an output
/// by at most [`dense_q8_value_bound`]; the others multiply f32 weights.
pub fn rounds_q8_value_weights(isa: Isa) -> bool {
    matches!(isa, Isa::AvxVnni | Isa::Avx512Vnni | Isa::NeonDotprod)
}

/// Checks that a forced variant exists in [`ISAS`] and can run here.
pub(crate) fn resolve_isa(op: &'static str, isa: Isa) -> Result<Isa> {
    resolve_isa_of(op, isa, &ISAS)
}

/// Scores of the `g` query heads of a group (`q`, in the K page type's
/// query form, [`PageElem::Q`]) against the `n = out.len() / g` keys
/// `off..off + n` of `page` (one KV head's page of `ps` keys, by columns,
/// [`KvDtype::k_row_elems`]), times `scale`: `out[j · n + t]`. `ahead` (memory the caller reads next, or
/// empty; the page's value rows) is a prefetch hint the SIMD variants
/// request along the way.
///
/// # Safety
/// The variant's ISA is available; `page` holds one page and `off + n <= ps`.
type ScoresFn<Q, K, T> = unsafe fn(
    q: &[Q],
    hd: usize,
    page: &[K],
    ps: usize,
    off: usize,
    ahead: &[T],
    scale: f32,
    out: &mut [f32],
);
/// `acc_j += Σ_t p[j · n + t] · v_{off + t}` for the `g = acc.len() / hd`
/// heads' accumulators over the `n = p.len() / g` value rows `off..off +
/// n` of `page`, one KV head's V page of `ps` positions; `ahead` as for
/// [`ScoresFn`] (the next K page).
///
/// # Safety
/// As [`ScoresFn`], with `hd` values per row.
type AccumFn<T, K> = unsafe fn(
    acc: &mut [f32],
    hd: usize,
    p: &[f32],
    page: &[T],
    ps: usize,
    off: usize,
    ahead: &[K],
);

/// The largest of a page's scores.
///
/// # Safety
/// The variant's ISA is available.
type MaxFn = unsafe fn(s: &[f32]) -> f32;

/// `s[j] = e^(s[j] - m)` in place; returns `Σ s[j]`.
///
/// # Safety
/// The variant's ISA is available.
type ExpSumFn = unsafe fn(s: &mut [f32], m: f32) -> f32;

/// One variant's row kernels for one page dtype.
#[derive(Clone, Copy)]
struct Ops<T: PageElem> {
    scores: ScoresFn<T::Q, T::K, T>,
    accum: AccumFn<T, T::K>,
    max: MaxFn,
    exp_sum: ExpSumFn,
}

/// A page dtype: its V page element, its K page element, the form its
/// score kernels take the queries in, and its kernels per ISA.
trait PageElem: Copy + Send + Sync + 'static {
    type K: Copy + Send + Sync + 'static;
    /// f32 for f32 and f16 pages; [`QBlock`]s for Q8_0, whose scores are
    /// int8 dot products.
    type Q: Copy + Send + Sync + 'static;
    /// Elements of `Q` per query head of `hd` values.
    fn q_per_head(hd: usize) -> usize;
    /// The query block `q` in the form `Q`, in `buf` if it is converted.
    fn query<'a>(q: &'a [f32], buf: &'a mut Vec<QBlock>) -> &'a [Self::Q];
    /// The part of a V page (`row` elements per position) that positions
    /// `off..off + n` use, for the prefetch hint of the scores: their rows,
    /// or the whole page where positions share the page's words.
    fn v_used(page: &[Self], _row: usize, _off: usize, _n: usize) -> &[Self] {
        page
    }
    fn ops(isa: Isa) -> Ops<Self>;
    fn v_pool(store: &Store) -> &[Self];
    fn k_pool(store: &Store) -> &[Self::K];
}

/// The float pages take the query as it is.
macro_rules! float_query {
    () => {
        type Q = f32;
        fn q_per_head(hd: usize) -> usize {
            hd
        }
        fn query<'a>(q: &'a [f32], _: &'a mut Vec<QBlock>) -> &'a [f32] {
            q
        }
        fn v_used(page: &[Self], row: usize, off: usize, n: usize) -> &[Self] {
            &page[off * row..(off + n) * row]
        }
    };
}

/// `$scores_dot` and `$accum_dot` are the kernels of the ISAs with an
/// int8 dot product (the same as `$scores` and `$accum` for float pages).
macro_rules! page_elem {
    ($t:ty, $k:ty, $vstore:ident, $kstore:ident, $scores:ident, $scores_dot:ident, $accum:ident, $accum_dot:ident, { $($query:tt)* }) => {
        impl PageElem for $t {
            type K = $k;
            $($query)*
            fn ops(isa: Isa) -> Ops<Self> {
                match isa {
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx2 | Isa::AvxVnni => Ops {
                        scores: if isa == Isa::AvxVnni { avx2::$scores_dot } else { avx2::$scores },
                        accum: if isa == Isa::AvxVnni { avx2::$accum_dot } else { avx2::$accum },
                        max: avx2::max,
                        exp_sum: avx2::exp_sum,
                    },
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx512 | Isa::Avx512Vnni => Ops {
                        scores: if isa == Isa::Avx512Vnni { avx512::$scores_dot } else { avx512::$scores },
                        accum: if isa == Isa::Avx512Vnni { avx512::$accum_dot } else { avx512::$accum },
                        max: avx512::max,
                        exp_sum: avx512::exp_sum,
                    },
                    #[cfg(target_arch = "aarch64")]
                    Isa::Neon | Isa::NeonDotprod => Ops {
                        scores: if isa == Isa::NeonDotprod { neon::$scores_dot } else { neon::$scores },
                        accum: if isa == Isa::NeonDotprod { neon::$accum_dot } else { neon::$accum },
                        max: neon::max,
                        exp_sum: neon::exp_sum,
                    },
                    _ => Ops {
                        scores: scalar::$scores,
                        accum: scalar::$accum,
                        max: scalar::max,
                        exp_sum: scalar::exp_sum,
                    },
                }
            }
            fn v_pool(store: &Store) -> &[Self] {
                match store {
                    Store::$vstore(v) => v,
                    _ => unreachable!("the dtype selects the store"),
                }
            }
            fn k_pool(store: &Store) -> &[$k] {
                match store {
                    Store::$kstore(k) => k,
                    _ => unreachable!("the dtype selects the store"),
                }
            }
        }
    };
}

page_elem!(
    f32,
    f32,
    F32,
    F32,
    scores_f32,
    scores_f32,
    accum_f32,
    accum_f32,
    {
        float_query!();
    }
);
page_elem!(
    f16,
    f16,
    F16,
    F16,
    scores_f16,
    scores_f16,
    accum_f16,
    accum_f16,
    {
        float_query!();
    }
);
page_elem!(
    Q8Col,
    Q8Col,
    Q8Cols,
    Q8Cols,
    scores_q8,
    scores_q8_dot,
    accum_q8,
    accum_q8_dot,
    {
        type Q = QBlock;
        fn q_per_head(hd: usize) -> usize {
            hd / QK
        }
        fn query<'a>(q: &'a [f32], buf: &'a mut Vec<QBlock>) -> &'a [QBlock] {
            query::quantize_query(q, buf)
        }
    }
);

/// Everything the per-pair loop needs, borrowed from the cache and the call.
struct Ctx<'a, T: PageElem> {
    k: &'a [T::K],
    v: &'a [T],
    pages: &'a [u32],
    ops: Ops<T>,
    n_kv: usize,
    ps: usize,
    /// Elements per token of one head in the K and in the V pool.
    k_row: usize,
    v_row: usize,
    hd: usize,
    group: usize,
    n_q_heads: usize,
    q_rows: usize,
    pos0: usize,
    scale: f32,
    /// The query block in the score kernels' form, `qh` elements per head.
    q: &'a [T::Q],
    qh: usize,
}

impl<T: PageElem> Ctx<'_, T> {
    /// The whole of KV head `kvh`'s logical V page `page` (`ps · v_row`
    /// elements).
    #[inline]
    fn v_page(&self, page: usize, kvh: usize) -> &[T] {
        let len = self.ps * self.v_row;
        let base = (self.pages[page] as usize * self.n_kv + kvh) * len;
        &self.v[base..base + len]
    }

    /// The whole of KV head `kvh`'s logical K page `page` (`ps · k_row`
    /// elements).
    #[inline]
    fn k_page(&self, page: usize, kvh: usize) -> &[T::K] {
        let len = self.ps * self.k_row;
        let base = (self.pages[page] as usize * self.n_kv + kvh) * len;
        &self.k[base..base + len]
    }

    fn q_of(&self, i: usize, h: usize) -> &[T::Q] {
        let o = (i * self.n_q_heads + h) * self.qh;
        &self.q[o..o + self.qh]
    }

    /// The `group` query heads of row `i` that share KV head `kvh`.
    fn q_group(&self, i: usize, kvh: usize) -> &[T::Q] {
        let o = (i * self.n_q_heads + kvh * self.group) * self.qh;
        &self.q[o..o + self.group * self.qh]
    }

    /// Online softmax of the `group` query heads of row `i` that share KV
    /// head `kvh`, over KV positions `t0..t1`. Each page's keys and values
    /// are read once for the whole group: the kernels take all its heads.
    /// `scratch` holds `group · page_size` scores. Leaves head `j`'s
    /// unnormalized `Σ e^(s - m) v` in `accs[j·hd..]` and its `(m, l)` in
    /// `ml[2j..2j + 2]`.
    ///
    /// The K/V stream is prefetched (the kernels take it as `ahead`): a
    /// page of one head is contiguous, but the next lies a whole page of
    /// the other heads away (or elsewhere, as the page table has it), which
    /// the hardware prefetcher does not follow, and at long contexts the
    /// stream comes from DRAM. The scores of a page request its values, and
    /// its value pass the next page's keys, so the requests are spread over
    /// all of the arithmetic: issued faster than the core's few dozen miss
    /// slots complete them, they would stall the loads behind them and
    /// serialize memory and arithmetic.
    #[allow(clippy::too_many_arguments)]
    fn attend_group(
        &self,
        i: usize,
        kvh: usize,
        t0: usize,
        t1: usize,
        scratch: &mut [f32],
        accs: &mut [f32],
        ml: &mut [f32],
    ) {
        let hd = self.hd;
        let q = self.q_group(i, kvh);
        accs.fill(0.0);
        for st in ml.chunks_exact_mut(2) {
            st[0] = f32::NEG_INFINITY;
            st[1] = 0.0;
        }
        let mut t = t0;
        while t < t1 {
            let (page, off) = (t / self.ps, t % self.ps);
            let n = (self.ps - off).min(t1 - t);
            let (kp, vp) = (self.k_page(page, kvh), self.v_page(page, kvh));
            let next = t + n;
            let nk: &[T::K] = if next < t1 {
                self.k_page(next / self.ps, kvh)
            } else {
                &[]
            };
            let s = &mut scratch[..self.group * n];
            let ahead = T::v_used(vp, self.v_row, off, n);
            // SAFETY: the ISA was resolved by the entry point; `page` is a
            // whole page and off + n <= ps, q holds group heads of hd
            // values, s group rows of n scores.
            unsafe { (self.ops.scores)(q, hd, kp, self.ps, off, ahead, self.scale, s) };
            for ((sj, acc), st) in s
                .chunks_exact_mut(n)
                .zip(accs.chunks_exact_mut(hd))
                .zip(ml.chunks_exact_mut(2))
            {
                let (mut m, mut l) = (st[0], st[1]);
                // SAFETY: as above.
                let cmax = unsafe { (self.ops.max)(sj) };
                if cmax > m {
                    // e^(m_old - m_new) < 1; 0 on the first page (m_old = -∞),
                    // where acc is still all zero.
                    let c = (m - cmax).exp();
                    l *= c;
                    if m != f32::NEG_INFINITY {
                        acc.iter_mut().for_each(|a| *a *= c);
                    }
                    m = cmax;
                }
                // SAFETY: as above.
                l += unsafe { (self.ops.exp_sum)(sj, m) };
                st[0] = m;
                st[1] = l;
            }
            // SAFETY: as above; accs holds group heads of hd values.
            unsafe { (self.ops.accum)(accs, hd, s, vp, self.ps, off, nk) };
            t = next;
        }
    }

    /// Probabilities of one query row over all `kv_len` positions (zeros
    /// after the visible ones), given its final max and sum.
    fn probs_row(&self, q: &[T::Q], kvh: usize, vis: usize, m: f32, l: f32, out: &mut [f32]) {
        let inv = if l > 0.0 { 1.0 / l } else { 0.0 };
        let mut t = 0;
        while t < vis {
            let (page, off) = (t / self.ps, t % self.ps);
            let n = (self.ps - off).min(vis - t);
            let s = &mut out[t..t + n];
            // SAFETY: as in `attend_group`.
            unsafe {
                (self.ops.scores)(
                    q,
                    self.hd,
                    self.k_page(page, kvh),
                    self.ps,
                    off,
                    &[],
                    self.scale,
                    s,
                );
                (self.ops.exp_sum)(s, m);
            }
            s.iter_mut().for_each(|x| *x *= inv);
            t += n;
        }
        out[vis..].fill(0.0);
    }
}

/// Reusable buffers of the attention kernel: the per-row softmax
/// statistics, one page of scores per head of a group per worker, and the split-K partial
/// states. The caller owns one (e.g. next to its KV cache) and passes it to
/// [`paged_attention_scratch`]; buffers grow on demand and are never shrunk,
/// so once a call of a given shape has run, calls of that shape or smaller
/// allocate nothing (a decode step with the KV split allocates again only
/// when the context outgrows the blocks seen so far, geometrically).
#[derive(Debug, Clone, Default)]
pub struct AttnScratch {
    /// `(m, l)` per (row, head).
    stats: Vec<f32>,
    /// `group · page_size` scores per worker.
    scores: Vec<f32>,
    /// Split-K `[m, l per head][acc per head]` per (unit, block).
    part: Vec<f32>,
    /// The quantized query block (Q8_0 pages).
    query: Vec<QBlock>,
}

impl AttnScratch {
    /// An empty scratch; the first call sizes it.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes currently held.
    pub fn bytes(&self) -> usize {
        4 * (self.stats.capacity() + self.scores.capacity() + self.part.capacity())
            + self.query.capacity() * size_of::<QBlock>()
    }
}

/// `v[..len]`, growing `v` first if it is shorter (values are stale: every
/// user overwrites before reading).
fn grown(v: &mut Vec<f32>, len: usize) -> &mut [f32] {
    if v.len() < len {
        v.resize(len, 0.0);
    }
    &mut v[..len]
}

/// Runs `f(units, a_block, b_block, scores)` over `0..n` units split into
/// at most `threads` contiguous ranges (as [`crate::pool::split_range`]), with `a` and
/// `b` split to match (`a_w` and `b_w` elements per unit) and each range
/// given its own `ps` floats of `scores` (`threads · ps` long), on exactly
/// `threads` workers (inline for 1).
///
/// The ranges are forked with `rayon::join` inside the pool rather than
/// spawned into a scope: a join keeps its jobs on the stack, where a scope
/// boxes every spawn, so a warmed call allocates nothing.
#[allow(clippy::too_many_arguments)]
fn par_units<A: Send, B: Send, F>(
    n: usize,
    threads: usize,
    a: &mut [A],
    a_w: usize,
    b: &mut [B],
    b_w: usize,
    scores: &mut [f32],
    ps: usize,
    f: F,
) where
    F: Fn(std::ops::Range<usize>, &mut [A], &mut [B], &mut [f32]) + Sync,
{
    if threads <= 1 || n <= 1 {
        f(0..n, a, b, &mut scores[..ps]);
        return;
    }
    // split_range's ranges: `per` units each, the last takes what is left.
    let per = n.div_ceil(threads);
    let parts = n.div_ceil(per);
    let job = Fork {
        per,
        a_w,
        b_w,
        ps,
        f: &f,
    };
    pool(threads).install(|| job.run(0..n, parts, a, b, &mut scores[..parts * ps]));
}

/// The recursive halving of [`par_units`].
struct Fork<'f, F> {
    per: usize,
    a_w: usize,
    b_w: usize,
    ps: usize,
    f: &'f F,
}

impl<F> Fork<'_, F> {
    fn run<A: Send, B: Send>(
        &self,
        r: std::ops::Range<usize>,
        parts: usize,
        a: &mut [A],
        b: &mut [B],
        scores: &mut [f32],
    ) where
        F: Fn(std::ops::Range<usize>, &mut [A], &mut [B], &mut [f32]) + Sync,
    {
        if parts <= 1 {
            (self.f)(r, a, b, scores);
            return;
        }
        let left = parts / 2;
        let mid = r.start + left * self.per;
        let (al, ar) = a.split_at_mut((mid - r.start) * self.a_w);
        let (bl, br) = b.split_at_mut((mid - r.start) * self.b_w);
        let (sl, sr) = scores.split_at_mut(left * self.ps);
        rayon::join(
            || self.run(r.start..mid, left, al, bl, sl),
            || self.run(mid..r.end, parts - left, ar, br, sr),
        );
    }
}

/// The body of [`paged_attention_scratch`] for one page dtype, after every check.
#[allow(clippy::too_many_arguments)]
fn run<T: PageElem>(
    cache: &PagedKvCache,
    pages: &[u32],
    layer: usize,
    query: &AttnQuery,
    kv_len: usize,
    q: &[f32],
    out: &mut [f32],
    probs: Option<&mut [f32]>,
    isa: Isa,
    params: &AttnParams,
    scratch: &mut AttnScratch,
) {
    let (k_row, v_row) = (cache.k_row_elems(), cache.v_row_elems());
    let (kl, vl) = (cache.layer_elems(k_row), cache.layer_elems(v_row));
    let AttnScratch {
        stats,
        scores,
        part,
        query: qbuf,
    } = scratch;
    let ctx = Ctx::<T> {
        k: &T::k_pool(&cache.k)[layer * kl..(layer + 1) * kl],
        v: &T::v_pool(&cache.v)[layer * vl..(layer + 1) * vl],
        pages,
        ops: T::ops(isa),
        n_kv: cache.n_kv_heads(),
        ps: cache.page_size(),
        k_row,
        v_row,
        hd: cache.head_dim(),
        group: query.n_q_heads / cache.n_kv_heads(),
        n_q_heads: query.n_q_heads,
        q_rows: query.q_rows,
        pos0: query.pos0,
        scale: query.scale,
        q: T::query(q, qbuf),
        qh: T::q_per_head(cache.head_dim()),
    };
    let (hd, ps) = (ctx.hd, ctx.ps);
    let pairs = query.q_rows * query.n_q_heads;
    let threads = params.threads;
    // (m, l) per pair, for the probabilities pass.
    let stats = grown(stats, 2 * pairs);
    let sw = ctx.group * ps;
    let scores = grown(scores, threads * sw);
    let blocks = if params.kv_block == 0 {
        1
    } else {
        kv_len.div_ceil(params.kv_block)
    };
    // A unit is one row's group of query heads sharing a KV head; its
    // heads are adjacent in `out`, so a unit owns `group · hd` outputs.
    let g = ctx.group;
    let units = query.q_rows * ctx.n_kv;
    if blocks <= 1 {
        par_units(
            units,
            threads,
            out,
            g * hd,
            stats,
            2 * g,
            scores,
            sw,
            |r, out, st, scratch| {
                for (j, u) in r.enumerate() {
                    let (i, kvh) = (u / ctx.n_kv, u % ctx.n_kv);
                    let accs = &mut out[j * g * hd..(j + 1) * g * hd];
                    let ml = &mut st[j * 2 * g..(j + 1) * 2 * g];
                    ctx.attend_group(i, kvh, 0, ctx.pos0 + i + 1, scratch, accs, ml);
                    for (acc, st) in accs.chunks_exact_mut(hd).zip(ml.chunks_exact(2)) {
                        let inv = 1.0 / st[1];
                        acc.iter_mut().for_each(|a| *a *= inv);
                    }
                }
            },
        );
    } else {
        // Split-K: partial states per (unit, block) laid out as
        // [m, l per head][acc per head], then a merge per (row, head).
        let kb = params.kv_block;
        let w = g * (hd + 2);
        let part = grown(part, units * blocks * w);
        par_units(
            units * blocks,
            threads,
            part,
            w,
            &mut [] as &mut [u8],
            0,
            scores,
            sw,
            |r, part, _, scratch| {
                for (j, task) in r.enumerate() {
                    let (u, b) = (task / blocks, task % blocks);
                    let (i, kvh) = (u / ctx.n_kv, u % ctx.n_kv);
                    let vis = ctx.pos0 + i + 1;
                    let (t0, t1) = ((b * kb).min(vis), ((b + 1) * kb).min(vis));
                    let (ml, accs) = part[j * w..(j + 1) * w].split_at_mut(2 * g);
                    ctx.attend_group(i, kvh, t0, t1, scratch, accs, ml);
                }
            },
        );
        let part = &*part;
        par_units(
            pairs,
            threads,
            out,
            hd,
            stats,
            2,
            scores,
            sw,
            |r, out, st, _| {
                for (j, pair) in r.enumerate() {
                    let (u, gj) = (pair / g, pair % g);
                    let state = |b: usize| {
                        let base = (u * blocks + b) * w;
                        let acc = base + 2 * g + gj * hd;
                        (
                            part[base + 2 * gj],
                            part[base + 2 * gj + 1],
                            &part[acc..acc + hd],
                        )
                    };
                    let m = (0..blocks).fold(f32::NEG_INFINITY, |a, b| a.max(state(b).0));
                    let acc = &mut out[j * hd..(j + 1) * hd];
                    acc.fill(0.0);
                    let mut l = 0.0f32;
                    for b in 0..blocks {
                        let (mb, lb, ab) = state(b);
                        // Empty blocks (past the causal limit) have l = 0.
                        if lb == 0.0 {
                            continue;
                        }
                        let c = (mb - m).exp();
                        l += lb * c;
                        for (a, &x) in acc.iter_mut().zip(ab) {
                            *a += c * x;
                        }
                    }
                    let inv = 1.0 / l;
                    acc.iter_mut().for_each(|a| *a *= inv);
                    st[2 * j] = m;
                    st[2 * j + 1] = l;
                }
            },
        );
    }
    if let Some(probs) = probs {
        // Rows of probs are ordered (head, row); stats are ordered (row, head).
        let stats = &*stats;
        par_units(
            pairs,
            threads,
            probs,
            kv_len,
            &mut [] as &mut [u8],
            0,
            scores,
            sw,
            |r, pr, _, _| {
                for (j, u) in r.enumerate() {
                    let (h, i) = (u / ctx.q_rows, u % ctx.q_rows);
                    let s = 2 * (i * ctx.n_q_heads + h);
                    let row = &mut pr[j * kv_len..(j + 1) * kv_len];
                    ctx.probs_row(
                        ctx.q_of(i, h),
                        h / ctx.group,
                        ctx.pos0 + i + 1,
                        stats[s],
                        stats[s + 1],
                        row,
                    );
                }
            },
        );
    }
}

const OP: &str = "paged_attention";

/// Checks the shape of a call against the cache and returns `kv_len`.
fn check(
    cache: &PagedKvCache,
    seq: SeqId,
    layer: usize,
    query: &AttnQuery,
    q: &[f32],
    out: &[f32],
    probs: Option<&[f32]>,
) -> Result<usize> {
    let kv_len = cache.layer_len(seq, layer)?;
    check_shape(
        &AttnShape {
            n_q_heads: query.n_q_heads,
            n_kv_heads: cache.n_kv_heads(),
            head_dim: cache.head_dim(),
            q_rows: query.q_rows,
            kv_len,
        },
        query.pos0,
        q.len(),
        out.len(),
        probs.map(<[f32]>::len),
    )?;
    Ok(kv_len)
}

/// Head counts and size every attention kernel needs: at least one of
/// each, whole GQA groups.
pub(crate) fn check_heads(op: &'static str, nq: usize, nkv: usize, hd: usize) -> Result<()> {
    let bad = |reason: String| Err(KernelError::InvalidShape { op, reason });
    if nq == 0 || nkv == 0 || hd == 0 {
        return bad(format!(
            "n_q_heads = {nq}, n_kv_heads = {nkv}, head_dim = {hd}: all must be at least 1"
        ));
    }
    if !nq.is_multiple_of(nkv) {
        return bad(format!(
            "n_q_heads = {nq} is not a multiple of n_kv_heads = {nkv}; GQA needs whole groups"
        ));
    }
    Ok(())
}

/// The shape rules shared by the paged kernel and [`dense_reference`].
pub(crate) fn check_shape(
    s: &AttnShape,
    pos0: usize,
    q_len: usize,
    out_len: usize,
    probs_len: Option<usize>,
) -> Result<()> {
    let bad = |reason: String| Err(KernelError::InvalidShape { op: OP, reason });
    check_heads(OP, s.n_q_heads, s.n_kv_heads, s.head_dim)?;
    if pos0.checked_add(s.q_rows).is_none_or(|e| e > s.kv_len) {
        return bad(format!(
            "pos0 + q_rows = {pos0} + {} exceeds kv_len = {}; append the query tokens' keys and values first",
            s.q_rows, s.kv_len
        ));
    }
    let too_big = || KernelError::InvalidShape {
        op: OP,
        reason: "the buffer sizes overflow usize".into(),
    };
    let qn = s
        .q_rows
        .checked_mul(s.n_q_heads)
        .and_then(|x| x.checked_mul(s.head_dim))
        .ok_or_else(too_big)?;
    check_len(OP, "q", q_len, qn)?;
    check_len(OP, "out", out_len, qn)?;
    if let Some(p) = probs_len {
        let pn = s
            .q_rows
            .checked_mul(s.n_q_heads)
            .and_then(|x| x.checked_mul(s.kv_len))
            .ok_or_else(too_big)?;
        check_len(OP, "probs", p, pn)?;
    }
    Ok(())
}

/// Attention of `q` (`[q_rows, n_q_heads, head_dim]`) against `layer` of
/// `seq`, written to `out` (same shape), with the best variant and default
/// parameters; `probs`, if given, receives the attention probabilities
/// `[n_q_heads, q_rows, kv_len]` (slower: a second pass over the keys).
/// The query tokens' own keys and values must already be appended.
pub fn paged_attention(
    cache: &PagedKvCache,
    seq: SeqId,
    layer: usize,
    query: &AttnQuery,
    q: &[f32],
    out: &mut [f32],
    probs: Option<&mut [f32]>,
) -> Result<()> {
    let shape = AttnShape {
        n_q_heads: query.n_q_heads,
        n_kv_heads: cache.n_kv_heads(),
        head_dim: cache.head_dim(),
        q_rows: query.q_rows,
        kv_len: cache.layer_len(seq, layer)?,
    };
    let p = AttnParams::default_for(&shape, &CpuCaps::default());
    paged_attention_with(cache, seq, layer, query, q, out, probs, best_isa(), &p)
}

/// [`paged_attention`] with a forced variant and parameters. Its buffers
/// are allocated for the call; [`paged_attention_scratch`] reuses them.
#[allow(clippy::too_many_arguments)]
pub fn paged_attention_with(
    cache: &PagedKvCache,
    seq: SeqId,
    layer: usize,
    query: &AttnQuery,
    q: &[f32],
    out: &mut [f32],
    probs: Option<&mut [f32]>,
    isa: Isa,
    params: &AttnParams,
) -> Result<()> {
    let mut scratch = AttnScratch::new();
    paged_attention_scratch(
        cache,
        seq,
        layer,
        query,
        q,
        out,
        probs,
        isa,
        params,
        &mut scratch,
    )
}

/// [`paged_attention_with`] on the caller's reusable buffers: once
/// `scratch` has served a call of this shape, the call allocates nothing
/// (decode and prefill, with any thread count and KV split).
#[allow(clippy::too_many_arguments)]
pub fn paged_attention_scratch(
    cache: &PagedKvCache,
    seq: SeqId,
    layer: usize,
    query: &AttnQuery,
    q: &[f32],
    out: &mut [f32],
    probs: Option<&mut [f32]>,
    isa: Isa,
    params: &AttnParams,
    scratch: &mut AttnScratch,
) -> Result<()> {
    let kv_len = check(cache, seq, layer, query, q, out, probs.as_deref())?;
    let isa = resolve_isa(OP, isa)?;
    params.validate()?;
    if query.q_rows == 0 {
        return Ok(());
    }
    let pages = cache.page_table(seq)?;
    match cache.dtype() {
        KvDtype::F32 => run::<f32>(
            cache, pages, layer, query, kv_len, q, out, probs, isa, params, scratch,
        ),
        KvDtype::F16 => run::<f16>(
            cache, pages, layer, query, kv_len, q, out, probs, isa, params, scratch,
        ),
        KvDtype::Q8_0 => run::<Q8Col>(
            cache, pages, layer, query, kv_len, q, out, probs, isa, params, scratch,
        ),
    }
    Ok(())
}

#[cfg(test)]
mod tests;
