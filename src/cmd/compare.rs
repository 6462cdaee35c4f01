//! `tiletune compare`: tiletune next to its peers on this machine, from one
//! run. `compare --model M` alternates tiletune's own `bench model` with
//! llama.cpp's `llama-bench` and MNN's `llm_bench` round by round and prints
//! tokens/s side by side; `compare kernels` runs llama.cpp's
//! `test-backend-ops perf -o MUL_MAT` and tiletune's GEMV/GEMM at the same
//! types and shapes; `compare ppl` scores a text with tiletune (W4A32 and
//! W4A8) and with `llama-perplexity`. Running, parsing and pooling live in
//! `tiletune_bench::peers`; this module builds the command lines, prints,
//! and stores the results as peer results in the selector table.

use super::Global;
use super::bench::{KernelArgs, KernelJob, bench_kernel};
use anyhow::Context;
use serde::Serialize;
use serde_json::{Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;
use tiletune_bench::peers::{
    self, ComparisonRow, Engine, EngineFailure, LlamaBenchEngine, MnnBenchEngine, MulMatShape,
    OpPerf, PeerCommand, PerplexityEstimate,
};
use tiletune_tables::{PeerResult, now_unix};

#[derive(Debug, clap::Args)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    after_help = "Engines run in turn, once per round (-r rounds), so drift hits them alike; \
a peer that is missing, fails or prints garbage is reported and skipped.

Examples:
  tiletune compare -m m.gguf --llama-bench llama.cpp/build/bin/llama-bench -p 512 -n 128 -t 1,2 -r 3 --out cmp.json
  tiletune compare -m m.gguf --mnn-bench MNN/build/llm_bench --mnn-config m-mnn/config.json -t 4
  tiletune compare kernels --llama-test-backend-ops llama.cpp/build/bin/test-backend-ops --types q4_0,q8_0
  tiletune compare ppl -m m.gguf -f wiki.test.raw --llama-perplexity llama.cpp/build/bin/llama-perplexity"
)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<CompareCommand>,
    #[command(flatten)]
    pub model: ModelCompareArgs,
}

#[derive(Debug, clap::Subcommand)]
pub enum CompareCommand {
    /// llama.cpp's `test-backend-ops perf -o MUL_MAT` (CPU backend) next to
    /// tiletune's GEMV/GEMM at the same types and shapes: time per run,
    /// GFLOP/s and GB/s.
    Kernels(KernelsArgs),
    /// Perplexity of a text: tiletune W4A32 (`--qmode a32`) and W4A8
    /// (`--qmode a8`) next to `llama-perplexity`.
    Ppl(PplArgs),
}

/// `tiletune compare --model M`: model throughput, tiletune vs peers.
#[derive(Debug, clap::Args)]
pub struct ModelCompareArgs {
    /// GGUF model, run by tiletune and llama-bench.
    #[arg(long, short = 'm', value_name = "FILE", required = true)]
    pub model: Option<PathBuf>,
    /// llama.cpp's llama-bench [default: `llama-bench` on PATH; skipped if absent].
    #[arg(long, value_name = "PATH")]
    pub llama_bench: Option<PathBuf>,
    /// MNN's llm_bench [default: `llm_bench` on PATH]; runs only with --mnn-config.
    #[arg(long, value_name = "PATH")]
    pub mnn_bench: Option<PathBuf>,
    /// The MNN model's config.json (MNN does not read GGUF; convert the same
    /// model with MNN's llmexport first).
    #[arg(long, value_name = "CFG")]
    pub mnn_config: Option<PathBuf>,
    #[command(flatten)]
    pub tests: super::bench_model::TestLengths,
    /// Thread counts, comma separated [default: the CPUs this process may use].
    #[arg(short = 't', long, value_delimiter = ',')]
    pub threads: Vec<usize>,
    /// Rounds: in each, every engine runs each test once, in turn.
    #[arg(short = 'r', long = "reps", default_value_t = 3)]
    pub reps: usize,
    /// Give up on one engine run after this many seconds.
    #[arg(long, default_value_t = 3600)]
    pub timeout: u64,
    /// Also write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Selector table the results are stored in (as peer results) [default:
    /// $TILETUNE_DB, else the XDG data directory].
    #[arg(long, value_name = "PATH")]
    pub db: Option<PathBuf>,
    /// Print only; store nothing.
    #[arg(long)]
    pub no_store: bool,
}

