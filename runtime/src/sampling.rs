//! Token sampling and stop conditions.
//!
//! The sampler applies llama.cpp's default chain in its order: repetition
//! penalty, top-k, top-p, min-p, temperature, then a draw from the seeded RNG
//! (`temperature == 0` is greedy argmax). [`StopCriteria`] ends generation on
//! an end-of-generation token, a stop string, a token budget, or an
//! interrupt flag another thread raises (a Ctrl-C handler), and holds back text that could be the start of a stop string so a streaming caller
//! never prints part of one.

use crate::error::{LoadError, Result};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Sampling parameters; the defaults are llama.cpp's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SamplerConfig {
    /// 0 means greedy.
    pub temperature: f32,
    /// 0 disables top-k.
    pub top_k: usize,
    /// 1 disables top-p.
    pub top_p: f32,
    /// 0 disables min-p.
    pub min_p: f32,
    /// 1 disables the repetition penalty.
    pub repeat_penalty: f32,
    /// How many recent tokens the penalty looks at.
    pub repeat_last_n: usize,
    pub seed: u64,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            seed: 0,
        }
    }
}

impl SamplerConfig {
    /// Greedy decoding (argmax, no penalty).
    pub fn greedy() -> Self {
        SamplerConfig {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repeat_penalty: 1.0,
            ..Default::default()
        }
    }

    fn validate(&self) -> Result<()> {
        let bad = |w: String| Err(LoadError::Sampling(w));
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return bad(format!(
                "temperature {} must be >= 0 (0 is greedy)",
                self.temperature
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad(format!(
                "top-p {} must be in (0, 1] (1 disables it)",
                self.top_p
            ));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad(format!(
                "min-p {} must be in [0, 1] (0 disables it)",
                self.min_p
            ));
        }
        if !(self.repeat_penalty.is_finite() && self.repeat_penalty > 0.0) {
            return bad(format!(
                "repeat penalty {} must be > 0 (1 disables it)",
                self.repeat_penalty
            ));
        }
        Ok(())
    }
}

/// xoshiro256** seeded through splitmix64: reproducible across platforms
/// and crate versions, which `rand`'s StdRng does not promise.
#[derive(Clone, Debug)]
pub struct Rng([u64; 4]);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Self {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        Rng([next(), next(), next(), next()])
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.0;
        let out = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        out
    }

    /// Uniform in [0, 1).
    pub fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 * (1.0 / (1u64 << 24) as f32)
    }
}

/// Picks the next token from logits.
#[derive(Clone, Debug)]
pub struct Sampler {
    cfg: SamplerConfig,
    rng: Rng,
    cand: Vec<(f32, u32)>,
}

impl Sampler {
    /// A sampler; invalid parameters are an error that names the parameter.
    pub fn new(cfg: SamplerConfig) -> Result<Self> {
        cfg.validate()?;
        Ok(Sampler {
            cfg,
            rng: Rng::new(cfg.seed),
            cand: Vec::new(),
        })
    }

    /// The parameters in use.
    pub fn config(&self) -> &SamplerConfig {
        &self.cfg
    }

