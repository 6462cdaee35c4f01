//! One module per subcommand. Each exposes `Args` (clap) and
//! `run(&Global, Args) -> anyhow::Result<ExitCode>`.

pub mod accept;
pub mod bench;
pub mod bench_model;
pub mod chat;
pub mod compare;
pub mod plan;
pub mod ppl;
pub mod probe;
pub mod report;
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

/// Opens (creating if needed) the selector table a command writes to, and
/// registers this SoC in it so its rows have a parent.
pub fn open_for_writing(
    path: &std::path::Path,
    soc: &tiletune_soc::SocInfo,
) -> anyhow::Result<tiletune_tables::SelectorDb> {
    use tiletune_tables::{OpenOptions, SelectorDb, SocRecord, now_unix};
    let mut db = SelectorDb::open_with(
        path,
        OpenOptions {
            create: true,
            ..OpenOptions::default()
        },
    )?;
    db.register_soc(&SocRecord {
        fingerprint: soc.fingerprint.clone(),
        name: soc.name.clone(),
        probe: serde_json::to_value(soc)?,
        first_seen: now_unix(),
    })?;
    Ok(db)
}
