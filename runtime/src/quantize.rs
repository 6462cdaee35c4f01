//! A GGUF file → a GGUF file with its weights in another type, as llama.cpp's
//! `llama-quantize` makes it: the same file types (`Q4_0` … `Q8_0`,
//! `Q4_K_S`, `Q4_K_M`, `Q5_K_S`, `Q5_K_M`, `Q6_K`, `F16`, `BF16`, `F32`),
//! the same choice of which tensors are quantized and to what
//! (`llama_tensor_get_type` in llama.cpp's `llama-quant.cpp`: the output
//! matrix in Q6_K, `attn_v` and `ffn_down` of a Q4_K_M / Q5_K_M file in Q6_K
//! on the layers `use_more_bits` picks, Q4_K_S's first layers in Q5_K, the
//! fallback types for rows that are not whole 256-element super-blocks), the same
//! flags (`--allow-requantize`, `--output-tensor-type`,
//! `--token-embedding-type`, `--pure`, `--leave-output-tensor`), and the same
//! metadata (every key copied, `general.file_type` and
//! `general.quantization_version` set).
//!
//! Types whose quantizer tiletune does not have (Q2_K, Q3_K and the
//! i-quants, so also the recipes that use them: Q2_K_S, Q3_K_*) are refused
//! by name before any work. Tensors are read from the memory
//! map and written one at a time, so a model needs little more memory than
//! its largest tensor.

use crate::error::{LoadError, Result};
use crate::gguf::write::{GgufWriter, TensorOut, TensorSpec};
use crate::gguf::{GgmlType, GgufFile, TensorInfo};
use crate::models::dequant;
use rayon::prelude::*;
use std::path::Path;
use tiletune_kernels::quant::{self, QuantFormat};

/// What the whole file is quantized to: llama.cpp's `llama_ftype`s that
/// tiletune can write.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileType {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q4_K_S,
    Q4_K_M,
    Q5_K_S,
    Q5_K_M,
    Q6_K,
    /// Every quantizable weight in MXFP4. llama.cpp's `MXFP4_MOE` puts only
    /// expert tensors in MXFP4; the dense models tiletune runs have none,
    /// so this is the type applied to every weight, as `--pure` would.
    MXFP4,
}

/// llama.cpp's `GGML_QNT_VERSION`, written as `general.quantization_version`.
const QUANTIZATION_VERSION: u32 = 2;

impl FileType {
    pub const ALL: [FileType; 14] = [
        Self::F32,
        Self::F16,
        Self::BF16,
        Self::Q4_0,
        Self::Q4_1,
        Self::Q5_0,
        Self::Q5_1,
        Self::Q8_0,
        Self::Q4_K_S,
        Self::Q4_K_M,
        Self::Q5_K_S,
        Self::Q5_K_M,
        Self::Q6_K,
        Self::MXFP4,
    ];

