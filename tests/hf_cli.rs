//! `tiletune run --model <Hugging Face folder>` through the real binary: the
//! folder is converted to a cached GGUF image and run by the fast decoder,
//! whose logits must reproduce transformers' (the fixtures of
//! runtime/tests/fixtures/hf_qwen3, made by make_hf_qwen3.py, and the
//! Llama 3 RoPE scaling one of hf_llama3, bf16), also after
//! Q8_0 quantization at load within a stated bound; bad folders and bad
//! `--quant` values give clear errors.
//!
//! These spawn the built binary, which qemu-user cannot do from inside an
//! emulated test process, so under qemu they report a skip.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn under_qemu() -> bool {
    std::env::var_os("QEMU_CPU").is_some()
}

/// A fixture folder: `hf_qwen3/<name>`, or for `llama3` the Llama 3 RoPE
/// scaling checkpoint (runtime/tests/fixtures/hf_llama3).
fn fixture(name: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("runtime/tests/fixtures");
    match name {
        "llama3" => root.join("hf_llama3"),
        _ => root.join("hf_qwen3").join(name),
    }
}

/// A scratch directory removed on drop; also the cache root, so each test
/// converts afresh and never touches the user's cache.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("tiletune-hf-cli-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tiletune(cache: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tiletune"))
        .args(args)
        .env("XDG_CACHE_HOME", cache)
        .output()
        .expect("the tiletune binary runs")
}

struct Expected {
    tokens: Vec<u32>,
    prefill: Vec<Vec<f32>>,
    greedy: Vec<u32>,
}

fn expected(name: &str) -> Expected {
    let text = std::fs::read_to_string(fixture(name).join("expected.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    Expected {
        tokens: serde_json::from_value(v["tokens"].clone()).unwrap(),
        prefill: serde_json::from_value(v["prefill_logits"].clone()).unwrap(),
        greedy: serde_json::from_value(v["greedy"].clone()).unwrap(),
    }
}

/// Runs the folder `name` with `extra` flags, dumping prompt logits and
/// `n` greedy steps; returns (max abs error / largest |logit| over the
/// prompt, generated ids).
fn run_fixture(name: &str, extra: &[&str], n: usize) -> (f32, Vec<u32>) {
    let s = Scratch::new(&format!("{name}{}", extra.join("")));
    let exp = expected(name);
    let dump = s.0.join("logits.json");
    let mut flags = vec!["--dump-logits", dump.to_str().unwrap()];
    flags.extend_from_slice(extra);
    greedy_run(&s, name, &[], n, &flags);
    // The converted image lands in the cache, once, with its record.
    let cached = cache_files(&s.0);
    assert_eq!(cached.len(), 2, "{cached:?}");
    assert!(cached[0].ends_with(".gguf"), "{cached:?}");
    assert_eq!(cached[1], cached[0].replace(".gguf", ".json"), "{cached:?}");

    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&dump).unwrap()).unwrap();
    let got: Vec<Vec<f32>> = serde_json::from_value(v["prompt_logits"].clone()).unwrap();
    let err = prefill_error(&got, &exp.prefill);
    let generated = v["generated"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["token"].as_u64().unwrap() as u32)
        .collect();
    (err, generated)
}

