//! `compare --model M`: tiletune's own `bench model` (the reference engine),
//! llama.cpp's `llama-bench` and MNN's `llm_bench` alternated round by
//! round, their tokens/s pooled side by side. A peer that is missing, fails
//! or prints garbage is noted and skipped; it never stops the comparison.

use super::{file_name, locate};
use crate::BenchError;
use crate::peers::llama_bench::record::DECODE_BYTES_COUNT;
use crate::peers::{
    self, BenchTests, ComparisonRow, Engine, EngineFailure, LlamaBenchEngine, MnnBenchEngine,
    PeerCommand, RateSample,
};
use serde::Serialize;
use serde_json::{Value, json};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

/// The engines' order in the table; tiletune is the reference.
const ENGINES: [&str; 3] = ["tiletune", "llama.cpp", "mnn"];

/// The engines of one comparison, in running order.
type Engines = Vec<Box<dyn Engine>>;

/// What one model comparison runs.
#[derive(Clone, Debug)]
pub struct ModelCompare {
    pub model: PathBuf,
    /// The tiletune binary whose `bench model` runs as the reference engine.
    pub tiletune: PathBuf,
    /// `llama-bench` by flag [default: on PATH].
    pub llama_bench: Option<PathBuf>,
    /// More arguments for `llama-bench`, after the tests' own.
    pub llama_args: Vec<String>,
    /// `llm_bench` by flag [default: on PATH]; runs only with `mnn_config`.
    pub mnn_bench: Option<PathBuf>,
    pub mnn_config: Option<PathBuf>,
    pub tests: BenchTests,
    pub threads: Vec<usize>,
    pub rounds: usize,
    /// Limit of one engine run.
    pub timeout: Duration,
    /// Where MNN writes its reports; removed afterwards.
    pub report_dir: PathBuf,
}

/// The `--out` document of a model comparison.
#[derive(Debug, Serialize)]
pub struct ModelComparison {
    pub soc: String,
    pub soc_fingerprint: String,
    pub model: String,
    #[serde(flatten)]
    pub tests: BenchTests,
    pub threads: Vec<usize>,
    pub rounds: usize,
    pub rows: Vec<ComparisonRow>,
    pub failures: Vec<EngineFailure>,
    pub skipped: Vec<String>,
    /// The bytes of weights a decoded token reads, as tiletune's records
    /// count them in this GGUF (`decode_weight_bytes`); `None` when
    /// tiletune gave no record. llama.cpp reads the same file; MNN runs its
    /// own export, whose bytes differ.
    pub decode_weight_bytes: Option<u64>,
}

/// A comparison and the samples its rows pool.
#[derive(Debug)]
pub struct ModelRun {
    pub doc: ModelComparison,
    pub samples: Vec<RateSample>,
    /// The model as given (the document names its file only).
    pub model_path: String,
}

impl ModelRun {
    /// The engines' own records behind `row`.
    pub fn records(&self, row: &ComparisonRow) -> Vec<Value> {
        self.samples
            .iter()
            .filter(|s| s.engine == row.engine && s.test == row.test && s.threads == row.threads)
            .map(|s| s.raw.clone())
            .collect()
    }

    /// What is stored with `row` as a peer result: its pooled samples,
    /// ratio, rounds, the model path and the engines' own records.
    pub fn stored_json(&self, row: &ComparisonRow) -> Value {
        json!({
            "samples_ts": row.samples,
            "ratio_to_tiletune": row.ratio,
            "rounds": self.doc.rounds,
            "model_path": self.model_path,
            "records": self.records(row),
        })
    }

    /// Whether tiletune's own benchmark gave a result to compare against.
    pub fn has_reference(&self) -> bool {
        self.doc.rows.iter().any(|r| r.engine == ENGINES[0])
    }
}

/// `bench model` takes llama-bench's flags, but `--model` rather than `-m`
/// and one `--kv-type` for K and V rather than `-ctk`/`-ctv`.
pub fn own_bench_args(round_args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(round_args.len());
    let mut it = round_args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-m" => out.push("--model".into()),
            "-ctk" => out.push("--kv-type".into()),
            "-ctv" => {
                it.next();
            }
            _ => out.push(a.clone()),
        }
    }
    out
}

