//! The hubs' own cache layouts, so that their tools and tiletune share
//! downloads:
//!
//! - Hugging Face (huggingface_hub): `$HF_HUB_CACHE`, else `$HF_HOME/hub`,
//!   else `$XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub`;
//!   per repository `models--ORG--NAME/` with `blobs/<sha256 or git blob
//!   id>`, `snapshots/<commit>/<path>` (relative links to the blobs) and
//!   `refs/<revision>` (the commit). A download in progress is
//!   `blobs/<blob>.incomplete`, as huggingface_hub names it, and resumes.
//! - ModelScope: `$MODELSCOPE_CACHE`, else `~/.cache/modelscope/hub`; files
//!   at `models/ORG/NAME/<path>` (older versions: `ORG/NAME/<path>`, read
//!   too); a download in progress is `<path>.incomplete`.

use crate::http::Client;
use crate::pick::{Pick, pick_files};
use crate::{HubError, HubKind, ModelId, Progress, RemoteFile, Result, io_err};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// A hub's cache folder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cache {
    pub kind: HubKind,
    pub root: PathBuf,
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

fn xdg_cache() -> Option<PathBuf> {
    std::env::var_os("XDG_CACHE_HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .or_else(|| home().map(|h| h.join(".cache")))
}

/// `$HF_HOME`, else `$XDG_CACHE_HOME/huggingface`, else `~/.cache/huggingface`.
pub(crate) fn hf_home() -> Option<PathBuf> {
    std::env::var_os("HF_HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .or_else(|| xdg_cache().map(|c| c.join("huggingface")))
}

impl Cache {
    /// The cache the hub's own tools use, from the environment.
    pub fn from_env(kind: HubKind) -> Option<Self> {
        let root = match kind {
            HubKind::HuggingFace => std::env::var_os("HF_HUB_CACHE")
                .filter(|h| !h.is_empty())
                .map(PathBuf::from)
                .or_else(|| hf_home().map(|h| h.join("hub")))?,
            HubKind::ModelScope => std::env::var_os("MODELSCOPE_CACHE")
                .filter(|h| !h.is_empty())
                .map(PathBuf::from)
                .or_else(|| xdg_cache().map(|c| c.join("modelscope").join("hub")))?,
        };
        Some(Cache { kind, root })
    }

    fn repo_dir(&self, id: &ModelId) -> PathBuf {
        match self.kind {
            HubKind::HuggingFace => self.root.join(format!("models--{}--{}", id.org, id.name)),
            HubKind::ModelScope => self.root.join("models").join(&id.org).join(&id.name),
        }
    }

    /// The folder a commit's files are in.
    pub fn snapshot_dir(&self, id: &ModelId, commit: &str) -> PathBuf {
        match self.kind {
            HubKind::HuggingFace => self.repo_dir(id).join("snapshots").join(commit),
            HubKind::ModelScope => self.repo_dir(id),
        }
    }

    /// Where a file of a commit is.
    pub fn snapshot_path(&self, id: &ModelId, commit: &str, path: &str) -> PathBuf {
        self.snapshot_dir(id, commit).join(path)
    }

    fn blob_path(&self, id: &ModelId, f: &RemoteFile) -> PathBuf {
        self.repo_dir(id).join("blobs").join(&f.blob)
    }

    /// Records that `revision` is at `commit` (Hugging Face's `refs/`).
    pub(crate) fn set_ref(&self, id: &ModelId, revision: &str, commit: &str) -> Result<()> {
        if self.kind != HubKind::HuggingFace || revision == commit {
            return Ok(());
        }
        let refs = self.repo_dir(id).join("refs");
        std::fs::create_dir_all(&refs).map_err(io_err(&refs))?;
        let p = refs.join(revision);
        std::fs::write(&p, commit).map_err(io_err(&p))
    }

    /// Brings one file into the cache; returns the bytes downloaded (0 when
    /// it was there).
    pub(crate) fn fetch(
        &self,
        client: &Client<'_>,
        id: &ModelId,
        commit: &str,
        f: &RemoteFile,
        progress: &mut impl FnMut(Progress<'_>),
    ) -> Result<u64> {
        let link = self.snapshot_path(id, commit, &f.path);
        let done = match self.kind {
            HubKind::HuggingFace => self.blob_path(id, f),
            HubKind::ModelScope => link.clone(),
        };
        let complete = |p: &Path| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && f.size.is_none_or(|s| m.len() == s))
        };
        if complete(&done) {
            self.link(&done, &link, f)?;
            return Ok(0);
        }
        let parent = done.parent().expect("a cache path has a parent");
        std::fs::create_dir_all(parent).map_err(io_err(parent))?;
        let partial = PathBuf::from(format!("{}.incomplete", done.display()));
        let mut offset = std::fs::metadata(&partial).map(|m| m.len()).unwrap_or(0);
        if f.size.is_some_and(|s| offset > s) {
            offset = 0;
        }
        let body = client.download(id, commit, &f.path, offset)?;
        let mut out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&partial)
            .map_err(io_err(&partial))?;
        if body.start != offset || offset == 0 {
            out.set_len(0).map_err(io_err(&partial))?;
            offset = 0;
        }
        let mut hasher = Sha256::new();
        if offset > 0 && f.sha256.is_some() {
            let mut prefix = std::fs::File::open(&partial).map_err(io_err(&partial))?;
            std::io::copy(&mut (&mut prefix).take(offset), &mut hasher)
                .map_err(io_err(&partial))?;
        }
        let mut reader = body.reader;
        let mut buf = vec![0u8; 1 << 20];
        let mut have = offset;
        let mut downloaded = 0u64;
        progress(Progress {
            file: &f.path,
            done: have,
            total: f.size,
        });
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let _ = out.flush();
                    return Err(HubError::Http {
                        url: body.url,
                        what: format!(
                            "the download stopped at {have} of {} bytes ({e}); what arrived is kept in {}, pull again to resume",
                            f.size.map_or("?".to_string(), |s| s.to_string()),
                            partial.display()
                        ),
                    });
                }
            };
            out.write_all(&buf[..n]).map_err(io_err(&partial))?;
            if f.sha256.is_some() {
                hasher.update(&buf[..n]);
            }
            have += n as u64;
            downloaded += n as u64;
            progress(Progress {
                file: &f.path,
                done: have,
                total: f.size,
            });
        }
        out.sync_all().map_err(io_err(&partial))?;
        drop(out);
        let refuse = |e: HubError| {
            let _ = std::fs::remove_file(&partial);
            Err(e)
        };
        if let Some(want) = f.size
            && have != want
        {
            if have < want {
                return Err(HubError::Http {
                    url: body.url,
                    what: format!(
                        "the reply ended at {have} of {want} bytes; what arrived is kept in {}, pull again to resume",
                        partial.display()
                    ),
                });
            }
            return refuse(HubError::Size {
                repo: id.repo(),
                file: f.path.clone(),
                got: have,
                want,
            });
        }
        if let Some(want) = &f.sha256 {
            let got: String = hasher
                .finalize()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            if !got.eq_ignore_ascii_case(want) {
                return refuse(HubError::Checksum {
                    repo: id.repo(),
                    file: f.path.clone(),
                    got,
                    want: want.clone(),
                });
            }
        }
        std::fs::rename(&partial, &done).map_err(io_err(&done))?;
        self.link(&done, &link, f)?;
        Ok(downloaded)
    }

    /// The snapshot's entry for a blob: a relative link, as huggingface_hub
    /// makes it (ModelScope keeps the file itself there).
    fn link(&self, blob: &Path, link: &Path, f: &RemoteFile) -> Result<()> {
        if self.kind != HubKind::HuggingFace {
            return Ok(());
        }
        let parent = link.parent().expect("a snapshot path has a parent");
        std::fs::create_dir_all(parent).map_err(io_err(parent))?;
        let up = "../".repeat(2 + f.path.matches('/').count());
        let target = PathBuf::from(format!(
            "{up}blobs/{}",
            blob.file_name().and_then(|n| n.to_str()).unwrap_or(&f.blob)
        ));
        if std::fs::read_link(link).is_ok_and(|t| t == target) {
            return Ok(());
        }
        let _ = std::fs::remove_file(link);
        #[cfg(unix)]
        std::os::unix::fs::symlink(&target, link).map_err(io_err(link))?;
        #[cfg(not(unix))]
        std::fs::copy(blob, link).map_err(io_err(link))?;
        Ok(())
    }

    /// The model's local path from the cache alone.
    pub(crate) fn find(&self, id: &ModelId, revision: &str) -> Result<PathBuf> {
        let not = |why: String| HubError::NotCached {
            id: id.to_string(),
            cache: self.root.clone(),
            why,
        };
        let dir = match self.kind {
            HubKind::HuggingFace => {
                let repo = self.repo_dir(id);
                let by_ref = std::fs::read_to_string(repo.join("refs").join(revision))
                    .ok()
                    .map(|c| c.trim().to_string());
                let commit = by_ref.unwrap_or_else(|| revision.to_string());
                let dir = repo.join("snapshots").join(&commit);
                if !dir.is_dir() {
                    return Err(not(format!(" (no snapshot of revision {revision})")));
                }
                dir
            }
            HubKind::ModelScope => {
                let dir = self.repo_dir(id);
                let legacy = self.root.join(&id.org).join(&id.name);
                match (dir.is_dir(), legacy.is_dir()) {
                    (true, _) => dir,
                    (false, true) => legacy,
                    _ => return Err(not(String::new())),
                }
            }
        };
        let mut files = Vec::new();
        list_files(&dir, "", &mut files);
        let pick = pick_files(id, &files).map_err(|e| not(format!(" ({e})")))?;
        for f in pick.files() {
            let p = dir.join(&f.path);
            // A dangling link (its blob removed) is not a cached file.
            if !std::fs::metadata(&p).is_ok_and(|m| m.is_file()) {
                return Err(not(format!(" ({} is missing)", f.path)));
            }
        }
        Ok(match pick {
            Pick::Gguf(f) => dir.join(f.path),
            Pick::Folder(_) => dir,
        })
    }
}

/// Files below `dir` (paths relative to it), partial downloads left out.
fn list_files(dir: &Path, prefix: &str, out: &mut Vec<RemoteFile>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let Some(name) = e.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if name.starts_with('.') || name.ends_with(".incomplete") {
            continue;
        }
        let path = format!("{prefix}{name}");
        if e.path().is_dir() {
            list_files(&e.path(), &format!("{path}/"), out);
        } else {
            out.push(RemoteFile {
                path,
                size: None,
                sha256: None,
                blob: String::new(),
            });
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
}
