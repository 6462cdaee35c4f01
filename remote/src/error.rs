//! The one error type of this crate. Each variant names the device and says
//! what the user can do next.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// The local `adb` or `ssh` program could not be started.
    #[error("cannot run `{program}`: {source}; install it or put it on PATH")]
    Tool {
        program: String,
        source: std::io::Error,
    },

    /// A device address the transport cannot use.
    #[error("bad device address `{address}`: {reason}")]
    BadAddress { address: String, reason: String },

    /// `adb devices` lists no device in the `device` state.
    #[error(
        "adb lists no connected device{detail}; plug one in and allow USB debugging, or pass --adb SERIAL"
    )]
    NoDevice { detail: String },

    /// A command on the device (or a push or pull) failed.
    #[error("{device}: `{what}` failed: {detail}")]
    Command {
        device: String,
        what: String,
        detail: String,
    },

    /// The device did not come back after the connection dropped.
    #[error(
        "{device}: the connection dropped and the device did not come back within {waited_s} s; \
         reconnect it and run the same command again (the campaign resumes where it stopped)"
    )]
    Lost { device: String, waited_s: u64 },

    /// There is no static binary for the device's architecture.
    #[error(
        "no tiletune binary for {device} ({arch}, target {target}): looked for {looked}; \
         build it with `scripts/build-device {target}` or pass --device-bin PATH"
    )]
    NoBinary {
        device: String,
        arch: String,
        target: String,
        looked: String,
    },

    /// The device's work directory has too little space for what must be pushed.
    #[error(
        "{device}: {dir} has {free_mib} MiB free but {need_mib} MiB must be pushed; free space \
         there or pass --device-dir on a larger partition"
    )]
    NoSpace {
        device: String,
        dir: String,
        free_mib: u64,
        need_mib: u64,
    },

    /// What the device printed could not be read.
    #[error("{device}: cannot read the output of `{what}`: {detail}")]
    Parse {
        device: String,
        what: String,
        detail: String,
    },

    /// A local file (to push, or a pulled one) could not be read or written.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },

    /// The host selector table refused the device's rows.
    #[error(transparent)]
    Table(#[from] tiletune_tables::TableError),
}

pub type Result<T, E = RemoteError> = std::result::Result<T, E>;
