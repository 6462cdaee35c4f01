//! Files on the device, cached by content: a pushed file is named after the
//! SHA-256 of its bytes (`<16 hex>-<name>`) in the work directory's
//! `bin/` (tiletune builds), `peers/` (the user's llama-bench and
//! llm_bench) or `files/` (models, texts, configs). A file already there is
//! the same bytes, so it is never pushed twice; a push lands under a
//! `.part` name and is renamed once complete, so an interrupted push never
//! leaves a wrong file under a content name.

use crate::error::{RemoteError, Result};
use crate::shell::quote;
use crate::transport::{Transport, capture};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Where on the device a file goes (which also decides its mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// tiletune's own static build.
    Bin,
    /// The user's peer engines (executables).
    Peers,
    /// Data: models, texts, configs.
    Files,
}

impl Slot {
    pub fn dir(self) -> &'static str {
        match self {
            Slot::Bin => "bin",
            Slot::Peers => "peers",
            Slot::Files => "files",
        }
    }

    fn mode(self) -> &'static str {
        match self {
            Slot::Files => "644",
            Slot::Bin | Slot::Peers => "755",
        }
    }
}

/// A local file and its content-addressed place on the device.
#[derive(Debug, Clone)]
pub struct Upload {
    pub local: PathBuf,
    pub slot: Slot,
    /// `<16 hex of sha256>-<file name>`.
    pub name: String,
    pub bytes: u64,
}

impl Upload {
    /// Hashes `local` to find its name.
    pub fn of(local: &Path, slot: Slot) -> Result<Upload> {
        let io = |source| RemoteError::Io {
            path: local.to_path_buf(),
            source,
        };
        let mut f = std::fs::File::open(local).map_err(io)?;
        let meta = f.metadata().map_err(io)?;
        if !meta.is_file() {
            return Err(RemoteError::Io {
                path: local.to_path_buf(),
                source: std::io::Error::other(
                    "not a regular file (a model folder must be converted to one GGUF file first: tiletune convert)",
                ),
            });
        }
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = f.read(&mut buf).map_err(io)?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
        }
        let digest = h.finalize();
        let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        let base: String = local
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "._-".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        Ok(Upload {
            local: local.to_path_buf(),
            slot,
            name: format!("{hex}-{base}"),
            bytes: meta.len(),
        })
    }

    /// `slot/name`, relative to the work directory.
    pub fn rel(&self) -> String {
        format!("{}/{}", self.slot.dir(), self.name)
    }

    /// The absolute path on the device.
    pub fn remote(&self, dir: &str) -> String {
        format!("{dir}/{}", self.rel())
    }
}

/// The command that creates the slots, prints the work directory as an
/// absolute path (`dir=...`: a relative one is relative to the login's
/// home, and later commands `cd` into it) and lists what the slots hold,
/// one `have=slot/name` line each.
pub fn list_command(dir: &str) -> String {
    format!(
        "mkdir -p {d}/bin {d}/peers {d}/files {d}/out && cd {d} && echo dir=$(pwd) && \
         for f in bin/* peers/* files/*; do [ -f \"$f\" ] && echo \"have=$f\"; done; true",
        d = quote(dir)
    )
}

/// Pushes `u` unless `have` (from [`list_command`]) lists it; returns
/// whether it was pushed.
pub fn ensure(t: &dyn Transport, dir: &str, u: &Upload, have: &[String]) -> Result<bool> {
    if have.iter().any(|h| *h == u.rel()) {
        return Ok(false);
    }
    let part = format!("{}.part", u.name);
    t.push(&u.local, &format!("{dir}/{}/{part}", u.slot.dir()))?;
    capture(
        t,
        &format!("install {}", u.rel()),
        &format!(
            "cd {}/{} && chmod {} {part} && mv -f {part} {}",
            quote(dir),
            u.slot.dir(),
            u.slot.mode(),
            u.name
        ),
    )?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_content_not_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("model one.gguf");
        let b = dir.path().join("copy.gguf");
        std::fs::write(&a, b"GGUF same bytes").unwrap();
        std::fs::write(&b, b"GGUF same bytes").unwrap();
        let ua = Upload::of(&a, Slot::Files).unwrap();
        let ub = Upload::of(&b, Slot::Files).unwrap();
        assert_eq!(ua.name.len(), 16 + 1 + "model_one.gguf".len());
        assert!(ua.name.ends_with("-model_one.gguf"), "{}", ua.name);
        assert_eq!(ua.name[..16], ub.name[..16]);
        std::fs::write(&b, b"GGUF other bytes").unwrap();
        assert_ne!(
            Upload::of(&b, Slot::Files).unwrap().name[..16],
            ua.name[..16]
        );
        assert_eq!(ua.rel(), format!("files/{}", ua.name));
        assert_eq!(ua.bytes, 15);
        let e = Upload::of(dir.path(), Slot::Files).unwrap_err().to_string();
        assert!(e.contains("tiletune convert"), "{e}");
    }
}
