//! GGUF block layouts, byte for byte.
//!
//! Each struct mirrors one `block_*` of ggml's `ggml-common.h`
//! (<https://github.com/ggml-org/llama.cpp/blob/master/ggml/src/ggml-common.h>;
//! the GGUF type table is at <https://github.com/ggml-org/ggml/blob/master/docs/gguf.md>).
//! Scales are stored as little-endian byte arrays rather than `u16`/`f32` so
//! that every block has alignment 1: a tensor slice taken from an mmapped GGUF
//! file at any byte offset can be viewed as `&[Block]` without copying
//! ([`cast_blocks`]). The sizes are checked at compile time.

use std::mem::{align_of, size_of};

/// Values per block of the 32-wide formats (`QK4_0`, `QK8_0`, `QK_MXFP4`, …).
pub const QK: usize = 32;
/// Values per super-block of the K-quants (`QK_K`).
pub const QK_K: usize = 256;
/// Bytes of packed 6-bit scales and mins in a Q4_K/Q5_K block (`K_SCALE_SIZE`).
pub const K_SCALE_SIZE: usize = 12;

/// An IEEE half stored little-endian (ggml's `ggml_half`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct F16Le(pub [u8; 2]);

impl F16Le {
    /// Round-to-nearest-even, as `GGML_FP32_TO_FP16` (F16C or the software path) does.
    #[inline]
    pub fn from_f32(x: f32) -> Self {
        F16Le(half::f16::from_f32(x).to_bits().to_le_bytes())
    }

    /// Exact widening, as `GGML_FP16_TO_FP32`.
    #[inline]
    pub fn to_f32(self) -> f32 {
        half::f16::from_bits(u16::from_le_bytes(self.0)).to_f32()
    }
}

/// `block_q4_0`: `d` (f16) then 16 bytes; byte `j` holds value `j` in its low
/// nibble and value `j + 16` in its high nibble; value = `d * (q - 8)`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockQ4_0 {
    pub d: F16Le,
    pub qs: [u8; QK / 2],
}

/// `block_q4_1`: `d`, `m` (f16) then nibbles as Q4_0; value = `d * q + m`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockQ4_1 {
    pub d: F16Le,
    pub m: F16Le,
    pub qs: [u8; QK / 2],
}

/// `block_q5_0`: `d`, the 32 fifth bits (`qh`, little-endian u32, bit `j` for
/// value `j`), then low nibbles as Q4_0; value = `d * (q - 16)`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockQ5_0 {
    pub d: F16Le,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}

/// `block_q5_1`: `d`, `m`, `qh`, nibbles; value = `d * q + m`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockQ5_1 {
    pub d: F16Le,
    pub m: F16Le,
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}

/// `block_q8_0`: `d` then 32 signed bytes; value = `d * q`. Also the
/// activation format paired with Q4_0, Q5_0, Q8_0 and MXFP4 in integer dots.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockQ8_0 {
    pub d: F16Le,
    pub qs: [i8; QK],
}

/// `block_q8_1`: Q8_0 plus `s = d * Σq` (f16), the activation format paired
/// with Q4_1 and Q5_1 (the sum carries the weights' offset `m`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockQ8_1 {
    pub d: F16Le,
    pub s: F16Le,
    pub qs: [i8; QK],
}

/// `block_q4_K`: a 256-value super-block of 8 sub-blocks of 32, each with a
/// 6-bit scale and a 6-bit min packed in `scales` (see `get_scale_min_k4`);
/// value = `d * sc * q - dmin * m`. `qs` holds 4 chunks of 64 values: byte
/// `l` of chunk `c` has value `64c + l` low and `64c + 32 + l` high.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockQ4K {
    pub d: F16Le,
    pub dmin: F16Le,
    pub scales: [u8; K_SCALE_SIZE],
    pub qs: [u8; QK_K / 2],
}

/// `block_q5_K`: Q4_K plus a fifth-bit plane: bit `j` of `qh[l]` is bit 4
/// of value `32 j + l` (sub-block j); the nibbles are laid out as Q4_K's;
/// value = `d * sc * q - dmin * m` with q in 0..32.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockQ5K {
    pub d: F16Le,
    pub dmin: F16Le,
    pub scales: [u8; K_SCALE_SIZE],
    pub qh: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 2],
}

/// The K-quants with eight 32-value sub-blocks, 6-bit (scale, min) codes
/// and Q4_K's nibble layout: Q4_K, and Q5_K with its fifth-bit plane. The
/// kernels take this rather than two block types so that Q5_K is Q4_K's
/// code plus one OR of the fifth bits, resolved at compile time.
pub trait KSubBlock: RawBlock {
    /// Whether the values have a fifth bit in [`qh`](Self::qh).
    const FIVE: bool;
    fn d(&self) -> F16Le;
    fn dmin(&self) -> F16Le;
    fn scales(&self) -> &[u8; K_SCALE_SIZE];
    fn qs(&self) -> &[u8; QK_K / 2];
    /// The fifth-bit plane (all zero for Q4_K).
    fn qh(&self) -> &[u8; QK_K / 8];
}

const NO_FIFTH_BITS: [u8; QK_K / 8] = [0; QK_K / 8];

macro_rules! k_sub_block {
    ($t:ty, $five:expr, |$b:ident| $qh:expr) => {
        impl KSubBlock for $t {
            const FIVE: bool = $five;
            #[inline]
            fn d(&self) -> F16Le {
                self.d
            }
            #[inline]
            fn dmin(&self) -> F16Le {
                self.dmin
            }
            #[inline]
            fn scales(&self) -> &[u8; K_SCALE_SIZE] {
                &self.scales
            }
            #[inline]
            fn qs(&self) -> &[u8; QK_K / 2] {
                &self.qs
            }
            #[inline]
            fn qh(&self) -> &[u8; QK_K / 8] {
                let $b = self;
                $qh
            }
        }
    };
}

