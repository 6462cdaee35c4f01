//! Criterion benches of the kernel zoo, one module per family
//! (`cargo bench -p tiletune-kernels`; filter with e.g. `-- gemv`).
//! Each module exports its benches; this file only collects them.

mod eltwise;
mod gemm;
mod gemv;
mod qgemv;

criterion::criterion_group!(families, eltwise::benches, gemv::benches, qgemv::benches);
criterion::criterion_main!(gemm::benches, families);
