//! A small GGUF writer. Tests build synthetic models with it (hermetic: no
//! downloaded files), the fuzz corpus is seeded from it, and it doubles as a
//! way to save a model after load-time quantization.

use super::pending::PendingFile;
use super::{Array, DEFAULT_ALIGNMENT, GGUF_MAGIC, GgmlType, Value};
use crate::error::{LoadError, Result};
use std::path::Path;

/// Collects metadata and tensors, then lays them out as a GGUF image.
#[derive(Clone, Debug)]
pub struct GgufWriter {
    version: u32,
    alignment: u64,
    kvs: Vec<(String, Value)>,
    tensors: Vec<PendingTensor>,
}

/// A tensor to write with [`GgufWriter::write_streamed`]: its data comes later.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorSpec {
    pub name: String,
    /// ggml order: `dims[0]` is the row length.
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
}

/// Where [`GgufWriter::write_streamed`] takes one tensor's bytes.
pub struct TensorOut<'a> {
    out: &'a mut dyn std::io::Write,
    path: &'a Path,
    written: u64,
}

impl<'a> TensorOut<'a> {
    /// Bytes put into `out`, whose errors are reported against `path`.
    pub fn new(out: &'a mut dyn std::io::Write, path: &'a Path) -> Self {
        TensorOut {
            out,
            path,
            written: 0,
        }
    }

    /// Appends `bytes` to the tensor.
    pub fn put(&mut self, bytes: &[u8]) -> Result<()> {
        self.out
            .write_all(bytes)
            .map_err(|source| LoadError::Write {
                path: self.path.to_path_buf(),
                source,
            })?;
        self.written += bytes.len() as u64;
        Ok(())
    }
}

