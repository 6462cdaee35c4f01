//! How the host reaches a device: a [`Transport`] turns a device command
//! into a local process (`adb -s SERIAL shell CMD`, `ssh HOST CMD`) and
//! copies files both ways. Everything above it (the push cache, device
//! facts, resumable runs) is written once against this trait; [`crate::adb`]
//! and [`crate::ssh`] are the two implementations, and a test points either
//! at a fake program.

use crate::error::{RemoteError, Result};
use crate::shell::{self, End, MarkerFilter};
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

/// One way to reach one device.
pub trait Transport: Send + Sync {
    /// How the user names the device: `adb:R58M123`, `ssh:pi@board:2222`.
    fn name(&self) -> String;
    /// The local process that runs `cmd` in the device's shell.
    fn command(&self, cmd: &str) -> Command;
    /// Copies a local file to `remote` on the device.
    fn push(&self, local: &Path, remote: &str) -> Result<()>;
    /// Copies `remote` on the device to a local file.
    fn pull(&self, remote: &str, local: &Path) -> Result<()>;
    /// The device answers right now.
    fn reachable(&self) -> bool;
    /// Whether the device runs Android (adb), which decides the advice
    /// given for counters and the screen.
    fn android(&self) -> bool;
}

/// Spawns a local transport process, naming the program when it is missing.
pub(crate) fn spawn(mut cmd: Command) -> Result<std::process::Child> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    cmd.spawn()
        .map_err(|source| RemoteError::Tool { program, source })
}

/// Runs a local transport process to the end, failing with its stderr.
pub(crate) fn check(device: &str, what: &str, cmd: Command) -> Result<Vec<u8>> {
    let mut cmd = cmd;
    cmd.stdin(Stdio::null());
    let program = cmd.get_program().to_string_lossy().into_owned();
    let out = cmd
        .output()
        .map_err(|source| RemoteError::Tool { program, source })?;
    if !out.status.success() {
        return Err(RemoteError::Command {
            device: device.to_string(),
            what: what.to_string(),
            detail: tail(&out.stderr, &out.stdout),
        });
    }
    Ok(out.stdout)
}

/// The last lines of what a failed command said, for an error message.
pub(crate) fn tail(stderr: &[u8], stdout: &[u8]) -> String {
    let text = if stderr.iter().any(|b| !b.is_ascii_whitespace()) {
        stderr
    } else {
        stdout
    };
    let text = String::from_utf8_lossy(text);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    match lines.len() {
        0 => "no output".to_string(),
        n => lines[n.saturating_sub(4)..].join(" / "),
    }
}

/// Runs `cmd` on the device and returns its stdout; a non-zero status or a
/// dropped connection is an error naming `what`.
pub fn capture(t: &dyn Transport, what: &str, cmd: &str) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut err = Vec::new();
    let end = stream(t, cmd, &mut out, &mut err)?;
    match end {
        End::Exited(0) => Ok(out),
        End::Exited(code) => Err(RemoteError::Command {
            device: t.name(),
            what: what.to_string(),
            detail: format!("exit status {code}: {}", tail(&err, &out)),
        }),
        End::Lost => Err(RemoteError::Command {
            device: t.name(),
            what: what.to_string(),
            detail: format!("the connection dropped ({})", tail(&err, &[])),
        }),
    }
}

/// Runs `cmd` on the device, copying its stdout and stderr to `out` and
/// `err` as they arrive, and says how it ended (see [`crate::shell`]).
pub fn stream(
    t: &dyn Transport,
    cmd: &str,
    out: &mut (dyn Write + Send),
    err: &mut (dyn Write + Send),
) -> Result<End> {
    let mut local = t.command(&shell::with_exit_marker(cmd));
    local
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = spawn(local)?;
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let io = |source| RemoteError::Io {
        path: "the device's output".into(),
        source,
    };
    let end = std::thread::scope(|s| -> Result<End> {
        let errs = s.spawn(move || -> std::io::Result<()> {
            let mut buf = [0u8; 8192];
            loop {
                let n = stderr.read(&mut buf)?;
                if n == 0 {
                    return Ok(());
                }
                err.write_all(&buf[..n])?;
                err.flush()?;
            }
        });
        let mut filter = MarkerFilter::default();
        let mut buf = [0u8; 8192];
        loop {
            let n = stdout.read(&mut buf).map_err(io)?;
            if n == 0 {
                break;
            }
            out.write_all(&filter.feed(&buf[..n])).map_err(io)?;
            out.flush().map_err(io)?;
        }
        let (rest, end) = filter.finish();
        out.write_all(&rest).map_err(io)?;
        out.flush().map_err(io)?;
        errs.join()
            .expect("stderr reader does not panic")
            .map_err(io)?;
        Ok(end)
    })?;
    child.wait().map_err(io)?;
    Ok(end)
}
