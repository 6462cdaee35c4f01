//! `tiletune bench model`: prefill and decode speed of a whole model, with the
//! test definitions, statistics and JSON field names of llama.cpp's
//! `llama-bench` (tools/llama-bench/llama-bench.cpp), so that one parser reads
//! both tools' output and their numbers mean the same thing:
//!
//! - `pp<N>`: an N-token prompt of random ids (BOS first when the model adds
//!   one) processed from an empty cache in batches of `-b` tokens (default
//!   2048, so one batch), logits of the last token only;
//! - `tg<N>`: N tokens fed one at a time from an empty cache (BOS first, then
//!   random ids), logits every step;
//! - a warm-up run first (the whole prompt for pp, one token for tg), then
//!   `-r` timed repetitions, the cache cleared before each;
//! - tokens/s per repetition is `1e9 · N / ns`; `avg_ts`/`stddev_ts` are the
//!   mean and sample standard deviation of those, `avg_ns`/`stddev_ns` the same
//!   in integer nanoseconds, with llama-bench's formulas.
//!
//! Random ids come from glibc's `rand()` seeded with 1, drawn in the order
//! llama-bench draws them, so the same run order feeds the same tokens.

use super::Global;
use super::run::{ModelArgs, load, parse_kv_type, parse_quant};
use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tiletune_kernels::Isa;
use tiletune_kernels::attention::KvDtype;
use tiletune_kernels::qgemv::QMode;
use tiletune_runtime::GgufFile;
use tiletune_runtime::models::{FastModel, RunState};

/// llama-bench's `-p` and `-n` lists, shared by `bench model` and
/// `compare` so both read the same tests from the same flags.
#[derive(Debug, Clone, clap::Args)]
pub struct TestLengths {
    /// Prompt lengths to test (pp<N>), comma separated; 0 skips the test.
    #[arg(
        short = 'p',
        long = "n-prompt",
        value_delimiter = ',',
        default_value = "512"
    )]
    pub n_prompt: Vec<usize>,
    /// Generation lengths to test (tg<N>), comma separated; 0 skips the test.
    #[arg(
        short = 'n',
        long = "n-gen",
        value_delimiter = ',',
        default_value = "128"
    )]
    pub n_gen: Vec<usize>,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// GGUF model file or Hugging Face model folder (see `tiletune run --help`).
    #[arg(long, short = 'm', value_name = "FILE|DIR")]
    pub model: PathBuf,
    /// Weight type of 2-D weights when converting a Hugging Face folder
    /// (f32, f16, q8_0, q4_0, q4_1, q5_0, mxfp4; default: the checkpoint's).
    #[arg(long, value_parser = parse_quant, value_name = "TYPE")]
    pub quant: Option<tiletune_runtime::convert::WeightType>,
    #[command(flatten)]
    pub tests: TestLengths,
    /// Context depths, comma separated (llama-bench's -d): each test runs
    /// after this many prompt tokens are already in the KV cache (filled
    /// once per depth, untimed, and restored before every repetition).
    #[arg(
        short = 'd',
        long = "n-depth",
        value_delimiter = ',',
        default_value = "0"
    )]
    pub n_depth: Vec<usize>,
    /// Thread counts, comma separated [default: online cores].
    #[arg(short = 't', long = "threads", value_delimiter = ',', value_parser = super::parse_threads)]
    pub threads: Vec<usize>,
    /// Timed repetitions of each test (after one warm-up run).
    #[arg(short = 'r', long = "repetitions", default_value_t = 5)]
    pub reps: usize,
    /// Largest number of prompt tokens per forward call.
    #[arg(short = 'b', long = "batch-size", default_value_t = 2048)]
    pub n_batch: usize,
    /// Output format: md (a table like llama-bench's), json or jsonl
    /// (llama-bench's field names); --json is -o json.
    #[arg(short = 'o', long = "output", default_value = "md", value_parser = ["md", "json", "jsonl"])]
    pub output: String,
    /// Skip the warm-up run.
    #[arg(long)]
    pub no_warmup: bool,
    /// Selector table (default: the user's table, see `tiletune table`).
    #[arg(long, value_name = "PATH")]
    pub db: Option<PathBuf>,
    /// Force the activation mode of quantized weights: `a8` or `a32`.
    #[arg(long, value_parser = parse_qmode)]
    pub qmode: Option<QMode>,
    /// KV cache page type (llama-bench's -ctk/-ctv): f32, f16 or q8_0.
    #[arg(long, value_parser = parse_kv_type, default_value = "f16")]
    pub kv_type: KvDtype,
}

