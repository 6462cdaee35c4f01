//! `tiletune bench`: measurements from the command line. `bench roofline`
//! (in `bench_roofline`) measures this machine's ceilings; `bench model` (in
//! `bench_model`) a whole model as llama-bench does; `bench <family>` times
//! one pinned configuration of a kernel family (built by
//! `tiletune_tuner::families::instantiate_one`, validated once against the
//! scalar reference before any timing) and relates it to those ceilings
//! (`tiletune_bench::roofline::Roofline`).

mod args;

pub use args::*;

use super::Global;
use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;
use tiletune_bench::Environment;
use tiletune_bench::roofline::{CeilingKind, Roofline, StoredCeiling};
use tiletune_bench::{KernelReport, MeasureConfig};
use tiletune_kernels::Isa;
use tiletune_pmu::EventSetKind;
use tiletune_tuner::families::{self, Machine, OneConfig};
use tiletune_tuner::one_run::{OnStage, OneRunConfig, Stage, time_one};

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
        streamed: None,
    };
    let given = schedule.is_some();
    let quick = k.quick || given;
    let schedule = schedule.unwrap_or(if k.quick {
        MeasureConfig::quick()
    } else {
        MeasureConfig::default()
    });
    // Show where a long run is, on a terminal only.
    let bar = (!given && std::io::stderr().is_terminal()).then(|| {
        let b = ProgressBar::new(1000);
        b.set_style(
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b.enable_steady_tick(std::time::Duration::from_millis(200));
        b
    });
    let on_stage = bar.clone().map(|b| {
        let name = spec.to_string();
        Arc::new(move |s: Stage| match s {
            Stage::Building => {
                b.set_message(format!("{name}: building inputs and the scalar reference"))
            }
            Stage::Validating => b.set_message(format!("{name}: validating against the reference")),
            Stage::Measuring(pr) if pr.warming_up => b.set_message(format!("{name}: warming up")),
            Stage::Measuring(pr) => {
                b.set_position((pr.fraction * 1000.0) as u64);
                b.set_message(format!("{name}: {} samples", pr.samples));
            }
        }) as OnStage
    });
    let cfg = OneRunConfig {
        schedule,
        pin,
        counters,
        on_stage,
    };
    let run = time_one(&spec, &machine, &one, cfg)?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let (cand, m) = (&run.candidate, run.measurement);
    let work = run.work;
    let gbs = m.gbytes_per_s(work.bytes as f64);
    let gflops = (work.flops > 0).then(|| m.gflops(work.flops as f64));
    let kind = CeilingKind::for_kernel(families::bandwidth_bound(op), dtype, cand.variant());
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
        validation_error: run.validation_error,
        tolerance: run.tolerance,
        bytes_per_run: work.bytes,
        flops_per_run: work.flops,
        arithmetic: families::arithmetic(op, dtype, cand.variant()),
        gflops,
        gbytes_per_s: gbs,
        roofline,
        counters_note: run.counters_note,
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
mod tests;