    /// The name llama-quantize prints (and takes, in any case).
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "F32",
            Self::F16 => "F16",
            Self::BF16 => "BF16",
            Self::Q4_0 => "Q4_0",
            Self::Q4_1 => "Q4_1",
            Self::Q5_0 => "Q5_0",
            Self::Q5_1 => "Q5_1",
            Self::Q8_0 => "Q8_0",
            Self::Q4_K_S => "Q4_K_S",
            Self::Q4_K_M => "Q4_K_M",
            Self::Q5_K_S => "Q5_K_S",
            Self::Q5_K_M => "Q5_K_M",
            Self::Q6_K => "Q6_K",
            Self::MXFP4 => "MXFP4",
        }
    }

    /// llama.cpp's `llama_ftype` value, stored as `general.file_type`
    /// (MXFP4 stores `MXFP4_MOE`'s).
    pub fn ftype_id(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q4_0 => 2,
            Self::Q4_1 => 3,
            Self::Q8_0 => 7,
            Self::Q5_0 => 8,
            Self::Q5_1 => 9,
            Self::Q4_K_S => 14,
            Self::Q4_K_M => 15,
            Self::Q5_K_S => 16,
            Self::Q5_K_M => 17,
            Self::Q6_K => 18,
            Self::BF16 => 32,
            Self::MXFP4 => 38,
        }
    }

    /// The type a quantized weight gets unless a rule says otherwise.
    pub fn default_type(self) -> GgmlType {
        match self {
            Self::F32 => GgmlType::F32,
            Self::F16 => GgmlType::F16,
            Self::BF16 => GgmlType::BF16,
            Self::Q4_0 => GgmlType::Q4_0,
            Self::Q4_1 => GgmlType::Q4_1,
            Self::Q5_0 => GgmlType::Q5_0,
            Self::Q5_1 => GgmlType::Q5_1,
            Self::Q8_0 => GgmlType::Q8_0,
            Self::Q4_K_S | Self::Q4_K_M => GgmlType::Q4_K,
            Self::Q5_K_S | Self::Q5_K_M => GgmlType::Q5_K,
            Self::Q6_K => GgmlType::Q6_K,
            Self::MXFP4 => GgmlType::MXFP4,
        }
    }

    /// Parses a llama-quantize type name (any case; `Q4_K` means `Q4_K_M`
    /// and `Q5_K` `Q5_K_M`, as in llama-quantize) or its numeric `llama_ftype`. The error names
    /// what is accepted, and says why a known llama.cpp type is not.
    pub fn parse(s: &str) -> std::result::Result<Self, String> {
        let up = s.trim().to_ascii_uppercase();
        if let Some(t) = Self::ALL
            .iter()
            .find(|t| t.name() == up || up.parse::<u32>().is_ok_and(|id| id == t.ftype_id()))
        {
            return Ok(*t);
        }
        match up.as_str() {
            "Q4_K" => return Ok(Self::Q4_K_M),
            "Q5_K" => return Ok(Self::Q5_K_M),
            _ => {}
        }
        let names: Vec<&str> = Self::ALL.iter().map(|t| t.name()).collect();
        let unsupported = [
            "Q2_K",
            "Q2_K_S",
            "Q3_K",
            "Q3_K_S",
            "Q3_K_M",
            "Q3_K_L",
            "MXFP4_MOE",
            "TQ1_0",
            "TQ2_0",
        ];
        if unsupported.contains(&up.as_str()) || up.starts_with("IQ") {
            return Err(format!(
                "`{s}` needs a quantizer tiletune does not have yet (Q2_K, Q3_K, the i-quants); use one of {}, or llama.cpp's llama-quantize",
                names.join(", ")
            ));
        }
        Err(format!(
            "`{s}` is not a file type to quantize to; use one of {}",
            names.join(", ")
        ))
    }
}

/// Parses a tensor type for `--output-tensor-type` / `--token-embedding-type`:
/// a ggml type name tiletune can write.
pub fn parse_tensor_type(s: &str) -> std::result::Result<GgmlType, String> {
    let writable: Vec<GgmlType> = GgmlType::ALL
        .into_iter()
        .filter(|t| convertible(*t))
        .collect();
    GgmlType::parse(s.trim())
        .filter(|t| writable.contains(t))
        .ok_or_else(|| {
            let names: Vec<&str> = writable.iter().map(|t| t.name()).collect();
            format!(
                "`{s}` is not a tensor type tiletune writes; use one of {}",
                names.join(", ")
            )
        })
}

/// Whether tiletune reads and writes `t`: the float types, and every weight
/// format the kernel crate quantizes and dequantizes.
fn convertible(t: GgmlType) -> bool {
    matches!(t, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) || kernel_format(t).is_some()
}

/// The kernel crate's quantizer for a weight type (not the activation-only
/// Q8_1 / Q8_K).
fn kernel_format(t: GgmlType) -> Option<QuantFormat> {
    QuantFormat::of(t).filter(|q| !matches!(q, QuantFormat::Q8_1 | QuantFormat::Q8K))
}

