//! f32 GEMM throughput (reported as FLOP/s, 2·m·n·k per call) on LLM shapes
//! and 1024³, at 1 and 2 threads, side by side with the `gemm` crate on the
//! same inputs. Also W16A32 on the LLM shapes, and the fused Matmul+RoPE
//! next to the plain GEMM of the same shape (the epilogue's cost).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group};
use half::f16;
use std::hint::black_box;
use tiletune_kernels::CpuCaps;
use tiletune_kernels::gemm::{GemmConfig, GemmShape, gemm_f16w_f32, gemm_f32};
use tiletune_kernels::matmul_rope::{Positions, RopeLayout, RopeSpec, matmul_rope_f32};
use tiletune_kernels::testing::Rng;

/// Cache sizes of cpu0 from sysfs (the kernel crate reads no files; the
/// bench may), falling back to the crate's default.
fn cpu_caps() -> CpuCaps {
    let mut caps = CpuCaps::default();
    let read = |p: String| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    for idx in 0..5 {
        let base = format!("/sys/devices/system/cpu/cpu0/cache/index{idx}");
        let (Some(level), Some(kind), Some(size)) = (
            read(format!("{base}/level")),
            read(format!("{base}/type")),
            read(format!("{base}/size")),
        ) else {
            continue;
        };
        let bytes = match size.strip_suffix('K') {
            Some(kb) => kb.parse::<usize>().unwrap_or(0) << 10,
            None => {
                size.strip_suffix('M')
                    .and_then(|m| m.parse::<usize>().ok())
                    .unwrap_or(0)
                    << 20
            }
        };
        match (level.as_str(), kind.as_str()) {
            ("1", "Data") => caps.l1d = bytes,
            ("2", _) => caps.l2 = bytes,
            ("3", _) => caps.l3 = bytes,
            _ => {}
        }
    }
    caps.cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    caps
}

/// The `gemm` crate on the same problem: C = A · Wᵀ with W read through
/// strides (rhs[p, j] = W[j·k + p]).
fn gemm_crate(a: &[f32], w: &[f32], c: &mut [f32], s: GemmShape, threads: usize) {
    let par = if threads == 1 {
        gemm::Parallelism::None
    } else {
        gemm::Parallelism::Rayon(threads)
    };
    let (m, n, k) = (s.m, s.n, s.k);
    // SAFETY: the three buffers have the m·k, n·k and m·n elements the
    // strides address.
    tiletune_kernels::pool::pool(threads).install(|| unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            1,
            k as isize,
            w.as_ptr(),
            k as isize,
            1,
            0.0,
            1.0,
            false,
            false,
            false,
            par,
        )
    });
}

fn bench_gemm(cr: &mut Criterion) {
    let caps = cpu_caps();
    // The LLM shapes: m = 1 (a GEMM with one row; the runtime uses
    // GEMV there, measured in gemv.rs) up to 512, and Qwen2.5-0.5B, Llama-7B
    // layer shapes.
    let mut shapes = vec![GemmShape::new(1024, 1024, 1024)];
    for m in [1, 16, 128, 512] {
        for (n, k) in [
            (896, 896),
            (4864, 896),
            (896, 4864),
            (4096, 4096),
            (11008, 4096),
        ] {
            shapes.push(GemmShape::new(m, n, k));
        }
    }
    let mut g = cr.benchmark_group("gemm_f32");
    g.sample_size(10);
    for s in &shapes {
        let mut rng = Rng::new(1);
        let a = rng.vec_f32(s.m * s.k);
        let w = rng.vec_f32(s.n * s.k);
        let mut c = vec![0.0f32; s.m * s.n];
        g.throughput(Throughput::Elements((2 * s.m * s.n * s.k) as u64));
        for threads in [1, 2] {
            let id = format!("{}x{}x{}/t{threads}", s.m, s.n, s.k);
            let cfg = GemmConfig::new(s, &caps, threads);
            g.bench_function(BenchmarkId::new("tiletune", &id), |b| {
                b.iter(|| gemm_f32(black_box(&a), &w, None, &mut c, *s, false, &cfg).unwrap())
            });
            g.bench_function(BenchmarkId::new("gemm_crate", &id), |b| {
                b.iter(|| gemm_crate(black_box(&a), &w, &mut c, *s, threads))
            });
        }
    }
    g.finish();

    let mut g = cr.benchmark_group("gemm_f16w_f32");
    g.sample_size(10);
    for s in &shapes[1..] {
        let mut rng = Rng::new(2);
        let a = rng.vec_f32(s.m * s.k);
        let w: Vec<f16> = rng
            .vec_f32(s.n * s.k)
            .into_iter()
            .map(f16::from_f32)
            .collect();
        let mut c = vec![0.0f32; s.m * s.n];
        g.throughput(Throughput::Elements((2 * s.m * s.n * s.k) as u64));
        let cfg = GemmConfig::new(s, &caps, 1);
        let id = format!("{}x{}x{}/t1", s.m, s.n, s.k);
        g.bench_function(BenchmarkId::new("tiletune", &id), |b| {
            b.iter(|| gemm_f16w_f32(black_box(&a), &w, None, &mut c, *s, false, &cfg).unwrap())
        });
    }
    g.finish();
}

/// Qwen2.5-0.5B-like q projection (14 heads × 64, k = 896) with RoPE fused,
/// against the bare GEMM.
fn bench_matmul_rope(cr: &mut Criterion) {
    let caps = cpu_caps();
    let rope = RopeSpec {
        head_dim: 64,
        rotary_dim: 64,
        theta: 1_000_000.0,
        layout: RopeLayout::RotateHalf,
    };
    let mut g = cr.benchmark_group("matmul_rope_f32");
    g.sample_size(10);
    for m in [16, 128] {
        let s = GemmShape::new(m, 14 * 64, 896);
        let mut rng = Rng::new(3);
        let x = rng.vec_f32(s.m * s.k);
        let w = rng.vec_f32(s.n * s.k);
        let mut out = vec![0.0f32; s.m * s.n];
        let cfg = GemmConfig::new(&s, &caps, 1);
        g.throughput(Throughput::Elements((2 * s.m * s.n * s.k) as u64));
        let id = format!("{}x{}x{}/t1", s.m, s.n, s.k);
        g.bench_function(BenchmarkId::new("fused", &id), |b| {
            b.iter(|| {
                let pos = Positions::Offset(100);
                matmul_rope_f32(black_box(&x), &w, None, &mut out, s, &rope, pos, &cfg).unwrap()
            })
        });
        g.bench_function(BenchmarkId::new("gemm_only", &id), |b| {
            b.iter(|| gemm_f32(black_box(&x), &w, None, &mut out, s, false, &cfg).unwrap())
        });
    }
    g.finish();
}

criterion_group!(benches, bench_gemm, bench_matmul_rope);
