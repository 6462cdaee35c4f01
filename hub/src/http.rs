//! The hubs' HTTP APIs: a repository's file listing and a file's bytes
//! (from an offset, for resuming).
//!
//! - Hugging Face: `GET /api/models/{repo}/revision/{rev}?blobs=true` (the
//!   commit `sha` and `siblings` with `size`, `blobId`, `lfs.sha256`), and
//!   `GET /{repo}/resolve/{commit}/{path}` (redirected to the CDN for LFS).
//! - ModelScope: `GET /api/v1/models/{repo}/repo/files?Revision={rev}&Recursive=true`
//!   (`Data.Files[]` with `Path`, `Size`, `Sha256`, `Type`), and
//!   `GET /api/v1/models/{repo}/repo?Revision={rev}&FilePath={path}`.

use crate::{Hub, HubError, HubKind, Listing, ModelId, RemoteFile, Result};
use serde_json::Value;
use std::io::Read;
use std::time::Duration;

pub(crate) struct Client<'h> {
    hub: &'h Hub,
    agent: ureq::Agent,
}

/// A response body being read, and where in the file it starts.
pub(crate) struct Body {
    pub reader: Box<dyn Read + Send + Sync + 'static>,
    /// The offset of the first byte: the requested one (206), or 0 when the
    /// server ignored the range (200).
    pub start: u64,
    pub url: String,
}

