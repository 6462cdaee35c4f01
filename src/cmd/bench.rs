//! `tiletune bench`: measurements from the command line. `bench roofline`
//! measures this machine's ceilings (STREAM bandwidth, FMA peak per ISA lane)
//! with `tiletune-bench` and prints them; `bench <family>` times one pinned
//! configuration of a kernel family (built by
//! `tiletune_tuner::families::instantiate_one`, validated once against the
//! scalar reference before any timing) and relates it to those ceilings.

use super::Global;
use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use tiletune_bench::Environment;
use tiletune_bench::roofline::{Ceilings, FmaIsa, Progress, RooflineConfig, measure_ceilings};
use tiletune_bench::{Harness, MeasureConfig, Measurement};
use tiletune_kernels::Isa;
use tiletune_pmu::EventSetKind;
use tiletune_tuner::families::{self, Machine, OneConfig};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: BenchCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// Measure this machine's ceilings: memory bandwidth (STREAM copy/triad and read-only,
    /// 1..N threads) and f32 FMA peak per ISA lane (1..N threads).
    Roofline(RooflineArgs),
    /// Prefill and decode tokens/s of a model, llama-bench compatible
    /// (pp<N>/tg<N> tests, -p/-n/-t lists, -r repetitions, -o md|json|jsonl).
    Model(super::bench_model::Args),
    /// Time f32 GEMV y = W·x (weights f32 or f16); --shape NxK.
    Gemv(KernelArgs),
    /// Time f32 GEMM C = A·Wᵀ (weights f32 or f16); --shape MxNxK.
    Gemm(KernelArgs),
    /// Time quantized GEMV; --shape NxK, --dtype q4_0|q4_1|q5_0|q5_1|q8_0|q4_k|q6_k|mxfp4.
    Qgemv(QgemvArgs),
    /// Time an element-wise activation in place; --shape LEN.
    Eltwise(EltwiseArgs),
    /// Time RMSNorm or LayerNorm; --shape ROWSxDIM.
    Norm(NormArgs),
    /// Time row softmax in place; --shape ROWSxDIM.
    Softmax(KernelArgs),
    /// Time RoPE (rotate-half, θ = 10000) in place; --shape ROWSxHEADSxHEAD_DIM.
    Rope(KernelArgs),
    /// Time paged attention; --shape HEADSxKV_HEADSxHEAD_DIMxCTX, --dtype
    /// f32|f16|q8_0 (the KV cache), --rows 1 = decode, more = prefill.
    Attention(AttentionArgs),
    /// Time int8 GEMM (GEMV at M = 1); --shape MxNxK, --dtype i8 (symmetric
    /// activations) or i8_zp (with a zero point).
    I8gemm(KernelArgs),
    /// Time the group-quantized embedding: token lookup (--shape
    /// TOKENSxVOCABxDIM) or the tied LM head GEMV (--lm-head, --shape
    /// VOCABxDIM); --dtype u1..u7.
    Embed(EmbedArgs),
    /// Time the fused projection + RoPE; --shape MxHEADSxHEAD_DIMxK (f32 or f16 weights).
    #[command(alias = "matmul_rope")]
    MatmulRope(KernelArgs),
}

