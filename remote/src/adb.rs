//! Android devices over `adb`: `adb -s SERIAL shell CMD`, `adb push`, `adb
//! pull`, and `adb devices` for `--adb all`. The program is `adb` on PATH,
//! or `$ADB` (as the Android SDK's own scripts read it).

use crate::error::{RemoteError, Result};
use crate::transport::{Transport, check};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The adb program to run: `$ADB`, else `adb`.
pub fn program() -> PathBuf {
    std::env::var_os("ADB")
        .filter(|p| !p.is_empty())
        .map_or_else(|| "adb".into(), PathBuf::from)
}

/// One device by serial.
#[derive(Debug, Clone)]
pub struct Adb {
    program: PathBuf,
    serial: String,
}

impl Adb {
    pub fn new(serial: impl Into<String>) -> Self {
        Adb {
            program: program(),
            serial: serial.into(),
        }
    }

    fn adb(&self) -> Command {
        let mut c = Command::new(&self.program);
        c.arg("-s").arg(&self.serial);
        c
    }
}

/// What `adb devices` lists: the serials that are ready (state `device`),
/// and apart from them those that are not (`unauthorized`, `offline`) with
/// their state, so the caller can say why they were left out.
pub type Listing = (Vec<String>, Vec<(String, String)>);

/// Runs `adb devices` (see [`Listing`]).
pub fn devices() -> Result<Listing> {
    let mut c = Command::new(program());
    c.arg("devices");
    let out = check("adb", "adb devices", c)?;
    Ok(parse_devices(&String::from_utf8_lossy(&out)))
}

fn parse_devices(text: &str) -> Listing {
    let mut ready = Vec::new();
    let mut other = Vec::new();
    for line in text
        .lines()
        .skip_while(|l| !l.starts_with("List of devices"))
    {
        let mut w = line.split_whitespace();
        let (Some(serial), Some(state)) = (w.next(), w.next()) else {
            continue;
        };
        if serial == "List" {
            continue;
        }
        if state == "device" {
            ready.push(serial.to_string());
        } else {
            other.push((serial.to_string(), state.to_string()));
        }
    }
    (ready, other)
}

/// The one connected device when no serial was given (adb's own rule: more
/// than one needs a serial).
pub fn single() -> Result<Adb> {
    let (ready, other) = devices()?;
    match ready.as_slice() {
        [one] => Ok(Adb::new(one.clone())),
        [] => Err(RemoteError::NoDevice {
            detail: not_ready(&other),
        }),
        many => Err(RemoteError::BadAddress {
            address: "--adb".into(),
            reason: format!(
                "{} devices are connected ({}); name one with --adb SERIAL, or use --adb all",
                many.len(),
                many.join(", ")
            ),
        }),
    }
}

/// Every ready device, for `--adb all`.
pub fn all() -> Result<Vec<Adb>> {
    let (ready, other) = devices()?;
    if ready.is_empty() {
        return Err(RemoteError::NoDevice {
            detail: not_ready(&other),
        });
    }
    Ok(ready.into_iter().map(Adb::new).collect())
}

fn not_ready(other: &[(String, String)]) -> String {
    if other.is_empty() {
        return String::new();
    }
    let list: Vec<String> = other.iter().map(|(s, st)| format!("{s} is {st}")).collect();
    format!(
        " ({}: accept the debugging prompt on the device, or reconnect it)",
        list.join(", ")
    )
}

impl Transport for Adb {
    fn name(&self) -> String {
        format!("adb:{}", self.serial)
    }

    fn command(&self, cmd: &str) -> Command {
        let mut c = self.adb();
        c.arg("shell").arg(cmd);
        c
    }

    fn push(&self, local: &Path, remote: &str) -> Result<()> {
        let mut c = self.adb();
        c.arg("push").arg(local).arg(remote).stdout(Stdio::null());
        check(&self.name(), &format!("adb push {}", local.display()), c).map(drop)
    }

    fn pull(&self, remote: &str, local: &Path) -> Result<()> {
        let mut c = self.adb();
        c.arg("pull").arg(remote).arg(local).stdout(Stdio::null());
        check(&self.name(), &format!("adb pull {remote}"), c).map(drop)
    }

    fn reachable(&self) -> bool {
        let mut c = self.adb();
        c.arg("get-state")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        c.output()
            .is_ok_and(|o| o.status.success() && o.stdout.starts_with(b"device"))
    }

    fn android(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_are_split_by_state() {
        let text = "* daemon started successfully\nList of devices attached\n\
                    R58M123\tdevice usb:1-1 product:x model:SM_S911B\n\
                    emulator-5554\toffline\nZY22\tunauthorized\n\n";
        let (ready, other) = parse_devices(text);
        assert_eq!(ready, ["R58M123"]);
        assert_eq!(
            other,
            [
                ("emulator-5554".to_string(), "offline".to_string()),
                ("ZY22".to_string(), "unauthorized".to_string())
            ]
        );
        assert!(not_ready(&other).contains("ZY22 is unauthorized"));
        assert_eq!(parse_devices("List of devices attached\n\n").0.len(), 0);
    }
}
