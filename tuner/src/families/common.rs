//! What every family's problems share: candidate keys, the cold-cache
//! weight copies, the error measures, f32/f16 weight elements and the
//! thread counts searched.

use super::spec::Machine;
use crate::TunerError;
use half::f16;
use std::sync::{Arc, Mutex, Weak};
use tiletune_kernels::Isa;
use tiletune_kernels::choice::KernelChoice;
use tiletune_kernels::gemv::GemvShape;
use tiletune_kernels::quant::{self, QuantFormat};
use tiletune_kernels::testing::Rng;
use tiletune_tables::{Candidate, Problem};

/// Dim `name` of a tuned problem, or the shape error that names it.
pub(super) fn tune_dim(spec: &Problem, name: &str) -> Result<usize, TunerError> {
    spec.dim(name).ok_or_else(|| TunerError::BadShape {
        op: spec.op().to_string(),
        shape: spec.to_string(),
        expected: name.to_string(),
    })
}

/// The largest `|got − want| / Σ|w·x|` over rows after a 1e-6 absolute
/// allowance (the bound the quantized kernels' own tests use); a NaN output
/// is an infinite error.
pub(super) fn row_scaled_err(got: &[f32], want: &[f64], magnitude: &[f64]) -> f32 {
    let mut worst = 0.0f64;
    for ((&g, &w), &mag) in got.iter().zip(want).zip(magnitude) {
        let d = (g as f64 - w).abs();
        if d.is_nan() {
            return f32::INFINITY;
        }
        worst = worst.max((d - 1e-6).max(0.0) / mag.max(f64::MIN_POSITIVE));
    }
    worst as f32
}

/// The Linux thread ids of the pool a `threads`-thread kernel runs on
/// (`tiletune_kernels::pool::pool`), for counting and pinning its workers;
/// empty for one thread, which runs inline on the caller. The pool is
/// created here if it does not exist yet, as the kernel's first call would.
pub fn worker_tids(threads: usize) -> Vec<i32> {
    if threads <= 1 {
        return Vec::new();
    }
    tiletune_kernels::pool::pool(threads).broadcast(|_| tiletune_pmu::counters::current_tid())
}

/// The variants a family's tuned problem searches, among those it
/// `implemented`: the one that runs untuned (the best this CPU has), then
/// every other the CPU runs that never runs untuned
/// ([`Isa::runs_untuned`]: SME), which only a tuning can choose.
pub(super) fn tuned_isas(implemented: &[Isa]) -> Vec<Isa> {
    let best = Isa::best_of(implemented);
    let tuned_only = implemented
        .iter()
        .copied()
        .filter(|i| !i.runs_untuned() && i.is_available());
    std::iter::once(best).chain(tuned_only).collect()
}

/// Thread counts to search: 1..=max.
pub(super) fn thread_counts(max: usize) -> Vec<usize> {
    (1..=max.max(1)).collect()
}

/// A weight element the f32-activation kernels take.
pub trait WeightElem: Copy + Send + Sync + 'static {
    fn from_f32(x: f32) -> Self;
    fn to_f32(self) -> f32;
}
impl WeightElem for f32 {
    fn from_f32(x: f32) -> Self {
        x
    }
    fn to_f32(self) -> f32 {
        self
    }
}
impl WeightElem for f16 {
    fn from_f32(x: f32) -> Self {
        f16::from_f32(x)
    }
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
}

/// Plain f64-accumulated reference, independent of the kernels under test.
pub(super) fn reference_gemv<W: WeightElem>(w: &[W], x: &[f32], s: GemvShape) -> Vec<f32> {
    (0..s.n)
        .map(|r| {
            w[r * s.k..(r + 1) * s.k]
                .iter()
                .zip(x)
                .map(|(&a, &b)| a.to_f32() as f64 * b as f64)
                .sum::<f64>() as f32
        })
        .collect()
}

