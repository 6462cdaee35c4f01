//! Plain scalar dequantization of the GGUF block formats the reference model
//! needs (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q4_K, Q6_K). Layouts follow ggml's
//! `dequantize_row_*`. The tuned path uses the kernel crate's formats instead;
//! this exists so the reference forward pass can read real GGUF files.

use crate::gguf::GgmlType;
use half::{bf16, f16};

fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// Dequantizes `data` (whole blocks of `ty`) to f32, or `None` for types this
/// reference does not read.
pub fn dequantize(ty: GgmlType, data: &[u8]) -> Option<Vec<f32>> {
    let ts = ty.type_size() as usize;
    if !data.len().is_multiple_of(ts) {
        return None;
    }
    let mut out = Vec::with_capacity(data.len() / ts * ty.block_size() as usize);
    match ty {
        GgmlType::F32 => out.extend(
            data.chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().expect("4"))),
        ),
        GgmlType::F16 => out.extend(
            data.chunks_exact(2)
                .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32()),
        ),
        GgmlType::BF16 => out.extend(
            data.chunks_exact(2)
                .map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32()),
        ),
        GgmlType::Q8_0 => {
            for b in data.chunks_exact(34) {
                let d = f16_at(b, 0);
                out.extend(b[2..].iter().map(|&q| f32::from(q as i8) * d));
            }
        }
        GgmlType::Q4_0 => {
            for b in data.chunks_exact(18) {
                let d = f16_at(b, 0);
                let qs = &b[2..18];
                out.extend(qs.iter().map(|&q| (i32::from(q & 0xF) - 8) as f32 * d));
                out.extend(qs.iter().map(|&q| (i32::from(q >> 4) - 8) as f32 * d));
            }
        }
        GgmlType::Q4_1 => {
            for b in data.chunks_exact(20) {
                let (d, m) = (f16_at(b, 0), f16_at(b, 2));
                let qs = &b[4..20];
                out.extend(qs.iter().map(|&q| f32::from(q & 0xF) * d + m));
                out.extend(qs.iter().map(|&q| f32::from(q >> 4) * d + m));
            }
        }
        GgmlType::Q5_0 => {
            for b in data.chunks_exact(22) {
                let d = f16_at(b, 0);
                let qh = u32::from_le_bytes(b[2..6].try_into().expect("4"));
                let qs = &b[6..22];
                for (j, &q) in qs.iter().enumerate() {
                    let h = ((qh >> j) << 4) & 0x10;
                    out.push((i32::from(q & 0xF) | h as i32) as f32 * d - 16.0 * d);
                }
                for (j, &q) in qs.iter().enumerate() {
                    let h = (qh >> (j + 12)) & 0x10;
                    out.push((i32::from(q >> 4) | h as i32) as f32 * d - 16.0 * d);
                }
            }
        }
        GgmlType::Q4_K => {
            for b in data.chunks_exact(144) {
                let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
                let scales = &b[4..16];
                let qs = &b[16..144];
                for (j, q) in qs.chunks_exact(32).enumerate() {
                    let (s1, m1) = scale_min_k4(2 * j, scales);
                    let (s2, m2) = scale_min_k4(2 * j + 1, scales);
                    let (d1, m1) = (d * f32::from(s1), dmin * f32::from(m1));
                    let (d2, m2) = (d * f32::from(s2), dmin * f32::from(m2));
                    out.extend(q.iter().map(|&x| d1 * f32::from(x & 0xF) - m1));
                    out.extend(q.iter().map(|&x| d2 * f32::from(x >> 4) - m2));
                }
            }
        }
        GgmlType::Q6_K => {
            for b in data.chunks_exact(210) {
                let d = f16_at(b, 208);
                for half in 0..2 {
                    let ql = &b[half * 64..half * 64 + 64];
                    let qh = &b[128 + half * 32..128 + half * 32 + 32];
                    let sc = &b[192 + half * 8..192 + half * 8 + 8];
                    let mut y = [0.0f32; 128];
                    for l in 0..32 {
                        let is = l / 16;
                        let q = |lo: u8, shift: u32| {
                            (i32::from(lo) | ((i32::from(qh[l]) >> shift) & 3) << 4) - 32
                        };
                        let s = |k: usize| d * f32::from(sc[is + k] as i8);
                        y[l] = s(0) * q(ql[l] & 0xF, 0) as f32;
                        y[l + 32] = s(2) * q(ql[l + 32] & 0xF, 2) as f32;
                        y[l + 64] = s(4) * q(ql[l] >> 4, 4) as f32;
                        y[l + 96] = s(6) * q(ql[l + 32] >> 4, 6) as f32;
                    }
                    out.extend_from_slice(&y);
                }
            }
        }
        _ => return None,
    }
    Some(out)
}