#[derive(Debug, clap::Args)]
pub struct KernelsArgs {
    /// llama.cpp's test-backend-ops [default: `test-backend-ops` on PATH].
    #[arg(long, value_name = "PATH")]
    pub llama_test_backend_ops: Option<PathBuf>,
    /// Weight types, comma separated (f32, f16, q4_0, q4_1, q5_0, q5_1,
    /// q8_0, q4_k, q6_k, mxfp4).
    #[arg(long, value_delimiter = ',', default_value = "q4_0,q8_0")]
    pub types: Vec<String>,
    /// Token counts (MUL_MAT's n) to keep from llama.cpp's perf suite, comma
    /// separated; 1 is GEMV. Its suite has 1, 2, 3, 4, 5, 8 and 512.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub batch: Vec<u64>,
    /// Short tiletune schedule: a smoke test, not a measurement.
    #[arg(long)]
    pub quick: bool,
    /// Give up on test-backend-ops after this many seconds.
    #[arg(long, default_value_t = 3600)]
    pub timeout: u64,
    /// Also write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct PplArgs {
    /// GGUF model.
    #[arg(long, short = 'm', value_name = "FILE")]
    pub model: PathBuf,
    /// Text file to score.
    #[arg(long, short = 'f', value_name = "FILE")]
    pub file: PathBuf,
    /// llama.cpp's llama-perplexity [default: `llama-perplexity` on PATH; skipped if absent].
    #[arg(long, value_name = "PATH")]
    pub llama_perplexity: Option<PathBuf>,
    /// Tokens per chunk (both engines).
    #[arg(long, short = 'c', default_value_t = 512)]
    pub ctx: usize,
    /// Score at most this many chunks (both engines) [default: all].
    #[arg(long)]
    pub chunks: Option<usize>,
    /// Worker threads, the same for both engines [default: the CPUs this
    /// process may use].
    #[arg(long, short = 't')]
    pub threads: Option<usize>,
    /// Give up on one engine run after this many seconds.
    #[arg(long, default_value_t = 3600)]
    pub timeout: u64,
    /// Also write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Selector table the results are stored in [default: $TILETUNE_DB, else
    /// the XDG data directory].
    #[arg(long, value_name = "PATH")]
    pub db: Option<PathBuf>,
    /// Print only; store nothing.
    #[arg(long)]
    pub no_store: bool,
}

pub fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        Some(CompareCommand::Kernels(k)) => kernels(g, k),
        Some(CompareCommand::Ppl(p)) => ppl(g, p),
        None => model(g, args.model),
    }
}

/// A peer given by flag, else found on PATH; `None` with the note to print.
fn locate(flag: &Option<PathBuf>, name: &str, flag_name: &str) -> Result<PathBuf, String> {
    match flag {
        Some(p) if p.is_file() => Ok(p.clone()),
        Some(p) => Err(format!("{} does not exist (from {flag_name})", p.display())),
        None => peers::find_on_path(name)
            .ok_or_else(|| format!("`{name}` is not on PATH; pass {flag_name} PATH to include it")),
    }
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| p.display().to_string())
}

fn tiletune_exe() -> anyhow::Result<PathBuf> {
    std::env::current_exe().context("cannot find the running tiletune binary")
}

fn write_json_file(path: &Path, doc: &impl Serialize) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(doc)?;
    std::fs::write(path, text + "\n").with_context(|| format!("cannot write {}", path.display()))
}

/// Stores peer results; a table that cannot be opened is reported, not fatal
/// (the printed comparison is the main result).
fn store(db: &Option<PathBuf>, rows: &[PeerResult], soc: &tiletune_soc::SocInfo) -> String {
    let path = db.clone().unwrap_or_else(tiletune_tables::default_db_path);
    let stored = super::open_for_writing(&path, soc).and_then(|mut t| {
        let mut n = 0;
        for r in rows {
            n += t.put_peer_result(r)? as usize;
        }
        Ok(n)
    });
    match stored {
        Ok(n) => format!("stored {n} peer result(s) in {}", path.display()),
        Err(e) => format!("not stored in {}: {e:#}", path.display()),
    }
}

// ---- compare --model ------------------------------------------------------

/// The `--out` document of a model comparison.
#[derive(Debug, Serialize)]
struct ModelComparison {
    soc: String,
    soc_fingerprint: String,
    model: String,
    n_prompt: Vec<usize>,
    n_gen: Vec<usize>,
    threads: Vec<usize>,
    rounds: usize,
    rows: Vec<ComparisonRow>,
    failures: Vec<EngineFailure>,
    skipped: Vec<String>,
}