fn is_quantized(t: GgmlType) -> bool {
    !matches!(
        t,
        GgmlType::F32
            | GgmlType::F16
            | GgmlType::BF16
            | GgmlType::F64
            | GgmlType::I8
            | GgmlType::I16
            | GgmlType::I32
            | GgmlType::I64
    )
}

/// llama-quantize's options.
#[derive(Clone, Debug)]
pub struct QuantizeOptions {
    pub file_type: FileType,
    /// Quantize tensors that are already quantized (dequantized first;
    /// quality suffers against quantizing the original weights).
    pub allow_requantize: bool,
    /// The output matrix's type (for a tied embedding, the embedding's).
    pub output_tensor_type: Option<GgmlType>,
    pub token_embedding_type: Option<GgmlType>,
    /// Every quantized weight gets the file type's default type: no
    /// per-tensor rules (fallbacks for odd row lengths still apply).
    pub pure: bool,
    /// Leave `output.weight` as it is.
    pub leave_output_tensor: bool,
    /// Worker threads; 0 means every CPU.
    pub threads: usize,
}

impl QuantizeOptions {
    pub fn new(file_type: FileType) -> Self {
        QuantizeOptions {
            file_type,
            allow_requantize: false,
            output_tensor_type: None,
            token_embedding_type: None,
            pure: false,
            leave_output_tensor: false,
            threads: 0,
        }
    }
}

/// What happens to one tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorChoice {
    pub name: String,
    /// ggml order: `dims[0]` is the row length.
    pub dims: Vec<u64>,
    pub from: GgmlType,
    pub to: GgmlType,
    /// The chosen type did not fit the row length and a fallback was taken
    /// (llama.cpp warns "using fallback quantization").
    pub fallback: bool,
}

impl TensorChoice {
    /// Whether the data is converted (else copied as it is).
    pub fn converts(&self) -> bool {
        self.from != self.to
    }
}

/// llama.cpp's `use_more_bits`: the first and last eighth of the layers and
/// every third one in between.
fn use_more_bits(i: usize, n: usize) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i as i64 - (n / 8) as i64).rem_euclid(3) == 2
}

/// `blk.N.` → N.
fn layer_of(name: &str) -> Option<usize> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}

/// The fallback llama.cpp takes when a type does not fit a row length: the
/// K-quants' 32-value cousins, then F16 when even those do not fit.
fn fallback_for(name: &str, t: GgmlType, cols: u64) -> Result<GgmlType> {
    let f = match t {
        GgmlType::Q4_K => GgmlType::Q5_0,
        GgmlType::Q5_K => GgmlType::Q5_1,
        GgmlType::Q6_K => GgmlType::Q8_0,
        // A 32-value type has no smaller block to demote to: F16 below.
        _ if t.block_size() <= 32 => t,
        _ => {
            return Err(LoadError::Config(format!(
                "tensor `{name}`: rows of {cols} elements are not whole {t} blocks of {}, and {t} has no fallback type; pick another type",
                t.block_size()
            )));
        }
    };
    Ok(if cols.is_multiple_of(f.block_size()) {
        f
    } else {
        GgmlType::F16
    })
}