impl ModelCompare {
    /// The engines to run (tiletune first) and the notes on peers skipped.
    fn engines(&self) -> Result<(Engines, Vec<String>), BenchError> {
        let model_arg = self.model.to_string_lossy().into_owned();
        let round_args = LlamaBenchEngine::round_args(&model_arg, &self.tests, &self.threads);
        let mut skipped = Vec::new();
        let mut engines: Engines = Vec::new();
        let own = PeerCommand::new("tiletune", &self.tiletune)
            .args(["bench", "model"])
            .args(own_bench_args(&round_args))
            .timeout(self.timeout);
        engines.push(Box::new(LlamaBenchEngine::new("tiletune", own)));
        match locate(&self.llama_bench, "llama-bench", "--llama-bench") {
            Ok(p) => engines.push(Box::new(LlamaBenchEngine::new(
                "llama.cpp",
                PeerCommand::new("llama.cpp", p)
                    .args(&round_args)
                    .args(&self.llama_args)
                    .timeout(self.timeout),
            ))),
            Err(why) => skipped.push(format!("llama.cpp skipped: {why}")),
        }
        match (
            &self.mnn_config,
            locate(&self.mnn_bench, "llm_bench", "--mnn-bench"),
        ) {
            (Some(_), _) if self.tests.needs_depth_or_cache_type() => skipped.push(
                "mnn skipped: its llm_bench has no context depth (-d) or cache type (--kv-type)"
                    .into(),
            ),
            (None, _) => skipped.push(
                "mnn skipped: pass --mnn-config CFG (the config.json of the same model converted for MNN)"
                    .into(),
            ),
            (Some(_), Err(why)) => skipped.push(format!("mnn skipped: {why}")),
            (Some(cfg), Ok(bin)) if cfg.is_file() => {
                std::fs::create_dir_all(&self.report_dir).map_err(|e| BenchError::Io {
                    what: format!("cannot create {}", self.report_dir.display()),
                    error: e,
                })?;
                let version = peers::binary_fingerprint(&bin);
                engines.push(Box::new(MnnBenchEngine::new(
                    bin,
                    cfg.clone(),
                    version,
                    self.threads.clone(),
                    self.tests.n_prompt.clone(),
                    self.tests.n_gen.clone(),
                    self.report_dir.clone(),
                    Some(self.timeout),
                )));
            }
            (Some(cfg), Ok(_)) => skipped.push(format!(
                "mnn skipped: --mnn-config {} does not exist",
                cfg.display()
            )),
        }
        Ok((engines, skipped))
    }

    /// Runs every engine found, `rounds` times in turn; `progress(engine,
    /// round)` is called before each run.
    pub fn run(
        &self,
        soc: &str,
        soc_fingerprint: &str,
        progress: impl FnMut(&str, usize),
    ) -> Result<ModelRun, BenchError> {
        let (mut engines, skipped) = self.engines()?;
        let rounds = peers::alternate(&mut engines, self.rounds, progress);
        let _ = std::fs::remove_dir_all(&self.report_dir);
        let rows = peers::side_by_side(&rounds.samples, ENGINES[0], &ENGINES);
        let decode_weight_bytes = rounds
            .samples
            .iter()
            .filter(|s| s.engine == ENGINES[0])
            .find_map(|s| s.raw["decode_weight_bytes"].as_u64());
        Ok(ModelRun {
            doc: ModelComparison {
                soc: soc.to_string(),
                soc_fingerprint: soc_fingerprint.to_string(),
                model: file_name(&self.model),
                tests: self.tests.clone(),
                threads: self.threads.clone(),
                rounds: self.rounds,
                rows,
                failures: rounds.failures,
                skipped,
                decode_weight_bytes,
            },
            samples: rounds.samples,
            model_path: self.model.to_string_lossy().into_owned(),
        })
    }
}

impl ModelComparison {
    /// A decode row's weight bandwidth in GB/s, for the engines that read
    /// this GGUF (MNN runs its own export, of other bytes).
    pub fn weight_gbps(&self, r: &ComparisonRow) -> Option<f64> {
        let bytes = self.decode_weight_bytes?;
        let decode = r.test.starts_with("tg");
        (decode && r.engine != ENGINES[2]).then(|| r.mean * bytes as f64 / 1e9)
    }

