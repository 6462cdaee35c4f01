//! The records tiletune's `bench model` prints, with llama-bench's field
//! names and meanings (fields of llama-bench that do not apply to a CPU-only
//! engine are left out), and llama-bench's three output formats: its
//! markdown table, `-o json` and `-o jsonl`. [`parse_llama_bench`](super::parse_llama_bench)
//! reads them back.

use super::Test;
use super::stats::{avg_f64, avg_u64, stdev_f64, stdev_u64};
use serde::Serialize;
use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

/// One test's result, with llama-bench's field names, then tiletune's own
/// fields. Field order is the printed order.
#[derive(Debug, Clone, Serialize)]
pub struct TestRecord {
    pub build_commit: String,
    pub build_number: u64,
    pub cpu_info: String,
    pub gpu_info: String,
    pub backends: String,
    pub model_filename: String,
    pub model_type: String,
    pub model_size: u64,
    pub model_n_params: u64,
    pub n_batch: usize,
    pub n_ubatch: usize,
    pub n_threads: usize,
    pub type_k: String,
    pub type_v: String,
    pub n_prompt: usize,
    pub n_gen: usize,
    pub n_depth: usize,
    pub test_time: String,
    pub avg_ns: u64,
    pub stddev_ns: u64,
    pub avg_ts: f64,
    pub stddev_ts: f64,
    pub samples_ns: Vec<u64>,
    pub samples_ts: Vec<f64>,
    // tiletune's own fields.
    pub engine: String,
    pub tiletune_version: String,
    pub isa: String,
    /// Plan entries per source: how much of the model ran tuned kernels.
    pub plan: PlanCounts,
    pub warmup: bool,
    /// The bytes of weights one decoded token reads, as the file stores
    /// them ([`ModelInfo::decode_weight_bytes`]).
    pub decode_weight_bytes: u64,
    /// A decode test's (`tg`) weight bandwidth in GB/s: tokens/s times
    /// [`decode_weight_bytes`](Self::decode_weight_bytes), weights only
    /// (the KV cache a token reads at depth is not counted).
    pub decode_weight_gbps: Option<f64>,
}

/// What [`TestRecord::decode_weight_bytes`] counts, as the printed notes
/// say it.
pub const DECODE_BYTES_COUNT: &str =
    "every matrix and norm; the token embedding only as the tied LM head";

/// How many plan entries came from each source, and how many of them are
/// not the analytic default's kernel (a table choice can be its default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PlanCounts {
    pub tuned: usize,
    pub nearest: usize,
    pub default: usize,
    pub differ: usize,
}

/// What every record of one run shares.
#[derive(Debug, Clone)]
pub struct RunInfo {
    pub build_commit: String,
    pub tiletune_version: String,
    pub cpu_info: String,
    /// The backend column, e.g. `tiletune (avx2)`.
    pub backends: String,
    pub isa: String,
    pub model: ModelInfo,
    pub n_batch: usize,
    /// The KV cache page type (`f16`, ...), for both `type_k` and `type_v`.
    pub kv_type: String,
    pub warmup: bool,
}

impl TestRecord {
    /// The record of `test` at `n_threads` from its timed repetitions.
    pub fn new(
        run: &RunInfo,
        n_threads: usize,
        plan: PlanCounts,
        test: Test,
        test_time: String,
        samples_ns: Vec<u64>,
    ) -> Self {
        // Tokens/s per repetition is `1e9 · N / ns`.
        let n_tokens = (test.n_prompt + test.n_gen) as f64;
        let samples_ts: Vec<f64> = samples_ns
            .iter()
            .map(|&ns| 1e9 * n_tokens / ns as f64)
            .collect();
        let avg_ts = avg_f64(&samples_ts);
        let bytes = run.model.decode_weight_bytes;
        let decode_weight_gbps =
            (test.n_prompt == 0 && test.n_gen > 0).then(|| avg_ts * bytes as f64 / 1e9);
        TestRecord {
            build_commit: run.build_commit.clone(),
            build_number: 0,
            cpu_info: run.cpu_info.clone(),
            gpu_info: String::new(),
            backends: run.backends.clone(),
            model_filename: run.model.filename.clone(),
            model_type: run.model.desc.clone(),
            model_size: run.model.size,
            model_n_params: run.model.n_params,
            n_batch: run.n_batch,
            n_ubatch: run.n_batch,
            n_threads,
            type_k: run.kv_type.clone(),
            type_v: run.kv_type.clone(),
            n_prompt: test.n_prompt,
            n_gen: test.n_gen,
            n_depth: test.n_depth,
            test_time,
            avg_ns: avg_u64(&samples_ns),
            stddev_ns: stdev_u64(&samples_ns),
            avg_ts,
            stddev_ts: stdev_f64(&samples_ts),
            samples_ns,
            samples_ts,
            engine: "tiletune".into(),
            tiletune_version: run.tiletune_version.clone(),
            isa: run.isa.clone(),
            plan,
            warmup: run.warmup,
            decode_weight_bytes: bytes,
            decode_weight_gbps,
        }
    }
}

