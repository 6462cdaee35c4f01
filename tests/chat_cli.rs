//! `tiletune chat` through the real binary with piped input, on a tiny random
//! model built here (a byte-level vocabulary, so a prompt's length in tokens
//! is its length in bytes, and a `[content]` chat template): `/help` lists
//! the commands, an unknown command is refused and never reaches the model,
//! a reply cut by `-n` says so, and a conversation longer than `--ctx` drops
//! its oldest turns and goes on.
//!
//! These spawn the built binary, which qemu-user cannot do from inside an
//! emulated test process, so under qemu they report a skip.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use tiletune_runtime::config::ModelConfig;
use tiletune_runtime::gguf::write::GgufWriter;

// The GGUF metadata header the runtime's own model tests write.
#[path = "../runtime/tests/common/mod.rs"]
mod common;

/// A scratch folder holding [`byte_model`]; None (a skip) under qemu.
fn scratch_model() -> Option<(tempfile::TempDir, PathBuf)> {
    scratch_model_of(1)
}

fn scratch_model_of(layers: usize) -> Option<(tempfile::TempDir, PathBuf)> {
    if std::env::var_os("QEMU_CPU").is_some() {
        eprintln!("skipped under qemu: spawns the tiletune binary");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let model = byte_model(dir.path(), layers);
    Some((dir, model))
}

/// A llama model of `layers` layers over 256 byte tokens and `</s>` (id
/// 256), with random f32 weights; `</s>`'s output row is zero so greedy
/// decoding never picks it and every reply runs to its token budget.
fn byte_model(dir: &Path, layers: usize) -> PathBuf {
    let (d, f, nh, nkv, hd) = (32usize, 64usize, 4usize, 2usize, 8usize);
    // GPT-2's byte → printable char map, as byte-level BPE vocabularies use it.
    let mut tokens = Vec::new();
    let mut shifted = 0;
    for b in 0..=255u32 {
        let printable = matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF);
        let c = match printable {
            true => char::from_u32(b).unwrap(),
            false => {
                shifted += 1;
                char::from_u32(255 + shifted).unwrap()
            }
        };
        tokens.push(c.to_string());
    }
    tokens.push("</s>".to_string());
    let vocab = tokens.len();
    let types: Vec<i32> = (0..vocab).map(|i| if i == 256 { 3 } else { 1 }).collect();
    let cfg = ModelConfig::from_hf_json(&format!(
        r#"{{"model_type": "llama", "vocab_size": {vocab}, "hidden_size": {d},
        "intermediate_size": {f}, "num_hidden_layers": {layers}, "num_attention_heads": {nh},
        "num_key_value_heads": {nkv}, "head_dim": {hd}, "rope_theta": 10000.0,
        "rms_norm_eps": 1e-5, "max_position_embeddings": 8192}}"#
    ))
    .unwrap();
    let mut w = common::header(&cfg);
    w.kv("general.file_type", 0u32)
        .kv("tokenizer.ggml.model", "gpt2")
        .kv("tokenizer.ggml.pre", "gpt2")
        .kv("tokenizer.ggml.tokens", tokens)
        .kv("tokenizer.ggml.token_type", types)
        .kv("tokenizer.ggml.merges", Vec::<String>::new())
        .kv("tokenizer.ggml.eos_token_id", 256u32)
        .kv("tokenizer.ggml.add_bos_token", false)
        .kv(
            "tokenizer.chat_template",
            "{% for m in messages %}[{{ m.content }}]{% endfor %}",
        );
    // Uniform in ±0.2 (around 1 for norm weights), from a multiplicative hash
    // of a counter: deterministic, and as random as a test model needs.
    let mut i = 0u64;
    let mut random = |n: usize, norm: bool| -> Vec<f32> {
        (0..n)
            .map(|_| {
                i += 1;
                let h = (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (i >> 3))
                    .wrapping_mul(0xbf58_476d_1ce4_e5b9);
                let r = ((h >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.4;
                r + f32::from(u8::from(norm))
            })
            .collect()
    };
    let add = |w: &mut GgufWriter, name: &str, shape: &[usize], vals: Vec<f32>| {
        let dims: Vec<u64> = shape.iter().rev().map(|&x| x as u64).collect();
        w.tensor_f32(name, &dims, &vals).unwrap();
    };
    add(
        &mut w,
        "token_embd.weight",
        &[vocab, d],
        random(vocab * d, false),
    );
    add(&mut w, "output_norm.weight", &[d], random(d, true));
    let mut out = random(vocab * d, false);
    out[256 * d..].fill(0.0);
    add(&mut w, "output.weight", &[vocab, d], out);
    let layer = [
        ("attn_norm", vec![d], true),
        ("attn_q", vec![nh * hd, d], false),
        ("attn_k", vec![nkv * hd, d], false),
        ("attn_v", vec![nkv * hd, d], false),
        ("attn_output", vec![d, nh * hd], false),
        ("ffn_norm", vec![d], true),
        ("ffn_gate", vec![f, d], false),
        ("ffn_up", vec![f, d], false),
        ("ffn_down", vec![d, f], false),
    ];
    for l in 0..layers {
        for (name, shape, norm) in &layer {
            let vals = random(shape.iter().product(), *norm);
            add(&mut w, &format!("blk.{l}.{name}.weight"), shape, vals);
        }
    }
    let path = dir.join("bytes.gguf");
    w.write(&path).unwrap();
    path
}

/// Runs `tiletune chat` on the model with `stdin` piped in; returns
/// (stdout, stderr) after checking it exited 0.
fn chat(dir: &Path, model: &Path, extra: &[&str], stdin: &str) -> (String, String) {
    let db = dir.join("no-such.db");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tiletune"))
        .args(["chat", "--model", model.to_str().unwrap(), "--temp", "0"])
        .args(["--db", db.to_str().unwrap()])
        .args(extra)
        // History belongs to terminals only; a stray write would land here.
        .env("HOME", dir)
        .env("XDG_DATA_HOME", dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the tiletune binary runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out: Output = child.wait_with_output().unwrap();
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "status {:?}\nstderr: {e}", out.status);
    assert!(
        !dir.join("tiletune/chat_history").exists(),
        "piped input keeps no history"
    );
    (o, e)
}

#[test]
fn help_lists_commands_and_unknown_commands_never_reach_the_model() {
    let Some((dir, model)) = scratch_model() else {
        return;
    };
    let (out, err) = chat(
        dir.path(),
        &model,
        &["-n", "2"],
        "/help\n/frobnicate the model\n/reset now\n\n/quit\nnever read\n",
    );
    for c in ["/help", "/reset", "/quit", "/exit", "//"] {
        assert!(err.contains(c), "/help lists {c}:\n{err}");
    }
    assert!(
        err.contains("error: unknown command /frobnicate; /help lists the commands"),
        "{err}"
    );
    assert!(err.contains("error: /reset takes no arguments"), "{err}");
    // Nothing was generated: no reply on stdout, no reply note, and the line
    // after /quit was not read.
    assert_eq!(out, "", "{err}");
    assert!(!err.contains("(reply cut"), "{err}");
    assert!(!err.contains("(conversation cleared)"), "{err}");
}

#[test]
fn replies_cut_by_n_say_so_and_an_escaped_slash_is_sent() {
    let Some((dir, model)) = scratch_model() else {
        return;
    };
    let (out, err) = chat(dir.path(), &model, &["-n", "2"], "hello\n//usr is a path\n");
    assert_eq!(
        err.matches("(reply cut at -n 2 tokens)").count(),
        2,
        "both lines went to the model:\n{err}"
    );
    assert!(!err.contains("unknown command"), "{err}");
    assert!(!out.is_empty());
}

/// llama.cpp's `-n -1` (a reply runs until the end of text or a full
/// context) and `-c`: a reply is then never "cut at -n", and a turn after a
/// full context shifts it rather than being refused.
#[test]
fn n_minus_one_replies_run_to_the_context_and_the_chat_goes_on() {
    let Some((dir, model)) = scratch_model() else {
        return;
    };
    let (out, err) = chat(
        dir.path(),
        &model,
        &["-n", "-1", "-c", "64"],
        "hello
again
",
    );
    assert!(!err.contains("(reply cut at -n"), "{err}");
    assert!(!err.contains("(not sent"), "{err}");
    assert!(!out.is_empty(), "{err}");
}

#[test]
fn a_full_context_drops_the_oldest_turns_and_the_chat_goes_on() {
    let Some((dir, model)) = scratch_model() else {
        return;
    };
    // Each turn is "[hello there]" (13 tokens) and a 4-token reply; the
    // system message "[be brief]" takes 10. Four turns cannot fit in 64.
    let turns = "hello there\n".repeat(6);
    let too_long = format!("{}\n", "x".repeat(80));
    let input = format!("{turns}{too_long}after\n");
    let (_, err) = chat(
        dir.path(),
        &model,
        &["-n", "4", "--ctx", "64", "--system", "be brief"],
        &input,
    );
    assert!(err.contains("(context full: dropped the"), "{err}");
    assert!(
        err.contains("(not sent: this message makes a 92-token prompt and the context holds 64"),
        "{err}"
    );
    // Every turn but the refused one got its full 4-token reply.
    assert_eq!(
        err.matches("(reply cut at -n 4 tokens)").count(),
        7,
        "{err}"
    );
    assert!(!err.contains("conversation cleared"), "{err}");
}

/// `tiletune chat` on a pseudo-terminal made by util-linux `script`, its
/// output collected by a thread. Input is written only after the output it
/// answers has been seen, so the tests do not depend on timing.
struct Pty {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    seen: std::sync::Arc<std::sync::Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Pty {
    /// None when there is no `script` to make the terminal.
    fn chat(dir: &Path, model: &Path, extra: &str) -> Option<Pty> {
        use std::io::Read;
        if Command::new("script").arg("--version").output().is_err() {
            eprintln!("skipped: no util-linux `script` to make a pseudo-terminal");
            return None;
        }
        // `exec`: a shell left waiting would take the Ctrl-C too, and dash
        // (CI's `sh`) then exits 130 once the chat ends.
        let cmd = format!(
            "exec {} chat --model {} --db {} --temp 0 {extra}",
            env!("CARGO_BIN_EXE_tiletune"),
            model.display(),
            dir.join("no-such.db").display()
        );
        let mut child = Command::new("script")
            .args(["-q", "-f", "-e", "-c", &cmd, "/dev/null"])
            .env("HOME", dir)
            .env("XDG_DATA_HOME", dir)
            .env("TERM", "xterm")
            // The same shell here as on CI, whatever the caller's login shell.
            .env("SHELL", "/bin/sh")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let mut stdout = child.stdout.take().unwrap();
        let reader = {
            let seen = seen.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = stdout.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let text = String::from_utf8_lossy(&buf[..n]);
                    seen.lock().unwrap().push_str(&text);
                }
            })
        };
        Some(Pty {
            stdin: child.stdin.take(),
            child,
            seen,
            reader: Some(reader),
        })
    }

    fn output(&self) -> String {
        self.seen.lock().unwrap().clone()
    }

    /// Waits until `needle` appears after byte `from` of the output; returns
    /// where it ends.
    fn wait_for(&self, needle: &str, from: usize) -> usize {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        loop {
            let s = self.output();
            if let Some(at) = s.get(from..).and_then(|t| t.find(needle)) {
                return from + at + needle.len();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no {needle:?} in:\n{s}"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// Waits until the output is longer than `len` bytes.
    fn wait_past(&self, len: usize) {
        while self.output().len() <= len {
            assert!(self.reader.as_ref().is_some_and(|r| !r.is_finished()));
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    fn type_keys(&mut self, keys: &[u8]) {
        self.stdin.as_mut().unwrap().write_all(keys).unwrap();
    }

    /// Waits for the exit; returns whether it succeeded and the whole output.
    fn finish(mut self) -> (bool, String) {
        let status = self.child.wait().unwrap();
        drop(self.stdin.take());
        self.reader.take().unwrap().join().unwrap();
        (status.success(), self.output())
    }
}

/// On a terminal, lines are edited with rustyline: a left arrow moves the
/// cursor instead of landing in the message as `^[[D`, the edited line is
/// kept in the history file, and Ctrl-C at the prompt first says how to
/// leave, then leaves.
#[test]
fn a_terminal_gets_line_editing_and_saved_history() {
    let Some((dir, model)) = scratch_model() else {
        return;
    };
    let Some(mut t) = Pty::chat(dir.path(), &model, "-n 2") else {
        return;
    };
    let at = t.wait_for("> ", 0);
    // "helo", left arrow, "l": "hello".
    t.type_keys(b"helo\x1b[Dl\r");
    let at = t.wait_for("(reply cut at -n 2 tokens)", at);
    let at = t.wait_for("> ", at);
    t.type_keys(b"\x03");
    let at = t.wait_for("(Ctrl-C again, Ctrl-D or /quit to leave)", at);
    t.wait_for("> ", at);
    t.type_keys(b"\x03");
    let (ok, out) = t.finish();
    assert!(ok, "{out}");
    let history = std::fs::read_to_string(dir.path().join("tiletune/chat_history"))
        .unwrap_or_else(|e| panic!("no history file ({e}):\n{out}"));
    let lines: Vec<&str> = history.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(lines, ["hello"], "{out}");
}

/// Ctrl-C while a reply streams stops that reply, says `(stopped)`, and
/// returns to the prompt. The reply may run to 8000 tokens through 64 layers,
/// seconds even on a fast machine, so it cannot end before the Ctrl-C lands
/// even when a loaded machine delays the test; had it ended first, the Ctrl-C
/// would have left the chat and the exit status would say so.
#[test]
fn ctrl_c_during_a_reply_stops_only_the_reply() {
    let Some((dir, model)) = scratch_model_of(64) else {
        return;
    };
    let Some(mut t) = Pty::chat(dir.path(), &model, "-n 8000 --ctx 8192") else {
        return;
    };
    let at = t.wait_for("> ", 0);
    t.type_keys(b"hello\r");
    let at = t.wait_for("hello", at);
    t.wait_past(at + 64);
    t.type_keys(b"\x03");
    let at = t.wait_for("(stopped)", at);
    t.wait_for("> ", at);
    t.type_keys(b"/quit\r");
    let (ok, out) = t.finish();
    assert!(ok, "the chat failed or went on after the Ctrl-C:\n{out}");
    assert!(!out.contains("(reply cut"), "{out}");
}

/// Ctrl-C during a long prefill stops it before the first token: the message
/// is taken back (the conversation is as it was) and the next one is
/// answered. The prompt's 8000 tokens through 64 layers take seconds even on
/// a fast machine; the signal comes 1.5 s after the message, and had the
/// prefill not looked at it, the reply would have begun and said `(stopped)`.
#[test]
fn ctrl_c_during_a_prefill_takes_the_message_back() {
    use std::io::{BufRead, BufReader};
    if std::env::var_os("QEMU_CPU").is_some() {
        eprintln!("skipped under qemu: spawns the tiletune binary");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let model = byte_model(dir.path(), 64);
    let mut child = Command::new(env!("CARGO_BIN_EXE_tiletune"))
        .args(["chat", "--model", model.to_str().unwrap(), "--temp", "0"])
        .args(["--db", dir.path().join("no-such.db").to_str().unwrap()])
        .args(["-n", "4", "--ctx", "8192"])
        .env("HOME", dir.path())
        .env("XDG_DATA_HOME", dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the tiletune binary runs");
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    // The banner comes once the model is loaded and the chat reads input.
    while !seen.contains("chat with") {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap() == 0 {
            panic!("the chat ended before it started: {seen}");
        }
        seen.push_str(&line);
    }
    let mut stdin = child.stdin.take().unwrap();
    let long: String = "abcdefgh".repeat(1000);
    writeln!(stdin, "{long}").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    writeln!(stdin, "hi").unwrap();
    drop(stdin);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    seen.push_str(&rest);
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "status {:?}\n{seen}", out.status);
    assert!(
        seen.contains("(stopped before the reply began; the message was not sent)"),
        "{seen}"
    );
    assert!(!seen.contains("(stopped)"), "{seen}");
    // One reply, to "hi", cut at -n 4.
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert_eq!(
        seen.matches("(reply cut at -n 4 tokens)").count(),
        1,
        "{seen}"
    );
}
