//! Qwen2.5-VL through the built binary, as a user runs it, on the tiny
//! random checkpoint transformers wrote (runtime/tests/fixtures/hf_qwen25vl,
//! make_hf_qwen25vl.py): `run --image` from the Hugging Face folder with the
//! processor's ids (`--token-ids`, pads expanded) gives transformers' 16
//! greedy tokens and, with `--dump-logits`, its prompt logits within 1e-4
//! of the largest; the same with the prompt as text through the chat
//! template; the same from llama.cpp's two-file form (language GGUF +
//! mmproj, here split from `tiletune convert`'s image with llama.cpp's key
//! and tensor names), also Q8_0-converted; `chat` with `/image`; `bench
//! model --image`; `plan` listing the tower's GEMMs; and clear errors for a
//! missing tower and a picture that is not one.
//!
//! These spawn the built binary, which qemu-user cannot do from inside an
//! emulated test process, so under qemu they report a skip.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use tiletune_runtime::GgufFile;
use tiletune_runtime::gguf::write::GgufWriter;

fn under_qemu() -> bool {
    std::env::var_os("QEMU_CPU").is_some()
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("runtime/tests/fixtures/hf_qwen25vl")
}

/// A scratch directory removed on drop; also the conversion cache.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("tiletune-vl-cli-{tag}-{}", std::process::id()));
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

