//! `compare image`: a vision model's image encode time, tiletune's
//! `bench model --image` next to llama.cpp's `llama-mtmd-cli` on the same
//! files (the language GGUF and its `mmproj`), the same picture and thread
//! count, the engines alternating round by round. Each run is a fresh
//! process that warms up and then encodes the picture once; llama.cpp's
//! time is the line it logs after encoding ("mtmd batch encoding done in N
//! ms", or "image slice encoded in N ms" in older builds), tiletune's the
//! tower's time `bench model` reports. Preprocessing is outside both.

use super::{file_name, locate};
use crate::peers::{PeerCommand, stderr_tail};
use serde::Serialize;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

/// What one image comparison runs.
#[derive(Clone, Debug)]
pub struct ImageCompare {
    /// The language model GGUF (both engines load it).
    pub model: PathBuf,
    /// llama.cpp's mmproj GGUF.
    pub mmproj: PathBuf,
    pub images: Vec<PathBuf>,
    /// The tiletune binary whose `bench model --image` is the reference.
    pub tiletune: PathBuf,
    /// `llama-mtmd-cli` by flag [default: on PATH].
    pub llama_mtmd_cli: Option<PathBuf>,
    pub threads: Vec<usize>,
    pub rounds: usize,
    pub timeout: Duration,
}

/// One engine's encode time of one picture at one thread count.
#[derive(Debug, Clone, Serialize)]
pub struct ImageRow {
    pub engine: String,
    pub image: String,
    pub threads: usize,
    /// Image tokens (tiletune's count; llama.cpp's when it logs one).
    pub tokens: Option<usize>,
    pub samples_ms: Vec<f64>,
    pub mean_ms: f64,
    pub std_ms: Option<f64>,
    /// tiletune's encode time over llama.cpp's (below 1: tiletune faster).
    pub ratio: Option<f64>,
}

/// The `--out` document of an image comparison.
#[derive(Debug, Serialize)]
pub struct ImageComparison {
    pub soc: String,
    pub soc_fingerprint: String,
    pub model: String,
    pub mmproj: String,
    pub rounds: usize,
    pub rows: Vec<ImageRow>,
    pub notes: Vec<String>,
}