/// RFC 3339 UTC time (`%FT%TZ`), as llama-bench's `test_time`.
pub fn rfc3339_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    rfc3339(secs)
}

/// `secs` since the epoch as RFC 3339 UTC time.
fn rfc3339(secs: i64) -> String {
    let t = tiletune_tables::UtcTime::from_unix(secs);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        t.year,
        t.month,
        t.day,
        t.secs / 3600,
        t.secs % 3600 / 60,
        t.secs % 60
    )
}

/// llama.cpp's name of a GGUF `general.file_type` (`llama_model_ftype_name`).
pub fn ftype_name(ft: u32) -> Option<&'static str> {
    Some(match ft {
        0 => "all F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K - Medium",
        11 => "Q3_K - Small",
        12 => "Q3_K - Medium",
        13 => "Q3_K - Large",
        14 => "Q4_K - Small",
        15 => "Q4_K - Medium",
        16 => "Q5_K - Small",
        17 => "Q5_K - Medium",
        18 => "Q6_K",
        32 => "BF16",
        38 => "MXFP4 MoE",
        _ => return None,
    })
}

/// One tensor as the model description counts it.
#[derive(Debug, Clone, Copy)]
pub struct TensorInfo<'a> {
    /// ggml's type name (`q4_0`, `f32`, ...).
    pub type_name: &'a str,
    pub bytes: u64,
    pub n_elements: u64,
}

/// What describes the model in every record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelInfo {
    pub filename: String,
    /// `<arch> <params> <file type>`, the shape of llama.cpp's model description.
    pub desc: String,
    pub size: u64,
    pub n_params: u64,
    /// The bytes of weights one decoded token reads, as the file stores
    /// them: less than `size` when the token embedding is a lookup, not the
    /// LM head (the runtime's `problems::decode_weight_bytes`).
    pub decode_weight_bytes: u64,
}

impl ModelInfo {
    /// The description of a model file of architecture `arch` with these
    /// tensors and GGUF `general.file_type`, of which a decoded token reads
    /// `decode_weight_bytes`.
    pub fn describe<'a>(
        filename: String,
        arch: &str,
        file_type: Option<u32>,
        tensors: impl IntoIterator<Item = TensorInfo<'a>>,
        decode_weight_bytes: u64,
    ) -> Self {
        let tensors: Vec<TensorInfo> = tensors.into_iter().collect();
        let size = tensors.iter().map(|t| t.bytes).sum();
        let n_params: u64 = tensors.iter().map(|t| t.n_elements).sum();
        let label = if n_params >= 1_000_000_000 {
            format!("{:.1}B", n_params as f64 / 1e9)
        } else {
            format!("{}M", (n_params as f64 / 1e6).round())
        };
        // Without a file type, name the type holding most of the bytes.
        let ftype = file_type
            .and_then(ftype_name)
            .map(str::to_string)
            .unwrap_or_else(|| {
                let mut by: Vec<(&str, u64)> = Vec::new();
                for t in &tensors {
                    match by.iter_mut().find(|(k, _)| *k == t.type_name) {
                        Some((_, s)) => *s += t.bytes,
                        None => by.push((t.type_name, t.bytes)),
                    }
                }
                by.into_iter()
                    .max_by_key(|(_, s)| *s)
                    .map_or_else(|| "?".to_string(), |(k, _)| k.to_string())
            });
        ModelInfo {
            filename,
            desc: format!("{arch} {label} {ftype}"),
            size,
            n_params,
            decode_weight_bytes,
        }
    }
}

/// llama-bench's output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Markdown,
    Json,
    Jsonl,
}

impl Format {
    /// `md`, `json` or `jsonl` (llama-bench's `-o`).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "md" => Some(Format::Markdown),
            "json" => Some(Format::Json),
            "jsonl" => Some(Format::Jsonl),
            _ => None,
        }
    }
}

