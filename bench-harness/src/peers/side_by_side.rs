//! Side-by-side model benchmarks: engines run in alternation (round 1: A
//! then B, round 2: A then B, ...) so that frequency or thermal drift during
//! the comparison hits every engine alike, and the samples of all rounds are
//! pooled per (engine, test, threads) into a mean, a sample standard
//! deviation and the ratio to a reference engine.

use super::RateSample;
use super::llama_bench::parse_llama_bench;
use super::mnn::parse_mnn_bench;
use super::run::PeerCommand;
use crate::BenchError;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Something that measures tokens/s once per round.
pub trait Engine {
    /// The name results carry (`tiletune`, `llama.cpp`, `mnn`).
    fn name(&self) -> &str;
    /// One repetition of every test and thread count.
    fn run_round(&mut self) -> Result<Vec<RateSample>, BenchError>;
}

/// An engine whose stdout is llama-bench JSON: llama.cpp's `llama-bench -o
/// json` and tiletune's own `bench model -o json`.
pub struct LlamaBenchEngine {
    name: String,
    cmd: PeerCommand,
}

impl LlamaBenchEngine {
    /// `cmd` is the complete command line (it must ask for `-r 1 -o json`).
    pub fn new(name: impl Into<String>, cmd: PeerCommand) -> Self {
        LlamaBenchEngine {
            name: name.into(),
            cmd,
        }
    }

    /// The llama-bench arguments of one round: `-m M -p P,.. -n N,.. -d
    /// D,.. -t T,.. [-ctk C -ctv C] -r 1 -o json` (llama-bench runs each
    /// prompt size and each generation length as its own test, at each
    /// depth). `cache_type` is llama-bench's `-ctk`/`-ctv` name (`f16`,
    /// `q8_0`); `None` leaves each engine's default.
    pub fn round_args(model: &str, tests: &BenchTests, threads: &[usize]) -> Vec<String> {
        let mut args = vec![
            "-m".into(),
            model.into(),
            "-p".into(),
            join(&tests.n_prompt),
            "-n".into(),
            join(&tests.n_gen),
        ];
        if tests.n_depth.iter().any(|&d| d > 0) {
            args.extend(["-d".into(), join(&tests.n_depth)]);
        }
        args.extend(["-t".into(), join(threads)]);
        if let Some(c) = &tests.cache_type {
            args.extend(["-ctk".into(), c.clone(), "-ctv".into(), c.clone()]);
        }
        args.extend(["-r".into(), "1".into(), "-o".into(), "json".into()]);
        args
    }
}

/// The tests of a model comparison, as llama-bench's flags name them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct BenchTests {
    pub n_prompt: Vec<usize>,
    pub n_gen: Vec<usize>,
    /// Context depths (`-d`): each test runs after this many tokens are in
    /// the KV cache.
    pub n_depth: Vec<usize>,
    /// KV cache element type (`-ctk`/`-ctv`), e.g. `q8_0`.
    pub cache_type: Option<String>,
}

impl BenchTests {
    /// Whether anything beyond prompt and generation lengths at depth 0 with
    /// default caches is asked (MNN's `llm_bench` has no flag for either).
    pub fn needs_depth_or_cache_type(&self) -> bool {
        self.cache_type.is_some() || self.n_depth.iter().any(|&d| d > 0)
    }
}