fn model(g: &Global, a: ModelCompareArgs) -> anyhow::Result<ExitCode> {
    let model = a.model.clone().context("--model is required")?;
    if !model.is_file() {
        anyhow::bail!("model {} does not exist", model.display());
    }
    if a.reps == 0 {
        anyhow::bail!("--reps must be at least 1");
    }
    if a.tests
        .n_prompt
        .iter()
        .chain(&a.tests.n_gen)
        .all(|&x| x == 0)
    {
        anyhow::bail!("-p and -n are all 0; nothing to measure");
    }
    let threads = if a.threads.is_empty() {
        vec![
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
        ]
    } else {
        a.threads.clone()
    };
    if threads.contains(&0) {
        anyhow::bail!("-t: thread counts must be at least 1");
    }
    let timeout = Duration::from_secs(a.timeout.max(1));
    let soc = tiletune_soc::probe().context("probing this SoC")?;
    let model_arg = model.to_string_lossy().into_owned();
    let round_args =
        LlamaBenchEngine::round_args(&model_arg, &a.tests.n_prompt, &a.tests.n_gen, &threads);

    let mut skipped = Vec::new();
    let mut engines: Vec<Box<dyn Engine>> = Vec::new();
    let own = PeerCommand::new("tiletune", tiletune_exe()?)
        .args(["bench", "model"])
        .args(own_bench_args(&round_args))
        .timeout(timeout);
    engines.push(Box::new(LlamaBenchEngine::new("tiletune", own)));
    match locate(&a.llama_bench, "llama-bench", "--llama-bench") {
        Ok(p) => engines.push(Box::new(LlamaBenchEngine::new(
            "llama.cpp",
            PeerCommand::new("llama.cpp", p)
                .args(&round_args)
                .timeout(timeout),
        ))),
        Err(why) => skipped.push(format!("llama.cpp skipped: {why}")),
    }
    let report_dir = std::env::temp_dir().join(format!("tiletune-compare-{}", std::process::id()));
    match (&a.mnn_config, locate(&a.mnn_bench, "llm_bench", "--mnn-bench")) {
        (None, _) => skipped.push(
            "mnn skipped: pass --mnn-config CFG (the config.json of the same model converted for MNN)"
                .into(),
        ),
        (Some(_), Err(why)) => skipped.push(format!("mnn skipped: {why}")),
        (Some(cfg), Ok(bin)) if cfg.is_file() => {
            std::fs::create_dir_all(&report_dir)
                .with_context(|| format!("cannot create {}", report_dir.display()))?;
            let version = peers::binary_fingerprint(&bin);
            engines.push(Box::new(MnnBenchEngine::new(
                bin,
                cfg.clone(),
                version,
                threads.clone(),
                a.tests.n_prompt.clone(),
                a.tests.n_gen.clone(),
                report_dir.clone(),
                Some(timeout),
            )));
        }
        (Some(cfg), Ok(_)) => skipped.push(format!(
            "mnn skipped: --mnn-config {} does not exist",
            cfg.display()
        )),
    }

    let rounds = peers::alternate(&mut engines, a.reps, |engine, round| {
        eprintln!("round {round}/{}: {engine}", a.reps);
    });
    let _ = std::fs::remove_dir_all(&report_dir);
    let rows = peers::side_by_side(
        &rounds.samples,
        "tiletune",
        &["tiletune", "llama.cpp", "mnn"],
    );
    let doc = ModelComparison {
        soc: soc.name.clone(),
        soc_fingerprint: soc.fingerprint.clone(),
        model: file_name(&model),
        n_prompt: a.tests.n_prompt.clone(),
        n_gen: a.tests.n_gen.clone(),
        threads: threads.clone(),
        rounds: a.reps,
        rows,
        failures: rounds.failures.clone(),
        skipped,
    };

    let mut notes = Vec::new();
    if !a.no_store && !doc.rows.is_empty() {
        let now = now_unix();
        let results: Vec<PeerResult> = doc
            .rows
            .iter()
            .map(|r| PeerResult {
                soc: soc.fingerprint.clone(),
                model: doc.model.clone(),
                engine: r.engine.clone(),
                engine_version: r.engine_version.clone(),
                test: r.test.clone(),
                threads: r.threads,
                tokens_per_s: r.mean,
                std: r.std,
                json: json!({
                    "samples_ts": r.samples,
                    "ratio_to_tiletune": r.ratio,
                    "rounds": a.reps,
                    "model_path": model_arg,
                    "records": rounds.samples.iter()
                        .filter(|s| s.engine == r.engine && s.test == r.test && s.threads == r.threads)
                        .map(|s| s.raw.clone()).collect::<Vec<Value>>(),
                }),
                measured_at: now,
            })
            .collect();
        notes.push(store(&a.db, &results, &soc));
    }
    if let Some(p) = &a.out {
        write_json_file(p, &doc)?;
        notes.push(format!("wrote {}", p.display()));
    }
    let mut out = std::io::stdout().lock();
    if g.json {
        serde_json::to_writer_pretty(&mut out, &doc)?;
        writeln!(out)?;
    } else {
        print_model_table(&mut out, &doc)?;
    }
    for n in notes {
        eprintln!("{n}");
    }
    Ok(if doc.rows.iter().any(|r| r.engine == "tiletune") {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "error: tiletune's own benchmark gave no result (see above); nothing to compare against"
        );
        ExitCode::FAILURE
    })
}

