//! A multimodal prompt as Qwen2.5-VL's processor and model see it: each
//! image's `<|image_pad|>` expanded to one pad per merged patch, and the
//! M-RoPE positions (transformers' `get_rope_index`): text advances all
//! three components together; an image's pads sit at the running position
//! plus their (frame, row, column) in merged patches, and the text after it
//! resumes at the running position plus the image's larger side.

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
            return Err(LoadError::Config(format!(
                "the prompt has more image placeholders than the {} image(s) given; pass one --image per placeholder",
                counts.len()
            )));
        };
        if run != 1 && run != want {
            return Err(LoadError::Config(format!(
                "image {} needs {want} pad tokens, the prompt has a run of {run}; give one placeholder per image, or ids with exactly the processor's pads",
                k + 1
            )));
        }
        out.extend(std::iter::repeat_n(pad, want));
        i += run;
        k += 1;
    }
    if k != counts.len() {
        return Err(LoadError::Config(format!(
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
            return Err(LoadError::Config(
                "more runs of image pads than images".into(),
            ));
        };
        let run = ids[i..].iter().take_while(|&&x| x == pad).count();
        if run != t * h * w {
            return Err(LoadError::Config(format!(
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