    /// Samples a token id from `logits` given the tokens so far (`history`,
    /// used by the repetition penalty). NaN logits are never chosen; an empty
    /// or all-NaN slice gives an error.
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> Result<u32> {
        let c = self.cfg;
        self.cand.clear();
        self.cand.extend(
            logits
                .iter()
                .enumerate()
                .filter(|(_, l)| !l.is_nan())
                .map(|(i, &l)| (l, i as u32)),
        );
        if self.cand.is_empty() {
            return Err(LoadError::Sampling(
                "no logits to sample from (empty or all NaN)".into(),
            ));
        }
        if c.repeat_penalty != 1.0 && c.repeat_last_n > 0 {
            let recent = &history[history.len().saturating_sub(c.repeat_last_n)..];
            let mut seen: Vec<u32> = recent.to_vec();
            seen.sort_unstable();
            seen.dedup();
            // `cand` still has one entry per logit in id order here, unless
            // NaNs were dropped; look ids up by binary search to be safe.
            for id in seen {
                if let Ok(pos) = self.cand.binary_search_by_key(&id, |e| e.1) {
                    let l = &mut self.cand[pos].0;
                    *l = if *l > 0.0 {
                        *l / c.repeat_penalty
                    } else {
                        *l * c.repeat_penalty
                    };
                }
            }
        }
        let desc = |a: &(f32, u32), b: &(f32, u32)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
        if c.temperature == 0.0 {
            let best = self
                .cand
                .iter()
                .min_by(|a, b| desc(a, b))
                .expect("non-empty");
            return Ok(best.1);
        }
        if c.top_k > 0 && c.top_k < self.cand.len() {
            self.cand.select_nth_unstable_by(c.top_k - 1, desc);
            self.cand.truncate(c.top_k);
        }
        // Probabilities at temperature 1 for top-p and min-p, as llama.cpp.
        let max = self
            .cand
            .iter()
            .map(|e| e.0)
            .fold(f32::NEG_INFINITY, f32::max);
        let denom: f64 = self.cand.iter().map(|e| f64::from((e.0 - max).exp())).sum();
        if c.min_p > 0.0 {
            // p >= min_p * p_max  <=>  logit >= max + ln(min_p). Dropping these
            // before top-p is exact: top-p's running sums only cover tokens
            // ranked above them, and the denominator is already computed.
            let floor = max + c.min_p.ln();
            self.cand.retain(|e| e.0 >= floor);
        }
        self.cand.sort_unstable_by(desc);
        if c.top_p < 1.0 {
            let mut cum = 0.0f64;
            let mut keep = self.cand.len();
            for (i, e) in self.cand.iter().enumerate() {
                cum += f64::from((e.0 - max).exp()) / denom;
                if cum >= f64::from(c.top_p) {
                    keep = i + 1;
                    break;
                }
            }
            self.cand.truncate(keep.max(1));
        }
        let t = c.temperature;
        let weights_sum: f64 = self
            .cand
            .iter()
            .map(|e| f64::from(((e.0 - max) / t).exp()))
            .sum();
        let mut r = f64::from(self.rng.next_f32()) * weights_sum;
        for e in &self.cand {
            r -= f64::from(((e.0 - max) / t).exp());
            if r < 0.0 {
                return Ok(e.1);
            }
        }
        Ok(self.cand.last().expect("non-empty").1)
    }
}

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// An end-of-generation token (EOS, EOT, `<|im_end|>`).
    Eog,
    /// A stop string appeared in the output.
    StopString,
    /// The token budget is used up.
    MaxTokens,
    /// Every position of the context (the KV cache, `--ctx`) is used.
    ContextFull,
    /// The interrupt flag given to [`StopCriteria::with_interrupt`] was raised.
    Interrupted,
}

/// Text to show after one token, and whether to stop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub text: String,
    pub stop: Option<StopReason>,
}

/// Tracks stop conditions over a generation.
#[derive(Clone, Debug)]
pub struct StopCriteria {
    eog: Vec<u32>,
    stop_strings: Vec<String>,
    max_tokens: usize,
    generated: usize,
    held: String,
    interrupt: Option<Arc<AtomicBool>>,
}

impl StopCriteria {
    /// Stops on any of `eog` ids, any of `stop_strings`, or after `max_tokens` tokens.
    pub fn new(eog: Vec<u32>, stop_strings: Vec<String>, max_tokens: usize) -> Self {
        StopCriteria {
            eog,
            stop_strings: stop_strings.into_iter().filter(|s| !s.is_empty()).collect(),
            max_tokens,
            generated: 0,
            held: String::new(),
            interrupt: None,
        }
    }

    /// Also stops, with [`StopReason::Interrupted`], at the first token after
    /// `flag` becomes true. The flag is only read: whoever raises it (a signal
    /// handler) also lowers it before the next generation.
    pub fn with_interrupt(mut self, flag: Arc<AtomicBool>) -> Self {
        self.interrupt = Some(flag);
        self
    }

    /// The flag given to [`StopCriteria::with_interrupt`], for work before
    /// the first token (a prefill) that should stop on it too.
    pub fn interrupt_flag(&self) -> Option<&AtomicBool> {
        self.interrupt.as_deref()
    }

    /// Tokens seen so far.
    pub fn generated(&self) -> usize {
        self.generated
    }

