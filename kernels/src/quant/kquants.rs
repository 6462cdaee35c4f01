//! The K-quants Q4_K, Q5_K and Q6_K (256-value super-blocks with 6/8-bit
//! sub-block scales) and their activation format Q8_K.
//!
//! The quantizers port ggml's reference path (`quantize_row_q4_K_ref`,
//! `quantize_row_q5_K_ref`, `quantize_row_q6_K_ref`, `quantize_row_q8_K_ref` with their helpers
//! `make_qkx2_quants`, `make_qx_quants`, `nearest_int`) faithfully: the same
//! search grids, the same f32 expression order, no fused multiply-adds, so
//! the bytes match llama.cpp's quantizer when it runs without an imatrix.
//! The super-block quantizers search their sub-blocks side by side
//! (`q6_k_sub_scales`, `k_sub_scales`), with the same bytes; they and what
//! they call are `#[inline(always)]` so that `quant::quantize_into`'s
//! AVX-512 build of them (`k_rows`) is AVX-512 throughout.

// Index loops mirror the C reference line by line, which keeps the port
// reviewable against ggml-quants.c.
#![allow(clippy::needless_range_loop)]

use super::blocks::{BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K, F16Le, KSubBlock, QK_K};

/// ggml's `GROUP_MAX_EPS`: below this a group counts as all zero.
const GROUP_MAX_EPS: f32 = 1e-15;

/// ggml's `nearest_int`: round half to even through the 1.5·2^23 trick
/// (valid for |x| ≤ 4194303, which every caller guarantees).
#[inline(always)]
pub(crate) fn nearest_int(fval: f32) -> i32 {
    let val = fval + 12_582_912.0;
    (val.to_bits() as i32 & 0x007f_ffff) - 0x0040_0000
}

