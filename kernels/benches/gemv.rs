//! Criterion benches of the GEMV family (`gemv_f32`, `gemv_f16_f32`) on the
//! LLM decode shapes of issue #3, reported as weight-streaming throughput
//! (bytes of `W` + `x` + `y` per second) so they compare directly with the
//! machine's measured memory bandwidth.
//!
//! Cold cache: each iteration reads a different copy of `W`, rotating through
//! at least `TILETUNE_BENCH_ROTATE_MB` MiB of copies (default 256, above the
//! LLC of the machines we bench), so the weights come from DRAM as they do
//! during decode. Every variant this CPU runs (scalar excepted: it is the
//! reference, not a contender) is timed at 1 and 2 threads with the analytic
//! default parameters for the host's caches (read from sysfs).
//!
//! Wiring: `bench_main.rs` includes this file as a module and calls
//! [`benches`].

use criterion::{BenchmarkId, Criterion, Throughput};
use half::f16;
use std::hint::black_box;
use std::time::Duration;
use tiletune_kernels::gemv::{GemvConfig, GemvParams, GemvShape, gemv_f16_f32, gemv_f32, variants};
use tiletune_kernels::{CpuCaps, Isa, Tunable};

/// (n, k) of the linear layers of Qwen2.5-0.5B (896, 4864) and Llama-7B
/// (4096, 11008).
const SHAPES: [(usize, usize); 5] = [
    (896, 896),
    (4864, 896),
    (896, 4864),
    (4096, 4096),
    (11008, 4096),
];
const THREADS: [usize; 2] = [1, 2];

/// Bytes of weight copies to rotate through (see the module docs).
fn rotate_bytes() -> usize {
    std::env::var("TILETUNE_BENCH_ROTATE_MB")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(256)
        << 20
}

/// Cache sizes of cpu0 from sysfs (Linux); the crate's conservative default
/// elsewhere or for anything missing.
fn host_caps() -> CpuCaps {
    let mut caps = CpuCaps::default();
    let base = "/sys/devices/system/cpu/cpu0/cache";
    for idx in 0..8 {
        let read = |f: &str| std::fs::read_to_string(format!("{base}/index{idx}/{f}")).ok();
        let (Some(level), Some(kind), Some(size)) = (read("level"), read("type"), read("size"))
        else {
            continue;
        };
        let size = size.trim();
        let bytes = match size.strip_suffix('K') {
            Some(kib) => kib.parse::<usize>().ok().map(|v| v << 10),
            None => match size.strip_suffix('M') {
                Some(mib) => mib.parse::<usize>().ok().map(|v| v << 20),
                None => size.parse().ok(),
            },
        };
        let Some(bytes) = bytes else { continue };
        match (level.trim(), kind.trim()) {
            ("1", "Data") => caps.l1d = bytes,
            ("2", _) => caps.l2 = bytes,
            ("3", _) => caps.l3 = bytes,
            _ => {}
        }
    }
    caps.cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    caps
}

/// Enough copies of a random `[n, k]` matrix to cover [`rotate_bytes`]
/// (at least two, so no iteration finds its weights in cache).
fn weight_copies<T: Copy>(n: usize, k: usize, conv: impl Fn(f32) -> T) -> Vec<Vec<T>> {
    let bytes = n * k * size_of::<T>();
    let copies = rotate_bytes().div_ceil(bytes.max(1)).max(2);
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    (0..copies)
        .map(|_| {
            (0..n * k)
                .map(|_| {
                    // xorshift: cheap, and the values do not matter for timing.
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    conv((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5)
                })
                .collect()
        })
        .collect()
}

/// The variants to time: every implemented one this CPU runs, scalar excepted.
fn contenders() -> Vec<Isa> {
    variants()
        .iter()
        .copied()
        .filter(|&i| i != Isa::Scalar && i.is_available())
        .collect()
}

/// Times one dtype over all shapes, variants and thread counts.
fn bench_dtype<T: Copy>(
    c: &mut Criterion,
    group_name: &str,
    conv: impl Fn(f32) -> T + Copy,
    run: impl Fn(&[T], &[f32], &mut [f32], GemvShape, &GemvConfig) + Copy,
) {
    let caps = host_caps();
    let mut group = c.benchmark_group(group_name);
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for (n, k) in SHAPES {
        let shape = GemvShape { n, k };
        let ws = weight_copies(n, k, conv);
        let x: Vec<f32> = (0..k).map(|j| (j % 17) as f32 / 17.0 - 0.5).collect();
        let mut y = vec![0f32; n];
        let bytes = n * k * size_of::<T>() + (k + n) * size_of::<f32>();
        group.throughput(Throughput::Bytes(bytes as u64));
        let params = GemvParams::default_for(&shape, &caps);
        for isa in contenders() {
            for threads in THREADS {
                let cfg = GemvConfig {
                    isa: Some(isa),
                    params,
                    threads,
                };
                let id = BenchmarkId::new(format!("{isa}/t{threads}"), format!("{n}x{k}"));
                group.bench_function(id, |b| {
                    let mut next = 0;
                    b.iter(|| {
                        let w = &ws[next];
                        next = (next + 1) % ws.len();
                        run(black_box(w), black_box(&x), &mut y, shape, &cfg);
                        black_box(&mut y);
                    })
                });
            }
        }
    }
    group.finish();
}

/// Every GEMV bench: f32 weights, then f16 weights with f32 activations.
pub fn benches(c: &mut Criterion) {
    bench_dtype(
        c,
        "gemv_f32",
        |v| v,
        |w: &[f32], x, y, shape, cfg| {
            gemv_f32(w, x, None, y, shape, false, cfg).expect("gemv_f32 bench call")
        },
    );
    bench_dtype(
        c,
        "gemv_f16_f32",
        f16::from_f32,
        |w: &[f16], x, y, shape, cfg| {
            gemv_f16_f32(w, x, None, y, shape, false, cfg).expect("gemv_f16_f32 bench call")
        },
    );
}