/// `tiletune [global] run` of the folder `name` on its prompt ids, `n`
/// greedy tokens, with `flags`; it must succeed.
fn greedy_run(s: &Scratch, name: &str, global: &[&str], n: usize, flags: &[&str]) -> Output {
    let ids: Vec<String> = expected(name).tokens.iter().map(u32::to_string).collect();
    let (ids, n, model) = (ids.join(","), n.to_string(), fixture(name));
    let mut args = global.to_vec();
    args.extend([
        "run",
        "--model",
        model.to_str().unwrap(),
        "--token-ids",
        &ids,
        "-n",
        &n,
        "--temp",
        "0",
    ]);
    args.extend_from_slice(flags);
    let out = tiletune(&s.0, &args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The names of the files in the conversion cache under `cache`, sorted.
fn cache_files(cache: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(cache.join("tiletune/converted"))
        .map(|d| {
            d.map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Max abs error over the prompt's logits, relative to the largest |logit|
/// of `want`.
fn prefill_error(got: &[Vec<f32>], want: &[Vec<f32>]) -> f32 {
    assert_eq!(got.len(), want.len());
    let mut err = 0f32;
    let mut big = 0f32;
    for (g, e) in got.iter().zip(want) {
        assert_eq!(g.len(), e.len());
        for (a, b) in g.iter().zip(e) {
            err = err.max((a - b).abs());
            big = big.max(b.abs());
        }
    }
    err / big
}

#[test]
fn f32_folders_reproduce_transformers() {
    if under_qemu() {
        eprintln!("skipped under qemu: spawns the tiletune binary");
        return;
    }
    for name in ["tied", "untied", "llama3"] {
        let exp = expected(name);
        let (e, greedy) = run_fixture(name, &[], exp.greedy.len());
        // Issue 7's bound, as runtime/tests/hf_qwen3.rs holds the library to.
        assert!(e <= 1e-4, "{name}: prefill relative error {e} > 1e-4");
        assert_eq!(greedy, exp.greedy, "{name}: greedy tokens");
    }
}

// Bounds are max abs error over the largest |logit|. With f32 activations
// (--qmode a32) Q8_0 weights measure 2.1% (tied) / 3.9% (untied), the same
// as the reference decoder on Q8_0-rounded weights in
// runtime/tests/hf_qwen3.rs, so they get its 5% bound. The default a8 mode
// also rounds activations to 8 bits and measures 3.7% / 6.1%: held to 10%.
#[test]
fn q8_0_folders_stay_close_to_transformers() {
    if under_qemu() {
        eprintln!("skipped under qemu: spawns the tiletune binary");
        return;
    }
    for name in ["tied", "untied"] {
        let (e, _) = run_fixture(name, &["--quant", "q8_0", "--qmode", "a32"], 0);
        assert!(e <= 0.05, "{name} q8_0 a32: relative error {e} > 5%");
        let (e, _) = run_fixture(name, &["--quant", "q8_0", "--qmode", "a8"], 0);
        assert!(e <= 0.10, "{name} q8_0 a8: relative error {e} > 10%");
    }
}

fn assert_fails(out: &Output, needles: &[&str]) {
    assert!(!out.status.success(), "expected a failure");
    let err = String::from_utf8_lossy(&out.stderr);
    for n in needles {
        assert!(err.contains(n), "stderr lacks `{n}`: {err}");
    }
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn bad_folders_and_quant_give_clear_errors() {
    if under_qemu() {
        eprintln!("skipped under qemu: spawns the tiletune binary");
        return;
    }
    let s = Scratch::new("bad");
    let ids = ["--token-ids", "1,2,3", "-n", "0"];

    // A folder without config.json.
    let empty = s.0.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let mut args = vec!["run", "--model", empty.to_str().unwrap()];
    args.extend_from_slice(&ids);
    assert_fails(&tiletune(&s.0, &args), &["no config.json", "Hugging Face"]);

    // A truncated safetensors file.
    let cut = s.0.join("cut");
    std::fs::create_dir_all(&cut).unwrap();
    let src = fixture("tied");
    std::fs::copy(src.join("config.json"), cut.join("config.json")).unwrap();
    let st = std::fs::read(src.join("model.safetensors")).unwrap();
    std::fs::write(cut.join("model.safetensors"), &st[..st.len() / 2]).unwrap();
    let mut args = vec!["run", "--model", cut.to_str().unwrap()];
    args.extend_from_slice(&ids);
    assert_fails(&tiletune(&s.0, &args), &["model.safetensors"]);
    // Nothing half-written is left in the cache.
    let left = cache_files(&s.0);
    assert!(
        left.is_empty(),
        "cache holds files after a failed conversion: {left:?}"
    );

    // A --quant without a quantizer, and one that is no type at all.
    let mut args = vec!["run", "--model", src.to_str().unwrap(), "--quant", "q3_k"];
    args.extend_from_slice(&ids);
    assert_fails(
        &tiletune(&s.0, &args),
        &["q3_k", "does not have yet", "Q8_0", "MXFP4"],
    );
    let mut args = vec!["run", "--model", src.to_str().unwrap(), "--quant", "q9"];
    args.extend_from_slice(&ids);
    assert_fails(
        &tiletune(&s.0, &args),
        &["`q9` is not a file type", "Q4_K_M"],
    );

    // Text prompts need tokenizer.json, which these fixtures lack.
    let args = ["run", "--model", src.to_str().unwrap(), "--prompt", "hi"];
    assert_fails(&tiletune(&s.0, &args), &["tokenizer.json", "--token-ids"]);
}

#[test]
fn plan_takes_a_folder_and_quant() {
    if under_qemu() {
        eprintln!("skipped under qemu: spawns the tiletune binary");
        return;
    }
    let s = Scratch::new("plan");
    let model = fixture("untied");
    for (quant, want) in [("q4_0", "q4_0"), ("f16", "f16")] {
        let out = tiletune(
            &s.0,
            &["plan", "--model", model.to_str().unwrap(), "--quant", quant],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.lines()
                .any(|l| l.starts_with("gemv") && l.contains(want)),
            "{quant}: no {want} gemv in the plan:\n{text}"
        );
    }
}

/// GPT-2's byte → printable char map, which byte-level BPE vocabularies use.
fn byte_chars() -> Vec<char> {
    let printable: Vec<u32> = (b'!' as u32..=b'~' as u32)
        .chain(0xA1..=0xAC)
        .chain(0xAE..=0xFF)
        .collect();
    let mut chars = vec!['\0'; 256];
    for &b in &printable {
        chars[b as usize] = char::from_u32(b).unwrap();
    }
    let mut extra = 0;
    for (b, c) in chars.iter_mut().enumerate() {
        if !printable.contains(&(b as u32)) {
            *c = char::from_u32(256 + extra).unwrap();
            extra += 1;
        }
    }
    chars
}

#[test]
fn text_prompts_use_tokenizer_json_and_the_folders_chat_template() {
    if under_qemu() {
        eprintln!("skipped under qemu: spawns the tiletune binary");
        return;
    }
    let s = Scratch::new("tok");
    let model = s.0.join("m");
    std::fs::create_dir_all(&model).unwrap();
    let src = fixture("tied");
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(src.join(f), model.join(f)).unwrap();
    }
    // A byte-level BPE over the fixture's 256 ids: id = byte, no merges.
    let vocab: serde_json::Map<String, serde_json::Value> = byte_chars()
        .into_iter()
        .enumerate()
        .map(|(i, c)| (c.to_string(), i.into()))
        .collect();
    let tok = serde_json::json!({
        "model": {"type": "BPE", "vocab": vocab, "merges": []},
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
        "decoder": {"type": "ByteLevel"},
    });
    std::fs::write(model.join("tokenizer.json"), tok.to_string()).unwrap();
    let tmpl = serde_json::json!({
        "chat_template": "{% for m in messages %}[{{ m.content }}]{% endfor %}"
    });
    std::fs::write(model.join("tokenizer_config.json"), tmpl.to_string()).unwrap();

    let prompt_ids = |extra: &[&str]| -> Vec<u32> {
        let mut args = vec![
            "--json",
            "run",
            "--model",
            model.to_str().unwrap(),
            "--prompt",
            "hi",
            "-n",
            "1",
            "--temp",
            "0",
        ];
        args.extend_from_slice(extra);
        let out = tiletune(&s.0, &args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        serde_json::from_value(v["prompt_ids"].clone()).unwrap()
    };
    assert_eq!(prompt_ids(&[]), b"hi".map(u32::from).to_vec());
    assert_eq!(
        prompt_ids(&["--chat-template"]),
        b"[hi]".map(u32::from).to_vec()
    );
}

/// A byte-level `tokenizer.json` over the 256 bytes (GPT-2's byte map) with
/// Qwen2's split pattern: the vocabulary of the 256-token fixtures.
fn byte_tokenizer_json() -> String {
    let vocab: serde_json::Map<String, serde_json::Value> = byte_chars()
        .into_iter()
        .enumerate()
        .map(|(i, c)| (c.to_string(), i.into()))
        .collect();
    let qwen2 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    serde_json::json!({
        "version": "1.0",
        "added_tokens": [],
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": qwen2}, "behavior": "Isolated", "invert": false},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
        ]},
        "model": {"type": "BPE", "vocab": vocab, "merges": []}
    })
    .to_string()
}

/// `tiletune convert` writes one GGUF file that carries the tokenizer and
/// runs as the folder does: the same prompt ids from text, logits within
/// transformers' bound and the same greedy tokens; a folder without a
/// tokenizer.json is refused (the file would have none).
#[test]
fn convert_writes_a_gguf_that_runs_as_its_folder() {
    if under_qemu() {
        eprintln!("skipped under qemu: spawns the tiletune binary");
        return;
    }
    let s = Scratch::new("convert");
    let dir = s.0.join("tied");
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["config.json", "generation_config.json", "model.safetensors"] {
        std::fs::copy(fixture("tied").join(f), dir.join(f)).unwrap();
    }
    let out = s.0.join("tied.gguf");
    let (d, o) = (dir.to_str().unwrap(), out.to_str().unwrap());
    assert_fails(
        &tiletune(&s.0, &["convert", d, "-o", o, "--outtype", "f32"]),
        &["no tokenizer.json"],
    );
    assert!(!out.exists());
    std::fs::write(dir.join("tokenizer.json"), byte_tokenizer_json()).unwrap();
    let r = tiletune(&s.0, &["convert", d, "-o", o, "--outtype", "f32"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(String::from_utf8_lossy(&r.stdout).starts_with("converted "));
    let g = tiletune_runtime::GgufFile::open(&out).unwrap();
    assert_eq!(g.get_str("tokenizer.ggml.pre").unwrap(), "qwen2");

    // From text: the file's own tokenizer gives the folder's prompt ids.
    let ids = |model: &str| {
        let r = tiletune(
            &s.0,
            &["--json", "run", "-m", model, "-p", "Hi 42, you!", "-n", "0"],
        );
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
        v["prompt_ids"].clone()
    };
    let from_file = ids(o);
    assert_eq!(from_file, ids(d));
    assert_eq!(from_file.as_array().map(Vec::len), Some(11), "{from_file}");

    // The logits and greedy tokens of transformers, as from the folder.
    let exp = expected("tied");
    let tokens: Vec<String> = exp.tokens.iter().map(u32::to_string).collect();
    let dump = s.0.join("logits.json");
    let n = exp.greedy.len().to_string();
    let r = tiletune(
        &s.0,
        &[
            "run",
            "-m",
            o,
            "--token-ids",
            &tokens.join(","),
            "-n",
            &n,
            "--temp",
            "0",
            "--dump-logits",
            dump.to_str().unwrap(),
        ],
    );
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&dump).unwrap()).unwrap();
    let got: Vec<Vec<f32>> = serde_json::from_value(v["prompt_logits"].clone()).unwrap();
    let e = prefill_error(&got, &exp.prefill);
    assert!(e <= 1e-4, "prefill relative error {e}");
    let greedy: Vec<u32> = v["generated"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["token"].as_u64().unwrap() as u32)
        .collect();
    assert_eq!(greedy, exp.greedy);

    // Quantized on the way, as `quantize` types it.
    let q = s.0.join("tied-q8.gguf");
    let r = tiletune(
        &s.0,
        &["convert", d, "-o", q.to_str().unwrap(), "--outtype", "Q8_0"],
    );
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let g = tiletune_runtime::GgufFile::open(&q).unwrap();
    let types: std::collections::BTreeSet<String> = g
        .tensors()
        .iter()
        .map(|t| t.ggml_type.name().to_string())
        .collect();
    assert_eq!(types, ["f32", "q8_0"].map(String::from).into());
    // The native image it was quantized from was a temporary file beside
    // the output, gone now; an output in no directory is a write error
    // that names it, and leaves nothing.
    let mut left: Vec<String> = std::fs::read_dir(&s.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    left.sort();
    assert!(left.is_empty(), "{left:?}");
    let absent = s.0.join("absent").join("x.gguf");
    let out = tiletune(
        &s.0,
        &[
            "convert",
            d,
            "-o",
            absent.to_str().unwrap(),
            "--outtype",
            "Q8_0",
        ],
    );
    assert_fails(&out, &["cannot write", "absent"]);
    assert!(!s.0.join("absent").exists());
    // The cause is said once, not again at the end of the chain.
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
}

/// `cache list` names each image's source folder and whether a run of it
/// would still use the image; `cache clean` removes only the images no run
/// can use again, `--all` every one.
#[test]
fn the_conversion_cache_is_listed_and_cleaned() {
    if under_qemu() {
        eprintln!("skipped under qemu: spawns the tiletune binary");
        return;
    }
    let s = Scratch::new("cache");
    let list = |s: &Scratch| -> Vec<serde_json::Value> {
        let out = tiletune(&s.0, &["--json", "cache", "list"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    assert!(list(&s).is_empty());
    // Two folders: the fixture, and a copy that will go away.
    let kept = fixture("tied");
    let gone = s.0.join("gone");
    std::fs::create_dir_all(&gone).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(kept.join(f), gone.join(f)).unwrap();
    }
    let dump = s.0.join("logits.json");
    for (m, quant) in [(&kept, "F32"), (&gone, "Q8_0")] {
        let args = [
            "run",
            "-m",
            m.to_str().unwrap(),
            "--quant",
            quant,
            "--token-ids",
            "1,2",
            "-n",
            "1",
            "--dump-logits",
            dump.to_str().unwrap(),
        ];
        let out = tiletune(&s.0, &args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let entries = list(&s);
    assert_eq!(entries.len(), 2, "{entries:?}");
    for e in &entries {
        assert_eq!(e["state"], "current", "{e}");
    }
    let types: Vec<&str> = entries
        .iter()
        .map(|e| e["file_type"].as_str().unwrap())
        .collect();
    assert!(
        types.contains(&"F32") && types.contains(&"Q8_0"),
        "{types:?}"
    );

    std::fs::remove_dir_all(&gone).unwrap();
    let entries = list(&s);
    let missing: Vec<_> = entries
        .iter()
        .filter(|e| e["state"] == "source missing")
        .collect();
    assert_eq!(missing.len(), 1, "{entries:?}");
    assert_eq!(missing[0]["file_type"], "Q8_0");
    // A table for people says the same, and what to do.
    let out = tiletune(&s.0, &["cache", "list"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("source missing") && text.contains("tiletune cache clean"),
        "{text}"
    );

    let out = tiletune(&s.0, &["cache", "clean"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("removed") && text.contains("source missing"),
        "{text}"
    );
    let entries = list(&s);
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0]["file_type"], "F32");
    assert_eq!(cache_files(&s.0).len(), 2, "the record goes with its image");

    let out = tiletune(&s.0, &["cache", "clean", "--all"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(list(&s).is_empty());
    assert!(cache_files(&s.0).is_empty());
}

/// A folder without tokenizer.json still generates from `--token-ids`:
/// `--json` prints the ids (no text), transformers' greedy ones.
#[test]
fn token_ids_generate_without_a_tokenizer() {
    if under_qemu() {
        eprintln!("skipped under qemu: spawns the tiletune binary");
        return;
    }
    let s = Scratch::new("json-ids");
    let exp = expected("tied");
    let out = greedy_run(&s, "tied", &["--json"], exp.greedy.len(), &[]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let got: Vec<u32> = serde_json::from_value(v["generated_ids"].clone()).unwrap();
    assert_eq!(got, exp.greedy);
    assert_eq!(v["text"], "");
    assert_eq!(v["stop"], "MaxTokens");
}