    /// The side-by-side table, then the notes on skipped and failed engines.
    pub fn write_table(&self, out: &mut impl Write) -> std::io::Result<()> {
        writeln!(
            out,
            "model {}  soc {}  {} round(s), engines alternating",
            self.model, self.soc, self.rounds
        )?;
        writeln!(out)?;
        writeln!(
            out,
            "{:<10} {:<22} {:<12} {:>7} {:>22} {:>11} {:>12}",
            "engine", "version", "test", "threads", "t/s ± std", "vs tiletune", "weights GB/s"
        )?;
        let mut any_gbps = false;
        for r in &self.rows {
            let ts = match r.std {
                Some(s) => format!("{:.2} ± {:.2}", r.mean, s),
                None => format!("{:.2}", r.mean),
            };
            let ratio = r.ratio.map_or("-".into(), |x| format!("{x:.2}×"));
            let version: String = r.engine_version.chars().take(22).collect();
            let gbps = self.weight_gbps(r);
            any_gbps |= gbps.is_some();
            let gbps = gbps.map_or("-".into(), |g| format!("{g:.2}"));
            writeln!(
                out,
                "{:<10} {:<22} {:<12} {:>7} {:>22} {:>11} {:>12}",
                r.engine, version, r.test, r.threads, ts, ratio, gbps
            )?;
        }
        if let (true, Some(bytes)) = (any_gbps, self.decode_weight_bytes) {
            writeln!(
                out,
                "weights GB/s: a decode test's tokens/s times the {:.1} MB of weights a token reads \
                 in this file ({DECODE_BYTES_COUNT})",
                bytes as f64 / 1e6
            )?;
        }
        if self.rows.is_empty() {
            writeln!(out, "(no engine produced a result)")?;
        }
        for s in &self.skipped {
            writeln!(out, "note: {s}")?;
        }
        for f in &self.failures {
            writeln!(
                out,
                "note: {} dropped in round {}: {}",
                f.engine, f.round, f.error
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_bench_takes_long_model_flag() {
        let tests = BenchTests {
            n_prompt: vec![64, 512],
            n_gen: vec![16],
            ..Default::default()
        };
        let args = LlamaBenchEngine::round_args("m.gguf", &tests, &[1, 2]);
        assert_eq!(
            own_bench_args(&args).join(" "),
            "--model m.gguf -p 64,512 -n 16 -t 1,2 -r 1 -o json"
        );
    }

    #[test]
    fn depth_and_cache_type_reach_both_engines_in_their_own_flags() {
        let tests = BenchTests {
            n_prompt: vec![512],
            n_gen: vec![128],
            n_depth: vec![0, 4096],
            cache_type: Some("q8_0".into()),
        };
        let args = LlamaBenchEngine::round_args("m.gguf", &tests, &[2]);
        assert_eq!(
            args.join(" "),
            "-m m.gguf -p 512 -n 128 -d 0,4096 -t 2 -ctk q8_0 -ctv q8_0 -r 1 -o json"
        );
        assert_eq!(
            own_bench_args(&args).join(" "),
            "--model m.gguf -p 512 -n 128 -d 0,4096 -t 2 --kv-type q8_0 -r 1 -o json"
        );
        assert!(tests.needs_depth_or_cache_type());
        assert!(!BenchTests::default().needs_depth_or_cache_type());
    }

    #[test]
    fn a_failing_reference_is_reported_and_peers_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let cmp = ModelCompare {
            model: dir.path().join("m.gguf"),
            tiletune: dir.path().join("no-such-tiletune"),
            llama_bench: Some(dir.path().join("no-such-llama-bench")),
            llama_args: Vec::new(),
            mnn_bench: None,
            mnn_config: None,
            tests: BenchTests {
                n_prompt: vec![8],
                ..Default::default()
            },
            threads: vec![1],
            rounds: 2,
            timeout: Duration::from_secs(5),
            report_dir: dir.path().join("reports"),
        };
        let mut seen = Vec::new();
        let run = cmp
            .run("soc", "fp", |e, r| seen.push(format!("{e}{r}")))
            .unwrap();
        // A failed engine is not run again.
        assert_eq!(seen, ["tiletune1"]);
        assert!(!run.has_reference());
        assert_eq!(run.doc.failures.len(), 1);
        assert_eq!(run.doc.skipped.len(), 2);
        assert!(run.doc.skipped[0].starts_with("llama.cpp skipped: "));
        let mut out = Vec::new();
        run.doc.write_table(&mut out).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert!(s.contains("(no engine produced a result)"), "{s}");
        assert!(s.contains("note: tiletune dropped in round 1: "), "{s}");
        let row = ComparisonRow {
            engine: "tiletune".into(),
            engine_version: "0.1.0".into(),
            test: "pp8".into(),
            threads: 1,
            samples: vec![10.0],
            mean: 10.0,
            std: None,
            ratio: Some(1.0),
        };
        let mut doc = ModelComparison {
            decode_weight_bytes: Some(2_000_000_000),
            ..run.doc
        };
        // Decode rows of the engines that read the GGUF get a weight GB/s.
        let gbps = |engine: &str, test: &str| {
            doc.weight_gbps(&ComparisonRow {
                engine: engine.into(),
                test: test.into(),
                ..row.clone()
            })
        };
        assert_eq!(gbps("tiletune", "tg128"), Some(20.0));
        assert_eq!(gbps("llama.cpp", "tg64 @ d4096"), Some(20.0));
        assert_eq!(gbps("mnn", "tg128"), None);
        assert_eq!(gbps("tiletune", "pp8"), None);
        doc.rows = vec![ComparisonRow {
            test: "tg8".into(),
            ..row.clone()
        }];
        let mut out = Vec::new();
        doc.write_table(&mut out).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert!(s.contains("       20.00\n"), "{s}");
        assert!(s.contains("the 2000.0 MB of weights a token reads"), "{s}");
        let run = ModelRun { doc, ..run };
        let j = run.stored_json(&row);
        assert_eq!(j["rounds"], 2);
        assert_eq!(j["samples_ts"], json!([10.0]));
        assert!(j["model_path"].as_str().unwrap().ends_with("m.gguf"));
        assert_eq!(j["records"], json!([]));
    }
}
