//! safetensors reading over a memory map, and Hugging Face model folders
//! (`config.json`, `model.safetensors` or shards listed in
//! `model.safetensors.index.json`, `tokenizer.json`, `generation_config.json`).
//!
//! Format: an 8-byte little-endian header length N, N bytes of JSON mapping
//! tensor names to `{dtype, shape, data_offsets: [begin, end]}` (offsets
//! relative to the byte after the header; optional `__metadata__`), then the
//! data. Every entry is checked: known dtype, size = product(shape) × dtype
//! size with checked arithmetic, inside the file, no overlaps.

use crate::config::ModelConfig;
use crate::error::{LoadError, Result};
use crate::tokenizer::Tokenizer;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Largest JSON header accepted; real headers are well under 10 MB.
const MAX_HEADER: u64 = 100 << 20;

/// Element types of safetensors tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StDtype {
    F32,
    F16,
    BF16,
    F64,
    I64,
    I32,
    I16,
    I8,
    U8,
    Bool,
}

impl StDtype {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "F32" => Self::F32,
            "F16" => Self::F16,
            "BF16" => Self::BF16,
            "F64" => Self::F64,
            "I64" => Self::I64,
            "I32" => Self::I32,
            "I16" => Self::I16,
            "I8" => Self::I8,
            "U8" => Self::U8,
            "BOOL" => Self::Bool,
            _ => return None,
        })
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Self::F64 | Self::I64 => 8,
            Self::F32 | Self::I32 => 4,
            Self::F16 | Self::BF16 | Self::I16 => 2,
            Self::I8 | Self::U8 | Self::Bool => 1,
        }
    }
}

/// One tensor's entry in the header.
#[derive(Clone, Debug, PartialEq)]
pub struct StTensorInfo {
    pub name: String,
    pub dtype: StDtype,
    /// Row-major, outermost first (PyTorch order).
    pub shape: Vec<usize>,
    /// Absolute byte range in the file.
    pub range: std::ops::Range<usize>,
}

enum Backing {
    Mmap(memmap2::Mmap),
    Owned(Vec<u8>),
}

/// One parsed safetensors file.
pub struct SafetensorsFile {
    path: PathBuf,
    backing: Backing,
    tensors: Vec<StTensorInfo>,
    index: HashMap<String, usize>,
    metadata: HashMap<String, String>,
}