    /// Registers token `id` whose decoded text is `piece`. The returned text
    /// is safe to show: it never includes a stop string or its beginning.
    pub fn push(&mut self, id: u32, piece: &str) -> Step {
        self.generated += 1;
        if self.eog.contains(&id) {
            return Step {
                text: std::mem::take(&mut self.held),
                stop: Some(StopReason::Eog),
            };
        }
        self.held.push_str(piece);
        if let Some(at) = self
            .stop_strings
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min()
        {
            let text = self.held[..at].to_string();
            self.held.clear();
            return Step {
                text,
                stop: Some(StopReason::StopString),
            };
        }
        // The token was sampled and its text is whole, so it is kept: the
        // caller records what was shown as the (stopped) reply.
        if self
            .interrupt
            .as_ref()
            .is_some_and(|f| f.load(Ordering::Relaxed))
        {
            return Step {
                text: std::mem::take(&mut self.held),
                stop: Some(StopReason::Interrupted),
            };
        }
        if self.generated >= self.max_tokens {
            return Step {
                text: std::mem::take(&mut self.held),
                stop: Some(StopReason::MaxTokens),
            };
        }
        // Keep back the longest suffix that is a prefix of a stop string.
        let mut keep_from = self.held.len();
        for s in &self.stop_strings {
            for (start, _) in self.held.char_indices() {
                let tail = &self.held[start..];
                if tail.len() < s.len() && s.starts_with(tail) {
                    keep_from = keep_from.min(start);
                    break;
                }
            }
        }
        let text = self.held[..keep_from].to_string();
        self.held.drain(..keep_from);
        Step { text, stop: None }
    }

