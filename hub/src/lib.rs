//! Models by id: `ORG/NAME[:PICK]` resolved on Hugging Face or ModelScope,
//! downloaded (resumable, checksummed against the hub's metadata) into the
//! hub's own cache layout, so a model fetched by `huggingface-cli` or
//! `modelscope` is found offline and one fetched here is found by them.
//!
//! - [`ModelId`] parses the id; `PICK` is a GGUF file name or a quant tag
//!   (`Q4_K_M`), as llama.cpp's `-hf org/name:tag` takes it.
//! - [`Hub`] is where from: endpoints from `HF_ENDPOINT` /
//!   `MODELSCOPE_ENDPOINT`, tokens from `HF_TOKEN` (or the token file
//!   `huggingface-cli login` writes) / `MODELSCOPE_API_TOKEN`.
//! - [`Cache`] is the layout: huggingface_hub's `models--org--name/{blobs,
//!   snapshots, refs}`, or ModelScope's `models/org/name/`.
//! - [`pull`] lists the repository, picks the files, downloads what the
//!   cache lacks and returns the local path; [`find_cached`] does the same
//!   from the cache alone.

mod cache;
mod http;
mod pick;

pub use cache::Cache;
pub use pick::{Pick, pick_files};

use std::path::{Path, PathBuf};

/// Errors of the hub crate; messages say what to do next.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error(
        "`{0}` is not a model id; use ORG/NAME, ORG/NAME:QUANT or ORG/NAME:FILE.gguf (e.g. Qwen/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M)"
    )]
    BadId(String),
    #[error("{url}: {what}")]
    Http { url: String, what: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Pick(String),
    #[error(
        "{file} of {repo}: sha256 {got}, but the hub lists {want}; the download is corrupt and was removed, pull again"
    )]
    Checksum {
        repo: String,
        file: String,
        got: String,
        want: String,
    },
    #[error(
        "{file} of {repo}: {got} bytes, but the hub lists {want}; the download is incomplete or corrupt and was removed, pull again"
    )]
    Size {
        repo: String,
        file: String,
        got: u64,
        want: u64,
    },
    #[error(
        "{id} is not in the cache at {cache}{why}; run `tiletune pull {id}` while online (or drop --offline)"
    )]
    NotCached {
        id: String,
        cache: PathBuf,
        why: String,
    },
}

pub type Result<T> = std::result::Result<T, HubError>;

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> HubError + '_ {
    move |source| HubError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// `ORG/NAME[:PICK]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelId {
    pub org: String,
    pub name: String,
    pub pick: Option<String>,
}

impl ModelId {
    /// Parses an id; `None`-free: anything else is [`HubError::BadId`].
    pub fn parse(s: &str) -> Result<Self> {
        let bad = || HubError::BadId(s.to_string());
        let (repo, pick) = match s.split_once(':') {
            Some((r, p)) if !p.is_empty() => (r, Some(p.to_string())),
            Some(_) => return Err(bad()),
            None => (s, None),
        };
        let (org, name) = repo.split_once('/').ok_or_else(bad)?;
        let ok = |p: &str| {
            !p.is_empty()
                && !p.starts_with('.')
                && p.len() <= 96
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        if !ok(org) || !ok(name) {
            return Err(bad());
        }
        if let Some(p) = &pick
            && (p.contains("..") || p.starts_with('/') || p.contains('\\'))
        {
            return Err(bad());
        }
        Ok(ModelId {
            org: org.to_string(),
            name: name.to_string(),
            pick,
        })
    }

    /// Whether `s` should be read as an id rather than a path: it parses,
    /// and nothing exists at that path.
    pub fn looks_like(s: &str) -> bool {
        !Path::new(s).exists() && Self::parse(s).is_ok()
    }

    pub fn repo(&self) -> String {
        format!("{}/{}", self.org, self.name)
    }
}

impl std::fmt::Display for ModelId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.org, self.name)?;
        if let Some(p) = &self.pick {
            write!(f, ":{p}")?;
        }
        Ok(())
    }
}

/// Which hub.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HubKind {
    HuggingFace,
    ModelScope,
}

impl HubKind {
    pub fn parse(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "hf" | "huggingface" | "hugging-face" => Ok(Self::HuggingFace),
            "modelscope" | "ms" => Ok(Self::ModelScope),
            _ => Err(format!("`{s}` is not a hub; use hf or modelscope")),
        }
    }
}

