//! Running a peer engine as a child process: stdout and stderr are drained
//! on their own threads (a chatty child never blocks on a full pipe), a
//! timeout kills a hung child, and every failure carries the command line and
//! the tail of stderr so the user sees why.

use crate::BenchError;
use std::ffi::OsString;
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What a successful run printed.
#[derive(Clone, Debug)]
pub struct PeerOutput {
    pub stdout: String,
    pub stderr: String,
    pub seconds: f64,
}

/// One command line of a peer engine.
#[derive(Clone, Debug)]
pub struct PeerCommand {
    engine: String,
    program: PathBuf,
    args: Vec<OsString>,
    timeout: Option<Duration>,
    cwd: Option<PathBuf>,
}

impl PeerCommand {
    /// `engine` names the peer in messages (`llama.cpp`, `mnn`, `tiletune`).
    pub fn new(engine: impl Into<String>, program: impl Into<PathBuf>) -> Self {
        PeerCommand {
            engine: engine.into(),
            program: program.into(),
            args: Vec::new(),
            timeout: None,
            cwd: None,
        }
    }

    pub fn arg(mut self, a: impl Into<OsString>) -> Self {
        self.args.push(a.into());
        self
    }

    pub fn args<I: IntoIterator<Item = S>, S: Into<OsString>>(mut self, it: I) -> Self {
        self.args.extend(it.into_iter().map(Into::into));
        self
    }

    /// Kill the child after `d`.
    pub fn timeout(mut self, d: Duration) -> Self {
        self.timeout = Some(d);
        self
    }

    /// Run in `dir` (for peers that litter their working directory).
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    pub fn engine(&self) -> &str {
        &self.engine
    }

    pub fn program(&self) -> &Path {
        &self.program
    }

    /// The command line, for messages and records.
    pub fn display(&self) -> String {
        std::iter::once(self.program.as_os_str())
            .chain(self.args.iter().map(|a| a.as_os_str()))
            .map(|s| {
                let s = s.to_string_lossy();
                if s.is_empty() || s.contains(char::is_whitespace) {
                    format!("'{s}'")
                } else {
                    s.into_owned()
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Runs to completion; a spawn failure, a nonzero exit, a signal or a
    /// timeout is an error with the stderr tail.
    pub fn run(&self) -> Result<PeerOutput, BenchError> {
        let fail = |reason: String, stderr: &str| BenchError::PeerRun {
            engine: self.engine.clone(),
            command: self.display(),
            reason,
            stderr_tail: stderr_tail(stderr, 12),
        };
        let t0 = Instant::now();
        let mut command = Command::new(&self.program);
        if let Some(d) = &self.cwd {
            command.current_dir(d);
        }
        let mut child = command
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| fail(format!("cannot start {} ({e})", self.program.display()), ""))?;
        let drain = |r: Option<Box<dyn Read + Send>>| {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                if let Some(mut r) = r {
                    // A read error leaves what was read; the exit status decides.
                    let _ = r.read_to_end(&mut buf);
                }
                String::from_utf8_lossy(&buf).into_owned()
            })
        };
        let out = drain(
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
        );
        let err = drain(
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
        );
        let mut timed_out = false;
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break Ok(s),
                Ok(None) => {}
                Err(e) => break Err(e),
            }
            if self.timeout.is_some_and(|t| t0.elapsed() > t) {
                timed_out = true;
                let _ = child.kill();
                break child.wait();
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let stdout = out.join().unwrap_or_default();
        let stderr = err.join().unwrap_or_default();
        let status = status.map_err(|e| fail(format!("cannot wait for it ({e})"), &stderr))?;
        if timed_out {
            return Err(fail(
                format!(
                    "no result within {:.0} s; it was killed (raise the timeout or use smaller settings)",
                    self.timeout.unwrap_or_default().as_secs_f64()
                ),
                &stderr,
            ));
        }
        if !status.success() {
            let why = match (status.code(), status.signal()) {
                (Some(c), _) => format!("it exited with status {c}"),
                (None, Some(sig)) => killed_by(sig),
                (None, None) => "it ended without an exit status".to_string(),
            };
            return Err(fail(why, &stderr));
        }
        Ok(PeerOutput {
            stdout,
            stderr,
            seconds: t0.elapsed().as_secs_f64(),
        })
    }
}

/// Why a child killed by signal `sig` died, and what to look at: the
/// signals a crashing peer dies of name their likely cause (a native build
/// running instructions this CPU or its kernel refuses is SIGILL).
fn killed_by(sig: i32) -> String {
    let (name, hint) = match sig {
        libc::SIGILL => (
            "SIGILL, an illegal instruction",
            "the binary uses an instruction this CPU or its kernel does not run, as a build \
             for another CPU or a native build's AMX or SVE path can; rebuild it for this \
             machine or turn that path off (llama.cpp: --llama-args \"--repack 0\")",
        ),
        libc::SIGSEGV => ("SIGSEGV, a segmentation fault", "the peer crashed"),
        libc::SIGBUS => (
            "SIGBUS, a bus error",
            "a mapped file was truncated or changed, or the peer crashed",
        ),
        libc::SIGFPE => ("SIGFPE, an arithmetic fault", "the peer crashed"),
        libc::SIGABRT => (
            "SIGABRT",
            "the peer aborted: an assertion or an allocation failed",
        ),
        libc::SIGKILL => (
            "SIGKILL",
            "often the kernel's out-of-memory killer (see `dmesg`): use a smaller model or context",
        ),
        _ => return format!("it was killed by signal {sig}"),
    };
    format!("it was killed by {name}: {hint}")
}

/// The last `lines` non-empty lines of `s`, each cut to 300 characters.
pub fn stderr_tail(s: &str, lines: usize) -> String {
    let v: Vec<&str> = s.lines().filter(|l| !l.trim().is_empty()).collect();
    v[v.len().saturating_sub(lines)..]
        .iter()
        .map(|l| {
            let mut t: String = l.chars().take(300).collect();
            if t.len() < l.len() {
                t.push('…');
            }
            format!("  | {t}")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first executable file called `name` on `$PATH`.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// `sha256:<12 hex digits>` of a binary's content: the version of a peer
/// that has no version flag (MNN's `llm_bench`), `unknown` if unreadable.
pub fn binary_fingerprint(path: &Path) -> String {
    use sha2::{Digest, Sha256};
    match std::fs::read(path) {
        Ok(bytes) => {
            let d = Sha256::digest(&bytes);
            let hex: String = d.iter().take(6).map(|b| format!("{b:02x}")).collect();
            format!("sha256:{hex}")
        }
        Err(_) => "unknown".into(),
    }
}
