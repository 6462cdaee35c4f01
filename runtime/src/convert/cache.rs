//! The conversion cache behind `--model HF_DIR`: each (folder contents,
//! file type) is converted once to `<key>.gguf` under a cache directory,
//! beside a `<key>.json` record of where it came from, so the cache can be
//! listed and cleaned (`tiletune cache list|clean`) instead of growing
//! unseen.
//!
//! The key hashes the folder's contents, which is what makes a hit safe, and
//! listing tells whether an image is still current the same way: by hashing
//! its source folder again (a checkpoint's size and modification time can
//! stay the same while its contents change).

use super::{Bf16Weights, CONVERTER_VERSION, Image, TokenizerKeys};
use crate::error::{LoadError, Result};
use crate::quantize::{self, FileType, QuantizeOptions};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

fn io(path: &Path, source: std::io::Error) -> LoadError {
    LoadError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The regular files of `dir` (links followed, as the loader reads them),
/// sorted by name, with their metadata.
fn folder_files(dir: &Path) -> Result<Vec<(PathBuf, std::fs::Metadata)>> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| io(dir, e))?
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(|e| io(dir, e))?;
    entries.sort_by_key(|e| e.file_name());
    let mut out = Vec::new();
    for e in entries {
        let path = e.path();
        let md = std::fs::metadata(&path).map_err(|err| io(&path, err))?;
        if md.is_file() {
            out.push((path, md));
        }
    }
    Ok(out)
}

/// Cache key: converter version, weight type, and every file's name and
/// contents. Contents, not size and modification time: a checkpoint
/// replaced by another of the same size with its mtime kept (a copy with
/// `cp -p`, an unpacked archive, a sync tool) must not reuse the old image.
/// The price is reading every file once per start (the cached image is then
/// mapped, not converted).
fn cache_key(dir: &Path, quant: Option<FileType>) -> Result<String> {
    let mut h = Sha256::new();
    h.update(CONVERTER_VERSION.to_le_bytes());
    h.update(quant.map_or("native", FileType::name).as_bytes());
    for (path, _) in folder_files(dir)? {
        h.update(path.file_name().unwrap_or_default().as_encoded_bytes());
        h.update([0]);
        let mut f = std::fs::File::open(&path).map_err(|err| io(&path, err))?;
        let n = std::io::copy(&mut f, &mut h).map_err(|err| io(&path, err))?;
        h.update(n.to_le_bytes());
    }
    let digest = h.finalize();
    Ok(digest.iter().take(16).map(|b| format!("{b:02x}")).collect())
}

/// The default cache directory: `$XDG_CACHE_HOME/tiletune/converted`, else
/// `$HOME/.cache/tiletune/converted`, else the system temp directory.
pub fn default_cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|s| !s.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        })
        .unwrap_or_else(std::env::temp_dir);
    base.join("tiletune").join("converted")
}

/// The `<key>.json` beside each image.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    source: PathBuf,
    file_type: String,
    converter_version: u32,
    created: u64,
}

/// Writes `bytes` to `path` through a temporary file renamed into place, so
/// a reader never sees a partial file.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = tmp_path(path);
    std::fs::write(&tmp, bytes).map_err(|e| io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(path, e)
    })
}

/// `<file>.tmp<pid>`: a writer's temporary name, which [`clean`] recognises.
fn tmp_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".tmp{}", std::process::id()));
    PathBuf::from(s)
}

/// The path of `dir` converted with `quant` under `cache_dir`, converting
/// first if no cached image exists. The image is written to a temporary file
/// and renamed into place, so a reader never sees a partial file; its record
/// follows it.
pub fn cached_gguf(dir: &Path, quant: Option<FileType>, cache_dir: &Path) -> Result<PathBuf> {
    if !dir.join("config.json").is_file() {
        return Err(LoadError::Config(format!(
            "{} has no config.json; pass a GGUF file or a Hugging Face model folder (config.json + *.safetensors)",
            dir.display()
        )));
    }
    let key = cache_key(dir, quant)?;
    let path = cache_dir.join(format!("{key}.gguf"));
    if path.is_file() {
        return Ok(path);
    }
    let bf16 = match quant {
        Some(_) => Bf16Weights::Keep,
        None => Bf16Weights::Widen,
    };
    let image = Image::open(dir, TokenizerKeys::WhenNamed, bf16)?;
    std::fs::create_dir_all(cache_dir).map_err(|e| io(cache_dir, e))?;
    match quant {
        Some(ft) => {
            let g = image.write_mapped(cache_dir, |_, _| {})?;
            let o = QuantizeOptions::new(ft);
            let plan = quantize::plan(&g, &o)?;
            quantize::quantize(&g, &o, &plan, &path, |_, _| {})?;
        }
        None => {
            image.write(&path, |_, _| {})?;
        }
    }
    let record = Record {
        source: std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf()),
        file_type: quant.map_or("native".into(), |q| q.name().to_string()),
        converter_version: CONVERTER_VERSION,
        created: std::time::SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    };
    let json = serde_json::to_vec_pretty(&record).expect("a record serializes");
    write_atomic(&cache_dir.join(format!("{key}.json")), &json)?;
    Ok(path)
}

/// Whether a cached image can still be hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheState {
    /// Its folder is there with the contents it was converted from: the
    /// next run of that folder uses it.
    Current,
    /// Its folder is there but its files differ: a run converts anew.
    Changed,
    /// Its folder is gone.
    SourceMissing,
    /// Written by a converter of another version: never read again.
    Outdated,
    /// No readable record (an image from before records were kept).
    Unknown,
}