/// Prints records as each test finishes (llama-bench prints as it goes).
pub struct Printer {
    format: Format,
    /// Markdown: the header is printed; JSON: a record is printed.
    started: bool,
    /// Markdown: llama-bench's type_k/type_v columns (shown when the cache
    /// type is not llama-bench's default, f16).
    kv: bool,
    /// Markdown: the backend column's width (all rows share the backend).
    backend: usize,
    /// The markdown footer: `build: <commit> (0), tiletune <version>`.
    build_commit: String,
    version: String,
    /// Markdown: the bytes of weights a decoded token reads and each decode
    /// test's weight bandwidth (`tg16 t2 26.90 GB/s`), for a line under the
    /// footer.
    decode_bytes: u64,
    decode_rates: Vec<String>,
}

/// llama-bench's markdown columns and widths (negative: left aligned).
fn md_columns(kv: bool, backend: usize) -> Vec<(&'static str, i32)> {
    let mut c = vec![
        ("model", -30),
        ("size", 10),
        ("params", 10),
        ("backend", backend.max(10) as i32),
        ("threads", 7),
    ];
    if kv {
        c.extend([("type_k", 6), ("type_v", 6)]);
    }
    c.extend([("test", 15), ("t/s", 20)]);
    c
}

fn md_row(out: &mut impl Write, cols: &[(&str, i32)], cells: &[String]) -> std::io::Result<()> {
    write!(out, "|")?;
    for ((_, w), c) in cols.iter().zip(cells) {
        let width = w.unsigned_abs() as usize;
        if *w < 0 {
            write!(out, " {c:<width$} |")?;
        } else {
            write!(out, " {c:>width$} |")?;
        }
    }
    writeln!(out)
}

impl Printer {
    /// A printer for `format`; `kv` and `backend_width` shape the markdown
    /// table, `build_commit` and `version` its footer.
    pub fn new(
        format: Format,
        kv: bool,
        backend_width: usize,
        build_commit: &str,
        version: &str,
    ) -> Self {
        Printer {
            format,
            started: false,
            kv,
            backend: backend_width,
            build_commit: build_commit.to_string(),
            version: version.to_string(),
            decode_bytes: 0,
            decode_rates: Vec::new(),
        }
    }

    pub fn print(&mut self, out: &mut impl Write, r: &TestRecord) -> std::io::Result<()> {
        match self.format {
            Format::Markdown => {
                let cols = md_columns(self.kv, self.backend);
                if !self.started {
                    self.started = true;
                    let names: Vec<String> = cols.iter().map(|(n, _)| n.to_string()).collect();
                    md_row(out, &cols, &names)?;
                    write!(out, "|")?;
                    for &(_, w) in &cols {
                        let dashes = "-".repeat(w.unsigned_abs() as usize - 1);
                        write!(out, " {dashes}{} |", if w > 0 { ':' } else { '-' })?;
                    }
                    writeln!(out)?;
                }
                let size = if r.model_size < 1 << 30 {
                    format!("{:.2} MiB", r.model_size as f64 / 1024.0 / 1024.0)
                } else {
                    format!("{:.2} GiB", r.model_size as f64 / 1024.0 / 1024.0 / 1024.0)
                };
                let params = if r.model_n_params < 1_000_000_000 {
                    format!("{:.2} M", r.model_n_params as f64 / 1e6)
                } else {
                    format!("{:.2} B", r.model_n_params as f64 / 1e9)
                };
                let mut cells = vec![
                    r.model_type.clone(),
                    size,
                    params,
                    r.backends.clone(),
                    r.n_threads.to_string(),
                ];
                if self.kv {
                    cells.extend([r.type_k.clone(), r.type_v.clone()]);
                }
                cells.extend([
                    super::test_name(r.n_prompt, r.n_gen, r.n_depth),
                    format!("{:.2} ± {:.2}", r.avg_ts, r.stddev_ts),
                ]);
                md_row(out, &cols, &cells)?;
                if let Some(gbps) = r.decode_weight_gbps {
                    let test = super::test_name(r.n_prompt, r.n_gen, r.n_depth);
                    self.decode_bytes = r.decode_weight_bytes;
                    self.decode_rates
                        .push(format!("{test} t{} {gbps:.2} GB/s", r.n_threads));
                }
            }
            Format::Json => {
                let sep = if self.started { ",\n" } else { "[\n" };
                self.started = true;
                write!(out, "{sep}{}", serde_json::to_string_pretty(r)?)?;
            }
            Format::Jsonl => writeln!(out, "{}", serde_json::to_string(r)?)?,
        }
        out.flush()
    }

