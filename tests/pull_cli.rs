//! Model ids through the binary, with the Hugging Face cache in a scratch
//! folder (downloads themselves are tested in hub/tests/pull.rs against a
//! local server): `pull --offline` finds a model in huggingface_hub's
//! layout, and a command given an id that is not cached, offline, says how
//! to get it.
//!
//! These spawn the built binary, which qemu-user cannot do from inside an
//! emulated test process, so under qemu they report a skip.

use std::process::Command;

const COMMIT: &str = "89abcdef0123456789abcdef0123456789abcdef";

#[test]
fn ids_resolve_through_the_hub_cache() {
    if std::env::var_os("QEMU_CPU").is_some() {
        eprintln!("skipped under qemu: spawns the tiletune binary");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // What huggingface-cli leaves: a blob, a snapshot link to it, refs/main.
    let repo = dir.path().join("models--org--tiny-GGUF");
    std::fs::create_dir_all(repo.join("blobs")).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::create_dir_all(repo.join("snapshots").join(COMMIT)).unwrap();
    std::fs::write(repo.join("blobs/abcd"), b"GGUF").unwrap();
    std::fs::write(repo.join("refs/main"), COMMIT).unwrap();
    let link = repo.join("snapshots").join(COMMIT).join("tiny-Q8_0.gguf");
    std::os::unix::fs::symlink("../../blobs/abcd", &link).unwrap();

    let tiletune = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_tiletune"))
            .args(args)
            .env("HF_HUB_CACHE", dir.path())
            .env("MODELSCOPE_CACHE", dir.path().join("ms"))
            .env("HF_HUB_OFFLINE", "1")
            .env("HF_ENDPOINT", "http://127.0.0.1:9")
            .output()
            .unwrap()
    };
    let r = tiletune(&["pull", "--offline", "org/tiny-GGUF"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert_eq!(
        String::from_utf8_lossy(&r.stdout).trim(),
        link.to_str().unwrap()
    );

    let r = tiletune(&["pull", "--offline", "org/tiny-GGUF:Q4_K_M"]);
    assert!(!r.status.success());
    let e = String::from_utf8_lossy(&r.stderr);
    assert!(
        e.contains("not in the cache") && e.contains("tagged Q4_K_M"),
        "{e}"
    );

    let r = tiletune(&["run", "-m", "org/other-GGUF", "-p", "hi"]);
    assert!(!r.status.success());
    let e = String::from_utf8_lossy(&r.stderr);
    assert!(e.contains("tiletune pull org/other-GGUF"), "{e}");
    assert!(!e.contains("panicked"), "{e}");

    // Online, an unreachable endpoint is an error that names it.
    let r = Command::new(env!("CARGO_BIN_EXE_tiletune"))
        .args(["pull", "org/other-GGUF"])
        .env("HF_HUB_CACHE", dir.path())
        .env("HF_ENDPOINT", "http://127.0.0.1:9")
        .output()
        .unwrap();
    assert!(!r.status.success());
    let e = String::from_utf8_lossy(&r.stderr);
    assert!(
        e.contains("127.0.0.1:9") && e.contains("HF_ENDPOINT"),
        "{e}"
    );
}
