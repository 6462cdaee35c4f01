//! Paged attention on a reused [`AttnScratch`] allocates nothing once warmed:
//! a counting global allocator sees zero allocations, on any thread, in the
//! calls after the first, for decode (one row) and prefill (many rows),
//! every KV dtype, every available variant on one thread and the best one
//! on two and three, with and
//! without the KV split and the probabilities. The fresh-buffer entry point
//! is checked to allocate, so the counter does see the kernel's buffers.
//!
//! One test function: the counter is process-wide, and a second test running
//! beside it would add its own allocations.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use tiletune_kernels::Isa;
use tiletune_kernels::attention::available_isas;
use tiletune_kernels::attention::{
    AttnParams, AttnQuery, AttnScratch, ISAS, KvDtype, PagedKvCache, SeqId,
    paged_attention_scratch, paged_attention_with,
};
use tiletune_kernels::pool::pool;
use tiletune_kernels::testing::Rng;

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::SeqCst);
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::SeqCst);
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::SeqCst);
        // SAFETY: as above.
        unsafe { System.realloc(p, l, n) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> usize {
    ALLOCS.load(Ordering::SeqCst)
}

/// Warmed calls measured per multi-threaded configuration: a buffer of
/// the kernel's own would allocate in each of them, 8 or more times, where
/// rayon's injector may allocate at most once.
const CALLS: usize = 8;
/// Jobs per block of rayon's (crossbeam's) injector queue: handing work to
/// a pool from outside it allocates one new block per this many jobs.
const INJECTOR_BLOCK: usize = 63;

/// Runs `run` once on a fresh scratch, then [`CALLS`] more times on it.
/// With one thread nothing may allocate. With more, the kernel enters the
/// pool `entries` times per call (one per parallel phase), and the only
/// allocations allowed are rayon's injector blocks, one per
/// [`INJECTOR_BLOCK`] entries; any buffer of the kernel's own would
/// allocate on every call.
fn assert_warm(what: &str, threads: usize, entries: usize, mut run: impl FnMut(&mut AttnScratch)) {
    let mut scratch = AttnScratch::new();
    run(&mut scratch);
    let before = allocs();
    run(&mut scratch);
    let second = allocs() - before;
    // One thread never enters a pool: a few calls show it.
    let calls = if threads == 1 { 4 } else { CALLS };
    for _ in 1..calls {
        run(&mut scratch);
    }
    let n = allocs() - before;
    if threads == 1 {
        assert_eq!(n, 0, "{what}: {n} allocations in {calls} warmed calls");
    } else {
        let bound = (CALLS * entries).div_ceil(INJECTOR_BLOCK);
        assert!(
            second <= 1,
            "{what}: {second} allocations in the second call"
        );
        assert!(
            n <= bound,
            "{what}: {n} allocations in {CALLS} warmed calls, at most {bound} expected"
        );
    }
}

/// On every lane, with and without a KV split and returned probabilities,
/// a warmed call of `query` allocates nothing.
#[allow(clippy::too_many_arguments)]
fn every_lane_warm(
    what: &str,
    lanes: &[(Isa, usize)],
    cache: &PagedKvCache,
    seq: SeqId,
    query: &AttnQuery,
    q: &[f32],
    out: &mut [f32],
    probs: &mut [f32],
) {
    for &(isa, threads) in lanes {
        for kv_block in [0, 16] {
            let p = AttnParams { threads, kv_block };
            for with_probs in [false, true] {
                let what = format!("{what} {isa} {p:?} probs {with_probs}");
                let entries = 1 + usize::from(kv_block > 0) + usize::from(with_probs);
                assert_warm(&what, threads, entries, |s| {
                    let pr = with_probs.then_some(&mut probs[..]);
                    paged_attention_scratch(cache, seq, 0, query, q, out, pr, isa, &p, s).unwrap();
                });
            }
        }
    }
}

#[test]
fn warmed_attention_allocates_nothing() {
    // Start every worker of the pools first: a pool is built once per
    // process, and its threads allocate while they start up, possibly
    // during a later call.
    for t in 1..=3 {
        pool(t).broadcast(|_| ());
    }
    // Every variant on one thread; the pool dispatch, which is the same
    // code for every variant, with the best one on two and three threads.
    let isas = available_isas();
    let best = Isa::best_of(&ISAS);
    let mut lanes: Vec<_> = isas.iter().map(|&i| (i, 1)).collect();
    lanes.extend([(best, 2), (best, 3)]);
    let mut rng = Rng::new(77);
    let (nkv, group, hd, ps) = (2usize, 2usize, 64usize, 16usize);
    let nq = nkv * group;
    // A prompt of 40 positions, then one decoded token.
    let (prompt, total) = (40usize, 41usize);
    let tok = nkv * hd;
    for dtype in KvDtype::ALL {
        let mut cache = PagedKvCache::new(1, nkv, hd, ps, dtype, total.div_ceil(ps)).unwrap();
        let seq = cache.alloc_sequence();
        let kv = rng.vec_f32(total * tok);
        let (kp, kd) = kv.split_at(prompt * tok);
        cache.append_batch(seq, 0, kp, kp).unwrap();
        let q = rng.vec_f32(prompt * nq * hd);
        let mut out = vec![0.0; q.len()];
        let mut probs = vec![0.0; nq * prompt * prompt];
        let query = AttnQuery::new(nq, prompt, 0, hd);
        let what = format!("prefill {dtype:?}");
        every_lane_warm(&what, &lanes, &cache, seq, &query, &q, &mut out, &mut probs);
        cache.append(seq, 0, kd, kd).unwrap();
        let q = rng.vec_f32(nq * hd);
        let mut out = vec![0.0; q.len()];
        let mut probs = vec![0.0; nq * total];
        let query = AttnQuery::new(nq, 1, prompt, hd);
        let what = format!("decode {dtype:?}");
        every_lane_warm(&what, &lanes, &cache, seq, &query, &q, &mut out, &mut probs);
        // The counter does see the buffers the fresh-scratch entry point makes.
        let before = allocs();
        let p = AttnParams {
            threads: 1,
            kv_block: 0,
        };
        let isa = available_isas()[0];
        paged_attention_with(&cache, seq, 0, &query, &q, &mut out, None, isa, &p).unwrap();
        assert!(
            allocs() > before,
            "{dtype:?}: fresh buffers were not counted"
        );
    }
}
