//! `compare kernels`: llama.cpp's `test-backend-ops perf -o MUL_MAT` (CPU
//! backend) next to tiletune's GEMV/GEMM at the same types and shapes: time
//! per run, GFLOP/s, GB/s and the speed-up over llama.cpp.

use crate::peers::{MulMatShape, OpPerf};
use serde::Serialize;
use std::io::Write;

/// One engine's time for one MUL_MAT shape.
#[derive(Debug, Serialize)]
pub struct KernelRow {
    pub type_a: String,
    pub m: u64,
    pub n: u64,
    pub k: u64,
    /// `llama.cpp`, or `tiletune <op> <isa>`.
    pub engine: String,
    pub threads: Option<usize>,
    pub us_per_run: f64,
    pub gflops: f64,
    pub gbytes_per_s: Option<f64>,
    /// llama.cpp's time / this time (> 1: faster than llama.cpp).
    pub speedup_vs_llama: f64,
}

/// The `--out` document of a kernel comparison.
#[derive(Debug, Serialize)]
pub struct KernelComparison {
    pub soc: String,
    pub command: String,
    pub llama_threads: usize,
    pub rows: Vec<KernelRow>,
    pub notes: Vec<String>,
}

/// What tiletune's benchmark of one `(op, dtype, shape)` reports.
#[derive(Clone, Debug, PartialEq)]
pub struct TiletuneKernel {
    /// Median time of one run.
    pub us_per_run: f64,
    pub isa: String,
    pub threads: usize,
    pub gbytes_per_s: f64,
}

/// test-backend-ops' `-p` filter: plain (unbatched, unpermuted) products of
/// these ggml types and token counts.
pub fn backend_ops_filter(ggml_types: &[String], batch: &[String]) -> String {
    format!(
        "^type_a=({}),type_b=f32,m=[0-9]+,n=({}),k=[0-9]+,bs=\\[1,1\\],nr=\\[1,1\\],per=\\[0,1,2,3\\]",
        ggml_types.join("|"),
        batch.join("|")
    )
}

/// tiletune's bench ops for a MUL_MAT shape, as `(op, dtype, shape)`;
/// `fits(op, dtype)` says whether tiletune benches `op` at that dtype.
pub fn tiletune_ops(
    s: &MulMatShape,
    fits: impl Fn(&str, &str) -> bool,
) -> Vec<(String, String, String)> {
    let dtype = s.type_a.to_ascii_lowercase();
    let fits = |op: &str| fits(op, &dtype);
    let mut v = Vec::new();
    if s.type_b != "f32" {
        return v;
    }
    let gemm = (
        "gemm".to_string(),
        dtype.clone(),
        format!("{}x{}x{}", s.n, s.m, s.k),
    );
    if s.n == 1 && fits("gemv") {
        v.push(("gemv".into(), dtype.clone(), format!("{}x{}", s.m, s.k)));
    } else if s.n == 1 {
        // llama.cpp's CPU backend quantizes activations to 8 bits (a8);
        // a32 shows what keeping them in f32 costs; the repacked GEMM at
        // m = 1 shows what decode would gain from its layout.
        for op in ["qgemv_a8", "qgemv_a32"] {
            if fits(op) {
                v.push((op.into(), dtype.clone(), format!("{}x{}", s.m, s.k)));
            }
        }
        if fits("gemm") {
            v.push(gemm);
        }
    } else if fits("gemm") {
        v.push(gemm);
    }
    v
}

/// llama.cpp's row for each single MUL_MAT result, followed by tiletune's
/// rows at that shape: `bench(op, dtype, dims)` times one (its error becomes
/// a note). Unsupported shapes and shapes tiletune has no kernel for are noted.
pub fn kernel_rows(
    perf: &[OpPerf],
    llama_threads: usize,
    fits: impl Fn(&str, &str) -> bool,
    mut bench: impl FnMut(&str, &str, &str) -> Result<TiletuneKernel, String>,
) -> (Vec<KernelRow>, Vec<String>) {
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for p in perf {
        let Some(shape) = p.mul_mat() else { continue };
        if !p.supported {
            notes.push(format!("llama.cpp does not support {}", p.params));
            continue;
        }
        if !shape.is_single() {
            continue;
        }
        let flops = shape.flops();
        let llama_us = p.us_per_run;
        let row = |engine: String, threads, us: f64, gbs| KernelRow {
            type_a: shape.type_a.clone(),
            m: shape.m,
            n: shape.n,
            k: shape.k,
            engine,
            threads: Some(threads),
            us_per_run: us,
            gflops: flops / (us * 1e3),
            gbytes_per_s: gbs,
            speedup_vs_llama: llama_us / us,
        };
        let mut llama = row(
            "llama.cpp".into(),
            llama_threads,
            llama_us,
            p.memory_bytes.map(|b| b as f64 / (llama_us * 1e3)),
        );
        llama.speedup_vs_llama = 1.0;
        rows.push(llama);
        let ops = tiletune_ops(&shape, &fits);
        if ops.is_empty() {
            notes.push(format!(
                "tiletune has no kernel for {} with n={} (m={}, k={})",
                shape.type_a, shape.n, shape.m, shape.k
            ));
        }
        for (op, dtype, dims) in ops {
            match bench(&op, &dtype, &dims) {
                Ok(r) => rows.push(row(
                    format!("tiletune {op} {}", r.isa),
                    r.threads,
                    r.us_per_run,
                    Some(r.gbytes_per_s),
                )),
                Err(e) => notes.push(format!("tiletune {op} {dtype} {dims}: {e}")),
            }
        }
    }
    (rows, notes)
}

