//! Plain scalar dequantization of the GGUF block formats the reference model
//! needs (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0). Layouts follow ggml's
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
        _ => return None,
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(dequantize(GgmlType::Q6_K, &[0; 210]).is_none());
        assert!(dequantize(GgmlType::Q8_0, &[0; 33]).is_none());
    }
}
