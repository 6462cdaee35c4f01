//! `compare ppl`: perplexity of one text, tiletune with f32 activations
//! (`--qmode a32`, row `A32`) and with int8 ones (`--qmode a8`, `A8`) next
//! to `llama-perplexity`, with the same
//! chunking, context and threads.

use super::file_name;
use crate::peers::{self, PeerCommand, PerplexityEstimate, PplScore};
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One engine's perplexity.
#[derive(Debug, Serialize)]
pub struct PplRow {
    pub engine: String,
    pub engine_version: String,
    /// `A32` or `A8` (tiletune's activations; the weights are the file's,
    /// whatever their bits), or `llama.cpp` for llama-perplexity's own
    /// scheme.
    pub mode: String,
    pub ppl: f64,
    pub plus_minus: Option<f64>,
    pub chunks: Option<usize>,
    /// Tokens evaluated per second and where that rate comes from.
    pub tokens_per_s: Option<f64>,
    pub rate_source: String,
}

/// The `--out` document of a perplexity comparison.
#[derive(Debug, Serialize)]
pub struct PplComparison {
    pub soc: String,
    pub soc_fingerprint: String,
    pub model: String,
    pub file: String,
    pub ctx: usize,
    pub threads: usize,
    pub rows: Vec<PplRow>,
    pub notes: Vec<String>,
}

/// What one perplexity comparison runs.
#[derive(Clone, Debug)]
pub struct PplCompare {
    pub model: PathBuf,
    pub file: PathBuf,
    /// The tiletune binary whose `ppl` scores the text.
    pub tiletune: PathBuf,
    /// `llama-perplexity`, or why it is skipped.
    pub llama_perplexity: Result<PathBuf, String>,
    pub ctx: usize,
    pub chunks: Option<usize>,
    pub threads: usize,
    /// Limit of one engine run.
    pub timeout: Duration,
}

/// tiletune's activation modes: the `--qmode` flag and the row's label.
/// Named by the activations alone: the weights are the file's (a Q8_0 or
/// Q6_K file is not 4-bit), the same in both modes.
const MODES: [(&str, &str); 2] = [("a32", "A32"), ("a8", "A8")];

impl PplCompare {
    /// Runs tiletune in both modes, then llama-perplexity; `announce` gets
    /// each command line before it runs. A failing engine becomes a note.
    pub fn run(
        &self,
        soc: &str,
        soc_fingerprint: &str,
        mut announce: impl FnMut(&str),
    ) -> PplComparison {
        let mut rows = Vec::new();
        let mut notes = Vec::new();
        for (qmode, label) in MODES {
            // Each mode runs in a child process: loading a model pins the
            // calling thread and the kernel pools to the plan's CPUs, which
            // would otherwise carry over to the next run and to
            // llama-perplexity (a child inherits its parent's affinity).
            let mut cmd = PeerCommand::new("tiletune", &self.tiletune)
                .args(["--json", "ppl", "--model"])
                .arg(&self.model)
                .arg("--file")
                .arg(&self.file)
                .args(["--ctx".to_string(), self.ctx.to_string()])
                .args(["--qmode", qmode])
                .args(["--threads".to_string(), self.threads.to_string()])
                .timeout(self.timeout);
            if let Some(c) = self.chunks {
                cmd = cmd.args(["--chunks".to_string(), c.to_string()]);
            }
            announce(&cmd.display());
            match cmd.run().and_then(|o| PplScore::from_output(&o.stdout)) {
                Ok(s) => rows.push(PplRow {
                    engine: "tiletune".into(),
                    engine_version: env!("CARGO_PKG_VERSION").into(),
                    mode: label.into(),
                    ppl: s.ppl,
                    plus_minus: None,
                    chunks: Some(s.chunks),
                    tokens_per_s: (s.seconds > 0.0)
                        .then(|| (s.chunks * self.ctx) as f64 / s.seconds),
                    rate_source: "tiletune ppl: chunks × ctx / scoring time".into(),
                }),
                Err(e) => notes.push(format!("tiletune {label} failed: {e}")),
            }
        }
        match &self.llama_perplexity {
            Err(why) => notes.push(format!("llama.cpp skipped: {why}")),
            Ok(bin) => {
                let mut cmd = PeerCommand::new("llama.cpp", bin)
                    .arg("-m")
                    .arg(&self.model)
                    .arg("-f")
                    .arg(&self.file)
                    .args(["-c".to_string(), self.ctx.to_string()])
                    .args(["-t".to_string(), self.threads.to_string()])
                    .timeout(self.timeout);
                if let Some(c) = self.chunks {
                    cmd = cmd.args(["--chunks".to_string(), c.to_string()]);
                }
                announce(&cmd.display());
                match cmd.run() {
                    Ok(o) => {
                        let all = format!("{}\n{}", o.stdout, o.stderr);
                        match peers::parse_perplexity("llama.cpp", &all) {
                            Ok(est) => rows.push(llama_ppl_row(
                                &est,
                                llama_version(bin, &all),
                                o.seconds,
                                self.ctx,
                            )),
                            Err(e) => {
                                notes.push(format!("{e}\n{}", peers::stderr_tail(&o.stderr, 8)))
                            }
                        }
                    }
                    Err(e) => notes.push(e.to_string()),
                }
            }
        }
        PplComparison {
            soc: soc.to_string(),
            soc_fingerprint: soc_fingerprint.to_string(),
            model: file_name(&self.model),
            file: file_name(&self.file),
            ctx: self.ctx,
            threads: self.threads,
            rows,
            notes,
        }
    }
}