/// Enough copies of a `bytes`-sized buffer to read through `rotate` bytes
/// ([`Machine::cold_bytes`]) before one comes round again. [`Copies`]
/// makes them only while the problem is timed.
pub(super) fn cold_copies(bytes: usize, rotate: usize) -> usize {
    rotate.div_ceil(bytes.max(1)).max(1)
}

/// How many copies of a `bytes`-sized input to rotate through: enough to
/// read as cold as [`Machine::cold_bytes`] says when `cold`, else one.
pub(super) fn copies(bytes: usize, m: &Machine, cold: bool) -> usize {
    if cold {
        cold_copies(bytes, m.cold_bytes())
    } else {
        1
    }
}

/// A copy of a buffer in memory of its own, as a cold-cache rotation needs:
/// a shared weight ([`Arc`]) is copied, not shared once more.
pub(super) trait Replica {
    fn replica(&self) -> Self;
}

impl<E: Clone> Replica for Vec<E> {
    fn replica(&self) -> Self {
        self.clone()
    }
}

impl<T: Replica> Replica for Arc<T> {
    fn replica(&self) -> Self {
        Arc::new(T::replica(self))
    }
}

impl<A: Replica, B: Replica> Replica for (A, B) {
    fn replica(&self) -> Self {
        (self.0.replica(), self.1.replica())
    }
}

/// The weight copies a cold-cache timing rotates through: made on first use
/// (a validation, before anything is timed) and dropped again by
/// [`Copies::release`] when the campaign is done with the problem, so a
/// campaign holds one problem's copies at a time, not every problem's.
pub(super) struct Copies<T: Replica> {
    copies: Vec<T>,
    want: usize,
    next: usize,
}

impl<T: Replica> Copies<T> {
    /// `want` copies of `first` (1: a single, cache-warm copy).
    pub(super) fn new(first: T, want: usize) -> Self {
        Copies {
            copies: vec![first],
            want: want.max(1),
            next: 0,
        }
    }

    /// The first copy, for validation, which runs before any timing:
    /// the missing copies are made here, so no timed run pays for them.
    pub(super) fn first(&mut self) -> &T {
        self.fill();
        &self.copies[0]
    }

    /// The first copy, without making any.
    pub(super) fn peek(&self) -> &T {
        &self.copies[0]
    }

    /// The copy the next timed run reads, in rotation.
    pub(super) fn next(&mut self) -> &T {
        self.fill();
        self.next = (self.next + 1) % self.copies.len();
        &self.copies[self.next]
    }

    /// Makes the missing copies.
    fn fill(&mut self) {
        while self.copies.len() < self.want {
            self.copies.push(self.copies[0].replica());
        }
    }

    /// Drops every copy but the first; the next use makes them again.
    pub(super) fn release(&mut self) {
        self.copies.truncate(1);
        self.copies.shrink_to_fit();
        self.next = 0;
    }

    /// How many copies are held now.
    #[cfg(test)]
    pub(super) fn held(&self) -> usize {
        self.copies.len()
    }
}

/// The candidate of a pinned configuration: the ISA's name, the params
/// struct as JSON, the thread count.
pub(super) fn candidate<P: serde::Serialize>(
    isa: Option<Isa>,
    params: &P,
    threads: usize,
) -> Candidate {
    let params = serde_json::to_value(params).expect("params structs serialize to JSON objects");
    Candidate::new(isa.unwrap_or(Isa::Scalar).name(), params, threads)
        .expect("ISA names (with a .a32/.a8 mode) and thread counts >= 1 are valid candidate keys")
}

/// The candidate naming a kernel choice: its stored text
/// ([`KernelChoice::variant`] and [`KernelChoice::params_json`]).
pub(super) fn candidate_of(c: &KernelChoice) -> Candidate {
    Candidate::new(c.variant(), c.params_json(), c.threads())
        .expect("kernel choices name valid candidate keys")
}

/// Rows of the random weights made from one random stream, seeded by the
/// problem's seed and the piece: the weights are the same whatever the
/// number of threads making them.
const PIECE_ROWS: usize = 512;

/// What a problem's random weights are made from ([`random_weights`] less
/// the threads, which do not change them).
type WeightKey = (QuantFormat, usize, usize, u64);

