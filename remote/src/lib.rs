//! Tune a device from the desk: `tiletune remote --adb [SERIAL] | --ssh
//! [USER@]HOST[:PORT] <subcommand> ...` runs a tiletune subcommand on a
//! phone or a board and keeps what it measured in the host's table.
//!
//! - [`transport`]: the [`Transport`] trait (run a device command as a
//!   local process, push, pull, reachability) and the streaming of a
//!   command's output; [`adb`] and [`ssh`] implement it.
//! - [`shell`]: the device shell's quoting and the exit marker that tells
//!   a finished command from a dropped connection.
//! - [`push`]: files pushed once, named by their content.
//! - [`device`]: what the device is and its state (architecture, free space,
//!   counters, screen and doze, thermal zones, offline CPUs) and the advice
//!   given about it.
//! - [`session`]: one run on one device end to end, resumed after a drop,
//!   and the merge of the device's rows into the host table.
//!
//! **Invariant:** the device's rows keep the device's SoC fingerprint (the
//! one its own `probe` computes); nothing here computes or rewrites one.

pub mod adb;
pub mod device;
pub mod error;
pub mod push;
pub mod session;
pub mod shell;
pub mod ssh;
pub mod transport;

pub use error::{RemoteError, Result};
pub use session::{Job, Options, Outcome, Sinks, run, run_each};
pub use transport::Transport;
