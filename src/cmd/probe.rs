//! `tiletune probe`: placeholder wiring, filled in by the soc crate work.
use super::Global;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_g: &Global, _args: Args) -> anyhow::Result<ExitCode> {
    Ok(ExitCode::SUCCESS)
}
