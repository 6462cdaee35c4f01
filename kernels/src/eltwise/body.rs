//! The element-wise loops, written once against [`Simd`]: each ISA file
//! keeps its own vector math (the activations differ in blends, `2ⁿ`
//! scaling and NaN/-0 handling) and names it through [`Act`]; the loops and
//! the `#[target_feature]` entry points are stamped from here. AVX-512 runs
//! every vector masked (one loop body for full vectors and the tail); the
//! others finish in a zero-padded stack buffer, so every lane count runs the
//! same vector code.

use super::EltOp;
use crate::simd::Simd;

/// One ISA's vector activations.
///
/// # Safety
/// As [`Simd`]: the CPU supports the ISA.
pub(crate) trait Act: Simd {
    unsafe fn silu(x: Self::V) -> Self::V;
    unsafe fn gelu_tanh(x: Self::V) -> Self::V;
    unsafe fn gelu_erf(x: Self::V) -> Self::V;
    unsafe fn quick_gelu(x: Self::V) -> Self::V;
    unsafe fn relu(x: Self::V) -> Self::V;
    unsafe fn relu2(x: Self::V) -> Self::V;
    unsafe fn sigmoid(x: Self::V) -> Self::V;
}

/// Implements [`Act`] for `$isa` with the ISA file's functions, in the
/// trait's order.
macro_rules! act_impl {
    ($isa:ty: $silu:expr, $gelu_tanh:expr, $gelu_erf:expr, $quick_gelu:expr, $relu:expr,
     $relu2:expr, $sigmoid:expr $(,)?) => {
        // SAFETY (all methods): per the trait contract, the CPU supports $isa.
        impl super::body::Act for $isa {
            #[inline(always)]
            unsafe fn silu(x: Self::V) -> Self::V {
                unsafe { $silu(x) }
            }
            #[inline(always)]
            unsafe fn gelu_tanh(x: Self::V) -> Self::V {
                unsafe { $gelu_tanh(x) }
            }
            #[inline(always)]
            unsafe fn gelu_erf(x: Self::V) -> Self::V {
                unsafe { $gelu_erf(x) }
            }
            #[inline(always)]
            unsafe fn quick_gelu(x: Self::V) -> Self::V {
                unsafe { $quick_gelu(x) }
            }
            #[inline(always)]
            unsafe fn relu(x: Self::V) -> Self::V {
                unsafe { $relu(x) }
            }
            #[inline(always)]
            unsafe fn relu2(x: Self::V) -> Self::V {
                unsafe { $relu2(x) }
            }
            #[inline(always)]
            unsafe fn sigmoid(x: Self::V) -> Self::V {
                unsafe { $sigmoid(x) }
            }
        }
    };
}
pub(super) use act_impl;

/// The lanes of `v` as a slice (a vector is `LANES` f32 in memory order).
#[inline(always)]
fn lanes_of<S: Simd>(v: &mut S::V) -> &mut [f32] {
    debug_assert_eq!(size_of::<S::V>(), 4 * S::LANES);
    // SAFETY: `S::V` is `LANES` f32 with no padding.
    unsafe { core::slice::from_raw_parts_mut((v as *mut S::V).cast::<f32>(), S::LANES) }
}

/// Applies `f` to every vector of `x` in place.
///
/// # Safety
/// The CPU supports `S`.
#[inline(always)]
unsafe fn map_inplace<S: Simd>(x: &mut [f32], f: impl Fn(S::V) -> S::V) {
    let n = x.len();
    let p = x.as_mut_ptr();
    let mut i = 0;
    // SAFETY: full vectors below n; the tail is masked to n or goes
    // through a one-vector buffer.
    unsafe {
        if S::MASKED_TAIL {
            while i < n {
                let k = (n - i).min(S::LANES);
                S::store_tail(p.add(i), f(S::load_tail(p.add(i), k)), k);
                i += k;
            }
            return;
        }
        while i + S::LANES <= n {
            S::store(p.add(i), f(S::load(p.add(i))));
            i += S::LANES;
        }
        if i < n {
            let mut v = S::zero();
            let buf = lanes_of::<S>(&mut v);
            buf[..n - i].copy_from_slice(&x[i..]);
            S::store(buf.as_mut_ptr(), f(S::load(buf.as_ptr())));
            x[i..].copy_from_slice(&buf[..n - i]);
        }
    }
}

