//! Quantized GEMV benches: the decode shapes of issue #4, GB/s of weight
//! bytes, cold cache (weights rotate through enough copies to exceed the
//! last-level cache), 1 and 2 threads, W·A32 and W·A8, best variant of the
//! running CPU. Wired into the bench binary by `benches(c)`.

use criterion::{BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use tiletune_kernels::qgemv::{QGemv, QMode, quantize_activations};
use tiletune_kernels::quant::{self, QuantFormat};
use tiletune_kernels::testing::Rng;

/// (n, k) decode shapes: Qwen2.5-0.5B (896, 4864) and 7–8B (4096, 14336).
const SHAPES: [(usize, usize); 5] = [
    (896, 896),
    (4864, 896),
    (896, 4864),
    (4096, 4096),
    (14336, 4096),
];

/// Bytes of weights touched between two visits of the same buffer: more
/// than any LLC this is run on, so every call streams from DRAM.
const COLD_BYTES: usize = 128 << 20;

pub fn benches(c: &mut Criterion) {
    let mut rng = Rng::new(0xBE7C);
    for format in [
        QuantFormat::Q4_0,
        QuantFormat::Q8_0,
        QuantFormat::Mxfp4,
        QuantFormat::Q4_1,
    ] {
        let mut group = c.benchmark_group(format!("qgemv_{}", format.name()));
        group.sample_size(20);
        for (n, k) in SHAPES {
            let bytes = n * format.row_bytes(k);
            // One quantized matrix, copied so the rotation stays cold.
            let w0 = quant::quantize(format, &rng.vec_f32(n * k)).expect("k is a multiple of 32");
            let copies = COLD_BYTES.div_ceil(bytes).clamp(1, 64);
            let ws: Vec<Vec<u8>> = (0..copies).map(|_| w0.clone()).collect();
            let x = rng.vec_f32(k);
            let xq = quantize_activations(format, &x).expect("k is a multiple of 32");
            let mut y = vec![0.0f32; n];
            group.throughput(Throughput::Bytes(bytes as u64));
            for mode in [QMode::A32, QMode::A8] {
                for threads in [1, 2] {
                    let g = QGemv::new(format, mode).threads(threads);
                    let id = BenchmarkId::new(
                        format!("{}_{}_t{threads}", mode.name(), g.isa),
                        format!("{n}x{k}"),
                    );
                    let mut i = 0;
                    group.bench_function(id, |b| {
                        b.iter(|| {
                            let w = &ws[i % copies];
                            i += 1;
                            match mode {
                                QMode::A32 => g.run(w, black_box(&x), &mut y),
                                QMode::A8 => g.run_prequantized(w, black_box(&xq), k, &mut y),
                            }
                            .expect("shapes are consistent");
                            black_box(&y);
                        })
                    });
                }
            }
        }
        group.finish();
    }
}