fn tiletune(s: &Scratch, args: &[&str], stdin: Option<&str>) -> Output {
    let db = s.0.join("selector.db");
    let mut c = Command::new(env!("CARGO_BIN_EXE_tiletune"));
    c.args(args)
        .env("XDG_CACHE_HOME", &s.0)
        .env("TILETUNE_DB", &db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("the tiletune binary runs");
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    child.wait_with_output().unwrap()
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "tiletune failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

struct Case {
    ids: Vec<u32>,
    logits: Vec<f32>,
    greedy: Vec<u32>,
}

fn case(name: &str) -> Case {
    let text = std::fs::read_to_string(fixture().join("expected.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let c = &v[name];
    let ids = |k: &str| -> Vec<u32> {
        c[k].as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    let logits = c["logits"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
        })
        .collect();
    Case {
        ids: ids("input_ids"),
        logits,
        greedy: ids("greedy"),
    }
}

fn json_ids(v: &serde_json::Value, k: &str) -> Vec<u32> {
    v[k].as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// `run --image IMG --token-ids ... --json -n 16 --temp 0` on `model`
/// (with `extra` flags): the prompt and generated ids.
fn greedy(s: &Scratch, model: &[&str], img: &str, c: &Case) -> (Vec<u32>, Vec<u32>) {
    let ids: Vec<String> = c.ids.iter().map(u32::to_string).collect();
    let img = fixture().join(img);
    let mut args = vec!["--json", "run"];
    args.extend_from_slice(model);
    let ids = ids.join(",");
    args.extend(["--image", img.to_str().unwrap(), "--token-ids", &ids]);
    args.extend(["-n", "16", "--temp", "0"]);
    let out = ok(&tiletune(s, &args, None));
    let v: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    (json_ids(&v, "prompt_ids"), json_ids(&v, "generated_ids"))
}

#[test]
fn run_image_from_the_folder_matches_transformers() {
    if under_qemu() {
        eprintln!("skipped under qemu: spawning the binary is not emulated");
        return;
    }
    let s = Scratch::new("run");
    let dir = fixture().join("model");
    let model = ["--model", dir.to_str().unwrap()];
    for name in ["odd", "square"] {
        let c = case(name);
        let (prompt, generated) = greedy(&s, &model, &format!("{name}.png"), &c);
        assert_eq!(prompt, c.ids, "{name}");
        assert_eq!(generated, c.greedy, "{name}: greedy tokens");
    }
    // The prompt logits, dumped.
    let c = case("odd");
    let dump = s.0.join("logits.json");
    let ids: Vec<String> = c.ids.iter().map(u32::to_string).collect();
    let img = fixture().join("odd.png");
    ok(&tiletune(
        &s,
        &[
            "run",
            "--model",
            dir.to_str().unwrap(),
            "--image",
            img.to_str().unwrap(),
            "--token-ids",
            &ids.join(","),
            "-n",
            "0",
            "--dump-logits",
            dump.to_str().unwrap(),
        ],
        None,
    ));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&dump).unwrap()).unwrap();
    let got: Vec<f32> = v["prompt_logits"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
        })
        .collect();
    assert_eq!(got.len(), c.logits.len());
    let scale = c.logits.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let err = got
        .iter()
        .zip(&c.logits)
        .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(
        err <= 1e-4 * scale,
        "prompt logits differ by {err} (scale {scale})"
    );
    // The same prompt as text, through the folder's chat template.
    let out = ok(&tiletune(
        &s,
        &[
            "--json",
            "run",
            "--model",
            dir.to_str().unwrap(),
            "--image",
            img.to_str().unwrap(),
            "-p",
            "What is in the picture?",
            "--chat-template",
            "-n",
            "16",
            "--temp",
            "0",
        ],
        None,
    ));
    let v: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(json_ids(&v, "prompt_ids"), c.ids);
    assert_eq!(json_ids(&v, "generated_ids"), c.greedy);
}

/// Splits a converted Qwen2.5-VL image into llama.cpp's two files: the
/// language model (no `clip.*` keys, no `v.*`/`mm.*` tensors) and the
/// mmproj (`general.architecture = clip`, the tower).
fn split(full: &Path, lm: &Path, mmproj: &Path) {
    let g = GgufFile::open(full).unwrap();
    let (mut a, mut b) = (GgufWriter::new(), GgufWriter::new());
    b.kv("general.architecture", "clip");
    for (k, v) in g.metadata() {
        match k.starts_with("clip.") {
            true => b.kv(k, v.clone()),
            false => a.kv(k, v.clone()),
        };
    }
    for t in g.tensors() {
        let (info, data) = g.tensor_data(&t.name).unwrap();
        let w = match t.name.starts_with("v.") || t.name.starts_with("mm.") {
            true => &mut b,
            false => &mut a,
        };
        w.tensor(&t.name, &info.dims, info.ggml_type, data.to_vec())
            .unwrap();
    }
    std::fs::write(lm, a.to_bytes()).unwrap();
    std::fs::write(mmproj, b.to_bytes()).unwrap();
}

#[test]
fn run_image_from_the_two_file_form_matches_transformers() {
    if under_qemu() {
        eprintln!("skipped under qemu: spawning the binary is not emulated");
        return;
    }
    let s = Scratch::new("two");
    let dir = fixture().join("model");
    let c = case("odd");
    for quant in ["F32", "Q8_0"] {
        let full = s.0.join(format!("full-{quant}.gguf"));
        ok(&tiletune(
            &s,
            &[
                "convert",
                dir.to_str().unwrap(),
                "-o",
                full.to_str().unwrap(),
                "--outtype",
                quant,
            ],
            None,
        ));
        let (lm, mp) = (s.0.join("lm.gguf"), s.0.join("mmproj.gguf"));
        split(&full, &lm, &mp);
        let model = [
            "--model",
            lm.to_str().unwrap(),
            "--mmproj",
            mp.to_str().unwrap(),
        ];
        let (prompt, generated) = greedy(&s, &model, "odd.png", &c);
        assert_eq!(prompt, c.ids);
        // Q8_0 weights move logits by about 1% of the largest on this
        // random model; its greedy margins (0.027 at the least) keep the
        // first steps, not necessarily all 16.
        match quant {
            "F32" => assert_eq!(generated, c.greedy, "two-file form: greedy tokens"),
            _ => assert_eq!(generated[..4], c.greedy[..4], "Q8_0: first greedy tokens"),
        }
        // The language file alone has no tower: images are refused, text runs.
        let o = tiletune(
            &s,
            &[
                "run",
                "--model",
                lm.to_str().unwrap(),
                "--image",
                fixture().join("odd.png").to_str().unwrap(),
                "-p",
                "x",
            ],
            None,
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains("--mmproj"), "{err}");
    }
}

#[test]
fn chat_bench_and_plan_see_the_tower() {
    if under_qemu() {
        eprintln!("skipped under qemu: spawning the binary is not emulated");
        return;
    }
    let s = Scratch::new("chat");
    let dir = fixture().join("model");
    let img = fixture().join("odd.png");
    let dir = dir.to_str().unwrap();
    // The first turn's prompt is the processor's: the reply is
    // transformers' greedy text (16 tokens).
    let text_of = |args: &[&str], stdin: Option<&str>| ok(&tiletune(&s, args, stdin));
    let run = text_of(
        &[
            "--json",
            "run",
            "--model",
            dir,
            "--image",
            img.to_str().unwrap(),
            "-p",
            "What is in the picture?",
            "--chat-template",
            "-n",
            "16",
            "--temp",
            "0",
        ],
        None,
    );
    let v: serde_json::Value = serde_json::from_str(run.lines().last().unwrap()).unwrap();
    let want = v["text"].as_str().unwrap().trim().to_string();
    let chat = text_of(
        &["chat", "--model", dir, "-n", "16", "--temp", "0"],
        Some(&format!(
            "/image {}\nWhat is in the picture?\n/image nowhere.png\n",
            img.display()
        )),
    );
    assert_eq!(chat.lines().next().unwrap().trim(), want);
    // bench model --image: one record, 30 tokens for the 168x140 picture.
    let out = text_of(
        &[
            "bench",
            "model",
            "--model",
            dir,
            "--image",
            img.to_str().unwrap(),
            "-p",
            "0",
            "-n",
            "0",
            "-r",
            "1",
            "-t",
            "1",
            "-o",
            "jsonl",
        ],
        None,
    );
    let rec: serde_json::Value = out
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["test"] == "image_encode")
        .expect("an image_encode record");
    assert_eq!(rec["tokens"], 30);
    assert!(rec["avg_ms"].as_f64().unwrap() > 0.0);
    // plan lists the tower's patch embedding and merger GEMMs.
    let plan = text_of(&["plan", "--model", dir], None);
    assert!(plan.contains("m=1024,n=64,k=1176"), "{plan}");
    assert!(plan.contains("m=256,n=64,k=256"), "{plan}");
    // Not a picture.
    let o = tiletune(
        &s,
        &[
            "run",
            "--model",
            dir,
            "--image",
            fixture().join("README.md").to_str().unwrap(),
            "-p",
            "x",
        ],
        None,
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("PNG or JPEG"), "{err}");
}
