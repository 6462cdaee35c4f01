//! Image preprocessing as transformers' `Qwen2VLImageProcessor` (the PIL
//! backend) does it: decode (PNG or JPEG, through the `image` crate), RGB,
//! `smart_resize` to multiples of `patch · merge` within the pixel budget,
//! Pillow's bicubic resampling on 8-bit pixels, `x / 255`, the CLIP
//! mean/std normalisation, and the patch layout the vision tower reads:
//! one row per 14×14 patch with the frame repeated over the temporal patch
//! of 2, rows grouped by 2×2 merge unit.
//!
//! The resampling is Pillow's `ImagingResample` (`libImaging/Resample.c`):
//! per output pixel a window of the Keys cubic (a = -0.5) stretched by the
//! downscale factor, weights normalised in f64 then rounded to 22-bit fixed
//! point, horizontal pass first over the rows the vertical pass needs, each
//! pass rounding and clamping to 8 bits. Reproducing it exactly is what makes
//! the pixel values match the processor's (to f32 rounding).

use crate::{LoadError, Result};
use std::path::Path;

/// What preprocessing needs from the vision tower's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Preprocess {
    pub patch: usize,
    pub temporal_patch: usize,
    pub merge: usize,
    pub min_pixels: usize,
    pub max_pixels: usize,
    pub mean: [f32; 3],
    pub std: [f32; 3],
}

/// An 8-bit RGB picture, row-major, 3 bytes a pixel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rgb {
    pub width: usize,
    pub height: usize,
    pub data: Vec<u8>,
}

/// The vision tower's input for one image.
#[derive(Debug, Clone, PartialEq)]
pub struct Pixels {
    /// `(t, h, w)` in patches (t = 1 for an image).
    pub grid: [usize; 3],
    /// `t·h·w` rows of `3 · temporal_patch · patch²` values.
    pub data: Vec<f32>,
}

impl Pixels {
    /// Merged tokens the image becomes (one `<|image_pad|>` each).
    pub fn tokens(&self, merge: usize) -> usize {
        self.grid[0] * self.grid[1] * self.grid[2] / (merge * merge)
    }
}

/// Reads a PNG or JPEG file as RGB (alpha dropped, grey expanded).
pub fn read_rgb(path: &Path) -> Result<Rgb> {
    let bytes = std::fs::read(path).map_err(|source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    decode_rgb(&bytes)
        .map_err(|e| LoadError::Image(format!("{}: {e}; pass a PNG or JPEG image", path.display())))
}

/// Decodes PNG or JPEG bytes as RGB.
pub fn decode_rgb(bytes: &[u8]) -> std::result::Result<Rgb, String> {
    let format = image::guess_format(bytes).map_err(|e| e.to_string())?;
    if !matches!(format, image::ImageFormat::Png | image::ImageFormat::Jpeg) {
        return Err(format!("{format:?} images are not read (PNG and JPEG are)"));
    }
    let img = image::load_from_memory_with_format(bytes, format).map_err(|e| e.to_string())?;
    let rgb = img.to_rgb8();
    Ok(Rgb {
        width: rgb.width() as usize,
        height: rgb.height() as usize,
        data: rgb.into_raw(),
    })
}

/// transformers' `smart_resize`: the `(height, width)` nearest the image's
/// that are multiples of `factor` and hold `min_pixels..=max_pixels`
/// pixels, the aspect ratio kept as well as that allows.
pub fn smart_resize(
    height: usize,
    width: usize,
    factor: usize,
    min_pixels: usize,
    max_pixels: usize,
) -> Result<(usize, usize)> {
    if height == 0 || width == 0 {
        return Err(LoadError::Image(format!(
            "the image is {width}x{height}; pass a non-empty image"
        )));
    }
    let (h, w, f) = (height as f64, width as f64, factor as f64);
    if h.max(w) / h.min(w) > 200.0 {
        return Err(LoadError::Image(format!(
            "the image is {width}x{height}: its aspect ratio is over 200; crop it first"
        )));
    }
    // Python's round() rounds halves to even.
    let round = |x: f64| x.round_ties_even();
    let mut hb = round(h / f) * f;
    let mut wb = round(w / f) * f;
    if hb * wb > max_pixels as f64 {
        let beta = (h * w / max_pixels as f64).sqrt();
        hb = f.max((h / beta / f).floor() * f);
        wb = f.max((w / beta / f).floor() * f);
    } else if hb * wb < min_pixels as f64 {
        let beta = (min_pixels as f64 / (h * w)).sqrt();
        hb = (h * beta / f).ceil() * f;
        wb = (w * beta / f).ceil() * f;
    }
    Ok((hb as usize, wb as usize))
}

const PRECISION_BITS: u32 = 32 - 8 - 2;

fn bicubic(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        (((x - 5.0) * x + 8.0) * x - 4.0) * A
    } else {
        0.0
    }
}