/// `bench model` takes llama-bench's flags, but `--model` rather than `-m`.
fn own_bench_args(round_args: &[String]) -> Vec<String> {
    round_args
        .iter()
        .map(|a| {
            if a == "-m" {
                "--model".into()
            } else {
                a.clone()
            }
        })
        .collect()
}

fn print_model_table(out: &mut impl Write, d: &ModelComparison) -> std::io::Result<()> {
    writeln!(
        out,
        "model {}  soc {}  {} round(s), engines alternating",
        d.model, d.soc, d.rounds
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "{:<10} {:<22} {:<12} {:>7} {:>22} {:>9}",
        "engine", "version", "test", "threads", "t/s ± std", "vs tiletune"
    )?;
    for r in &d.rows {
        let ts = match r.std {
            Some(s) => format!("{:.2} ± {:.2}", r.mean, s),
            None => format!("{:.2}", r.mean),
        };
        let ratio = r.ratio.map_or("-".into(), |x| format!("{x:.2}×"));
        let version: String = r.engine_version.chars().take(22).collect();
        writeln!(
            out,
            "{:<10} {:<22} {:<12} {:>7} {:>22} {:>9}",
            r.engine, version, r.test, r.threads, ts, ratio
        )?;
    }
    if d.rows.is_empty() {
        writeln!(out, "(no engine produced a result)")?;
    }
    for s in &d.skipped {
        writeln!(out, "note: {s}")?;
    }
    for f in &d.failures {
        writeln!(
            out,
            "note: {} dropped in round {}: {}",
            f.engine, f.round, f.error
        )?;
    }
    Ok(())
}

// ---- compare kernels ------------------------------------------------------

/// One engine's time for one MUL_MAT shape.
#[derive(Debug, Serialize)]
struct KernelRow {
    type_a: String,
    m: u64,
    n: u64,
    k: u64,
    /// `llama.cpp`, or `tiletune <op> <isa>`.
    engine: String,
    threads: Option<usize>,
    us_per_run: f64,
    gflops: f64,
    gbytes_per_s: Option<f64>,
    /// llama.cpp's time / this time (> 1: faster than llama.cpp).
    speedup_vs_llama: f64,
}

#[derive(Debug, Serialize)]
struct KernelComparison {
    soc: String,
    command: String,
    llama_threads: usize,
    rows: Vec<KernelRow>,
    notes: Vec<String>,
}

/// ggml's spelling of a weight type (`q4_K`, not `q4_k`).
fn ggml_type(t: &str) -> String {
    let t = t.trim().to_ascii_lowercase();
    match t.strip_suffix("_k") {
        Some(base) => format!("{base}_K"),
        None => t,
    }
}

/// tiletune's bench ops for a MUL_MAT shape, as `(op, dtype, shape)`.
fn tiletune_ops(s: &MulMatShape) -> Vec<(String, String, String)> {
    let dtype = s.type_a.to_ascii_lowercase();
    let fits = |op: &str| tiletune_tuner::families::bench_dtypes(op).contains(&dtype.as_str());
    let mut v = Vec::new();
    if s.type_b != "f32" {
        return v;
    }
    let gemm = (
        "gemm".to_string(),
        dtype.clone(),
        format!("{}x{}x{}", s.n, s.m, s.k),
    );
    if s.n == 1 && fits("gemv") {
        v.push(("gemv".into(), dtype.clone(), format!("{}x{}", s.m, s.k)));
    } else if s.n == 1 {
        // llama.cpp's CPU backend quantizes activations to 8 bits (a8);
        // a32 shows what keeping them in f32 costs; the repacked GEMM at
        // m = 1 shows what decode would gain from its layout.
        for op in ["qgemv_a8", "qgemv_a32"] {
            if fits(op) {
                v.push((op.into(), dtype.clone(), format!("{}x{}", s.m, s.k)));
            }
        }
        if fits("gemm") {
            v.push(gemm);
        }
    } else if fits("gemm") {
        v.push(gemm);
    }
    v
}