/// One engine run's result: engine, picture index, threads, encode ms, tokens.
type Sample = (&'static str, usize, usize, f64, Option<usize>);

/// The encode time llama.cpp's multimodal tools log, in ms (the last such
/// line: the warm-up logs none).
pub fn parse_mtmd_encode_ms(log: &str) -> Option<f64> {
    log.lines().rev().find_map(|l| {
        let rest = l
            .split_once("mtmd batch encoding done in ")
            .or_else(|| l.split_once("image slice encoded in "))?
            .1;
        rest.trim().strip_suffix("ms")?.trim().parse().ok()
    })
}

/// The tokens llama.cpp logs for the decoded image batch
/// ("n_tokens_batch = N").
fn parse_mtmd_tokens(log: &str) -> Option<usize> {
    log.lines().rev().find_map(|l| {
        l.split_once("n_tokens_batch = ")?
            .1
            .trim()
            .split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    })
}

fn mean_std(v: &[f64]) -> (f64, Option<f64>) {
    let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
    let std = (v.len() > 1)
        .then(|| (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (v.len() - 1) as f64).sqrt());
    (mean, std)
}

impl ImageCompare {
    fn tiletune_cmd(&self, image: &PathBuf, t: usize) -> PeerCommand {
        PeerCommand::new("tiletune", &self.tiletune)
            .args([
                "bench", "model", "-o", "jsonl", "-p", "0", "-n", "0", "-r", "1",
            ])
            .arg("--model")
            .arg(&self.model)
            .arg("--mmproj")
            .arg(&self.mmproj)
            .arg("--image")
            .arg(image)
            .args(["-t".to_string(), t.to_string()])
            .timeout(self.timeout)
    }

    fn llama_cmd(&self, bin: &PathBuf, image: &PathBuf, t: usize) -> PeerCommand {
        PeerCommand::new("llama.cpp", bin)
            .arg("-m")
            .arg(&self.model)
            .arg("--mmproj")
            .arg(&self.mmproj)
            .arg("--image")
            .arg(image)
            .args(["-p", "Describe the image.", "-n", "1", "--temp", "0"])
            .args(["-t".to_string(), t.to_string()])
            .timeout(self.timeout)
    }

    /// Runs the rounds; `announce` gets each command line first. A failing
    /// engine run becomes a note.
    pub fn run(
        &self,
        soc: &str,
        fingerprint: &str,
        mut announce: impl FnMut(&str),
    ) -> ImageComparison {
        let mut notes = Vec::new();
        let llama = locate(&self.llama_mtmd_cli, "llama-mtmd-cli", "--llama-mtmd-cli")
            .map_err(|e| notes.push(format!("llama.cpp skipped: {e}")))
            .ok();
        // One sample per engine run: (engine, image index, threads, ms, tokens).
        let mut results: Vec<Sample> = Vec::new();
        for _ in 0..self.rounds {
            for (i, image) in self.images.iter().enumerate() {
                for &t in &self.threads {
                    let cmd = self.tiletune_cmd(image, t);
                    announce(&cmd.display());
                    match cmd.run() {
                        Ok(o) => match own_encode(&o.stdout) {
                            Some((ms, tokens)) => {
                                results.push(("tiletune", i, t, ms, Some(tokens)))
                            }
                            None => notes.push(format!(
                                "tiletune printed no image_encode record for {}",
                                image.display()
                            )),
                        },
                        Err(e) => notes.push(format!("tiletune failed: {e}")),
                    }
                    if let Some(bin) = &llama {
                        let cmd = self.llama_cmd(bin, image, t);
                        announce(&cmd.display());
                        match cmd.run() {
                            Ok(o) => match parse_mtmd_encode_ms(&o.stderr) {
                                Some(ms) => results.push((
                                    "llama.cpp",
                                    i,
                                    t,
                                    ms,
                                    parse_mtmd_tokens(&o.stderr),
                                )),
                                None => notes.push(format!(
                                    "llama-mtmd-cli logged no encode time:\n{}",
                                    stderr_tail(&o.stderr, 8)
                                )),
                            },
                            Err(e) => notes.push(format!("llama.cpp failed: {e}")),
                        }
                    }
                }
            }
        }
        let mut rows: Vec<ImageRow> = Vec::new();
        for &(engine, i, t, _, _) in &results {
            let image = file_name(&self.images[i]);
            if rows
                .iter()
                .any(|r| r.engine == engine && r.image == image && r.threads == t)
            {
                continue;
            }
            let mine = || {
                results
                    .iter()
                    .filter(|r| r.0 == engine && r.1 == i && r.2 == t)
            };
            let samples_ms: Vec<f64> = mine().map(|r| r.3).collect();
            let (mean_ms, std_ms) = mean_std(&samples_ms);
            rows.push(ImageRow {
                engine: engine.to_string(),
                image,
                threads: t,
                tokens: mine().find_map(|r| r.4),
                samples_ms,
                mean_ms,
                std_ms,
                ratio: None,
            });
        }
        let own: Vec<(String, usize, f64)> = rows
            .iter()
            .filter(|r| r.engine == "tiletune")
            .map(|r| (r.image.clone(), r.threads, r.mean_ms))
            .collect();
        for r in rows.iter_mut().filter(|r| r.engine != "tiletune") {
            r.ratio = own
                .iter()
                .find(|o| o.0 == r.image && o.1 == r.threads)
                .map(|o| o.2 / r.mean_ms);
        }
        ImageComparison {
            soc: soc.into(),
            soc_fingerprint: fingerprint.into(),
            model: file_name(&self.model),
            mmproj: file_name(&self.mmproj),
            rounds: self.rounds,
            rows,
            notes,
        }
    }
}

/// The tower time and tokens of tiletune's `bench model -o jsonl` record.
fn own_encode(stdout: &str) -> Option<(f64, usize)> {
    stdout.lines().find_map(|l| {
        let v: serde_json::Value = serde_json::from_str(l).ok()?;
        (v.get("test")?.as_str()? == "image_encode").then(|| {
            Some((
                v.get("avg_ms")?.as_f64()?,
                v.get("tokens")?.as_u64()? as usize,
            ))
        })?
    })
}

impl ImageComparison {
    /// The side-by-side table, then the notes.
    pub fn write_table(&self, out: &mut impl Write) -> std::io::Result<()> {
        writeln!(
            out,
            "model {} + {}  soc {}  {} round(s), engines alternating",
            self.model, self.mmproj, self.soc, self.rounds
        )?;
        writeln!(out)?;
        writeln!(
            out,
            "{:<10} {:<24} {:>7} {:>7} {:>20} {:>12}",
            "engine", "image", "threads", "tokens", "encode ms ± std", "tiletune/it"
        )?;
        for r in &self.rows {
            let ms = match r.std_ms {
                Some(s) => format!("{:.1} ± {:.1}", r.mean_ms, s),
                None => format!("{:.1}", r.mean_ms),
            };
            writeln!(
                out,
                "{:<10} {:<24} {:>7} {:>7} {:>20} {:>12}",
                r.engine,
                r.image.chars().take(24).collect::<String>(),
                r.threads,
                r.tokens.map_or("-".into(), |t| t.to_string()),
                ms,
                r.ratio.map_or("-".into(), |x| format!("{x:.2}×"))
            )?;
        }
        for n in &self.notes {
            writeln!(out, "note: {n}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_encode_lines_parse() {
        let log = "I encoding mtmd batch, n_chunks = 1\n\
                   0.01.254.867 I mtmd batch encoding done in 917 ms\n\
                   0.01.254.878 I decoding image batch 1/1, n_tokens_batch = 16\n";
        assert_eq!(parse_mtmd_encode_ms(log), Some(917.0));
        assert_eq!(parse_mtmd_tokens(log), Some(16));
        assert_eq!(
            parse_mtmd_encode_ms("image slice encoded in 12.5 ms\n"),
            Some(12.5)
        );
        assert_eq!(parse_mtmd_encode_ms("nothing here"), None);
        let own = r#"{"test":"image_encode","avg_ms":3.5,"tokens":256}"#;
        assert_eq!(own_encode(&format!("x\n{own}\n")), Some((3.5, 256)));
        assert_eq!(mean_std(&[1.0, 3.0]), (2.0, Some(2f64.sqrt())));
    }
}
