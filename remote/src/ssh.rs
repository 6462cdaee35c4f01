//! Linux boards and servers over `ssh`: `ssh [-p PORT] [USER@]HOST CMD`,
//! files copied through the same channel (`cat > FILE`, `cat FILE`), so
//! nothing but `ssh` and a POSIX shell on the far side is needed. The
//! program is `ssh` on PATH, or `$TILETUNE_SSH`. `BatchMode` keeps a
//! password prompt from hanging the run (use a key or an agent), and the
//! keep-alives turn a pulled cable into a dropped connection within ~15 s.

use crate::error::{RemoteError, Result};
use crate::shell::quote;
use crate::transport::{Transport, check, spawn, tail};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// `[USER@]HOST[:PORT]` (an IPv6 host in brackets: `[::1]:2222`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshTarget {
    pub user: Option<String>,
    pub host: String,
    pub port: Option<u16>,
}

impl std::str::FromStr for SshTarget {
    type Err = RemoteError;

    fn from_str(s: &str) -> Result<Self> {
        let bad = |reason: &str| RemoteError::BadAddress {
            address: s.to_string(),
            reason: format!("{reason}; use [USER@]HOST[:PORT], e.g. pi@board.local:2222"),
        };
        let (user, rest) = match s.rsplit_once('@') {
            Some((u, r)) if !u.is_empty() => (Some(u.to_string()), r),
            Some(_) => return Err(bad("the user before @ is empty")),
            None => (None, s),
        };
        let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
            let (h, after) = v6.split_once(']').ok_or_else(|| bad("no closing ]"))?;
            match after {
                "" => (h, None),
                p => (
                    h,
                    Some(p.strip_prefix(':').ok_or_else(|| bad("junk after ]"))?),
                ),
            }
        } else {
            match rest.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (rest, None),
            }
        };
        if host.is_empty() || host.starts_with('-') || host.contains(char::is_whitespace) {
            return Err(bad("no host name"));
        }
        let port = port
            .map(|p| {
                p.parse::<u16>()
                    .ok()
                    .filter(|&p| p > 0)
                    .ok_or_else(|| bad("the port is not a number from 1 to 65535"))
            })
            .transpose()?;
        Ok(SshTarget {
            user,
            host: host.to_string(),
            port,
        })
    }
}

impl std::fmt::Display for SshTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(u) = &self.user {
            write!(f, "{u}@")?;
        }
        if self.host.contains(':') {
            write!(f, "[{}]", self.host)?;
        } else {
            f.write_str(&self.host)?;
        }
        if let Some(p) = self.port {
            write!(f, ":{p}")?;
        }
        Ok(())
    }
}

/// One host.
#[derive(Debug, Clone)]
pub struct Ssh {
    program: PathBuf,
    target: SshTarget,
}

impl Ssh {
    pub fn new(target: SshTarget) -> Self {
        let program = std::env::var_os("TILETUNE_SSH")
            .filter(|p| !p.is_empty())
            .map_or_else(|| "ssh".into(), PathBuf::from);
        Ssh { program, target }
    }

    fn ssh(&self) -> Command {
        let mut c = Command::new(&self.program);
        c.args([
            "-o",
            "BatchMode=yes",
            "-o",
            "ServerAliveInterval=5",
            "-o",
            "ServerAliveCountMax=3",
        ]);
        if let Some(p) = self.target.port {
            c.arg("-p").arg(p.to_string());
        }
        let host = match &self.target.user {
            Some(u) => format!("{u}@{}", self.target.host),
            None => self.target.host.clone(),
        };
        c.arg(host);
        c
    }
}

impl Transport for Ssh {
    fn name(&self) -> String {
        format!("ssh:{}", self.target)
    }

    fn command(&self, cmd: &str) -> Command {
        let mut c = self.ssh();
        c.arg(cmd);
        c
    }

    fn push(&self, local: &Path, remote: &str) -> Result<()> {
        let file = std::fs::File::open(local).map_err(|source| RemoteError::Io {
            path: local.to_path_buf(),
            source,
        })?;
        let mut c = self.command(&format!("cat > {}", quote(remote)));
        c.stdin(file).stdout(Stdio::null()).stderr(Stdio::piped());
        let out = spawn(c)?
            .wait_with_output()
            .map_err(|source| RemoteError::Io {
                path: local.to_path_buf(),
                source,
            })?;
        if !out.status.success() {
            return Err(RemoteError::Command {
                device: self.name(),
                what: format!("copy {} to {remote}", local.display()),
                detail: tail(&out.stderr, &[]),
            });
        }
        Ok(())
    }

    fn pull(&self, remote: &str, local: &Path) -> Result<()> {
        let bytes = check(
            &self.name(),
            &format!("copy {remote} here"),
            self.command(&format!("cat {}", quote(remote))),
        )?;
        std::fs::write(local, bytes).map_err(|source| RemoteError::Io {
            path: local.to_path_buf(),
            source,
        })
    }

    fn reachable(&self) -> bool {
        let mut c = self.command("true");
        c.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        c.status().is_ok_and(|s| s.success())
    }

    fn android(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> SshTarget {
        s.parse().unwrap()
    }

    #[test]
    fn targets_parse_and_print_back() {
        assert_eq!(
            t("pi@board:2222"),
            SshTarget {
                user: Some("pi".into()),
                host: "board".into(),
                port: Some(2222)
            }
        );
        assert_eq!(t("board").port, None);
        assert_eq!(t("[::1]:22").host, "::1");
        for s in ["pi@board:2222", "board", "[::1]:22", "me@10.0.0.2"] {
            assert_eq!(t(s).to_string(), s);
        }
    }

    #[test]
    fn bad_targets_say_the_form() {
        for s in [
            "",
            "@board",
            "board:0",
            "board:x",
            "-oProxyCommand=x",
            "[::1",
        ] {
            let e = s.parse::<SshTarget>().unwrap_err().to_string();
            assert!(e.contains("[USER@]HOST[:PORT]"), "{s}: {e}");
        }
    }
}
