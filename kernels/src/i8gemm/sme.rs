//! SME int8 GEMM tiles: `smopa` (4-way int8 → int32 outer products) into
//! the four 32-bit ZA tiles, one `2v × 2v`, `v × 4v` or `4v × v` block of
//! accumulators per call at `v = SVL / 32` (see [`crate::sme`] for why the
//! kernels are shaped so).
//!
//! `smopa za.s, za_vec.b, zb_vec.b` adds to accumulator `(i, j)` the dot
//! product of the 4 bytes of 32-bit lane `i` of the first vector with those
//! of lane `j` of the second. So both operands are packed in groups of 4
//! along k, one 32-bit lane per row: step `g` of an activation panel holds,
//! for each of its `mr` rows, bytes `4g..4g+4` of that row, zero past k and
//! past the last row; a weight panel alike for its `nr` rows. A step is
//! `mr / v + nr / v` whole-vector loads and 4 `smopa`s, with no edge logic.
//! The sums are exact i32 (k ≤ [`super::MAX_K`]) and ZA starts at zero; the
//! tile stores its valid part to a buffer and the family's shared f32
//! epilogue writes the output, so every result equals the scalar
//! reference's bit for bit.
//!
//! Loop order: the activations are packed once per call into row panels
//! that every worker reads; each worker walks its weight rows `nr` at a
//! time, packs that panel (`nr · k` bytes) and sweeps every activation
//! panel past it, the order of the NEON tiles. The packing is plain Rust
//! outside streaming mode.

use super::{I8GemmParams, QActivations, QWeights};
use crate::pool::{pool, split_range};
use std::cell::RefCell;
use std::ops::Range;

crate::sme::mopa_kernels! {
    load: "ld1b", ty: "b", mopa: "smopa", a: i32, c: i32, c_in: false,
    names: [k2x2, k1x4, k4x1],
}

/// A tile: `acc[r·ldc + c] = Σ_g A_g[r] · W_g[c]` (4-byte dot products)
/// over `steps` packed steps, for `r < m_eff`, `c < n_eff`.
type TileFn = unsafe fn(usize, *const i32, *const i32, *mut i32, usize, usize, usize);

/// The tile `(mr, nr)` at this CPU's streaming vector length.
fn tile(mr: usize, nr: usize) -> Option<TileFn> {
    crate::sme::kernel_for::<TileFn>([k2x2, k1x4, k4x1], mr, nr)
}

thread_local! {
    /// Per-thread weight panel and accumulator buffer; grows to the largest
    /// tile seen and is reused by every later call on this thread.
    static WORKSPACE: RefCell<Vec<i32>> = const { RefCell::new(Vec::new()) };
}

/// Packs `rows` of `q` (each `k` bytes) into one panel `width` lanes wide:
/// lane `r` of step `g` is bytes `4g..4g+4` of row `r`, zero-padded past k
/// and past the rows. `dst` holds `k.div_ceil(4) · width` lanes.
fn pack(q: &[i8], k: usize, rows: Range<usize>, width: usize, dst: &mut [i32]) {
    let steps = k.div_ceil(4);
    debug_assert!(rows.len() <= width && dst.len() == steps * width);
    let used = rows.len();
    for (r, i) in rows.enumerate() {
        let (whole, tail) = q[i * k..(i + 1) * k].as_chunks::<4>();
        for (g, b) in whole.iter().enumerate() {
            dst[g * width + r] = i32::from_ne_bytes(b.map(|x| x as u8));
        }
        if !tail.is_empty() {
            let mut b = [0u8; 4];
            for (d, &s) in b.iter_mut().zip(tail) {
                *d = s as u8;
            }
            dst[whole.len() * width + r] = i32::from_ne_bytes(b);
        }
    }
    for step in dst.chunks_exact_mut(width) {
        step[used..].fill(0);
    }
}

/// Runs the SME tiles of `p` over the whole product, `threads` workers
/// splitting the weight rows, and hands each accumulator to `store(i, j,
/// acc)` exactly once.
///
/// # Safety
/// The CPU has SME, and `(p.mr, p.nr)` is one of its tile shapes; the
/// operands were checked against each other.
pub(super) unsafe fn drive(
    a: &QActivations,
    w: &QWeights,
    p: I8GemmParams,
    threads: usize,
    store: &(dyn Fn(usize, usize, i32) + Sync),
) {
    let (m, n, k) = (a.m, w.n, w.k);
    let (mr, nr) = (p.mr, p.nr);
    let tile = tile(mr, nr).expect("checked against this CPU's tile shapes");
    let steps = k.div_ceil(4);
    let panel = steps * mr;
    // Panel `i / mr` (a `panel` of 0 lanes when k = 0) holds rows i..i+mr.
    let mut packed_a = vec![0i32; m.div_ceil(mr) * panel];
    for i in (0..m).step_by(mr) {
        let dst = &mut packed_a[i / mr * panel..][..panel];
        pack(&a.q, k, i..(i + mr).min(m), mr, dst);
    }
    let packed_a = &packed_a;
    let work = |cols: Range<usize>| {
        WORKSPACE.with(|cell| {
            // Taken out of the cell so no borrow is held while tiles run.
            let mut ws = cell.take();
            if ws.len() < steps * nr + mr * nr {
                ws.resize(steps * nr + mr * nr, 0);
            }
            let (wp, acc) = ws.split_at_mut(steps * nr);
            for j in cols.clone().step_by(nr) {
                let ne = nr.min(cols.end - j);
                pack(&w.q, k, j..j + ne, nr, wp);
                for i in (0..m).step_by(mr) {
                    let ap = &packed_a[i / mr * panel..][..panel];
                    let me = mr.min(m - i);
                    // SAFETY: SME per the caller; both panels hold `steps`
                    // whole steps of mr and nr lanes; acc holds mr × nr.
                    unsafe {
                        tile(
                            steps,
                            ap.as_ptr(),
                            wp.as_ptr(),
                            acc.as_mut_ptr(),
                            nr,
                            me,
                            ne,
                        )
                    };
                    for r in 0..me {
                        for c in 0..ne {
                            store(i + r, j + c, acc[r * nr + c]);
                        }
                    }
                }
            }
            cell.replace(ws);
        })
    };
    if threads <= 1 || n <= nr {
        work(0..n);
        return;
    }
    let ranges = split_range(n, threads, nr);
    pool(threads).scope(|s| {
        for r in ranges {
            let work = &work;
            s.spawn(move |_| work(r));
        }
    });
}
