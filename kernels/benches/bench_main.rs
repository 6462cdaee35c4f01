//! Criterion benches of the kernel zoo, one module per family
//! (`cargo bench -p tiletune-kernels`; filter with e.g. `-- gemv`).
//! Each module exports its benches; this file only collects them.

mod attention;
mod eltwise;
mod gemm;
mod gemv;
mod pool;
mod qgemm;
mod qgemv;

criterion::criterion_group!(
    families,
    attention::benches,
    eltwise::benches,
    gemv::benches,
    pool::benches,
    qgemv::benches,
    qgemm::benches
);
criterion::criterion_main!(gemm::benches, families);