k_sub_block!(BlockQ4K, false, |_b| &NO_FIFTH_BITS);
k_sub_block!(BlockQ5K, true, |b| &b.qh);

/// `block_q6_K`: 256 values of 6 bits (low 4 in `ql`, high 2 in `qh`), 16
/// signed 8-bit scales per 16 values, then `d`; value = `d * sc * (q - 32)`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockQ6K {
    pub ql: [u8; QK_K / 2],
    pub qh: [u8; QK_K / 4],
    pub scales: [i8; QK_K / 16],
    pub d: F16Le,
}

/// `block_q8_K`: the activation format of the K-quants: `d` (f32, not f16),
/// 256 signed bytes, and the sum of each 16 of them (`bsums`, i16 LE).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockQ8K {
    pub d: [u8; 4],
    pub qs: [i8; QK_K],
    pub bsums: [u8; 2 * QK_K / 16],
}

impl BlockQ8K {
    /// The f32 scale.
    #[inline]
    pub fn d(&self) -> f32 {
        f32::from_le_bytes(self.d)
    }

    /// Sum of quants `16 i .. 16 i + 16`.
    #[inline]
    pub fn bsum(&self, i: usize) -> i16 {
        i16::from_le_bytes([self.bsums[2 * i], self.bsums[2 * i + 1]])
    }
}

/// `block_mxfp4`: the OCP MX FP4 format as GGUF stores it: one E8M0 shared
/// exponent byte `e`, then 16 bytes of E2M1 codes, low nibble = value `j`,
/// high nibble = value `j + 16`. value = `kvalues_mxfp4[q] * 2^(e - 128)`
/// (the table holds doubled E2M1 values, hence the halved scale).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockMxfp4 {
    pub e: u8,
    pub qs: [u8; QK / 2],
}

/// `kvalues_mxfp4`: E2M1 code → value × 2 (ggml-common.h).
pub const KVALUES_MXFP4: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// `GGML_E8M0_TO_FP32_HALF`: `2^(e - 128)`, including the two subnormal codes.
#[inline]
pub fn e8m0_to_f32_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        ((e as u32) - 1) << 23
    };
    f32::from_bits(bits)
}

const _: () = assert!(size_of::<BlockQ4_0>() == 18);
const _: () = assert!(size_of::<BlockQ4_1>() == 20);
const _: () = assert!(size_of::<BlockQ5_0>() == 22);
const _: () = assert!(size_of::<BlockQ5_1>() == 24);
const _: () = assert!(size_of::<BlockQ8_0>() == 34);
const _: () = assert!(size_of::<BlockQ8_1>() == 36);
const _: () = assert!(size_of::<BlockQ4K>() == 144);
const _: () = assert!(size_of::<BlockQ5K>() == 176);
const _: () = assert!(size_of::<BlockQ6K>() == 210);
const _: () = assert!(size_of::<BlockQ8K>() == 292);
const _: () = assert!(size_of::<BlockMxfp4>() == 17);

/// A block type whose every bit pattern is valid and whose alignment is 1,
/// so byte slices can be reinterpreted as block slices.
///
/// # Safety
/// Implementors must be `#[repr(C)]`, have alignment 1, no padding, and
/// contain only integer arrays (every byte pattern valid).
pub unsafe trait RawBlock: Copy + 'static {
    /// Values per block.
    const QK: usize;
    /// Bytes per block.
    const BYTES: usize = size_of::<Self>();
}

macro_rules! raw_block {
    ($($t:ty => $qk:expr),* $(,)?) => {$(
        const _: () = assert!(align_of::<$t>() == 1);
        // SAFETY: repr(C), alignment 1 (asserted above), only u8/i8 arrays.
        unsafe impl RawBlock for $t { const QK: usize = $qk; }
    )*};
}

raw_block!(
    BlockQ4_0 => QK,
    BlockQ4_1 => QK,
    BlockQ5_0 => QK,
    BlockQ5_1 => QK,
    BlockQ8_0 => QK,
    BlockQ8_1 => QK,
    BlockQ4K => QK_K,
    BlockQ5K => QK_K,
    BlockQ6K => QK_K,
    BlockQ8K => QK_K,
    BlockMxfp4 => QK,
);

/// Views `bytes` as blocks. `None` if the length is not a whole number of
/// blocks.
pub fn cast_blocks<B: RawBlock>(bytes: &[u8]) -> Option<&[B]> {
    if !bytes.len().is_multiple_of(B::BYTES) {
        return None;
    }
    // SAFETY: B has alignment 1 and accepts every byte pattern (RawBlock),
    // and the length is a whole number of blocks.
    Some(unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<B>(), bytes.len() / B::BYTES) })
}

/// Mutable counterpart of [`cast_blocks`].
pub fn cast_blocks_mut<B: RawBlock>(bytes: &mut [u8]) -> Option<&mut [B]> {
    if !bytes.len().is_multiple_of(B::BYTES) {
        return None;
    }
    let n = bytes.len() / B::BYTES;
    // SAFETY: as in `cast_blocks`; the borrow is exclusive.
    Some(unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast::<B>(), n) })
}

/// Views blocks as their bytes (the GGUF serialization).
pub fn blocks_as_bytes<B: RawBlock>(blocks: &[B]) -> &[u8] {
    // SAFETY: RawBlock types have no padding, so every byte is initialized.
    unsafe {
        std::slice::from_raw_parts(blocks.as_ptr().cast::<u8>(), std::mem::size_of_val(blocks))
    }
}