impl KernelComparison {
    /// The table of every row, then the notes; `perf` names llama.cpp's build.
    pub fn write_table(&self, out: &mut impl Write, perf: &[OpPerf]) -> std::io::Result<()> {
        let build = perf.iter().find_map(|p| p.build_commit.clone());
        writeln!(
            out,
            "MUL_MAT dst(m×n) = a(k×m, type)ᵀ·b(k×n, f32); soc {}; llama.cpp {} with {} thread(s), warm cache",
            self.soc,
            build.as_deref().unwrap_or("(build unknown)"),
            self.llama_threads
        )?;
        writeln!(out)?;
        writeln!(
            out,
            "{:<6} {:>6} {:>4} {:>6}  {:<30} {:>10} {:>9} {:>8} {:>11}",
            "type", "m", "n", "k", "engine", "µs/run", "GFLOP/s", "GB/s", "vs llama"
        )?;
        for r in &self.rows {
            writeln!(
                out,
                "{:<6} {:>6} {:>4} {:>6}  {:<30} {:>10.2} {:>9.2} {:>8} {:>10.2}×",
                r.type_a,
                r.m,
                r.n,
                r.k,
                r.engine,
                r.us_per_run,
                r.gflops,
                r.gbytes_per_s.map_or("-".into(), |g| format!("{g:.2}")),
                r.speedup_vs_llama
            )?;
        }
        for n in &self.notes {
            writeln!(out, "note: {n}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// tiletune's ops as `families::bench_dtypes` lists them for these tests.
    fn fits(op: &str, dtype: &str) -> bool {
        match op {
            "gemv" => dtype == "f32",
            "qgemv_a8" | "qgemv_a32" => ["q4_0", "q8_0"].contains(&dtype),
            "gemm" => ["f32", "f16", "q4_0", "q8_0", "q6_k"].contains(&dtype),
            _ => false,
        }
    }

    #[test]
    fn mul_mat_shapes_map_to_tiletune_ops() {
        let ops = |p: &str| tiletune_ops(&MulMatShape::parse(p).unwrap(), fits);
        assert_eq!(
            ops("type_a=q4_0,type_b=f32,m=4096,n=1,k=14336,bs=[1,1],nr=[1,1]"),
            vec![
                ("qgemv_a8".into(), "q4_0".into(), "4096x14336".into()),
                ("qgemv_a32".into(), "q4_0".into(), "4096x14336".into()),
                ("gemm".into(), "q4_0".into(), "1x4096x14336".into()),
            ]
        );
        assert_eq!(
            ops("type_a=f16,type_b=f32,m=64,n=8,k=32"),
            vec![("gemm".into(), "f16".into(), "8x64x32".into())]
        );
        assert_eq!(
            ops("type_a=f32,type_b=f32,m=64,n=1,k=32"),
            vec![("gemv".into(), "f32".into(), "64x32".into())]
        );
        assert_eq!(
            ops("type_a=q6_K,type_b=f32,m=64,n=512,k=256"),
            vec![("gemm".into(), "q6_k".into(), "512x64x256".into())]
        );
        assert!(ops("type_a=iq2_xs,type_b=f32,m=64,n=1,k=32").is_empty());
        assert!(ops("type_a=q4_0,type_b=f16,m=64,n=1,k=32").is_empty());
    }

    fn perf(params: &str, supported: bool, us: f64) -> OpPerf {
        OpPerf {
            backend: Some("CPU".into()),
            op: "MUL_MAT".into(),
            params: params.into(),
            supported,
            runs: 10,
            us_per_run: us,
            flops_per_s: None,
            memory_bytes: Some(2_000),
            build_commit: Some("abc".into()),
        }
    }

    #[test]
    fn rows_pair_llama_with_tiletune_and_note_the_rest() {
        let perf = [
            perf("type_a=f32,type_b=f32,m=64,n=1,k=32", true, 2.0),
            perf("type_a=q4_0,type_b=f32,m=64,n=1,k=32", false, 1.0),
            perf("type_a=iq2_xs,type_b=f32,m=64,n=1,k=32", true, 1.0),
        ];
        let (rows, notes) = kernel_rows(&perf, 2, fits, |op, _, _| match op {
            "gemv" => Ok(TiletuneKernel {
                us_per_run: 1.0,
                isa: "avx2".into(),
                threads: 2,
                gbytes_per_s: 3.0,
            }),
            _ => Err("boom".into()),
        });
        let engines: Vec<&str> = rows.iter().map(|r| r.engine.as_str()).collect();
        assert_eq!(engines, ["llama.cpp", "tiletune gemv avx2", "llama.cpp"]);
        assert_eq!(rows[0].speedup_vs_llama, 1.0);
        assert_eq!(rows[0].gbytes_per_s, Some(1.0));
        assert_eq!(rows[1].speedup_vs_llama, 2.0);
        // 2·m·n·k flops in 1 µs.
        assert!((rows[1].gflops - 4.096).abs() < 1e-9, "{}", rows[1].gflops);
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].starts_with("llama.cpp does not support type_a=q4_0"));
        assert!(notes[1].starts_with("tiletune has no kernel for iq2_xs with n=1"));
        let doc = KernelComparison {
            soc: "soc".into(),
            command: "cmd".into(),
            llama_threads: 2,
            rows,
            notes,
        };
        let mut out = Vec::new();
        doc.write_table(&mut out, &perf).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert!(s.contains("llama.cpp abc with 2 thread(s)"), "{s}");
        assert!(s.contains("tiletune gemv avx2"), "{s}");
    }
}
