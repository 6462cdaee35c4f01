//! What one parallel region costs on top of its work: `parallel_ranges`
//! of two parts on a kept-awake team (`install_awake`, as the model's
//! forward pass runs), the same on the bare rayon pool, and both parts run
//! one after the other on one thread. A part is 0 to a few microseconds of
//! arithmetic that touches no memory, so a region's time above one part's
//! is the dispatch.
//! Wired into `bench_main.rs` through [`benches`].

use criterion::{BenchmarkId, Criterion};
use std::hint::black_box;
use tiletune_kernels::pool::{install_awake, parallel_ranges};

/// Runs every bench of this module.
pub fn benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("pool/region");
    for steps in [0u64, 2_000, 8_000] {
        // `steps` multiply-adds per index: the one-thread run does both
        // parts' work, a two-thread region one part's on each thread.
        let part = |r: std::ops::Range<usize>| {
            for i in r {
                let mut x = i as u64;
                for _ in 0..steps {
                    x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
                black_box(x);
            }
        };
        g.bench_function(BenchmarkId::new("team", steps), |b| {
            install_awake(2, || b.iter(|| parallel_ranges(2, 2, 1, part)))
        });
        g.bench_function(BenchmarkId::new("rayon", steps), |b| {
            b.iter(|| parallel_ranges(2, 2, 1, part))
        });
        g.bench_function(BenchmarkId::new("inline", steps), |b| {
            b.iter(|| parallel_ranges(2, 1, 1, part))
        });
    }
    g.finish();
}
