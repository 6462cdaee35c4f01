//! One module per subcommand. Each exposes `Args` (clap) and
//! `run(&Global, Args) -> anyhow::Result<ExitCode>`.

pub mod probe;
pub mod table;

/// Flags every subcommand sees.
#[derive(Debug, Clone, Copy)]
#[allow(dead_code)] // read by later subcommands
pub struct Global {
    pub json: bool,
    pub verbose: bool,
}
