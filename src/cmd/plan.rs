//! `tiletune plan`: the execution plan a model gets on this machine — per
//! kernel problem the variant, parameters and threads, and whether each came
//! from the tuned table, the nearest tuned shape, or the analytic default —
//! with the time the lookup and planning took.

use super::Global;
use super::run::{ModelArgs, open_gguf, plan_for};
use std::io::Write;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub m: ModelArgs,
}

pub fn run(g: &Global, mut args: Args) -> anyhow::Result<ExitCode> {
    args.m.model = super::pull::model_path(&args.m.model)?;
    let gguf = open_gguf(&args.m)?;
    let plan = plan_for(&args.m, &gguf)?;
    let mut out = std::io::stdout().lock();
    if g.json {
        serde_json::to_writer_pretty(&mut out, &plan.to_json())?;
        writeln!(out)?;
    } else {
        writeln!(out, "{plan}")?;
    }
    Ok(ExitCode::SUCCESS)
}
