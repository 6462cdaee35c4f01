//! `tiletune bench`: measurements from the command line. `bench roofline`
//! (in `bench_roofline`) measures this machine's ceilings; `bench model` (in
//! `bench_model`) a whole model as llama-bench does; `bench <family>` times
//! one pinned configuration of a kernel family (built by
//! `tiletune_tuner::families::instantiate_one`, validated once against the
//! scalar reference before any timing) and relates it to those ceilings
//! (`tiletune_bench::roofline::Roofline`).

use super::Global;
use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use tiletune_bench::Environment;
use tiletune_bench::roofline::{CeilingKind, Roofline, StoredCeiling};
use tiletune_bench::{Harness, KernelReport, MeasureConfig};
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
    Roofline(super::bench_roofline::Args),
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
    #[arg(long, short = 't', value_parser = super::parse_threads)]
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

pub fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        BenchCommand::Roofline(a) => super::bench_roofline::run(g, a),
        BenchCommand::Model(a) => super::bench_model::run(g, a),
        other => {
            let job = kernel_op(other)?;
            let report = bench_kernel(&job, None)?;
            let mut out = std::io::stdout().lock();
            if g.json {
                serde_json::to_writer_pretty(&mut out, &report)?;
                writeln!(out)?;
            } else {
                report.write_text(&mut out)?;
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
    /// A job with no family-specific dims.
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
    let job = KernelJob::new;
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
    if let Some(t) = k.threads {
        super::warn_oversubscribed(t);
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
        memory: tiletune_soc::mem_available(),
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
    let kind = CeilingKind::for_kernel(families::bandwidth_bound(op), cand.variant());
    let stored = stored_ceiling(&k.db, &soc.fingerprint, kind, cand.threads());
    let roofline = Roofline::against(kind, cand.threads(), stored, gbs, gflops);
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

/// The stored ceiling of `kind` at `threads` for this SoC, or why there is none.
fn stored_ceiling(
    db: &Option<std::path::PathBuf>,
    soc: &str,
    kind: CeilingKind,
    threads: usize,
) -> Result<Option<StoredCeiling>, String> {
    let path = db.clone().unwrap_or_else(tiletune_tables::default_db_path);
    if !path.exists() {
        return Err(format!("no selector table at {}", path.display()));
    }
    let db = tiletune_tables::SelectorDb::open_with(
        &path,
        tiletune_tables::OpenOptions {
            read_only: true,
            ..Default::default()
        },
    )
    .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    match db.latest_ceiling(soc, &kind.name(), threads) {
        Ok(c) => Ok(c.map(|c| StoredCeiling {
            value: c.value,
            unit: c.unit,
        })),
        Err(e) => Err(format!("cannot read ceilings: {e}")),
    }
}

#[cfg(test)]
#[path = "bench_tests.rs"]
mod tests;
