//! `tiletune bench model`: prefill and decode speed of a whole model, with the
//! test definitions, statistics and JSON field names of llama.cpp's
//! `llama-bench`, which `tiletune_bench::peers::llama_bench` owns; this module
//! loads the model per thread count, runs that schedule on it and prints.

use super::model_args::{ModelArgs, load, parse_kv_type};
use super::{Global, bench_image};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::process::ExitCode;
use tiletune_bench::peers::llama_bench::{
    Format, GlibcRand, ModelInfo, PlanCounts, Printer, RunInfo, Session, Step, TensorInfo,
    TestPlan, TestRecord, TokenSource, rfc3339_now,
};
use tiletune_flow::bench::BenchModel;
use tiletune_kernels::Isa;
use tiletune_kernels::attention::KvDtype;
use tiletune_kernels::qgemv::QMode;
use tiletune_runtime::GgufFile;

/// llama-bench's `-p`, `-n` and `-d` lists, shared by `bench model` and
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
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// GGUF model file or Hugging Face model folder (see `tiletune run --help`).
    #[arg(long, short = 'm', value_name = "FILE|DIR")]
    pub model: PathBuf,
    /// File type when converting a Hugging Face folder, as `tiletune
    /// quantize` takes it (default: the checkpoint's).
    #[arg(long, value_parser = tiletune_runtime::quantize::FileType::parse, value_name = "TYPE")]
    pub quant: Option<tiletune_runtime::quantize::FileType>,
    #[command(flatten)]
    pub tests: TestLengths,
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
    /// llama.cpp's `mmproj` GGUF of a vision model (see `tiletune run --help`).
    #[arg(long, value_name = "FILE")]
    pub mmproj: Option<PathBuf>,
    /// Also time the vision tower on this PNG or JPEG (repeatable): encode
    /// time per image and thread count (ms ± std over -r runs after a
    /// warm-up), the tokens it becomes, and the GEMM / attention / rest
    /// shares of the time.
    #[arg(long, value_name = "FILE")]
    pub image: Vec<PathBuf>,
}

fn parse_qmode(s: &str) -> Result<QMode, String> {
    match s {
        "a8" => Ok(QMode::A8),
        "a32" => Ok(QMode::A32),
        _ => Err(format!("`{s}` is not a mode; use a8 or a32")),
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
        && a.image.is_empty()
    {
        anyhow::bail!(
            "nothing to run: every -p and -n is 0; pass e.g. -p 512 -n 128 (or --image FILE)"
        );
    }
    if !a.model.exists() {
        anyhow::bail!(
            "model {} does not exist; pass a GGUF file or a Hugging Face model folder with --model",
            a.model.display()
        );
    }
    Ok(())
}

pub fn run(g: &Global, mut a: Args) -> anyhow::Result<ExitCode> {
    a.model = super::pull::model_path(&a.model)?;
    check(&a)?;
    let threads = if a.threads.is_empty() {
        vec![tiletune_runtime::plan::this_soc().1.cores.max(1)]
    } else {
        a.threads.clone()
    };
    let plan = TestPlan::new(&a.tests.n_prompt, &a.tests.n_gen, &a.tests.n_depth);
    let tests = plan.tests();
    let ctx = plan.ctx();
    let cpu_info = tiletune_soc::probe().map_or_else(|_| "unknown".to_string(), |s| s.model_name);
    let isa = Isa::best().name();
    let backend = format!("tiletune ({isa})");
    let format = if g.json { "json" } else { a.output.as_str() };
    let mut printer = Printer::new(
        Format::parse(format).unwrap_or(Format::Markdown),
        a.kv_type != KvDtype::F16,
        backend.chars().count(),
        build_commit(),
        env!("CARGO_PKG_VERSION"),
    );
    let runs_per_test = a.reps + usize::from(!a.no_warmup);
    let bar = ProgressBar::new((threads.len() * tests.len() * runs_per_test) as u64);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .expect("static template")
            .progress_chars("=> "),
    );
    let mut rng = GlibcRand::new(1);
    let images = bench_image::read_all(&a.image)?;
    let mut image_rows = Vec::new();
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
                mmproj: a.mmproj.clone(),
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
            let run_info = RunInfo {
                build_commit: build_commit().to_string(),
                tiletune_version: env!("CARGO_PKG_VERSION").to_string(),
                cpu_info: cpu_info.clone(),
                backends: backend.clone(),
                isa: isa.to_string(),
                model: model_info(&a.model, &l.gguf, l.cfg.arch.gguf_name())?,
                n_batch: a.n_batch,
                kv_type: a.kv_type.name().into(),
                warmup: !a.no_warmup,
            };
            let (tuned, nearest, default) = l.plan.counts();
            let counts = PlanCounts {
                tuned,
                nearest,
                default,
                differ: l.plan.differ,
            };
            // A Hugging Face folder may come without tokenizer.json: the
            // config's vocabulary and BOS id serve for random prompts.
            let (n_vocab, bos) = match l.tokenizer() {
                Ok(t) => (
                    t.vocab_size().min(l.cfg.vocab).max(1) as u32,
                    t.adds_bos().then(|| t.bos()).flatten(),
                ),
                Err(_) => (l.cfg.vocab.max(1) as u32, l.cfg.bos_id),
            };
            let src = TokenSource {
                n_vocab,
                bos,
                n_batch: a.n_batch,
            };
            let model = BenchModel(&l.model);
            let mut session = Session::new(&model, l.model.new_state(), src);
            for &test in &tests {
                let name = test.name();
                let test_time = rfc3339_now();
                let samples_ns =
                    session.time_test(&mut rng, test, a.reps, !a.no_warmup, |step| match step {
                        Step::WarmingUp => bar.set_message(format!("t={t} {name} warm-up")),
                        Step::FillingDepth => {
                            bar.set_message(format!("t={t} {name} filling depth"))
                        }
                        Step::Run { rep, reps } => {
                            bar.set_message(format!("t={t} {name} run {rep}/{reps}"))
                        }
                        Step::Done => bar.inc(1),
                    })?;
                let rec = TestRecord::new(&run_info, t, counts, test, test_time, samples_ns);
                bar.suspend(|| printer.print(&mut out, &rec))?;
            }
            for (path, img) in &images {
                bar.set_message(format!("t={t} encoding {}", path.display()));
                image_rows.push(bench_image::time_image(
                    &l,
                    path,
                    img,
                    a.reps,
                    !a.no_warmup,
                )?);
            }
        }
        Ok(())
    })();
    bar.finish_and_clear();
    printer.finish(&mut out)?;
    bench_image::print(&mut out, format, &image_rows)?;
    result?;
    Ok(ExitCode::SUCCESS)
}

/// The model's description in every record.
fn model_info(path: &std::path::Path, g: &GgufFile, arch: &str) -> anyhow::Result<ModelInfo> {
    let file_type = g
        .get("general.file_type")
        .and_then(|_| g.get_u32("general.file_type").ok());
    Ok(ModelInfo::describe(
        path.display().to_string(),
        arch,
        file_type,
        g.tensors().iter().map(|t| TensorInfo {
            type_name: t.ggml_type.name(),
            bytes: t.size,
            n_elements: t.n_elements(),
        }),
        tiletune_runtime::problems::decode_weight_bytes(g)?,
    ))
}
