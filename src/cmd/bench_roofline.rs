//! `tiletune bench roofline`: this machine's ceilings (STREAM bandwidth, f32
//! FMA peak per ISA lane, int8 dot-product peak per int8 lane), measured by `tiletune_bench::roofline`, printed and
//! stored in the selector table, where the tuner, `bench <family>` and the
//! reports read them.

use super::Global;
use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use tiletune_bench::Environment;
use tiletune_bench::roofline::{Ceilings, PeakLane, Progress, RooflineConfig, measure_ceilings};

#[derive(Debug, clap::Args)]
pub struct Args {
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
    /// Peak lanes to measure, comma separated: FMA lanes scalar, avx2+fma, avx512, neon and int8
    /// lanes avx2, avx_vnni, avx512_vnni, amx, neon_dotprod, neon_i8mm [default: all available].
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

fn parse_isa(s: &str) -> anyhow::Result<PeakLane> {
    PeakLane::from_name(s).with_context(|| {
        let names: Vec<&str> = PeakLane::all().map(PeakLane::name).collect();
        format!("unknown ISA lane `{s}`; choose from {}", names.join(", "))
    })
}

fn config(a: &Args, env: &Environment) -> anyhow::Result<RooflineConfig> {
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
        let len = mib
            .checked_mul(1 << 20)
            .and_then(|b| usize::try_from(b / 8).ok())
            .with_context(|| format!("--array-mib {mib} is more memory than can be addressed"))?;
        cfg.array_len = len.max(max_threads);
    }
    cfg.memory = tiletune_soc::mem_available();
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
        cfg.only(&isas);
    }
    Ok(cfg)
}

pub fn run(g: &Global, a: Args) -> anyhow::Result<ExitCode> {
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
        ceilings.write_table(&mut out, a.quick)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// One row per (kind, threads): `mem_bw_copy`, `mem_bw_triad`, `mem_bw_read` in GB/s,
/// `fma_peak_<isa>` in GFLOP/s and `int8_peak_<isa>` in GOP/s.
fn store_ceilings(
    path: &std::path::Path,
    soc: &tiletune_soc::SocInfo,
    c: &Ceilings,
) -> anyhow::Result<()> {
    use tiletune_tables::{Ceiling, now_unix};
    let mut db = tiletune_flow::open_for_writing(path, soc)?;
    for r in c.rows() {
        db.put_ceiling(&Ceiling {
            soc: soc.fingerprint.clone(),
            kind: r.kind.name(),
            threads: r.threads,
            value: r.value,
            unit: r.kind.unit().to_string(),
            campaign: None,
            measured_at: now_unix(),
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::bench::BenchCommand;
    use super::*;
    use clap::Parser;
    use tiletune_bench::roofline::{FmaIsa, Int8Isa};

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: BenchCommand,
    }

    fn args(line: &[&str]) -> Args {
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
        assert_eq!(c.int8_isas, Some(vec![]));
        assert_eq!(
            parse_isa(" AVX512_VNNI").unwrap(),
            PeakLane::Int8(Int8Isa::Avx512Vnni)
        );
        assert_eq!(
            parse_isa("neon_i8mm").unwrap(),
            PeakLane::Int8(Int8Isa::NeonI8mm)
        );
        if Int8Isa::Avx512Vnni.is_available() {
            let c = config(&args(&["roofline", "--isa", "avx512_vnni"]), &env).unwrap();
            assert_eq!(c.isas, Some(vec![]));
            assert_eq!(c.int8_isas, Some(vec![Int8Isa::Avx512Vnni]));
        }
        let unavailable = Int8Isa::ALL
            .into_iter()
            .find(|i| !i.is_available())
            .unwrap();
        let err = config(&args(&["roofline", "--isa", unavailable.name()]), &env).unwrap_err();
        assert!(err.to_string().contains("not available"), "{err}");
        assert!(config(&args(&["roofline", "--isa", "sse9"]), &env).is_err());
        assert!(config(&args(&["roofline", "--threads", "0"]), &env).is_err());
    }

    /// Arrays larger than the memory available are refused before they are
    /// allocated (`--array-mib 100000` aborted), and a size that does not
    /// fit in an address is refused at parsing.
    #[test]
    fn arrays_that_do_not_fit_are_refused() {
        let env = Environment::capture("test", "0", None);
        let err = config(
            &args(&["roofline", "--array-mib", "18446744073709551615"]),
            &env,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("more memory than can be addressed"),
            "{err}"
        );
        let mut c = config(&args(&["roofline", "--array-mib", "100000"]), &env).unwrap();
        // The figure itself moves between two reads of /proc/meminfo (other
        // processes, the other tests of this binary), so only its presence
        // is compared.
        assert_eq!(c.memory.is_some(), tiletune_soc::mem_available().is_some());
        c.memory = Some(1 << 30);
        let err = tiletune_bench::roofline::measure_ceilings(&c, |_| {}).unwrap_err();
        assert!(
            err.to_string().contains(
                "the three STREAM arrays need 293.0 GiB and 1.0 GiB of memory is available"
            ),
            "{err}"
        );
    }
}
