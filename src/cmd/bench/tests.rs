//! Unit tests of `tiletune bench <family>`: flags to jobs, clear errors,
//! and a tiny quick run of every family.

use super::*;
use clap::Parser;

#[derive(Debug, Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: BenchCommand,
}

fn kernel(line: &[&str]) -> (String, KernelArgs) {
    let j = job(line);
    (j.op, j.args)
}

fn job(line: &[&str]) -> KernelJob {
    let mut v = vec!["bench"];
    v.extend_from_slice(line);
    kernel_op(Cli::try_parse_from(v).unwrap().cmd).unwrap()
}

/// A tiny, quick run with no ceilings stored.
fn tiny(line: &[&str]) -> KernelReport {
    let mut v = line.to_vec();
    v.extend_from_slice(&[
        "--quick",
        "--counters",
        "software",
        "--db",
        "/nonexistent/db",
    ]);
    let j = job(&v);
    let sched = MeasureConfig::quick().max(50, std::time::Duration::from_millis(50));
    bench_kernel(&j, Some(sched)).unwrap_or_else(|e| panic!("{line:?}: {e:#}"))
}

#[test]
fn family_flags_map_to_ops_and_configs() {
    let (op, k) = kernel(&[
        "qgemv",
        "--shape",
        "8x64",
        "--dtype",
        "q8_0",
        "--mode",
        "a8",
        "--isa",
        "scalar",
        "--params",
        r#"{"rows_per_block":2}"#,
        "--threads",
        "2",
        "--cold",
    ]);
    assert_eq!(op, "qgemv_a8");
    assert_eq!(k.dtype.as_deref(), Some("q8_0"));
    // llama.cpp's spelling of the K-quants.
    let (_, kq) = kernel(&["gemm", "--shape", "1x16x256", "--dtype", "q6_K"]);
    assert_eq!(kq.dtype.as_deref(), Some("q6_k"));
    let one = one_config(&k).unwrap();
    assert_eq!(one.isa, Some(Isa::Scalar));
    assert_eq!(one.threads, Some(2));
    assert!(one.cold);
    assert_eq!(one.params, Some(serde_json::json!({"rows_per_block": 2})));
    assert_eq!(
        kernel(&["eltwise", "--op", "gelu_tanh", "--shape", "9"]).0,
        "eltwise_gelu_tanh"
    );
    assert_eq!(
        kernel(&["norm", "--kind", "layer", "--shape", "2x8"]).0,
        "layer_norm"
    );
    assert_eq!(kernel(&["norm", "--shape", "2x8"]).0, "rms_norm");
    assert_eq!(kernel(&["rope", "--shape", "2x2x8"]).0, "rope");
    let kind = |op, isa| CeilingKind::for_kernel(families::bandwidth_bound(op), "f32", isa).name();
    assert_eq!(kind("gemm", "avx2"), "fma_peak_avx2_fma");
    assert_eq!(kind("gemm", "avx512_vnni"), "int8_peak_avx512_vnni");
    assert_eq!(kind("gemm", "neon_i8mm.qgemm"), "int8_peak_neon_i8mm");
    assert_eq!(kind("qgemv_a8", "neon_dotprod"), "mem_bw_triad");
    assert_eq!(kind("matmul_rope", "avx512"), "fma_peak_avx512");
    let j = job(&[
        "attention",
        "--shape",
        "8x2x64x512",
        "--rows",
        "16",
        "--page-size",
        "32",
    ]);
    assert_eq!(j.op, "attention");
    assert_eq!(j.extra, vec![("rows", 16), ("page", 32)]);
    let j = job(&["embed", "--lm-head", "--group", "64", "--shape", "8x64"]);
    assert_eq!((j.op.as_str(), j.extra), ("lm_head", vec![("group", 64)]));
    assert_eq!(job(&["embed", "--shape", "2x8x64"]).op, "embed_lookup");
    assert_eq!(default_dtype("i8gemm"), "i8");
    assert_eq!(default_dtype("lm_head"), "u4");
}

