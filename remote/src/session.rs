//! One remote run on one device, start to end: read the device's facts,
//! find the static build for its architecture, push it and the job's files
//! (content-addressed, see [`crate::push`]), probe before, run the
//! subcommand with its output streamed back, run it again after a dropped
//! connection once the device is back, probe after, then pull the device
//! table's rows for its SoC and merge them into the host table.
//!
//! Why a re-run resumes without loss or duplicates: every command runs
//! with the device's own table (`TILETUNE_DB` in the work directory), and
//! `tiletune tune` records each measurement there as it is taken, keyed by
//! (SoC, kernel ABI, problem, candidate), and resumes an unfinished
//! campaign whose process is gone. So the re-run continues the same
//! campaign, skipping what was measured; the merge into the host table is
//! an import, which adds a keyed row at most once.

use crate::device::{DeviceProbe, Facts, counter_advice, default_dir, thermal_record};
use crate::error::{RemoteError, Result};
use crate::push::{Slot, Upload, ensure};
use crate::shell::{self, End};
use crate::transport::{Transport, capture, stream};
use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tiletune_tables::{ImportStats, OpenOptions, SelectorDb, SocRecord, now_unix, read_export};
use tiletune_tuner::screen::screen_export;

/// Flags whose value is a local file the device needs, and where it goes.
/// The tiletune subcommands' own spellings: a value that names an existing
/// local file is pushed and replaced by its device path.
pub const FILE_FLAGS: &[(&str, Slot)] = &[
    ("--model", Slot::Files),
    ("-m", Slot::Files),
    ("--file", Slot::Files),
    ("--mnn-config", Slot::Files),
    ("--llama-bench", Slot::Peers),
    ("--mnn-bench", Slot::Peers),
    ("--llama-perplexity", Slot::Peers),
    ("--llama-test-backend-ops", Slot::Peers),
];

/// Room left beside what is pushed, for the device table, exports and logs.
const SPARE_BYTES: u64 = 16 << 20;

/// What to run on the device: tiletune's arguments, as the user would type
/// them there, with local paths still local.
#[derive(Debug, Clone)]
pub struct Job {
    pub args: Vec<String>,
}

impl Job {
    /// The local files the job needs on the device, with the index of the
    /// argument that names each.
    pub fn uploads(&self) -> Result<Vec<(usize, Upload)>> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.args.len() {
            let a = &self.args[i];
            let (flag, value_at) = match a.split_once('=') {
                Some((f, _)) if f.starts_with("--") => (f, i),
                _ => (a.as_str(), i + 1),
            };
            let Some((_, slot)) = FILE_FLAGS.iter().find(|(f, _)| *f == flag) else {
                i += 1;
                continue;
            };
            if let Some(v) = self.value(i, value_at)
                && Path::new(&v).exists()
            {
                out.push((value_at, Upload::of(Path::new(&v), *slot)?));
            }
            i = value_at + 1;
        }
        Ok(out)
    }

    fn value(&self, flag_at: usize, value_at: usize) -> Option<String> {
        if value_at == flag_at {
            self.args[flag_at]
                .split_once('=')
                .map(|(_, v)| v.to_string())
        } else {
            self.args.get(value_at).cloned()
        }
    }

    /// The arguments with each uploaded file replaced by its device path.
    pub fn device_args(&self, uploads: &[(usize, Upload)], dir: &str) -> Vec<String> {
        let mut args = self.args.clone();
        for (at, u) in uploads {
            let remote = u.remote(dir);
            args[*at] = match args[*at].split_once('=') {
                Some((flag, _)) if flag.starts_with("--") => format!("{flag}={remote}"),
                _ => remote,
            };
        }
        args
    }
}

/// How a remote run is set up.
#[derive(Debug, Clone)]
pub struct Options {
    /// The device's work directory (default [`default_dir`]).
    pub dir: Option<String>,
    /// The static tiletune build to push (default: found by
    /// [`find_binary`] for the device's architecture).
    pub device_bin: Option<PathBuf>,
    /// The host table the device's rows are merged into.
    pub host_db: PathBuf,
    /// How long to wait for a dropped device to come back.
    pub reconnect_wait: Duration,
    /// How often a run may be started again after a drop.
    pub max_reconnects: usize,
}

/// What a remote run did.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub device: String,
    pub fingerprint: String,
    pub soc_name: String,
    /// The subcommand's exit status on the device.
    pub status: i32,
    /// Files pushed this time (the rest were on the device already).
    pub pushed: Vec<String>,
    pub reused: Vec<String>,
    /// Times the run was started again after a dropped connection.
    pub reconnects: usize,
    /// What the merge into the host table changed.
    pub merged: ImportStats,
    /// Rows of the device table the host screening left out, with why.
    pub refused: Vec<String>,
    /// Everything the user was warned about (also printed as it happened).
    pub warnings: Vec<String>,
}

