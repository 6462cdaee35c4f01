//! `tiletune remote --adb [SERIAL|all] | --ssh [USER@]HOST[:PORT] <subcommand> ...`:
//! run a subcommand on a phone or a board and merge what it measured into
//! this machine's table. Wiring only: the transports, the push cache, the
//! device facts, the resumed run and the merge live in `tiletune-remote`.

use super::Global;
use anyhow::bail;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tiletune_remote::adb::{self, Adb};
use tiletune_remote::ssh::{Ssh, SshTarget};
use tiletune_remote::{Job, Options, Outcome, Sinks, Transport};
use tiletune_tuner::budget::parse_budget;

/// The subcommands that make sense on a device (the rest need this
/// machine: a terminal, the network, or files only the host has).
const ON_DEVICE: &[&str] = &["probe", "bench", "tune", "run", "compare", "plan", "ppl"];

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Android devices over adb: `--adb` alone for the one connected,
    /// `--adb SERIAL`, or `--adb all` for every connected device (one
    /// after another, each into its own SoC's rows). `$ADB` names the adb
    /// program.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "", value_name = "SERIAL", conflicts_with = "ssh")]
    pub adb: Option<String>,
    /// A Linux host over ssh, [USER@]HOST[:PORT]; repeat for several. Uses
    /// your keys or agent (no password prompts); `$TILETUNE_SSH` names the
    /// ssh program.
    #[arg(long, value_name = "[USER@]HOST[:PORT]")]
    pub ssh: Vec<String>,
    /// The work directory on the device [default: /data/local/tmp/tiletune
    /// over adb, ~/.cache/tiletune-remote over ssh]; binaries and models
    /// pushed there are kept by content and reused.
    #[arg(long, value_name = "DIR")]
    pub device_dir: Option<String>,
    /// The static tiletune build to push [default: the one for the device's
    /// architecture, built by `scripts/build-device`].
    #[arg(long, value_name = "PATH")]
    pub device_bin: Option<PathBuf>,
    /// The host selector table the device's rows are merged into [default:
    /// $TILETUNE_DB, else the XDG data directory].
    #[arg(long, value_name = "PATH")]
    pub db: Option<PathBuf>,
    /// How long to wait for a device whose connection dropped before giving
    /// up (the run then starts again and a campaign resumes).
    #[arg(long, default_value = "10m", value_parser = parse_budget, value_name = "TIME")]
    pub reconnect_wait: Duration,
    /// The subcommand and its arguments, as typed on the device (`tune
    /// --model M.gguf --budget 5m`, `probe`, `bench model -m M.gguf`,
    /// `compare -m M.gguf --llama-bench ./llama-bench`); local files named
    /// by --model, --file, --llama-bench, --mnn-bench, ... are pushed.
    /// With `--adb`, a first word that is not a subcommand is the serial.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        required = true,
        value_name = "SUBCOMMAND"
    )]
    pub command: Vec<String>,
}

pub fn run(g: &Global, mut args: Args) -> anyhow::Result<ExitCode> {
    let devices = transports(&mut args)?;
    let Some(sub) = args.command.first() else {
        bail!("say what to run on the device, e.g. `tiletune remote --adb tune --model M.gguf`");
    };
    if !ON_DEVICE.contains(&sub.as_str()) {
        bail!(
            "`{sub}` does not run on a device through remote; use one of: {}",
            ON_DEVICE.join(", ")
        );
    }
    let mut job = Job { args: Vec::new() };
    if g.json {
        job.args.push("--json".into());
    }
    if g.verbose {
        job.args.push("-v".into());
    }
    job.args.extend(resolve_model_ids(&args.command)?);
    let opts = Options {
        dir: args.device_dir.clone(),
        device_bin: args.device_bin.clone(),
        host_db: args
            .db
            .clone()
            .unwrap_or_else(tiletune_tables::default_db_path),
        reconnect_wait: args.reconnect_wait,
        max_reconnects: 5,
    };
    let (mut out, mut err) = (std::io::stdout(), std::io::stderr());
    let mut sinks = Sinks {
        out: &mut out,
        err: &mut err,
    };
    let mut ok = true;
    // Each error names its device.
    for (_, result) in tiletune_remote::run_each(&devices, &job, &opts, &mut sinks) {
        match result {
            Ok(o) => {
                ok &= o.status == 0;
                say_outcome(&o, &opts.host_db);
            }
            Err(e) => {
                ok = false;
                eprintln!("error: {e}");
            }
        }
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The devices the flags name. With `--adb`, clap hands a bare serial to
/// the command list (the serial is optional), so it is taken back here: a
/// first word that names no tiletune subcommand is the serial.
fn transports(args: &mut Args) -> anyhow::Result<Vec<Box<dyn Transport>>> {
    use clap::CommandFactory;
    if let Some(serial) = args.adb.take() {
        let serial = match serial.as_str() {
            "" => match args.command.first() {
                Some(w) if crate::Cli::command().find_subcommand(w).is_none() => {
                    Some(args.command.remove(0))
                }
                _ => None,
            },
            s => Some(s.to_string()),
        };
        return Ok(match serial.as_deref() {
            None => vec![Box::new(adb::single()?)],
            Some("all") => adb::all()?
                .into_iter()
                .map(|a| Box::new(a) as Box<dyn Transport>)
                .collect(),
            Some(s) => vec![Box::new(Adb::new(s))],
        });
    }
    if args.ssh.is_empty() {
        bail!("say which device: --adb [SERIAL|all] or --ssh [USER@]HOST[:PORT]");
    }
    args.ssh
        .iter()
        .map(|s| Ok(Box::new(Ssh::new(s.parse::<SshTarget>()?)) as Box<dyn Transport>))
        .collect()
}

/// `--model ORG/NAME[:QUANT]` becomes the cached (or pulled) file here, so
/// the device gets the file and never needs the network.
fn resolve_model_ids(command: &[String]) -> anyhow::Result<Vec<String>> {
    let mut out = command.to_vec();
    for i in 1..out.len() {
        if matches!(out[i - 1].as_str(), "--model" | "-m") {
            let p = super::pull::model_path(std::path::Path::new(&out[i]))?;
            out[i] = p.to_string_lossy().into_owned();
        }
    }
    Ok(out)
}

fn say_outcome(o: &Outcome, host_db: &std::path::Path) {
    let m = &o.merged;
    eprintln!(
        "{}: exit status {}; {} ({}) merged into {}: {} new measurement(s), {} selection(s) \
         added, {} replaced, {} verdict(s){}",
        o.device,
        o.status,
        o.fingerprint,
        o.soc_name,
        host_db.display(),
        m.measurements_added,
        m.selections_added,
        m.selections_replaced,
        m.verdicts_added + m.verdicts_replaced,
        if o.reconnects > 0 {
            format!("; resumed after {} dropped connection(s)", o.reconnects)
        } else {
            String::new()
        }
    );
    for r in &o.refused {
        eprintln!("{}: left out of the merge: {r}", o.device);
    }
}
