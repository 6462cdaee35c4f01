//! `tiletune convert HF_DIR -o OUT.gguf --outtype T`: a Hugging Face folder
//! (`config.json`, `*.safetensors`, `tokenizer.json`) → one GGUF file that
//! carries its tokenizer and chat template, in any type `tiletune quantize`
//! writes (the same per-tensor choices as llama-quantize).

use super::Global;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::path::Path;
use std::path::PathBuf;
use std::process::ExitCode;
use tiletune_runtime::convert::{Bf16Weights, Image, TokenizerKeys};
use tiletune_runtime::quantize::{FileType, QuantizeOptions};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The Hugging Face model folder (Llama, Qwen2, Qwen3, Qwen2.5-VL).
    pub model: PathBuf,
    /// The GGUF file to write (it appears only when complete; on Linux, a
    /// run that is stopped or killed leaves no file).
    #[arg(short = 'o', long = "outfile")]
    pub outfile: PathBuf,
    /// The type of the weights: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0,
    /// Q5_1, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K or MXFP4 (norms and biases
    /// stay F32).
    #[arg(long = "outtype", visible_alias = "type", default_value = "F16", value_parser = FileType::parse)]
    pub outtype: FileType,
    /// Worker threads for quantizing; default: every CPU.
    #[arg(short = 't', long = "threads", value_parser = super::parse_threads)]
    pub threads: Option<usize>,
    /// Print the type chosen for each tensor.
    #[arg(long)]
    pub list: bool,
}

pub fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    if let Some(t) = args.threads {
        super::warn_oversubscribed(t);
    }
    // The folder's own weights (f16, bf16 or f32) into an unnamed
    // temporary file beside the output, one tensor at a time, then the
    // requested type as `quantize` gives it, from that file's mapping: the
    // whole model is never in memory.
    let image = Image::open(&args.model, TokenizerKeys::Required, Bf16Weights::Keep)?;
    let scratch = match args.outfile.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let bar = if std::io::stderr().is_terminal() && !g.json {
        ProgressBar::new(image.len() as u64)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} reading [{bar:30}] {pos}/{len} tensors")
            .expect("static template")
            .progress_chars("=> "),
    );
    let file = image.write_mapped(scratch, |i, _| bar.set_position(i as u64))?;
    bar.finish_and_clear();
    let mut o = QuantizeOptions::new(args.outtype);
    o.threads = args.threads.unwrap_or(0);
    let label = format!(
        "converted {} → {}",
        args.model.display(),
        args.outfile.display()
    );
    super::quantize::write(g, &file, &o, &args.outfile, args.list, &label)?;
    Ok(ExitCode::SUCCESS)
}
