//! A multimodal prompt as Qwen2.5-VL's processor and model see it: each
//! image's `<|image_pad|>` expanded to one pad per merged patch, and the
//! M-RoPE positions (transformers' `get_rope_index`): text advances all
//! three components together; an image's pads sit at the running position
//! plus their (frame, row, column) in merged patches, and the text after it
//! resumes at the running position plus the image's larger side.

use super::Encoded;
use crate::{LoadError, Result};

/// The special tokens of a Qwen2-VL vocabulary that images use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageTokens {
    pub vision_start: u32,
    pub image_pad: u32,
    pub vision_end: u32,
}

/// The text a chat template gets for one image.
pub const IMAGE_PLACEHOLDER: &str = "<|vision_start|><|image_pad|><|vision_end|>";

/// Replaces the `k`-th single `image_pad` of `ids` by `counts[k]` pads.
/// Runs of pads already expanded (ids from a processor) must match
/// `counts` exactly.
pub fn expand_pads(ids: &[u32], pad: u32, counts: &[usize]) -> Result<Vec<u32>> {
    let mut out = Vec::with_capacity(ids.len() + counts.iter().sum::<usize>());
    let mut k = 0;
    let mut i = 0;
    while i < ids.len() {
        if ids[i] != pad {
            out.push(ids[i]);
            i += 1;
            continue;
        }
        let run = ids[i..].iter().take_while(|&&t| t == pad).count();
        let Some(&want) = counts.get(k) else {
            return Err(LoadError::Image(format!(
                "the prompt has more image placeholders than the {} image(s) given; pass one --image per placeholder",
                counts.len()
            )));
        };
        if run != 1 && run != want {
            return Err(LoadError::Image(format!(
                "image {} needs {want} pad tokens, the prompt has a run of {run}; give one placeholder per image, or ids with exactly the processor's pads",
                k + 1
            )));
        }
        out.extend(std::iter::repeat_n(pad, want));
        i += run;
        k += 1;
    }
    if k != counts.len() {
        return Err(LoadError::Image(format!(
            "{} image(s) given but the prompt has {k} image placeholder(s); put `{IMAGE_PLACEHOLDER}` in the prompt for each image",
            counts.len()
        )));
    }
    Ok(out)
}

/// M-RoPE positions `(t, h, w)` of every id, starting at `start`, with
/// `grids[k]` the `(t, h, w)` merged-patch grid of the `k`-th run of pads;
/// also returns the position the text after the last id continues at.
pub fn mrope_positions(
    ids: &[u32],
    pad: u32,
    grids: &[[usize; 3]],
    start: u32,
) -> Result<(Vec<[u32; 3]>, u32)> {
    let mut pos = Vec::with_capacity(ids.len());
    let mut cur = start;
    let mut k = 0;
    let mut i = 0;
    while i < ids.len() {
        if ids[i] != pad {
            pos.push([cur; 3]);
            cur += 1;
            i += 1;
            continue;
        }
        let Some(&[t, h, w]) = grids.get(k) else {
            return Err(LoadError::Image(
                "more runs of image pads than images".into(),
            ));
        };
        let run = ids[i..].iter().take_while(|&&x| x == pad).count();
        if run != t * h * w {
            return Err(LoadError::Image(format!(
                "image {} is {t}×{h}×{w} merged patches but the prompt holds {run} pads for it",
                k + 1
            )));
        }
        for f in 0..t {
            for y in 0..h {
                for x in 0..w {
                    pos.push([cur + f as u32, cur + y as u32, cur + x as u32]);
                }
            }
        }
        cur += h.max(w) as u32;
        i += run;
        k += 1;
    }
    Ok((pos, cur))
}

/// The pictures of a chat, in the order of their placeholders in its
/// messages: those attached with `/image` wait for the next user message,
/// whose text then opens with one placeholder each. Each is encoded once;
/// every turn lays the whole conversation's images out again
/// ([`crate::engine::Engine::lay_out`]).
#[derive(Debug, Clone, Default)]
pub struct ConversationImages {
    sent: Vec<Encoded>,
    pending: Vec<Encoded>,
}

/// Placeholders in `text`.
fn placeholders(text: &str) -> usize {
    text.matches("<|image_pad|>").count()
}

impl ConversationImages {
    /// Attaches an encoded picture to the next message.
    pub fn attach(&mut self, e: Encoded) {
        self.pending.push(e);
    }

    /// Pictures waiting for the next message.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// The next user message's text with a placeholder per pending picture
    /// before it; the pictures become part of the conversation.
    pub fn message(&mut self, text: &str) -> String {
        let t = IMAGE_PLACEHOLDER.repeat(self.pending.len()) + text;
        self.sent.append(&mut self.pending);
        t
    }

    /// Takes the last message's pictures back (it was not sent).
    pub fn unsend(&mut self, text: &str) {
        let n = placeholders(text).min(self.sent.len());
        let back = self.sent.split_off(self.sent.len() - n);
        self.pending = back;
    }

    /// Every sent picture, in placeholder order.
    pub fn sent(&self) -> &[Encoded] {
        &self.sent
    }

    /// Tokens that the pictures of `messages` (a tail of the conversation)
    /// add beyond their one placeholder pad each.
    pub fn extra_tokens(&self, messages: &[crate::chat::Message], width: usize) -> usize {
        let k: usize = messages.iter().map(|m| placeholders(&m.content)).sum();
        let k = k.min(self.sent.len());
        self.sent[self.sent.len() - k..]
            .iter()
            .map(|e| e.tokens(width).saturating_sub(1))
            .sum()
    }

    /// Keeps the pictures of `messages`, the conversation after older
    /// turns were dropped.
    pub fn keep_for(&mut self, messages: &[crate::chat::Message]) {
        let k: usize = messages.iter().map(|m| placeholders(&m.content)).sum();
        let drop = self.sent.len().saturating_sub(k);
        self.sent.drain(..drop);
    }

    /// Forgets every picture.
    pub fn clear(&mut self) {
        self.sent.clear();
        self.pending.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pads_expand_and_positions_follow_transformers() {
        let ids = [1, 2, 9, 3, 4];
        let e = expand_pads(&ids, 9, &[6]).unwrap();
        assert_eq!(e, [1, 2, 9, 9, 9, 9, 9, 9, 3, 4]);
        assert_eq!(expand_pads(&e, 9, &[6]).unwrap(), e);
        assert!(expand_pads(&ids, 9, &[]).is_err());
        assert!(expand_pads(&ids, 9, &[2, 2]).is_err());
        assert!(expand_pads(&[9, 9, 9], 9, &[2]).is_err());
        // A 2×3 image after two text tokens: t = 2, h 2..3, w 2..4; the text
        // after resumes at 2 + max(2, 3) = 5 (the fixture's recorded rule).
        let (p, next) = mrope_positions(&e, 9, &[[1, 2, 3]], 0).unwrap();
        assert_eq!(p[..3], [[0; 3], [1; 3], [2, 2, 2]]);
        assert_eq!(p[7], [2, 3, 4]);
        assert_eq!(p[8..], [[5; 3], [6; 3]]);
        assert_eq!(next, 7);
        assert!(mrope_positions(&e, 9, &[[1, 2, 2]], 0).is_err());
    }
}
