//! The paged KV cache: fixed-size pages in one preallocated pool shared by
//! every sequence, and a page table per sequence (vLLM's block table).
//!
//! # Layout
//!
//! For each layer the K pool and the V pool are each
//! `[max_pages][n_kv_heads][page_size][row]`, where `row` is one token's
//! head vector in the page dtype: `head_dim` f32 or f16 values, or
//! `head_dim / 32` Q8_0 blocks. So within a page the keys of one head are
//! contiguous, which is what the attention kernels stream through. K pages
//! hold that head's block by columns instead, `[head_dim][page_size]`
//! (value `d` of every key, then `d + 1`, …; [`KvDtype`] says why), Q8_0
//! ones as [`Q8Col`] lays them out; V pages by rows, Q8_0 ones in quads of
//! positions ([`Q8Col`] again). Page index `p` means the same slot in every
//! layer's pool: a sequence owns a page for all layers at once, and its page
//! table lists its pages in position order (token `t` lives in page
//! `table[t / page_size]`, slot `t % page_size`). The pages a sequence gets
//! are whatever the free list hands out, so they are in no particular order.
//!
//! Each layer of a sequence keeps its own length, because a forward pass
//! appends layer by layer; [`PagedKvCache::len`] is the number of tokens every
//! layer already holds.

use super::KvDtype;
use crate::quant::{BlockQ8_0, QK, RawBlock, legacy};
use crate::{KernelError, Result};
use half::f16;
use half::slice::HalfFloatSliceExt;

/// Page sizes (tokens) worth sweeping when tuning a cache layout.
pub const PAGE_SIZES: [usize; 4] = [16, 32, 64, 128];

/// The analytic default page size: the largest of [`PAGE_SIZES`] whose K
/// page plus V page of one head fill at most half of L1D, so they stay in
/// L1 while the group of query heads sharing that KV head walks them (e.g.
/// 48 KiB L1D, head_dim 128: f32 → 16, f16 → 32, Q8_0 → 64). Smaller pages
/// waste less on each sequence's partial last page; larger pages mean
/// fewer online-softmax rescale steps.
pub fn default_page_size(head_dim: usize, dtype: KvDtype, cpu: &crate::CpuCaps) -> usize {
    let per_token = 2 * match dtype {
        KvDtype::F32 => 4 * head_dim,
        KvDtype::F16 => 2 * head_dim,
        KvDtype::Q8_0 => head_dim.div_ceil(QK) * BlockQ8_0::BYTES,
    };
    let fit = cpu.l1d / 2 / per_token.max(1);
    PAGE_SIZES
        .iter()
        .copied()
        .rfind(|&p| p <= fit)
        .unwrap_or(PAGE_SIZES[0])
}

/// A sequence handle returned by [`PagedKvCache::alloc_sequence`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeqId(pub u32);

/// The storage of one pool (all layers), in the page dtype.
#[derive(Debug)]
pub(crate) enum Store {
    F32(Vec<f32>),
    F16(Vec<f16>),
    /// Q8_0 K and V pages.
    Q8Cols(Vec<Q8Col>),
}

/// A copy on huge pages as well, as the original ([`huge_pages_vec`]).
impl Clone for Store {
    fn clone(&self) -> Self {
        fn copy<T: Clone + Default>(v: &[T]) -> Vec<T> {
            let mut c = huge_pages_vec(T::default(), v.len());
            c.clone_from_slice(v);
            c
        }
        match self {
            Store::F32(v) => Store::F32(copy(v)),
            Store::F16(v) => Store::F16(copy(v)),
            Store::Q8Cols(v) => Store::Q8Cols(copy(v)),
        }
    }
}