/// One weight's random bytes, made by the first problem that uses them.
type WeightSlot = Mutex<Option<Arc<Vec<u8>>>>;

/// A problem's share of the random weights it reads: every problem built
/// for the same format, shape and seed holds the same slot, and the bytes
/// in it live while any of them exists.
///
/// A model's weight is read by its decode GEMV and by each prefill
/// bucket's GEMM, tuned apart in a campaign, and quantizing random weights
/// of a real model's size takes seconds (a 151936×1536 Q6_K LM head, read
/// by four problems). The weights are a pure function of the key, so
/// sharing them changes no operand; what each problem makes from them
/// (repacks, references, cold copies) is still made and dropped per
/// problem.
pub(super) struct SharedWeights {
    key: WeightKey,
    slot: Arc<WeightSlot>,
}

impl SharedWeights {
    pub(super) fn new(format: QuantFormat, n: usize, k: usize, seed: u64) -> Self {
        static SLOTS: Mutex<Vec<(WeightKey, Weak<WeightSlot>)>> = Mutex::new(Vec::new());
        let key = (format, n, k, seed);
        // A poisoned lock only means another thread panicked while pruning:
        // the entries are still weak references to live or dead slots.
        let mut slots = SLOTS.lock().unwrap_or_else(|e| e.into_inner());
        slots.retain(|(_, w)| w.strong_count() > 0);
        let slot = match slots
            .iter()
            .find_map(|(k, w)| (*k == key).then(|| w.upgrade()))
        {
            Some(Some(slot)) => slot,
            _ => {
                let slot = Arc::new(Mutex::new(None));
                slots.push((key, Arc::downgrade(&slot)));
                slot
            }
        };
        SharedWeights { key, slot }
    }

    /// The weights, made on `threads` threads by the first call of any
    /// problem holding this slot.
    pub(super) fn get(&self, threads: usize) -> Result<Arc<Vec<u8>>, TunerError> {
        let mut w = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = &*w {
            return Ok(Arc::clone(w));
        }
        let (format, n, k, seed) = self.key;
        let made = Arc::new(random_weights(format, n, k, seed, threads)?);
        *w = Some(Arc::clone(&made));
        Ok(made)
    }
}

