//! Quantized GEMM (W·A8, repacked weights) benches: prefill shapes of the
//! two real models (SmolLM2-135M: Q4_1 576×576, 1536×576, 576×1536;
//! Qwen2.5-0.5B: Q5_0/Q8_0 896×896, 4864×896, 896×4864, and its ffn_down
//! in Q4_K and Q6_K, 896×4864) at m = 1 (decode), 16,
//! 64 and 256 rows, 1 and 2 threads, best variant of the running CPU with its
//! default tile; the per-row GEMV (what prefill ran before) beside it.
//! Throughput is in activation rows (elements = m). Activations are
//! quantized inside the timed region, as the runtime does per call.
//! `qgemm_act` times that quantization alone; `qgemm_pack` the repack.

use criterion::{BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use tiletune_kernels::qgemm::{QGemm, act_bytes, quantize_activations_on};
use tiletune_kernels::qgemv::{QGemv, QMode, quantize_activations};
use tiletune_kernels::quant::{self, QuantFormat};
use tiletune_kernels::testing::Rng;

/// (format, n, k).
const SHAPES: [(QuantFormat, usize, usize); 8] = [
    (QuantFormat::Q4_1, 576, 576),
    (QuantFormat::Q4_1, 1536, 576),
    (QuantFormat::Q4_1, 576, 1536),
    (QuantFormat::Q5_0, 896, 896),
    (QuantFormat::Q8_0, 4864, 896),
    (QuantFormat::Q4_0, 896, 4864),
    (QuantFormat::Q4K, 896, 4864),
    (QuantFormat::Q6K, 896, 4864),
];

/// The load-time repack of one 4096 × 4096 weight matrix (a 7B's q or o
/// projection) on one thread, in GGUF bytes read per second: a model's load
/// runs it over every weight byte. The packed copy's fresh pages are zeroed
/// by the kernel inside the timed region, as at load.
fn pack(c: &mut Criterion) {
    let mut rng = Rng::new(0x9AC4);
    let mut group = c.benchmark_group("qgemm_pack");
    group.sample_size(10);
    let (n, k) = (4096, 4096);
    let x = rng.vec_f32(n * k);
    for format in [
        QuantFormat::Q4_0,
        QuantFormat::Q8_0,
        QuantFormat::Q4K,
        QuantFormat::Q5K,
        QuantFormat::Q6K,
    ] {
        let w = quant::quantize(format, &x).expect("k is whole blocks");
        let g = QGemm::new(format).threads(1);
        group.throughput(Throughput::Bytes(w.len() as u64));
        let id = BenchmarkId::new(format!("{}_{}", format.name(), g.isa), format!("{n}x{k}"));
        group.bench_function(id, |b| {
            b.iter(|| black_box(g.pack(black_box(&w), n, k).expect("shapes are consistent")))
        });
    }
    group.finish();
}

/// The activations' quantization alone (`qgemm::quantize_activations_on`,
/// the Q8_1 blocks every prefill GEMM call makes first), on one and two
/// threads, in activation bytes read per second: 512 rows of Qwen2.5-0.5B's
/// widths (the input of q/k/v, o and gate/up, and of ffn_down).
fn activations(c: &mut Criterion) {
    let mut rng = Rng::new(0x5A17);
    let mut group = c.benchmark_group("qgemm_act");
    group.sample_size(20);
    for (m, k) in [(512, 896), (512, 4864)] {
        let a = rng.vec_f32(m * k);
        let mut out = vec![0u8; act_bytes(m, k)];
        group.throughput(Throughput::Bytes(4 * a.len() as u64));
        for threads in [1, 2] {
            let id = BenchmarkId::new(format!("q8_1_t{threads}"), format!("{m}x{k}"));
            group.bench_function(id, |b| {
                b.iter(|| {
                    quantize_activations_on(black_box(&a), m, k, &mut out, threads)
                        .expect("k is whole blocks");
                    black_box(&out);
                })
            });
        }
    }
    group.finish();
}

pub fn benches(c: &mut Criterion) {
    pack(c);
    activations(c);
    let mut rng = Rng::new(0x6E33);
    let mut group = c.benchmark_group("qgemm");
    group.sample_size(10);
    for (format, n, k) in SHAPES {
        let w = quant::quantize(format, &rng.vec_f32(n * k)).expect("k is whole blocks");
        for m in [1, 16, 64, 256] {
            let a = rng.vec_f32(m * k);
            let mut out = vec![0.0f32; m * n];
            group.throughput(Throughput::Elements(m as u64));
            for threads in [1, 2] {
                let g = QGemm::new(format).threads(threads);
                let packed = g.pack(&w, n, k).expect("shapes are consistent");
                let mut scratch = Vec::new();
                let id = BenchmarkId::new(
                    format!("{}_{}_t{threads}", format.name(), g.isa),
                    format!("{m}x{n}x{k}"),
                );
                group.bench_function(id, |b| {
                    b.iter(|| {
                        g.run(&packed, black_box(&a), m, &mut out, &mut scratch)
                            .expect("shapes are consistent");
                        black_box(&out);
                    })
                });
                let v = QGemv::new(format, QMode::A8).threads(threads);
                let id = BenchmarkId::new(
                    format!("{}_gemv_rows_{}_t{threads}", format.name(), v.isa),
                    format!("{m}x{n}x{k}"),
                );
                group.bench_function(id, |b| {
                    b.iter(|| {
                        for (x, y) in a.chunks_exact(k).zip(out.chunks_exact_mut(n)) {
                            let xq = quantize_activations(format, black_box(x))
                                .expect("k is whole blocks");
                            v.run_prequantized(&w, &xq, k, y)
                                .expect("shapes are consistent");
                        }
                        black_box(&out);
                    })
                });
            }
        }
    }
    group.finish();
}
