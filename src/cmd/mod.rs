//! One module per subcommand. Each exposes `Args` (clap) and
//! `run(&Global, Args) -> anyhow::Result<ExitCode>`.

pub mod bench;
pub mod chat;
pub mod plan;
pub mod ppl;
pub mod probe;
pub mod run;
pub mod table;
pub mod tune;

/// Flags every subcommand sees.
#[derive(Debug, Clone, Copy)]
#[allow(dead_code)] // read by later subcommands
pub struct Global {
    pub json: bool,
    pub verbose: bool,
}
