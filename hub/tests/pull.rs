//! `pull` against a local HTTP server on 127.0.0.1 that answers as each
//! hub's API does (listing, resolve/download, byte ranges): an interrupted
//! download resumes with a Range request, a corrupt file is refused and
//! removed, what was pulled is found offline in the hub's cache layout, and
//! ModelScope's layout is its own.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use tiletune_hub::{Cache, Hub, HubError, HubKind, ModelId, PullOptions, find_cached, pull};

const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

#[derive(Default)]
struct State {
    /// Bytes of the next file reply before the connection is cut.
    cut_after: Option<usize>,
    /// Serve other bytes than the listing's checksum says.
    corrupt: bool,
    /// Every request line and its Range header.
    log: Vec<(String, Option<String>)>,
}

struct Server {
    url: String,
    state: Arc<Mutex<State>>,
    model: Vec<u8>,
}

fn sha256(b: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

impl Server {
    fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(State::default()));
        // 300 kB of not-quite-random bytes: more than one read buffer.
        let model: Vec<u8> = (0..300_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let (st, m) = (state.clone(), model.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let (st, m) = (st.clone(), m.clone());
                std::thread::spawn(move || serve(conn, &st, &m));
            }
        });
        Server { url, state, model }
    }

    fn hub(&self, kind: HubKind) -> Hub {
        Hub {
            kind,
            endpoint: self.url.clone(),
            token: None,
        }
    }

    fn requests(&self) -> Vec<(String, Option<String>)> {
        self.state.lock().unwrap().log.clone()
    }
}

fn serve(mut conn: TcpStream, st: &Mutex<State>, model: &[u8]) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let target = line.split_whitespace().nth(1).unwrap_or("").to_string();
    let mut range = None;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
            break;
        }
        if let Some(v) = h
            .strip_prefix("Range: ")
            .or_else(|| h.strip_prefix("range: "))
        {
            range = Some(v.trim().to_string());
        }
    }
    st.lock().unwrap().log.push((target.clone(), range.clone()));
    let listed_sha = sha256(model);
    let ok = |body: &[u8], ctype: &str| {
        let mut r = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        r.extend_from_slice(body);
        r
    };
    let reply = match target.as_str() {
        "/api/models/org/tiny-GGUF/revision/main?blobs=true" => ok(
            serde_json::json!({
                "sha": COMMIT,
                "siblings": [
                    {"rfilename": "README.md", "size": 5, "blobId": "aaaa"},
                    {"rfilename": "tiny-Q8_0.gguf", "size": 9, "blobId": "bbbb",
                     "lfs": {"sha256": "cc".repeat(32), "size": 9}},
                    {"rfilename": "tiny-Q4_K_M.gguf", "size": model.len(), "blobId": "dddd",
                     "lfs": {"sha256": listed_sha, "size": model.len()}},
                ]
            })
            .to_string()
            .as_bytes(),
            "application/json",
        ),
        "/api/v1/models/org/tiny-GGUF/repo/files?Revision=master&Recursive=true" => ok(
            serde_json::json!({"Code": 200, "Data": {"Files": [
                {"Path": "tiny-Q4_K_M.gguf", "Size": model.len(), "Sha256": listed_sha, "Type": "blob"},
                {"Path": "docs", "Type": "tree"},
            ]}})
            .to_string()
            .as_bytes(),
            "application/json",
        ),
        t if t == format!("/org/tiny-GGUF/resolve/{COMMIT}/tiny-Q4_K_M.gguf")
            || t == "/api/v1/models/org/tiny-GGUF/repo?Revision=master&FilePath=tiny-Q4_K_M.gguf" =>
        {
            let mut body = model.to_vec();
            let (cut, corrupt) = {
                let mut s = st.lock().unwrap();
                (s.cut_after.take(), s.corrupt)
            };
            if corrupt {
                body[1234] ^= 0xff;
            }
            let start = range
                .as_deref()
                .and_then(|r| r.strip_prefix("bytes="))
                .and_then(|r| r.trim_end_matches('-').parse::<usize>().ok())
                .unwrap_or(0);
            let head = if start > 0 {
                format!(
                    "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {start}-{}/{}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len() - 1,
                    body.len(),
                    body.len() - start
                )
            } else {
                format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len())
            };
            let mut r = head.into_bytes();
            let rest = &body[start..];
            r.extend_from_slice(&rest[..cut.unwrap_or(rest.len()).min(rest.len())]);
            r
        }
        _ => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec(),
    };
    let _ = conn.write_all(&reply);
    let _ = conn.flush();
    let _ = conn.shutdown(std::net::Shutdown::Both);
}

fn read(p: &std::path::Path) -> Vec<u8> {
    let mut v = Vec::new();
    std::fs::File::open(p).unwrap().read_to_end(&mut v).unwrap();
    v
}