/// `n` rows of `k` random values in `format`, quantized a piece at a time
/// on `threads` threads: an LM head's weights as f32 would be a gigabyte,
/// and quantizing them (Q6_K's search) is most of a `bench gemm` of one.
pub(super) fn random_weights(
    format: QuantFormat,
    n: usize,
    k: usize,
    seed: u64,
    threads: usize,
) -> Result<Vec<u8>, TunerError> {
    let rb = format.row_bytes(k);
    let mut w = vec![0u8; n * rb];
    if rb == 0 {
        return Ok(w);
    }
    let mut pieces: Vec<(usize, &mut [u8])> = w.chunks_mut(PIECE_ROWS * rb).enumerate().collect();
    let per = pieces.len().div_ceil(threads.max(1)).max(1);
    std::thread::scope(|s| {
        let workers: Vec<_> = pieces
            .chunks_mut(per)
            .map(|mine| {
                s.spawn(move || -> Result<(), TunerError> {
                    for (i, piece) in mine.iter_mut() {
                        let mut rng =
                            Rng::new(seed ^ (*i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
                        for row in piece.chunks_exact_mut(rb) {
                            row.copy_from_slice(&quant::quantize(format, &rng.vec_f32(k))?);
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        workers
            .into_iter()
            .try_for_each(|h| h.join().expect("a weight piece's thread panicked"))
    })?;
    Ok(w)
}

/// `f` on `0..n` cut into at most `threads` contiguous ranges, each on a
/// thread of its own, the results in the ranges' order: a problem's scalar
/// references, one checked row at a time, take seconds on one thread at a
/// prefill shape (the scalar GEMM at depth 8960), and its rows do not depend
/// on each other.
pub(super) fn on_threads<T: Send>(
    n: usize,
    threads: usize,
    f: impl Fn(std::ops::Range<usize>) -> Result<T, TunerError> + Sync,
) -> Result<Vec<T>, TunerError> {
    let per = n.div_ceil(threads.max(1)).max(1);
    let f = &f;
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..n)
            .step_by(per)
            .map(|i| s.spawn(move || f(i..(i + per).min(n))))
            .collect();
        workers
            .into_iter()
            .map(|h| h.join().expect("a reference's thread panicked"))
            .collect()
    })
}

/// Calls `f` with each of the `n` rows of `k` values of `w` (in `format`)
/// dequantized, one at a time: an LM head's rows all at once as f32 would
/// be a gigabyte.
pub(super) fn for_each_dequantized_row(
    format: QuantFormat,
    w: &[u8],
    (n, k): (usize, usize),
    mut f: impl FnMut(&[f32]),
) -> Result<(), TunerError> {
    let rb = format.row_bytes(k);
    let mut row = vec![0.0f32; k];
    for r in 0..n {
        quant::dequantize(format, &w[r * rb..(r + 1) * rb], &mut row)?;
        f(&row);
    }
    Ok(())
}

/// The indices of `0..len` a candidate's output is checked on: all of a
/// short dimension; of a long one the first and last `edge` (the first
/// tiles, and the tail tiles a length that is no multiple of the tile
/// leaves at the end) and `edge` between them at random. Tiles of one
/// size run the same code, so the sample sees every kind of tile; and a
/// tile not written at all is caught anywhere, as C is filled with NaN
/// before each check and every output must be finite. The scalar
/// references cost `k` per checked output: for every output, a model's
/// largest prefill problem (the LM head at m = 256, 151936 × 1536) would
/// take minutes and a gigabyte, beyond any budget.
pub(super) fn checked(len: usize, edge: usize, rng: &mut Rng) -> Vec<usize> {
    if len <= 3 * edge {
        return (0..len).collect();
    }
    let mut at: Vec<usize> = (0..edge).chain(len - edge..len).collect();
    while at.len() < 3 * edge {
        let i = edge + rng.below(len - 2 * edge);
        if !at.contains(&i) {
            at.push(i);
        }
    }
    at.sort_unstable();
    at
}

/// Rows of C checked at each end of a long GEMM: a whole tile of the
/// tallest register tile here (SME's f32 tile at a 512-bit streaming
/// vector, 64 rows; the quantized GEMM's 8).
pub(super) const ROW_EDGE: usize = 64;
/// Columns of C checked at each end of a wide GEMM: two of the widest
/// tiles (SME's 64 columns; the quantized GEMM's groups of 16).
pub(super) const COL_EDGE: usize = 128;

/// The checked outputs of `c` (rows of `n`) into `out`, row by row; `None`
/// when any output of `c` is not finite (a tile left unwritten).
pub(super) fn picked(
    rows: &[usize],
    cols: &[usize],
    c: &[f32],
    n: usize,
    out: &mut Vec<f32>,
) -> Option<()> {
    if !c.iter().all(|v| v.is_finite()) {
        return None;
    }
    out.clear();
    out.extend(
        rows.iter()
            .flat_map(|&r| cols.iter().map(move |&j| c[r * n + j])),
    );
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small tensor rotates through twice the LLC of every core like a
    /// large one (no copy cap), or through the model's decode bytes where
    /// those are less; and the copies exist only between the first use
    /// and `release`.
    #[test]
    fn cold_copies_exceed_the_cache_and_live_only_while_timed() {
        let mut m = Machine::small_for_tests(7);
        let caches = 2 * m.caps.l3 * m.caps.cores;
        // A model smaller than the caches (1.5 MB against 4 MiB), larger
        // than them, and none.
        for (streamed, want) in [
            (Some(1_500_000), 1_500_000),
            (Some(1 << 30), caches),
            (None, caches),
        ] {
            m.streamed = streamed;
            assert_eq!(m.cold_bytes(), want, "{streamed:?}");
            for bytes in [100, 69 << 10, 3 << 20] {
                let n = copies(bytes, &m, true);
                assert!(n * bytes >= want, "{bytes} B x {n}");
                assert!(
                    (n - 1) * bytes < want.max(bytes),
                    "{bytes} B x {n}: one too many"
                );
                assert_eq!(copies(bytes, &m, false), 1);
            }
        }
        let mut c = Copies::new(vec![7u8; 100], 5);
        assert_eq!(c.held(), 1);
        assert_eq!(c.peek().len(), 100);
        assert_eq!(c.held(), 1, "peek makes no copy");
        assert_eq!(c.first()[0], 7);
        assert_eq!(c.held(), 5);
        // The timed runs visit every copy in turn.
        let seen: Vec<*const u8> = (0..5).map(|_| c.next().as_ptr()).collect();
        let mut distinct = seen.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), 5);
        c.release();
        assert_eq!(c.held(), 1);
        c.next();
        assert_eq!(c.held(), 5, "used again after release: made again");
    }

    /// A shared weight's cold copies are copies of its bytes, each in its
    /// own memory, not the shared buffer again.
    #[test]
    fn copies_of_a_shared_weight_are_its_bytes_elsewhere() {
        let w = Arc::new(vec![3u8; 64]);
        let mut c = Copies::new((Arc::clone(&w), vec![1u16; 8]), 3);
        let seen: Vec<*const u8> = (0..3).map(|_| c.next().0.as_ptr()).collect();
        assert!(seen.contains(&w.as_ptr()));
        let mut distinct = seen.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), 3);
        assert!((0..3).all(|_| *c.next().0 == *w));
        assert_eq!(Arc::strong_count(&w), 2, "only the first copy shares it");
    }

    /// Problems that read one weight share its bytes while one of them
    /// exists; once none does, they are made again, the same.
    #[test]
    fn random_weights_are_shared_by_the_problems_that_read_them() {
        // A key no other test makes: tests run in one process.
        let (f, n, k, seed) = (QuantFormat::Q5_1, 37, 96, 0x5EED_0001);
        let a = SharedWeights::new(f, n, k, seed);
        let b = SharedWeights::new(f, n, k, seed);
        let wa = a.get(2).unwrap();
        assert!(Arc::ptr_eq(&wa, &b.get(1).unwrap()));
        assert_eq!(*wa, random_weights(f, n, k, seed, 1).unwrap());
        // Released by the problem that made them, held for the other.
        let bytes = wa.to_vec();
        let held = Arc::downgrade(&wa);
        drop((a, wa));
        assert!(held.upgrade().is_some());
        let other = SharedWeights::new(f, n, k, seed + 1).get(2).unwrap();
        assert_ne!(*other, bytes);
        drop(b);
        assert!(held.upgrade().is_none(), "no problem holds them");
        let again = SharedWeights::new(f, n, k, seed).get(2).unwrap();
        assert_eq!(*again, bytes);
    }

    #[test]
    fn random_weights_do_not_depend_on_the_threads_making_them() {
        let (n, k) = (2 * PIECE_ROWS + 3, 64);
        let one = random_weights(QuantFormat::Q4_0, n, k, 7, 1).unwrap();
        assert_eq!(one.len(), n * QuantFormat::Q4_0.row_bytes(k));
        for threads in [2, 3, 8] {
            assert_eq!(
                random_weights(QuantFormat::Q4_0, n, k, 7, threads).unwrap(),
                one
            );
        }
        // Pieces and seeds give rows of their own.
        let rb = QuantFormat::Q4_0.row_bytes(k);
        assert_ne!(one[..rb], one[PIECE_ROWS * rb..(PIECE_ROWS + 1) * rb]);
        assert_ne!(random_weights(QuantFormat::Q4_0, n, k, 8, 2).unwrap(), one);
        assert!(
            random_weights(QuantFormat::Q4_0, 5, 0, 7, 2)
                .unwrap()
                .is_empty()
        );
        assert!(random_weights(QuantFormat::Q4_0, 5, 33, 7, 2).is_err());
    }
}