/// Percent-encodes a path or query value (RFC 3986 unreserved kept; `/`
/// kept in paths).
fn encode(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b'/' if keep_slash => out.push('/'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

impl<'h> Client<'h> {
    pub(crate) fn new(hub: &'h Hub) -> Self {
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_secs(20))
            .timeout_read(Duration::from_secs(60))
            .user_agent(concat!("tiletune/", env!("CARGO_PKG_VERSION")))
            .build();
        Client { hub, agent }
    }

    fn get(&self, url: &str) -> ureq::Request {
        let r = self.agent.get(url);
        match &self.hub.token {
            Some(t) => r.set("Authorization", &format!("Bearer {t}")),
            None => r,
        }
    }

    fn http_err(url: &str, e: ureq::Error) -> HubError {
        let what = match e {
            ureq::Error::Status(401, _) | ureq::Error::Status(403, _) => {
                "refused (401/403): the repository is gated or private; accept its terms on the hub and set HF_TOKEN (or MODELSCOPE_API_TOKEN)".to_string()
            }
            ureq::Error::Status(404, _) => {
                "not found (404): check the model id and revision".to_string()
            }
            ureq::Error::Status(code, r) => format!("HTTP {code} {}", r.status_text()),
            ureq::Error::Transport(t) => format!(
                "{t}; check the network, or set HF_ENDPOINT / MODELSCOPE_ENDPOINT for a mirror, or use --offline for cached models"
            ),
        };
        HubError::Http {
            url: url.to_string(),
            what,
        }
    }

    fn json(&self, url: &str) -> Result<Value> {
        let r = self.get(url).call().map_err(|e| Self::http_err(url, e))?;
        let mut text = String::new();
        r.into_reader()
            .take(64 << 20)
            .read_to_string(&mut text)
            .map_err(|e| HubError::Http {
                url: url.into(),
                what: format!("reading the reply: {e}"),
            })?;
        serde_json::from_str(&text).map_err(|e| HubError::Http {
            url: url.into(),
            what: format!("the reply is not the JSON the hub's API sends ({e})"),
        })
    }

    /// The repository's files at `revision`.
    pub(crate) fn list(&self, id: &ModelId, revision: &str) -> Result<Listing> {
        let (ep, repo) = (&self.hub.endpoint, encode(&id.repo(), true));
        let bad = |url: &str, what: &str| HubError::Http {
            url: url.to_string(),
            what: format!("unexpected listing: {what}"),
        };
        match self.hub.kind {
            HubKind::HuggingFace => {
                let url = format!(
                    "{ep}/api/models/{repo}/revision/{}?blobs=true",
                    encode(revision, false)
                );
                let v = self.json(&url)?;
                let commit = v["sha"]
                    .as_str()
                    .filter(|s| is_hex(s))
                    .ok_or_else(|| bad(&url, "no commit sha"))?
                    .to_string();
                let files = v["siblings"]
                    .as_array()
                    .ok_or_else(|| bad(&url, "no siblings"))?
                    .iter()
                    .map(|f| {
                        let path = f["rfilename"]
                            .as_str()
                            .ok_or_else(|| bad(&url, "a file without rfilename"))?;
                        check_path(&url, path)?;
                        let sha256 = f["lfs"]["sha256"]
                            .as_str()
                            .filter(|s| is_hex(s))
                            .map(str::to_string);
                        let blob = sha256
                            .clone()
                            .or_else(|| {
                                f["blobId"]
                                    .as_str()
                                    .filter(|s| is_hex(s))
                                    .map(str::to_string)
                            })
                            .ok_or_else(|| bad(&url, "a file without blobId"))?;
                        Ok(RemoteFile {
                            path: path.to_string(),
                            size: f["lfs"]["size"].as_u64().or(f["size"].as_u64()),
                            sha256,
                            blob,
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
                Ok(Listing { commit, files })
            }
            HubKind::ModelScope => {
                let url = format!(
                    "{ep}/api/v1/models/{repo}/repo/files?Revision={}&Recursive=true",
                    encode(revision, false)
                );
                let v = self.json(&url)?;
                if v["Code"].as_i64().is_some_and(|c| c != 200) {
                    return Err(HubError::Http {
                        url,
                        what: format!(
                            "the hub says {}: check the model id and revision",
                            v["Message"].as_str().unwrap_or("an error")
                        ),
                    });
                }
                let files = v["Data"]["Files"]
                    .as_array()
                    .ok_or_else(|| bad(&url, "no Data.Files"))?
                    .iter()
                    .filter(|f| f["Type"].as_str() != Some("tree"))
                    .map(|f| {
                        let path = f["Path"]
                            .as_str()
                            .ok_or_else(|| bad(&url, "a file without Path"))?;
                        check_path(&url, path)?;
                        let sha256 = f["Sha256"]
                            .as_str()
                            .filter(|s| is_hex(s))
                            .map(str::to_string);
                        Ok(RemoteFile {
                            path: path.to_string(),
                            size: f["Size"].as_u64(),
                            blob: sha256.clone().unwrap_or_else(|| path.replace('/', "_")),
                            sha256,
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
                Ok(Listing {
                    commit: revision.to_string(),
                    files,
                })
            }
        }
    }

    /// The bytes of `path` from `offset` on.
    pub(crate) fn download(
        &self,
        id: &ModelId,
        commit: &str,
        path: &str,
        offset: u64,
    ) -> Result<Body> {
        let (ep, repo) = (&self.hub.endpoint, encode(&id.repo(), true));
        let url = match self.hub.kind {
            HubKind::HuggingFace => format!(
                "{ep}/{repo}/resolve/{}/{}",
                encode(commit, false),
                encode(path, true)
            ),
            HubKind::ModelScope => format!(
                "{ep}/api/v1/models/{repo}/repo?Revision={}&FilePath={}",
                encode(commit, false),
                encode(path, false)
            ),
        };
        let mut req = self.get(&url);
        if offset > 0 {
            req = req.set("Range", &format!("bytes={offset}-"));
        }
        let r = match req.call() {
            // The partial file already holds everything.
            Err(ureq::Error::Status(416, _)) if offset > 0 => {
                return Ok(Body {
                    reader: Box::new(std::io::empty()),
                    start: offset,
                    url,
                });
            }
            r => r.map_err(|e| Self::http_err(&url, e))?,
        };
        let start = match r.status() {
            206 => {
                // `bytes START-END/TOTAL`: the range must start where asked.
                let got = r
                    .header("Content-Range")
                    .and_then(|v| v.strip_prefix("bytes "))
                    .and_then(|v| v.split('-').next())
                    .and_then(|v| v.trim().parse::<u64>().ok());
                if got != Some(offset) {
                    return Err(HubError::Http {
                        url,
                        what: format!("asked for bytes from {offset}, the reply starts at {got:?}"),
                    });
                }
                offset
            }
            _ => 0,
        };
        Ok(Body {
            reader: Box::new(r.into_reader()),
            start,
            url,
        })
    }
}

fn is_hex(s: &str) -> bool {
    !s.is_empty() && s.len() <= 128 && s.chars().all(|c| c.is_ascii_hexdigit())
}

/// A listed path must stay inside the snapshot folder.
fn check_path(url: &str, p: &str) -> Result<()> {
    let ok = !p.is_empty()
        && !p.starts_with('/')
        && !p.contains('\\')
        && p.split('/').all(|c| !c.is_empty() && c != "." && c != "..");
    if ok {
        Ok(())
    } else {
        Err(HubError::Http {
            url: url.to_string(),
            what: format!("the listing names `{p}`, a path outside the repository; refusing it"),
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn paths_and_values_are_percent_encoded() {
        assert_eq!(super::encode("a b/c+d", true), "a%20b/c%2Bd");
        assert_eq!(super::encode("a/b", false), "a%2Fb");
        assert!(super::check_path("u", "../x").is_err());
        assert!(super::check_path("u", "a//b").is_err());
        assert!(super::check_path("u", "sub/x.gguf").is_ok());
    }
}