/// ggml's `get_scale_min_k4`: the 6-bit scale and min of sub-block `j` of a
/// Q4_K/Q5_K super-block, packed in 12 bytes.
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k_quants_decode_as_ggml_does() {
        // Q4_K: d = 1, dmin = 0.5; sub-block 0 scale 2 / min 4, sub-block 5
        // (high bits packed) scale 1 + 16 = 17 / min 3 + 32 = 35.
        let mut b = half::f16::from_f32(1.0).to_le_bytes().to_vec();
        b.extend(half::f16::from_f32(0.5).to_le_bytes());
        let mut scales = [0u8; 12];
        scales[0] = 2;
        scales[4] = 4;
        scales[1] = 1 << 6; // high bits of sub-block 5's scale
        scales[5] = 2 << 6; // high bits of sub-block 5's min
        scales[9] = 1 | (3 << 4);
        b.extend(scales);
        b.extend([0x31u8; 128]); // low nibble 1, high nibble 3
        let v = dequantize(GgmlType::Q4_K, &b).unwrap();
        assert_eq!(v.len(), 256);
        assert_eq!(v[0], 2.0 * 1.0 - 0.5 * 4.0);
        // Sub-block 5 is the high nibbles of the third 32-byte group.
        assert_eq!(v[5 * 32], 17.0 * 3.0 - 0.5 * 35.0);
        // Q6_K: all 6-bit values 33 (-> 1), scales i8, d = 0.25.
        let mut b = vec![0x11u8; 128]; // ql: low 4 bits 1 in both nibbles
        b.extend([0xAAu8; 64]); // qh: 2 in every 2-bit field -> 1 + 32 = 33
        b.extend((0..16).map(|i| (i as i8 - 8) as u8));
        b.extend(half::f16::from_f32(0.25).to_le_bytes());
        let v = dequantize(GgmlType::Q6_K, &b).unwrap();
        assert_eq!(v.len(), 256);
        assert_eq!(v[0], 0.25 * -8.0); // scale 0
        assert_eq!(v[32], 0.25 * -6.0); // scale 2
        assert_eq!(v[128 + 96 + 16], 0.25 * 7.0); // second half, scale 8 + 6 + 1
    }

    #[test]
    fn blocks_decode_as_ggml_does() {
        // Q8_0: d = 0.5, values -2..
        let mut b = half::f16::from_f32(0.5).to_le_bytes().to_vec();
        b.extend((0..32).map(|i| (i as i8 - 2) as u8));
        let v = dequantize(GgmlType::Q8_0, &b).unwrap();
        assert_eq!((v[0], v[31]), (-1.0, 14.5));
        // Q4_1: d = 1, m = -3; byte j holds element j (low) and j + 16 (high).
        let mut b = half::f16::from_f32(1.0).to_le_bytes().to_vec();
        b.extend(half::f16::from_f32(-3.0).to_le_bytes());
        b.extend((0..16).map(|j| (j as u8) | (15 - j as u8) << 4));
        let v = dequantize(GgmlType::Q4_1, &b).unwrap();
        assert_eq!((v[0], v[5], v[16], v[31]), (-3.0, 2.0, 12.0, -3.0));
        // Q4_0: offset 8.
        let mut b = half::f16::from_f32(2.0).to_le_bytes().to_vec();
        b.extend([0x8Fu8; 16]);
        let v = dequantize(GgmlType::Q4_0, &b).unwrap();
        assert_eq!((v[0], v[16]), (14.0, 0.0));
        // Q5_0: the fifth bit of element j is bit j of qh, of j + 16 bit j + 16.
        let mut b = half::f16::from_f32(1.0).to_le_bytes().to_vec();
        b.extend((1u32 | 1 << 16).to_le_bytes());
        b.extend([0u8; 16]);
        let v = dequantize(GgmlType::Q5_0, &b).unwrap();
        assert_eq!((v[0], v[1], v[16], v[17]), (0.0, -16.0, 0.0, -16.0));
        assert!(dequantize(GgmlType::Q5_K, &[0; 176]).is_none());
        assert!(dequantize(GgmlType::Q8_0, &[0; 33]).is_none());
    }
}