/// Decides every tensor's type, as llama-quantize does, and checks that each
/// conversion can be done (a writer for the type, a reader for the source,
/// `--allow-requantize` for quantized sources, whole blocks) before any
/// data is touched.
pub fn plan(g: &GgufFile, o: &QuantizeOptions) -> Result<Vec<TensorChoice>> {
    let tensors = g.tensors();
    let has_output = tensors.iter().any(|t| t.name == "output.weight");
    let count = |pat: &str| tensors.iter().filter(|t| t.name.contains(pat)).count();
    let (n_attn_v, n_ffn_down) = (count("attn_v.weight"), count("ffn_down"));
    let default = o.file_type.default_type();
    let mut out = Vec::with_capacity(tensors.len());
    for t in tensors {
        let name = t.name.as_str();
        let cols = t.dims.first().copied().unwrap_or(0);
        let quantize = name.ends_with("weight")
            && t.dims.len() >= 2
            && !name.contains("_norm.weight")
            && !(o.leave_output_tensor && name == "output.weight")
            && !name.contains("ffn_gate_inp.weight")
            && name != "position_embd.weight"
            && name != "token_types.weight";
        let mut choice = TensorChoice {
            name: t.name.clone(),
            dims: t.dims.clone(),
            from: t.ggml_type,
            to: t.ggml_type,
            fallback: false,
        };
        if quantize {
            let mut to = default;
            if !o.pure && is_quantized(default) {
                let is_output =
                    name == "output.weight" || (!has_output && name == "token_embd.weight");
                if is_output {
                    if let Some(ot) = o.output_tensor_type {
                        to = ot;
                    } else if !cols.is_multiple_of(to.block_size()) {
                        to = GgmlType::Q8_0;
                    } else if to != GgmlType::Q8_0 {
                        to = GgmlType::Q6_K;
                    }
                } else if name.contains("attn_qkv.weight") {
                    match o.file_type {
                        FileType::Q4_K_M => to = GgmlType::Q5_K,
                        FileType::Q5_K_M => to = GgmlType::Q6_K,
                        _ => {}
                    }
                } else if name.contains("attn_v.weight") || name.contains("ffn_down") {
                    let attn_v = name.contains("attn_v.weight");
                    let n = if attn_v { n_attn_v } else { n_ffn_down };
                    // llama.cpp counts these tensors as it meets them; a
                    // GGUF lists them layer by layer, so that is the layer.
                    let i = layer_of(name).unwrap_or(0);
                    match o.file_type {
                        FileType::Q4_K_M | FileType::Q5_K_M if use_more_bits(i, n) => {
                            to = GgmlType::Q6_K
                        }
                        FileType::Q4_K_S if (attn_v && i < 4) || (!attn_v && i < n / 8) => {
                            to = GgmlType::Q5_K
                        }
                        _ => {}
                    }
                }
            }
            // As llama.cpp's `tensor_type_fallback`, with --pure too.
            if is_quantized(to) && !cols.is_multiple_of(to.block_size()) {
                to = fallback_for(name, to, cols)?;
                choice.fallback = true;
            }
            if let Some(e) = o.token_embedding_type
                && name == "token_embd.weight"
            {
                to = e;
            }
            if let Some(ot) = o.output_tensor_type
                && name == "output.weight"
            {
                to = ot;
            }
            choice.to = to;
        }
        check(g, o, t, &choice)?;
        out.push(choice);
    }
    Ok(out)
}

fn check(g: &GgufFile, o: &QuantizeOptions, t: &TensorInfo, c: &TensorChoice) -> Result<()> {
    if !c.converts() {
        return Ok(());
    }
    let bad = |what: String| LoadError::BadTensor {
        path: g.path().to_path_buf(),
        tensor: c.name.clone(),
        what,
    };
    if !convertible(c.to) {
        return Err(bad(format!(
            "tiletune cannot write {} tensors; choose another type for it",
            c.to
        )));
    }
    if !convertible(c.from) {
        return Err(bad(format!(
            "tiletune cannot read {} tensors to quantize them again; start from an f16/bf16/f32 file or use llama.cpp's llama-quantize",
            c.from
        )));
    }
    if is_quantized(c.from) && !o.allow_requantize {
        return Err(bad(format!(
            "is already {}; requantizing loses quality against quantizing the original weights, so it needs --allow-requantize",
            c.from
        )));
    }
    let cols = t.dims.first().copied().unwrap_or(0);
    if !cols.is_multiple_of(c.to.block_size()) {
        return Err(bad(format!(
            "rows of {cols} elements are not whole {} blocks of {}; choose another type for it",
            c.to,
            c.to.block_size()
        )));
    }
    Ok(())
}

