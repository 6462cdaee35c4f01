//! `tiletune ppl`: perplexity computed as `llama-perplexity` computes it, so
//! the numbers compare: the file is tokenized once (with BOS if the model
//! adds one), cut into non-overlapping chunks of `ctx` tokens, the first
//! token of each chunk is replaced by BOS when the model adds BOS, and only
//! the predictions of the second half of each chunk are scored.

use super::Global;
use super::run::{ModelArgs, load};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub m: ModelArgs,
    /// UTF-8 text file to score (a regular file of at most 1 GiB).
    #[arg(long, short = 'f', value_name = "FILE")]
    pub file: PathBuf,
    /// Tokens per chunk.
    #[arg(long, short = 'c', default_value_t = 512)]
    pub ctx: usize,
    /// Score at most this many chunks (default: all).
    #[arg(long, value_parser = parse_chunks)]
    pub chunks: Option<usize>,
}

/// A `--chunks` value: at least one chunk.
fn parse_chunks(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => {
            Err("0 chunks scores nothing; use 1 or more, or leave --chunks out for all".into())
        }
        Ok(n) => Ok(n),
        Err(_) => Err(format!("`{s}` is not a chunk count")),
    }
}

/// `-log p(target)` under softmax(logits), in f64.
fn nll(logits: &[f32], target: u32) -> f64 {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x)) as f64;
    let sum: f64 = logits.iter().map(|&x| (x as f64 - max).exp()).sum();
    -(logits[target as usize] as f64 - max - sum.ln())
}

pub fn run(g: &Global, mut args: Args) -> anyhow::Result<ExitCode> {
    args.m.model = super::pull::model_path(&args.m.model)?;
    if args.ctx < 4 {
        anyhow::bail!("--ctx must be at least 4");
    }
    let text = tiletune_runtime::input::read_text(&args.file, tiletune_runtime::input::TEXT_LIMIT)?;
    let l = load(&args.m, args.ctx)?;
    if g.verbose {
        eprintln!("{}", l.plan.summary());
    }
    let tokens = l.tok()?.encode(&text, true, false)?;
    let n_ctx = args.ctx.min(l.model.max_ctx());
    let mut n_chunk = tokens.len() / n_ctx;
    if let Some(c) = args.chunks {
        n_chunk = n_chunk.min(c);
    }
    if n_chunk == 0 {
        anyhow::bail!(
            "{} tokens is less than one chunk of {n_ctx}; use a longer file or a smaller --ctx",
            tokens.len()
        );
    }
    let add_bos = l.tok()?.adds_bos().then_some(l.tok()?.bos()).flatten();
    eprintln!(
        "{} tokens, {n_chunk} chunks of {n_ctx}, scoring the second half of each",
        tokens.len()
    );
    let vocab = l.cfg.vocab;
    let first = n_ctx / 2;
    let mut st = l.model.new_state();
    let (mut total, mut count) = (0.0f64, 0usize);
    let mut out = std::io::stdout().lock();
    let t0 = Instant::now();
    for c in 0..n_chunk {
        let start = c * n_ctx;
        let mut batch = tokens[start..start + n_ctx].to_vec();
        if let Some(b) = add_bos {
            batch[0] = b;
        }
        st.reset();
        let logits = l.model.forward(&batch, &mut st, true)?;
        for j in first..n_ctx - 1 {
            total += nll(&logits[j * vocab..(j + 1) * vocab], tokens[start + j + 1]);
            count += 1;
        }
        write!(out, "[{}]{:.4} ", c + 1, (total / count as f64).exp())?;
        out.flush()?;
    }
    let ppl = (total / count as f64).exp();
    writeln!(out)?;
    if g.json {
        // `compare ppl` reads this line back as the same type.
        let doc = tiletune_bench::peers::PplScore {
            chunks: n_chunk,
            ctx: n_ctx,
            ppl,
            scored: count,
            seconds: t0.elapsed().as_secs_f64(),
        };
        writeln!(out, "{}", serde_json::to_string(&doc)?)?;
    } else {
        writeln!(
            out,
            "Final estimate: PPL = {ppl:.4} ({count} tokens scored, {:.1} s)",
            t0.elapsed().as_secs_f64()
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