/// The storage unit of a Q8_0 K page: each key's llama.cpp Q8_0 blocks
/// (the same bytes, the same quantization) split into columns of four
/// values, the operand of an int8 dot-product instruction (`vpdpbusd`,
/// `sdot`: four bytes per 32-bit lane). One KV head's page of `ps` keys of
/// `hd` values is `hd / 4` rows of `ps` quads (values `4j..4j + 4` of key
/// `t` at bytes `4j · ps + 4t..`), so a vector of consecutive keys' quads
/// is one load and each lane's dot product stays in its lane; then `hd /
/// 32` rows of `ps` f16 scales (block `b` of key `t` at scale `b · ps +
/// t`). Two-byte words keep the scales aligned (`hd · ps` is even: `hd` is
/// a multiple of 32).
///
/// A Q8_0 V page holds the same blocks with the int8 part turned the other
/// way: quads of positions, value `j` of positions `4i..4i + 4` at bytes
/// `4i · hd + 4j..` ([`Q8Col::pos_offset`]), so a vector of consecutive
/// values' quads meets four probability weights of those positions in one
/// dot-product instruction (`body::accum_q8`); the scales as in a K page.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Q8Col(u16);

impl Q8Col {
    /// Words per key of `hd` values (`hd / 32` blocks of 34 bytes).
    pub(crate) fn per_key(hd: usize) -> usize {
        hd / QK * BlockQ8_0::BYTES / 2
    }

    /// Byte offset of value `d` of key `t` in a page of `ps` keys.
    #[inline(always)]
    pub(crate) fn offset(ps: usize, d: usize, t: usize) -> usize {
        (d & !3) * ps + 4 * t + (d & 3)
    }

    /// Byte offset of value `j` of position `t` in a V page of `hd` values
    /// per position: the K offset with the roles of the axes swapped.
    #[inline(always)]
    pub(crate) fn pos_offset(hd: usize, j: usize, t: usize) -> usize {
        Q8Col::offset(hd, t, j)
    }

    /// Where value `d` of key `t` lies in a page of `ps` keys: the quads
    /// of keys `t..` for values `d..d + 4` start there when `d % 4 == 0`.
    ///
    /// # Safety
    /// `page` is a whole page and value `d` of key `t` lies in it.
    #[inline(always)]
    pub(crate) unsafe fn value_at(page: *const Q8Col, ps: usize, d: usize, t: usize) -> *const i8 {
        // SAFETY: forwarded contract.
        unsafe { page.cast::<i8>().add(Q8Col::offset(ps, d, t)) }
    }

    /// Where value `j` of position `t` lies in a V page of `hd` values per
    /// position: the quads of positions `t..t + 4` for values `j..` start
    /// there when `t % 4 == 0`.
    ///
    /// # Safety
    /// `page` is a whole V page and value `j` of position `t` lies in it.
    #[inline(always)]
    pub(crate) unsafe fn pos_at(page: *const Q8Col, hd: usize, j: usize, t: usize) -> *const i8 {
        // SAFETY: forwarded contract.
        unsafe { page.cast::<i8>().add(Q8Col::pos_offset(hd, j, t)) }
    }

    /// Where the scale of block `b` of key `t` lies in a page of `ps` keys
    /// of `hd` values: after the `hd · ps` int8 (`hd · ps / 2` words).
    ///
    /// # Safety
    /// `page` is a whole page and `b · ps + t` lies in its scale part.
    #[inline(always)]
    pub(crate) unsafe fn scale_at(
        page: *const Q8Col,
        hd: usize,
        ps: usize,
        b: usize,
        t: usize,
    ) -> *const f16 {
        // SAFETY: forwarded contract.
        unsafe { page.add(hd * ps / 2).cast::<f16>().add(b * ps + t) }
    }

    /// The int8 values and the scales of a page of `ps` keys.
    pub(crate) fn split(page: &[Q8Col], hd: usize, ps: usize) -> (&[i8], &[f16]) {
        assert_eq!(page.len(), ps * Q8Col::per_key(hd), "one whole page");
        // SAFETY: the page is `hd · ps` bytes then `hd / 32 · ps` f16 (its
        // length, checked above); i8 and f16 (a transparent u16) take any
        // bits, the words are 2-aligned and `hd · ps / 2` is whole.
        unsafe {
            let p = page.as_ptr();
            (
                std::slice::from_raw_parts(Q8Col::value_at(p, ps, 0, 0), hd * ps),
                std::slice::from_raw_parts(Q8Col::scale_at(p, hd, ps, 0, 0), hd / QK * ps),
            )
        }
    }