/// Applies `f` to the vectors of `a` and `b` (same length), storing into `a`.
///
/// # Safety
/// The CPU supports `S`.
#[inline(always)]
unsafe fn zip_inplace<S: Simd>(a: &mut [f32], b: &[f32], f: impl Fn(S::V, S::V) -> S::V) {
    debug_assert_eq!(a.len(), b.len());
    let n = a.len().min(b.len());
    let pa = a.as_mut_ptr();
    let pb = b.as_ptr();
    let mut i = 0;
    // SAFETY: full vectors below n in both slices; the tail is masked to n
    // or goes through one-vector buffers.
    unsafe {
        if S::MASKED_TAIL {
            while i < n {
                let k = (n - i).min(S::LANES);
                let (va, vb) = (S::load_tail(pa.add(i), k), S::load_tail(pb.add(i), k));
                S::store_tail(pa.add(i), f(va, vb), k);
                i += k;
            }
            return;
        }
        while i + S::LANES <= n {
            S::store(pa.add(i), f(S::load(pa.add(i)), S::load(pb.add(i))));
            i += S::LANES;
        }
        if i < n {
            let (mut va, mut vb) = (S::zero(), S::zero());
            let (ba, bb) = (lanes_of::<S>(&mut va), lanes_of::<S>(&mut vb));
            ba[..n - i].copy_from_slice(&a[i..n]);
            bb[..n - i].copy_from_slice(&b[i..n]);
            S::store(
                ba.as_mut_ptr(),
                f(S::load(ba.as_ptr()), S::load(bb.as_ptr())),
            );
            a[i..n].copy_from_slice(&ba[..n - i]);
        }
    }
}

/// Unary op in place.
///
/// # Safety
/// The CPU supports `S`.
#[inline(always)]
pub(super) unsafe fn unary<S: Act>(op: EltOp, x: &mut [f32]) {
    // SAFETY (all arms): forwarded contract.
    unsafe {
        match op {
            EltOp::Silu => map_inplace::<S>(x, |v| S::silu(v)),
            EltOp::GeluTanh => map_inplace::<S>(x, |v| S::gelu_tanh(v)),
            EltOp::GeluErf => map_inplace::<S>(x, |v| S::gelu_erf(v)),
            EltOp::QuickGelu => map_inplace::<S>(x, |v| S::quick_gelu(v)),
            EltOp::Relu => map_inplace::<S>(x, |v| S::relu(v)),
            EltOp::Relu2 => map_inplace::<S>(x, |v| S::relu2(v)),
            EltOp::Sigmoid => map_inplace::<S>(x, |v| S::sigmoid(v)),
        }
    }
}

/// `x *= c`.
///
/// # Safety
/// The CPU supports `S`.
#[inline(always)]
pub(super) unsafe fn mul_const<S: Simd>(x: &mut [f32], c: f32) {
    // SAFETY: forwarded contract.
    unsafe {
        let c = S::splat(c);
        map_inplace::<S>(x, |v| S::mul(v, c));
    }
}

/// `a += b`.
///
/// # Safety
/// The CPU supports `S`; `b.len() == a.len()`.
#[inline(always)]
pub(super) unsafe fn add_from<S: Simd>(a: &mut [f32], b: &[f32]) {
    // SAFETY: forwarded contract.
    unsafe { zip_inplace::<S>(a, b, |va, vb| S::add(va, vb)) }
}

/// `gate = silu(gate) · up`.
///
/// # Safety
/// The CPU supports `S`; `up.len() == gate.len()`.
#[inline(always)]
pub(super) unsafe fn swiglu<S: Act>(gate: &mut [f32], up: &[f32]) {
    // SAFETY: forwarded contract.
    unsafe { zip_inplace::<S>(gate, up, |g, u| S::mul(S::silu(g), u)) }
}

/// Stamps out one ISA's entry points (`unary`, `mul_const`, `add_from`,
/// `swiglu`) over the loops above: `isa` is the [`Act`] marker, `feature`
/// its `target_feature` list, `needs` the same in words for the safety docs.
macro_rules! elt_kernels {
    (isa: $isa:ty, feature: $feature:literal, needs: $needs:literal $(,)?) => {
        /// Unary op in place.
        ///
        /// # Safety
        #[doc = concat!("The CPU must support ", $needs, ".")]
        #[target_feature(enable = $feature)]
        pub unsafe fn unary(op: super::EltOp, x: &mut [f32]) {
            // SAFETY: forwarded contract.
            unsafe { super::body::unary::<$isa>(op, x) }
        }

        /// `x *= c`.
        ///
        /// # Safety
        #[doc = concat!("The CPU must support ", $needs, ".")]
        #[target_feature(enable = $feature)]
        pub unsafe fn mul_const(x: &mut [f32], c: f32) {
            // SAFETY: forwarded contract.
            unsafe { super::body::mul_const::<$isa>(x, c) }
        }

        /// `a += b`.
        ///
        /// # Safety
        #[doc = concat!("The CPU must support ", $needs, "; `b.len() == a.len()`.")]
        #[target_feature(enable = $feature)]
        pub unsafe fn add_from(a: &mut [f32], b: &[f32]) {
            // SAFETY: forwarded contract.
            unsafe { super::body::add_from::<$isa>(a, b) }
        }

        /// `gate = silu(gate) · up`.
        ///
        /// # Safety
        #[doc = concat!("The CPU must support ", $needs, "; `up.len() == gate.len()`.")]
        #[target_feature(enable = $feature)]
        pub unsafe fn swiglu(gate: &mut [f32], up: &[f32]) {
            // SAFETY: forwarded contract.
            unsafe { super::body::swiglu::<$isa>(gate, up) }
        }
    };
}
pub(super) use elt_kernels;