/// What every kernel family's bench takes.
#[derive(Debug, Clone, clap::Args)]
pub struct KernelArgs {
    /// Problem size, e.g. 4864x896 (see the family's help for the order).
    #[arg(long)]
    pub shape: String,
    /// Element type [default: f32; q4_0 for qgemv, i8 for i8gemm, u4 for embed].
    #[arg(long)]
    pub dtype: Option<String>,
    /// Force an ISA variant (scalar, avx2, avx_vnni, avx512, avx512_vnni,
    /// neon, neon_dotprod, neon_i8mm) [default: the best available].
    #[arg(long)]
    pub isa: Option<String>,
    /// The family's parameters as JSON, e.g. '{"rows_per_block":2}'
    /// [default: the family's analytic default].
    #[arg(long)]
    pub params: Option<String>,
    /// Worker threads [default: all cores for the matrix families, the
    /// family's rule for the others].
    #[arg(long)]
    pub threads: Option<usize>,
    /// Rotate input copies through more memory than the last-level cache.
    #[arg(long)]
    pub cold: bool,
    /// Counters read around the timed region.
    #[arg(long, default_value = "auto", value_name = "armv8|x86|software|auto")]
    pub counters: String,
    /// Pin the measuring thread to these CPUs, comma separated, and each
    /// pool worker to one of them (round robin).
    #[arg(long, value_delimiter = ',')]
    pub pin: Vec<usize>,
    /// Thread placement instead of --threads/--pin: t4@cluster2 (4 workers
    /// on cluster 2 as `tiletune probe` numbers them), t3@cluster1+2, or t8
    /// (not pinned).
    #[arg(long, conflicts_with_all = ["threads", "pin"])]
    pub placement: Option<String>,
    /// Seed for the random inputs.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Short schedule: a smoke test, not a measurement.
    #[arg(long)]
    pub quick: bool,
    /// Selector table holding the roofline ceilings [default: $TILETUNE_DB,
    /// else the XDG data directory].
    #[arg(long, value_name = "PATH")]
    pub db: Option<std::path::PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct QgemvArgs {
    #[command(flatten)]
    pub common: KernelArgs,
    /// Activations: a32 (f32) or a8 (quantized to Q8 blocks).
    #[arg(long, default_value = "a32")]
    pub mode: String,
}

#[derive(Debug, clap::Args)]
pub struct EltwiseArgs {
    #[command(flatten)]
    pub common: KernelArgs,
    /// silu, gelu_tanh, gelu_erf, quick_gelu, relu, relu2 or sigmoid.
    #[arg(long)]
    pub op: String,
}

#[derive(Debug, clap::Args)]
pub struct NormArgs {
    #[command(flatten)]
    pub common: KernelArgs,
    /// rms or layer.
    #[arg(long, default_value = "rms")]
    pub kind: String,
}

#[derive(Debug, clap::Args)]
pub struct AttentionArgs {
    #[command(flatten)]
    pub common: KernelArgs,
    /// Query rows: 1 is a decode step; more is a prefill chunk (the last
    /// ROWS positions of the context).
    #[arg(long, default_value_t = 1)]
    pub rows: usize,
    /// Tokens per KV page [default: the kernel's rule for the head size and dtype].
    #[arg(long)]
    pub page_size: Option<usize>,
}

#[derive(Debug, clap::Args)]
pub struct EmbedArgs {
    #[command(flatten)]
    pub common: KernelArgs,
    /// Time the tied LM head (logits = W·x) instead of the token lookup.
    #[arg(long)]
    pub lm_head: bool,
    /// Values per quantization group: 32, 64 or 128 [default: 32].
    #[arg(long)]
    pub group: Option<usize>,
}

#[derive(Debug, clap::Args)]
pub struct RooflineArgs {
    /// Largest thread count [default: the CPUs this process may run on].
    #[arg(long)]
    pub threads: Option<usize>,
    /// Last-level cache size in bytes, used to size the arrays [default: from sysfs].
    #[arg(long)]
    pub llc_bytes: Option<u64>,
    /// Size of each STREAM array in MiB (overrides the 4 × LLC rule).
    #[arg(long)]
    pub array_mib: Option<u64>,
    /// STREAM repetitions (the first is not reported).
    #[arg(long, default_value_t = 10)]
    pub reps: usize,
    /// FMA lanes to measure, comma separated: scalar, avx2+fma, avx512, neon [default: all available].
    #[arg(long, value_delimiter = ',')]
    pub isa: Vec<String>,
    /// Small arrays and short loops: a smoke test, not a measurement.
    #[arg(long)]
    pub quick: bool,
    /// Do not pin worker threads to CPUs.
    #[arg(long)]
    pub no_pin: bool,
    /// Selector table the ceilings are stored in (the tuner and reports read
    /// them from there) [default: $TILETUNE_DB, else the XDG data directory].
    #[arg(long, value_name = "PATH")]
    pub db: Option<std::path::PathBuf>,
    /// Print only; store nothing.
    #[arg(long)]
    pub no_store: bool,
}

#[derive(Debug, Serialize)]
struct RooflineRecord {
    environment: Environment,
    ceilings: Ceilings,
}

pub fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        BenchCommand::Roofline(a) => roofline(g, a),
        BenchCommand::Model(a) => super::bench_model::run(g, a),
        other => {
            let job = kernel_op(other)?;
            let report = bench_kernel(&job, None)?;
            let mut out = std::io::stdout().lock();
            if g.json {
                serde_json::to_writer_pretty(&mut out, &report)?;
                writeln!(out)?;
            } else {
                print_report(&mut out, &report)?;
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// One `bench <family>` request: the `instantiate_one` op name, the common
/// flags, and the dims given by family flags (e.g. attention `rows`, `page`).
#[derive(Debug)]
pub(crate) struct KernelJob {
    op: String,
    args: KernelArgs,
    extra: Vec<(&'static str, usize)>,
}

impl KernelJob {
    /// A job with no family-specific dims (`compare kernels` uses it).
    pub(crate) fn new(op: &str, args: KernelArgs) -> Self {
        KernelJob {
            op: op.to_string(),
            args,
            extra: Vec::new(),
        }
    }
}

/// The job of a family subcommand.
fn kernel_op(cmd: BenchCommand) -> anyhow::Result<KernelJob> {
    let job = |op: &str, args: KernelArgs| KernelJob {
        op: op.to_string(),
        args,
        extra: Vec::new(),
    };
    Ok(match cmd {
        BenchCommand::Roofline(_) => anyhow::bail!("roofline is not a kernel family"),
        BenchCommand::Model(_) => anyhow::bail!("model is not a kernel family"),
        BenchCommand::Gemv(k) => job("gemv", k),
        BenchCommand::Gemm(k) => job("gemm", k),
        BenchCommand::Softmax(k) => job("softmax", k),
        BenchCommand::Rope(k) => job("rope", k),
        BenchCommand::I8gemm(k) => job("i8gemm", k),
        BenchCommand::MatmulRope(k) => job("matmul_rope", k),
        BenchCommand::Qgemv(q) => match q.mode.as_str() {
            "a32" | "a8" => job(&format!("qgemv_{}", q.mode), q.common),
            m => anyhow::bail!("unknown qgemv mode `{m}`; use --mode a32 or --mode a8"),
        },
        BenchCommand::Eltwise(e) => {
            let op: tiletune_kernels::eltwise::EltOp = e.op.parse()?;
            job(&format!("eltwise_{}", op.name()), e.common)
        }
        BenchCommand::Norm(n) => match n.kind.as_str() {
            "rms" | "rms_norm" => job("rms_norm", n.common),
            "layer" | "layer_norm" => job("layer_norm", n.common),
            k => anyhow::bail!("unknown norm kind `{k}`; use --kind rms or --kind layer"),
        },
        BenchCommand::Attention(a) => {
            let mut j = job("attention", a.common);
            j.extra.push(("rows", a.rows));
            j.extra.extend(a.page_size.map(|p| ("page", p)));
            j
        }
        BenchCommand::Embed(e) => {
            let op = if e.lm_head { "lm_head" } else { "embed_lookup" };
            let mut j = job(op, e.common);
            j.extra.extend(e.group.map(|g| ("group", g)));
            j
        }
    })
}

/// Everything one `bench <family>` run reports (`--json` prints it as is).
#[derive(Debug, Serialize)]
pub(crate) struct KernelReport {
    pub(crate) problem: String,
    pub(crate) isa: String,
    pub(crate) params: serde_json::Value,
    pub(crate) threads: usize,
    /// The `--placement` name, when one was given.
    placement: Option<String>,
    cold: bool,
    soc: String,
    soc_fingerprint: String,
    /// Validation error against the scalar reference and its tolerance.
    validation_error: f32,
    tolerance: f32,
    pub(crate) bytes_per_run: u64,
    pub(crate) flops_per_run: u64,
    pub(crate) gflops: Option<f64>,
    pub(crate) gbytes_per_s: f64,
    roofline: Roofline,
    counters_note: Option<String>,
    quick: bool,
    environment: Environment,
    pub(crate) measurement: Measurement,
}

/// Where the run sits against this machine's stored ceiling.
#[derive(Debug, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
enum Roofline {
    Measured {
        kind: String,
        threads: usize,
        ceiling: f64,
        unit: String,
        percent: f64,
    },
    Missing {
        kind: String,
        threads: usize,
        note: String,
    },
}

/// The flags as a one-candidate configuration.
fn one_config(k: &KernelArgs) -> anyhow::Result<OneConfig> {
    let isa = k.isa.as_deref().map(|s| s.parse::<Isa>()).transpose()?;
    let params = k
        .params
        .as_deref()
        .map(|p| {
            serde_json::from_str::<serde_json::Value>(p).with_context(|| {
                format!("--params `{p}` is not JSON; pass an object such as '{{\"threads\":2}}'")
            })
        })
        .transpose()?;
    if params.as_ref().is_some_and(|p| !p.is_object()) {
        anyhow::bail!("--params must be a JSON object, e.g. '{{\"threads\":2}}'");
    }
    if k.threads == Some(0) {
        anyhow::bail!("--threads must be at least 1");
    }
    Ok(OneConfig {
        isa,
        params,
        threads: k.threads,
        cold: k.cold,
    })
}

fn default_dtype(op: &str) -> &'static str {
    match op {
        o if o.starts_with("qgemv") => "q4_0",
        "i8gemm" => "i8",
        "embed_lookup" | "lm_head" => "u4",
        _ => "f32",
    }
}

/// The ceiling kind a candidate is measured against: STREAM triad for
/// bandwidth-bound ops, the FMA peak of the candidate's ISA lane for GEMM.
fn ceiling_kind(op: &str, isa: &str) -> String {
    if families::bandwidth_bound(op) {
        return "mem_bw_triad".into();
    }
    let lane = match isa {
        "avx2" | "avx_vnni" => "avx2_fma",
        i if i.starts_with("avx512") => "avx512",
        i if i.starts_with("neon") => "neon",
        _ => "scalar",
    };
    format!("fma_peak_{lane}")
}

/// Validates once, then measures the job; `schedule` overrides the
/// measurement schedule (tests).
pub(crate) fn bench_kernel(
    job: &KernelJob,
    schedule: Option<MeasureConfig>,
) -> anyhow::Result<KernelReport> {
    let (op, k) = (job.op.as_str(), &job.args);
    let mut one = one_config(k)?;
    let counters = EventSetKind::parse(&k.counters).with_context(|| {
        format!(
            "unknown counter set `{}`; use armv8, x86, software or auto",
            k.counters
        )
    })?;
    let dtype = k.dtype.as_deref().unwrap_or(default_dtype(op));
    let spec = families::parse_bench_problem_with(op, dtype, &k.shape, &job.extra)?;
    let soc = tiletune_soc::probe().context("probing this SoC")?;
    let env = Environment::capture(&soc.fingerprint, env!("CARGO_PKG_VERSION"), None);
    let placement = k
        .placement
        .as_deref()
        .map(|p| tiletune_tuner::placement::parse_placement(p, &soc))
        .transpose()?;
    let mut pin = k.pin.clone();
    if let Some(p) = &placement {
        one.threads = Some(p.threads);
        pin = p.cpus.clone();
    }
    let caps = soc.cpu_caps();
    let machine = Machine {
        caps,
        max_threads: caps.cores.max(1),
        seed: k.seed,
    };
    // Large problems take seconds to build (the f64 reference) and to
    // measure: show where the run is, on a terminal only.
    let bar = (schedule.is_none() && std::io::stderr().is_terminal()).then(|| {
        let b = ProgressBar::new(1000);
        b.set_style(
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b.enable_steady_tick(std::time::Duration::from_millis(200));
        b.set_message(format!("{spec}: building inputs and the scalar reference"));
        b
    });
    let mut p = families::instantiate_one(&spec, &machine, &one)?;
    if let Some(b) = &bar {
        b.set_message(format!("{spec}: validating against the reference"));
    }
    let cand = p.candidates()[0].clone();
    let tolerance = p.tolerance();
    let err = p
        .validate(0)
        .map_err(|e| anyhow::anyhow!("{spec} with {}: {e}", cand.variant()))?;
    if err.is_nan() || err > tolerance {
        anyhow::bail!(
            "{spec} with {} {}: output disagrees with the scalar reference (error {err:e} > tolerance {tolerance:e}); refusing to time a wrong kernel",
            cand.variant(),
            cand.params()
        );
    }
    let quick = k.quick || schedule.is_some();
    let cfg = schedule.unwrap_or(if k.quick {
        MeasureConfig::quick()
    } else {
        MeasureConfig::default()
    });
    // A multi-threaded kernel works on its pool's workers: count (and pin)
    // them with the measuring thread, which is itself one of them: the
    // kernel is timed from inside its pool, as the runtime calls it (see
    // `tiletune_tuner::adapters::HarnessMeasure`).
    let threads = cand.threads();
    let tids = families::worker_tids(threads);
    let measure = || {
        let mut h = Harness::new(cfg)?.workers(tids);
        if !pin.is_empty() {
            h = h.pinned(pin);
        }
        if let Some(b) = &bar {
            b.set_message(format!("{spec}: warming up"));
            let b = b.clone();
            let name = spec.to_string();
            h = h.on_progress(move |pr| {
                if pr.warming_up {
                    b.set_message(format!("{name}: warmed up"));
                } else {
                    b.set_position((pr.fraction * 1000.0) as u64);
                    b.set_message(format!("{name}: {} samples", pr.samples));
                }
            });
        }
        let note = h.attach_counters(counters);
        anyhow::Ok((h.measure(&spec.key(), || p.run(0)), note))
    };
    let (m, note) = tiletune_kernels::pool::install_awake(threads, measure)?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let m = m?;
    let work = p.work();
    let gbs = m.gbytes_per_s(work.bytes as f64);
    let gflops = (work.flops > 0).then(|| m.gflops(work.flops as f64));
    let kind = ceiling_kind(op, cand.variant());
    let roofline = lookup_ceiling(k, &soc.fingerprint, &kind, cand.threads(), gbs, gflops);
    Ok(KernelReport {
        problem: spec.key(),
        isa: cand.variant().to_string(),
        params: cand.params().clone(),
        threads: cand.threads(),
        placement: placement.map(|p| p.name()),
        cold: k.cold,
        soc: soc.name.clone(),
        soc_fingerprint: soc.fingerprint.clone(),
        validation_error: err,
        tolerance,
        bytes_per_run: work.bytes,
        flops_per_run: work.flops,
        gflops,
        gbytes_per_s: gbs,
        roofline,
        counters_note: note.map(|n| n.to_string()),
        quick,
        environment: env,
        measurement: m,
    })
}

fn lookup_ceiling(
    k: &KernelArgs,
    soc: &str,
    kind: &str,
    threads: usize,
    gbs: f64,
    gflops: Option<f64>,
) -> Roofline {
    let missing = |why: String| Roofline::Missing {
        kind: kind.to_string(),
        threads,
        note: format!("{why}; run `tiletune bench roofline` first"),
    };
    let path =
        k.db.clone()
            .unwrap_or_else(tiletune_tables::default_db_path);
    if !path.exists() {
        return missing(format!("no selector table at {}", path.display()));
    }
    let db = match tiletune_tables::SelectorDb::open_with(
        &path,
        tiletune_tables::OpenOptions {
            read_only: true,
            ..Default::default()
        },
    ) {
        Ok(db) => db,
        Err(e) => return missing(format!("cannot read {}: {e}", path.display())),
    };
    match db.latest_ceiling(soc, kind, threads) {
        Ok(Some(c)) if c.value > 0.0 => {
            let achieved = if kind.starts_with("mem_bw") {
                Some(gbs)
            } else {
                gflops
            };
            match achieved {
                Some(a) => Roofline::Measured {
                    kind: kind.to_string(),
                    threads,
                    ceiling: c.value,
                    unit: c.unit,
                    percent: 100.0 * a / c.value,
                },
                None => missing("this op has no flop count".into()),
            }
        }
        Ok(_) => missing(format!(
            "no `{kind}` ceiling stored for this SoC at {threads} thread(s)"
        )),
        Err(e) => missing(format!("cannot read ceilings: {e}")),
    }
}

fn ns(x: f64) -> String {
    if x >= 1e9 {
        format!("{:.3} s", x / 1e9)
    } else if x >= 1e6 {
        format!("{:.3} ms", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.3} µs", x / 1e3)
    } else {
        format!("{x:.1} ns")
    }
}

fn print_report(out: &mut impl Write, r: &KernelReport) -> std::io::Result<()> {
    let s = &r.measurement.summary;
    writeln!(
        out,
        "{}  isa {}  params {}  threads {}  {}{}",
        r.problem,
        r.isa,
        r.params,
        r.threads,
        if r.cold { "cold cache" } else { "warm cache" },
        if r.quick {
            " — quick mode, not a measurement"
        } else {
            ""
        }
    )?;
    writeln!(out, "soc: {} [{}]", r.soc, r.soc_fingerprint)?;
    if let Some(p) = &r.measurement.placement {
        writeln!(
            out,
            "placement: {}caller on cpus {:?}, workers on cpus {:?}",
            r.placement
                .as_deref()
                .map_or(String::new(), |n| format!("{n}: ")),
            p.pinned_to,
            p.workers
        )?;
    }
    writeln!(
        out,
        "validated: max error {:.2e} (tolerance {:.0e})",
        r.validation_error, r.tolerance
    )?;
    writeln!(out)?;
    let rows: Vec<(&str, String)> = vec![
        ("median", ns(s.median)),
        (
            "MAD",
            format!("{} ({:.1}%)", ns(s.mad), 100.0 * s.relative_mad()),
        ),
        ("min / max", format!("{} / {}", ns(s.min), ns(s.max))),
        (
            "95% CI",
            format!("{} .. {}", ns(s.ci95_low), ns(s.ci95_high)),
        ),
        (
            "samples",
            format!(
                "{} × {} runs ({} outliers)",
                s.n,
                r.measurement.iters_per_sample,
                s.outliers.len()
            ),
        ),
        (
            "GFLOP/s",
            r.gflops.map_or("-".into(), |g| format!("{g:.2}")),
        ),
        ("GB/s", format!("{:.2}", r.gbytes_per_s)),
        (
            "roofline",
            match &r.roofline {
                Roofline::Measured {
                    kind,
                    threads,
                    ceiling,
                    unit,
                    percent,
                } => format!("{percent:.1}% of {kind} {ceiling:.1} {unit} at {threads} thread(s)"),
                Roofline::Missing { note, .. } => note.clone(),
            },
        ),
    ];
    for (k, v) in rows {
        writeln!(out, "{k:>10}  {v}")?;
    }
    if let Some(note) = &r.counters_note {
        writeln!(
            out,
            "
counters: {note}"
        )?;
    }
    if let Some(c) = &r.measurement.counts {
        writeln!(
            out,
            "
counters per run ({}, summed over {} thread(s)):",
            c.backend, c.threads
        )?;
        for (name, v) in &c.values {
            writeln!(
                out,
                "{name:>24}  {:>14.0}{}",
                v.scaled,
                if v.multiplexed {
                    "  (multiplexed, scaled)"
                } else {
                    ""
                }
            )?;
        }
    }
    if let Some(mx) = &r.measurement.metrics {
        let derived = [
            ("IPC", mx.ipc, false),
            ("L1D miss rate", mx.l1d_miss_rate, true),
            ("L2 miss rate", mx.l2_miss_rate, true),
            ("LLC miss rate", mx.llc_miss_rate, true),
            ("branch MPKI", mx.branch_mpki, false),
            ("frontend stalls", mx.frontend_stall_share, true),
            ("backend stalls", mx.backend_stall_share, true),
            ("SIMD share", mx.simd_share, true),
        ];
        for (name, v, pct) in derived {
            if let Some(v) = v {
                if pct {
                    writeln!(out, "{name:>24}  {:>13.1}%", 100.0 * v)?;
                } else {
                    writeln!(out, "{name:>24}  {v:>14.2}")?;
                }
            }
        }
    }
    Ok(())
}

fn parse_isa(s: &str) -> anyhow::Result<FmaIsa> {
    FmaIsa::ALL
        .into_iter()
        .find(|i| i.name().eq_ignore_ascii_case(s.trim()))
        .with_context(|| {
            format!("unknown ISA lane `{s}`; choose from scalar, avx2+fma, avx512, neon")
        })
}

fn config(a: &RooflineArgs, env: &Environment) -> anyhow::Result<RooflineConfig> {
    let max_threads = match a.threads {
        Some(0) => anyhow::bail!("--threads must be at least 1"),
        Some(t) => t,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let mut cfg = RooflineConfig::for_machine(a.llc_bytes.or(env.llc_bytes), max_threads);
    if a.quick {
        let tiny = RooflineConfig::tiny();
        cfg.array_len = (1 << 20).max(max_threads);
        cfg.fma_target = tiny.fma_target * 10;
        cfg.fma_reps = tiny.fma_reps;
    }
    if let Some(mib) = a.array_mib {
        cfg.array_len = ((mib << 20) / 8).max(max_threads as u64) as usize;
    }
    cfg.reps = a.reps;
    cfg.pin = !a.no_pin;
    if !a.isa.is_empty() {
        let isas = a
            .isa
            .iter()
            .map(|s| parse_isa(s))
            .collect::<anyhow::Result<Vec<_>>>()?;
        if let Some(missing) = isas.iter().find(|i| !i.is_available()) {
            anyhow::bail!(
                "ISA lane `{}` is not available on this CPU; run `tiletune probe` to list its features",
                missing.name()
            );
        }
        cfg.isas = Some(isas);
    }
    Ok(cfg)
}

fn roofline(g: &Global, a: RooflineArgs) -> anyhow::Result<ExitCode> {
    let soc = tiletune_soc::probe().context("probing this SoC")?;
    let env = Environment::capture(&soc.fingerprint, env!("CARGO_PKG_VERSION"), None);
    for w in env.warnings() {
        eprintln!("warning: {w}");
    }
    let cfg = config(&a, &env)?;
    let bar = std::io::stderr().is_terminal().then(|| {
        let b = ProgressBar::new(0);
        b.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b
    });
    let ceilings = measure_ceilings(&cfg, |p: Progress| match &bar {
        Some(b) => {
            b.set_length(p.total as u64);
            b.set_position(p.done as u64);
            b.set_message(p.step);
        }
        None if p.done < p.total => eprintln!("[{}/{}] {}", p.done + 1, p.total, p.step),
        None => {}
    })?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }

    // Quick runs are smoke tests, not measurements: never stored.
    if !a.no_store && !a.quick {
        let path =
            a.db.clone()
                .unwrap_or_else(tiletune_tables::default_db_path);
        store_ceilings(&path, &soc, &ceilings)
            .with_context(|| format!("storing the ceilings in {}", path.display()))?;
        eprintln!("ceilings stored in {}", path.display());
    }

    let mut out = std::io::stdout().lock();
    if g.json {
        let record = RooflineRecord {
            environment: env,
            ceilings,
        };
        serde_json::to_writer_pretty(&mut out, &record)?;
        writeln!(out)?;
    } else {
        print_table(&mut out, &ceilings, a.quick)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// One row per (kind, threads): `mem_bw_copy`, `mem_bw_triad`, `mem_bw_read` in GB/s and
/// `fma_peak_<isa>` in GFLOP/s.
fn store_ceilings(
    path: &std::path::Path,
    soc: &tiletune_soc::SocInfo,
    c: &Ceilings,
) -> anyhow::Result<()> {
    use tiletune_tables::{Ceiling, now_unix};
    let mut db = super::open_for_writing(path, soc)?;
    let row = |kind: String, threads: usize, value: f64, unit: &str| Ceiling {
        soc: soc.fingerprint.clone(),
        kind,
        threads,
        value,
        unit: unit.to_string(),
        campaign: None,
        measured_at: now_unix(),
    };
    for b in c.bandwidth.iter().filter(|b| b.validated) {
        db.put_ceiling(&row("mem_bw_copy".into(), b.threads, b.copy_gbs, "GB/s"))?;
        db.put_ceiling(&row("mem_bw_triad".into(), b.threads, b.triad_gbs, "GB/s"))?;
        db.put_ceiling(&row("mem_bw_read".into(), b.threads, b.read_gbs, "GB/s"))?;
    }
    for f in &c.fma {
        let kind = format!("fma_peak_{}", f.isa.name().replace('+', "_"));
        db.put_ceiling(&row(kind, f.threads, f.gflops, "GFLOP/s"))?;
    }
    Ok(())
}

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

fn print_table(out: &mut impl Write, c: &Ceilings, quick: bool) -> std::io::Result<()> {
    writeln!(
        out,
        "roofline: 3 arrays × {:.1} MiB (LLC {:.1} MiB), {} reps, workers {}{}",
        mib(c.array_bytes),
        mib(c.llc_bytes),
        c.reps,
        if c.pinned { "pinned" } else { "not pinned" },
        if quick {
            " — quick mode, not a measurement"
        } else {
            ""
        }
    )?;
    writeln!(
        out,
        "\nmemory bandwidth (GB/s, STREAM byte counting; best / median)"
    )?;
    writeln!(
        out,
        "{:>7}  {:>16}  {:>16}  {:>16}  check",
        "threads", "copy", "triad", "read"
    )?;
    for b in &c.bandwidth {
        writeln!(
            out,
            "{:>7}  {:>7.1} / {:>6.1}  {:>7.1} / {:>6.1}  {:>7.1} / {:>6.1}  {}",
            b.threads,
            b.copy_gbs,
            b.copy_median_gbs,
            b.triad_gbs,
            b.triad_median_gbs,
            b.read_gbs,
            b.read_median_gbs,
            if b.validated { "ok" } else { "WRONG RESULT" }
        )?;
    }
    writeln!(out, "\nFMA peak (f32 GFLOP/s; best / median)")?;
    writeln!(
        out,
        "{:<9} {:>5} {:>4} {:>7}  {:>18}",
        "isa", "lanes", "acc", "threads", "GFLOP/s"
    )?;
    for p in &c.fma {
        writeln!(
            out,
            "{:<9} {:>5} {:>4} {:>7}  {:>8.1} / {:>7.1}",
            p.isa.name(),
            p.lanes,
            p.accumulators,
            p.threads,
            p.gflops,
            p.median_gflops
        )?;
    }
    writeln!(
        out,
        "\npeak: {:.1} GB/s (triad), {:.1} GFLOP/s; ridge point {:.2} flop/byte",
        c.peak_bandwidth_gbs,
        c.peak_gflops,
        c.ridge_point()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: BenchCommand,
    }

    fn args(line: &[&str]) -> RooflineArgs {
        let mut v = vec!["bench"];
        v.extend_from_slice(line);
        match Cli::parse_from(v).cmd {
            BenchCommand::Roofline(a) => a,
            other => panic!("not roofline: {other:?}"),
        }
    }

    #[test]
    fn flags_shape_the_config() {
        let env = Environment::capture("test", "0", None);
        let a = args(&[
            "roofline",
            "--threads",
            "3",
            "--llc-bytes",
            "1048576",
            "--reps",
            "4",
            "--no-pin",
        ]);
        let c = config(&a, &env).unwrap();
        assert_eq!(c.threads, vec![1, 2, 3]);
        assert_eq!(c.llc_bytes, 1 << 20);
        assert_eq!(c.reps, 4);
        assert!(!c.pin);
        assert!(3 * c.array_len as u64 * 8 >= 256 << 20);
        let c = config(
            &args(&["roofline", "--array-mib", "2", "--isa", "scalar"]),
            &env,
        )
        .unwrap();
        assert_eq!(c.array_len, (2 << 20) / 8);
        assert_eq!(c.isas, Some(vec![FmaIsa::Scalar]));
        assert!(config(&args(&["roofline", "--isa", "sse9"]), &env).is_err());
        assert!(config(&args(&["roofline", "--threads", "0"]), &env).is_err());
    }

    #[test]
    fn table_lists_every_point() {
        let mut cfg = RooflineConfig::tiny();
        cfg.threads = vec![1];
        cfg.isas = Some(vec![FmaIsa::Scalar]);
        let c = measure_ceilings(&cfg, |_| {}).unwrap();
        let mut buf = Vec::new();
        print_table(&mut buf, &c, true).unwrap();
        let text = String::from_utf8(buf).unwrap();
        assert!(text.contains("quick mode"));
        assert!(text.contains("scalar"));
        assert!(text.contains("ok"));
        assert_eq!(
            text.lines()
                .filter(|l| l.trim_start().starts_with("1 "))
                .count(),
            1
        );
    }

    fn kernel(line: &[&str]) -> (String, KernelArgs) {
        let j = job(line);
        (j.op, j.args)
    }

    fn job(line: &[&str]) -> KernelJob {
        let mut v = vec!["bench"];
        v.extend_from_slice(line);
        kernel_op(Cli::try_parse_from(v).unwrap().cmd).unwrap()
    }

    /// A tiny, quick run with no ceilings stored.
    fn tiny(line: &[&str]) -> KernelReport {
        let mut v = line.to_vec();
        v.extend_from_slice(&[
            "--quick",
            "--counters",
            "software",
            "--db",
            "/nonexistent/db",
        ]);
        let j = job(&v);
        let sched = MeasureConfig::quick().max(50, std::time::Duration::from_millis(50));
        bench_kernel(&j, Some(sched)).unwrap_or_else(|e| panic!("{line:?}: {e:#}"))
    }

    #[test]
    fn family_flags_map_to_ops_and_configs() {
        let (op, k) = kernel(&[
            "qgemv",
            "--shape",
            "8x64",
            "--dtype",
            "q8_0",
            "--mode",
            "a8",
            "--isa",
            "scalar",
            "--params",
            r#"{"rows_per_block":2}"#,
            "--threads",
            "2",
            "--cold",
        ]);
        assert_eq!(op, "qgemv_a8");
        let one = one_config(&k).unwrap();
        assert_eq!(one.isa, Some(Isa::Scalar));
        assert_eq!(one.threads, Some(2));
        assert!(one.cold);
        assert_eq!(one.params, Some(serde_json::json!({"rows_per_block": 2})));
        assert_eq!(
            kernel(&["eltwise", "--op", "gelu_tanh", "--shape", "9"]).0,
            "eltwise_gelu_tanh"
        );
        assert_eq!(
            kernel(&["norm", "--kind", "layer", "--shape", "2x8"]).0,
            "layer_norm"
        );
        assert_eq!(kernel(&["norm", "--shape", "2x8"]).0, "rms_norm");
        assert_eq!(kernel(&["rope", "--shape", "2x2x8"]).0, "rope");
        assert_eq!(ceiling_kind("gemm", "avx2"), "fma_peak_avx2_fma");
        assert_eq!(ceiling_kind("gemm", "avx512_vnni"), "fma_peak_avx512");
        assert_eq!(ceiling_kind("qgemv_a8", "neon_dotprod"), "mem_bw_triad");
        assert_eq!(ceiling_kind("matmul_rope", "avx512"), "fma_peak_avx512");
        let j = job(&[
            "attention",
            "--shape",
            "8x2x64x512",
            "--rows",
            "16",
            "--page-size",
            "32",
        ]);
        assert_eq!(j.op, "attention");
        assert_eq!(j.extra, vec![("rows", 16), ("page", 32)]);
        let j = job(&["embed", "--lm-head", "--group", "64", "--shape", "8x64"]);
        assert_eq!((j.op.as_str(), j.extra), ("lm_head", vec![("group", 64)]));
        assert_eq!(job(&["embed", "--shape", "2x8x64"]).op, "embed_lookup");
        assert_eq!(default_dtype("i8gemm"), "i8");
        assert_eq!(default_dtype("lm_head"), "u4");
    }

    #[test]
    fn bad_input_is_a_clear_error() {
        let err = |line: &[&str]| -> String {
            let mut v = vec!["bench"];
            v.extend_from_slice(line);
            let cmd = match Cli::try_parse_from(v) {
                Ok(c) => c.cmd,
                Err(e) => return e.to_string(),
            };
            let mut j = match kernel_op(cmd) {
                Ok(x) => x,
                Err(e) => return format!("{e:#}"),
            };
            j.args.quick = true;
            j.args.db = Some("/nonexistent/db".into());
            match bench_kernel(&j, Some(MeasureConfig::quick())) {
                Ok(_) => panic!("{line:?} should fail"),
                Err(e) => format!("{e:#}"),
            }
        };
        assert!(err(&["conv", "--shape", "4"]).contains("unrecognized subcommand"));
        assert!(
            err(&["eltwise", "--op", "tanhh", "--shape", "4"]).contains("unknown element-wise op")
        );
        assert!(err(&["gemv", "--shape", "4x4", "--dtype", "q9"]).contains("supported: f32, f16"));
        assert!(err(&["gemv", "--shape", "4x0"]).contains("expected nxk"));
        assert!(err(&["gemm", "--shape", "4x4"]).contains("expected mxnxk"));
        assert!(err(&["qgemv", "--shape", "4x33"]).contains("qgemv"));
        assert!(err(&["qgemv", "--shape", "4x32", "--mode", "a4"]).contains("--mode a32"));
        assert!(err(&["gemv", "--shape", "4x4", "--params", "{nope"]).contains("not JSON"));
        assert!(
            err(&["gemv", "--shape", "4x4", "--params", r#"{"bogus":1}"#]).contains("do not parse")
        );
        assert!(
            err(&["softmax", "--shape", "2x4", "--params", r#"{"threads":0}"#]).contains("softmax")
        );
        assert!(err(&["rope", "--shape", "2x2x7"]).contains("even"));
        assert!(err(&["gemv", "--shape", "4x4", "--isa", "sse9"]).contains("sse9"));
        assert!(err(&["gemv", "--shape", "4x4", "--counters", "gpu"]).contains("counter set"));
        assert!(err(&["norm", "--kind", "batch", "--shape", "2x4"]).contains("--kind rms"));
        assert!(err(&["attention", "--shape", "2x2x16x8", "--rows", "9"]).contains("--rows"));
        assert!(err(&["attention", "--shape", "2x2x16x8", "--rows", "0"]).contains("rows=0"));
        assert!(err(&["i8gemm", "--shape", "2x2x16", "--dtype", "f32"]).contains("i8_zp"));
        assert!(err(&["embed", "--shape", "2x16", "--dtype", "u4"]).contains("tokens"));
        assert!(
            err(&["gemv", "--shape", "4x4", "--placement", "t2@cluster99"]).contains("cluster")
        );
        assert!(
            err(&[
                "gemv",
                "--shape",
                "4x4",
                "--placement",
                "t2",
                "--threads",
                "2"
            ])
            .contains("cannot be used with")
        );
        // An ISA of the other architecture is never available here.
        let foreign = if cfg!(target_arch = "x86_64") {
            "neon"
        } else {
            "avx2"
        };
        assert!(err(&["softmax", "--shape", "2x4", "--isa", foreign]).contains("not available"));
    }

    #[test]
    fn every_family_runs_tiny_and_reports() {
        for line in [
            &["gemv", "--shape", "16x40", "--threads", "1"][..],
            &[
                "gemv", "--shape", "9x33", "--dtype", "f16", "--cold", "--isa", "scalar",
            ],
            &["gemm", "--shape", "3x8x17", "--threads", "1"],
            &["gemm", "--shape", "2x5x9", "--dtype", "f16"],
            &["qgemv", "--shape", "4x64", "--dtype", "q4_0"],
            &[
                "qgemv", "--shape", "3x256", "--dtype", "q4_k", "--mode", "a8",
            ],
            &[
                "qgemv",
                "--shape",
                "2x32",
                "--dtype",
                "mxfp4",
                "--mode",
                "a8",
                "--params",
                r#"{"rows_per_block":1}"#,
            ],
            &["eltwise", "--op", "silu", "--shape", "100"],
            &["eltwise", "--op", "relu2", "--shape", "33", "--cold"],
            &["norm", "--shape", "3x40"],
            &[
                "norm",
                "--kind",
                "layer",
                "--shape",
                "2x17",
                "--threads",
                "2",
            ],
            &["softmax", "--shape", "3x19"],
            &["rope", "--shape", "2x3x16"],
            &["attention", "--shape", "4x2x32x40"],
            &[
                "attention",
                "--shape",
                "2x1x32x50",
                "--rows",
                "8",
                "--dtype",
                "q8_0",
                "--page-size",
                "16",
                "--threads",
                "2",
            ],
            &["i8gemm", "--shape", "1x16x64", "--threads", "2"],
            &["i8gemm", "--shape", "3x8x40", "--dtype", "i8_zp", "--cold"],
            &["embed", "--shape", "4x16x64", "--dtype", "u3"],
            &["embed", "--lm-head", "--shape", "16x128", "--group", "64"],
            &["matmul_rope", "--shape", "2x2x16x24"],
            &[
                "matmul-rope",
                "--shape",
                "1x1x8x9",
                "--dtype",
                "f16",
                "--threads",
                "2",
            ],
        ] {
            let r = tiny(line);
            assert!(r.measurement.summary.median > 0.0, "{line:?}");
            assert!(r.validation_error <= r.tolerance, "{line:?}");
            assert!(r.gbytes_per_s > 0.0 && r.bytes_per_run > 0, "{line:?}");
            assert!(matches!(r.roofline, Roofline::Missing { .. }), "{line:?}");
            let json = serde_json::to_string(&r).unwrap();
            let v: serde_json::Value = serde_json::from_str(&json).unwrap();
            assert_eq!(v["problem"], r.problem.as_str());
            let mut buf = Vec::new();
            print_report(&mut buf, &r).unwrap();
            let text = String::from_utf8(buf).unwrap();
            assert!(text.contains("median") && text.contains("GB/s"), "{text}");
            assert!(
                text.contains("run `tiletune bench roofline` first"),
                "{text}"
            );
        }
        let r = tiny(&[
            "gemv",
            "--shape",
            "8x8",
            "--isa",
            "scalar",
            "--threads",
            "2",
        ]);
        assert_eq!((r.isa.as_str(), r.threads), ("scalar", 2));
        // A placement sets the threads and pins the caller and each worker.
        let cpu = tiletune_bench::pin::affinity().unwrap()[0];
        let cpus = cpu.to_string();
        let r = tiny(&["gemv", "--shape", "64x64", "--threads", "2", "--pin", &cpus]);
        let p = r.measurement.placement.as_ref().unwrap();
        assert_eq!(
            (p.pinned_to.clone(), p.workers.clone()),
            (vec![cpu], vec![cpu, cpu])
        );
        let r = tiny(&["gemv", "--shape", "64x64", "--placement", "t2"]);
        assert_eq!((r.threads, r.placement.as_deref()), (2, Some("t2")));
    }
}
