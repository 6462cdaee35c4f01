//! GGUF (v2/v3) reader over a memory map.
//!
//! The layout (see ggml's `docs/gguf.md`): magic `GGUF`, version `u32`, tensor
//! count `u64`, metadata kv count `u64`, the key/value pairs, the tensor infos
//! (name, dims, ggml type, offset relative to the data section), padding to
//! `general.alignment` (default 32), then the tensor data. Everything is
//! little-endian.
//!
//! The reader trusts nothing in the file: every read is bounds-checked, every
//! size is computed with checked arithmetic, and a count is accepted only when
//! the bytes left in the file could hold that many items, so a hostile header
//! cannot make it allocate more than a small multiple of the file's size.
//! A truncated or malformed file gives a [`LoadError`] naming the offset.

mod pending;
pub mod write;

pub use tiletune_kernels::dtype::GgmlType;

use crate::error::{LoadError, Result};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The four magic bytes at the start of every GGUF file.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Alignment of the data section and of every tensor when the file does not
/// say otherwise (`general.alignment`).
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml's `GGML_MAX_DIMS`.
pub const MAX_DIMS: u32 = 4;
/// Nesting depth allowed for arrays of arrays; real files use one level.
const MAX_ARRAY_DEPTH: u32 = 8;

/// The type tag of a metadata value (`gguf_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

impl ValueType {
    fn from_id(id: u32) -> Option<Self> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// Fewest bytes one value of this type takes in the file; used to reject
    /// counts the remaining bytes could not hold.
    fn min_encoded_size(self) -> u64 {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 | String => 8,
            Array => 12,
        }
    }

    /// Name used in error messages.
    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }
}

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Array),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// A metadata array, stored typed so a large vocabulary costs little memory.
#[derive(Clone, Debug, PartialEq)]
pub enum Array {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(Vec<String>),
    Array(Vec<Array>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
}

impl Value {
    /// The value's type tag.
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// Any integer value as i128 (so every integer type converts losslessly).
    pub fn as_int(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(v) => v.into(),
            Value::I8(v) => v.into(),
            Value::U16(v) => v.into(),
            Value::I16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::U64(v) => v.into(),
            Value::I64(v) => v.into(),
            _ => return None,
        })
    }

    /// A float or integer value as f64.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => self.as_int().map(|v| v as f64),
        }
    }
}

impl Array {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I8(v) => v.len(),
            Array::U16(v) => v.len(),
            Array::I16(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::F32(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::String(v) => v.len(),
            Array::Array(v) => v.len(),
            Array::U64(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F64(v) => v.len(),
        }
    }

    /// True when the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The element type tag.
    pub fn elem_type(&self) -> ValueType {
        match self {
            Array::U8(_) => ValueType::U8,
            Array::I8(_) => ValueType::I8,
            Array::U16(_) => ValueType::U16,
            Array::I16(_) => ValueType::I16,
            Array::U32(_) => ValueType::U32,
            Array::I32(_) => ValueType::I32,
            Array::F32(_) => ValueType::F32,
            Array::Bool(_) => ValueType::Bool,
            Array::String(_) => ValueType::String,
            Array::Array(_) => ValueType::Array,
            Array::U64(_) => ValueType::U64,
            Array::I64(_) => ValueType::I64,
            Array::F64(_) => ValueType::F64,
        }
    }

    /// Integer elements as i64 (token types, ids); `None` for non-integer
    /// arrays or u64 values above i64::MAX.
    pub fn to_i64_vec(&self) -> Option<Vec<i64>> {
        Some(match self {
            Array::U8(v) => v.iter().map(|&x| x.into()).collect(),
            Array::I8(v) => v.iter().map(|&x| x.into()).collect(),
            Array::U16(v) => v.iter().map(|&x| x.into()).collect(),
            Array::I16(v) => v.iter().map(|&x| x.into()).collect(),
            Array::U32(v) => v.iter().map(|&x| x.into()).collect(),
            Array::I32(v) => v.iter().map(|&x| x.into()).collect(),
            Array::I64(v) => v.clone(),
            Array::U64(v) => v
                .iter()
                .map(|&x| i64::try_from(x).ok())
                .collect::<Option<_>>()?,
            _ => return None,
        })
    }

    /// Float (or integer) elements as f32.
    pub fn to_f32_vec(&self) -> Option<Vec<f32>> {
        Some(match self {
            Array::F32(v) => v.clone(),
            Array::F64(v) => v.iter().map(|&x| x as f32).collect(),
            _ => self.to_i64_vec()?.into_iter().map(|x| x as f32).collect(),
        })
    }
}

/// Where a tensor is and what it holds.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// ggml order: `dims[0]` is the fastest-varying (row length).
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Offset relative to the start of the data section.
    pub offset: u64,
    /// Bytes of tensor data, computed from dims and type.
    pub size: u64,
}