    /// [`Q8Col::split`], mutable.
    fn split_mut(page: &mut [Q8Col], hd: usize, ps: usize) -> (&mut [i8], &mut [f16]) {
        assert_eq!(page.len(), ps * Q8Col::per_key(hd), "one whole page");
        // SAFETY: as in `split`; the two parts are disjoint.
        unsafe {
            let p = page.as_mut_ptr();
            (
                std::slice::from_raw_parts_mut(Q8Col::value_at(p, ps, 0, 0).cast_mut(), hd * ps),
                std::slice::from_raw_parts_mut(
                    Q8Col::scale_at(p, hd, ps, 0, 0).cast_mut(),
                    hd / QK * ps,
                ),
            )
        }
    }

    /// Value `d` of key `t` of a K page, dequantized.
    pub(crate) fn value(page: &[Q8Col], hd: usize, ps: usize, d: usize, t: usize) -> f32 {
        let (qs, sc) = Q8Col::split(page, hd, ps);
        sc[d / QK * ps + t].to_f32() * qs[Q8Col::offset(ps, d, t)] as f32
    }

    /// Value `j` of position `t` of a V page, dequantized.
    pub(crate) fn pos_value(page: &[Q8Col], hd: usize, ps: usize, j: usize, t: usize) -> f32 {
        let (qs, sc) = Q8Col::split(page, hd, ps);
        sc[j / QK * ps + t].to_f32() * qs[Q8Col::pos_offset(hd, j, t)] as f32
    }
}

#[derive(Debug, Clone)]
struct Seq {
    pages: Vec<u32>,
    /// Tokens stored per layer.
    lens: Vec<usize>,
}

/// A paged KV cache; see the module docs for the layout.
#[derive(Debug, Clone)]
pub struct PagedKvCache {
    n_layers: usize,
    n_kv_heads: usize,
    head_dim: usize,
    page_size: usize,
    dtype: KvDtype,
    max_pages: usize,
    pub(crate) k: Store,
    pub(crate) v: Store,
    /// Free pages, used as a stack.
    free: Vec<u32>,
    seqs: Vec<Option<Seq>>,
}

const OP: &str = "paged_kv_cache";

fn invalid(reason: String) -> KernelError {
    KernelError::InvalidShape { op: OP, reason }
}