/// A hub endpoint and its credentials.
#[derive(Clone, Debug)]
pub struct Hub {
    pub kind: HubKind,
    /// Without a trailing slash.
    pub endpoint: String,
    pub token: Option<String>,
}

impl Hub {
    /// The hub as the environment configures it (`HF_ENDPOINT`, `HF_TOKEN`
    /// or the login token file; `MODELSCOPE_ENDPOINT`, `MODELSCOPE_API_TOKEN`).
    pub fn from_env(kind: HubKind) -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let (endpoint, token) = match kind {
            HubKind::HuggingFace => (
                var("HF_ENDPOINT").unwrap_or_else(|| "https://huggingface.co".into()),
                var("HF_TOKEN")
                    .or_else(|| var("HUGGING_FACE_HUB_TOKEN"))
                    .or_else(hf_token_file),
            ),
            HubKind::ModelScope => (
                var("MODELSCOPE_ENDPOINT").unwrap_or_else(|| "https://www.modelscope.cn".into()),
                var("MODELSCOPE_API_TOKEN"),
            ),
        };
        Hub {
            kind,
            endpoint: endpoint.trim_end_matches('/').to_string(),
            token: token.map(|t| t.trim().to_string()),
        }
    }
}

/// The token `huggingface-cli login` saved: `HF_TOKEN_PATH`, else
/// `$HF_HOME/token`, else `~/.cache/huggingface/token`.
fn hf_token_file() -> Option<String> {
    let path = std::env::var_os("HF_TOKEN_PATH")
        .map(PathBuf::from)
        .or_else(|| cache::hf_home().map(|h| h.join("token")))?;
    std::fs::read_to_string(path)
        .ok()
        .filter(|t| !t.trim().is_empty())
}

/// One file of a repository, as the hub lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteFile {
    pub path: String,
    pub size: Option<u64>,
    /// The content's sha256, when the hub lists it (Hugging Face: LFS files;
    /// ModelScope: every file).
    pub sha256: Option<String>,
    /// The name of its blob in the Hugging Face cache (the sha256 of an LFS
    /// file, else the git blob id).
    pub blob: String,
}

/// A repository's files at one commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listing {
    pub commit: String,
    pub files: Vec<RemoteFile>,
}

/// Download progress of one file.
#[derive(Clone, Copy, Debug)]
pub struct Progress<'a> {
    pub file: &'a str,
    pub done: u64,
    pub total: Option<u64>,
}

/// What [`pull`] does.
#[derive(Clone, Debug)]
pub struct PullOptions {
    pub revision: String,
    /// Only the cache: no request is made.
    pub offline: bool,
}

impl Default for PullOptions {
    fn default() -> Self {
        PullOptions {
            revision: "main".into(),
            offline: false,
        }
    }
}

/// Where a pulled model is: a GGUF file, or a folder (a Hugging Face
/// checkpoint: config.json, safetensors, tokenizer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pulled {
    pub path: PathBuf,
    /// Bytes downloaded now (0: all from the cache).
    pub downloaded: u64,
}

/// Lists the repository, picks the model's files, downloads those the cache
/// lacks (resuming a partial download) and returns the local path.
pub fn pull(
    hub: &Hub,
    cache: &Cache,
    id: &ModelId,
    o: &PullOptions,
    mut progress: impl FnMut(Progress<'_>),
) -> Result<Pulled> {
    if o.offline {
        return find_cached(cache, id, &o.revision).map(|path| Pulled {
            path,
            downloaded: 0,
        });
    }
    let client = http::Client::new(hub);
    let listing = client.list(id, &o.revision)?;
    let pick = pick_files(id, &listing.files)?;
    let mut downloaded = 0;
    for f in pick.files() {
        downloaded += cache.fetch(&client, id, &listing.commit, f, &mut progress)?;
    }
    cache.set_ref(id, &o.revision, &listing.commit)?;
    let path = cache.snapshot_path(id, &listing.commit, pick.main());
    Ok(Pulled {
        path: match pick {
            Pick::Gguf(_) => path,
            Pick::Folder(_) => cache.snapshot_dir(id, &listing.commit),
        },
        downloaded,
    })
}

/// The local path of `id` from the cache alone.
pub fn find_cached(cache: &Cache, id: &ModelId, revision: &str) -> Result<PathBuf> {
    cache.find(id, revision)
}
