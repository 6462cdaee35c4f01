//! Which files of a repository make the model: one GGUF file chosen by the
//! id's pick (a file name or a quant tag, llama.cpp's `-hf` rule: no pick
//! means Q4_K_M when there is one), or, for a repository without GGUF
//! files, the checkpoint folder's files.

use crate::{HubError, ModelId, RemoteFile, Result};

/// The files to fetch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pick {
    Gguf(RemoteFile),
    /// config.json first, then the weights and tokenizer files.
    Folder(Vec<RemoteFile>),
}

impl Pick {
    pub fn files(&self) -> Vec<&RemoteFile> {
        match self {
            Pick::Gguf(f) => vec![f],
            Pick::Folder(fs) => fs.iter().collect(),
        }
    }

    /// The file whose path names the model.
    pub fn main(&self) -> &str {
        match self {
            Pick::Gguf(f) => &f.path,
            Pick::Folder(fs) => &fs[0].path,
        }
    }
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// `tag` stands in `name` as a whole word (`Q4_K` is not found in `Q4_K_M`).
fn has_tag(name: &str, tag: &str) -> bool {
    let (n, t) = (name.to_ascii_uppercase(), tag.to_ascii_uppercase());
    let word = |c: Option<char>| c.is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
    n.match_indices(&t)
        .any(|(i, _)| word(n[..i].chars().last()) && word(n[i + t.len()..].chars().next()))
}

/// A split GGUF's part name: `…-00001-of-00003.gguf`.
fn is_split_part(name: &str) -> bool {
    let stem = name.trim_end_matches(".gguf");
    let mut parts = stem.rsplitn(4, '-');
    let (total, of, index) = (parts.next(), parts.next(), parts.next());
    of == Some("of")
        && [total, index]
            .iter()
            .all(|p| p.is_some_and(|p| p.len() == 5 && p.chars().all(|c| c.is_ascii_digit())))
}

/// Chooses the model's files among `files`.
pub fn pick_files(id: &ModelId, files: &[RemoteFile]) -> Result<Pick> {
    let repo = id.repo();
    // Vision projectors are a second file of a model, never the model.
    let ggufs: Vec<&RemoteFile> = files
        .iter()
        .filter(|f| f.path.ends_with(".gguf") && !file_name(&f.path).starts_with("mmproj"))
        .collect();
    let names = |fs: &[&RemoteFile]| {
        fs.iter()
            .map(|f| f.path.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let one = |matched: Vec<&RemoteFile>, what: &str| -> Result<Pick> {
        match matched.as_slice() {
            [f] if is_split_part(file_name(&f.path)) => Err(split(&repo, f)),
            [f] => Ok(Pick::Gguf((*f).clone())),
            [] => Err(HubError::Pick(format!(
                "{repo} has no GGUF file {what}; its GGUF files: {}",
                if ggufs.is_empty() {
                    "none".to_string()
                } else {
                    names(&ggufs)
                }
            ))),
            many if many.iter().all(|f| is_split_part(file_name(&f.path))) => {
                Err(split(&repo, many[0]))
            }
            many => Err(HubError::Pick(format!(
                "{repo} has several GGUF files {what} ({}); name one: {repo}:FILE.gguf",
                names(many)
            ))),
        }
    };
    match id.pick.as_deref() {
        Some(p) if p.ends_with(".gguf") => one(
            ggufs
                .iter()
                .copied()
                .filter(|f| f.path == p || file_name(&f.path) == p)
                .collect(),
            &format!("named {p}"),
        ),
        Some(tag) => one(
            ggufs
                .iter()
                .copied()
                .filter(|f| has_tag(file_name(&f.path), tag))
                .collect(),
            &format!("tagged {tag}"),
        ),
        None if ggufs.len() == 1 => one(ggufs.clone(), ""),
        None if !ggufs.is_empty() => {
            let q4km: Vec<&RemoteFile> = ggufs
                .iter()
                .copied()
                .filter(|f| has_tag(file_name(&f.path), "Q4_K_M"))
                .collect();
            if q4km.is_empty() {
                return Err(HubError::Pick(format!(
                    "{repo} has several GGUF files and none is Q4_K_M ({}); pick one: {repo}:QUANT or {repo}:FILE.gguf",
                    names(&ggufs)
                )));
            }
            one(q4km, "tagged Q4_K_M")
        }
        None => folder(&repo, files),
    }
}

fn split(repo: &str, f: &RemoteFile) -> HubError {
    HubError::Pick(format!(
        "{} of {repo} is one part of a split GGUF file, which tiletune cannot load yet; merge the parts with llama.cpp's llama-gguf-split --merge, or pick an unsplit file",
        f.path
    ))
}

/// A checkpoint folder: config.json and what loading it reads.
fn folder(repo: &str, files: &[RemoteFile]) -> Result<Pick> {
    let top = |f: &&RemoteFile| !f.path.contains('/');
    let Some(config) = files.iter().filter(top).find(|f| f.path == "config.json") else {
        return Err(HubError::Pick(format!(
            "{repo} holds neither a GGUF file nor a Hugging Face checkpoint (config.json); check the id"
        )));
    };
    let wanted = |p: &str| {
        p.ends_with(".safetensors")
            || p == "model.safetensors.index.json"
            || p == "tokenizer.json"
            || p == "tokenizer_config.json"
            || p == "generation_config.json"
    };
    let mut out = vec![config.clone()];
    out.extend(
        files
            .iter()
            .filter(top)
            .filter(|f| wanted(&f.path))
            .cloned(),
    );
    if !out.iter().any(|f| f.path.ends_with(".safetensors")) {
        return Err(HubError::Pick(format!(
            "{repo} has a config.json but no .safetensors weights (pytorch .bin files are not read); use a safetensors or GGUF repository"
        )));
    }
    Ok(Pick::Folder(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(paths: &[&str]) -> Vec<RemoteFile> {
        paths
            .iter()
            .map(|p| RemoteFile {
                path: p.to_string(),
                size: None,
                sha256: None,
                blob: p.to_string(),
            })
            .collect()
    }

    fn picked(id: &str, fs: &[&str]) -> Result<String> {
        pick_files(&ModelId::parse(id).unwrap(), &files(fs)).map(|p| p.main().to_string())
    }

    #[test]
    fn a_quant_tag_picks_its_file_as_a_whole_word() {
        let fs = [
            "README.md",
            "m-Q4_K.gguf",
            "m-Q4_K_M.gguf",
            "m-q8_0.gguf",
            "mmproj-m-f16.gguf",
        ];
        assert_eq!(picked("a/b:Q4_K_M", &fs).unwrap(), "m-Q4_K_M.gguf");
        assert_eq!(picked("a/b:q4_k", &fs).unwrap(), "m-Q4_K.gguf");
        assert_eq!(picked("a/b:Q8_0", &fs).unwrap(), "m-q8_0.gguf");
        assert_eq!(picked("a/b", &fs).unwrap(), "m-Q4_K_M.gguf");
        assert_eq!(picked("a/b:m-q8_0.gguf", &fs).unwrap(), "m-q8_0.gguf");
        let e = picked("a/b:Q5_K_M", &fs).unwrap_err().to_string();
        assert!(
            e.contains("no GGUF file tagged Q5_K_M") && e.contains("m-q8_0.gguf"),
            "{e}"
        );
        let e = picked("a/b", &["x-q8_0.gguf", "x-f16.gguf"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("none is Q4_K_M"), "{e}");
        assert_eq!(
            picked("a/b", &["only.gguf", "mmproj.gguf"]).unwrap(),
            "only.gguf"
        );
        let e = picked(
            "a/b:Q4_K_M",
            &[
                "m-Q4_K_M-00001-of-00002.gguf",
                "m-Q4_K_M-00002-of-00002.gguf",
            ],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("split"), "{e}");
    }

    #[test]
    fn a_checkpoint_repository_is_a_folder() {
        let fs = [
            "config.json",
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
            "model.safetensors.index.json",
            "tokenizer.json",
            "README.md",
            "onnx/model.onnx",
        ];
        let p = pick_files(&ModelId::parse("Qwen/Qwen3-0.6B").unwrap(), &files(&fs)).unwrap();
        let got: Vec<&str> = p.files().iter().map(|f| f.path.as_str()).collect();
        assert_eq!(got[0], "config.json");
        assert_eq!(got.len(), 5, "{got:?}");
        let e = picked("a/b", &["config.json", "pytorch_model.bin"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("no .safetensors"), "{e}");
        let e = picked("a/b", &["README.md"]).unwrap_err().to_string();
        assert!(e.contains("neither a GGUF file"), "{e}");
    }

    #[test]
    fn ids_parse_and_hostile_ones_are_refused() {
        let id = ModelId::parse("Qwen/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M").unwrap();
        assert_eq!(id.repo(), "Qwen/Qwen2.5-0.5B-Instruct-GGUF");
        assert_eq!(id.pick.as_deref(), Some("Q4_K_M"));
        assert_eq!(id.to_string(), "Qwen/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M");
        for bad in [
            "qwen",
            "a/b/c",
            "../x",
            "a/..",
            "a/b:",
            "a/b:../../etc/passwd",
            "a /b",
            "/a",
            "a/.git",
        ] {
            assert!(ModelId::parse(bad).is_err(), "{bad}");
        }
    }
}
