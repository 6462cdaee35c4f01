//! The one vocabulary of element types: ggml's tensor types, with their ids
//! as in ggml.h's `enum ggml_type` (current numbering; removed ids 4, 5,
//! 31-33, 36-38 are rejected), block size (elements per block) and type size
//! (bytes per block) from ggml.c's `type_traits`, so a tensor's byte size can
//! be computed and checked against the file before any kernel sees it; its
//! names (`q4_K` as llama.cpp prints it, `q4_k` as kernel problems key it,
//! either read back by [`GgmlType::parse`]); and which of them tiletune's
//! matrix kernels take ([`GgmlType::MATRIX`]). A quantized block format's
//! kernel-side enum, [`crate::quant::QuantFormat`], is the subset with
//! kernels, converted to and from this type in one place.

/// A ggml tensor element type as stored in GGUF.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    IQ2_XXS,
    IQ2_XS,
    IQ3_XXS,
    IQ1_S,
    IQ4_NL,
    IQ3_S,
    IQ2_S,
    IQ4_XS,
    I8,
    I16,
    I32,
    I64,
    F64,
    IQ1_M,
    BF16,
    TQ1_0,
    TQ2_0,
    MXFP4,
}

/// Super-block size of the k-quants and most i-quants (ggml's `QK_K`).
const QK_K: u64 = 256;

impl GgmlType {
    /// Every type, in id order.
    pub const ALL: [GgmlType; 32] = [
        Self::F32,
        Self::F16,
        Self::Q4_0,
        Self::Q4_1,
        Self::Q5_0,
        Self::Q5_1,
        Self::Q8_0,
        Self::Q8_1,
        Self::Q2_K,
        Self::Q3_K,
        Self::Q4_K,
        Self::Q5_K,
        Self::Q6_K,
        Self::Q8_K,
        Self::IQ2_XXS,
        Self::IQ2_XS,
        Self::IQ3_XXS,
        Self::IQ1_S,
        Self::IQ4_NL,
        Self::IQ3_S,
        Self::IQ2_S,
        Self::IQ4_XS,
        Self::I8,
        Self::I16,
        Self::I32,
        Self::I64,
        Self::F64,
        Self::IQ1_M,
        Self::BF16,
        Self::TQ1_0,
        Self::TQ2_0,
        Self::MXFP4,
    ];

    /// The type for a ggml type id, or `None` for ids that are unknown or
    /// were removed from ggml.
    pub fn from_id(id: u32) -> Option<Self> {
        Some(match id {
            0 => Self::F32,
            1 => Self::F16,
            2 => Self::Q4_0,
            3 => Self::Q4_1,
            6 => Self::Q5_0,
            7 => Self::Q5_1,
            8 => Self::Q8_0,
            9 => Self::Q8_1,
            10 => Self::Q2_K,
            11 => Self::Q3_K,
            12 => Self::Q4_K,
            13 => Self::Q5_K,
            14 => Self::Q6_K,
            15 => Self::Q8_K,
            16 => Self::IQ2_XXS,
            17 => Self::IQ2_XS,
            18 => Self::IQ3_XXS,
            19 => Self::IQ1_S,
            20 => Self::IQ4_NL,
            21 => Self::IQ3_S,
            22 => Self::IQ2_S,
            23 => Self::IQ4_XS,
            24 => Self::I8,
            25 => Self::I16,
            26 => Self::I32,
            27 => Self::I64,
            28 => Self::F64,
            29 => Self::IQ1_M,
            30 => Self::BF16,
            34 => Self::TQ1_0,
            35 => Self::TQ2_0,
            39 => Self::MXFP4,
            _ => return None,
        })
    }

