//! Criterion benches of paged attention: decode (one query row) over a
//! long cached context, and one prefill chunk, for each KV page dtype,
//! reported as KV-cache bytes read per second (the decode bound).
//!
//! Shapes: Qwen2.5-0.5B attention (14 q heads, 2 KV heads, head_dim 64) and
//! a Llama-3-8B layer (32 q heads, 8 KV heads, head_dim 128); page size 32.
//! Every variant this CPU runs (scalar excepted: it is the reference) is
//! timed at 1 and 2 threads with the analytic default KV split for that
//! thread count.
//!
//! Wiring: `bench_main.rs` includes this file as a module and calls
//! [`benches`].

use criterion::{BenchmarkId, Criterion, Throughput};
use std::hint::black_box;
use std::time::Duration;
use tiletune_kernels::attention::{
    AttnParams, AttnQuery, AttnScratch, AttnShape, ISAS, KvDtype, PagedKvCache,
    paged_attention_scratch,
};
use tiletune_kernels::testing::Rng;
use tiletune_kernels::{CpuCaps, Isa, Tunable};

/// (n_q_heads, n_kv_heads, head_dim).
const MODELS: [(usize, usize, usize); 2] = [(14, 2, 64), (32, 8, 128)];
const PAGE: usize = 32;

fn kv_bytes(dtype: KvDtype, hd: usize) -> usize {
    match dtype {
        KvDtype::F32 => 4 * hd,
        KvDtype::F16 => 2 * hd,
        KvDtype::Q8_0 => hd / 32 * 34,
    }
}

pub fn benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("paged_attention");
    g.measurement_time(Duration::from_secs(2));
    g.warm_up_time(Duration::from_millis(300));
    let isas: Vec<Isa> = ISAS
        .iter()
        .copied()
        .filter(|&i| i != Isa::Scalar && i.is_available())
        .collect();
    for (nq, nkv, hd) in MODELS {
        for (kv_len, q_rows) in [(4096usize, 1usize), (1024, 1), (512, 128)] {
            for dtype in KvDtype::ALL {
                let mut rng = Rng::new(7);
                let pages = kv_len.div_ceil(PAGE);
                let mut cache = PagedKvCache::new(1, nkv, hd, PAGE, dtype, pages).unwrap();
                let seq = cache.alloc_sequence();
                let k = rng.vec_f32(kv_len * nkv * hd);
                let v = rng.vec_f32(kv_len * nkv * hd);
                cache.append_batch(seq, 0, &k, &v).unwrap();
                let q = rng.vec_f32(q_rows * nq * hd);
                let mut out = vec![0.0; q.len()];
                let query = AttnQuery::new(nq, q_rows, kv_len - q_rows, hd);
                let shape = AttnShape {
                    n_q_heads: nq,
                    n_kv_heads: nkv,
                    head_dim: hd,
                    q_rows,
                    kv_len,
                };
                g.throughput(Throughput::Bytes(
                    (2 * kv_len * nkv * kv_bytes(dtype, hd)) as u64,
                ));
                for &isa in &isas {
                    for threads in [1, 2] {
                        let cpu = CpuCaps {
                            cores: threads,
                            ..CpuCaps::default()
                        };
                        let p = AttnParams {
                            threads,
                            ..AttnParams::default_for(&shape, &cpu)
                        };
                        let id = format!(
                            "{nq}x{nkv}x{hd}/kv{kv_len}/rows{q_rows}/{}/{isa}/t{threads}/b{}",
                            dtype.name(),
                            p.kv_block
                        );
                        // Reused, as the runtime reuses it.
                        let mut scratch = AttnScratch::new();
                        g.bench_function(BenchmarkId::from_parameter(id), |b| {
                            b.iter(|| {
                                paged_attention_scratch(
                                    &cache,
                                    seq,
                                    0,
                                    &query,
                                    &q,
                                    &mut out,
                                    None,
                                    isa,
                                    &p,
                                    &mut scratch,
                                )
                                .unwrap();
                                black_box(&out);
                            })
                        });
                    }
                }
            }
        }
    }
    g.finish();
}