fn join(list: &[usize]) -> String {
    list.iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

impl Engine for LlamaBenchEngine {
    fn name(&self) -> &str {
        &self.name
    }

    fn run_round(&mut self) -> Result<Vec<RateSample>, BenchError> {
        let out = self.cmd.run()?;
        let records = parse_llama_bench(&self.name, &out.stdout).map_err(|e| match e {
            BenchError::PeerOutput {
                engine,
                reason,
                hint,
            } => BenchError::PeerOutput {
                engine,
                reason,
                hint: format!(
                    "{hint}; stderr ended with:\n{}",
                    super::run::stderr_tail(&out.stderr, 6)
                ),
            },
            other => other,
        })?;
        Ok(records.iter().map(|r| r.to_sample(&self.name)).collect())
    }
}

/// MNN's `llm_bench`, run once per thread count per round (its JSON report
/// names a single thread count), with `-rep 1` and `-j FILE`. One run takes
/// one `-p` and one `-n` (a ppP and a tgN test), so lists run pairwise:
/// the i-th prompt size with the i-th generation length, 0 where a list is
/// shorter.
pub struct MnnBenchEngine {
    name: String,
    program: PathBuf,
    config: PathBuf,
    version: String,
    threads: Vec<usize>,
    n_prompt: Vec<usize>,
    n_gen: Vec<usize>,
    report_dir: PathBuf,
    timeout: Option<std::time::Duration>,
}

impl MnnBenchEngine {
    /// `config` is the MNN model's `config.json`; llm_bench runs inside
    /// `report_dir` (which must exist; it creates a `tmp/` there) and writes
    /// its reports there; `version` keys its results.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        program: PathBuf,
        config: PathBuf,
        version: String,
        threads: Vec<usize>,
        n_prompt: Vec<usize>,
        n_gen: Vec<usize>,
        report_dir: PathBuf,
        timeout: Option<std::time::Duration>,
    ) -> Self {
        MnnBenchEngine {
            name: "mnn".into(),
            program,
            // llm_bench runs inside report_dir: a relative path would break.
            config: std::path::absolute(&config).unwrap_or(config),
            version,
            threads,
            n_prompt,
            n_gen,
            report_dir,
            timeout,
        }
    }
}

impl Engine for MnnBenchEngine {
    fn name(&self) -> &str {
        &self.name
    }

    fn run_round(&mut self) -> Result<Vec<RateSample>, BenchError> {
        let mut samples = Vec::new();
        let pairs = self.n_prompt.len().max(self.n_gen.len());
        for &t in &self.threads {
            for i in 0..pairs {
                let p = self.n_prompt.get(i).copied().unwrap_or(0);
                let n = self.n_gen.get(i).copied().unwrap_or(0);
                if p == 0 && n == 0 {
                    continue;
                }
                samples.extend(self.run_one(t, p, n, i)?);
            }
        }
        Ok(samples)
    }
}

impl MnnBenchEngine {
    /// One `llm_bench` run: `t` threads, `-p p -n n`.
    fn run_one(
        &self,
        t: usize,
        p: usize,
        n: usize,
        i: usize,
    ) -> Result<Vec<RateSample>, BenchError> {
        let report = self.report_dir.join(format!("llm_bench-t{t}-{i}.json"));
        // A stale report from an earlier round must not pass for this one.
        let _ = std::fs::remove_file(&report);
        let mut cmd = PeerCommand::new(&self.name, &self.program)
            .args([
                "-m".into(),
                self.config.clone().into_os_string(),
                "-a".into(),
                "cpu".into(),
                "-t".into(),
                t.to_string().into(),
                "-p".into(),
                p.to_string().into(),
                "-n".into(),
                n.to_string().into(),
                "-rep".into(),
                "1".into(),
                "-j".into(),
                report.clone().into_os_string(),
            ])
            .current_dir(&self.report_dir);
        if let Some(d) = self.timeout {
            cmd = cmd.timeout(d);
        }
        let out = cmd.run()?;
        if let Some(why) = super::mnn::load_failure(&out.stdout, &out.stderr) {
            return Err(BenchError::PeerRun {
                engine: self.name.clone(),
                command: cmd.display(),
                reason: format!("the model did not load ({why})"),
                stderr_tail: super::run::stderr_tail(&out.stderr, 12),
            });
        }
        let text = std::fs::read_to_string(&report).map_err(|e| BenchError::PeerRun {
            engine: self.name.clone(),
            command: cmd.display(),
            reason: format!("it wrote no report to {} ({e})", report.display()),
            stderr_tail: super::run::stderr_tail(&out.stderr, 12),
        })?;
        let r = parse_mnn_bench(&self.name, &text)?;
        if r.threads != t {
            return Err(super::output_error(
                &self.name,
                format!("asked for {t} threads, the report says {}", r.threads),
                "check that this llm_bench accepts `-t`",
            ));
        }
        Ok(r.to_samples(&self.name, &self.version))
    }
}