    /// The ggml type id written to GGUF.
    pub fn id(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q4_0 => 2,
            Self::Q4_1 => 3,
            Self::Q5_0 => 6,
            Self::Q5_1 => 7,
            Self::Q8_0 => 8,
            Self::Q8_1 => 9,
            Self::Q2_K => 10,
            Self::Q3_K => 11,
            Self::Q4_K => 12,
            Self::Q5_K => 13,
            Self::Q6_K => 14,
            Self::Q8_K => 15,
            Self::IQ2_XXS => 16,
            Self::IQ2_XS => 17,
            Self::IQ3_XXS => 18,
            Self::IQ1_S => 19,
            Self::IQ4_NL => 20,
            Self::IQ3_S => 21,
            Self::IQ2_S => 22,
            Self::IQ4_XS => 23,
            Self::I8 => 24,
            Self::I16 => 25,
            Self::I32 => 26,
            Self::I64 => 27,
            Self::F64 => 28,
            Self::IQ1_M => 29,
            Self::BF16 => 30,
            Self::TQ1_0 => 34,
            Self::TQ2_0 => 35,
            Self::MXFP4 => 39,
        }
    }

    /// Elements per block (ggml `blck_size`).
    pub fn block_size(self) -> u64 {
        match self {
            Self::F32
            | Self::F16
            | Self::BF16
            | Self::F64
            | Self::I8
            | Self::I16
            | Self::I32
            | Self::I64 => 1,
            Self::Q4_0
            | Self::Q4_1
            | Self::Q5_0
            | Self::Q5_1
            | Self::Q8_0
            | Self::Q8_1
            | Self::IQ4_NL
            | Self::MXFP4 => 32,
            Self::Q2_K
            | Self::Q3_K
            | Self::Q4_K
            | Self::Q5_K
            | Self::Q6_K
            | Self::Q8_K
            | Self::IQ2_XXS
            | Self::IQ2_XS
            | Self::IQ3_XXS
            | Self::IQ1_S
            | Self::IQ3_S
            | Self::IQ2_S
            | Self::IQ4_XS
            | Self::IQ1_M
            | Self::TQ1_0
            | Self::TQ2_0 => QK_K,
        }
    }

    /// Bytes per block (ggml `type_size`); the layouts are in comments.
    pub fn type_size(self) -> u64 {
        match self {
            Self::F32 | Self::I32 => 4,
            Self::F16 | Self::BF16 | Self::I16 => 2,
            Self::F64 | Self::I64 => 8,
            Self::I8 => 1,
            Self::Q4_0 => 18,    // f16 d + 16 nibble bytes
            Self::Q4_1 => 20,    // f16 d, m + 16
            Self::Q5_0 => 22,    // f16 d + 4 high bits + 16
            Self::Q5_1 => 24,    // f16 d, m + 4 + 16
            Self::Q8_0 => 34,    // f16 d + 32 i8
            Self::Q8_1 => 36,    // f16 d, s + 32 i8
            Self::Q2_K => 84,    // 16 scales + 64 qs + f16 d, dmin
            Self::Q3_K => 110,   // 32 hmask + 64 qs + 12 scales + f16 d
            Self::Q4_K => 144,   // f16 d, dmin + 12 scales + 128 qs
            Self::Q5_K => 176,   // f16 d, dmin + 12 scales + 32 qh + 128 qs
            Self::Q6_K => 210,   // 128 ql + 64 qh + 16 scales + f16 d
            Self::Q8_K => 292,   // f32 d + 256 qs + 16 i16 bsums
            Self::IQ2_XXS => 66, // f16 d + 32 u16
            Self::IQ2_XS => 74,  // f16 d + 32 u16 + 8 scales
            Self::IQ3_XXS => 98, // f16 d + 96
            Self::IQ1_S => 50,   // f16 d + 32 qs + 8 u16 qh
            Self::IQ4_NL => 18,  // f16 d + 16
            Self::IQ3_S => 110,  // f16 d + 64 qs + 8 qh + 32 signs + 4 scales
            Self::IQ2_S => 82,   // f16 d + 64 qs + 8 qh + 8 scales
            Self::IQ4_XS => 136, // f16 d + u16 scales_h + 4 scales_l + 128 qs
            Self::IQ1_M => 56,   // 32 qs + 16 qh + 8 scales
            Self::TQ1_0 => 54,   // 48 qs + 4 qh + f16 d
            Self::TQ2_0 => 66,   // 64 qs + f16 d
            Self::MXFP4 => 17,   // e8m0 exponent + 16 fp4 bytes
        }
    }

    /// The name as llama.cpp prints it (`q4_0`, `q4_K`, `f16`, `mxfp4`).
    pub const fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::Q4_0 => "q4_0",
            Self::Q4_1 => "q4_1",
            Self::Q5_0 => "q5_0",
            Self::Q5_1 => "q5_1",
            Self::Q8_0 => "q8_0",
            Self::Q8_1 => "q8_1",
            Self::Q2_K => "q2_K",
            Self::Q3_K => "q3_K",
            Self::Q4_K => "q4_K",
            Self::Q5_K => "q5_K",
            Self::Q6_K => "q6_K",
            Self::Q8_K => "q8_K",
            Self::IQ2_XXS => "iq2_xxs",
            Self::IQ2_XS => "iq2_xs",
            Self::IQ3_XXS => "iq3_xxs",
            Self::IQ1_S => "iq1_s",
            Self::IQ4_NL => "iq4_nl",
            Self::IQ3_S => "iq3_s",
            Self::IQ2_S => "iq2_s",
            Self::IQ4_XS => "iq4_xs",
            Self::I8 => "i8",
            Self::I16 => "i16",
            Self::I32 => "i32",
            Self::I64 => "i64",
            Self::F64 => "f64",
            Self::IQ1_M => "iq1_m",
            Self::BF16 => "bf16",
            Self::TQ1_0 => "tq1_0",
            Self::TQ2_0 => "tq2_0",
            Self::MXFP4 => "mxfp4",
        }
    }

    /// Bytes of `n_elements` elements of this type, or `None` when the count
    /// is not a whole number of blocks or the size overflows.
    pub fn bytes_for(self, n_elements: u64) -> Option<u64> {
        let bs = self.block_size();
        if !n_elements.is_multiple_of(bs) {
            return None;
        }
        (n_elements / bs).checked_mul(self.type_size())
    }
}