fn parse_qmode(s: &str) -> Result<QMode, String> {
    match s {
        "a8" => Ok(QMode::A8),
        "a32" => Ok(QMode::A32),
        _ => Err(format!("`{s}` is not a mode; use a8 or a32")),
    }
}

/// glibc's `rand()` (the TYPE_3 additive feedback generator behind `srand`/
/// `rand`), which llama-bench draws its token ids from, seeded with 1 as a
/// program that never calls `srand` is.
pub(crate) struct GlibcRand {
    r: [u32; 34],
    i: usize,
}

impl GlibcRand {
    pub(crate) fn new(seed: u32) -> Self {
        let mut r = [0u32; 34];
        r[0] = seed;
        for i in 1..31 {
            // 16807 · r mod (2³¹ − 1), as glibc computes it on signed ints.
            let v = (16807 * i64::from(r[i - 1] as i32)) % 2_147_483_647;
            r[i] = if v < 0 { v + 2_147_483_647 } else { v } as u32;
        }
        for i in 31..34 {
            r[i] = r[i - 31];
        }
        let mut g = GlibcRand { r, i: 0 };
        // glibc discards the first 310 outputs of the recurrence.
        for _ in 34..344 {
            g.step();
        }
        g
    }

    /// r[i] = r[i−31] + r[i−3] over a 34-entry ring.
    fn step(&mut self) -> u32 {
        let i = self.i;
        let v = self.r[(i + 3) % 34].wrapping_add(self.r[(i + 31) % 34]);
        self.r[i] = v;
        self.i = (i + 1) % 34;
        v
    }

    /// One `rand()` value in `0..=i32::MAX`.
    pub(crate) fn next(&mut self) -> u32 {
        self.step() >> 1
    }
}

/// One test's result, with llama-bench's field names and meanings (fields of
/// llama-bench that do not apply to a CPU-only engine are left out), then
/// tiletune's own fields.
#[derive(Debug, Clone, Serialize)]
struct TestRecord {
    build_commit: String,
    build_number: u64,
    cpu_info: String,
    gpu_info: String,
    backends: String,
    model_filename: String,
    model_type: String,
    model_size: u64,
    model_n_params: u64,
    n_batch: usize,
    n_ubatch: usize,
    n_threads: usize,
    type_k: String,
    type_v: String,
    n_prompt: usize,
    n_gen: usize,
    n_depth: usize,
    test_time: String,
    avg_ns: u64,
    stddev_ns: u64,
    avg_ts: f64,
    stddev_ts: f64,
    samples_ns: Vec<u64>,
    samples_ts: Vec<f64>,
    // tiletune's own fields.
    engine: &'static str,
    tiletune_version: &'static str,
    isa: &'static str,
    /// Plan entries per source: how much of the model ran tuned kernels.
    plan: PlanCounts,
    warmup: bool,
}

#[derive(Debug, Clone, Copy, Serialize)]
struct PlanCounts {
    tuned: usize,
    nearest: usize,
    default: usize,
}

/// llama-bench's `avg`: integer division for integers.
fn avg_u64(v: &[u64]) -> u64 {
    if v.is_empty() {
        return 0;
    }
    (v.iter().map(|&x| u128::from(x)).sum::<u128>() / v.len() as u128) as u64
}