/// Pillow's `precompute_coeffs` + `normalize_coeffs_8bpc` for resizing
/// `in_size` samples to `out_size`: per output sample the first input
/// sample, the count, and `ksize` fixed-point weights.
fn coeffs(in_size: usize, out_size: usize) -> (usize, Vec<(usize, usize)>, Vec<i32>) {
    let scale = in_size as f64 / out_size as f64;
    let filterscale = scale.max(1.0);
    let support = 2.0 * filterscale;
    let ksize = support.ceil() as usize * 2 + 1;
    let mut bounds = Vec::with_capacity(out_size);
    let mut kk = vec![0i32; out_size * ksize];
    let mut w = vec![0f64; ksize];
    for xx in 0..out_size {
        let center = (xx as f64 + 0.5) * scale;
        let ss = 1.0 / filterscale;
        // C's (int) cast truncates toward zero.
        let xmin = ((center - support + 0.5) as i64).max(0) as usize;
        let xmax = ((center + support + 0.5) as i64).min(in_size as i64) as usize - xmin;
        let mut ww = 0.0;
        for (x, wx) in w.iter_mut().enumerate().take(xmax) {
            *wx = bicubic((x as f64 + xmin as f64 - center + 0.5) * ss);
            ww += *wx;
        }
        for x in 0..ksize {
            let v = if x < xmax && ww != 0.0 {
                w[x] / ww
            } else {
                0.0
            };
            let v = if x < xmax { v } else { 0.0 };
            kk[xx * ksize + x] = if v < 0.0 {
                (-0.5 + v * (1u32 << PRECISION_BITS) as f64) as i32
            } else {
                (0.5 + v * (1u32 << PRECISION_BITS) as f64) as i32
            };
        }
        bounds.push((xmin, xmax));
    }
    (ksize, bounds, kk)
}

fn clip8(ss: i32) -> u8 {
    (ss >> PRECISION_BITS).clamp(0, 255) as u8
}

/// Pillow's bicubic `Image.resize` of an RGB picture.
pub fn resize_bicubic(src: &Rgb, width: usize, height: usize) -> Rgb {
    let need_h = width != src.width;
    let need_v = height != src.height;
    let (ks_v, bounds_v, kk_v) = coeffs(src.height, height);
    let mut cur = src.clone();
    let mut bounds_v = bounds_v;
    if need_h {
        // Only the rows the vertical pass reads.
        let first = bounds_v[0].0;
        let last = bounds_v[height - 1].0 + bounds_v[height - 1].1;
        for b in &mut bounds_v {
            b.0 -= first;
        }
        let (ks, bounds, kk) = coeffs(src.width, width);
        let rows = last - first;
        let mut out = vec![0u8; rows * width * 3];
        for y in 0..rows {
            let row = &src.data[(y + first) * src.width * 3..][..src.width * 3];
            for (xx, &(xmin, xmax)) in bounds.iter().enumerate() {
                let k = &kk[xx * ks..xx * ks + xmax];
                for c in 0..3 {
                    let mut ss = 1i32 << (PRECISION_BITS - 1);
                    for (x, &kx) in k.iter().enumerate() {
                        ss = ss.wrapping_add(i32::from(row[(x + xmin) * 3 + c]).wrapping_mul(kx));
                    }
                    out[(y * width + xx) * 3 + c] = clip8(ss);
                }
            }
        }
        cur = Rgb {
            width,
            height: rows,
            data: out,
        };
    }
    if need_v {
        let mut out = vec![0u8; height * width * 3];
        for (yy, &(ymin, ymax)) in bounds_v.iter().enumerate() {
            let k = &kk_v[yy * ks_v..yy * ks_v + ymax];
            for i in 0..width * 3 {
                let mut ss = 1i32 << (PRECISION_BITS - 1);
                for (y, &ky) in k.iter().enumerate() {
                    ss = ss.wrapping_add(
                        i32::from(cur.data[(y + ymin) * width * 3 + i]).wrapping_mul(ky),
                    );
                }
                out[yy * width * 3 + i] = clip8(ss);
            }
        }
        cur = Rgb {
            width,
            height,
            data: out,
        };
    }
    cur
}