#[test]
fn an_interrupted_download_resumes_and_the_model_is_then_found_offline() {
    let srv = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache {
        kind: HubKind::HuggingFace,
        root: dir.path().to_path_buf(),
    };
    let hub = srv.hub(HubKind::HuggingFace);
    let id = ModelId::parse("org/tiny-GGUF").unwrap();
    let o = PullOptions::default();

    srv.state.lock().unwrap().cut_after = Some(100_000);
    let e = pull(&hub, &cache, &id, &o, |_| {}).unwrap_err().to_string();
    assert!(e.contains("pull again to resume"), "{e}");
    let repo = dir.path().join("models--org--tiny-GGUF");
    let partial = repo.join(format!("blobs/{}.incomplete", sha256(&srv.model)));
    assert_eq!(std::fs::metadata(&partial).unwrap().len(), 100_000);

    let mut last = (0, None);
    let got = pull(&hub, &cache, &id, &o, |p| last = (p.done, p.total)).unwrap();
    assert_eq!(got.downloaded, 200_000, "only the rest is fetched");
    assert_eq!(last, (300_000, Some(300_000)));
    let (_, range) = srv.requests().last().cloned().unwrap();
    assert_eq!(range.as_deref(), Some("bytes=100000-"));
    // huggingface_hub's layout: the snapshot links to the blob.
    let want = repo.join(format!("snapshots/{COMMIT}/tiny-Q4_K_M.gguf"));
    assert_eq!(got.path, want);
    assert_eq!(read(&got.path), srv.model);
    assert_eq!(
        std::fs::read_link(&want).unwrap(),
        std::path::PathBuf::from(format!("../../blobs/{}", sha256(&srv.model)))
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("refs/main")).unwrap(),
        COMMIT
    );
    assert!(!partial.exists());

    // Cached: a second pull downloads nothing; offline makes no request.
    let again = pull(&hub, &cache, &id, &o, |_| {}).unwrap();
    assert_eq!(again.downloaded, 0);
    let n = srv.requests().len();
    let offline = PullOptions {
        offline: true,
        ..PullOptions::default()
    };
    assert_eq!(
        pull(&hub, &cache, &id, &offline, |_| {}).unwrap().path,
        want
    );
    assert_eq!(find_cached(&cache, &id, "main").unwrap(), want);
    assert_eq!(srv.requests().len(), n);
    // Offline, a file that was never pulled is not found, and says how to get it.
    let q8 = ModelId::parse("org/tiny-GGUF:Q8_0").unwrap();
    let e = find_cached(&cache, &q8, "main").unwrap_err();
    assert!(matches!(e, HubError::NotCached { .. }), "{e}");
    assert!(
        e.to_string().contains("tiletune pull org/tiny-GGUF:Q8_0"),
        "{e}"
    );
}

#[test]
fn a_corrupt_download_is_refused_and_removed() {
    let srv = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache {
        kind: HubKind::HuggingFace,
        root: dir.path().to_path_buf(),
    };
    srv.state.lock().unwrap().corrupt = true;
    let id = ModelId::parse("org/tiny-GGUF:Q4_K_M").unwrap();
    let e = pull(
        &srv.hub(HubKind::HuggingFace),
        &cache,
        &id,
        &PullOptions::default(),
        |_| {},
    )
    .unwrap_err();
    assert!(matches!(e, HubError::Checksum { .. }), "{e}");
    let blobs = dir.path().join("models--org--tiny-GGUF/blobs");
    let left: Vec<_> = std::fs::read_dir(&blobs).unwrap().flatten().collect();
    assert!(left.is_empty(), "{left:?}");
    assert!(find_cached(&cache, &id, "main").is_err());
    // A missing repository is a 404 that says what to check.
    let none = ModelId::parse("org/nothing").unwrap();
    let e = pull(
        &srv.hub(HubKind::HuggingFace),
        &cache,
        &none,
        &PullOptions::default(),
        |_| {},
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("404") && e.contains("model id"), "{e}");
}

#[test]
fn modelscope_pulls_into_its_own_layout() {
    let srv = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache {
        kind: HubKind::ModelScope,
        root: dir.path().to_path_buf(),
    };
    let id = ModelId::parse("org/tiny-GGUF").unwrap();
    let o = PullOptions {
        revision: "master".into(),
        offline: false,
    };
    srv.state.lock().unwrap().cut_after = Some(50_000);
    assert!(pull(&srv.hub(HubKind::ModelScope), &cache, &id, &o, |_| {}).is_err());
    let got = pull(&srv.hub(HubKind::ModelScope), &cache, &id, &o, |_| {}).unwrap();
    assert_eq!(got.downloaded, 250_000);
    assert_eq!(
        got.path,
        dir.path().join("models/org/tiny-GGUF/tiny-Q4_K_M.gguf")
    );
    assert_eq!(read(&got.path), srv.model);
    assert_eq!(find_cached(&cache, &id, "master").unwrap(), got.path);
}