/// llama-bench's `stdev` on integers: `sqrt(Σx²/(n−1) − mean²·n/(n−1))` in
/// integer arithmetic (u128 here so large samples cannot overflow; a
/// negative radicand from truncation is 0 rather than a wrapped value).
fn stdev_u64(v: &[u64]) -> u64 {
    if v.len() <= 1 {
        return 0;
    }
    let n = v.len() as u128;
    let mean = u128::from(avg_u64(v));
    let sq: u128 = v.iter().map(|&x| u128::from(x) * u128::from(x)).sum();
    let rad = (sq / (n - 1)).saturating_sub(mean * mean * n / (n - 1));
    (rad as f64).sqrt() as u64
}

fn avg_f64(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.iter().sum::<f64>() / v.len() as f64
}

/// llama-bench's `stdev` on doubles; a radicand that rounds below zero
/// (equal samples) gives 0, where llama-bench would print nan.
fn stdev_f64(v: &[f64]) -> f64 {
    if v.len() <= 1 {
        return 0.0;
    }
    let n = v.len() as f64;
    let mean = avg_f64(v);
    let sq: f64 = v.iter().map(|x| x * x).sum();
    (sq / (n - 1.0) - mean * mean * n / (n - 1.0))
        .max(0.0)
        .sqrt()
}

/// RFC 3339 UTC time (`%FT%TZ`), as llama-bench's `test_time`.
fn rfc3339_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Days since 1970-01-01 to a civil date (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// llama.cpp's name of a GGUF `general.file_type` (`llama_model_ftype_name`).
fn ftype_name(ft: u32) -> Option<&'static str> {
    Some(match ft {
        0 => "all F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K - Medium",
        11 => "Q3_K - Small",
        12 => "Q3_K - Medium",
        13 => "Q3_K - Large",
        14 => "Q4_K - Small",
        15 => "Q4_K - Medium",
        16 => "Q5_K - Small",
        17 => "Q5_K - Medium",
        18 => "Q6_K",
        32 => "BF16",
        38 => "MXFP4 MoE",
        _ => return None,
    })
}

/// What describes the model in every record.
struct ModelInfo {
    filename: String,
    /// `<arch> <params> <file type>`, the shape of llama.cpp's model description.
    desc: String,
    size: u64,
    n_params: u64,
}

impl ModelInfo {
    fn of(path: &std::path::Path, g: &GgufFile, arch: &str) -> Self {
        let size = g.tensors().iter().map(|t| t.size).sum();
        let n_params: u64 = g.tensors().iter().map(|t| t.n_elements()).sum();
        let label = if n_params >= 1_000_000_000 {
            format!("{:.1}B", n_params as f64 / 1e9)
        } else {
            format!("{}M", (n_params as f64 / 1e6).round())
        };
        let ftype = match g.get("general.file_type") {
            Some(_) => g.get_u32("general.file_type").ok().and_then(ftype_name),
            None => None,
        };
        // Without a file type, name the type holding most of the bytes.
        let ftype = ftype.map(str::to_string).unwrap_or_else(|| {
            let mut by: Vec<(String, u64)> = Vec::new();
            for t in g.tensors() {
                let n = t.ggml_type.name().to_string();
                match by.iter_mut().find(|(k, _)| *k == n) {
                    Some((_, s)) => *s += t.size,
                    None => by.push((n, t.size)),
                }
            }
            by.into_iter()
                .max_by_key(|(_, s)| *s)
                .map_or_else(|| "?".to_string(), |(k, _)| k)
        });
        ModelInfo {
            filename: path.display().to_string(),
            desc: format!("{arch} {label} {ftype}"),
            size,
            n_params,
        }
    }
}

/// Where the results go as each test finishes (llama-bench prints as it goes).
enum Printer {
    /// `kv` adds llama-bench's type_k/type_v columns (shown when the cache
    /// type is not llama-bench's default, f16).
    /// `backend` is the backend column's width (all rows share the backend).
    Markdown {
        header: bool,
        kv: bool,
        backend: usize,
    },
    Json {
        first: bool,
    },
    Jsonl,
}