/// `make_qkx2_quants`: asymmetric quantization of `x` to `0..=nmax` with a
/// weighted least-squares search over `nstep + 1` candidate scales. Returns
/// the scale; `the_min` receives the (positive) offset to subtract.
#[cfg(test)]
#[allow(clippy::too_many_arguments)]
fn make_qkx2_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    l_out: &mut [u8],
    the_min: &mut f32,
    laux: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> f32 {
    let n = x.len();
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l_out[..n].fill(0);
        *the_min = -min;
        return 0.0;
    }
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min));
        l_out[i] = l.clamp(0, nmax) as u8;
        let mut diff = scale * l_out[i] as f32 + min - x[i];
        diff = if use_mad { diff.abs() } else { diff * diff };
        best_error += weights[i] * diff;
    }
    if nstep < 1 {
        *the_min = -min;
        return scale;
    }
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = l as u8;
            let w = weights[i];
            let lf = l as f32;
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let mut diff = this_scale * laux[i] as f32 + this_min - x[i];
                diff = if use_mad { diff.abs() } else { diff * diff };
                cur_error += weights[i] * diff;
            }
            if cur_error < best_error {
                l_out[..n].copy_from_slice(&laux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    scale
}

/// `make_qx_quants` with `qw == NULL`: symmetric quantization of `x` to
/// `-nmax..nmax` (stored as `0..2 nmax`), searching 18 scales around
/// `nmax / max` for the best weighted fit. Returns the scale.
#[cfg(test)]
fn make_qx_quants(nmax: i32, x: &[f32], l_out: &mut [i8], rmse_type: i32) -> f32 {
    let n = x.len();
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &v in x {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l_out[..n].fill(0);
        return 0.0;
    }
    let nmaxf = nmax as f32;
    let mut iscale = -nmaxf / max;
    if rmse_type == 0 {
        for i in 0..n {
            let l = nearest_int(iscale * x[i]);
            l_out[i] = (nmax + l.clamp(-nmax, nmax - 1)) as i8;
        }
        return 1.0 / iscale;
    }
    let mut rmse_type = rmse_type;
    let mut return_early = false;
    if rmse_type < 0 {
        rmse_type = -rmse_type;
        return_early = true;
    }
    let weight = |v: f32| -> f32 {
        match rmse_type {
            1 => v * v,
            2 => 1.0,
            3 => v.abs(),
            _ => v.abs().sqrt(),
        }
    };
    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    for i in 0..n {
        let l = nearest_int(iscale * x[i]).clamp(-nmax, nmax - 1);
        l_out[i] = (l + nmax) as i8;
        let w = weight(x[i]);
        let lf = l as f32;
        sumlx += w * x[i] * lf;
        suml2 += w * lf * lf;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    if return_early {
        return if suml2 > 0.0 {
            0.5 * (scale + 1.0 / iscale)
        } else {
            1.0 / iscale
        };
    }
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmaxf + 0.1 * is as f32) / max;
        sumlx = 0.0;
        suml2 = 0.0;
        for &v in x {
            let l = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
            let w = weight(v);
            let lf = l as f32;
            sumlx += w * v * lf;
            suml2 += w * lf * lf;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for i in 0..n {
                let l = nearest_int(iscale * x[i]);
                l_out[i] = (nmax + l.clamp(-nmax, nmax - 1)) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// `get_scale_min_k4`: the 6-bit scale and min of sub-block `j` (0..8).
#[inline(always)]
pub fn get_scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Sub-blocks searched side by side. The ports above (kept as the tests'
/// reference) search one sub-block at a time, each step a sum carried from
/// value to value, which runs one value at a time. Here lane `s` of every
/// array is sub-block `s`: each lane does its port's f32 operations in the
/// port's order (so the scales and values are the port's, bit for bit), and
/// the loops over lanes are the compiler's to run as SIMD. An LM head in
/// Q6_K is hundreds of millions of values (the tuner's random operands,
/// `tiletune quantize`'s output matrix), seconds of search one value at a
/// time.
///
/// `make_qx_quants` (`nmax` 32, `rmse_type` 1) on Q6_K's 16 sub-blocks of
/// 16: their scales, and their values `0..64` into `l`.
#[inline(always)]
fn q6_k_sub_scales(x: &[f32; QK_K], l: &mut [i8; QK_K]) -> [f32; Q6_SUBS] {
    const NMAX: i32 = 32;
    let nmaxf = NMAX as f32;
    let xt = transpose::<16, Q6_SUBS>(x);
    let (mut max, mut amax) = ([0.0f32; Q6_SUBS], [0.0f32; Q6_SUBS]);
    for row in &xt {
        for s in 0..Q6_SUBS {
            let ax = row[s].abs();
            if ax > amax[s] {
                amax[s] = ax;
                max[s] = row[s];
            }
        }
    }
    // Σ w·x·l and Σ w·l² at the inverse scales `iscale` (w = x²).
    let sums = |iscale: &[f32; Q6_SUBS]| {
        let (mut sumlx, mut suml2) = ([0.0f32; Q6_SUBS], [0.0f32; Q6_SUBS]);
        for row in &xt {
            for s in 0..Q6_SUBS {
                let v = row[s];
                let lf = nearest_int(iscale[s] * v).clamp(-NMAX, NMAX - 1) as f32;
                let w = v * v;
                sumlx[s] += w * v * lf;
                suml2[s] += w * lf * lf;
            }
        }
        (sumlx, suml2)
    };
    let mut iscale = [0.0f32; Q6_SUBS];
    for s in 0..Q6_SUBS {
        iscale[s] = -nmaxf / max[s];
    }
    let (sumlx, suml2) = sums(&iscale);
    let mut best_iscale = iscale;
    let (mut scale, mut best) = ([0.0f32; Q6_SUBS], [0.0f32; Q6_SUBS]);
    for s in 0..Q6_SUBS {
        scale[s] = if suml2[s] != 0.0 {
            sumlx[s] / suml2[s]
        } else {
            0.0
        };
        best[s] = scale[s] * sumlx[s];
    }
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        for s in 0..Q6_SUBS {
            iscale[s] = -(nmaxf + 0.1 * is as f32) / max[s];
        }
        let (sumlx, suml2) = sums(&iscale);
        for s in 0..Q6_SUBS {
            if suml2[s] > 0.0 && sumlx[s] * sumlx[s] > best[s] * suml2[s] {
                best_iscale[s] = iscale[s];
                scale[s] = sumlx[s] / suml2[s];
                best[s] = scale[s] * sumlx[s];
            }
        }
    }
    // The port writes the values at each better scale; the last is these.
    // A sub-block of zeros (whose lanes above computed on an infinite
    // inverse scale) is all zero.
    for (s, (ls, xs)) in l.chunks_exact_mut(16).zip(x.chunks_exact(16)).enumerate() {
        if amax[s] < GROUP_MAX_EPS {
            scale[s] = 0.0;
            ls.fill(0);
            continue;
        }
        for (q, &v) in ls.iter_mut().zip(xs) {
            *q = (NMAX + nearest_int(best_iscale[s] * v).clamp(-NMAX, NMAX - 1)) as i8;
        }
    }
    scale
}

/// Q6_K's sub-blocks of 16 values.
const Q6_SUBS: usize = QK_K / 16;
/// Q4_K's and Q5_K's sub-blocks of 32 values.
const K_SUBS: usize = QK_K / 32;

/// `x` as `S` sub-blocks of `N` values, transposed: `[i][s]` is value `i` of
/// sub-block `s`.
#[inline(always)]
fn transpose<const N: usize, const S: usize>(x: &[f32; QK_K]) -> [[f32; S]; N] {
    let mut t = [[0.0f32; S]; N];
    for (s, sub) in x.chunks_exact(N).enumerate() {
        for (i, &v) in sub.iter().enumerate() {
            t[i][s] = v;
        }
    }
    t
}

/// `make_qkx2_quants` (`rdelta` 0.1, squared error) on Q4_K's and Q5_K's 8
/// sub-blocks of 32 side by side, weighted as `quantize_row_q4_K_ref` weighs
/// them (`av_x + |x|`): their scales and (positive) mins, and their values
/// `0..=nmax` into `l`.
#[inline(always)]
fn k_sub_scales(
    x: &[f32; QK_K],
    nmax: i32,
    rmin: f32,
    nstep: i32,
    l: &mut [u8; QK_K],
) -> ([f32; K_SUBS], [f32; K_SUBS]) {
    const RDELTA: f32 = 0.1;
    let nmaxf = nmax as f32;
    let xt = transpose::<32, K_SUBS>(x);
    let mut sum_x2 = [0.0f32; K_SUBS];
    for row in &xt {
        for s in 0..K_SUBS {
            sum_x2[s] += row[s] * row[s];
        }
    }
    let mut av_x = [0.0f32; K_SUBS];
    for s in 0..K_SUBS {
        av_x[s] = (sum_x2[s] / 32.0).sqrt();
    }
    let mut wt = [[0.0f32; K_SUBS]; 32];
    for (w, row) in wt.iter_mut().zip(&xt) {
        for s in 0..K_SUBS {
            w[s] = av_x[s] + row[s].abs();
        }
    }
    let (mut min, mut max, mut sum_w) = (xt[0], xt[0], wt[0]);
    let mut sum_x = [0.0f32; K_SUBS];
    for s in 0..K_SUBS {
        sum_x[s] = sum_w[s] * xt[0][s];
    }
    for (row, w) in xt.iter().zip(&wt).skip(1) {
        for s in 0..K_SUBS {
            if row[s] < min[s] {
                min[s] = row[s];
            }
            if row[s] > max[s] {
                max[s] = row[s];
            }
            sum_w[s] += w[s];
            sum_x[s] += w[s] * row[s];
        }
    }
    let mut flat = [false; K_SUBS];
    for s in 0..K_SUBS {
        if min[s] > 0.0 {
            min[s] = 0.0;
        }
        flat[s] = max[s] == min[s];
    }
    // `lt[i][s]`: value i of sub-block s at the best scale so far.
    let mut lt = [[0u8; K_SUBS]; 32];
    let (mut iscale, mut scale, mut best_error) =
        ([0.0f32; K_SUBS], [0.0f32; K_SUBS], [0.0f32; K_SUBS]);
    for s in 0..K_SUBS {
        iscale[s] = nmaxf / (max[s] - min[s]);
        scale[s] = 1.0 / iscale[s];
    }
    for ((ls, row), w) in lt.iter_mut().zip(&xt).zip(&wt) {
        for s in 0..K_SUBS {
            let q = nearest_int(iscale[s] * (row[s] - min[s])).clamp(0, nmax) as u8;
            ls[s] = q;
            let diff = scale[s] * q as f32 + min[s] - row[s];
            best_error[s] += w[s] * (diff * diff);
        }
    }
    if nstep >= 1 {
        let mut laux = [[0u8; K_SUBS]; 32];
        for is in 0..=nstep {
            for s in 0..K_SUBS {
                iscale[s] = (rmin + RDELTA * is as f32 + nmaxf) / (max[s] - min[s]);
            }
            let (mut sum_l, mut sum_l2, mut sum_xl) =
                ([0.0f32; K_SUBS], [0.0f32; K_SUBS], [0.0f32; K_SUBS]);
            for ((la, row), w) in laux.iter_mut().zip(&xt).zip(&wt) {
                for s in 0..K_SUBS {
                    let q = nearest_int(iscale[s] * (row[s] - min[s])).clamp(0, nmax);
                    la[s] = q as u8;
                    let lf = q as f32;
                    sum_l[s] += w[s] * lf;
                    sum_l2[s] += w[s] * lf * lf;
                    sum_xl[s] += w[s] * lf * row[s];
                }
            }
            let (mut this_scale, mut this_min, mut d) =
                ([0.0f32; K_SUBS], [0.0f32; K_SUBS], [0.0f32; K_SUBS]);
            for s in 0..K_SUBS {
                d[s] = sum_w[s] * sum_l2[s] - sum_l[s] * sum_l[s];
                this_scale[s] = (sum_w[s] * sum_xl[s] - sum_x[s] * sum_l[s]) / d[s];
                this_min[s] = (sum_l2[s] * sum_x[s] - sum_l[s] * sum_xl[s]) / d[s];
                if this_min[s] > 0.0 {
                    this_min[s] = 0.0;
                    this_scale[s] = sum_xl[s] / sum_l2[s];
                }
            }
            let mut cur_error = [0.0f32; K_SUBS];
            for ((la, row), w) in laux.iter().zip(&xt).zip(&wt) {
                for s in 0..K_SUBS {
                    let diff = this_scale[s] * la[s] as f32 + this_min[s] - row[s];
                    cur_error[s] += w[s] * (diff * diff);
                }
            }
            let mut better = [false; K_SUBS];
            for s in 0..K_SUBS {
                better[s] = !flat[s] && d[s] > 0.0 && cur_error[s] < best_error[s];
                if better[s] {
                    best_error[s] = cur_error[s];
                    scale[s] = this_scale[s];
                    min[s] = this_min[s];
                }
            }
            for (ls, la) in lt.iter_mut().zip(&laux) {
                for s in 0..K_SUBS {
                    if better[s] {
                        ls[s] = la[s];
                    }
                }
            }
        }
    }
    // A flat sub-block (whose lanes above computed on an infinite inverse
    // scale) is all zero, with scale 0 and its value as the min.
    let mut the_min = [0.0f32; K_SUBS];
    for s in 0..K_SUBS {
        the_min[s] = -min[s];
        if flat[s] {
            scale[s] = 0.0;
        }
    }
    for (s, ls) in l.chunks_exact_mut(32).enumerate() {
        for (i, q) in ls.iter_mut().enumerate() {
            *q = if flat[s] { 0 } else { lt[i][s] };
        }
    }
    (scale, the_min)
}

/// The scale search Q4_K and Q5_K share (`quantize_row_q4_K_ref` and
/// `quantize_row_q5_K_ref` differ only in `nmax`, the search grid's start
/// `rmin` and its length `nstep`): the super-scales, the packed 6-bit
/// codes, and the values `0..=nmax` in value order.
#[inline(always)]
fn quantize_k_sub(
    x: &[f32; QK_K],
    nmax: i32,
    rmin: f32,
    nstep: i32,
) -> (F16Le, F16Le, [u8; 12], [u8; QK_K]) {
    let mut l = [0u8; QK_K];
    let (scales, mins) = k_sub_scales(x, nmax, rmin, nstep, &mut l);
    let mut max_scale = 0.0f32;
    let mut max_min = 0.0f32;
    for (&scale, &min) in scales.iter().zip(&mins) {
        if scale > max_scale {
            max_scale = scale;
        }
        if min > max_min {
            max_min = min;
        }
    }

    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut sc = [0u8; 12];
    for j in 0..QK_K / 32 {
        // `uint8_t ls = nearest_int(..)` wraps, then MIN(63, ls).
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        if j < 4 {
            sc[j] = ls;
            sc[j + 4] = lm;
        } else {
            sc[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
            sc[j - 4] |= (ls >> 4) << 6;
            sc[j] |= (lm >> 4) << 6;
        }
    }
    let d = F16Le::from_f32(max_scale / 63.0);
    let dmin = F16Le::from_f32(max_min / 63.0);

    for j in 0..QK_K / 32 {
        let (s, m) = get_scale_min_k4(j, &sc);
        let dd = d.to_f32() * s as f32;
        if dd == 0.0 {
            continue;
        }
        let dm = dmin.to_f32() * m as f32;
        for ii in 0..32 {
            let q = nearest_int((x[32 * j + ii] + dm) / dd);
            l[32 * j + ii] = q.clamp(0, nmax) as u8;
        }
    }
    (d, dmin, sc, l)
}

/// Q4_K's nibble layout of 256 values below 16: byte `l` of chunk `c` holds
/// value `64c + l` low and `64c + 32 + l` high.
#[inline(always)]
pub(crate) fn k_nibbles(l: &[u8; QK_K]) -> [u8; QK_K / 2] {
    let mut qs = [0u8; QK_K / 2];
    for (c, j) in (0..QK_K).step_by(64).enumerate() {
        for i in 0..32 {
            qs[32 * c + i] = (l[j + i] & 0xF) | ((l[j + i + 32] & 0xF) << 4);
        }
    }
    qs
}

/// `quantize_row_q4_K_ref` for one super-block.
#[inline(always)]
pub fn quantize_q4_k(x: &[f32; QK_K]) -> BlockQ4K {
    let (d, dmin, scales, l) = quantize_k_sub(x, 15, -1.0, 20);
    BlockQ4K {
        d,
        dmin,
        scales,
        qs: k_nibbles(&l),
    }
}

/// `quantize_row_q5_K_ref` for one super-block: Q4_K's search with 31
/// levels, and bit 4 of value `32 j + l` in bit j of `qh[l]`.
#[inline(always)]
pub fn quantize_q5_k(x: &[f32; QK_K]) -> BlockQ5K {
    let (d, dmin, scales, l) = quantize_k_sub(x, 31, -0.5, 15);
    BlockQ5K {
        d,
        dmin,
        scales,
        qh: k_fifth_bits(&l),
        qs: k_nibbles(&l),
    }
}

/// Q5_K's `qh` of 256 values below 32: bit j of byte l is bit 4 of value
/// `32 j + l`.
pub(crate) fn k_fifth_bits(l: &[u8; QK_K]) -> [u8; QK_K / 8] {
    let mut qh = [0u8; QK_K / 8];
    for (j, sub) in l.chunks_exact(32).enumerate() {
        for (h, &v) in qh.iter_mut().zip(sub) {
            *h |= ((v >> 4) & 1) << j;
        }
    }
    qh
}

/// The 32 values of a Q4_K-layout block's sub-block `sub` (0..8), with the
/// fifth bits of a Q5_K block: the one reader of the layout that
/// [`k_nibbles`] and [`k_fifth_bits`] write. Its loops have a fixed length
/// the compiler runs as SIMD, since a model's load repacks most of its
/// weight bytes through it. Always inlined: left to the compiler
/// (`#[inline]`), the repack measured slower (docs/PERF.md, "K-quant
/// layouts with one owner").
#[inline(always)]
pub(crate) fn k_sub_values<B: KSubBlock>(b: &B, sub: usize) -> [u8; 32] {
    let qs: &[u8; 32] = b.qs()[32 * (sub / 2)..][..32].try_into().expect("32 bytes");
    let shift = 4 * (sub % 2);
    let mut v = [0u8; 32];
    for l in 0..32 {
        v[l] = (qs[l] >> shift) & 0xF;
    }
    if B::FIVE {
        let qh = b.qh();
        for l in 0..32 {
            v[l] |= ((qh[l] >> sub) & 1) << 4;
        }
    }
    v
}

/// `dequantize_row_q4_K` / `dequantize_row_q5_K` for one super-block.
pub fn dequantize_k_sub<B: KSubBlock>(b: &B, y: &mut [f32; QK_K]) {
    let d = b.d().to_f32();
    let min = b.dmin().to_f32();
    for (sub, ys) in y.chunks_exact_mut(32).enumerate() {
        let (sc, m) = get_scale_min_k4(sub, b.scales());
        let (d1, m1) = (d * sc as f32, min * m as f32);
        for (v, &q) in ys.iter_mut().zip(&k_sub_values(b, sub)) {
            *v = d1 * q as f32 - m1;
        }
    }
}

/// `dequantize_row_q4_K` for one super-block.
pub fn dequantize_q4_k(b: &BlockQ4K, y: &mut [f32; QK_K]) {
    dequantize_k_sub(b, y)
}

/// `dequantize_row_q5_K` for one super-block.
pub fn dequantize_q5_k(b: &BlockQ5K, y: &mut [f32; QK_K]) {
    dequantize_k_sub(b, y)
}

/// `quantize_row_q6_K_ref` for one super-block.
#[inline(always)]
pub fn quantize_q6_k(x: &[f32; QK_K]) -> BlockQ6K {
    let mut l = [0i8; QK_K];
    let scales = q6_k_sub_scales(x, &mut l);
    let mut max_scale = 0.0f32;
    let mut max_abs_scale = 0.0f32;
    for &scale in &scales {
        if scale.abs() > max_abs_scale {
            max_abs_scale = scale.abs();
            max_scale = scale;
        }
    }

    let mut out = BlockQ6K {
        ql: [0; QK_K / 2],
        qh: [0; QK_K / 4],
        scales: [0; QK_K / 16],
        d: F16Le::from_f32(0.0),
    };
    if max_abs_scale < GROUP_MAX_EPS {
        return out;
    }

    let iscale = -128.0 / max_scale;
    out.d = F16Le::from_f32(1.0 / iscale);
    for ib in 0..QK_K / 16 {
        out.scales[ib] = nearest_int(iscale * scales[ib]).min(127) as i8;
    }
    let d = out.d.to_f32();
    for j in 0..QK_K / 16 {
        let dd = d * out.scales[j] as f32;
        if dd == 0.0 {
            continue;
        }
        for ii in 0..16 {
            let q = nearest_int(x[16 * j + ii] / dd).clamp(-32, 31);
            l[16 * j + ii] = (q + 32) as i8;
        }
    }

    let u = l.map(|q| q as u8);
    (out.ql, out.qh) = q6_k_planes(&u);
    out
}

/// Q6_K's `ql` and `qh` of 256 stored values `u` = q + 32 (0..63): in each
/// half of 128 values, value `32 p + l` has its low nibble in `ql[l + 32
/// (p & 1)]` (the high nibble for p ≥ 2) and its bits 4 and 5 in bits `2 p`
/// of `qh[l]`. [`q6_k_sub_values`] reads them back.
pub(crate) fn q6_k_planes(u: &[u8; QK_K]) -> ([u8; QK_K / 2], [u8; QK_K / 4]) {
    let (mut ql, mut qh) = ([0u8; QK_K / 2], [0u8; QK_K / 4]);
    for (c, j) in (0..QK_K).step_by(128).enumerate() {
        let ql = &mut ql[64 * c..64 * c + 64];
        let qh = &mut qh[32 * c..32 * c + 32];
        for i in 0..32 {
            let q = |o: usize| u[j + i + o];
            ql[i] = (q(0) & 0xF) | ((q(64) & 0xF) << 4);
            ql[i + 32] = (q(32) & 0xF) | ((q(96) & 0xF) << 4);
            qh[i] = (q(0) >> 4) | ((q(32) >> 4) << 2) | ((q(64) >> 4) << 4) | ((q(96) >> 4) << 6);
        }
    }
    (ql, qh)
}

/// The 32 stored values `u` = q + 32 (0..63) of a Q6_K block's sub-block
/// `sub` (0..8, values `32 sub ..`): the one reader of the layout
/// [`q6_k_planes`] writes, in loops of fixed length the compiler runs as
/// SIMD (a model's load repacks its Q6_K weights through it); always
/// inlined, as [`k_sub_values`] is.
#[inline(always)]
pub(crate) fn q6_k_sub_values(b: &BlockQ6K, sub: usize) -> [u8; 32] {
    let (c, part) = (sub / 4, sub % 4);
    let ql: &[u8; 32] = b.ql[64 * c + 32 * (part & 1)..][..32]
        .try_into()
        .expect("32 bytes");
    let qh: &[u8; 32] = b.qh[32 * c..][..32].try_into().expect("32 bytes");
    let lo = 4 * (part / 2);
    let mut u = [0u8; 32];
    for l in 0..32 {
        u[l] = ((ql[l] >> lo) & 0xF) | (((qh[l] >> (2 * part)) & 3) << 4);
    }
    u
}

/// `dequantize_row_q6_K` for one super-block.
pub fn dequantize_q6_k(b: &BlockQ6K, y: &mut [f32; QK_K]) {
    let d = b.d.to_f32();
    for (sub, ys) in y.chunks_exact_mut(32).enumerate() {
        let u = q6_k_sub_values(b, sub);
        for (l, v) in ys.iter_mut().enumerate() {
            // 16 values per scale, in value order.
            let sc = b.scales[2 * sub + l / 16] as f32;
            *v = d * sc * (u[l] as i32 - 32) as f32;
        }
    }
}

/// `quantize_row_q8_K_ref` for one super-block.
pub fn quantize_q8_k(x: &[f32; QK_K]) -> BlockQ8K {
    let mut out = BlockQ8K {
        d: [0; 4],
        qs: [0; QK_K],
        bsums: [0; 32],
    };
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax == 0.0 {
        // The reference leaves bsums untouched here; zero is what a zeroed
        // buffer holds and what the sums of zero quants are.
        return out;
    }
    let iscale = -127.0 / max;
    for (q, &v) in out.qs.iter_mut().zip(x) {
        *q = nearest_int(iscale * v).min(127) as i8;
    }
    for j in 0..QK_K / 16 {
        let s: i32 = out.qs[16 * j..16 * j + 16].iter().map(|&q| q as i32).sum();
        out.bsums[2 * j..2 * j + 2].copy_from_slice(&(s as i16).to_le_bytes());
    }
    out.d = (1.0 / iscale).to_le_bytes();
    out
}

/// Dequantizes a Q8_K block (`d * q`).
pub fn dequantize_q8_k(b: &BlockQ8K, y: &mut [f32; QK_K]) {
    let d = b.d();
    for (v, &q) in y.iter_mut().zip(&b.qs) {
        *v = d * q as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Rng;

    /// Blocks of the kinds that take the ports' other paths: random values
    /// at several magnitudes, sub-blocks of zeros, of one constant of either
    /// sign, of one sign, one-hot, tiny values and values on a grid.
    fn blocks() -> Vec<[f32; QK_K]> {
        let mut rng = Rng::new(0x6B51);
        let mut out = Vec::new();
        for scale in [1.0f32, 1e-3, 37.0, 1e-12, 6.0e4] {
            for _ in 0..400 {
                let mut b = [0.0f32; QK_K];
                for v in &mut b {
                    *v = rng.uniform(-1.0, 1.0) * scale;
                }
                out.push(b);
            }
        }
        for kind in 0..12 {
            let mut b = [0.0f32; QK_K];
            for (j, v) in b.iter_mut().enumerate() {
                let r = rng.uniform(-1.0, 1.0);
                // Each 16-value piece of the block a different kind, so both
                // sub-block sizes see every kind beside the others.
                *v = match (j / 16 + kind) % 8 {
                    0 => 0.0,
                    1 => 0.75,
                    2 => -2.5,
                    3 => r.abs() + 0.5,
                    4 => -r.abs(),
                    5 if j % 16 == 3 => -4.0,
                    5 => 0.0,
                    6 => (r * 8.0).round() / 4.0,
                    _ => r * 1e-20,
                };
            }
            out.push(b);
        }
        out.push([0.0; QK_K]);
        out.push([-1.0; QK_K]);
        out
    }

    #[test]
    fn q6_k_lanes_are_the_port() {
        for (n, x) in blocks().iter().enumerate() {
            let mut l = [0i8; QK_K];
            let scales = q6_k_sub_scales(x, &mut l);
            for s in 0..Q6_SUBS {
                let mut want = [0i8; 16];
                let scale = make_qx_quants(32, &x[16 * s..16 * s + 16], &mut want, 1);
                assert_eq!(scales[s].to_bits(), scale.to_bits(), "block {n} sub {s}");
                assert_eq!(l[16 * s..16 * s + 16], want, "block {n} sub {s}");
            }
        }
    }

    /// `quant::quantize` (built for AVX-512 where the CPU has it) writes the
    /// bytes of this build's block quantizers.
    #[test]
    fn every_build_writes_the_same_bytes() {
        use crate::quant::blocks::{RawBlock, blocks_as_bytes};
        use crate::quant::{QuantFormat, quantize};
        fn bytes<B: RawBlock>(b: B) -> Vec<u8> {
            blocks_as_bytes(&[b]).to_vec()
        }
        let blocks = blocks();
        let x = blocks.concat();
        let want = |f: &dyn Fn(&[f32; QK_K]) -> Vec<u8>| -> Vec<u8> {
            blocks.iter().flat_map(f).collect()
        };
        let q4: Vec<u8> = want(&|b| bytes(quantize_q4_k(b)));
        assert_eq!(quantize(QuantFormat::Q4K, &x).unwrap(), q4);
        let q5: Vec<u8> = want(&|b| bytes(quantize_q5_k(b)));
        assert_eq!(quantize(QuantFormat::Q5K, &x).unwrap(), q5);
        let q6: Vec<u8> = want(&|b| bytes(quantize_q6_k(b)));
        assert_eq!(quantize(QuantFormat::Q6K, &x).unwrap(), q6);
    }

    #[test]
    fn k_lanes_are_the_port() {
        // Q4_K's and Q5_K's grids.
        for (nmax, rmin, nstep) in [(15, -1.0, 20), (31, -0.5, 15), (15, -1.0, 0)] {
            for (n, x) in blocks().iter().enumerate() {
                let mut l = [0u8; QK_K];
                let (scales, mins) = k_sub_scales(x, nmax, rmin, nstep, &mut l);
                for s in 0..K_SUBS {
                    let xs = &x[32 * s..32 * s + 32];
                    let av_x = (xs.iter().fold(0.0f32, |a, &v| a + v * v) / 32.0).sqrt();
                    let weights: Vec<f32> = xs.iter().map(|v| av_x + v.abs()).collect();
                    let (mut want, mut laux, mut min) = ([0u8; 32], [0u8; 32], 0.0f32);
                    let scale = make_qkx2_quants(
                        nmax, xs, &weights, &mut want, &mut min, &mut laux, rmin, 0.1, nstep, false,
                    );
                    let what = format!("nmax {nmax}, block {n} sub {s}");
                    assert_eq!(scales[s].to_bits(), scale.to_bits(), "{what}");
                    assert_eq!(mins[s].to_bits(), min.to_bits(), "{what}");
                    assert_eq!(l[32 * s..32 * s + 32], want, "{what}");
                }
            }
        }
    }
}