/// Sizes before and after, for the summary line.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QuantizeSummary {
    pub tensors: usize,
    /// Tensors whose type changed.
    pub converted: usize,
    pub fallbacks: usize,
    pub elements: u64,
    /// Tensor data bytes.
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// The whole output file.
    pub file_bytes: u64,
}

impl QuantizeSummary {
    /// Bits per weight of the input and the output tensor data.
    pub fn bpw(&self) -> (f64, f64) {
        let e = self.elements.max(1) as f64;
        (
            self.bytes_in as f64 * 8.0 / e,
            self.bytes_out as f64 * 8.0 / e,
        )
    }
}

/// Writes `g` with the types of `plan` (from [`plan`]) to `out`; `progress`
/// hears each tensor before it is converted. The file appears at `out`
/// only when complete.
pub fn quantize(
    g: &GgufFile,
    o: &QuantizeOptions,
    choices: &[TensorChoice],
    out: &Path,
    mut progress: impl FnMut(usize, &TensorChoice),
) -> Result<QuantizeSummary> {
    if let (Ok(a), Ok(b)) = (std::fs::canonicalize(g.path()), std::fs::canonicalize(out))
        && a == b
    {
        return Err(LoadError::Config(format!(
            "{} is the input file; write the quantized model to another path",
            out.display()
        )));
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(o.threads)
        .build()
        .map_err(|e| LoadError::Config(format!("cannot start the quantizer's threads: {e}")))?;
    let mut w = GgufWriter::new();
    let alignment = g.alignment();
    for (k, v) in g.metadata() {
        if k == "general.file_type" || k == "general.quantization_version" {
            continue;
        }
        w.kv(k, v.clone());
    }
    if alignment != crate::gguf::DEFAULT_ALIGNMENT {
        // `alignment` came from the file's own u32 key.
        w.alignment(alignment as u32);
    }
    w.kv("general.quantization_version", QUANTIZATION_VERSION)
        .kv("general.file_type", o.file_type.ftype_id());
    let specs: Vec<TensorSpec> = choices
        .iter()
        .map(|c| TensorSpec {
            name: c.name.clone(),
            dims: c.dims.clone(),
            ggml_type: c.to,
        })
        .collect();
    let mut sum = QuantizeSummary {
        tensors: choices.len(),
        converted: choices.iter().filter(|c| c.converts()).count(),
        fallbacks: choices.iter().filter(|c| c.fallback).count(),
        elements: 0,
        bytes_in: 0,
        bytes_out: 0,
        file_bytes: 0,
    };
    sum.file_bytes = w.write_streamed(out, &specs, |i, t| {
        let c = &choices[i];
        progress(i, c);
        let (info, data) = g.tensor_data(&c.name)?;
        sum.elements += info.n_elements();
        sum.bytes_in += data.len() as u64;
        // The input is read once: its pages are released as each slab is
        // written, so neither the input nor the output of a tensor is ever
        // whole in memory (an f32 embedding of a 7B is 2 GB).
        if c.converts() {
            sum.bytes_out += convert(g, c, data, &pool, t, SLAB_BYTES)?;
        } else {
            for slab in data.chunks(SLAB_BYTES) {
                t.put(slab)?;
                g.release(slab);
            }
            sum.bytes_out += data.len() as u64;
        }
        Ok(())
    })?;
    Ok(sum)
}

/// Rows handed to one quantizer task: enough work to be worth a task.
const ROWS_PER_TASK: usize = 16;

/// Input bytes converted at a time (whole rows, at least one task's).
const SLAB_BYTES: usize = 32 << 20;

/// Converts tensor `c`'s `data` into `out` a slab of rows (about
/// `slab_bytes` of input) at a time, each slab's rows on `pool`'s threads;
/// returns the bytes written.
fn convert(
    g: &GgufFile,
    c: &TensorChoice,
    data: &[u8],
    pool: &rayon::ThreadPool,
    out: &mut TensorOut<'_>,
    slab_bytes: usize,
) -> Result<u64> {
    let bad = |what: String| LoadError::BadTensor {
        path: g.path().to_path_buf(),
        tensor: c.name.clone(),
        what,
    };
    let cols = c.dims.first().copied().unwrap_or(1) as usize;
    let rows = (c.dims.iter().product::<u64>() as usize) / cols.max(1);
    let in_row = c
        .from
        .bytes_for(cols as u64)
        .ok_or_else(|| bad(format!("rows of {cols} are not whole {} blocks", c.from)))?
        as usize;
    let out_row =
        c.to.bytes_for(cols as u64)
            .ok_or_else(|| bad(format!("rows of {cols} are not whole {} blocks", c.to)))?
            as usize;
    if data.len() != in_row * rows {
        return Err(bad(format!(
            "{} bytes of data, {rows} rows of {in_row} expected",
            data.len()
        )));
    }
    let slab_rows = (slab_bytes / in_row.max(1))
        .next_multiple_of(ROWS_PER_TASK)
        .max(ROWS_PER_TASK);
    let mut buf = Vec::new();
    let mut written = 0;
    for src in data.chunks(in_row * slab_rows) {
        buf.clear();
        buf.resize(out_row * (src.len() / in_row), 0u8);
        pool.install(|| {
            buf.par_chunks_mut(out_row * ROWS_PER_TASK)
                .zip(src.par_chunks(in_row * ROWS_PER_TASK))
                .try_for_each(|(dst, src)| -> Result<()> {
                    let mut f = vec![0f32; cols];
                    for (d, s) in dst.chunks_exact_mut(out_row).zip(src.chunks_exact(in_row)) {
                        read_row(c.from, s, &mut f).map_err(|e| bad(format!("reading: {e}")))?;
                        write_row(c.to, &f, d).map_err(|e| bad(format!("quantizing: {e}")))?;
                    }
                    Ok(())
                })
        })?;
        out.put(&buf)?;
        g.release(src);
        written += buf.len() as u64;
    }
    Ok(written)
}

fn read_row(t: GgmlType, src: &[u8], dst: &mut [f32]) -> std::result::Result<(), String> {
    if let Some(q) = kernel_format(t) {
        return quant::dequantize(q, src, dst).map_err(|e| e.to_string());
    }
    let v = dequant::dequantize(t, src).ok_or_else(|| format!("no reader for {t}"))?;
    dst.copy_from_slice(&v);
    Ok(())
}

fn write_row(t: GgmlType, src: &[f32], dst: &mut [u8]) -> std::result::Result<(), String> {
    match t {
        GgmlType::F32 => {
            for (d, x) in dst.chunks_exact_mut(4).zip(src) {
                d.copy_from_slice(&x.to_le_bytes());
            }
        }
        GgmlType::F16 => {
            for (d, x) in dst.chunks_exact_mut(2).zip(src) {
                d.copy_from_slice(&half::f16::from_f32(*x).to_le_bytes());
            }
        }
        GgmlType::BF16 => {
            for (d, x) in dst.chunks_exact_mut(2).zip(src) {
                d.copy_from_slice(&f32_to_bf16(*x).to_le_bytes());
            }
        }
        _ => {
            let q = kernel_format(t).ok_or_else(|| format!("no writer for {t}"))?;
            quant::quantize_into(q, src, dst).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// ggml's `ggml_compute_fp32_to_bf16`: round to nearest even, a NaN kept a
/// quiet NaN.
fn f32_to_bf16(x: f32) -> u16 {
    let u = x.to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    ((u + (0x7fff + ((u >> 16) & 1))) >> 16) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn use_more_bits_is_llama_cpps() {
        // 24 layers: the first 3, the last 3, and i ≡ 2 (mod 3) after 3.
        let picked: Vec<usize> = (0..24).filter(|&i| use_more_bits(i, 24)).collect();
        assert_eq!(picked, [0, 1, 2, 5, 8, 11, 14, 17, 20, 21, 22, 23]);
    }

    #[test]
    fn fallbacks_are_llama_cpps() {
        let f = |t, cols| fallback_for("t", t, cols).unwrap();
        assert_eq!(f(GgmlType::Q4_K, 320), GgmlType::Q5_0);
        assert_eq!(f(GgmlType::Q5_K, 320), GgmlType::Q5_1);
        assert_eq!(f(GgmlType::Q6_K, 320), GgmlType::Q8_0);
        // Not even 32-value blocks: F16, for the 32-value types too.
        assert_eq!(f(GgmlType::Q4_K, 40), GgmlType::F16);
        assert_eq!(f(GgmlType::Q4_0, 40), GgmlType::F16);
        assert_eq!(f(GgmlType::Q8_0, 40), GgmlType::F16);
    }

    #[test]
    fn file_type_names_and_ids_parse() {
        for t in FileType::ALL {
            assert_eq!(FileType::parse(t.name()), Ok(t));
            assert_eq!(FileType::parse(&t.name().to_lowercase()), Ok(t));
            assert_eq!(FileType::parse(&t.ftype_id().to_string()), Ok(t));
        }
        assert_eq!(FileType::parse("q4_k"), Ok(FileType::Q4_K_M));
        assert_eq!(FileType::parse("Q5_K"), Ok(FileType::Q5_K_M));
        let e = FileType::parse("Q3_K_M").unwrap_err();
        assert!(e.contains("Q3_K") && e.contains("llama-quantize"), "{e}");
        let e = FileType::parse("q9").unwrap_err();
        assert!(e.contains("Q4_K_M"), "{e}");
        assert_eq!(parse_tensor_type("Q6_K"), Ok(GgmlType::Q6_K));
        assert!(parse_tensor_type("q3_k").unwrap_err().contains("q8_0"));
    }

    /// Slabs of rows give the bytes of one pass over the tensor, whatever
    /// the slab's size (a slab is whole tasks of rows; the last one short).
    #[test]
    fn slabs_write_the_bytes_of_one_pass() {
        let (cols, rows) = (256usize, 200usize);
        let values: Vec<f32> = (0..cols * rows)
            .map(|i| ((i * 7919) % 1000) as f32 / 250.0 - 2.0)
            .collect();
        let mut w = GgufWriter::new();
        w.tensor_f32("t", &[cols as u64, rows as u64], &values)
            .unwrap();
        let g = GgufFile::from_vec(w.to_bytes()).unwrap();
        let data = g.tensor_data("t").unwrap().1;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        for to in [GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::F16] {
            let c = TensorChoice {
                name: "t".into(),
                dims: vec![cols as u64, rows as u64],
                from: GgmlType::F32,
                to,
                fallback: false,
            };
            let pass = |slab: usize| {
                let mut bytes = Vec::new();
                let n = convert(
                    &g,
                    &c,
                    data,
                    &pool,
                    &mut TensorOut::new(&mut bytes, Path::new("t")),
                    slab,
                )
                .unwrap();
                assert_eq!(n as usize, bytes.len());
                bytes
            };
            let whole = pass(usize::MAX / 2);
            assert_eq!(
                whole.len() as u64,
                to.bytes_for((cols * rows) as u64).unwrap()
            );
            for slab in [1, cols * 4 * 17, cols * 4 * 16 * 3 + 5] {
                assert!(pass(slab) == whole, "{to} in slabs of {slab} bytes");
            }
        }
    }

    #[test]
    fn bf16_rounds_as_ggml() {
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        // Halfway cases round to even.
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert_eq!(f32_to_bf16(f32::NAN) & 0x7fc0, 0x7fc0);
    }
}
