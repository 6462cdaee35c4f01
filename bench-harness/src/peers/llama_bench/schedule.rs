//! llama-bench's test definitions (tools/llama-bench/llama-bench.cpp), run on
//! any engine that can process a batch of token ids:
//!
//! - `pp<N>`: an N-token prompt of random ids (BOS first when the model adds
//!   one) processed from an empty cache in batches of `-b` tokens (default
//!   2048, so one batch), logits of the last token only;
//! - `tg<N>`: N tokens fed one at a time from an empty cache (BOS first, then
//!   random ids), logits every step;
//! - a warm-up run first (the whole prompt for pp, one token for tg), then
//!   `-r` timed repetitions, the cache cleared before each;
//! - with a depth `-d D`, each test runs after D prompt tokens are already in
//!   the cache (filled once per depth, untimed, and restored before every
//!   repetition).
//!
//! Random ids come from [`GlibcRand`] drawn in the order llama-bench draws
//! them, so the same run order feeds the same tokens.

use super::GlibcRand;
use std::time::Instant;

/// What llama-bench's tests need of an engine: a cache state to reset and
/// clone, and forward calls over a batch of ids.
pub trait TestModel {
    /// The KV cache and scratch of one sequence.
    type State: Clone;
    type Error;
    /// Empties the cache.
    fn reset(&self, st: &mut Self::State);
    /// Processes one prompt batch (logits of the last token only).
    fn prompt_batch(&self, tokens: &[u32], st: &mut Self::State) -> Result<(), Self::Error>;
    /// Processes one generated token.
    fn gen_step(&self, token: u32, st: &mut Self::State) -> Result<(), Self::Error>;
}

/// How random prompts are drawn: the vocabulary size ids are taken modulo,
/// the BOS id when the model adds one, and the largest prompt batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenSource {
    pub n_vocab: u32,
    pub bos: Option<u32>,
    pub n_batch: usize,
}

/// llama-bench's `test_prompt`: `n_prompt` random ids (BOS first when the
/// model adds it) in batches of `n_batch`.
pub fn test_prompt<M: TestModel>(
    model: &M,
    st: &mut M::State,
    rng: &mut GlibcRand,
    n_prompt: usize,
    src: TokenSource,
) -> Result<(), M::Error> {
    let mut tokens = Vec::with_capacity(src.n_batch.min(n_prompt));
    let mut done = 0;
    while done < n_prompt {
        let n = (n_prompt - done).min(src.n_batch);
        tokens.clear();
        tokens.push(match src.bos {
            Some(b) if done == 0 => b,
            _ => rng.next() % src.n_vocab,
        });
        tokens.extend((1..n).map(|_| rng.next() % src.n_vocab));
        model.prompt_batch(&tokens, st)?;
        done += n;
    }
    Ok(())
}

/// llama-bench's `test_gen`: BOS (or a random id), then `n_gen` single-token
/// steps, each followed by a new random id.
pub fn test_gen<M: TestModel>(
    model: &M,
    st: &mut M::State,
    rng: &mut GlibcRand,
    n_gen: usize,
    src: TokenSource,
) -> Result<(), M::Error> {
    let mut token = src.bos.unwrap_or_else(|| rng.next() % src.n_vocab);
    for _ in 0..n_gen {
        model.gen_step(token, st)?;
        token = rng.next() % src.n_vocab;
    }
    Ok(())
}

/// One test: its prompt and generation lengths and its context depth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Test {
    pub n_depth: usize,
    pub n_prompt: usize,
    pub n_gen: usize,
}

impl Test {
    /// llama-bench's label: `pp512`, `tg128`, with ` @ dN` for a depth.
    pub fn name(&self) -> String {
        super::test_name(self.n_prompt, self.n_gen, self.n_depth)
    }
}

/// The tests of one run, from llama-bench's `-p`, `-n` and `-d` lists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestPlan {
    /// Prompt lengths (0s dropped).
    pub prompts: Vec<usize>,
    /// Generation lengths (0s dropped).
    pub gens: Vec<usize>,
    /// Context depths; `[0]` when none was given.
    pub depths: Vec<usize>,
}

