//! Perplexity computed as `llama-perplexity` computes it, so the numbers
//! compare: the text is tokenized once (with BOS if the model adds one),
//! cut into non-overlapping chunks of `ctx` tokens, the first token of each
//! chunk is replaced by BOS when the model adds BOS, and only the
//! predictions of the second half of each chunk are scored.

use crate::models::{FastModel, RunState};
use crate::tokenizer::Tokenizer;
use crate::{LoadError, Result};

/// What [`perplexity`] measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Perplexity {
    /// `exp` of the mean negative log-likelihood of the scored tokens.
    pub ppl: f64,
    /// Chunks run.
    pub chunks: usize,
    /// Tokens per chunk.
    pub ctx: usize,
    /// Predictions scored (the second half of each chunk).
    pub scored: usize,
}

/// `-log p(target)` under softmax(logits), in f64.
pub fn nll(logits: &[f32], target: u32) -> f64 {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x)) as f64;
    let sum: f64 = logits.iter().map(|&x| (x as f64 - max).exp()).sum();
    -(logits[target as usize] as f64 - max - sum.ln())
}

/// A text as [`perplexity`] scores it: its tokens (with BOS first if the
/// model adds one, special tokens read as text) and the BOS that starts
/// each chunk (`None` when the model adds none).
pub fn tokens_of(tok: &Tokenizer, text: &str) -> Result<(Vec<u32>, Option<u32>)> {
    let tokens = tok.encode(text, true, false)?;
    Ok((tokens, tok.adds_bos().then(|| tok.bos()).flatten()))
}

/// How many chunks of `ctx` tokens `n_tokens` make, at most `max_chunks`;
/// an error when not even one, or when `ctx` is too small to score.
pub fn chunk_count(n_tokens: usize, ctx: usize, max_chunks: Option<usize>) -> Result<usize> {
    if ctx < 4 {
        return Err(LoadError::Perplexity(format!(
            "a context of {ctx} tokens scores nothing; use at least 4"
        )));
    }
    let n = (n_tokens / ctx).min(max_chunks.unwrap_or(usize::MAX));
    if n == 0 {
        return Err(LoadError::Perplexity(format!(
            "{n_tokens} tokens is less than one chunk of {ctx}; use a longer text or a smaller context"
        )));
    }
    Ok(n)
}

/// The perplexity of `tokens` (the whole text, tokenized with BOS if the
/// model adds one) in chunks of `ctx` tokens, at most `max_chunks` of them;
/// `bos` replaces each chunk's first token when the model adds BOS.
/// `on_chunk(done, ppl_so_far)` follows each chunk. `st` must hold `ctx`
/// positions; it is reset before each chunk.
pub fn perplexity(
    model: &FastModel,
    st: &mut RunState,
    tokens: &[u32],
    bos: Option<u32>,
    ctx: usize,
    max_chunks: Option<usize>,
    mut on_chunk: impl FnMut(usize, f64),
) -> Result<Perplexity> {
    let n_chunk = chunk_count(tokens.len(), ctx, max_chunks)?;
    if ctx > st.capacity() {
        return Err(LoadError::Perplexity(format!(
            "chunks of {ctx} tokens do not fit a state of {} positions; use a smaller context",
            st.capacity()
        )));
    }
    let vocab = model.config().vocab;
    let first = ctx / 2;
    let (mut total, mut count) = (0.0f64, 0usize);
    for c in 0..n_chunk {
        let start = c * ctx;
        let mut batch = tokens[start..start + ctx].to_vec();
        if let Some(b) = bos {
            batch[0] = b;
        }
        st.reset();
        let logits = model.forward(&batch, st, true)?;
        for j in first..ctx - 1 {
            total += nll(&logits[j * vocab..(j + 1) * vocab], tokens[start + j + 1]);
            count += 1;
        }
        on_chunk(c + 1, (total / count as f64).exp());
    }
    Ok(Perplexity {
        ppl: (total / count as f64).exp(),
        chunks: n_chunk,
        ctx,
        scored: count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nll_is_the_log_softmax_of_the_target() {
        let l = [1.0f32, 2.0, 3.0];
        let z: f64 = l.iter().map(|&x| (x as f64).exp()).sum();
        assert!((nll(&l, 2) - (z.ln() - 3.0)).abs() < 1e-12);
        // Shifting every logit changes nothing.
        assert!((nll(&[101.0, 102.0, 103.0], 0) - nll(&l, 0)).abs() < 1e-9);
    }

    #[test]
    fn chunks_are_whole_and_at_least_one() {
        assert_eq!(chunk_count(1000, 256, None).unwrap(), 3);
        assert_eq!(chunk_count(1000, 256, Some(2)).unwrap(), 2);
        assert!(chunk_count(100, 256, None).is_err());
        assert!(chunk_count(100, 3, None).is_err());
    }
}