/// llama-bench's markdown columns and widths (negative: left aligned).
fn md_columns(kv: bool, backend: usize) -> Vec<(&'static str, i32)> {
    let mut c = vec![
        ("model", -30),
        ("size", 10),
        ("params", 10),
        ("backend", backend.max(10) as i32),
        ("threads", 7),
    ];
    if kv {
        c.extend([("type_k", 6), ("type_v", 6)]);
    }
    c.extend([("test", 15), ("t/s", 20)]);
    c
}

fn md_row(out: &mut impl Write, cols: &[(&str, i32)], cells: &[String]) -> std::io::Result<()> {
    write!(out, "|")?;
    for ((_, w), c) in cols.iter().zip(cells) {
        let width = w.unsigned_abs() as usize;
        if *w < 0 {
            write!(out, " {c:<width$} |")?;
        } else {
            write!(out, " {c:>width$} |")?;
        }
    }
    writeln!(out)
}

fn test_name(r: &TestRecord) -> String {
    let name = match (r.n_prompt, r.n_gen) {
        (p, 0) => format!("pp{p}"),
        (0, n) => format!("tg{n}"),
        (p, n) => format!("pp{p}+tg{n}"),
    };
    if r.n_depth > 0 {
        format!("{name} @ d{}", r.n_depth)
    } else {
        name
    }
}

impl Printer {
    fn print(&mut self, out: &mut impl Write, r: &TestRecord) -> anyhow::Result<()> {
        match self {
            Printer::Markdown {
                header,
                kv,
                backend,
            } => {
                let cols = md_columns(*kv, *backend);
                if !*header {
                    *header = true;
                    let names: Vec<String> = cols.iter().map(|(n, _)| n.to_string()).collect();
                    md_row(out, &cols, &names)?;
                    write!(out, "|")?;
                    for &(_, w) in &cols {
                        let dashes = "-".repeat(w.unsigned_abs() as usize - 1);
                        write!(out, " {dashes}{} |", if w > 0 { ':' } else { '-' })?;
                    }
                    writeln!(out)?;
                }
                let size = if r.model_size < 1 << 30 {
                    format!("{:.2} MiB", r.model_size as f64 / 1024.0 / 1024.0)
                } else {
                    format!("{:.2} GiB", r.model_size as f64 / 1024.0 / 1024.0 / 1024.0)
                };
                let params = if r.model_n_params < 1_000_000_000 {
                    format!("{:.2} M", r.model_n_params as f64 / 1e6)
                } else {
                    format!("{:.2} B", r.model_n_params as f64 / 1e9)
                };
                let mut cells = vec![
                    r.model_type.clone(),
                    size,
                    params,
                    r.backends.clone(),
                    r.n_threads.to_string(),
                ];
                if *kv {
                    cells.extend([r.type_k.clone(), r.type_v.clone()]);
                }
                cells.extend([
                    test_name(r),
                    format!("{:.2} ± {:.2}", r.avg_ts, r.stddev_ts),
                ]);
                md_row(out, &cols, &cells)?;
            }
            Printer::Json { first } => {
                let sep = if *first { "[\n" } else { ",\n" };
                *first = false;
                write!(out, "{sep}{}", serde_json::to_string_pretty(r)?)?;
            }
            Printer::Jsonl => writeln!(out, "{}", serde_json::to_string(r)?)?,
        }
        out.flush()?;
        Ok(())
    }

    fn finish(&mut self, out: &mut impl Write) -> anyhow::Result<()> {
        match self {
            Printer::Markdown { header: true, .. } => writeln!(
                out,
                "\nbuild: {} ({}), tiletune {}",
                build_commit(),
                0,
                env!("CARGO_PKG_VERSION")
            )?,
            Printer::Json { first } => {
                writeln!(out, "{}]", if *first { "[" } else { "\n" })?;
            }
            _ => {}
        }
        Ok(())
    }
}