impl TensorInfo {
    /// Number of elements (product of dims).
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// The bytes a [`GgufFile`] reads: a memory map of a file or an owned buffer.
enum Backing {
    Mmap(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mmap(m) => m,
            Backing::Owned(v) => v,
        }
    }
}

/// A parsed GGUF file; tensor data stays in the memory map.
pub struct GgufFile {
    path: PathBuf,
    backing: Backing,
    version: u32,
    metadata: Vec<(String, Value)>,
    meta_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    alignment: u64,
    data_offset: u64,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .field("alignment", &self.alignment)
            .field("data_offset", &self.data_offset)
            .finish()
    }
}

impl GgufFile {
    /// Memory-maps and parses `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let file = crate::input::open_regular(&path)?;
        Self::map(&file, path)
    }

    /// Memory-maps and parses an open file, named `path` in errors (an
    /// unnamed temporary file has no path of its own).
    pub fn map(file: &std::fs::File, path: PathBuf) -> Result<Self> {
        // SAFETY: the map is read-only and private to this process; as with
        // every mmap-based loader, a file truncated by another process while
        // mapped can fault. Model files are not modified while in use.
        let map = unsafe { memmap2::Mmap::map(file) }.map_err(|source| LoadError::Io {
            path: path.clone(),
            source,
        })?;
        Self::parse(path, Backing::Mmap(map))
    }

    /// Parses a GGUF image held in memory (tests, fuzzing); copies `bytes`.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        Self::from_vec(bytes.to_vec())
    }

    /// Parses a GGUF image held in memory, taking ownership of the buffer.
    pub fn from_vec(bytes: Vec<u8>) -> Result<Self> {
        Self::parse(PathBuf::from("<memory>"), Backing::Owned(bytes))
    }

    fn parse(path: PathBuf, backing: Backing) -> Result<Self> {
        let parsed = {
            let mut r = Reader {
                buf: backing.bytes(),
                pos: 0,
                path: &path,
            };
            parse_layout(&mut r)?
        };
        let (version, metadata, tensors, alignment, data_offset) = parsed;
        let meta_index = metadata
            .iter()
            .enumerate()
            .map(|(i, (k, _))| (k.clone(), i))
            .collect();
        let tensor_index = tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(GgufFile {
            path,
            backing,
            version,
            metadata,
            meta_index,
            tensors,
            tensor_index,
            alignment,
            data_offset,
        })
    }

    /// The file this was read from (`<memory>` for in-memory images).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// GGUF format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Data-section alignment (`general.alignment`, default 32).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Offset of the data section from the start of the file.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// All metadata key/value pairs in file order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.metadata
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.meta_index.get(key).map(|&i| &self.metadata[i].1)
    }

    fn require(&self, key: &str) -> Result<&Value> {
        self.get(key).ok_or_else(|| LoadError::MissingKey {
            path: self.path.clone(),
            key: key.to_string(),
        })
    }

    fn wrong_type(&self, key: &str, expected: &'static str, found: &Value) -> LoadError {
        LoadError::WrongType {
            path: self.path.clone(),
            key: key.to_string(),
            expected,
            found: found.value_type().name(),
        }
    }

    /// A string value.
    pub fn get_str(&self, key: &str) -> Result<&str> {
        match self.require(key)? {
            Value::String(s) => Ok(s),
            v => Err(self.wrong_type(key, "string", v)),
        }
    }

    /// An integer value of any integer type that fits in u32 (converters
    /// disagree on u32/i32/u64 for counts).
    pub fn get_u32(&self, key: &str) -> Result<u32> {
        let v = self.require(key)?;
        v.as_int()
            .and_then(|i| u32::try_from(i).ok())
            .ok_or_else(|| self.wrong_type(key, "u32", v))
    }

    /// An integer value of any integer type that fits in u64.
    pub fn get_u64(&self, key: &str) -> Result<u64> {
        let v = self.require(key)?;
        v.as_int()
            .and_then(|i| u64::try_from(i).ok())
            .ok_or_else(|| self.wrong_type(key, "u64", v))
    }

    /// A float value (f32, f64, or an integer).
    pub fn get_f32(&self, key: &str) -> Result<f32> {
        let v = self.require(key)?;
        v.as_f64()
            .map(|f| f as f32)
            .ok_or_else(|| self.wrong_type(key, "f32", v))
    }

    /// A bool value.
    pub fn get_bool(&self, key: &str) -> Result<bool> {
        match self.require(key)? {
            Value::Bool(b) => Ok(*b),
            v => Err(self.wrong_type(key, "bool", v)),
        }
    }

    /// An array value.
    pub fn get_array(&self, key: &str) -> Result<&Array> {
        match self.require(key)? {
            Value::Array(a) => Ok(a),
            v => Err(self.wrong_type(key, "array", v)),
        }
    }

    /// All tensor infos in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The info of tensor `name`, if present.
    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// Lets the OS drop the resident pages of `data` (a slice this file
    /// returned) once the caller has copied what it needs: the runtime
    /// copies or repacks every weight at load, and without this the file's
    /// pages stay resident beside the copies (Qwen2.5-0.5B: +530 MiB of
    /// peak RSS). The bytes stay readable: a later access faults them in
    /// from the file again. A no-op for in-memory images and on failure
    /// (the hint is only about memory use).
    pub fn release(&self, data: &[u8]) {
        if let Backing::Mmap(map) = &self.backing {
            crate::input::release_mapped(map, data);
        }
    }

    /// A tensor's info and its bytes (already checked to lie inside the file).
    /// For a file from [`GgufFile::open`] the slice starts at a multiple of
    /// [`GgufFile::alignment`] from the page-aligned map, so it may be viewed
    /// as f32/f16 blocks; in-memory images give no alignment guarantee.
    pub fn tensor_data(&self, name: &str) -> Result<(&TensorInfo, &[u8])> {
        let info = self
            .tensor_info(name)
            .ok_or_else(|| LoadError::MissingTensor {
                path: self.path.clone(),
                name: name.to_string(),
            })?;
        // Bounds were checked at parse time; the conversion cannot fail then.
        let start = (self.data_offset + info.offset) as usize;
        let end = start + info.size as usize;
        Ok((info, &self.backing.bytes()[start..end]))
    }
}