impl PagedKvCache {
    /// Builds a cache of `max_pages` pages of `page_size` tokens, all layers
    /// and heads, allocated up front.
    ///
    /// Errors if a dimension is zero, if `max_pages` does not fit a `u32`, if
    /// the pool size overflows, or if `dtype` is Q8_0 and `head_dim` is not a
    /// multiple of 32 or `page_size` not one of 4.
    pub fn new(
        n_layers: usize,
        n_kv_heads: usize,
        head_dim: usize,
        page_size: usize,
        dtype: KvDtype,
        max_pages: usize,
    ) -> Result<Self> {
        if n_layers == 0 || n_kv_heads == 0 || head_dim == 0 || page_size == 0 || max_pages == 0 {
            return Err(invalid(format!(
                "n_layers = {n_layers}, n_kv_heads = {n_kv_heads}, head_dim = {head_dim}, \
                 page_size = {page_size}, max_pages = {max_pages}: all must be at least 1"
            )));
        }
        if dtype == KvDtype::Q8_0 && !head_dim.is_multiple_of(QK) {
            return Err(invalid(format!(
                "a Q8_0 KV cache needs head_dim to be a multiple of {QK}, got {head_dim}; \
                 use an f16 or f32 cache for this model"
            )));
        }
        if dtype == KvDtype::Q8_0 && !page_size.is_multiple_of(4) {
            return Err(invalid(format!(
                "a Q8_0 KV cache needs page_size to be a multiple of 4 (its V pages hold \
                 positions in fours), got {page_size}"
            )));
        }
        if max_pages > u32::MAX as usize {
            return Err(invalid(format!(
                "max_pages = {max_pages} does not fit a u32 page index; use fewer, larger pages"
            )));
        }
        let total = |row: usize| {
            [n_layers, max_pages, n_kv_heads, page_size, row]
                .iter()
                .try_fold(1usize, |a, &b| a.checked_mul(b))
                .ok_or_else(|| invalid("the pool size overflows usize; use fewer pages".into()))
        };
        let (k_total, v_total) = (
            total(dtype.k_row_elems(head_dim))?,
            total(dtype.v_row_elems(head_dim))?,
        );
        let (k, v) = match dtype {
            KvDtype::F32 => (
                Store::F32(huge_pages_vec(0.0, k_total)),
                Store::F32(huge_pages_vec(0.0, v_total)),
            ),
            KvDtype::F16 => (
                Store::F16(huge_pages_vec(f16::ZERO, k_total)),
                Store::F16(huge_pages_vec(f16::ZERO, v_total)),
            ),
            KvDtype::Q8_0 => (
                Store::Q8Cols(huge_pages_vec(Q8Col::default(), k_total)),
                Store::Q8Cols(huge_pages_vec(Q8Col::default(), v_total)),
            ),
        };
        Ok(PagedKvCache {
            n_layers,
            n_kv_heads,
            head_dim,
            page_size,
            dtype,
            max_pages,
            k,
            v,
            free: (0..max_pages as u32).rev().collect(),
            seqs: Vec::new(),
        })
    }

    pub fn n_layers(&self) -> usize {
        self.n_layers
    }
    pub fn n_kv_heads(&self) -> usize {
        self.n_kv_heads
    }
    pub fn head_dim(&self) -> usize {
        self.head_dim
    }
    pub fn page_size(&self) -> usize {
        self.page_size
    }
    pub fn dtype(&self) -> KvDtype {
        self.dtype
    }
    pub fn max_pages(&self) -> usize {
        self.max_pages
    }
    /// Pages not owned by any sequence.
    pub fn free_pages(&self) -> usize {
        self.free.len()
    }

    /// Elements of the K pool per token (one head).
    pub(crate) fn k_row_elems(&self) -> usize {
        self.dtype.k_row_elems(self.head_dim)
    }

    /// Elements of the V pool per token row (one head).
    pub(crate) fn v_row_elems(&self) -> usize {
        self.dtype.v_row_elems(self.head_dim)
    }

    /// Elements of one layer's pool of `row` elements per token.
    pub(crate) fn layer_elems(&self, row: usize) -> usize {
        self.max_pages * self.n_kv_heads * self.page_size * row
    }

    /// Registers a new, empty sequence (no pages yet).
    pub fn alloc_sequence(&mut self) -> SeqId {
        let seq = Seq {
            pages: Vec::new(),
            lens: vec![0; self.n_layers],
        };
        if let Some(i) = self.seqs.iter().position(Option::is_none) {
            self.seqs[i] = Some(seq);
            SeqId(i as u32)
        } else {
            self.seqs.push(Some(seq));
            SeqId(self.seqs.len() as u32 - 1)
        }
    }

    fn seq(&self, seq: SeqId) -> Result<&Seq> {
        self.seqs
            .get(seq.0 as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| unknown(seq))
    }

    /// Empties a sequence and returns its pages to the pool; the id stays valid.
    pub fn reset(&mut self, seq: SeqId) -> Result<()> {
        let s = self
            .seqs
            .get_mut(seq.0 as usize)
            .and_then(Option::as_mut)
            .ok_or_else(|| unknown(seq))?;
        // Reversed so that a sequence allocated next reuses them in order.
        self.free.extend(s.pages.drain(..).rev());
        s.lens.fill(0);
        Ok(())
    }