/// An engine that failed; it is not run again in later rounds.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EngineFailure {
    pub engine: String,
    /// 1-based round in which it failed.
    pub round: usize,
    pub error: String,
}

/// Every sample of every round, and the engines that failed.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Rounds {
    pub samples: Vec<RateSample>,
    pub failures: Vec<EngineFailure>,
}

/// Runs `rounds` rounds; in each, every engine still standing runs once, in
/// the given order. `progress(engine, round)` is called before each run.
pub fn alternate(
    engines: &mut [Box<dyn Engine + '_>],
    rounds: usize,
    mut progress: impl FnMut(&str, usize),
) -> Rounds {
    let mut out = Rounds::default();
    let mut failed = vec![false; engines.len()];
    for round in 1..=rounds {
        for (i, e) in engines.iter_mut().enumerate() {
            if failed[i] {
                continue;
            }
            progress(e.name(), round);
            match e.run_round() {
                Ok(s) => out.samples.extend(s),
                Err(err) => {
                    failed[i] = true;
                    out.failures.push(EngineFailure {
                        engine: e.name().to_string(),
                        round,
                        error: err.to_string(),
                    });
                }
            }
        }
    }
    out
}

/// One line of the comparison table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ComparisonRow {
    pub engine: String,
    pub engine_version: String,
    pub test: String,
    pub threads: usize,
    /// Pooled samples (tokens/s) of all rounds.
    pub samples: Vec<f64>,
    pub mean: f64,
    /// Sample standard deviation; `None` with fewer than two samples.
    pub std: Option<f64>,
    /// `mean / mean of the reference engine` at the same test and threads.
    pub ratio: Option<f64>,
}

/// Mean and sample standard deviation (n − 1), as llama-bench computes them.
pub fn mean_std(xs: &[f64]) -> (f64, Option<f64>) {
    if xs.is_empty() {
        return (f64::NAN, None);
    }
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let std = (xs.len() > 1)
        .then(|| (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt());
    (mean, std)
}

/// Pools samples per (engine, version, test, threads) and relates each to
/// `reference`. Rows come by test (first seen first), then threads, then
/// engine in `engine_order` (others after, by name).
pub fn side_by_side(
    samples: &[RateSample],
    reference: &str,
    engine_order: &[&str],
) -> Vec<ComparisonRow> {
    let mut tests: Vec<&str> = Vec::new();
    let mut rows: Vec<ComparisonRow> = Vec::new();
    for s in samples {
        if !tests.contains(&s.test.as_str()) {
            tests.push(&s.test);
        }
        match rows.iter_mut().find(|r| {
            r.engine == s.engine
                && r.engine_version == s.engine_version
                && r.test == s.test
                && r.threads == s.threads
        }) {
            Some(r) => r.samples.extend(&s.tokens_per_s),
            None => rows.push(ComparisonRow {
                engine: s.engine.clone(),
                engine_version: s.engine_version.clone(),
                test: s.test.clone(),
                threads: s.threads,
                samples: s.tokens_per_s.clone(),
                mean: 0.0,
                std: None,
                ratio: None,
            }),
        }
    }
    for r in &mut rows {
        (r.mean, r.std) = mean_std(&r.samples);
    }
    let refs: Vec<(String, usize, f64)> = rows
        .iter()
        .filter(|r| r.engine == reference)
        .map(|r| (r.test.clone(), r.threads, r.mean))
        .collect();
    for r in &mut rows {
        r.ratio = refs
            .iter()
            .find(|(t, th, _)| *t == r.test && *th == r.threads)
            .and_then(|&(_, _, m)| (m > 0.0).then(|| r.mean / m));
    }
    let engine_rank = |e: &str| {
        engine_order
            .iter()
            .position(|x| *x == e)
            .unwrap_or(engine_order.len())
    };
    rows.sort_by(|a, b| {
        let ta = tests.iter().position(|t| *t == a.test);
        let tb = tests.iter().position(|t| *t == b.test);
        ta.cmp(&tb)
            .then(a.threads.cmp(&b.threads))
            .then(engine_rank(&a.engine).cmp(&engine_rank(&b.engine)))
            .then(a.engine.cmp(&b.engine))
            .then(a.engine_version.cmp(&b.engine_version))
    });
    rows
}
