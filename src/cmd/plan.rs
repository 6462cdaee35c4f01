//! `tiletune plan`: the execution plan a model gets on this machine — per
//! kernel problem the variant, parameters and threads, and whether each came
//! from the tuned table, the nearest tuned shape, or the analytic default —
//! with the time the lookup and planning took. `--soc FP` shows the plan
//! another device (one `tiletune remote` tuned) builds from this table.

use super::Global;
use super::model_args::ModelArgs;
use std::io::Write;
use std::process::ExitCode;
use tiletune_runtime::engine::{open_gguf, plan_for, plan_for_soc};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub m: ModelArgs,
    /// Build the plan the device with this SoC fingerprint (or a unique
    /// prefix of it) builds from the table, with the cache sizes, cores and
    /// CPUs of its stored probe record, instead of this machine's.
    #[arg(long, value_name = "FINGERPRINT")]
    pub soc: Option<String>,
}

pub fn run(g: &Global, mut args: Args) -> anyhow::Result<ExitCode> {
    args.m.resolve()?;
    let opts = args.m.load_options(0);
    let gguf = open_gguf(&opts)?;
    let (plan, notes) = match &args.soc {
        Some(fp) => {
            let (plan, soc, notes) = plan_for_soc(&opts, &gguf, fp)?;
            if !g.json {
                println!("plan for soc {} ({})", soc.fingerprint, soc.name);
            }
            (plan, notes)
        }
        None => plan_for(&opts, &gguf)?,
    };
    for n in notes {
        eprintln!("warning: {n}");
    }
    let mut out = std::io::stdout().lock();
    if g.json {
        serde_json::to_writer_pretty(&mut out, &plan.to_json())?;
        writeln!(out)?;
    } else {
        writeln!(out, "{plan}")?;
    }
    Ok(ExitCode::SUCCESS)
}