/// The commit the binary was built from, when the build said
/// (`TILETUNE_BUILD_COMMIT` at compile time).
fn build_commit() -> &'static str {
    option_env!("TILETUNE_BUILD_COMMIT").unwrap_or("unknown")
}

/// The flags checked once, before any model is loaded.
fn check(a: &Args) -> anyhow::Result<()> {
    if a.reps == 0 {
        anyhow::bail!("--repetitions (-r) must be at least 1");
    }
    if a.n_batch == 0 {
        anyhow::bail!("--batch-size (-b) must be at least 1");
    }
    if a.threads.contains(&0) {
        anyhow::bail!("--threads (-t) takes counts of at least 1, e.g. -t 1,2");
    }
    if a.tests
        .n_prompt
        .iter()
        .chain(&a.tests.n_gen)
        .all(|&n| n == 0)
    {
        anyhow::bail!("nothing to run: every -p and -n is 0; pass e.g. -p 512 -n 128");
    }
    if !a.model.exists() {
        anyhow::bail!(
            "model {} does not exist; pass a GGUF file or a Hugging Face model folder with --model",
            a.model.display()
        );
    }
    Ok(())
}

pub fn run(g: &Global, a: Args) -> anyhow::Result<ExitCode> {
    check(&a)?;
    let threads = if a.threads.is_empty() {
        vec![tiletune_runtime::plan::this_soc().1.cores.max(1)]
    } else {
        a.threads.clone()
    };
    let prompts: Vec<usize> = a
        .tests
        .n_prompt
        .iter()
        .copied()
        .filter(|&n| n > 0)
        .collect();
    let gens: Vec<usize> = a.tests.n_gen.iter().copied().filter(|&n| n > 0).collect();
    let depths: Vec<usize> = if a.n_depth.is_empty() {
        vec![0]
    } else {
        a.n_depth.clone()
    };
    let ctx = prompts.iter().chain(&gens).copied().max().unwrap_or(1)
        + depths.iter().copied().max().unwrap_or(0);
    let cpu_info = tiletune_soc::probe().map_or_else(|_| "unknown".to_string(), |s| s.model_name);
    let isa = Isa::best().name();
    let backend = format!("tiletune ({isa})");
    let format = if g.json { "json" } else { a.output.as_str() };
    let mut printer = match format {
        "json" => Printer::Json { first: true },
        "jsonl" => Printer::Jsonl,
        _ => Printer::Markdown {
            header: false,
            kv: a.kv_type != KvDtype::F16,
            backend: backend.chars().count(),
        },
    };
    let runs_per_test = a.reps + usize::from(!a.no_warmup);
    let bar = ProgressBar::new(
        (threads.len() * depths.len() * (prompts.len() + gens.len()) * runs_per_test) as u64,
    );
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .expect("static template")
            .progress_chars("=> "),
    );
    let mut rng = GlibcRand::new(1);
    let mut out = std::io::stdout().lock();
    let result = (|| -> anyhow::Result<()> {
        for &t in &threads {
            let margs = ModelArgs {
                model: a.model.clone(),
                db: a.db.clone(),
                threads: Some(t),
                qmode: a.qmode,
                quant: a.quant,
                kv_type: a.kv_type,
            };
            bar.set_message(format!("loading with {t} threads"));
            let l = load(&margs, ctx)?;
            if g.verbose {
                bar.suspend(|| eprintln!("{}", l.plan.summary()));
            }
            if ctx > l.model.max_ctx() {
                anyhow::bail!(
                    "a test needs {ctx} positions but the model holds at most {}; use smaller -p/-n/-d",
                    l.model.max_ctx()
                );
            }
            let info = ModelInfo::of(&a.model, &l.gguf, l.cfg.arch.gguf_name());
            let (tuned, nearest, default) = l.plan.counts();
            // A Hugging Face folder may come without tokenizer.json: the
            // config's vocabulary and BOS id serve for random prompts.
            let (n_vocab, bos) = match l.tok() {
                Ok(t) => (
                    t.vocab_size().min(l.cfg.vocab).max(1) as u32,
                    t.adds_bos().then(|| t.bos()).flatten(),
                ),
                Err(_) => (l.cfg.vocab.max(1) as u32, l.cfg.bos_id),
            };
            let mut st = l.model.new_state();
            // The cache after the last depth fill, as llama-bench keeps it.
            let mut depth_state: Option<(usize, RunState)> = None;
            let tests = depths.iter().flat_map(|&d| {
                prompts
                    .iter()
                    .map(move |&p| (d, p, 0))
                    .chain(gens.iter().map(move |&n| (d, 0, n)))
            });
            for (n_depth, n_prompt, n_gen) in tests {
                let mut name = if n_gen == 0 {
                    format!("pp{n_prompt}")
                } else {
                    format!("tg{n_gen}")
                };
                if n_depth > 0 {
                    name += &format!(" @ d{n_depth}");
                }
                let test_time = rfc3339_now();
                let run = |st: &mut RunState, rng: &mut GlibcRand, p: usize, n: usize| {
                    run_test(&l.model, st, rng, p, n, a.n_batch, bos, n_vocab)
                };
                if !a.no_warmup {
                    bar.set_message(format!("t={t} {name} warm-up"));
                    st.reset();
                    // llama-bench warms up with the whole prompt, or one token.
                    run(&mut st, &mut rng, n_prompt, n_gen.min(1))?;
                    bar.inc(1);
                }
                let mut samples_ns = Vec::with_capacity(a.reps);
                for rep in 0..a.reps {
                    st.reset();
                    if n_depth > 0 {
                        match &depth_state {
                            Some((d, cached)) if *d == n_depth => st.clone_from(cached),
                            _ => {
                                bar.set_message(format!("t={t} {name} filling depth"));
                                test_prompt(
                                    &l.model, &mut st, &mut rng, n_depth, a.n_batch, bos, n_vocab,
                                )?;
                                depth_state = Some((n_depth, st.clone()));
                            }
                        }
                    }
                    bar.set_message(format!("t={t} {name} run {}/{}", rep + 1, a.reps));
                    let t0 = Instant::now();
                    run(&mut st, &mut rng, n_prompt, n_gen)?;
                    samples_ns.push(t0.elapsed().as_nanos().max(1) as u64);
                    bar.inc(1);
                }
                let n_tokens = (n_prompt + n_gen) as f64;
                let samples_ts: Vec<f64> = samples_ns
                    .iter()
                    .map(|&ns| 1e9 * n_tokens / ns as f64)
                    .collect();
                let rec = TestRecord {
                    build_commit: build_commit().to_string(),
                    build_number: 0,
                    cpu_info: cpu_info.clone(),
                    gpu_info: String::new(),
                    backends: backend.clone(),
                    model_filename: info.filename.clone(),
                    model_type: info.desc.clone(),
                    model_size: info.size,
                    model_n_params: info.n_params,
                    n_batch: a.n_batch,
                    n_ubatch: a.n_batch,
                    n_threads: t,
                    type_k: a.kv_type.name().into(),
                    type_v: a.kv_type.name().into(),
                    n_prompt,
                    n_gen,
                    n_depth,
                    test_time,
                    avg_ns: avg_u64(&samples_ns),
                    stddev_ns: stdev_u64(&samples_ns),
                    avg_ts: avg_f64(&samples_ts),
                    stddev_ts: stdev_f64(&samples_ts),
                    samples_ns,
                    samples_ts,
                    engine: "tiletune",
                    tiletune_version: env!("CARGO_PKG_VERSION"),
                    isa,
                    plan: PlanCounts {
                        tuned,
                        nearest,
                        default,
                    },
                    warmup: !a.no_warmup,
                };
                bar.suspend(|| printer.print(&mut out, &rec))?;
            }
        }
        Ok(())
    })();
    bar.finish_and_clear();
    printer.finish(&mut out)?;
    result?;
    Ok(ExitCode::SUCCESS)
}