#[derive(Clone, Debug)]
struct PendingTensor {
    name: String,
    dims: Vec<u64>,
    ggml_type: GgmlType,
    data: Vec<u8>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufWriter {
    /// A GGUF v3 writer with the default alignment (32).
    pub fn new() -> Self {
        GgufWriter {
            version: 3,
            alignment: DEFAULT_ALIGNMENT,
            kvs: Vec::new(),
            tensors: Vec::new(),
        }
    }

    /// Sets the format version written in the header (2 or 3 are valid;
    /// anything else is written as-is so tests can produce bad files).
    pub fn version(&mut self, version: u32) -> &mut Self {
        self.version = version;
        self
    }

    /// Sets the data alignment and writes it as `general.alignment`.
    pub fn alignment(&mut self, alignment: u32) -> &mut Self {
        self.alignment = u64::from(alignment.max(1));
        self.kvs.retain(|(k, _)| k != "general.alignment");
        self.kvs
            .push(("general.alignment".into(), Value::U32(alignment)));
        self
    }

    /// Adds a metadata pair (a later pair with the same key is written too:
    /// the reader rejects such files, which tests rely on).
    pub fn kv(&mut self, key: &str, value: impl Into<Value>) -> &mut Self {
        self.kvs.push((key.to_string(), value.into()));
        self
    }

    /// Adds a tensor; `data` must hold exactly the bytes `dims` and `ggml_type` imply.
    pub fn tensor(
        &mut self,
        name: &str,
        dims: &[u64],
        ggml_type: GgmlType,
        data: Vec<u8>,
    ) -> Result<&mut Self> {
        let n: Option<u64> = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
        let want = n.and_then(|n| ggml_type.bytes_for(n));
        if want != Some(data.len() as u64) {
            return Err(LoadError::BadTensor {
                path: "<writer>".into(),
                tensor: name.to_string(),
                what: format!(
                    "{} bytes given, {ggml_type} {dims:?} needs {want:?}",
                    data.len()
                ),
            });
        }
        self.tensors.push(PendingTensor {
            name: name.to_string(),
            dims: dims.to_vec(),
            ggml_type,
            data,
        });
        Ok(self)
    }

    /// Adds an f32 tensor from values.
    pub fn tensor_f32(&mut self, name: &str, dims: &[u64], values: &[f32]) -> Result<&mut Self> {
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.tensor(name, dims, GgmlType::F32, data)
    }

    /// The GGUF image.
    pub fn to_bytes(&self) -> Vec<u8> {
        let specs: Vec<TensorSpec> = self
            .tensors
            .iter()
            .map(|t| TensorSpec {
                name: t.name.clone(),
                dims: t.dims.clone(),
                ggml_type: t.ggml_type,
            })
            .collect();
        let sizes: Vec<u64> = self.tensors.iter().map(|t| t.data.len() as u64).collect();
        let mut out = self.header(&specs, &sizes);
        for t in &self.tensors {
            out.extend_from_slice(&t.data);
            pad_to(&mut out, self.alignment);
        }
        out
    }

    /// Header, metadata and tensor infos of an image whose tensors (beyond
    /// those added with [`GgufWriter::tensor`], which must be none) are
    /// `specs` with data of `sizes` bytes; padded to the alignment, so each
    /// tensor's data follows, padded in turn.
    fn header(&self, specs: &[TensorSpec], sizes: &[u64]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&GGUF_MAGIC);
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(specs.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.kvs.len() as u64).to_le_bytes());
        for (k, v) in &self.kvs {
            put_str(&mut out, k);
            out.extend_from_slice(&(v.value_type() as u32).to_le_bytes());
            put_value(&mut out, v);
        }
        let mut offset = 0u64;
        for (t, &size) in specs.iter().zip(sizes) {
            put_str(&mut out, &t.name);
            out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.ggml_type.id().to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offset = (offset + size).next_multiple_of(self.alignment);
        }
        pad_to(&mut out, self.alignment);
        out
    }

    /// Writes this writer's metadata and the tensors `specs` to `path`,
    /// asking `data(i, out)` to put tensor `i`'s bytes into `out`, one
    /// tensor at a time and in as many pieces as it likes, so a model
    /// larger than memory can be written. The file appears at `path`
    /// only when it is complete ([`pending`](super::pending)); on an error,
    /// or if the process dies, nothing is left behind (where the system
    /// has no unnamed files, a process that dies leaves
    /// `.tiletune-write-….tmp<pid>`, which the conversion cache's `clean`
    /// recognises). Returns the bytes written.
    pub fn write_streamed(
        &self,
        path: &Path,
        specs: &[TensorSpec],
        data: impl FnMut(usize, &mut TensorOut<'_>) -> Result<()>,
    ) -> Result<u64> {
        let io = |source| LoadError::Write {
            path: path.to_path_buf(),
            source,
        };
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let tmp = PendingFile::create_in(dir).map_err(io)?;
        let (_, written) = self.write_streamed_into(tmp.as_file(), path, specs, data)?;
        tmp.persist(path).map_err(io)?;
        Ok(written)
    }

    /// [`GgufWriter::write_streamed`] into `out` (named `path` in errors),
    /// which is given back with the bytes written.
    pub fn write_streamed_into<W: std::io::Write>(
        &self,
        out: W,
        path: &Path,
        specs: &[TensorSpec],
        mut data: impl FnMut(usize, &mut TensorOut<'_>) -> Result<()>,
    ) -> Result<(W, u64)> {
        use std::io::Write;
        if !self.tensors.is_empty() {
            return Err(LoadError::Config(
                "write_streamed takes every tensor as a spec; this writer already holds tensors"
                    .into(),
            ));
        }
        let mut sizes = Vec::with_capacity(specs.len());
        for t in specs {
            let n = t.dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
            let size =
                n.and_then(|n| t.ggml_type.bytes_for(n))
                    .ok_or_else(|| LoadError::BadTensor {
                        path: path.to_path_buf(),
                        tensor: t.name.clone(),
                        what: format!(
                            "{} {:?} is not a whole number of blocks",
                            t.ggml_type, t.dims
                        ),
                    })?;
            sizes.push(size);
        }
        let io = |source| LoadError::Write {
            path: path.to_path_buf(),
            source,
        };
        let mut out = std::io::BufWriter::with_capacity(1 << 20, out);
        let header = self.header(specs, &sizes);
        out.write_all(&header).map_err(io)?;
        let mut written = header.len() as u64;
        for (i, (t, &size)) in specs.iter().zip(&sizes).enumerate() {
            let mut piece = TensorOut::new(&mut out, path);
            data(i, &mut piece)?;
            if piece.written != size {
                return Err(LoadError::BadTensor {
                    path: path.to_path_buf(),
                    tensor: t.name.clone(),
                    what: format!(
                        "{} bytes given, {} {:?} needs {size}",
                        piece.written, t.ggml_type, t.dims
                    ),
                });
            }
            let padded = size.next_multiple_of(self.alignment);
            out.write_all(&vec![0u8; (padded - size) as usize])
                .map_err(io)?;
            written += padded;
        }
        let out = out.into_inner().map_err(|e| io(e.into_error()))?;
        Ok((out, written))
    }

    /// Writes the image to `path`.
    pub fn write(&self, path: &Path) -> Result<()> {
        std::fs::write(path, self.to_bytes()).map_err(|source| LoadError::Write {
            path: path.to_path_buf(),
            source,
        })
    }
}

fn pad_to(out: &mut Vec<u8>, alignment: u64) {
    let len = (out.len() as u64).next_multiple_of(alignment);
    out.resize(len as usize, 0);
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.push(*x as u8),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(u8::from(*x)),
        Value::String(s) => put_str(out, s),
        Value::Array(a) => put_array(out, a),
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}

fn put_array(out: &mut Vec<u8>, a: &Array) {
    out.extend_from_slice(&(a.elem_type() as u32).to_le_bytes());
    out.extend_from_slice(&(a.len() as u64).to_le_bytes());
    macro_rules! each {
        ($v:expr) => {
            for x in $v {
                out.extend_from_slice(&x.to_le_bytes());
            }
        };
    }
    match a {
        Array::U8(v) => out.extend_from_slice(v),
        Array::I8(v) => each!(v),
        Array::U16(v) => each!(v),
        Array::I16(v) => each!(v),
        Array::U32(v) => each!(v),
        Array::I32(v) => each!(v),
        Array::F32(v) => each!(v),
        Array::U64(v) => each!(v),
        Array::I64(v) => each!(v),
        Array::F64(v) => each!(v),
        Array::Bool(v) => out.extend(v.iter().map(|&b| u8::from(b))),
        Array::String(v) => v.iter().for_each(|s| put_str(out, s)),
        Array::Array(v) => v.iter().for_each(|a| put_array(out, a)),
    }
}

macro_rules! value_from {
    ($($t:ty => $variant:ident),*) => {
        $(impl From<$t> for Value {
            fn from(x: $t) -> Self {
                Value::$variant(x)
            }
        })*
    };
}
value_from!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, f32 => F32,
    bool => Bool, String => String, u64 => U64, i64 => I64, f64 => F64, Array => Array);

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::String(s.to_string())
    }
}

