//! Deterministic mutation fuzzing of the GGUF reader, in every `cargo test`
//! (the coverage-guided target is `gguf` in `fuzz/`, run by
//! `scripts/fuzz-smoke`). A valid synthetic GGUF with a tokenizer and tensors is
//! mutated 20,000 times (bit flips, byte overwrites, truncations, length and
//! count fields overwritten with huge or off-by-one values, spliced chunks)
//! and fed to the reader and to the tokenizer and config builders on top:
//! each must return `Ok` or `Err`, never panic. Inputs that once crashed are
//! kept in `tests/gguf_regressions/` and replayed.

use tiletune_runtime::gguf::write::GgufWriter;
use tiletune_runtime::gguf::{Array, GgmlType, GgufFile};
use tiletune_runtime::tokenizer::Tokenizer;

/// xorshift64*: small, seeded, reproducible.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn seed_file() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.kv("general.architecture", "llama")
        .kv("llama.block_count", 1u32)
        .kv("llama.embedding_length", 8u32)
        .kv("llama.feed_forward_length", 16u32)
        .kv("llama.attention.head_count", 2u32)
        .kv("llama.attention.head_count_kv", 1u32)
        .kv("llama.rope.freq_base", 10000f32)
        .kv("llama.attention.layer_norm_rms_epsilon", 1e-5f32)
        .kv("llama.context_length", 64u32);
    let mut tokens: Vec<String> = (b'a'..=b'z').map(|b| (b as char).to_string()).collect();
    tokens.extend(["Ġ", "ab", "abc", "<s>", "</s>"].map(String::from));
    let types: Vec<i32> = tokens
        .iter()
        .map(|t| if t.starts_with('<') { 3 } else { 1 })
        .collect();
    w.kv("tokenizer.ggml.model", "gpt2")
        .kv("tokenizer.ggml.pre", "gpt2")
        .kv("tokenizer.ggml.tokens", tokens)
        .kv("tokenizer.ggml.token_type", types)
        .kv(
            "tokenizer.ggml.merges",
            vec!["a b".to_string(), "ab c".to_string()],
        )
        .kv("tokenizer.ggml.bos_token_id", 29u32)
        .kv("tokenizer.ggml.eos_token_id", 30u32)
        .kv(
            "nested",
            Array::Array(vec![Array::U8(vec![1, 2]), Array::String(vec!["x".into()])]),
        );
    w.tensor_f32("token_embd.weight", &[8, 31], &[0.5; 248])
        .unwrap();
    w.tensor("blk.0.attn_q.weight", &[32, 2], GgmlType::Q8_0, vec![1; 68])
        .unwrap();
    w.to_bytes()
}

/// Feeds one input through everything that reads GGUF.
fn exercise(bytes: &[u8]) {
    if let Ok(g) = GgufFile::from_bytes(bytes) {
        for t in g.tensors() {
            let (_, data) = g.tensor_data(&t.name).expect("listed tensor is readable");
            assert_eq!(data.len() as u64, t.size);
        }
        let _ = g.get_str("general.architecture");
        let _ = tiletune_runtime::config::ModelConfig::from_gguf(&g);
        if let Ok(t) = Tokenizer::from_gguf(&g) {
            let ids = t.encode("abc <s>zz", true, true).unwrap_or_default();
            let _ = t.decode(&ids, false);
        }
    }
}

fn mutate(rng: &mut Rng, seed: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(seed);
    for _ in 0..1 + rng.below(4) {
        let len = out.len();
        match rng.below(7) {
            0 => {
                let i = rng.below(len);
                out[i] ^= 1 << rng.below(8);
            }
            1 => {
                let i = rng.below(len);
                out[i] = rng.next() as u8;
            }
            2 => out.truncate(rng.below(len)),
            3 | 4 => {
                // Length/count fields are u64 (or u32) at 4-byte positions:
                // overwrite one with a hostile value.
                let i = rng.below(len.saturating_sub(8)) & !3;
                let v: u64 = match rng.below(6) {
                    0 => u64::MAX,
                    1 => u64::MAX / 2 + rng.below(1000) as u64,
                    2 => 1 << (32 + rng.below(31)),
                    3 => rng.below(64) as u64,
                    4 => u32::MAX as u64,
                    _ => rng.next(),
                };
                let n = if rng.below(2) == 0 { 8 } else { 4 };
                if i + n <= out.len() {
                    out[i..i + n].copy_from_slice(&v.to_le_bytes()[..n]);
                }
            }
            5 => {
                // Splice: copy a chunk of the file over another place.
                let a = rng.below(len);
                let b = rng.below(len);
                let n = rng.below(32).min(len - a).min(len - b);
                let chunk = out[a..a + n].to_vec();
                out[b..b + n].copy_from_slice(&chunk);
            }
            _ => {
                let i = rng.below(len);
                let n = rng.below(16);
                let junk: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                out.splice(i..i, junk);
            }
        }
        if out.is_empty() {
            break;
        }
    }
}

#[test]
fn seed_file_is_valid() {
    let seed = seed_file();
    let g = GgufFile::from_bytes(&seed).unwrap();
    assert!(Tokenizer::from_gguf(&g).is_ok());
    assert!(tiletune_runtime::config::ModelConfig::from_gguf(&g).is_ok());
}

#[test]
fn twenty_thousand_mutations_never_panic() {
    let seed = seed_file();
    let mut rng = Rng(0x7115_7E57_0000_0001);
    let mut buf = Vec::new();
    let mut parsed = 0;
    for i in 0..20_000 {
        mutate(&mut rng, &seed, &mut buf);
        let r = std::panic::catch_unwind(|| exercise(&buf));
        if r.is_err() {
            let path = format!(
                "{}/tests/gguf_regressions/crash-{i}.gguf",
                env!("CARGO_MANIFEST_DIR")
            );
            std::fs::write(&path, &buf).unwrap();
            panic!("mutation {i} panicked; input saved to {path}");
        }
        parsed += usize::from(GgufFile::from_bytes(&buf).is_ok());
    }
    // The mutations must not all be rejected at the header, or the fuzzing
    // would not reach the metadata and tensor code.
    assert!(parsed > 1_000, "only {parsed} mutated files parsed");
}

#[test]
fn regression_inputs_do_not_panic() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/gguf_regressions");
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "gguf") {
            exercise(&std::fs::read(&path).unwrap());
            n += 1;
        }
    }
    assert!(n > 0, "no regression inputs in {dir}");
}