type Layout = (u32, Vec<(String, Value)>, Vec<TensorInfo>, u64, u64);

fn parse_layout(r: &mut Reader<'_>) -> Result<Layout> {
    let magic: [u8; 4] = r.take(4, "magic")?.try_into().expect("4 bytes");
    if magic != GGUF_MAGIC {
        return Err(LoadError::BadMagic {
            path: r.path.to_path_buf(),
            magic,
        });
    }
    let version = r.u32("version")?;
    if version != 2 && version != 3 {
        return Err(LoadError::UnsupportedVersion {
            path: r.path.to_path_buf(),
            version,
        });
    }
    let n_tensors = r.u64("tensor count")?;
    let n_kv = r.u64("metadata kv count")?;
    // A kv is at least key string (8) + type (4) + 1 byte; a tensor info at
    // least name (8) + n_dims (4) + type (4) + offset (8).
    r.check_count(n_kv, 13, "metadata kv count")?;
    r.check_count(n_tensors, 24, "tensor count")?;

    let mut metadata: Vec<(String, Value)> = Vec::with_capacity(n_kv as usize);
    let mut seen = HashMap::with_capacity(n_kv as usize);
    for _ in 0..n_kv {
        let at = r.pos;
        let key = r.string("metadata key")?;
        let type_id = r.u32("metadata value type")?;
        let vt = ValueType::from_id(type_id).ok_or_else(|| {
            r.malformed(at, format!("key `{key}` has unknown value type {type_id}"))
        })?;
        let value = r.value(vt, 0)?;
        if seen.insert(key.clone(), ()).is_some() {
            return Err(r.malformed(at, format!("duplicate metadata key `{key}`")));
        }
        metadata.push((key, value));
    }

    let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some((_, Value::U32(a))) if *a != 0 && a.is_power_of_two() => u64::from(*a),
        Some((_, v)) => {
            return Err(r.malformed(
                0,
                format!("general.alignment must be a non-zero power-of-two u32, found {v:?}"),
            ));
        }
    };

    let mut tensors: Vec<TensorInfo> = Vec::with_capacity(n_tensors as usize);
    let mut names = HashMap::with_capacity(n_tensors as usize);
    for _ in 0..n_tensors {
        let at = r.pos;
        let name = r.string("tensor name")?;
        let n_dims = r.u32("tensor n_dims")?;
        if n_dims > MAX_DIMS {
            return Err(r.malformed(
                at,
                format!("tensor `{name}` has {n_dims} dims (at most {MAX_DIMS})"),
            ));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(r.u64("tensor dim")?);
        }
        let type_id = r.u32("tensor type")?;
        let offset = r.u64("tensor offset")?;
        let ggml_type = GgmlType::from_id(type_id).ok_or_else(|| LoadError::UnknownTensorType {
            path: r.path.to_path_buf(),
            tensor: name.clone(),
            type_id,
        })?;
        let bad = |what: String| LoadError::BadTensor {
            path: r.path.to_path_buf(),
            tensor: name.clone(),
            what,
        };
        // ggml stores dims as i64: each and their product must fit.
        let n_elements = dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .filter(|&n| n <= i64::MAX as u64)
            .ok_or_else(|| bad(format!("dims {dims:?} overflow the element count")))?;
        let row = dims.first().copied().unwrap_or(1);
        if !row.is_multiple_of(ggml_type.block_size()) {
            return Err(bad(format!(
                "row length {row} is not a multiple of the {ggml_type} block size {}",
                ggml_type.block_size()
            )));
        }
        let size = ggml_type.bytes_for(n_elements).ok_or_else(|| {
            bad(format!(
                "byte size of {n_elements} {ggml_type} elements overflows"
            ))
        })?;
        if !offset.is_multiple_of(alignment) {
            return Err(bad(format!(
                "offset {offset} is not a multiple of the alignment {alignment}"
            )));
        }
        if names.insert(name.clone(), ()).is_some() {
            return Err(r.malformed(at, format!("duplicate tensor name `{name}`")));
        }
        tensors.push(TensorInfo {
            name,
            dims,
            ggml_type,
            offset,
            size,
        });
    }

    let file_len = r.buf.len() as u64;
    let data_offset = (r.pos as u64)
        .checked_next_multiple_of(alignment)
        .ok_or_else(|| r.malformed(r.pos, "data offset overflows".to_string()))?;
    for t in &tensors {
        let end = data_offset
            .checked_add(t.offset)
            .and_then(|s| s.checked_add(t.size));
        match end {
            Some(end) if end <= file_len => {}
            _ => {
                return Err(LoadError::Truncated {
                    path: r.path.to_path_buf(),
                    offset: file_len,
                    needed: end.map_or(u64::MAX, |e| e - file_len),
                    what: format!(
                        "tensor `{}` ({} {}, {} bytes at data offset {})",
                        t.name,
                        t.ggml_type,
                        fmt_dims(&t.dims),
                        t.size,
                        t.offset
                    ),
                });
            }
        }
    }
    check_no_overlap(&tensors, data_offset, r)?;
    Ok((version, metadata, tensors, alignment, data_offset))
}