impl From<Vec<String>> for Value {
    fn from(v: Vec<String>) -> Self {
        Value::Array(Array::String(v))
    }
}

impl From<Vec<i32>> for Value {
    fn from(v: Vec<i32>) -> Self {
        Value::Array(Array::I32(v))
    }
}

impl From<Vec<f32>> for Value {
    fn from(v: Vec<f32>) -> Self {
        Value::Array(Array::F32(v))
    }
}

#[cfg(test)]
mod tests {
    use super::super::pending::{names, unnamed_files_in};
    use super::*;

    /// A model killed mid-write must leave no file: while the tensors are
    /// written the directory holds nothing new (where its filesystem has
    /// unnamed files), and a failed write leaves nothing either.
    #[test]
    fn a_streamed_file_has_no_name_until_it_is_complete() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        let specs: Vec<_> = ["a", "b"]
            .iter()
            .map(|n| TensorSpec {
                name: n.to_string(),
                dims: vec![32, 2],
                ggml_type: GgmlType::F32,
            })
            .collect();
        let w = GgufWriter::new();
        let unnamed = unnamed_files_in(dir.path());
        let mut seen = Vec::new();
        w.write_streamed(&path, &specs, |_, out| {
            seen.push(names(dir.path()));
            out.put(&[0u8; 256])
        })
        .unwrap();
        for during in &seen {
            if unnamed {
                assert!(during.is_empty(), "{during:?}");
            } else {
                assert_eq!(during.len(), 1, "{during:?}");
            }
        }
        assert_eq!(names(dir.path()), ["m.gguf"]);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..4], b"GGUF");

        let other = dir.path().join("n.gguf");
        let e = w.write_streamed(&other, &specs, |i, out| {
            if i == 1 {
                return Err(LoadError::Config("stopped".into()));
            }
            out.put(&[0u8; 256])
        });
        assert!(e.is_err());
        assert_eq!(names(dir.path()), ["m.gguf"]);
    }
}