impl GgmlType {
    /// The weight types tiletune's matrix kernels (GEMV, GEMM and their
    /// quantized forms) take: f32, f16, then the GGUF block formats.
    pub const MATRIX: [GgmlType; 11] = [
        Self::F32,
        Self::F16,
        Self::Q4_0,
        Self::Q4_1,
        Self::Q5_0,
        Self::Q5_1,
        Self::Q8_0,
        Self::Q4_K,
        Self::Q5_K,
        Self::Q6_K,
        Self::MXFP4,
    ];

    /// The name kernel problems and the selector table key a weight dtype
    /// by: [`Self::name`] in lowercase (`q4_k`).
    pub const fn key(self) -> &'static str {
        match self {
            Self::Q2_K => "q2_k",
            Self::Q3_K => "q3_k",
            Self::Q4_K => "q4_k",
            Self::Q5_K => "q5_k",
            Self::Q6_K => "q6_k",
            Self::Q8_K => "q8_k",
            t => t.name(),
        }
    }

    /// The type a name gives, in any case (`q4_K`, `Q4_K`, `q4_k`).
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(s))
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_removed_ids_are_rejected() {
        for t in GgmlType::ALL {
            assert_eq!(GgmlType::from_id(t.id()), Some(t));
        }
        for removed in [4, 5, 31, 32, 33, 36, 37, 38, 40, 1000, u32::MAX] {
            assert_eq!(GgmlType::from_id(removed), None, "id {removed}");
        }
        assert_eq!(GgmlType::MXFP4.id(), 39);
    }

    #[test]
    fn names_read_back_in_any_case() {
        for t in GgmlType::ALL {
            assert_eq!(GgmlType::parse(t.name()), Some(t));
            assert_eq!(GgmlType::parse(t.key()), Some(t));
            assert_eq!(GgmlType::parse(&t.name().to_ascii_uppercase()), Some(t));
            assert_eq!(t.key(), t.name().to_ascii_lowercase());
        }
        assert_eq!(GgmlType::parse("q4_k_m"), None);
    }

    #[test]
    fn byte_sizes_follow_blocks() {
        assert_eq!(GgmlType::Q4_0.bytes_for(64), Some(36));
        assert_eq!(GgmlType::Q4_0.bytes_for(33), None);
        assert_eq!(GgmlType::Q6_K.bytes_for(512), Some(420));
        assert_eq!(GgmlType::F32.bytes_for(u64::MAX), None);
        assert_eq!(GgmlType::MXFP4.bytes_for(32), Some(17));
    }
}