impl CacheState {
    /// Lowercase words for listings.
    pub fn describe(self) -> &'static str {
        match self {
            CacheState::Current => "current",
            CacheState::Changed => "source changed",
            CacheState::SourceMissing => "source missing",
            CacheState::Outdated => "older converter",
            CacheState::Unknown => "no record",
        }
    }

    /// Whether [`clean`] removes it without `all`: an image no run can hit
    /// again. An image without a record may still be hit, so it stays.
    pub fn is_stale(self) -> bool {
        matches!(
            self,
            CacheState::Changed | CacheState::SourceMissing | CacheState::Outdated
        )
    }
}

/// One cached image.
#[derive(Debug, Clone)]
pub struct CacheEntry {
    pub key: String,
    pub path: PathBuf,
    pub bytes: u64,
    /// The folder it was converted from, when the record says.
    pub source: Option<PathBuf>,
    /// The file type (`native` or a quantize type name), when known.
    pub file_type: Option<String>,
    /// Unix seconds of the conversion (the file's mtime without a record).
    pub created: u64,
    pub state: CacheState,
}

/// Every image in `cache_dir`, oldest first; an absent directory is an
/// empty cache. Each source folder still there is read in full, to hash it.
pub fn list(cache_dir: &Path) -> Result<Vec<CacheEntry>> {
    let rd = match std::fs::read_dir(cache_dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(cache_dir, e)),
    };
    let mut out = Vec::new();
    for e in rd {
        let e = e.map_err(|err| io(cache_dir, err))?;
        let path = e.path();
        let Some(key) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".gguf"))
        else {
            continue;
        };
        let md = std::fs::metadata(&path).map_err(|err| io(&path, err))?;
        if !md.is_file() {
            continue;
        }
        let record: Option<Record> = std::fs::read(cache_dir.join(format!("{key}.json")))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        let mtime = md
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs());
        let state = match &record {
            None => CacheState::Unknown,
            Some(r) if r.converter_version != CONVERTER_VERSION => CacheState::Outdated,
            Some(r) if !r.source.is_dir() => CacheState::SourceMissing,
            Some(r) => {
                let quant = match r.file_type.as_str() {
                    "native" => Ok(None),
                    t => FileType::parse(t).map(Some),
                };
                match quant.ok().map(|q| cache_key(&r.source, q)) {
                    Some(Ok(k)) if k == key => CacheState::Current,
                    _ => CacheState::Changed,
                }
            }
        };
        out.push(CacheEntry {
            key: key.to_string(),
            path: path.clone(),
            bytes: md.len(),
            source: record.as_ref().map(|r| r.source.clone()),
            file_type: record.as_ref().map(|r| r.file_type.clone()),
            created: record.as_ref().map_or(mtime, |r| r.created),
            state,
        });
    }
    out.sort_by(|a, b| a.created.cmp(&b.created).then(a.key.cmp(&b.key)));
    Ok(out)
}

/// What [`clean`] removed.
#[derive(Debug, Clone, Default)]
pub struct Cleaned {
    /// The images removed (with their records).
    pub removed: Vec<CacheEntry>,
    /// Temporary files of conversions that did not finish.
    pub partial: Vec<PathBuf>,
    /// Bytes freed.
    pub bytes: u64,
}

/// Removes the stale images of `cache_dir` ([`CacheState::is_stale`]), or
/// every image with `all`, with their records, and the temporary files of
/// writers that are no longer running.
pub fn clean(cache_dir: &Path, all: bool) -> Result<Cleaned> {
    let mut done = Cleaned::default();
    for e in list(cache_dir)? {
        if !(all || e.state.is_stale()) {
            continue;
        }
        std::fs::remove_file(&e.path).map_err(|err| io(&e.path, err))?;
        let _ = std::fs::remove_file(cache_dir.join(format!("{}.json", e.key)));
        done.bytes += e.bytes;
        done.removed.push(e);
    }
    let Ok(rd) = std::fs::read_dir(cache_dir) else {
        return Ok(done);
    };
    for e in rd.flatten() {
        let path = e.path();
        let Some(pid) = path
            .extension()
            .and_then(|x| x.to_str())
            .and_then(|x| x.strip_prefix("tmp"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if writer_alive(pid) {
            continue;
        }
        let bytes = e.metadata().map_or(0, |m| m.len());
        if std::fs::remove_file(&path).is_ok() {
            done.bytes += bytes;
            done.partial.push(path);
        }
    }
    Ok(done)
}

/// Whether process `pid` still runs (Linux `/proc`; elsewhere a temporary
/// file is taken as live and left alone).
fn writer_alive(pid: u32) -> bool {
    if !Path::new("/proc/self").exists() {
        return true;
    }
    pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_takes_dead_writers_files_and_leaves_live_ones() {
        let dir = tempfile::tempdir().unwrap();
        let dead = dir.path().join("aa.gguf.tmp4294967295");
        let live = dir
            .path()
            .join(format!("bb.gguf.tmp{}", std::process::id()));
        let other = dir.path().join("notes.txt");
        for p in [&dead, &live, &other] {
            std::fs::write(p, b"x").unwrap();
        }
        let done = clean(dir.path(), false).unwrap();
        assert_eq!(done.partial, vec![dead.clone()]);
        assert!(!dead.exists() && live.exists() && other.exists());
    }

    #[test]
    fn images_without_a_record_are_listed_but_not_stale() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("0123.gguf"), b"GGUF").unwrap();
        let l = list(dir.path()).unwrap();
        assert_eq!(l.len(), 1);
        assert_eq!(
            (l[0].key.as_str(), l[0].state),
            ("0123", CacheState::Unknown)
        );
        assert!(clean(dir.path(), false).unwrap().removed.is_empty());
        assert_eq!(clean(dir.path(), true).unwrap().removed.len(), 1);
        assert!(list(dir.path()).unwrap().is_empty());
        assert!(list(&dir.path().join("absent")).unwrap().is_empty());
    }
}
