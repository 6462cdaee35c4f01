//! The C ABI from C, as an app uses it: `capi/tests/c/generate.c` compiled
//! with the system C compiler (`$CC`, else `cc`) against the static library
//! `libtiletune_capi.a` this test build made, then run on a model; its
//! greedy tokens must equal `tiletune --json run`'s on the same model and
//! flags (the program itself checks them against `--expect`). Models: the
//! Hugging Face Qwen3 fixtures (token ids: they have no tokenizer.json, and
//! transformers' greedy ids must come out too), and SmolLM2 from a text
//! prompt when `TILETUNE_MODELS_DIR` holds it (the real-model lane).
//!
//! These spawn programs, which qemu-user cannot do from inside an emulated
//! test process, so under qemu they report a skip.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn under_qemu() -> bool {
    std::env::var_os("QEMU_CPU").is_some()
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A scratch directory (also the conversion cache and the home of a table
/// that does not exist, so the default plan runs) removed on drop.
struct Scratch(tempfile::TempDir);

impl Scratch {
    fn run(&self, program: &Path, args: &[&str]) -> Output {
        let out = Command::new(program)
            .args(args)
            .env("XDG_CACHE_HOME", self.0.path())
            .env("TILETUNE_DB", self.0.path().join("no-table.db"))
            .output()
            .expect("the program runs");
        assert!(
            out.status.success(),
            "{} {args:?}:\n{}\n{}",
            program.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }
}

/// Compiles the C program against the static library beside this test's
/// executable (cargo puts a dependency's `staticlib` there).
fn compile(dir: &Path) -> PathBuf {
    let deps = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let lib = deps.join("libtiletune_capi.a");
    assert!(lib.is_file(), "{} was not built", lib.display());
    let exe = dir.join("generate");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-I"])
        .arg(repo().join("capi/include"))
        .arg(repo().join("capi/tests/c/generate.c"))
        .arg(&lib)
        // What a Rust static library needs from the system.
        .args([
            "-lpthread",
            "-ldl",
            "-lm",
            "-lrt",
            "-lutil",
            "-lgcc_s",
            "-o",
        ])
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler `{cc}`: {e}; install gcc"));
    assert!(
        out.status.success(),
        "{cc} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

fn ids(v: &serde_json::Value) -> String {
    let v: Vec<u32> = serde_json::from_value(v.clone()).unwrap();
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

/// `tiletune --json run` on `model` with `input` (`--token-ids` or
/// `--prompt` and its value): the prompt and generated ids, comma-separated.
fn cli(s: &Scratch, model: &Path, input: [&str; 2], n: &str) -> (String, String) {
    let m = model.to_str().unwrap();
    let args = [
        "--json", "run", "--model", m, input[0], input[1], "-n", n, "--temp", "0", "-t", "2",
    ];
    let out = s.run(Path::new(env!("CARGO_BIN_EXE_tiletune")), &args);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    (ids(&v["prompt_ids"]), ids(&v["generated_ids"]))
}

/// The C program on the same input, told to expect `want`; its two lines.
fn c_program(
    s: &Scratch,
    exe: &Path,
    model: &Path,
    input: [&str; 2],
    n: &str,
    want: &str,
) -> String {
    let flag = if input[0] == "--token-ids" {
        "--ids"
    } else {
        "--prompt"
    };
    let m = model.to_str().unwrap();
    let args = [
        "--model",
        m,
        flag,
        input[1],
        "-n",
        n,
        "--threads",
        "2",
        "--expect",
        want,
    ];
    String::from_utf8(s.run(exe, &args).stdout).unwrap()
}

#[test]
fn the_c_program_generates_the_clis_tokens() {
    if under_qemu() {
        eprintln!("skipped under qemu-user: spawns programs");
        return;
    }
    let s = Scratch(tempfile::tempdir().unwrap());
    let exe = compile(s.0.path());
    for name in ["tied", "untied"] {
        let dir = repo().join("runtime/tests/fixtures/hf_qwen3").join(name);
        let exp: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("expected.json")).unwrap()).unwrap();
        let (prompt, transformers) = (ids(&exp["tokens"]), ids(&exp["greedy"]));
        let input = ["--token-ids", prompt.as_str()];
        let (_, want) = cli(&s, &dir, input, "8");
        assert_eq!(want, transformers, "{name}: the CLI against transformers");
        let out = c_program(&s, &exe, &dir, input, "8", &want);
        assert!(
            out.contains(&format!("generated_ids: {want}\n")),
            "{name}: {out}"
        );
        assert!(out.contains("ok: 8 tokens as expected"), "{out}");
    }
    let Some(models) = std::env::var_os("TILETUNE_MODELS_DIR") else {
        eprintln!("SmolLM2 part skipped: set TILETUNE_MODELS_DIR (scripts/setup fetches it)");
        return;
    };
    let smol = Path::new(&models).join("SmolLM2-135M-Instruct.Q4_1.gguf");
    let input = ["--prompt", "The capital of France is"];
    let (prompt, want) = cli(&s, &smol, input, "24");
    let out = c_program(&s, &exe, &smol, input, "24", &want);
    assert!(out.contains(&format!("prompt_ids: {prompt}\n")), "{out}");
    assert!(out.contains(&format!("generated_ids: {want}\n")), "{out}");
}