fn kernels(g: &Global, a: KernelsArgs) -> anyhow::Result<ExitCode> {
    let bin = locate(
        &a.llama_test_backend_ops,
        "test-backend-ops",
        "--llama-test-backend-ops",
    )
    .map_err(|why| anyhow::anyhow!("cannot compare kernels: {why}"))?;
    if a.types.is_empty() || a.batch.is_empty() {
        anyhow::bail!("--types and --batch need at least one value each");
    }
    let types: Vec<String> = a.types.iter().map(|t| ggml_type(t)).collect();
    let batch: Vec<String> = a.batch.iter().map(u64::to_string).collect();
    // Plain (unbatched, unpermuted) products of the chosen types and token counts.
    let filter = format!(
        "^type_a=({}),type_b=f32,m=[0-9]+,n=({}),k=[0-9]+,bs=\\[1,1\\],nr=\\[1,1\\],per=\\[0,1,2,3\\]",
        types.join("|"),
        batch.join("|")
    );
    let cmd = PeerCommand::new("llama.cpp", &bin)
        .args([
            "perf", "-o", "MUL_MAT", "-b", "CPU", "--output", "sql", "-p",
        ])
        .arg(&filter)
        .timeout(Duration::from_secs(a.timeout.max(1)));
    eprintln!("running {}", cmd.display());
    let out = cmd.run()?;
    let perf = peers::parse_backend_ops("llama.cpp", &out.stdout)?;
    // test-backend-ops gives the CPU backend half the hardware threads.
    let llama_threads = (std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        / 2)
    .max(1);
    let soc = tiletune_soc::probe().context("probing this SoC")?;
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for p in &perf {
        let Some(shape) = p.mul_mat() else { continue };
        if !p.supported {
            notes.push(format!("llama.cpp does not support {}", p.params));
            continue;
        }
        if !shape.is_single() {
            continue;
        }
        let flops = shape.flops();
        let llama_us = p.us_per_run;
        rows.push(KernelRow {
            type_a: shape.type_a.clone(),
            m: shape.m,
            n: shape.n,
            k: shape.k,
            engine: "llama.cpp".into(),
            threads: Some(llama_threads),
            us_per_run: llama_us,
            gflops: flops / (llama_us * 1e3),
            gbytes_per_s: p.memory_bytes.map(|b| b as f64 / (llama_us * 1e3)),
            speedup_vs_llama: 1.0,
        });
        let ops = tiletune_ops(&shape);
        if ops.is_empty() {
            notes.push(format!(
                "tiletune has no kernel for {} with n={} (m={}, k={})",
                shape.type_a, shape.n, shape.m, shape.k
            ));
        }
        for (op, dtype, dims) in ops {
            eprintln!("tiletune {op} {dtype} {dims}");
            let k = KernelArgs {
                shape: dims.clone(),
                dtype: Some(dtype.clone()),
                isa: None,
                params: None,
                threads: Some(llama_threads),
                cold: false, // test-backend-ops reruns one weight tensor: warm
                counters: "software".into(),
                pin: Vec::new(),
                placement: None,
                seed: 1,
                quick: a.quick,
                db: None,
            };
            match bench_kernel(&KernelJob::new(&op, k), None) {
                Ok(r) => {
                    let us = r.measurement.summary.median / 1e3;
                    rows.push(KernelRow {
                        type_a: shape.type_a.clone(),
                        m: shape.m,
                        n: shape.n,
                        k: shape.k,
                        engine: format!("tiletune {op} {}", r.isa),
                        threads: Some(r.threads),
                        us_per_run: us,
                        gflops: flops / (us * 1e3),
                        gbytes_per_s: Some(r.gbytes_per_s),
                        speedup_vs_llama: llama_us / us,
                    });
                }
                Err(e) => notes.push(format!("tiletune {op} {dtype} {dims}: {e:#}")),
            }
        }
    }
    if rows.is_empty() {
        notes.push(format!(
            "no MUL_MAT result matched --types {} --batch {}",
            a.types.join(","),
            batch.join(",")
        ));
    }
    let doc = KernelComparison {
        soc: soc.name.clone(),
        command: cmd.display(),
        llama_threads,
        rows,
        notes,
    };
    if let Some(p) = &a.out {
        write_json_file(p, &doc)?;
        eprintln!("wrote {}", p.display());
    }
    let mut o = std::io::stdout().lock();
    if g.json {
        serde_json::to_writer_pretty(&mut o, &doc)?;
        writeln!(o)?;
    } else {
        print_kernel_table(&mut o, &doc, &perf)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn print_kernel_table(
    out: &mut impl Write,
    d: &KernelComparison,
    perf: &[OpPerf],
) -> std::io::Result<()> {
    let build = perf.iter().find_map(|p| p.build_commit.clone());
    writeln!(
        out,
        "MUL_MAT dst(m×n) = a(k×m, type)ᵀ·b(k×n, f32); soc {}; llama.cpp {} with {} thread(s), warm cache",
        d.soc,
        build.as_deref().unwrap_or("(build unknown)"),
        d.llama_threads
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "{:<6} {:>6} {:>4} {:>6}  {:<30} {:>10} {:>9} {:>8} {:>11}",
        "type", "m", "n", "k", "engine", "µs/run", "GFLOP/s", "GB/s", "vs llama"
    )?;
    for r in &d.rows {
        writeln!(
            out,
            "{:<6} {:>6} {:>4} {:>6}  {:<30} {:>10.2} {:>9.2} {:>8} {:>10.2}×",
            r.type_a,
            r.m,
            r.n,
            r.k,
            r.engine,
            r.us_per_run,
            r.gflops,
            r.gbytes_per_s.map_or("-".into(), |g| format!("{g:.2}")),
            r.speedup_vs_llama
        )?;
    }
    for n in &d.notes {
        writeln!(out, "note: {n}")?;
    }
    Ok(())
}

// ---- compare ppl -----------------------------------------------------------

#[derive(Debug, Serialize)]
struct PplRow {
    engine: String,
    engine_version: String,
    /// `W4A32`, `W4A8`, or `llama.cpp` for llama-perplexity's own scheme.
    mode: String,
    ppl: f64,
    plus_minus: Option<f64>,
    chunks: Option<usize>,
    /// Tokens evaluated per second and where that rate comes from.
    tokens_per_s: Option<f64>,
    rate_source: String,
}

#[derive(Debug, Serialize)]
struct PplComparison {
    soc: String,
    soc_fingerprint: String,
    model: String,
    file: String,
    ctx: usize,
    threads: usize,
    rows: Vec<PplRow>,
    notes: Vec<String>,
}

fn ppl(g: &Global, a: PplArgs) -> anyhow::Result<ExitCode> {
    if !a.model.is_file() {
        anyhow::bail!("model {} does not exist", a.model.display());
    }
    if !a.file.is_file() {
        anyhow::bail!("text file {} does not exist", a.file.display());
    }
    if a.ctx < 4 {
        anyhow::bail!("--ctx must be at least 4");
    }
    let threads = match a.threads {
        Some(0) => anyhow::bail!("--threads must be at least 1"),
        Some(t) => t,
        None => std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
    };
    let timeout = Duration::from_secs(a.timeout.max(1));
    let soc = tiletune_soc::probe().context("probing this SoC")?;
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for (qmode, label) in [("a32", "W4A32"), ("a8", "W4A8")] {
        let mut cmd = PeerCommand::new("tiletune", tiletune_exe()?)
            .args(["--json", "ppl", "--model"])
            .arg(&a.model)
            .arg("--file")
            .arg(&a.file)
            .args(["--ctx".to_string(), a.ctx.to_string()])
            .args(["--qmode", qmode])
            .args(["--threads".to_string(), threads.to_string()])
            .timeout(timeout);
        if let Some(c) = a.chunks {
            cmd = cmd.args(["--chunks".to_string(), c.to_string()]);
        }
        eprintln!("running {}", cmd.display());
        match cmd
            .run()
            .map_err(anyhow::Error::from)
            .and_then(|o| own_ppl(&o.stdout))
        {
            Ok((ppl, chunks, seconds)) => rows.push(PplRow {
                engine: "tiletune".into(),
                engine_version: env!("CARGO_PKG_VERSION").into(),
                mode: label.into(),
                ppl,
                plus_minus: None,
                chunks: Some(chunks),
                tokens_per_s: (seconds > 0.0).then(|| (chunks * a.ctx) as f64 / seconds),
                rate_source: "tiletune ppl: chunks × ctx / scoring time".into(),
            }),
            Err(e) => notes.push(format!("tiletune {label} failed: {e:#}")),
        }
    }
    match locate(
        &a.llama_perplexity,
        "llama-perplexity",
        "--llama-perplexity",
    ) {
        Err(why) => notes.push(format!("llama.cpp skipped: {why}")),
        Ok(bin) => {
            let mut cmd = PeerCommand::new("llama.cpp", &bin)
                .arg("-m")
                .arg(&a.model)
                .arg("-f")
                .arg(&a.file)
                .args(["-c".to_string(), a.ctx.to_string()])
                .args(["-t".to_string(), threads.to_string()])
                .timeout(timeout);
            if let Some(c) = a.chunks {
                cmd = cmd.args(["--chunks".to_string(), c.to_string()]);
            }
            eprintln!("running {}", cmd.display());
            match cmd.run() {
                Ok(o) => {
                    let all = format!("{}\n{}", o.stdout, o.stderr);
                    match peers::parse_perplexity("llama.cpp", &all) {
                        Ok(est) => rows.push(llama_ppl_row(
                            &est,
                            llama_version(&bin, &all),
                            o.seconds,
                            a.ctx,
                        )),
                        Err(e) => notes.push(format!("{e}\n{}", peers::stderr_tail(&o.stderr, 8))),
                    }
                }
                Err(e) => notes.push(e.to_string()),
            }
        }
    }
    let doc = PplComparison {
        soc: soc.name.clone(),
        soc_fingerprint: soc.fingerprint.clone(),
        model: file_name(&a.model),
        file: file_name(&a.file),
        ctx: a.ctx,
        threads,
        rows,
        notes,
    };
    let mut done = Vec::new();
    if !a.no_store && !doc.rows.is_empty() {
        let now = now_unix();
        let results: Vec<PeerResult> = doc
            .rows
            .iter()
            .map(|r| PeerResult {
                soc: soc.fingerprint.clone(),
                model: doc.model.clone(),
                engine: r.engine.clone(),
                engine_version: r.engine_version.clone(),
                test: ppl_test_name(a.ctx, &r.mode),
                threads,
                tokens_per_s: r.tokens_per_s.unwrap_or(0.0),
                std: None,
                json: json!({
                    "kind": "perplexity",
                    "ppl": r.ppl,
                    "plus_minus": r.plus_minus,
                    "mode": r.mode,
                    "chunks": r.chunks,
                    "ctx": a.ctx,
                    "file": doc.file,
                    "rate_source": r.rate_source,
                }),
                measured_at: now,
            })
            .collect();
        done.push(store(&a.db, &results, &soc));
    }
    if let Some(p) = &a.out {
        write_json_file(p, &doc)?;
        done.push(format!("wrote {}", p.display()));
    }
    let mut o = std::io::stdout().lock();
    if g.json {
        serde_json::to_writer_pretty(&mut o, &doc)?;
        writeln!(o)?;
    } else {
        print_ppl_table(&mut o, &doc)?;
    }
    for n in done {
        eprintln!("{n}");
    }
    Ok(if doc.rows.iter().any(|r| r.engine == "tiletune") {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The peer-result test label of a perplexity run: `ppl512-w4a32`, `ppl512` (llama.cpp).
fn ppl_test_name(ctx: usize, mode: &str) -> String {
    if mode == "llama.cpp" {
        format!("ppl{ctx}")
    } else {
        format!("ppl{ctx}-{}", mode.to_ascii_lowercase())
    }
}

/// `tiletune --json ppl` prints running values, then one JSON line.
fn own_ppl(stdout: &str) -> anyhow::Result<(f64, usize, f64)> {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .context("tiletune ppl printed no JSON result line")?;
    let v: Value = serde_json::from_str(line).context("tiletune ppl's result line is not JSON")?;
    let ppl = v["ppl"]
        .as_f64()
        .filter(|x| x.is_finite())
        .context("tiletune ppl's result has no finite `ppl`")?;
    let chunks = v["chunks"].as_u64().unwrap_or(0) as usize;
    let seconds = v["seconds"].as_f64().unwrap_or(0.0);
    Ok((ppl, chunks, seconds))
}

/// llama.cpp's build as `b<number>-<commit>` (the llama-bench key), from
/// `--version` (`version: 0.5.0-dev (build 1, commit 0c1e570)`, or the older
/// `version: 1234 (0c1e570)`) or a `build: 1234 (0c1e570)` log line.
fn llama_build(text: &str) -> Option<String> {
    text.lines().find_map(|l| {
        if let Some(i) = l.find("(build ") {
            let inner = l[i + 7..].split(')').next()?;
            let (num, commit) = inner.split_once(", commit ")?;
            let n = num.trim().parse::<u64>().ok()?;
            return Some(format!("b{n}-{}", commit.trim()));
        }
        let rest = l
            .find("build: ")
            .map(|i| &l[i + 7..])
            .or_else(|| l.strip_prefix("version: "))?;
        let (num, tail) = rest.split_once(' ')?;
        let commit = tail.strip_prefix('(')?.split(')').next()?;
        num.parse::<u64>().ok().map(|n| format!("b{n}-{commit}"))
    })
}

/// The build of a llama.cpp tool, asked with `--version`.
fn llama_version(bin: &Path, log: &str) -> String {
    PeerCommand::new("llama.cpp", bin)
        .arg("--version")
        .timeout(Duration::from_secs(30))
        .run()
        .ok()
        .and_then(|o| llama_build(&format!("{}\n{}", o.stdout, o.stderr)))
        .or_else(|| llama_build(log))
        .unwrap_or_else(|| "unknown".into())
}

fn llama_ppl_row(est: &PerplexityEstimate, version: String, wall: f64, ctx: usize) -> PplRow {
    let chunks = (!est.chunks.is_empty()).then_some(est.chunks.len());
    let (tokens_per_s, rate_source) = match (est.tokens_per_s, chunks) {
        (Some(r), _) => (Some(r), "llama.cpp prompt eval time".to_string()),
        (None, Some(c)) if wall > 0.0 => (
            Some((c * ctx) as f64 / wall),
            "chunks × ctx / wall time (including load)".to_string(),
        ),
        _ => (None, "not reported".to_string()),
    };
    PplRow {
        engine: "llama.cpp".into(),
        engine_version: version,
        mode: "llama.cpp".into(),
        ppl: est.ppl,
        plus_minus: est.plus_minus,
        chunks,
        tokens_per_s,
        rate_source,
    }
}

fn print_ppl_table(out: &mut impl Write, d: &PplComparison) -> std::io::Result<()> {
    writeln!(
        out,
        "perplexity of {} on {}, ctx {}, {} thread(s); soc {}",
        d.model, d.file, d.ctx, d.threads, d.soc
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "{:<10} {:<22} {:<10} {:>20} {:>7} {:>10}",
        "engine", "version", "mode", "PPL", "chunks", "tokens/s"
    )?;
    for r in &d.rows {
        let p = match r.plus_minus {
            Some(pm) => format!("{:.4} ± {:.5}", r.ppl, pm),
            None => format!("{:.4}", r.ppl),
        };
        writeln!(
            out,
            "{:<10} {:<22} {:<10} {:>20} {:>7} {:>10}",
            r.engine,
            r.engine_version.chars().take(22).collect::<String>(),
            r.mode,
            p,
            r.chunks.map_or("-".into(), |c| c.to_string()),
            r.tokens_per_s.map_or("-".into(), |t| format!("{t:.1}"))
        )?;
    }
    for n in &d.notes {
        writeln!(out, "note: {n}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ggml_types_are_spelled_as_ggml_prints_them() {
        assert_eq!(ggml_type("Q4_0"), "q4_0");
        assert_eq!(ggml_type("q4_k"), "q4_K");
        assert_eq!(ggml_type("q6_K"), "q6_K");
    }

    #[test]
    fn mul_mat_shapes_map_to_tiletune_ops() {
        let s = MulMatShape::parse("type_a=q4_0,type_b=f32,m=4096,n=1,k=14336,bs=[1,1],nr=[1,1]")
            .unwrap();
        let ops = tiletune_ops(&s);
        assert_eq!(
            ops,
            vec![
                ("qgemv_a8".into(), "q4_0".into(), "4096x14336".into()),
                ("qgemv_a32".into(), "q4_0".into(), "4096x14336".into()),
                ("gemm".into(), "q4_0".into(), "1x4096x14336".into()),
            ]
        );
        let s = MulMatShape::parse("type_a=f16,type_b=f32,m=64,n=8,k=32").unwrap();
        assert_eq!(
            tiletune_ops(&s),
            vec![("gemm".into(), "f16".into(), "8x64x32".into())]
        );
        let s = MulMatShape::parse("type_a=f32,type_b=f32,m=64,n=1,k=32").unwrap();
        assert_eq!(
            tiletune_ops(&s),
            vec![("gemv".into(), "f32".into(), "64x32".into())]
        );
        // Quantized GEMM for formats the repacked GEMM reads (every GGUF weight
        // format tiletune runs); others: no row, a note.
        let s = MulMatShape::parse("type_a=q8_0,type_b=f32,m=64,n=512,k=32").unwrap();
        assert_eq!(
            tiletune_ops(&s),
            vec![("gemm".into(), "q8_0".into(), "512x64x32".into())]
        );
        let s = MulMatShape::parse("type_a=q6_K,type_b=f32,m=64,n=512,k=256").unwrap();
        assert_eq!(
            tiletune_ops(&s),
            vec![("gemm".into(), "q6_k".into(), "512x64x256".into())]
        );
        let s = MulMatShape::parse("type_a=iq2_xs,type_b=f32,m=64,n=1,k=32").unwrap();
        assert!(tiletune_ops(&s).is_empty());
    }

    #[test]
    fn own_bench_takes_long_model_flag() {
        let args = LlamaBenchEngine::round_args("m.gguf", &[64, 512], &[16], &[1, 2]);
        assert_eq!(
            own_bench_args(&args).join(" "),
            "--model m.gguf -p 64,512 -n 16 -t 1,2 -r 1 -o json"
        );
    }

    #[test]
    fn llama_build_is_read_from_its_log() {
        let log = "0.00.000.123 I build: 7123 (abc1234) with cc (Debian 14.2.0) 14.2.0 for x86_64-linux-gnu\n";
        assert_eq!(llama_build(log).as_deref(), Some("b7123-abc1234"));
        let v = "version: 0.5.0-dev (build 1, commit 0c1e570)\nbuilt with GNU 12.2.0 for Linux x86_64\n";
        assert_eq!(llama_build(v).as_deref(), Some("b1-0c1e570"));
        assert_eq!(
            llama_build("version: 4567 (deadbee)").as_deref(),
            Some("b4567-deadbee")
        );
        assert_eq!(llama_build("nothing here"), None);
    }

    #[test]
    fn own_ppl_reads_the_json_line_and_refuses_garbage() {
        let out = "[1]20.1 [2]19.5 \n{\"ppl\":19.5,\"chunks\":2,\"ctx\":128,\"scored\":126,\"seconds\":1.5}\n";
        let (p, c, s) = own_ppl(out).unwrap();
        assert_eq!((p, c, s), (19.5, 2, 1.5));
        assert!(own_ppl("").is_err());
        assert!(own_ppl("{not json").is_err());
        assert!(own_ppl("{\"ppl\":null}").is_err());
    }

    #[test]
    fn ppl_tests_are_named_by_ctx_and_mode() {
        assert_eq!(ppl_test_name(512, "W4A8"), "ppl512-w4a8");
        assert_eq!(ppl_test_name(128, "llama.cpp"), "ppl128");
    }
}