impl std::fmt::Debug for SafetensorsFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SafetensorsFile")
            .field("path", &self.path)
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl SafetensorsFile {
    /// Memory-maps and parses `path`.
    pub fn open(path: &Path) -> Result<Self> {
        let io = |source| LoadError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = crate::input::open_regular(path)?;
        // SAFETY: read-only private map; model files are not modified while in use.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Self::parse(path.to_path_buf(), Backing::Mmap(map))
    }

    /// Parses an in-memory image (tests).
    pub fn from_vec(bytes: Vec<u8>) -> Result<Self> {
        Self::parse(PathBuf::from("<memory>"), Backing::Owned(bytes))
    }

    fn parse(path: PathBuf, backing: Backing) -> Result<Self> {
        let bytes: &[u8] = match &backing {
            Backing::Mmap(m) => m,
            Backing::Owned(v) => v,
        };
        let bad = |what: String| LoadError::Safetensors {
            path: path.clone(),
            what,
        };
        let Some(len_bytes) = bytes.get(..8) else {
            return Err(bad(format!(
                "file of {} bytes is shorter than the 8-byte header length",
                bytes.len()
            )));
        };
        let n = u64::from_le_bytes(len_bytes.try_into().expect("8 bytes"));
        let avail = bytes.len() as u64 - 8;
        if n > avail || n > MAX_HEADER {
            return Err(bad(format!(
                "header length {n} exceeds the file ({avail} bytes after it) or {MAX_HEADER}"
            )));
        }
        let data_start = 8 + n as usize;
        let header: Value = serde_json::from_slice(&bytes[8..data_start])
            .map_err(|e| bad(format!("header is not valid json: {e}")))?;
        let obj = header
            .as_object()
            .ok_or_else(|| bad("header is not a json object".into()))?;
        let data_len = bytes.len() - data_start;
        let mut tensors = Vec::with_capacity(obj.len());
        let mut metadata = HashMap::new();
        for (name, entry) in obj {
            if name == "__metadata__" {
                if let Some(m) = entry.as_object() {
                    for (k, v) in m {
                        metadata.insert(k.clone(), v.as_str().unwrap_or_default().to_string());
                    }
                }
                continue;
            }
            let tbad = |what: &str| bad(format!("tensor `{name}`: {what}"));
            let dtype_s = entry
                .get("dtype")
                .and_then(Value::as_str)
                .ok_or_else(|| tbad("no dtype"))?;
            let dtype = StDtype::parse(dtype_s)
                .ok_or_else(|| tbad(&format!("dtype {dtype_s} is not supported")))?;
            let shape = entry
                .get("shape")
                .and_then(Value::as_array)
                .ok_or_else(|| tbad("no shape"))?
                .iter()
                .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
                .collect::<Option<Vec<usize>>>()
                .ok_or_else(|| tbad("shape is not a list of sizes"))?;
            let offs = entry
                .get("data_offsets")
                .and_then(Value::as_array)
                .filter(|a| a.len() == 2)
                .and_then(|a| Some((a[0].as_u64()?, a[1].as_u64()?)))
                .ok_or_else(|| tbad("data_offsets is not [begin, end]"))?;
            let (b, e) = offs;
            if b > e || e > data_len as u64 {
                return Err(tbad(&format!(
                    "data_offsets [{b}, {e}] are outside the {data_len} data bytes"
                )));
            }
            let want = shape
                .iter()
                .try_fold(dtype.size(), |a, &d| a.checked_mul(d))
                .ok_or_else(|| tbad("shape overflows"))?;
            if want as u64 != e - b {
                return Err(tbad(&format!(
                    "shape {shape:?} of {dtype_s} needs {want} bytes, data_offsets give {}",
                    e - b
                )));
            }
            tensors.push(StTensorInfo {
                name: name.clone(),
                dtype,
                shape,
                range: data_start + b as usize..data_start + e as usize,
            });
        }
        let mut by_start: Vec<&StTensorInfo> =
            tensors.iter().filter(|t| !t.range.is_empty()).collect();
        by_start.sort_by_key(|t| t.range.start);
        for w in by_start.windows(2) {
            if w[1].range.start < w[0].range.end {
                return Err(bad(format!(
                    "tensors `{}` and `{}` overlap",
                    w[0].name, w[1].name
                )));
            }
        }
        let index = tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(SafetensorsFile {
            path,
            backing,
            tensors,
            index,
            metadata,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// All tensor entries (header order is not preserved by JSON maps).
    pub fn tensors(&self) -> &[StTensorInfo] {
        &self.tensors
    }

    /// `__metadata__` string pairs.
    pub fn metadata(&self) -> &HashMap<String, String> {
        &self.metadata
    }

    /// A tensor's entry and raw bytes.
    pub fn tensor(&self, name: &str) -> Result<(&StTensorInfo, &[u8])> {
        let t = self
            .index
            .get(name)
            .map(|&i| &self.tensors[i])
            .ok_or_else(|| LoadError::MissingTensor {
                path: self.path.clone(),
                name: name.to_string(),
            })?;
        let bytes: &[u8] = match &self.backing {
            Backing::Mmap(m) => m,
            Backing::Owned(v) => v,
        };
        Ok((t, &bytes[t.range.clone()]))
    }

    /// Lets the OS drop the resident pages of `data` (a slice this file
    /// returned) once its bytes have been used
    /// ([`crate::input::release_mapped`]); a no-op for an in-memory image or
    /// a slice from elsewhere.
    pub fn release(&self, data: &[u8]) {
        if let Backing::Mmap(m) = &self.backing {
            crate::input::release_mapped(m, data);
        }
    }

    /// A float tensor converted to f32 (from F32, F16 or BF16).
    pub fn tensor_f32(&self, name: &str) -> Result<(Vec<usize>, Vec<f32>)> {
        let (t, b) = self.tensor(name)?;
        let v = match t.dtype {
            StDtype::F32 => b
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().expect("4")))
                .collect(),
            StDtype::F16 => b
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes(c.try_into().expect("2")).to_f32())
                .collect(),
            StDtype::BF16 => b
                .chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes(c.try_into().expect("2")).to_f32())
                .collect(),
            other => {
                return Err(LoadError::BadTensor {
                    path: self.path.clone(),
                    tensor: name.to_string(),
                    what: format!("dtype {other:?} is not a float type; expected F32, F16 or BF16"),
                });
            }
        };
        Ok((t.shape.clone(), v))
    }
}