/// One run of a test: the prompt part, then the generation part.
#[allow(clippy::too_many_arguments)]
fn run_test(
    model: &FastModel,
    st: &mut RunState,
    rng: &mut GlibcRand,
    n_prompt: usize,
    n_gen: usize,
    n_batch: usize,
    bos: Option<u32>,
    n_vocab: u32,
) -> anyhow::Result<()> {
    if n_prompt > 0 {
        test_prompt(model, st, rng, n_prompt, n_batch, bos, n_vocab)?;
    }
    if n_gen > 0 {
        test_gen(model, st, rng, n_gen, bos, n_vocab)?;
    }
    Ok(())
}

/// llama-bench's `test_prompt`: `n_prompt` random ids (BOS first when the
/// model adds it) in batches of `n_batch`.
pub(crate) fn test_prompt(
    model: &FastModel,
    st: &mut RunState,
    rng: &mut GlibcRand,
    n_prompt: usize,
    n_batch: usize,
    bos: Option<u32>,
    n_vocab: u32,
) -> anyhow::Result<()> {
    let mut tokens = Vec::with_capacity(n_batch.min(n_prompt));
    let mut done = 0;
    while done < n_prompt {
        let n = (n_prompt - done).min(n_batch);
        tokens.clear();
        tokens.push(match bos {
            Some(b) if done == 0 => b,
            _ => rng.next() % n_vocab,
        });
        tokens.extend((1..n).map(|_| rng.next() % n_vocab));
        model
            .forward(&tokens, st, false)
            .context("prompt batch failed")?;
        done += n;
    }
    Ok(())
}