    /// Frees a sequence's pages and its id.
    pub fn free_sequence(&mut self, seq: SeqId) -> Result<()> {
        self.reset(seq)?;
        self.seqs[seq.0 as usize] = None;
        Ok(())
    }

    /// Keeps the first `len` tokens of every layer of `seq` (a chat
    /// rewinding a turn) and returns the pages past them to the pool; a
    /// `len` at or beyond a layer's length leaves that layer as it is.
    pub fn truncate(&mut self, seq: SeqId, len: usize) -> Result<()> {
        let ps = self.page_size;
        let s = self
            .seqs
            .get_mut(seq.0 as usize)
            .and_then(Option::as_mut)
            .ok_or_else(|| unknown(seq))?;
        s.lens.iter_mut().for_each(|l| *l = (*l).min(len));
        let keep = s.lens.iter().copied().max().unwrap_or(0).div_ceil(ps);
        if keep < s.pages.len() {
            // Reversed, as in `reset`, so the next append takes them back in order.
            self.free.extend(s.pages.drain(keep..).rev());
        }
        Ok(())
    }

    /// Tokens stored in every layer of `seq` (the position the next token
    /// of a forward pass will take).
    pub fn len(&self, seq: SeqId) -> Result<usize> {
        Ok(self.seq(seq)?.lens.iter().copied().min().unwrap_or(0))
    }

    /// Whether `seq` holds no token in some layer.
    pub fn is_empty(&self, seq: SeqId) -> Result<bool> {
        Ok(self.len(seq)? == 0)
    }

    /// Tokens stored in one layer of `seq`.
    pub fn layer_len(&self, seq: SeqId, layer: usize) -> Result<usize> {
        self.check_layer(layer)?;
        Ok(self.seq(seq)?.lens[layer])
    }

    /// The page table of `seq`: its pages in position order.
    pub fn page_table(&self, seq: SeqId) -> Result<&[u32]> {
        Ok(&self.seq(seq)?.pages)
    }

    fn check_layer(&self, layer: usize) -> Result<()> {
        if layer < self.n_layers {
            Ok(())
        } else {
            Err(invalid(format!(
                "layer {layer} does not exist; the cache has {} layers",
                self.n_layers
            )))
        }
    }

    /// Appends one token's keys and values (`[n_kv_heads * head_dim]` each)
    /// to `layer` of `seq`, taking a new page when needed.
    pub fn append(&mut self, seq: SeqId, layer: usize, k: &[f32], v: &[f32]) -> Result<()> {
        self.append_batch(seq, layer, k, v)
    }

    /// Appends `n` tokens (prefill): `k` and `v` are `[n, n_kv_heads * head_dim]`.
    /// Either every token is stored or, on error, nothing changes.
    pub fn append_batch(&mut self, seq: SeqId, layer: usize, k: &[f32], v: &[f32]) -> Result<()> {
        self.check_layer(layer)?;
        let tok = self.n_kv_heads * self.head_dim;
        if !k.len().is_multiple_of(tok) {
            return Err(invalid(format!(
                "k has {} values, not a whole number of tokens of n_kv_heads × head_dim = {tok}",
                k.len()
            )));
        }
        crate::error::check_len(OP, "v", v.len(), k.len())?;
        let n = k.len() / tok;
        let ps = self.page_size;
        let s = self.seq(seq)?;
        let start = s.lens[layer];
        let end = start
            .checked_add(n)
            .ok_or_else(|| invalid("sequence length overflows".into()))?;
        let need = end.div_ceil(ps).saturating_sub(s.pages.len());
        if need > self.free.len() {
            return Err(invalid(format!(
                "the page pool is exhausted: {need} more pages needed, {} free of {}; \
                 free or reset a sequence, or build the cache with more pages",
                self.free.len(),
                self.max_pages
            )));
        }
        let new_pages = self.free.split_off(self.free.len() - need);
        let s = self.seqs[seq.0 as usize].as_mut().expect("checked above");
        s.pages.extend(new_pages.into_iter().rev());
        s.lens[layer] = end;
        let (nkv, hd) = (self.n_kv_heads, self.head_dim);
        let (k_row, v_row) = (self.k_row_elems(), self.v_row_elems());
        let (k_layer, v_layer) = (
            layer * self.layer_elems(k_row),
            layer * self.layer_elems(v_row),
        );
        // Disjoint field borrows: the page table is read while the pools are written.
        let pages = &self.seqs[seq.0 as usize]
            .as_ref()
            .expect("checked above")
            .pages;
        for t in 0..n {
            let pos = start + t;
            let page = pages[pos / ps] as usize;
            for h in 0..nkv {
                let (unit, src) = ((page * nkv + h) * ps, t * tok + h * hd);
                write_col(
                    &mut self.k,
                    k_layer + unit * k_row,
                    (hd, ps),
                    pos % ps,
                    &k[src..src + hd],
                );
                write_row(
                    &mut self.v,
                    v_layer + unit * v_row,
                    (hd, ps),
                    pos % ps,
                    &v[src..src + hd],
                );
            }
        }
        Ok(())
    }