/// The peer-result test label of a perplexity run: `ppl512-a32`, `ppl512` (llama.cpp).
pub fn ppl_test_name(ctx: usize, mode: &str) -> String {
    if mode == "llama.cpp" {
        format!("ppl{ctx}")
    } else {
        format!("ppl{ctx}-{}", mode.to_ascii_lowercase())
    }
}

/// llama.cpp's build as `b<number>-<commit>` (the llama-bench key), from
/// `--version` (`version: 0.5.0-dev (build 1, commit 0c1e570)`, or the older
/// `version: 1234 (0c1e570)`) or a `build: 1234 (0c1e570)` log line.
pub fn llama_build(text: &str) -> Option<String> {
    text.lines().find_map(|l| {
        if let Some(i) = l.find("(build ") {
            let inner = l[i + 7..].split(')').next()?;
            let (num, commit) = inner.split_once(", commit ")?;
            let n = num.trim().parse::<u64>().ok()?;
            return Some(format!("b{n}-{}", commit.trim()));
        }
        let rest = l
            .find("build: ")
            .map(|i| &l[i + 7..])
            .or_else(|| l.strip_prefix("version: "))?;
        let (num, tail) = rest.split_once(' ')?;
        let commit = tail.strip_prefix('(')?.split(')').next()?;
        num.parse::<u64>().ok().map(|n| format!("b{n}-{commit}"))
    })
}

/// The build of a llama.cpp tool, asked with `--version`, else read from
/// its log; `unknown` when neither says.
pub fn llama_version(bin: &Path, log: &str) -> String {
    PeerCommand::new("llama.cpp", bin)
        .arg("--version")
        .timeout(Duration::from_secs(30))
        .run()
        .ok()
        .and_then(|o| llama_build(&format!("{}\n{}", o.stdout, o.stderr)))
        .or_else(|| llama_build(log))
        .unwrap_or_else(|| "unknown".into())
}

/// llama-perplexity's row; its rate is its own prompt eval time when it
/// printed one, else chunks × ctx over the wall time `wall` of the run.
fn llama_ppl_row(est: &PerplexityEstimate, version: String, wall: f64, ctx: usize) -> PplRow {
    let chunks = (!est.chunks.is_empty()).then_some(est.chunks.len());
    let (tokens_per_s, rate_source) = match (est.tokens_per_s, chunks) {
        (Some(r), _) => (Some(r), "llama.cpp prompt eval time".to_string()),
        (None, Some(c)) if wall > 0.0 => (
            Some((c * ctx) as f64 / wall),
            "chunks × ctx / wall time (including load)".to_string(),
        ),
        _ => (None, "not reported".to_string()),
    };
    PplRow {
        engine: "llama.cpp".into(),
        engine_version: version,
        mode: "llama.cpp".into(),
        ppl: est.ppl,
        plus_minus: est.plus_minus,
        chunks,
        tokens_per_s,
        rate_source,
    }
}

impl PplComparison {
    /// What is stored with `row` as a peer result.
    pub fn stored_json(&self, row: &PplRow) -> serde_json::Value {
        serde_json::json!({
            "kind": "perplexity",
            "ppl": row.ppl,
            "plus_minus": row.plus_minus,
            "mode": row.mode,
            "chunks": row.chunks,
            "ctx": self.ctx,
            "file": self.file,
            "rate_source": row.rate_source,
        })
    }

