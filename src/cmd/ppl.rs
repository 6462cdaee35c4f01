//! `tiletune ppl`: perplexity computed as `llama-perplexity` computes it, so
//! the numbers compare: the file is tokenized once (with BOS if the model
//! adds one), cut into non-overlapping chunks of `ctx` tokens, the first
//! token of each chunk is replaced by BOS when the model adds BOS, and only
//! the predictions of the second half of each chunk are scored.

use super::Global;
use super::model_args::{ModelArgs, load};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;
use tiletune_runtime::perplexity::{chunk_count, perplexity, tokens_of};

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

pub fn run(g: &Global, mut args: Args) -> anyhow::Result<ExitCode> {
    args.m.resolve()?;
    if args.ctx < 4 {
        anyhow::bail!("--ctx must be at least 4");
    }
    let text = tiletune_runtime::input::read_text(&args.file, tiletune_runtime::input::TEXT_LIMIT)?;
    let l = load(&args.m, args.ctx)?;
    if g.verbose {
        eprintln!("{}", l.plan.summary());
    }
    let (tokens, bos) = tokens_of(l.tokenizer()?, &text)?;
    let n_ctx = args.ctx.min(l.model.max_ctx());
    let n_chunk = chunk_count(tokens.len(), n_ctx, args.chunks).map_err(|_| {
        anyhow::anyhow!(
            "{} tokens is less than one chunk of {n_ctx}; use a longer file or a smaller --ctx",
            tokens.len()
        )
    })?;
    eprintln!(
        "{} tokens, {n_chunk} chunks of {n_ctx}, scoring the second half of each",
        tokens.len()
    );
    let mut st = l.model.new_state();
    let mut out = std::io::stdout().lock();
    let t0 = Instant::now();
    let score = perplexity(
        &l.model,
        &mut st,
        &tokens,
        bos,
        n_ctx,
        args.chunks,
        |c, p| {
            let _ = write!(out, "[{c}]{p:.4} ");
            let _ = out.flush();
        },
    )?;
    writeln!(out)?;
    if g.json {
        // `compare ppl` reads this line back as the same type.
        let doc = tiletune_bench::peers::PplScore {
            chunks: score.chunks,
            ctx: score.ctx,
            ppl: score.ppl,
            scored: score.scored,
            seconds: t0.elapsed().as_secs_f64(),
        };
        writeln!(out, "{}", serde_json::to_string(&doc)?)?;
    } else {
        writeln!(
            out,
            "Final estimate: PPL = {:.4} ({} tokens scored, {:.1} s)",
            score.ppl,
            score.scored,
            t0.elapsed().as_secs_f64()
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