    /// The keys and values of `layer` of `seq` as dense f32
    /// `[len, n_kv_heads, head_dim]` (dequantized): what the attention
    /// kernels effectively see. For inspection and tests; allocates.
    pub fn gather(&self, seq: SeqId, layer: usize) -> Result<(Vec<f32>, Vec<f32>)> {
        let len = self.layer_len(seq, layer)?;
        let pages = &self.seq(seq)?.pages;
        let (nkv, hd, ps) = (self.n_kv_heads, self.head_dim, self.page_size);
        let (k_row, v_row) = (self.k_row_elems(), self.v_row_elems());
        let (k_layer, v_layer) = (
            layer * self.layer_elems(k_row),
            layer * self.layer_elems(v_row),
        );
        let mut k = vec![0.0; len * nkv * hd];
        let mut v = vec![0.0; len * nkv * hd];
        for pos in 0..len {
            let page = pages[pos / ps] as usize;
            for h in 0..nkv {
                let unit = (page * nkv + h) * ps;
                let dst = (pos * nkv + h) * hd;
                read_col(
                    &self.k,
                    k_layer + unit * k_row,
                    (hd, ps),
                    pos % ps,
                    &mut k[dst..dst + hd],
                );
                read_row(
                    &self.v,
                    v_layer + unit * v_row,
                    (hd, ps),
                    pos % ps,
                    &mut v[dst..dst + hd],
                );
            }
        }
        Ok((k, v))
    }

    /// Shuffles the free list so tests get page tables in random order.
    #[cfg(test)]
    pub(crate) fn shuffle_free(&mut self, rng: &mut crate::testing::Rng) {
        for i in (1..self.free.len()).rev() {
            let j = rng.below(i + 1);
            self.free.swap(i, j);
        }
    }
}

fn unknown(seq: SeqId) -> KernelError {
    invalid(format!(
        "sequence {} is not allocated; call alloc_sequence first",
        seq.0
    ))
}

/// Stores one head row of values as slot `t` of the V page of `ps`
/// positions at element `page` (Q8_0: llama.cpp's `quantize_row_q8_0_ref`,
/// 32 values per block, in quads of positions).
fn write_row(store: &mut Store, page: usize, (hd, ps): (usize, usize), t: usize, x: &[f32]) {
    match store {
        Store::F32(s) => s[page + t * hd..page + (t + 1) * hd].copy_from_slice(x),
        Store::F16(s) => s[page + t * hd..page + (t + 1) * hd].convert_from_f32_slice(x),
        Store::Q8Cols(s) => {
            let words = &mut s[page..page + ps * Q8Col::per_key(hd)];
            let (qs, sc) = Q8Col::split_mut(words, hd, ps);
            for (b, c) in x.chunks_exact(QK).enumerate() {
                let blk = legacy::quantize_q8_0(c.try_into().expect("chunks of QK"));
                sc[b * ps + t] = f16::from_le_bytes(blk.d.0);
                for (j, &q) in blk.qs.iter().enumerate() {
                    qs[Q8Col::pos_offset(hd, b * QK + j, t)] = q;
                }
            }
        }
    }
}