    /// The table of every row, then the notes.
    pub fn write_table(&self, out: &mut impl Write) -> std::io::Result<()> {
        writeln!(
            out,
            "perplexity of {} on {}, ctx {}, {} thread(s); soc {}",
            self.model, self.file, self.ctx, self.threads, self.soc
        )?;
        writeln!(out)?;
        writeln!(
            out,
            "{:<10} {:<22} {:<10} {:>20} {:>7} {:>10}",
            "engine", "version", "mode", "PPL", "chunks", "tokens/s"
        )?;
        for r in &self.rows {
            let p = match r.plus_minus {
                Some(pm) => format!("{:.4} ± {:.5}", r.ppl, pm),
                None => format!("{:.4}", r.ppl),
            };
            writeln!(
                out,
                "{:<10} {:<22} {:<10} {:>20} {:>7} {:>10}",
                r.engine,
                r.engine_version.chars().take(22).collect::<String>(),
                r.mode,
                p,
                r.chunks.map_or("-".into(), |c| c.to_string()),
                r.tokens_per_s.map_or("-".into(), |t| format!("{t:.1}"))
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
    fn llama_build_is_read_from_its_log() {
        let log = "0.00.000.123 I build: 7123 (abc1234) with cc (Debian 14.2.0) 14.2.0 for x86_64-linux-gnu\n";
        assert_eq!(llama_build(log).as_deref(), Some("b7123-abc1234"));
        let v = "version: 0.5.0-dev (build 1, commit 0c1e570)\nbuilt with GNU 12.2.0 for Linux x86_64\n";
        assert_eq!(llama_build(v).as_deref(), Some("b1-0c1e570"));
        assert_eq!(
            llama_build("version: 4567 (deadbee)").as_deref(),
            Some("b4567-deadbee")
        );
        assert_eq!(llama_build("nothing here"), None);
    }

    #[test]
    fn ppl_tests_are_named_by_ctx_and_mode() {
        assert_eq!(ppl_test_name(512, "A8"), "ppl512-a8");
        assert_eq!(ppl_test_name(128, "llama.cpp"), "ppl128");
    }

    #[test]
    fn llama_rate_comes_from_its_log_else_the_wall_time() {
        let est = |tokens_per_s| PerplexityEstimate {
            ppl: 9.5,
            plus_minus: Some(0.25),
            chunks: vec![10.0, 9.5],
            tokens_per_s,
        };
        let r = llama_ppl_row(&est(Some(100.0)), "b1-x".into(), 4.0, 128);
        assert_eq!((r.tokens_per_s, r.chunks), (Some(100.0), Some(2)));
        assert_eq!(r.rate_source, "llama.cpp prompt eval time");
        let r = llama_ppl_row(&est(None), "b1-x".into(), 4.0, 128);
        assert_eq!(r.tokens_per_s, Some(64.0));
        let r = llama_ppl_row(&est(None), "b1-x".into(), 0.0, 128);
        assert_eq!(
            (r.tokens_per_s, r.rate_source.as_str()),
            (None, "not reported")
        );
    }

    #[test]
    fn missing_engines_become_notes() {
        let dir = tempfile::tempdir().unwrap();
        let cmp = PplCompare {
            model: dir.path().join("m.gguf"),
            file: dir.path().join("t.txt"),
            tiletune: dir.path().join("no-such-tiletune"),
            llama_perplexity: Err("`llama-perplexity` is not on PATH".into()),
            ctx: 128,
            chunks: Some(2),
            threads: 1,
            timeout: Duration::from_secs(5),
        };
        let mut ran = Vec::new();
        let doc = cmp.run("soc", "fp", |c| ran.push(c.to_string()));
        assert_eq!(ran.len(), 2);
        assert!(
            ran[1].contains("--qmode a8 --threads 1 --chunks 2"),
            "{}",
            ran[1]
        );
        assert!(doc.rows.is_empty());
        assert_eq!(doc.notes.len(), 3, "{:?}", doc.notes);
        assert!(doc.notes[0].starts_with("tiletune A32 failed: "));
        assert_eq!(
            doc.notes[2],
            "llama.cpp skipped: `llama-perplexity` is not on PATH"
        );
        let mut out = Vec::new();
        doc.write_table(&mut out).unwrap();
        assert!(
            String::from_utf8(out)
                .unwrap()
                .starts_with("perplexity of m.gguf on t.txt, ctx 128")
        );
        let row = llama_ppl_row(
            &PerplexityEstimate {
                ppl: 9.5,
                plus_minus: None,
                chunks: vec![],
                tokens_per_s: None,
            },
            "b1-x".into(),
            1.0,
            128,
        );
        let j = doc.stored_json(&row);
        assert_eq!(
            (j["kind"].as_str(), j["ctx"].as_u64()),
            (Some("perplexity"), Some(128))
        );
        assert_eq!(j["file"], "t.txt");
    }
}