impl TestPlan {
    pub fn new(n_prompt: &[usize], n_gen: &[usize], n_depth: &[usize]) -> Self {
        let nonzero = |v: &[usize]| v.iter().copied().filter(|&n| n > 0).collect();
        TestPlan {
            prompts: nonzero(n_prompt),
            gens: nonzero(n_gen),
            depths: if n_depth.is_empty() {
                vec![0]
            } else {
                n_depth.to_vec()
            },
        }
    }

    /// The tests in llama-bench's order: per depth, every prompt, then every generation.
    pub fn tests(&self) -> Vec<Test> {
        self.depths
            .iter()
            .flat_map(|&d| {
                self.prompts
                    .iter()
                    .map(move |&p| Test {
                        n_depth: d,
                        n_prompt: p,
                        n_gen: 0,
                    })
                    .chain(self.gens.iter().map(move |&n| Test {
                        n_depth: d,
                        n_prompt: 0,
                        n_gen: n,
                    }))
            })
            .collect()
    }

    /// The positions the longest test needs.
    pub fn ctx(&self) -> usize {
        self.prompts
            .iter()
            .chain(&self.gens)
            .copied()
            .max()
            .unwrap_or(1)
            + self.depths.iter().copied().max().unwrap_or(0)
    }
}

/// Where a [`Session::time_test`] is, for a progress display.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    WarmingUp,
    FillingDepth,
    /// Repetition `rep` (from 1) of `reps` starts.
    Run {
        rep: usize,
        reps: usize,
    },
    /// A warm-up or a timed run finished.
    Done,
}

/// One model's tests in a row, keeping the cache after the last depth fill
/// as llama-bench keeps it.
pub struct Session<'m, M: TestModel> {
    model: &'m M,
    src: TokenSource,
    st: M::State,
    depth_state: Option<(usize, M::State)>,
}

impl<'m, M: TestModel> Session<'m, M> {
    pub fn new(model: &'m M, st: M::State, src: TokenSource) -> Self {
        Session {
            model,
            src,
            st,
            depth_state: None,
        }
    }

    /// One run of a test: the prompt part, then the generation part.
    fn run(&mut self, rng: &mut GlibcRand, n_prompt: usize, n_gen: usize) -> Result<(), M::Error> {
        if n_prompt > 0 {
            test_prompt(self.model, &mut self.st, rng, n_prompt, self.src)?;
        }
        if n_gen > 0 {
            test_gen(self.model, &mut self.st, rng, n_gen, self.src)?;
        }
        Ok(())
    }