/// Where the static build for `target` may be: `$TILETUNE_DEVICE_BIN_DIR/
/// <target>/tiletune`, then beside this executable (`tiletune-<target>`,
/// as a release unpacks), then cargo's layout around it
/// (`target/<target>/{profile}/tiletune` with this build's profile first).
pub fn binary_candidates(target: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(d) = std::env::var_os("TILETUNE_DEVICE_BIN_DIR").filter(|d| !d.is_empty()) {
        out.push(PathBuf::from(d).join(target).join("tiletune"));
    }
    if let Ok(exe) = std::env::current_exe()
        && let Some(dir) = exe.parent()
    {
        out.push(dir.join(format!("tiletune-{target}")));
        let profile = dir.file_name().map(|p| p.to_string_lossy().into_owned());
        let mut profiles = vec!["release".to_string(), "debug".to_string()];
        if let Some(p) = profile {
            profiles.retain(|q| *q != p);
            profiles.insert(0, p);
        }
        // exe in target/<profile>/ or target/<profile>/deps/.
        for up in [dir.parent(), dir.parent().and_then(Path::parent)]
            .into_iter()
            .flatten()
        {
            for p in &profiles {
                out.push(up.join(target).join(p).join("tiletune"));
            }
        }
    }
    out
}

/// The static build for the device (see [`binary_candidates`]).
pub fn find_binary(device: &str, facts: &Facts, explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = explicit {
        return Ok(p.to_path_buf());
    }
    let target = facts.target().ok_or_else(|| RemoteError::NoBinary {
        device: device.to_string(),
        arch: facts.arch.clone(),
        target: "none".into(),
        looked: "nothing: tiletune builds for aarch64 and x86_64 only".into(),
    })?;
    let candidates = binary_candidates(target);
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or_else(|| RemoteError::NoBinary {
            device: device.to_string(),
            arch: facts.arch.clone(),
            target: target.to_string(),
            looked: candidates
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// Output sinks of a run: the device's stdout and stderr, and the lines
/// tiletune itself says about the run (already prefixed with the device).
pub struct Sinks<'a> {
    pub out: &'a mut (dyn Write + Send),
    pub err: &'a mut (dyn Write + Send),
}

impl Sinks<'_> {
    fn say(&mut self, line: &str) {
        // The user's terminal going away is no reason to stop a campaign.
        let _ = writeln!(self.err, "{line}");
    }
}

/// Runs `job` on the device behind `t` (see the module docs).
pub fn run(t: &dyn Transport, job: &Job, opts: &Options, sinks: &mut Sinks) -> Result<Outcome> {
    let device = t.name();
    let dir = opts
        .dir
        .clone()
        .unwrap_or_else(|| default_dir(t.android()).to_string());
    let facts = Facts::read(t, &dir)?;
    let dir = facts.dir.clone().unwrap_or(dir);
    let mut warnings: Vec<String> = Vec::new();
    let mut warn = |sinks: &mut Sinks, w: String| {
        sinks.say(&format!("{device}: warning: {w}"));
        warnings.push(w);
    };

    let bin = Upload::of(
        &find_binary(&device, &facts, opts.device_bin.as_deref())?,
        Slot::Bin,
    )?;
    let files = job.uploads()?;
    let need: u64 = std::iter::once(&bin)
        .chain(files.iter().map(|(_, u)| u))
        .filter(|u| !facts.have.contains(&u.rel()))
        .map(|u| u.bytes)
        .sum();
    if let Some(free) = facts.free_bytes
        && need > 0
        && free < need + SPARE_BYTES
    {
        return Err(RemoteError::NoSpace {
            device,
            dir,
            free_mib: free >> 20,
            need_mib: (need + SPARE_BYTES).div_ceil(1 << 20),
        });
    }
    let (mut pushed, mut reused) = (Vec::new(), Vec::new());
    for u in std::iter::once(&bin).chain(files.iter().map(|(_, u)| u)) {
        if ensure(t, &dir, u, &facts.have)? {
            pushed.push(u.rel());
        } else {
            reused.push(u.rel());
        }
    }
    let bin_path = bin.remote(&dir);
    let db = format!("{dir}/selector.db");
    let env = [("TILETUNE_DB", db.as_str())];
    let tiletune = |args: &[String]| shell::exec(&dir, &env, &bin_path, args);

    let probe_args = ["--json".to_string(), "probe".to_string()];
    let before = DeviceProbe::parse(
        &device,
        &capture(t, "tiletune --json probe", &tiletune(&probe_args))?,
    )?;
    let fp = before.soc.fingerprint.clone();
    sinks.say(&format!(
        "{device}: {} ({} cpus, {} online), fingerprint {fp}; {} pushed, {} already there",
        before.soc.name,
        before.soc.cores.len(),
        before.soc.online_cpus(),
        pushed.len(),
        reused.len()
    ));
    if let Some(a) = counter_advice(&before, &facts) {
        warn(sinks, a);
    }
    for w in facts.screen_warnings() {
        warn(sinks, w);
    }
    let offline = before.offline_cpus();
    if !offline.is_empty() {
        warn(
            sinks,
            format!(
                "cpus {} are offline: nothing is measured there (bring them online, or keep the \
                 device busy so the vendor's hotplug keeps them up)",
                tiletune_soc::sysfs::format_cpu_list(&offline)
            ),
        );
    }

    // The run, started again after each drop once the device is back.
    let cmd = tiletune(&job.device_args(&files, &dir));
    let mut reconnects = 0;
    let status = loop {
        match stream(t, &cmd, sinks.out, sinks.err)? {
            End::Exited(code) => break code,
            End::Lost if reconnects < opts.max_reconnects => {
                reconnects += 1;
                warn(
                    sinks,
                    format!(
                        "the connection dropped; waiting up to {} s for the device, then running \
                         again (a campaign resumes where it stopped)",
                        opts.reconnect_wait.as_secs()
                    ),
                );
                wait_for(t, opts.reconnect_wait)?;
                sinks.say(&format!("{device}: back; running again ({reconnects})"));
            }
            End::Lost => {
                return Err(RemoteError::Lost {
                    device,
                    waited_s: opts.reconnect_wait.as_secs(),
                });
            }
        }
    };

    let after = capture(t, "tiletune --json probe", &tiletune(&probe_args))
        .and_then(|b| DeviceProbe::parse(&device, &b));
    let after = match after {
        Ok(p) => Some(p),
        Err(e) => {
            warn(sinks, format!("no probe after the run: {e}"));
            None
        }
    };
    let (thermal_line, hot) = thermal_record(
        &device,
        before.hottest(),
        after.as_ref().and_then(DeviceProbe::hottest),
    );
    if let Some(w) = hot {
        warn(sinks, w);
    }
    if let Some(a) = &after {
        let newly: Vec<usize> = a
            .offline_cpus()
            .into_iter()
            .filter(|c| !offline.contains(c))
            .collect();
        if !newly.is_empty() {
            warn(
                sinks,
                format!(
                    "cpus {} went offline during the run (hotplug or thermal): their placements \
                     may be missing or slow",
                    tiletune_soc::sysfs::format_cpu_list(&newly)
                ),
            );
        }
    }

    let (merged, refused) = merge(
        t,
        &dir,
        &tiletune,
        &before,
        thermal_line.as_deref(),
        &opts.host_db,
    )?;
    Ok(Outcome {
        device,
        fingerprint: fp,
        soc_name: before.soc.name.clone(),
        status,
        pushed,
        reused,
        reconnects,
        merged,
        refused,
        warnings,
    })
}

/// Polls until the device answers, for at most `wait`.
fn wait_for(t: &dyn Transport, wait: Duration) -> Result<()> {
    let start = Instant::now();
    loop {
        if t.reachable() {
            return Ok(());
        }
        if start.elapsed() >= wait {
            return Err(RemoteError::Lost {
                device: t.name(),
                waited_s: wait.as_secs(),
            });
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Pulls the device table's rows for its SoC and imports them into the
/// host table under the device's fingerprint (the SoC is registered there
/// from the probe even when the device table has no rows yet). The thermal
/// line goes with the campaigns the host did not have.
fn merge(
    t: &dyn Transport,
    dir: &str,
    tiletune: &dyn Fn(&[String]) -> String,
    probe: &DeviceProbe,
    thermal_line: Option<&str>,
    host_db: &Path,
) -> Result<(ImportStats, Vec<String>)> {
    let fp = &probe.soc.fingerprint;
    let mut host = SelectorDb::open_with(
        host_db,
        OpenOptions {
            create: true,
            ..OpenOptions::default()
        },
    )?;
    let known: HashSet<String> = match host.soc(fp)? {
        Some(_) => host
            .export_soc(fp)?
            .campaigns
            .into_iter()
            .map(|c| c.id)
            .collect(),
        None => HashSet::new(),
    };
    let mut stats = ImportStats {
        socs_added: usize::from(host.soc(fp)?.is_none()),
        ..ImportStats::default()
    };
    host.register_soc(&SocRecord {
        fingerprint: fp.clone(),
        name: probe.soc.name.clone(),
        probe: serde_json::to_value(&probe.soc).expect("a SocInfo serializes"),
        first_seen: now_unix(),
    })?;
    let has_rows = capture(
        t,
        "look for the device table",
        &format!(
            "cd {} && if [ -f selector.db ]; then echo yes; else echo no; fi",
            shell::quote(dir)
        ),
    )?;
    if !String::from_utf8_lossy(&has_rows).trim().eq("yes") {
        return Ok((stats, Vec::new()));
    }
    let remote_file = format!("{dir}/out/{fp}.json");
    let export_args: Vec<String> = ["table", "export", "--soc", fp, "--out", &remote_file]
        .into_iter()
        .map(str::to_string)
        .collect();
    // Every command that writes the device table registers the SoC first,
    // so a table that exists has its rows.
    capture(t, "tiletune table export", &tiletune(&export_args))?;
    let local = std::env::temp_dir().join(format!(
        "tiletune-remote-{}-{}.json",
        std::process::id(),
        &fp[..fp.len().min(16)]
    ));
    t.pull(&remote_file, &local)?;
    let export = read_export(&local);
    let _ = std::fs::remove_file(&local);
    let mut export = export?;
    let refused: Vec<String> = screen_export(&mut export, tiletune_kernels::KERNEL_ABI)
        .iter()
        .map(|r| format!("{}: {}", r.row, r.reason))
        .collect();
    if let Some(line) = thermal_line {
        for c in export
            .campaigns
            .iter_mut()
            .filter(|c| !known.contains(&c.id))
        {
            match &mut c.drift_flags {
                serde_json::Value::Array(flags) => flags.push(line.into()),
                other => *other = serde_json::json!([line]),
            }
        }
    }
    let st = host.import(&export)?;
    stats.add(&st);
    Ok((stats, refused))
}

/// Runs `job` on each device in turn (a campaign per device, each into its
/// own SoC's rows); one device failing does not stop the others.
pub fn run_each(
    devices: &[Box<dyn Transport>],
    job: &Job,
    opts: &Options,
    sinks: &mut Sinks,
) -> Vec<(String, Result<Outcome>)> {
    devices
        .iter()
        .map(|t| (t.name(), run(t.as_ref(), job, opts, sinks)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(args: &[&str]) -> Job {
        Job {
            args: args.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn local_files_are_found_and_replaced_by_device_paths() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("m.gguf");
        let bench = dir.path().join("llama-bench");
        std::fs::write(&model, b"GGUF").unwrap();
        std::fs::write(&bench, b"#!/bin/sh").unwrap();
        let m = model.to_str().unwrap();
        let b = format!("--llama-bench={}", bench.display());
        let j = job(&["compare", "--model", m, &b, "--prompt", "m.gguf", "-t", "2"]);
        let odd = job(&["tune", "--quick", "-m", m]);
        assert_eq!(odd.uploads().unwrap()[0].0, 3);
        let ups = j.uploads().unwrap();
        assert_eq!(ups.len(), 2);
        assert_eq!((ups[0].0, ups[0].1.slot), (2, Slot::Files));
        assert_eq!((ups[1].0, ups[1].1.slot), (3, Slot::Peers));
        let args = j.device_args(&ups, "/d");
        assert_eq!(args[2], format!("/d/files/{}", ups[0].1.name));
        assert_eq!(args[3], format!("--llama-bench=/d/peers/{}", ups[1].1.name));
        assert_eq!(args[4..], ["--prompt", "m.gguf", "-t", "2"]);
        // A value that is no local file (a path on the device) stays.
        let j = job(&["run", "-m", "/data/local/tmp/x.gguf"]);
        assert!(j.uploads().unwrap().is_empty());
    }

    #[test]
    fn binaries_are_looked_for_by_target() {
        let c = binary_candidates("aarch64-unknown-linux-musl");
        assert!(
            c.iter()
                .any(|p| p.ends_with("aarch64-unknown-linux-musl/debug/tiletune"))
        );
        assert!(
            c.iter()
                .any(|p| p.ends_with("aarch64-unknown-linux-musl/release/tiletune"))
        );
        let facts = Facts::parse("arch=mips\n");
        let e = find_binary("adb:x", &facts, None).unwrap_err().to_string();
        assert!(e.contains("mips"), "{e}");
    }
}