/// The weights of a model folder: one file or shards.
pub struct SafetensorsModel {
    files: Vec<SafetensorsFile>,
    owner: HashMap<String, usize>,
}

impl SafetensorsModel {
    /// Opens `dir/model.safetensors.index.json` (shards) or `dir/model.safetensors`.
    pub fn open_dir(dir: &Path) -> Result<Self> {
        let index = dir.join("model.safetensors.index.json");
        let names: Vec<String> = if index.exists() {
            let text = crate::input::read_text(&index, crate::input::JSON_LIMIT)?;
            let v: Value = serde_json::from_str(&text).map_err(|source| LoadError::Json {
                path: index.clone(),
                source,
            })?;
            let map = v
                .get("weight_map")
                .and_then(Value::as_object)
                .ok_or_else(|| LoadError::Safetensors {
                    path: index.clone(),
                    what: "no weight_map object".into(),
                })?;
            let mut files: Vec<String> = map
                .values()
                .filter_map(|f| f.as_str().map(String::from))
                .collect();
            files.sort();
            files.dedup();
            for f in &files {
                // Shard names come from the file: never leave the folder.
                if f.contains('/') || f.contains('\\') || f == ".." {
                    return Err(LoadError::Safetensors {
                        path: index.clone(),
                        what: format!("shard name `{f}` is not a plain file name"),
                    });
                }
            }
            files
        } else {
            vec!["model.safetensors".to_string()]
        };
        let mut files = Vec::with_capacity(names.len());
        let mut owner = HashMap::new();
        for (i, n) in names.iter().enumerate() {
            let f = SafetensorsFile::open(&dir.join(n))?;
            for t in f.tensors() {
                if owner.insert(t.name.clone(), i).is_some() {
                    return Err(LoadError::Safetensors {
                        path: dir.join(n),
                        what: format!("tensor `{}` appears in more than one shard", t.name),
                    });
                }
            }
            files.push(f);
        }
        Ok(SafetensorsModel { files, owner })
    }

    /// Tensor names across all shards.
    pub fn tensor_names(&self) -> impl Iterator<Item = &str> {
        self.owner.keys().map(String::as_str)
    }

    /// True if the model holds `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.owner.contains_key(name)
    }

    /// A tensor's entry and bytes, from whichever shard holds it.
    pub fn tensor(&self, name: &str) -> Result<(&StTensorInfo, &[u8])> {
        match self.owner.get(name) {
            Some(&i) => self.files[i].tensor(name),
            None => Err(self.missing(name)),
        }
    }

    fn missing(&self, name: &str) -> LoadError {
        LoadError::MissingTensor {
            path: self
                .files
                .first()
                .map(|f| f.path().to_path_buf())
                .unwrap_or_default(),
            name: name.to_string(),
        }
    }

    /// Lets the OS drop the resident pages of `data`, a slice of a tensor
    /// this model returned ([`SafetensorsFile::release`]).
    pub fn release(&self, data: &[u8]) {
        for f in &self.files {
            f.release(data);
        }
    }

    /// A float tensor as f32.
    pub fn tensor_f32(&self, name: &str) -> Result<(Vec<usize>, Vec<f32>)> {
        match self.owner.get(name) {
            Some(&i) => self.files[i].tensor_f32(name),
            None => Err(self.missing(name)),
        }
    }
}

/// A Hugging Face model folder.
pub struct HfModelDir {
    pub config: ModelConfig,
    pub weights: SafetensorsModel,
    /// From `tokenizer.json`, when present.
    pub tokenizer: Option<Tokenizer>,
    /// Raw `tokenizer_config.json` chat template, when present.
    pub chat_template: Option<String>,
}

