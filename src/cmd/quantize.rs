//! `tiletune quantize IN.gguf OUT.gguf TYPE [THREADS]`: llama-quantize's
//! command line over `tiletune_runtime::quantize` (which tensor gets which
//! type, the conversion, the streamed write).

use super::Global;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tiletune_runtime::GgmlType;
use tiletune_runtime::gguf::GgufFile;
use tiletune_runtime::quantize::{self, FileType, QuantizeOptions};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Types: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K_S, Q4_K_M (also \
Q4_K), Q5_K_S, Q5_K_M (also Q5_K), Q6_K, MXFP4, or llama.cpp's numeric file type. Tensors \
get their types as llama-quantize gives them: e.g. in Q4_K_M the output matrix and some \
layers' attn_v and ffn_down get Q6_K, and rows that are not whole 256-element blocks fall \
back to Q5_0 / Q5_1 / Q8_0."
)]
pub struct Args {
    /// The GGUF file to read.
    pub input: PathBuf,
    /// The GGUF file to write (it appears only when complete; on Linux, a
    /// run that is stopped or killed leaves no file).
    pub output: PathBuf,
    /// The file type to quantize to.
    #[arg(value_parser = FileType::parse)]
    pub file_type: FileType,
    /// Worker threads (llama-quantize's positional nthreads); default: every CPU.
    #[arg(value_parser = super::parse_threads)]
    pub nthreads: Option<usize>,
    /// Worker threads.
    #[arg(short = 't', long = "threads", value_parser = super::parse_threads, conflicts_with = "nthreads")]
    pub threads: Option<usize>,
    /// Quantize tensors that are already quantized (they are dequantized
    /// first, which loses quality against quantizing the original weights).
    #[arg(long)]
    pub allow_requantize: bool,
    /// The type of output.weight (for a tied embedding, token_embd.weight).
    #[arg(long, value_parser = quantize::parse_tensor_type)]
    pub output_tensor_type: Option<GgmlType>,
    /// The type of token_embd.weight.
    #[arg(long, value_parser = quantize::parse_tensor_type)]
    pub token_embedding_type: Option<GgmlType>,
    /// Every quantized tensor in the file type's own type, no per-tensor rules.
    #[arg(long)]
    pub pure: bool,
    /// Leave output.weight as it is.
    #[arg(long)]
    pub leave_output_tensor: bool,
    /// Print the type chosen for each tensor.
    #[arg(long)]
    pub list: bool,
}

pub fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let threads = args.threads.or(args.nthreads).unwrap_or(0);
    if threads > 0 {
        super::warn_oversubscribed(threads);
    }
    let o = QuantizeOptions {
        file_type: args.file_type,
        allow_requantize: args.allow_requantize,
        output_tensor_type: args.output_tensor_type,
        token_embedding_type: args.token_embedding_type,
        pure: args.pure,
        leave_output_tensor: args.leave_output_tensor,
        threads,
    };
    let file = GgufFile::open(&args.input)?;
    let label = format!(
        "quantized {} → {}",
        args.input.display(),
        args.output.display()
    );
    write(g, &file, &o, &args.output, args.list, &label)?;
    Ok(ExitCode::SUCCESS)
}

/// Plans and writes `file` as `o` says to `out`, with a progress bar on a
/// terminal, `--list`'s table on stderr and the summary line (or `--json`)
/// on stdout. `label` starts the summary (`quantized A → B`).
pub(super) fn write(
    g: &Global,
    file: &GgufFile,
    o: &QuantizeOptions,
    out: &Path,
    list: bool,
    label: &str,
) -> anyhow::Result<()> {
    let choices = quantize::plan(file, o)?;
    if list || g.verbose {
        for c in &choices {
            let dims: Vec<String> = c.dims.iter().map(u64::to_string).collect();
            let how = match (c.converts(), c.fallback) {
                (false, _) => "kept".to_string(),
                (true, false) => format!("→ {}", c.to),
                (true, true) => format!("→ {} (fallback: rows of {})", c.to, c.dims[0]),
            };
            eprintln!(
                "{:<32} {:>16} {:>6} {how}",
                c.name,
                dims.join("x"),
                c.from.name()
            );
        }
    }
    let total: u64 = choices.iter().map(|c| c.dims.iter().product::<u64>()).sum();
    let bar = if std::io::stderr().is_terminal() && !g.json {
        ProgressBar::new(total)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {percent:>3}% eta {eta} {msg}")
            .expect("static template")
            .progress_chars("=> "),
    );
    let t0 = std::time::Instant::now();
    let mut done = 0u64;
    let sum = quantize::quantize(file, o, &choices, out, |_, c| {
        bar.set_position(done);
        bar.set_message(c.name.clone());
        done += c.dims.iter().product::<u64>();
    });
    bar.finish_and_clear();
    let sum = sum?;
    let (bpw_in, bpw_out) = sum.bpw();
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    if g.json {
        println!(
            "{}",
            serde_json::json!({
                "output": out,
                "file_type": o.file_type.name(),
                "tensors": sum.tensors, "converted": sum.converted, "fallbacks": sum.fallbacks,
                "bytes_in": sum.bytes_in, "bytes_out": sum.bytes_out, "file_bytes": sum.file_bytes,
                "bpw_in": bpw_in, "bpw_out": bpw_out,
                "seconds": t0.elapsed().as_secs_f64(),
            })
        );
    } else {
        println!(
            "{label} ({}): {} of {} tensors converted{}; tensor data {:.1} MiB ({bpw_in:.2} bpw) → {:.1} MiB ({bpw_out:.2} bpw) in {:.1} s",
            o.file_type.name(),
            sum.converted,
            sum.tensors,
            match sum.fallbacks {
                0 => String::new(),
                n => format!(
                    ", {n} with a fallback type (rows not whole 256-element blocks; --list shows them)"
                ),
            },
            mib(sum.bytes_in),
            mib(sum.bytes_out),
            t0.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
