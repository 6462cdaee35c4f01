//! Executable files the tests write and then run (fake peers, a copied
//! binary).
//!
//! Writing one from the test process races with the other test threads:
//! a thread that forks a child while this file is still open for writing
//! gives the child a copy of the write descriptor until the child execs,
//! and exec of a file that any process holds open for writing fails with
//! ETXTBSY ("Text file busy"). So the bytes go through a short-lived
//! `sh` child instead: only that child ever opens the file for writing,
//! and no test thread forks from it.

#![allow(dead_code)] // each test file uses the parts it needs

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Writes `bytes` to `path` with mode 755.
pub fn write_executable(path: &Path, bytes: &[u8]) {
    let mut child = Command::new("/bin/sh")
        .args(["-c", "cat > \"$1\" && chmod 755 \"$1\"", "sh"])
        .arg(path)
        .stdin(Stdio::piped())
        .spawn()
        .expect("/bin/sh runs");
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(bytes)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "writing {} failed", path.display());
}

/// Copies the executable `from` to `to`, mode 755.
pub fn copy_executable(from: &Path, to: &Path) {
    let status = Command::new("/bin/sh")
        .args(["-c", "cp \"$1\" \"$2\" && chmod 755 \"$2\"", "sh"])
        .arg(from)
        .arg(to)
        .status()
        .expect("/bin/sh runs");
    assert!(
        status.success(),
        "copying {} to {} failed",
        from.display(),
        to.display()
    );
}

/// An executable shell script `name` in `dir`.
pub fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    write_executable(&p, format!("#!/bin/sh\n{body}\n").as_bytes());
    p
}