impl HfModelDir {
    /// Reads config, weights, tokenizer and generation config from `dir`.
    /// `generation_config.json`'s eos ids are added to the config's.
    pub fn open(dir: &Path) -> Result<Self> {
        let mut config = ModelConfig::from_hf_file(&dir.join("config.json"))?;
        let read_json = |name: &str| -> Result<Option<Value>> {
            let p = dir.join(name);
            if !p.exists() {
                return Ok(None);
            }
            let text = crate::input::read_text(&p, crate::input::JSON_LIMIT)?;
            serde_json::from_str(&text)
                .map(Some)
                .map_err(|source| LoadError::Json { path: p, source })
        };
        if let Some(gen_cfg) = read_json("generation_config.json")? {
            let extra: Vec<u32> = match gen_cfg.get("eos_token_id") {
                Some(Value::Number(n)) => n
                    .as_u64()
                    .and_then(|x| u32::try_from(x).ok())
                    .into_iter()
                    .collect(),
                Some(Value::Array(a)) => a
                    .iter()
                    .filter_map(|x| u32::try_from(x.as_u64()?).ok())
                    .collect(),
                _ => Vec::new(),
            };
            for id in extra {
                if !config.eos_ids.contains(&id) {
                    config.eos_ids.push(id);
                }
            }
        }
        let mut chat_template = read_json("tokenizer_config.json")?.and_then(|v| {
            v.get("chat_template")
                .and_then(Value::as_str)
                .map(String::from)
        });
        // transformers 5 saves the template as a file of its own.
        let jinja = dir.join("chat_template.jinja");
        if chat_template.is_none() && jinja.is_file() {
            chat_template = Some(crate::input::read_text(&jinja, crate::input::JSON_LIMIT)?);
        }
        let tok_path = dir.join("tokenizer.json");
        let tokenizer = if tok_path.exists() {
            Some(Tokenizer::from_json_file(&tok_path)?)
        } else {
            None
        };
        let weights = SafetensorsModel::open_dir(dir)?;
        Ok(HfModelDir {
            config,
            weights,
            tokenizer,
            chat_template,
        })
    }
}

