//! `tiletune compare`: tiletune next to its peers on this machine, from one
//! run. Each mode builds the command lines, runs the engines, collects their
//! results into one document (`--out` and `--json` print it as is) and
//! prints it as a table; storing the rows as peer results is left to the
//! caller, which owns the selector table.
//!
//! # Map
//! - [`model`] — [`ModelCompare`]: tiletune's `bench model`, llama-bench and
//!   MNN's `llm_bench` alternated round by round.
//! - [`kernels`] — llama.cpp's `test-backend-ops perf -o MUL_MAT` next to
//!   tiletune's kernels at the same types and shapes.
//! - [`ppl`] — [`PplCompare`]: perplexity of a text, tiletune with f32 and int8 activations
//!   next to `llama-perplexity`.
//! - [`image`] — [`ImageCompare`]: a vision model's image encode time next to
//!   `llama-mtmd-cli`.

pub mod image;
pub mod kernels;
pub mod model;
pub mod ppl;

pub use image::{ImageCompare, ImageComparison, ImageRow};
pub use kernels::{KernelComparison, KernelRow, TiletuneKernel};
pub use model::{ModelCompare, ModelComparison, ModelRun};
pub use ppl::{PplCompare, PplComparison, PplRow};

use std::path::{Path, PathBuf};

/// A peer given by flag, else found on PATH; the note to print when neither.
pub fn locate(flag: &Option<PathBuf>, name: &str, flag_name: &str) -> Result<PathBuf, String> {
    match flag {
        Some(p) if p.is_file() => Ok(p.clone()),
        Some(p) => Err(format!("{} does not exist (from {flag_name})", p.display())),
        None => super::find_on_path(name)
            .ok_or_else(|| format!("`{name}` is not on PATH; pass {flag_name} PATH to include it")),
    }
}

/// The file name of `p` (the whole path when it has none), as documents name files.
pub fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| p.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_are_located_by_flag_or_path() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("peer");
        std::fs::write(&bin, "").unwrap();
        assert_eq!(locate(&Some(bin.clone()), "peer", "--peer"), Ok(bin));
        let missing = dir.path().join("nope");
        let e = locate(&Some(missing), "peer", "--peer").unwrap_err();
        assert!(e.ends_with("does not exist (from --peer)"), "{e}");
        let e = locate(&None, "tiletune-no-such-peer", "--peer").unwrap_err();
        assert_eq!(
            e,
            "`tiletune-no-such-peer` is not on PATH; pass --peer PATH to include it"
        );
        assert_eq!(file_name(Path::new("/a/b/m.gguf")), "m.gguf");
        assert_eq!(file_name(Path::new("/")), "/");
    }
}