/// The processor's whole pipeline on one picture.
pub fn preprocess(img: &Rgb, p: &Preprocess) -> Result<Pixels> {
    let factor = p.patch * p.merge;
    let (h, w) = smart_resize(img.height, img.width, factor, p.min_pixels, p.max_pixels)?;
    let img = resize_bicubic(img, w, h);
    let (gh, gw) = (h / p.patch, w / p.patch);
    let (ps, tp, m) = (p.patch, p.temporal_patch, p.merge);
    let row = 3 * tp * ps * ps;
    let mut data = Vec::with_capacity(gh * gw * row);
    // transformers rescales in f64 (`astype(float64) * scale`), casts to
    // f32, then normalises in f32.
    let value = |y: usize, x: usize, c: usize| -> f32 {
        let v = (f64::from(img.data[(y * w + x) * 3 + c]) * (1.0 / 255.0)) as f32;
        (v - p.mean[c]) / p.std[c]
    };
    for bh in 0..gh / m {
        for bw in 0..gw / m {
            for mh in 0..m {
                for mw in 0..m {
                    let (py, px) = ((bh * m + mh) * ps, (bw * m + mw) * ps);
                    for c in 0..3 {
                        for _ in 0..tp {
                            for y in 0..ps {
                                for x in 0..ps {
                                    data.push(value(py + y, px + x, c));
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(Pixels {
        grid: [1, gh, gw],
        data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smart_resize_matches_transformers() {
        // Values from transformers' smart_resize.
        assert_eq!(
            smart_resize(139, 181, 28, 3136, 1003520).unwrap(),
            (140, 168)
        );
        assert_eq!(
            smart_resize(448, 448, 28, 3136, 1003520).unwrap(),
            (448, 448)
        );
        // Over the budget: scaled down, floored to the factor.
        assert_eq!(
            smart_resize(2000, 3000, 28, 3136, 1003520).unwrap(),
            (812, 1204)
        );
        // Under it: scaled up, ceiled.
        assert_eq!(smart_resize(20, 30, 28, 3136, 1003520).unwrap(), (56, 84));
        assert!(smart_resize(1, 300, 28, 3136, 1003520).is_err());
        assert!(smart_resize(0, 3, 28, 3136, 1003520).is_err());
    }

    /// PNG (RGB, RGBA, grey) decodes exactly, JPEG within its loss; other
    /// formats and garbage are refused.
    #[test]
    fn png_and_jpeg_decode_to_rgb() {
        use image::{ImageFormat, RgbImage};
        let (w, h) = (23u32, 17u32);
        let img = RgbImage::from_fn(w, h, |x, y| {
            image::Rgb([(x * 11) as u8, (y * 15) as u8, 128])
        });
        let encode = |d: image::DynamicImage, f: ImageFormat| {
            let mut buf = std::io::Cursor::new(Vec::new());
            d.write_to(&mut buf, f).unwrap();
            buf.into_inner()
        };
        let rgb = image::DynamicImage::ImageRgb8(img.clone());
        let got = decode_rgb(&encode(rgb.clone(), ImageFormat::Png)).unwrap();
        assert_eq!((got.width, got.height), (23, 17));
        assert_eq!(got.data, img.as_raw().clone());
        let rgba = image::DynamicImage::ImageRgba8(rgb.to_rgba8());
        assert_eq!(
            decode_rgb(&encode(rgba, ImageFormat::Png)).unwrap().data,
            got.data
        );
        let grey = decode_rgb(&encode(
            image::DynamicImage::ImageLuma8(rgb.to_luma8()),
            ImageFormat::Png,
        ))
        .unwrap();
        assert!(grey.data.chunks(3).all(|p| p[0] == p[1] && p[1] == p[2]));
        let jpeg = decode_rgb(&encode(rgb, ImageFormat::Jpeg)).unwrap();
        let mean: f64 = jpeg
            .data
            .iter()
            .zip(&got.data)
            .map(|(a, b)| (*a as f64 - *b as f64).abs())
            .sum::<f64>()
            / got.data.len() as f64;
        assert!(mean < 8.0, "jpeg differs by {mean} on average");
        assert!(decode_rgb(b"GIF89a....").is_err());
        assert!(decode_rgb(b"not an image").is_err());
    }

    #[test]
    fn same_size_is_a_copy_and_flat_stays_flat() {
        let img = Rgb {
            width: 5,
            height: 3,
            data: (0..45).map(|i| (i * 5) as u8).collect(),
        };
        assert_eq!(resize_bicubic(&img, 5, 3), img);
        let flat = Rgb {
            width: 7,
            height: 9,
            data: vec![77; 7 * 9 * 3],
        };
        let r = resize_bicubic(&flat, 4, 13);
        assert!(r.data.iter().all(|&v| v == 77));
    }
}