/// Two tensors whose bytes overlap would load each other's data (a wrong
/// answer far from its cause), so the file is refused. ggml itself lays
/// tensors out back to back in info order; any order is accepted here as
/// long as no byte belongs to two tensors.
fn check_no_overlap(
    tensors: &[TensorInfo],
    data_offset: u64,
    r: &Reader<'_>,
) -> Result<(), LoadError> {
    let mut by_start: Vec<&TensorInfo> = tensors.iter().filter(|t| t.size > 0).collect();
    by_start.sort_by_key(|t| t.offset);
    for pair in by_start.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        // In bounds was checked above, so offset + size cannot overflow.
        if b.offset < a.offset + a.size {
            return Err(r.malformed(
                (data_offset + b.offset) as usize,
                format!(
                    "tensor `{}` (bytes {}..{} of the data section) overlaps tensor `{}` (bytes {}..{})",
                    b.name,
                    b.offset,
                    b.offset + b.size,
                    a.name,
                    a.offset,
                    a.offset + a.size
                ),
            ));
        }
    }
    Ok(())
}

fn fmt_dims(dims: &[u64]) -> String {
    let parts: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

/// A bounds-checked little-endian cursor.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn truncated(&self, needed: u64, what: &str) -> LoadError {
        LoadError::Truncated {
            path: self.path.to_path_buf(),
            offset: self.pos as u64,
            needed: needed.saturating_sub(self.remaining()),
            what: what.to_string(),
        }
    }

    fn malformed(&self, offset: usize, what: String) -> LoadError {
        LoadError::Malformed {
            path: self.path.to_path_buf(),
            offset: offset as u64,
            what,
        }
    }

    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.truncated(n, what));
        }
        let n = n as usize;
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// Rejects a count whose items could not fit in the bytes left.
    fn check_count(&self, count: u64, min_item: u64, what: &str) -> Result<()> {
        match count.checked_mul(min_item) {
            Some(need) if need <= self.remaining() => Ok(()),
            _ => Err(self.malformed(
                self.pos,
                format!(
                    "{what} {count} cannot fit in the {} bytes left",
                    self.remaining()
                ),
            )),
        }
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        Ok(self.take(N as u64, what)?.try_into().expect("N bytes"))
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let len = self.u64(what)?;
        let bytes = self.take(len, what)?;
        // Tokens of some vocabularies are not valid UTF-8 on their own; a
        // lossy conversion keeps the file loadable instead of refusing it.
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }

    fn value(&mut self, vt: ValueType, depth: u32) -> Result<Value> {
        Ok(match vt {
            ValueType::U8 => Value::U8(self.array::<1>("u8 value")?[0]),
            ValueType::I8 => Value::I8(self.array::<1>("i8 value")?[0] as i8),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array("u16 value")?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array("i16 value")?)),
            ValueType::U32 => Value::U32(self.u32("u32 value")?),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array("i32 value")?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array("f32 value")?)),
            ValueType::Bool => {
                let at = self.pos;
                match self.array::<1>("bool value")?[0] {
                    0 => Value::Bool(false),
                    1 => Value::Bool(true),
                    b => return Err(self.malformed(at, format!("bool value {b} is not 0 or 1"))),
                }
            }
            ValueType::String => Value::String(self.string("string value")?),
            ValueType::U64 => Value::U64(self.u64("u64 value")?),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array("i64 value")?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array("f64 value")?)),
            ValueType::Array => Value::Array(self.array_value(depth)?),
        })
    }

    fn array_value(&mut self, depth: u32) -> Result<Array> {
        let at = self.pos;
        if depth >= MAX_ARRAY_DEPTH {
            return Err(self.malformed(at, format!("arrays nested deeper than {MAX_ARRAY_DEPTH}")));
        }
        let type_id = self.u32("array element type")?;
        let et = ValueType::from_id(type_id).ok_or_else(|| {
            self.malformed(at, format!("array has unknown element type {type_id}"))
        })?;
        let n = self.u64("array length")?;
        self.check_count(n, et.min_encoded_size(), "array length")?;
        let n = n as usize;

        macro_rules! fixed {
            ($variant:ident, $t:ty) => {{
                const W: usize = std::mem::size_of::<$t>();
                let bytes = self.take((n * W) as u64, concat!(stringify!($t), " array"))?;
                Array::$variant(
                    bytes
                        .chunks_exact(W)
                        .map(|c| <$t>::from_le_bytes(c.try_into().expect("W bytes")))
                        .collect(),
                )
            }};
        }
        Ok(match et {
            ValueType::U8 => Array::U8(self.take(n as u64, "u8 array")?.to_vec()),
            ValueType::I8 => fixed!(I8, i8),
            ValueType::U16 => fixed!(U16, u16),
            ValueType::I16 => fixed!(I16, i16),
            ValueType::U32 => fixed!(U32, u32),
            ValueType::I32 => fixed!(I32, i32),
            ValueType::F32 => fixed!(F32, f32),
            ValueType::U64 => fixed!(U64, u64),
            ValueType::I64 => fixed!(I64, i64),
            ValueType::F64 => fixed!(F64, f64),
            ValueType::Bool => {
                let bytes = self.take(n as u64, "bool array")?;
                if let Some(b) = bytes.iter().find(|&&b| b > 1) {
                    return Err(self.malformed(at, format!("bool array element {b} is not 0 or 1")));
                }
                Array::Bool(bytes.iter().map(|&b| b == 1).collect())
            }
            ValueType::String => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.string("string array element")?);
                }
                Array::String(v)
            }
            ValueType::Array => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.array_value(depth + 1)?);
                }
                Array::Array(v)
            }
        })
    }
}