/// llama-bench's `test_gen`: BOS (or a random id), then `n_gen` single-token
/// steps, each followed by a new random id.
pub(crate) fn test_gen(
    model: &FastModel,
    st: &mut RunState,
    rng: &mut GlibcRand,
    n_gen: usize,
    bos: Option<u32>,
    n_vocab: u32,
) -> anyhow::Result<()> {
    let mut token = bos.unwrap_or_else(|| rng.next() % n_vocab);
    for _ in 0..n_gen {
        model
            .forward(&[token], st, false)
            .context("generation step failed")?;
        token = rng.next() % n_vocab;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glibc_rand_matches_glibc_with_seed_1() {
        let mut r = GlibcRand::new(1);
        let got: Vec<u32> = (0..5).map(|_| r.next()).collect();
        assert_eq!(
            got,
            [1804289383, 846930886, 1681692777, 1714636915, 1957747793]
        );
    }

    #[test]
    fn statistics_follow_llama_bench() {
        assert_eq!(avg_u64(&[]), 0);
        assert_eq!(stdev_u64(&[5]), 0);
        assert_eq!(avg_u64(&[1, 2]), 1);
        // Σx² = 1400, mean = 20 (60/3): 1400/2 − 400·3/2 = 100 → 10.
        assert_eq!(stdev_u64(&[10, 20, 30]), 10);
        let ts = [10.0, 20.0, 30.0];
        assert!((avg_f64(&ts) - 20.0).abs() < 1e-12);
        assert!((stdev_f64(&ts) - 10.0).abs() < 1e-9);
        // Equal samples: the formula leaves only rounding error.
        assert!(stdev_f64(&[3.3, 3.3, 3.3]) < 1e-6);
    }

    #[test]
    fn test_time_is_rfc3339() {
        let t = rfc3339_now();
        assert_eq!(t.len(), 20, "{t}");
        assert!(
            t.ends_with('Z') && &t[4..5] == "-" && &t[10..11] == "T",
            "{t}"
        );
    }
}