/// Stores one key by columns as slot `t` of the page of `ps` keys of `hd`
/// values at element `page` (see [`KvDtype`] and [`Q8Col`]).
fn write_col(store: &mut Store, page: usize, (hd, ps): (usize, usize), t: usize, x: &[f32]) {
    match store {
        Store::F32(s) => {
            for (d, &v) in x.iter().enumerate() {
                s[page + d * ps + t] = v;
            }
        }
        Store::F16(s) => {
            // Converted a slice at a time: `f16::from_f32` alone checks
            // the CPU and calls out for each value, which cost a SmolLM2
            // decode step 2% (docs/PERF.md, "One call for q, k and v").
            let mut h = [f16::ZERO; 64];
            for (i, x) in x.chunks(h.len()).enumerate() {
                let h = &mut h[..x.len()];
                h.convert_from_f32_slice(x);
                for (d, &v) in h.iter().enumerate() {
                    s[page + (i * 64 + d) * ps + t] = v;
                }
            }
        }
        Store::Q8Cols(s) => {
            let words = &mut s[page..page + ps * Q8Col::per_key(hd)];
            let (qs, sc) = Q8Col::split_mut(words, hd, ps);
            for (b, c) in x.chunks_exact(QK).enumerate() {
                let blk = legacy::quantize_q8_0(c.try_into().expect("chunks of QK"));
                sc[b * ps + t] = f16::from_le_bytes(blk.d.0);
                for (j, &q) in blk.qs.iter().enumerate() {
                    qs[Q8Col::offset(ps, b * QK + j, t)] = q;
                }
            }
        }
    }
}

/// Reads back one key stored by [`write_col`].
fn read_col(store: &Store, page: usize, (hd, ps): (usize, usize), t: usize, y: &mut [f32]) {
    match store {
        Store::F32(s) => {
            for (d, v) in y.iter_mut().enumerate() {
                *v = s[page + d * ps + t];
            }
        }
        Store::F16(s) => {
            for (d, v) in y.iter_mut().enumerate() {
                *v = s[page + d * ps + t].to_f32();
            }
        }
        Store::Q8Cols(s) => {
            let words = &s[page..page + ps * Q8Col::per_key(hd)];
            for (d, v) in y.iter_mut().enumerate() {
                *v = Q8Col::value(words, hd, ps, d, t);
            }
        }
    }
}

/// Reads back one row stored by [`write_row`].
fn read_row(store: &Store, page: usize, (hd, ps): (usize, usize), t: usize, y: &mut [f32]) {
    match store {
        Store::F32(s) => y.copy_from_slice(&s[page + t * hd..page + (t + 1) * hd]),
        Store::F16(s) => {
            for (d, v) in y.iter_mut().zip(&s[page + t * hd..page + (t + 1) * hd]) {
                *d = v.to_f32();
            }
        }
        Store::Q8Cols(s) => {
            let words = &s[page..page + ps * Q8Col::per_key(hd)];
            for (j, v) in y.iter_mut().enumerate() {
                *v = Q8Col::pos_value(words, hd, ps, j, t);
            }
        }
    }
}

/// `vec![x; n]`, its memory first offered to the kernel for transparent
/// huge pages ([`crate::mem`]). A decode step at a long context reads every
/// layer's K/V once, tens of MB scattered over page-sized runs, and with
/// 4 KiB pages nearly every run starts with a TLB miss, which in a VM is a
/// two-level page walk.
fn huge_pages_vec<T: Clone>(x: T, n: usize) -> Vec<T> {
    let mut v = Vec::with_capacity(n);
    crate::mem::advise_huge(v.as_ptr() as usize, n * size_of::<T>());
    v.resize(n, x);
    v
}