/// Serializes tensors as a safetensors image (tests, and saving converted
/// weights). Tensors are `(name, dtype, shape, bytes)`.
pub fn write_safetensors(tensors: &[(&str, StDtype, &[usize], &[u8])]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut offset = 0usize;
    for (name, dtype, shape, bytes) in tensors {
        let dt = match dtype {
            StDtype::F32 => "F32",
            StDtype::F16 => "F16",
            StDtype::BF16 => "BF16",
            StDtype::F64 => "F64",
            StDtype::I64 => "I64",
            StDtype::I32 => "I32",
            StDtype::I16 => "I16",
            StDtype::I8 => "I8",
            StDtype::U8 => "U8",
            StDtype::Bool => "BOOL",
        };
        header.insert(
            name.to_string(),
            serde_json::json!({"dtype": dt, "shape": shape, "data_offsets": [offset, offset + bytes.len()]}),
        );
        offset += bytes.len();
    }
    let mut h = Value::Object(header).to_string().into_bytes();
    // Pad the header with spaces so the data starts 8-byte aligned, as the
    // reference writer does.
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    for (_, _, _, bytes) in tensors {
        out.extend_from_slice(bytes);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn reads_f32_f16_bf16() {
        let vals = [1.0f32, -2.5, 0.125, 3.0, 0.0, -0.5];
        let f16: Vec<u8> = vals
            .iter()
            .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
            .collect();
        let bf16: Vec<u8> = vals
            .iter()
            .flat_map(|&x| half::bf16::from_f32(x).to_le_bytes())
            .collect();
        let img = write_safetensors(&[
            ("a", StDtype::F32, &[2, 3], &f32_bytes(&vals)),
            ("b", StDtype::F16, &[6], &f16),
            ("c", StDtype::BF16, &[3, 2], &bf16),
            ("d", StDtype::I32, &[1], &[1, 0, 0, 0]),
        ]);
        let f = SafetensorsFile::from_vec(img).unwrap();
        for n in ["a", "b", "c"] {
            let (shape, v) = f.tensor_f32(n).unwrap();
            assert_eq!(v, vals, "{n}");
            assert_eq!(shape.iter().product::<usize>(), 6);
        }
        assert!(f.tensor_f32("d").is_err());
        assert!(matches!(
            f.tensor("zz"),
            Err(LoadError::MissingTensor { .. })
        ));
    }

    #[test]
    fn damage_is_reported() {
        let good = write_safetensors(&[("a", StDtype::F32, &[2], &f32_bytes(&[1.0, 2.0]))]);
        for len in 0..good.len() {
            assert!(
                SafetensorsFile::from_vec(good[..len].to_vec()).is_err(),
                "prefix {len}"
            );
        }
        let hdr = |json: &str| {
            let mut v = (json.len() as u64).to_le_bytes().to_vec();
            v.extend_from_slice(json.as_bytes());
            v.extend_from_slice(&[0; 16]);
            v
        };
        for (json, want) in [
            (
                r#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#,
                "needs 12 bytes",
            ),
            (
                r#"{"a":{"dtype":"Q9","shape":[2],"data_offsets":[0,8]}}"#,
                "not supported",
            ),
            (
                r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,800]}}"#,
                "outside",
            ),
            (
                r#"{"a":{"dtype":"F32","shape":[4611686018427387904, 8],"data_offsets":[0,8]}}"#,
                "overflows",
            ),
            (
                r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#,
                "overlap",
            ),
            (r#"[1,2]"#, "not a json object"),
            (r#"{"a":"#, "not valid json"),
        ] {
            let e = SafetensorsFile::from_vec(hdr(json))
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "want {want:?} in {e}");
        }
        let mut huge = u64::MAX.to_le_bytes().to_vec();
        huge.extend_from_slice(b"{}");
        assert!(SafetensorsFile::from_vec(huge).is_err());
    }

    #[test]
    fn hf_folder_with_shards() {
        let dir = std::env::temp_dir().join(format!("tiletune-st-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = write_safetensors(&[(
            "model.embed_tokens.weight",
            StDtype::F32,
            &[4, 2],
            &f32_bytes(&[0.5; 8]),
        )]);
        let b = write_safetensors(&[(
            "model.norm.weight",
            StDtype::F32,
            &[2],
            &f32_bytes(&[1.0, 2.0]),
        )]);
        std::fs::write(dir.join("model-00001-of-00002.safetensors"), a).unwrap();
        std::fs::write(dir.join("model-00002-of-00002.safetensors"), b).unwrap();
        std::fs::write(
            dir.join("model.safetensors.index.json"),
            r#"{"metadata": {}, "weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
               "model.norm.weight": "model-00002-of-00002.safetensors"}}"#,
        )
        .unwrap();
        std::fs::write(
            dir.join("config.json"),
            r#"{"model_type": "qwen3", "vocab_size": 4, "hidden_size": 2, "intermediate_size": 4,
               "num_hidden_layers": 1, "num_attention_heads": 1, "head_dim": 2, "eos_token_id": 3}"#,
        )
        .unwrap();
        std::fs::write(
            dir.join("generation_config.json"),
            r#"{"eos_token_id": [3, 2]}"#,
        )
        .unwrap();
        let m = HfModelDir::open(&dir).unwrap();
        assert_eq!(m.config.eos_ids, [3, 2]);
        assert!(m.tokenizer.is_none());
        assert_eq!(
            m.weights.tensor_f32("model.norm.weight").unwrap().1,
            [1.0, 2.0]
        );
        assert_eq!(
            m.weights
                .tensor("model.embed_tokens.weight")
                .unwrap()
                .1
                .len(),
            32
        );
        assert_eq!(m.weights.tensor_names().count(), 2);
        assert!(m.weights.tensor_f32("lm_head.weight").is_err());
        std::fs::write(
            dir.join("model.safetensors.index.json"),
            r#"{"weight_map": {"x": "../escape.safetensors"}}"#,
        )
        .unwrap();
        assert!(HfModelDir::open(&dir).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