    /// Closes the output: the markdown footer, the end of the JSON array.
    pub fn finish(&mut self, out: &mut impl Write) -> std::io::Result<()> {
        match self.format {
            Format::Markdown if self.started => {
                writeln!(
                    out,
                    "\nbuild: {} ({}), tiletune {}",
                    self.build_commit, 0, self.version
                )?;
                if !self.decode_rates.is_empty() {
                    writeln!(
                        out,
                        "decode reads {:.1} MB of weights per token ({DECODE_BYTES_COUNT}): {}",
                        self.decode_bytes as f64 / 1e6,
                        self.decode_rates.join(", ")
                    )?;
                }
                Ok(())
            }
            Format::Json => writeln!(out, "{}]", if self.started { "\n" } else { "[" }),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_info() -> RunInfo {
        RunInfo {
            build_commit: "abc".into(),
            tiletune_version: "0.1.0".into(),
            cpu_info: "cpu".into(),
            backends: "tiletune (avx2)".into(),
            isa: "avx2".into(),
            model: ModelInfo::describe(
                "m.gguf".into(),
                "llama",
                Some(3),
                [TensorInfo {
                    type_name: "q4_1",
                    bytes: 3 << 20,
                    n_elements: 135_000_000,
                }],
                2_500_000,
            ),
            n_batch: 2048,
            kv_type: "f16".into(),
            warmup: true,
        }
    }

    fn record() -> TestRecord {
        let plan = PlanCounts {
            tuned: 1,
            nearest: 0,
            default: 2,
            differ: 1,
        };
        let test = Test {
            n_depth: 0,
            n_prompt: 0,
            n_gen: 10,
        };
        TestRecord::new(
            &run_info(),
            2,
            plan,
            test,
            "t".into(),
            vec![1_000_000_000, 500_000_000],
        )
    }

    #[test]
    fn test_time_is_rfc3339() {
        let t = rfc3339_now();
        assert_eq!(t.len(), 20, "{t}");
        assert!(
            t.ends_with('Z') && &t[4..5] == "-" && &t[10..11] == "T",
            "{t}"
        );
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400 + 3661), "2000-02-29T01:01:01Z");
    }

    #[test]
    fn models_are_described_as_llama_cpp_does() {
        assert_eq!(run_info().model.desc, "llama 135M Q4_1");
        // No file type: the type with most bytes names the model.
        let t = |type_name, bytes| TensorInfo {
            type_name,
            bytes,
            n_elements: 1_500_000_000,
        };
        let m = ModelInfo::describe("x".into(), "qwen2", None, [t("f32", 10), t("q8_0", 20)], 25);
        assert_eq!(m.desc, "qwen2 3.0B q8_0");
        assert_eq!(ftype_name(38), Some("MXFP4 MoE"));
        assert_eq!(ftype_name(99), None);
    }

    #[test]
    fn records_carry_llama_bench_statistics() {
        let r = record();
        assert_eq!(r.samples_ts, [10.0, 20.0]);
        assert_eq!(r.avg_ns, 750_000_000);
        assert!((r.avg_ts - 15.0).abs() < 1e-12);
        assert_eq!((r.n_ubatch, r.type_v.as_str()), (2048, "f16"));
        // 15 tokens/s, 2.5 MB each.
        let gbps = r.decode_weight_gbps.unwrap();
        assert!((gbps - 0.0375).abs() < 1e-12, "{gbps}");
    }

    #[test]
    fn markdown_and_json_are_printed_as_llama_bench_prints_them() {
        let mut out = Vec::new();
        let mut p = Printer::new(Format::Markdown, false, 15, "abc", "0.1.0");
        p.print(&mut out, &record()).unwrap();
        p.finish(&mut out).unwrap();
        let s = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = s.lines().collect();
        assert!(lines[0].starts_with("| model  "), "{s}");
        assert!(lines[1].starts_with("| ------"), "{s}");
        assert!(lines[2].contains("| llama 135M Q4_1"), "{s}");
        assert!(
            lines[2].contains("tg10 |") && lines[2].contains("15.00 ± 7.07 |"),
            "{s}"
        );
        assert_eq!(lines[lines.len() - 2], "build: abc (0), tiletune 0.1.0");
        assert_eq!(
            lines.last(),
            Some(
                &"decode reads 2.5 MB of weights per token (every matrix and norm; the token \
                  embedding only as the tied LM head): tg10 t2 0.04 GB/s"
            )
        );

        let mut out = Vec::new();
        let mut p = Printer::new(Format::Json, false, 15, "abc", "0.1.0");
        p.print(&mut out, &record()).unwrap();
        p.print(&mut out, &record()).unwrap();
        p.finish(&mut out).unwrap();
        let back =
            super::super::parse_llama_bench("tiletune", &String::from_utf8(out).unwrap()).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[0].test(), "tg10");

        let mut out = Vec::new();
        Printer::new(Format::Json, false, 15, "abc", "0.1.0")
            .finish(&mut out)
            .unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "[]\n");
    }
}
