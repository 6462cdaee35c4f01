//! `tiletune probe`: describe the SoC (tiletune-soc) and whether hardware
//! counters are readable (tiletune-pmu). Wiring only.

use super::Global;
use serde::Serialize;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use tiletune_pmu::availability::{PmuAvailability, hardware_counters};
use tiletune_soc::SocInfo;
use tiletune_soc::thermal::{self, ThermalZone};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Read proc/ and sys/ under DIR instead of / (a dump pulled from another
    /// device; see soc/README.md). Features then come from its cpuinfo, and
    /// the PMU check, which needs the live machine, is skipped.
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
}

/// The whole `--json` record.
#[derive(Debug, Serialize)]
struct Report {
    soc: SocInfo,
    /// `null` with `--root`: an offline dump says nothing about counters.
    pmu: Option<PmuAvailability>,
    /// The thermal zones now (empty for a dump without `sys/class/thermal`).
    thermal: Vec<ThermalZone>,
}

pub fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let report = match &args.root {
        Some(dir) => Report {
            soc: tiletune_soc::probe_root(dir)?,
            pmu: None,
            thermal: thermal::read_zones(dir),
        },
        None => Report {
            soc: tiletune_soc::probe()?,
            pmu: Some(hardware_counters()),
            thermal: thermal::read_zones(&tiletune_soc::live_root()),
        },
    };
    let mut out = std::io::stdout().lock();
    if g.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        write!(out, "{}", report.soc)?;
        if let Some(p) = &report.pmu {
            let state = if p.available {
                "available"
            } else {
                "unavailable"
            };
            match p.errno {
                Some(e) => writeln!(out, "pmu          {state} (errno {e}): {}", p.reason)?,
                None => writeln!(out, "pmu          {state}: {}", p.reason)?,
            }
        }
        if let Some(hot) = thermal::hottest(&report.thermal) {
            writeln!(
                out,
                "thermal      hottest {:.1} °C ({} {}) of {} zone(s)",
                hot.celsius,
                hot.zone,
                hot.kind,
                report.thermal.len()
            )?;
        }
        if g.verbose {
            writeln!(
                out,
                "fingerprint input:\n{}",
                report.soc.fingerprint_input()
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