#[test]
fn bad_input_is_a_clear_error() {
    let err = |line: &[&str]| -> String {
        let mut v = vec!["bench"];
        v.extend_from_slice(line);
        let cmd = match Cli::try_parse_from(v) {
            Ok(c) => c.cmd,
            Err(e) => return e.to_string(),
        };
        let mut j = match kernel_op(cmd) {
            Ok(x) => x,
            Err(e) => return format!("{e:#}"),
        };
        j.args.quick = true;
        j.args.db = Some("/nonexistent/db".into());
        match bench_kernel(&j, Some(MeasureConfig::quick())) {
            Ok(_) => panic!("{line:?} should fail"),
            Err(e) => format!("{e:#}"),
        }
    };
    assert!(err(&["conv", "--shape", "4"]).contains("unrecognized subcommand"));
    assert!(err(&["eltwise", "--op", "tanhh", "--shape", "4"]).contains("unknown element-wise op"));
    assert!(err(&["gemv", "--shape", "4x4", "--dtype", "q9"]).contains("supported: f32, f16"));
    assert!(err(&["gemv", "--shape", "4x0"]).contains("expected nxk"));
    assert!(err(&["gemm", "--shape", "4x4"]).contains("expected mxnxk"));
    assert!(err(&["qgemv", "--shape", "4x33"]).contains("qgemv"));
    assert!(err(&["qgemv", "--shape", "4x32", "--mode", "a4"]).contains("--mode a32"));
    assert!(err(&["gemv", "--shape", "4x4", "--params", "{nope"]).contains("not JSON"));
    assert!(
        err(&["gemv", "--shape", "4x4", "--params", r#"{"bogus":1}"#]).contains("do not parse")
    );
    assert!(
        err(&["softmax", "--shape", "2x4", "--params", r#"{"threads":0}"#]).contains("softmax")
    );
    assert!(err(&["rope", "--shape", "2x2x7"]).contains("even"));
    assert!(err(&["gemv", "--shape", "4x4", "--isa", "sse9"]).contains("sse9"));
    assert!(err(&["gemv", "--shape", "4x4", "--counters", "gpu"]).contains("counter set"));
    assert!(err(&["norm", "--kind", "batch", "--shape", "2x4"]).contains("--kind rms"));
    assert!(err(&["attention", "--shape", "2x2x16x8", "--rows", "9"]).contains("--rows"));
    assert!(err(&["attention", "--shape", "2x2x16x8", "--rows", "0"]).contains("rows=0"));
    assert!(err(&["i8gemm", "--shape", "2x2x16", "--dtype", "f32"]).contains("i8_zp"));
    assert!(err(&["embed", "--shape", "2x16", "--dtype", "u4"]).contains("tokens"));
    assert!(err(&["gemv", "--shape", "4x4", "--placement", "t2@cluster99"]).contains("cluster"));
    assert!(
        err(&[
            "gemv",
            "--shape",
            "4x4",
            "--placement",
            "t2",
            "--threads",
            "2"
        ])
        .contains("cannot be used with")
    );
    // An ISA of the other architecture is never available here.
    let foreign = if cfg!(target_arch = "x86_64") {
        "neon"
    } else {
        "avx2"
    };
    assert!(err(&["softmax", "--shape", "2x4", "--isa", foreign]).contains("not available"));
}

#[test]
fn every_family_runs_tiny_and_reports() {
    for line in [
        &["gemv", "--shape", "16x40", "--threads", "1"][..],
        &[
            "gemv", "--shape", "9x33", "--dtype", "f16", "--cold", "--isa", "scalar",
        ],
        &["gemm", "--shape", "3x8x17", "--threads", "1"],
        &["gemm", "--shape", "2x5x9", "--dtype", "f16"],
        &["qgemv", "--shape", "4x64", "--dtype", "q4_0"],
        &[
            "qgemv", "--shape", "3x256", "--dtype", "q4_k", "--mode", "a8",
        ],
        &[
            "qgemv",
            "--shape",
            "2x32",
            "--dtype",
            "mxfp4",
            "--mode",
            "a8",
            "--params",
            r#"{"rows_per_block":1}"#,
        ],
        &["eltwise", "--op", "silu", "--shape", "100"],
        &["eltwise", "--op", "relu2", "--shape", "33", "--cold"],
        &["norm", "--shape", "3x40"],
        &[
            "norm",
            "--kind",
            "layer",
            "--shape",
            "2x17",
            "--threads",
            "2",
        ],
        &["softmax", "--shape", "3x19"],
        &["rope", "--shape", "2x3x16"],
        &["attention", "--shape", "4x2x32x40"],
        &[
            "attention",
            "--shape",
            "2x1x32x50",
            "--rows",
            "8",
            "--dtype",
            "q8_0",
            "--page-size",
            "16",
            "--threads",
            "2",
        ],
        &["i8gemm", "--shape", "1x16x64", "--threads", "2"],
        &["i8gemm", "--shape", "3x8x40", "--dtype", "i8_zp", "--cold"],
        &["embed", "--shape", "4x16x64", "--dtype", "u3"],
        &["embed", "--lm-head", "--shape", "16x128", "--group", "64"],
        &["matmul_rope", "--shape", "2x2x16x24"],
        &[
            "matmul-rope",
            "--shape",
            "1x1x8x9",
            "--dtype",
            "f16",
            "--threads",
            "2",
        ],
    ] {
        let r = tiny(line);
        assert!(r.measurement.summary.median > 0.0, "{line:?}");
        assert!(r.validation_error <= r.tolerance, "{line:?}");
        assert!(r.gbytes_per_s > 0.0 && r.bytes_per_run > 0, "{line:?}");
        assert!(matches!(r.roofline, Roofline::Missing { .. }), "{line:?}");
        let json = serde_json::to_string(&r).unwrap();
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["problem"], r.problem.as_str());
        let mut buf = Vec::new();
        r.write_text(&mut buf).unwrap();
        let text = String::from_utf8(buf).unwrap();
        assert!(text.contains("median") && text.contains("GB/s"), "{text}");
        // int8 work is counted in operations, f32 work in FLOPs.
        let int8 = line[0] == "i8gemm" || line.contains(&"a8");
        assert_eq!(
            r.arithmetic == tiletune_bench::roofline::Arithmetic::Int8,
            int8,
            "{line:?}"
        );
        let unit = if int8 {
            "\n     GOP/s  "
        } else {
            "\n   GFLOP/s  "
        };
        assert!(text.contains(unit), "{line:?}: {text}");
        assert_eq!(v["arithmetic"], if int8 { "int8" } else { "f32" });
        assert!(
            text.contains("run `tiletune bench roofline` first"),
            "{text}"
        );
    }
    let r = tiny(&[
        "gemv",
        "--shape",
        "8x8",
        "--isa",
        "scalar",
        "--threads",
        "2",
    ]);
    assert_eq!((r.isa.as_str(), r.threads), ("scalar", 2));
    // A placement sets the threads and pins the caller and each worker.
    let cpu = tiletune_bench::pin::affinity().unwrap()[0];
    let cpus = cpu.to_string();
    let r = tiny(&["gemv", "--shape", "64x64", "--threads", "2", "--pin", &cpus]);
    let p = r.measurement.placement.as_ref().unwrap();
    assert_eq!(
        (p.pinned_to.clone(), p.workers.clone()),
        (vec![cpu], vec![cpu, cpu])
    );
    let r = tiny(&["gemv", "--shape", "64x64", "--placement", "t2"]);
    assert_eq!((r.threads, r.placement.as_deref()), (2, Some("t2")));
}
