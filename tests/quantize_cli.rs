//! `tiletune quantize` through the real binary: the summary line, `--json`,
//! `--list`, and the errors a user meets (an unknown or unsupported type,
//! an already quantized input without `--allow-requantize`).
//!
//! These spawn the built binary, which qemu-user cannot do from inside an
//! emulated test process, so under qemu they report a skip.

use std::path::Path;
use std::process::{Command, Output};
use tiletune_runtime::GgmlType;
use tiletune_runtime::gguf::write::GgufWriter;

/// A GGUF holding one f32 matrix, one q8_0 matrix and a norm vector.
fn small_gguf(dir: &Path) -> std::path::PathBuf {
    let mut w = GgufWriter::new();
    w.kv("general.architecture", "llama");
    let vals: Vec<f32> = (0..64 * 256)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 64.0)
        .collect();
    w.tensor_f32("blk.0.ffn_up.weight", &[256, 64], &vals)
        .unwrap();
    let q8 = tiletune_kernels::quant::quantize(tiletune_kernels::quant::QuantFormat::Q8_0, &vals)
        .unwrap();
    w.tensor("blk.0.ffn_gate.weight", &[256, 64], GgmlType::Q8_0, q8)
        .unwrap();
    w.tensor_f32("blk.0.ffn_norm.weight", &[256], &vals[..256])
        .unwrap();
    let p = dir.join("in.gguf");
    w.write(&p).unwrap();
    p
}

fn quantize(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tiletune"))
        .arg("quantize")
        .args(args)
        .output()
        .expect("the tiletune binary runs")
}

#[test]
fn quantize_reports_sizes_and_refuses_what_it_cannot_do() {
    if std::env::var_os("QEMU_CPU").is_some() {
        eprintln!("skipped under qemu: spawns the tiletune binary");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let input = small_gguf(dir.path());
    let out = dir.path().join("out.gguf");
    let (i, o) = (input.to_str().unwrap(), out.to_str().unwrap());
    let text = |r: &Output| String::from_utf8_lossy(&r.stderr).into_owned();

    let r = quantize(&[i, o, "Q4_0"]);
    assert!(!r.status.success());
    assert!(
        text(&r).contains("already q8_0") && text(&r).contains("--allow-requantize"),
        "{}",
        text(&r)
    );
    assert!(!out.exists(), "a refused run writes nothing");

    let r = quantize(&[i, o, "q3_k_m"]);
    assert_eq!(r.status.code(), Some(2), "{}", text(&r));
    assert!(text(&r).contains("does not have yet"), "{}", text(&r));

    let r = quantize(&[i, o, "Q4_0", "--allow-requantize", "--list"]);
    assert!(r.status.success(), "{}", text(&r));
    let stdout = String::from_utf8_lossy(&r.stdout);
    assert!(
        stdout.starts_with("quantized ") && stdout.contains("2 of 3 tensors converted"),
        "{stdout}"
    );
    assert!(
        text(&r).contains("blk.0.ffn_gate.weight") && text(&r).contains("→ q4_0"),
        "{}",
        text(&r)
    );
    let g = tiletune_runtime::gguf::GgufFile::open(&out).unwrap();
    assert_eq!(
        g.tensor_info("blk.0.ffn_up.weight").unwrap().ggml_type,
        GgmlType::Q4_0
    );
    assert_eq!(
        g.tensor_info("blk.0.ffn_norm.weight").unwrap().ggml_type,
        GgmlType::F32
    );

    let r = Command::new(env!("CARGO_BIN_EXE_tiletune"))
        .args(["--json", "quantize", i, o, "8", "--allow-requantize"])
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", text(&r));
    let j: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(j["file_type"], "Q5_0");
    assert_eq!(j["converted"], 2);
    assert!(j["bpw_out"].as_f64().unwrap() < 6.0, "{j}");
}
