//! Q4_K, Q5_K, Q6_K and MXFP4 quantizers bit-identical to llama.cpp's reference
//! quantizers: `vectors/llamacpp_vectors.json` holds rows quantized by
//! llama.cpp's `llama-quantize` (`vectors/gen_llamacpp_vectors.py`, see
//! `vectors/README.md`), and tiletune's quantizers must write the same bytes.

use serde_json::Value;
use tiletune_kernels::quant::{self, QuantFormat};

const VECTORS: &str = include_str!("vectors/llamacpp_vectors.json");

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn k_quants_and_mxfp4_write_llama_cpps_bytes() {
    let doc: Value = serde_json::from_str(VECTORS).unwrap();
    let mut seen = Vec::new();
    for case in doc["cases"].as_array().unwrap() {
        let name = case["format"].as_str().unwrap();
        let fmt: QuantFormat = name.parse().unwrap();
        for (r, row) in case["rows"].as_array().unwrap().iter().enumerate() {
            let x: Vec<f32> = row["input"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| f32::from_bits(b.as_u64().unwrap() as u32))
                .collect();
            let got = quant::quantize(fmt, &x).unwrap();
            assert_eq!(got, hex(row["bytes"].as_str().unwrap()), "{name} row {r}");
        }
        seen.push(name.to_string());
    }
    assert_eq!(seen, ["q4_K", "q5_K", "q6_K", "mxfp4"]);
}
