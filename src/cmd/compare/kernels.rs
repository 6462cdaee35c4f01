//! `tiletune compare kernels`: llama.cpp's `test-backend-ops perf -o
//! MUL_MAT` (CPU backend) next to tiletune's GEMV/GEMM at the same types and
//! shapes. Pairing the rows lives in `tiletune_bench::peers::compare::kernels`;
//! this module runs llama.cpp, times tiletune's kernels with `bench <family>`'s
//! `bench_kernel` and prints.

use super::output::{available_threads, print_doc, write_json_file};
use crate::cmd::Global;
use crate::cmd::bench::{KernelArgs, KernelJob, bench_kernel};
use anyhow::Context;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tiletune_bench::peers::compare::{KernelComparison, TiletuneKernel, kernels, locate};
use tiletune_bench::peers::{self, PeerCommand};
use tiletune_kernels::dtype::GgmlType;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// llama.cpp's test-backend-ops [default: `test-backend-ops` on PATH].
    #[arg(long, value_name = "PATH")]
    pub llama_test_backend_ops: Option<PathBuf>,
    /// Weight types, comma separated (f32, f16, q4_0, q4_1, q5_0, q5_1,
    /// q8_0, q4_k, q5_k, q6_k, mxfp4).
    #[arg(long, value_delimiter = ',', default_value = "q4_0,q8_0", value_parser = parse_type)]
    pub types: Vec<GgmlType>,
    /// Token counts (MUL_MAT's n) to keep from llama.cpp's perf suite, comma
    /// separated; 1 is GEMV. Its suite has 1, 2, 3, 4, 5, 8 and 512.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub batch: Vec<u64>,
    /// Short tiletune schedule: a smoke test, not a measurement.
    #[arg(long)]
    pub quick: bool,
    /// Give up on test-backend-ops after this many seconds.
    #[arg(long, default_value_t = 3600)]
    pub timeout: u64,
    /// Also write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// A `--types` value: a weight type tiletune's matrix kernels take.
fn parse_type(s: &str) -> Result<GgmlType, String> {
    GgmlType::parse(s.trim())
        .filter(|t| GgmlType::MATRIX.contains(t))
        .ok_or_else(|| {
            let names: Vec<&str> = GgmlType::MATRIX.iter().map(|t| t.key()).collect();
            format!(
                "`{s}` is not a weight type; use one of {}",
                names.join(", ")
            )
        })
}

/// Whether `tiletune bench` runs `op` at `dtype`.
fn benched(op: &str, dtype: &str) -> bool {
    tiletune_tuner::families::bench_dtypes(op).contains(&dtype)
}

pub fn run(g: &Global, a: Args) -> anyhow::Result<ExitCode> {
    let bin = locate(
        &a.llama_test_backend_ops,
        "test-backend-ops",
        "--llama-test-backend-ops",
    )
    .map_err(|why| anyhow::anyhow!("cannot compare kernels: {why}"))?;
    if a.types.is_empty() || a.batch.is_empty() {
        anyhow::bail!("--types and --batch need at least one value each");
    }
    // test-backend-ops spells the types as ggml does (`q4_K`).
    let types: Vec<String> = a.types.iter().map(|t| t.name().to_string()).collect();
    let batch: Vec<String> = a.batch.iter().map(u64::to_string).collect();
    let cmd = PeerCommand::new("llama.cpp", &bin)
        .args([
            "perf", "-o", "MUL_MAT", "-b", "CPU", "--output", "sql", "-p",
        ])
        .arg(kernels::backend_ops_filter(&types, &batch))
        .timeout(Duration::from_secs(a.timeout.max(1)));
    eprintln!("running {}", cmd.display());
    let out = cmd.run()?;
    let perf = peers::parse_backend_ops("llama.cpp", &out.stdout)?;
    // test-backend-ops gives the CPU backend half the hardware threads.
    let llama_threads = (available_threads() / 2).max(1);
    let soc = tiletune_soc::probe().context("probing this SoC")?;
    let (rows, mut notes) =
        kernels::kernel_rows(&perf, llama_threads, benched, |op, dtype, dims| {
            eprintln!("tiletune {op} {dtype} {dims}");
            let k = KernelArgs {
                shape: dims.to_string(),
                dtype: Some(dtype.to_string()),
                isa: None,
                params: None,
                threads: Some(llama_threads),
                cold: false, // test-backend-ops reruns one weight tensor: warm
                counters: "software".into(),
                pin: Vec::new(),
                placement: None,
                seed: 1,
                quick: a.quick,
                db: None,
            };
            bench_kernel(&KernelJob::new(op, k), None)
                .map(|r| TiletuneKernel {
                    us_per_run: r.measurement.summary.median / 1e3,
                    isa: r.isa,
                    threads: r.threads,
                    gbytes_per_s: r.gbytes_per_s,
                })
                .map_err(|e| super::super::error_text(&*e))
        });
    if rows.is_empty() {
        notes.push(format!(
            "no MUL_MAT result matched --types {} --batch {}",
            types.join(","),
            batch.join(",")
        ));
    }
    let doc = KernelComparison {
        soc: soc.name.clone(),
        command: cmd.display(),
        llama_threads,
        rows,
        notes,
    };
    if let Some(p) = &a.out {
        write_json_file(p, &doc)?;
        eprintln!("wrote {}", p.display());
    }
    print_doc(g, &doc, |o| doc.write_table(o, &perf))?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use tiletune_bench::peers::MulMatShape;

    /// The shapes of llama.cpp's perf suite map to the ops tiletune's bench
    /// table lists.
    #[test]
    fn mul_mat_shapes_map_to_tiletune_ops() {
        let ops =
            |p: &str| super::kernels::tiletune_ops(&MulMatShape::parse(p).unwrap(), super::benched);
        assert_eq!(
            ops("type_a=q4_0,type_b=f32,m=4096,n=1,k=14336,bs=[1,1],nr=[1,1]"),
            vec![
                ("qgemv_a8".into(), "q4_0".into(), "4096x14336".into()),
                ("qgemv_a32".into(), "q4_0".into(), "4096x14336".into()),
                ("gemm".into(), "q4_0".into(), "1x4096x14336".into()),
            ]
        );
        assert!(ops("type_a=iq2_xs,type_b=f32,m=64,n=1,k=32").is_empty());
    }
}