    /// Text still held back when generation ends for another reason.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampler(f: impl FnOnce(&mut SamplerConfig)) -> Sampler {
        let mut c = SamplerConfig::default();
        f(&mut c);
        Sampler::new(c).unwrap()
    }

    #[test]
    fn greedy_takes_the_argmax_and_skips_nan() {
        let mut s = Sampler::new(SamplerConfig::greedy()).unwrap();
        assert_eq!(s.sample(&[0.1, 3.0, f32::NAN, 2.9], &[]).unwrap(), 1);
        assert_eq!(s.sample(&[f32::NAN, -1.0], &[]).unwrap(), 1);
        assert!(s.sample(&[], &[]).is_err());
        assert!(s.sample(&[f32::NAN], &[]).is_err());
        // Ties go to the lowest id.
        assert_eq!(s.sample(&[1.0, 5.0, 5.0], &[]).unwrap(), 1);
    }

    #[test]
    fn repetition_penalty_demotes_seen_tokens() {
        let mut s = sampler(|c| {
            *c = SamplerConfig::greedy();
            c.repeat_penalty = 2.0;
        });
        assert_eq!(s.sample(&[3.0, 2.0], &[0]).unwrap(), 1); // 3/2 < 2
        assert_eq!(s.sample(&[-1.0, -1.5], &[0]).unwrap(), 1); // -2 < -1.5
        assert_eq!(s.sample(&[3.0, 2.0], &[]).unwrap(), 0);
    }

    #[test]
    fn same_seed_same_tokens() {
        let logits: Vec<f32> = (0..100).map(|i| ((i * 37) % 11) as f32 * 0.3).collect();
        let run = |seed| {
            let mut s = sampler(|c| c.seed = seed);
            (0..50)
                .map(|_| s.sample(&logits, &[]).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }

    #[test]
    fn filters_restrict_the_support() {
        let logits = [0.0f32, 1.0, 2.0, 3.0, 4.0];
        let draws = |f: &dyn Fn(&mut SamplerConfig)| {
            let mut c = SamplerConfig {
                temperature: 1.0,
                top_k: 0,
                top_p: 1.0,
                min_p: 0.0,
                ..Default::default()
            };
            f(&mut c);
            let mut s = Sampler::new(c).unwrap();
            let mut seen = [0usize; 5];
            for _ in 0..4000 {
                seen[s.sample(&logits, &[]).unwrap() as usize] += 1;
            }
            seen
        };
        let all = draws(&|_| {});
        assert!(all.iter().all(|&n| n > 0), "{all:?}");
        // Frequencies follow softmax: p(4) = 0.636.
        assert!((all[4] as f64 / 4000.0 - 0.636).abs() < 0.04, "{all:?}");
        let k2 = draws(&|c| c.top_k = 2);
        assert_eq!(&k2[..3], &[0, 0, 0]);
        // top-p 0.8: p(4)+p(3) = 0.87 >= 0.8, so only 3 and 4 remain.
        let p = draws(&|c| c.top_p = 0.8);
        assert_eq!(&p[..3], &[0, 0, 0]);
        assert!(p[3] > 0);
        // min-p 0.3: p(3)/p(4) = 0.37 stays, p(2)/p(4) = 0.14 goes.
        let m = draws(&|c| c.min_p = 0.3);
        assert_eq!(&m[..3], &[0, 0, 0]);
        assert!(m[3] > 0);
        // Low temperature concentrates on the argmax.
        let cold = draws(&|c| c.temperature = 0.05);
        assert_eq!(cold[4], 4000);
    }

    #[test]
    fn invalid_parameters_are_errors() {
        for f in [
            |c: &mut SamplerConfig| c.temperature = -1.0,
            |c: &mut SamplerConfig| c.temperature = f32::NAN,
            |c: &mut SamplerConfig| c.top_p = 0.0,
            |c: &mut SamplerConfig| c.top_p = 1.5,
            |c: &mut SamplerConfig| c.min_p = 2.0,
            |c: &mut SamplerConfig| c.repeat_penalty = 0.0,
        ] {
            let mut c = SamplerConfig::default();
            f(&mut c);
            assert!(Sampler::new(c).is_err(), "{c:?}");
        }
    }

    #[test]
    fn stop_strings_are_never_shown() {
        let mut s = StopCriteria::new(vec![9], vec!["</end>".into()], 100);
        let mut shown = String::new();
        let mut last = None;
        for (i, piece) in ["Hello", " wor", "ld<", "/en", "d> tail"]
            .iter()
            .enumerate()
        {
            let step = s.push(i as u32, piece);
            shown.push_str(&step.text);
            last = step.stop;
            if last.is_some() {
                break;
            }
        }
        assert_eq!(shown, "Hello world");
        assert_eq!(last, Some(StopReason::StopString));
    }

    #[test]
    fn held_text_is_released_when_it_cannot_start_a_stop_string() {
        let mut s = StopCriteria::new(vec![], vec!["<|x|>".into()], 100);
        assert_eq!(s.push(0, "a<").text, "a");
        assert_eq!(s.push(0, "b").text, "<b");
        assert_eq!(s.push(0, "é<|").text, "é");
        assert_eq!(s.finish(), "<|");
    }

    #[test]
    fn eog_and_budget_stop() {
        let mut s = StopCriteria::new(vec![2], vec![], 3);
        assert_eq!(s.push(5, "a").stop, None);
        let step = s.push(2, "</s>");
        assert_eq!((step.text.as_str(), step.stop), ("", Some(StopReason::Eog)));
        let mut s = StopCriteria::new(vec![2], vec![], 2);
        assert_eq!(s.push(5, "a").stop, None);
        let step = s.push(6, "b");
        assert_eq!(
            (step.text.as_str(), step.stop),
            ("b", Some(StopReason::MaxTokens))
        );
        assert_eq!(s.generated(), 2);
    }

    #[test]
    fn a_raised_interrupt_flag_stops_at_the_next_token() {
        let flag = Arc::new(AtomicBool::new(false));
        let mut s =
            StopCriteria::new(vec![2], vec!["<|x|>".into()], 100).with_interrupt(flag.clone());
        assert_eq!(s.push(5, "a").stop, None);
        // Text held back as a possible stop-string start is released.
        assert_eq!(s.push(5, "b<").text, "b");
        flag.store(true, Ordering::Relaxed);
        let step = s.push(6, "c");
        assert_eq!(
            (step.text.as_str(), step.stop),
            ("<c", Some(StopReason::Interrupted))
        );
        // An end-of-generation token still wins: the reply ended on its own.
        let mut s = StopCriteria::new(vec![2], vec![], 100).with_interrupt(flag);
        assert_eq!(s.push(2, "").stop, Some(StopReason::Eog));
    }
}