    /// A warm-up run (unless `warmup` is false), then `reps` timed runs of
    /// `test`: the nanoseconds of each (at least 1).
    pub fn time_test(
        &mut self,
        rng: &mut GlibcRand,
        test: Test,
        reps: usize,
        warmup: bool,
        mut progress: impl FnMut(Step),
    ) -> Result<Vec<u64>, M::Error> {
        let Test {
            n_depth,
            n_prompt,
            n_gen,
        } = test;
        if warmup {
            progress(Step::WarmingUp);
            self.model.reset(&mut self.st);
            // llama-bench warms up with the whole prompt, or one token.
            self.run(rng, n_prompt, n_gen.min(1))?;
            progress(Step::Done);
        }
        let mut samples_ns = Vec::with_capacity(reps);
        for rep in 0..reps {
            self.model.reset(&mut self.st);
            if n_depth > 0 {
                match &self.depth_state {
                    Some((d, cached)) if *d == n_depth => self.st.clone_from(cached),
                    _ => {
                        progress(Step::FillingDepth);
                        test_prompt(self.model, &mut self.st, rng, n_depth, self.src)?;
                        self.depth_state = Some((n_depth, self.st.clone()));
                    }
                }
            }
            progress(Step::Run { rep: rep + 1, reps });
            let t0 = Instant::now();
            self.run(rng, n_prompt, n_gen)?;
            samples_ns.push(t0.elapsed().as_nanos().max(1) as u64);
            progress(Step::Done);
        }
        Ok(samples_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records every call: the cache is the list of ids it holds.
    #[derive(Default)]
    struct Recorder {
        calls: std::cell::RefCell<Vec<String>>,
    }

    impl TestModel for Recorder {
        type State = Vec<u32>;
        type Error = String;
        fn reset(&self, st: &mut Vec<u32>) {
            st.clear();
            self.calls.borrow_mut().push("reset".into());
        }
        fn prompt_batch(&self, tokens: &[u32], st: &mut Vec<u32>) -> Result<(), String> {
            st.extend_from_slice(tokens);
            self.calls
                .borrow_mut()
                .push(format!("pp{}@{}", tokens.len(), st.len()));
            Ok(())
        }
        fn gen_step(&self, token: u32, st: &mut Vec<u32>) -> Result<(), String> {
            st.push(token);
            self.calls.borrow_mut().push(format!("tg@{}", st.len()));
            Ok(())
        }
    }

    const SRC: TokenSource = TokenSource {
        n_vocab: 100,
        bos: Some(7),
        n_batch: 4,
    };

    #[test]
    fn prompts_start_with_bos_and_split_into_batches() {
        let m = Recorder::default();
        let mut st = Vec::new();
        let mut rng = GlibcRand::new(1);
        test_prompt(&m, &mut st, &mut rng, 10, SRC).unwrap();
        assert_eq!(*m.calls.borrow(), ["pp4@4", "pp4@8", "pp2@10"]);
        assert_eq!(st[0], 7);
        // Later batches start with a random id, not BOS.
        let mut r = GlibcRand::new(1);
        let ids: Vec<u32> = (0..9).map(|_| r.next() % 100).collect();
        assert_eq!(&st[1..], &ids[..]);
    }

    #[test]
    fn generation_feeds_bos_then_random_ids() {
        let m = Recorder::default();
        let mut st = Vec::new();
        let mut rng = GlibcRand::new(1);
        let src = TokenSource { bos: None, ..SRC };
        test_gen(&m, &mut st, &mut rng, 3, src).unwrap();
        let mut r = GlibcRand::new(1);
        let ids: Vec<u32> = (0..3).map(|_| r.next() % 100).collect();
        assert_eq!(st, ids);
    }

    #[test]
    fn plan_orders_tests_as_llama_bench_and_sizes_the_cache() {
        let p = TestPlan::new(&[0, 64], &[16], &[0, 32]);
        let names: Vec<String> = p.tests().iter().map(Test::name).collect();
        assert_eq!(names, ["pp64", "tg16", "pp64 @ d32", "tg16 @ d32"]);
        assert_eq!(p.ctx(), 96);
        assert_eq!(TestPlan::new(&[8], &[], &[]).depths, [0]);
    }

    #[test]
    fn depth_is_filled_once_and_restored_before_each_repetition() {
        let m = Recorder::default();
        let mut s = Session::new(&m, Vec::new(), SRC);
        let mut rng = GlibcRand::new(1);
        let mut steps = Vec::new();
        let test = Test {
            n_depth: 3,
            n_prompt: 0,
            n_gen: 2,
        };
        let ns = s
            .time_test(&mut rng, test, 2, true, |st| steps.push(st))
            .unwrap();
        assert_eq!(ns.len(), 2);
        assert!(ns.iter().all(|&n| n >= 1));
        assert_eq!(
            *m.calls.borrow(),
            // Warm-up: one token; then the depth fill once, and each
            // repetition's two tokens after the 3 cached ones.
            [
                "reset", "tg@1", "reset", "pp3@3", "tg@4", "tg@5", "reset", "tg@4", "tg@5"
            ]
        );
        assert_eq!(
            steps,
            [
                Step::WarmingUp,
                Step::Done,
                Step::FillingDepth,
                Step::Run { rep: 1, reps: 2 },
                Step::Done,
                Step::Run { rep: 2, reps: 2 },
                Step::Done,
            ]
        );
    }
}
