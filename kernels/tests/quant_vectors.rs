//! Bit-compatibility with GGUF, proven against an independent implementation:
//! `vectors/quant_vectors.json` was written by the `gguf` Python package
//! (`vectors/gen_quant_vectors.py`, see `vectors/README.md`). tiletune's
//! quantizers must reproduce its bytes exactly and its dequantizers its
//! values exactly (compared as f32 bit patterns).

use serde_json::Value;
use tiletune_kernels::quant::{self, QuantFormat};

const VECTORS: &str = include_str!("vectors/quant_vectors.json");

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|b| f32::from_bits(b.as_u64().unwrap() as u32))
        .collect()
}

fn assert_bits_eq(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        // -0.0 and 0.0 differ in bits; both implementations must agree on the sign too.
        assert_eq!(
            g.to_bits(),
            w.to_bits(),
            "{what}: value {i}: got {g}, want {w}"
        );
    }
}

fn cases() -> Vec<Value> {
    let doc: Value = serde_json::from_str(VECTORS).unwrap();
    doc["cases"].as_array().unwrap().clone()
}

#[test]
fn vectors_cover_every_weight_format() {
    let names: Vec<String> = cases()
        .iter()
        .map(|c| c["format"].as_str().unwrap().to_string())
        .collect();
    for f in [
        "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "mxfp4", "q4_K", "q5_K", "q6_K",
    ] {
        assert!(names.iter().any(|n| n == f), "no vectors for {f}");
    }
}

#[test]
fn quantize_reproduces_gguf_bytes() {
    let mut checked = 0;
    for case in cases().iter().filter(|c| c["kind"] == "quantize") {
        let format: QuantFormat = case["format"].as_str().unwrap().parse().unwrap();
        for (r, row) in case["rows"].as_array().unwrap().iter().enumerate() {
            let x = floats(&row["input"]);
            let want = hex(row["bytes"].as_str().unwrap());
            let got = quant::quantize(format, &x).unwrap();
            assert_eq!(got, want, "{format} row {r}: bytes differ from gguf");
            checked += 1;
        }
    }
    assert!(checked >= 6 * 10, "only {checked} rows checked");
}

#[test]
fn dequantize_reproduces_gguf_values() {
    let mut checked = 0;
    for case in cases() {
        let format: QuantFormat = case["format"].as_str().unwrap().parse().unwrap();
        for (r, row) in case["rows"].as_array().unwrap().iter().enumerate() {
            let bytes = hex(row["bytes"].as_str().unwrap());
            let want = floats(&row["dequant"]);
            let mut got = vec![f32::NAN; want.len()];
            quant::dequantize(format, &bytes, &mut got).unwrap();
            assert_bits_eq(&got, &want, &format!("{format} row {r}"));
            checked += 1;
        }
    }
    assert!(checked >= 6 * 10 + 2 * 3, "only {checked} rows checked");
}

#[test]
fn q8_1_quants_equal_q8_0_quants() {
    // gguf has no Q8_1 quantizer; its quants and scale are Q8_0's by construction
    // (same `quantize_row_q8_*_ref` arithmetic), which the Q8_0 vectors pin.
    for case in cases().iter().filter(|c| c["format"] == "q8_0") {
        for row in case["rows"].as_array().unwrap() {
            let x = floats(&row["input"]);
            let q80 = quant::quantize(QuantFormat::Q8_0, &x).unwrap();
            let q81 = quant::quantize(QuantFormat::Q8_1, &x).unwrap();
            for (b0, b1) in q80.chunks(34).zip(q81.chunks(36)) {
                assert_eq!(b0[..2], b1[..2]);
                assert_eq!(b0[2..], b1[4..]);
            }
        }
    }
}
