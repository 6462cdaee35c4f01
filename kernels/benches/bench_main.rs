//! Criterion benches of the kernel zoo, one module per family
//! (`cargo bench -p tiletune-kernels`); each module exports a `benches` group.

mod gemm;

criterion::criterion_main!(gemm::benches);
