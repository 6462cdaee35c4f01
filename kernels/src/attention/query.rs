//! Queries quantized for Q8_0 K pages: the score of a query against a Q8_0
//! key is an int8 dot product per 32-value block, as llama.cpp computes it
//! (its Q8_0 `vec_dot` quantizes the other operand to Q8_0 too), so each
//! query head is quantized once per call, in blocks of 32 with one scale
//! each, and every K page of the call reads it.

use crate::quant::QK;

/// 32 values of one query head: `x ≈ d · qs`. `qf` holds the same
/// integers as f32 for the ISAs without an int8 dot product (their
/// products of two int8 are exact in f32, and so are the sums of 32), and
/// `sum` is `Σ qs`, which the x86 kernels subtract (times 128) after
/// multiplying keys made unsigned by `+128` (`vpdpbusd` is u8 × s8).
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub(crate) struct QBlock {
    pub(crate) qs: [i8; QK],
    pub(crate) d: f32,
    pub(crate) sum: i32,
    pub(crate) qf: [f32; QK],
}

impl Default for QBlock {
    fn default() -> Self {
        QBlock {
            qs: [0; QK],
            d: 0.0,
            sum: 0,
            qf: [0.0; QK],
        }
    }
}

impl QBlock {
    /// `x` quantized as llama.cpp's `quantize_row_q8_0` does (`d = max|x|
    /// / 127`, round to nearest), the scale kept as f32.
    pub(crate) fn quantize(x: &[f32]) -> QBlock {
        debug_assert_eq!(x.len(), QK);
        let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        let mut b = QBlock {
            d,
            ..QBlock::default()
        };
        for ((q, f), &v) in b.qs.iter_mut().zip(&mut b.qf).zip(x) {
            // |v · id| <= 127 (up to rounding of id): the cast saturates
            // anyway, and NaN becomes 0.
            *q = (v * id).round() as i8;
            *f = *q as f32;
            b.sum += *q as i32;
        }
        b
    }
}

/// `q` (heads of `hd` values, `hd` a multiple of 32) quantized into `buf`
/// block by block; returns the `q.len() / 32` blocks. `buf` only grows.
pub(crate) fn quantize_query<'a>(q: &[f32], buf: &'a mut Vec<QBlock>) -> &'a [QBlock] {
    let n = q.len() / QK;
    if buf.len() < n {
        buf.resize(n, QBlock::default());
    }
    for (b, x) in buf.iter_mut().zip(q.chunks_exact(QK)) {
        *b = QBlock::quantize(x);
    }
    &buf[..n]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantized_blocks_reconstruct_the_query() {
        let mut rng = crate::testing::Rng::new(7);
        let x: Vec<f32> = (0..96).map(|_| rng.uniform(-3.0, 3.0)).collect();
        let mut buf = Vec::new();
        let q = quantize_query(&x, &mut buf);
        assert_eq!(q.len(), 3);
        for (b, xs) in q.iter().zip(x.chunks_exact(QK)) {
            let amax = xs.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            assert_eq!(b.qs.iter().map(|&v| v as i32).sum::<i32>(), b.sum);
            assert!(b.qs.iter().any(|&v| v.unsigned_abs() == 127));
            for ((&qv, &f), &v) in b.qs.iter().zip(&b.qf).zip(xs) {
                assert_eq!(qv as f32, f);
                assert!((b.d * qv as f32 - v).abs() <= amax / 254.0 * 1.0001);
            }
        }
        let z = quantize_query(&[0.0; 32], &mut buf);
        assert_eq!(z[0].d, 0.0);
        assert!(z[0].qs.iter().all(|&v| v == 0));
    }
}
