//! Criterion benches for the element-wise, norm, softmax and rope families:
//! every variant the CPU supports, single-threaded, on LLM-sized shapes
//! (Qwen2-0.5B hidden 896 / FFN 4864, Llama-7B hidden 4096, a 152k vocab).
//! Wired into `bench_main.rs` through [`benches`].

use criterion::{BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use tiletune_kernels::eltwise::{self, EltOp, EltParams};
use tiletune_kernels::norm::{Norm, NormParams};
use tiletune_kernels::rope::{Positions, RopeCache, RopeLayout, RopeParams, RopeShape};
use tiletune_kernels::softmax::{self, CausalMask, SoftmaxParams};
use tiletune_kernels::testing::Rng;

/// Runs every bench of these families.
pub fn benches(c: &mut Criterion) {
    bench_eltwise(c);
    bench_norm(c);
    bench_softmax(c);
    bench_rope(c);
}

const ONE: EltParams = EltParams {
    threads: 1,
    chunk: eltwise::DEFAULT_CHUNK,
};

fn bench_eltwise(c: &mut Criterion) {
    let mut rng = Rng::new(1);
    for n in [4864usize, 11008 * 16] {
        let x: Vec<f32> = (0..n).map(|_| rng.uniform(-6.0, 6.0)).collect();
        let y = rng.vec_f32(n);
        let mut g = c.benchmark_group(format!("eltwise/{n}"));
        g.throughput(Throughput::Elements(n as u64));
        for isa in eltwise::available_isas() {
            for op in EltOp::ALL {
                let mut buf = x.clone();
                g.bench_function(BenchmarkId::new(op.name(), isa), |b| {
                    b.iter(|| {
                        buf.copy_from_slice(&x);
                        eltwise::apply_with(op, black_box(&mut buf), isa, &ONE).unwrap()
                    })
                });
            }
            let mut buf = x.clone();
            g.bench_function(BenchmarkId::new("swiglu", isa), |b| {
                b.iter(|| {
                    buf.copy_from_slice(&x);
                    eltwise::swiglu_with(black_box(&mut buf), &y, isa, &ONE).unwrap()
                })
            });
            g.bench_function(BenchmarkId::new("add_from", isa), |b| {
                b.iter(|| eltwise::add_from_with(black_box(&mut buf), &y, isa, &ONE).unwrap())
            });
        }
        g.finish();
    }
}

fn bench_norm(c: &mut Criterion) {
    let mut rng = Rng::new(2);
    for (rows, dim) in [(1usize, 896usize), (16, 4096)] {
        let x = rng.vec_f32(rows * dim);
        let w = rng.vec_f32(dim);
        let b = rng.vec_f32(dim);
        let mut out = vec![0.0f32; rows * dim];
        let mut g = c.benchmark_group(format!("norm/{rows}x{dim}"));
        g.throughput(Throughput::Bytes((rows * dim * 8) as u64));
        for isa in eltwise::available_isas() {
            let p = NormParams { threads: 1 };
            g.bench_function(BenchmarkId::new("rms_norm", isa), |bch| {
                let n = Norm::rms(&w, 1e-6);
                bch.iter(|| {
                    n.forward_with(black_box(&x), &mut out, rows, isa, &p)
                        .unwrap()
                })
            });
            g.bench_function(BenchmarkId::new("layer_norm", isa), |bch| {
                let n = Norm::layer(&w, 1e-5).with_bias(&b);
                bch.iter(|| {
                    n.forward_with(black_box(&x), &mut out, rows, isa, &p)
                        .unwrap()
                })
            });
        }
        g.finish();
    }
}

fn bench_softmax(c: &mut Criterion) {
    let mut rng = Rng::new(3);
    let p = SoftmaxParams { threads: 1 };
    let (q, kv) = (128usize, 1024usize);
    let scores: Vec<f32> = (0..q * kv).map(|_| rng.uniform(-8.0, 8.0)).collect();
    let vocab = 151_936usize;
    let logits: Vec<f32> = (0..vocab).map(|_| rng.uniform(-10.0, 10.0)).collect();
    let mut g = c.benchmark_group("softmax");
    for isa in eltwise::available_isas() {
        let mut buf = scores.clone();
        g.bench_function(BenchmarkId::new("rows_128x1024", isa), |b| {
            b.iter(|| {
                buf.copy_from_slice(&scores);
                softmax::softmax_with(black_box(&mut buf), q, kv, isa, &p).unwrap()
            })
        });
        let mask = CausalMask {
            q_rows: q,
            kv_len: kv,
            pos0: kv - q,
            scale: 0.088,
        };
        g.bench_function(BenchmarkId::new("causal_128x1024", isa), |b| {
            b.iter(|| {
                buf.copy_from_slice(&scores);
                softmax::softmax_causal_with(black_box(&mut buf), &mask, isa, &p).unwrap()
            })
        });
        let mut idx = vec![0u32; 40];
        let mut probs = vec![0f32; 40];
        g.bench_function(BenchmarkId::new("topk40_vocab152k", isa), |b| {
            b.iter(|| {
                softmax::softmax_topk_with(black_box(&logits), &mut idx, &mut probs, isa).unwrap()
            })
        });
    }
    g.finish();
}

fn bench_rope(c: &mut Criterion) {
    let mut rng = Rng::new(4);
    let shape = RopeShape {
        rows: 16,
        n_heads: 32,
        head_dim: 128,
    };
    let cache = RopeCache::new(10_000.0, 128, 4096).expect("valid cache parameters");
    let x = rng.vec_f32(shape.rows * shape.n_heads * shape.head_dim);
    let p = RopeParams { threads: 1 };
    let mut g = c.benchmark_group("rope/16x32x128");
    g.throughput(Throughput::Elements(x.len() as u64));
    for isa in eltwise::available_isas() {
        for layout in [RopeLayout::RotateHalf, RopeLayout::Interleaved] {
            let mut buf = x.clone();
            g.bench_function(BenchmarkId::new(layout.name(), isa), |b| {
                b.iter(|| {
                    tiletune_kernels::rope::rope_with(
                        black_box(&mut buf),
                        shape,
                        Positions::Offset(1000),
                        &cache,
                        layout,
                        isa,
                        &p,
                    )
                    .unwrap()
                })
            });
        }
    }
    g.finish();
}
