//! Quantized prefill (`gemm` with a GGUF weight dtype, `m` activation rows)
//! as the tuner sees it: the W·A8 quantized GEMM on repacked weights
//! (variants `<isa>.qgemm`: every available ISA × its `mr` × interleave
//! candidates × thread counts), beside the per-row W·A8 GEMV the runtime
//! falls back to (`<isa>.a8`, default params, × thread counts; of both, the
//! scalar reference only where no other ISA runs, `contenders`), so the
//! table records which one wins (every quantized weight format has both).
//! The runtime's plan reads the kind back from the variant name.
//!
//! Each kind is checked against its own scalar definition with the W·A8
//! bound `|got − want| ≤ 1e-6 + 1e-5 · Σ|w·x|` per checked output: the per-row GEMV
//! against the scalar GEMV on each row (`qgemm::scalar::reference`), the
//! GEMM against `qgemm::scalar::definition` — the same thing for every
//! format but Q4_K and Q6_K, whose GEMV quantizes activations to Q8_K while
//! the GEMM uses Q8_1, so there the GEMM's definition is the scalar GEMM
//! (`Σ|w·x|` is taken with the GEMV's activations for both; it only scales
//! the bound, which GEMM variants, bit-identical to their definition, meet
//! with zero error), on the outputs `common::checked` samples (and every
//! output finite). Activations are quantized
//! inside the timed run, as the runtime does per call; weights are repacked
//! once per interleave outside it (the runtime repacks at load).

use super::common::{
    COL_EDGE, Copies, ROW_EDGE, SharedWeights, candidate_of, checked, cold_copies, on_threads,
    picked, row_scaled_err, thread_counts,
};
use super::spec::Machine;
use crate::TunerError;
use crate::campaign::{KernelProblem, Work};
use std::sync::Arc;
use tiletune_kernels::choice::KernelChoice;
use tiletune_kernels::qgemm::{self, PackedQ, QGemm, QGemmParams, QGemmShape};
use tiletune_kernels::qgemv::{self, QGemv, QGemvParams, QGemvShape, QMode};
use tiletune_kernels::quant::{self, QuantFormat};
use tiletune_kernels::testing::Rng;
use tiletune_kernels::{Isa, Tunable};
use tiletune_tables::{Candidate, Problem};

/// One configuration of the search space.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Config {
    Gemm(QGemm),
    Rows(QGemv),
}

/// The random operands and the scalar reference of one problem, on the
/// outputs [`checked`] picks.
struct Operands {
    w: Arc<Vec<u8>>,
    a: Vec<f32>,
    c: Vec<f32>,
    /// The checked outputs: these rows of C, and in each these columns.
    rows: Vec<usize>,
    cols: Vec<usize>,
    reference: Vec<f64>,
    /// The GEMM's definition where it differs from `reference` (K-quants).
    gemm_reference: Option<Vec<f64>>,
    magnitude: Vec<f64>,
}

impl Operands {
    fn new(
        weights: &SharedWeights,
        format: QuantFormat,
        (m, n, k): (usize, usize, usize),
        seed: u64,
        threads: usize,
    ) -> Result<Self, TunerError> {
        let w = weights.get(threads)?;
        let mut rng = Rng::new(seed);
        let a = rng.vec_f32(m * k);
        let rows = checked(m, ROW_EDGE, &mut rng);
        let cols = checked(n, COL_EDGE, &mut rng);
        let xs: Vec<f32> = rows
            .iter()
            .flat_map(|&r| &a[r * k..(r + 1) * k])
            .copied()
            .collect();
        let rb = format.row_bytes(k);
        let ws: Vec<u8> = cols
            .iter()
            .flat_map(|&j| &w[j * rb..(j + 1) * rb])
            .copied()
            .collect();
        let (r, nc) = (rows.len(), cols.len());
        let gemm = qgemm::supports(format) && !qgemm::scalar::matches_reference(format);
        // Σ|w·x| per checked output from the dequantized operands the
        // kernels see.
        let mut wd = vec![0.0f32; nc * k];
        quant::dequantize(format, &ws, &mut wd)?;
        // Each checked row's outputs depend on that row alone: the rows are
        // split over the machine's threads, which leaves every value as one
        // thread makes it.
        let parts = on_threads(r, threads, |range| {
            let xs = &xs[range.start * k..range.end * k];
            let rows = range.len();
            let mut c = vec![0.0f32; rows * nc];
            qgemm::scalar::reference(format, &ws, xs, rows, nc, k, &mut c)?;
            let reference: Vec<f64> = c.iter().map(|&v| v as f64).collect();
            let gemm_reference = if gemm {
                qgemm::scalar::definition(format, &ws, xs, rows, nc, k, &mut c)?;
                Some(c.iter().map(|&v| v as f64).collect::<Vec<f64>>())
            } else {
                None
            };
            let mut magnitude = Vec::with_capacity(rows * nc);
            for row in xs.chunks_exact(k.max(1)).take(rows) {
                let xq = qgemv::quantize_activations(format, row)?;
                let mut xd = vec![0.0f32; k];
                quant::dequantize(qgemv::activation_format(format), &xq, &mut xd)?;
                for wr in wd.chunks_exact(k.max(1)).take(nc) {
                    magnitude.push(
                        wr.iter()
                            .zip(&xd)
                            .map(|(&p, &q)| (p as f64 * q as f64).abs())
                            .sum(),
                    );
                }
            }
            magnitude.resize(rows * nc, 0.0);
            Ok((reference, gemm_reference, magnitude))
        })?;
        let mut reference = Vec::with_capacity(r * nc);
        let mut gemm_reference = gemm.then(|| Vec::with_capacity(r * nc));
        let mut magnitude = Vec::with_capacity(r * nc);
        for (part, gemm_part, mag) in parts {
            reference.extend(part);
            if let (Some(all), Some(p)) = (&mut gemm_reference, gemm_part) {
                all.extend(p);
            }
            magnitude.extend(mag);
        }
        Ok(Operands {
            w,
            a,
            c: vec![0.0f32; m * n],
            rows,
            cols,
            reference,
            gemm_reference,
            magnitude,
        })
    }
}

/// The ISAs of `variants` this CPU runs, without the scalar tile where
/// another runs: the scalar tile is the reference every variant is checked
/// against, never a contender beside SIMD, and one run of it at a prefill
/// shape takes longer than a budget's share (4.6 s on 256×9728×896 Q5_0,
/// against 8.7 ms for the AMX panel tile).
fn contenders(variants: &[Isa]) -> Vec<Isa> {
    let mut isas: Vec<Isa> = variants
        .iter()
        .copied()
        .filter(|i| i.is_available())
        .collect();
    if isas.iter().any(|&i| i != Isa::Scalar) {
        isas.retain(|&i| i != Isa::Scalar);
    }
    isas
}

pub(super) struct QGemmTune {
    spec: Problem,
    m: usize,
    n: usize,
    k: usize,
    format: QuantFormat,
    seed: u64,
    /// Threads making the operands (the machine's).
    threads: usize,
    /// Timed cold: the bytes the weight copies rotate through
    /// ([`Machine::cold_bytes`]; decode, whose weights the runtime reads
    /// with every other weight between two calls of one). `None`: one
    /// warm copy.
    rotate: Option<usize>,
    /// The random weights, shared with the other problems on the same
    /// weight (the model's decode GEMV and prefill buckets).
    weights: SharedWeights,
    /// Operands, references and weight copies: made at the first
    /// validation and dropped by `release`. A model's problems are all
    /// instantiated before the campaign starts, and its large ones are
    /// heavy (an m = 256 LM head, 151936×896, holds ~1.4 GB of weights,
    /// references and output), so each holds them only while it is tuned.
    data: Option<Data>,
    cands: Vec<Candidate>,
    configs: Vec<Config>,
}

/// What timing and validating a [`QGemmTune`] reads.
struct Data {
    /// Weight copies, each the GGUF bytes (the per-row GEMV reads these)
    /// and their repacks for each interleave a candidate reads.
    w: Copies<(Arc<Vec<u8>>, Vec<PackedQ>)>,
    a: Vec<f32>,
    c: Vec<f32>,
    scratch: Vec<u8>,
    /// The outputs `reference` holds, and a buffer for the candidate's.
    rows: Vec<usize>,
    cols: Vec<usize>,
    got: Vec<f32>,
    reference: Vec<f64>,
    gemm_reference: Option<Vec<f64>>,
    magnitude: Vec<f64>,
}

impl QGemmTune {
    pub(super) fn new(
        spec: Problem,
        format: QuantFormat,
        m: usize,
        n: usize,
        k: usize,
        mach: &Machine,
    ) -> Result<Self, TunerError> {
        let threads = thread_counts(mach.max_threads);
        let shape = QGemmShape { format, m, n, k };
        let mut configs = Vec::new();
        // Default first: what the runtime's plan picks without a table.
        let best = Isa::best_of(qgemm::variants(format));
        let mut isas = contenders(qgemm::variants(format));
        isas.sort_by_key(|&i| i != best);
        for &isa in &isas {
            let mut params = vec![QGemmParams::default_for_isa(&shape, &mach.caps, isa)];
            for p in QGemmParams::candidates_for_isa(&shape, &mach.caps, isa) {
                if !params.contains(&p) {
                    params.push(p);
                }
            }
            for &p in &params {
                for &t in threads.iter().rev() {
                    configs.push(Config::Gemm(
                        QGemm::new(format).isa(isa).params(p).threads(t),
                    ));
                }
            }
        }
        let rows_params = QGemvParams::default_for(
            &QGemvShape {
                format,
                mode: QMode::A8,
                n,
                k,
            },
            &mach.caps,
        );
        for &isa in contenders(qgemv::variants(format, QMode::A8)).iter().rev() {
            for &t in threads.iter().rev() {
                configs.push(Config::Rows(
                    QGemv::new(format, QMode::A8)
                        .isa(isa)
                        .params(rows_params)
                        .threads(t),
                ));
            }
        }
        // Decode (m = 1) streams its weights from DRAM in a model: time it
        // cold, as the per-row GEMV family does. Prefill reuses each weight
        // chunk for many rows and stays warm.
        Self::build(spec, format, (m, n, k), configs, mach, m == 1)
    }

    /// One forced GEMM configuration (`tiletune bench gemm --dtype q4_1`),
    /// `cold`: weights rotated through more memory than the last-level cache.
    pub(super) fn one(
        spec: Problem,
        q: QGemm,
        (m, n, k): (usize, usize, usize),
        mach: &Machine,
        cold: bool,
    ) -> Result<Self, TunerError> {
        Self::build(spec, q.format, (m, n, k), vec![Config::Gemm(q)], mach, cold)
    }

    fn build(
        spec: Problem,
        format: QuantFormat,
        (m, n, k): (usize, usize, usize),
        configs: Vec<Config>,
        mach: &Machine,
        cold: bool,
    ) -> Result<Self, TunerError> {
        // The operands are made later; a shape they cannot have is refused
        // now, with the error quantizing would give.
        quant::quantize(format, &vec![0.0f32; k])?;
        let cands = configs
            .iter()
            .map(|cfg| match cfg {
                Config::Gemm(q) => candidate_of(&KernelChoice::QGemm(*q)),
                Config::Rows(q) => candidate_of(&KernelChoice::QGemv(*q)),
            })
            .collect();
        Ok(QGemmTune {
            spec,
            m,
            n,
            k,
            format,
            seed: mach.seed,
            threads: mach.max_threads,
            rotate: cold.then(|| mach.cold_bytes()),
            weights: SharedWeights::new(format, n, k, mach.seed),
            data: None,
            cands,
            configs,
        })
    }

    /// The operands, made on first use.
    fn data(&mut self) -> Result<&mut Data, TunerError> {
        if self.data.is_none() {
            let (m, n, k) = (self.m, self.n, self.k);
            let Operands {
                w,
                a,
                c,
                rows,
                cols,
                reference,
                gemm_reference,
                magnitude,
            } = Operands::new(
                &self.weights,
                self.format,
                (m, n, k),
                self.seed,
                self.threads,
            )?;
            let mut packed: Vec<PackedQ> = Vec::new();
            for cfg in &self.configs {
                if let Config::Gemm(q) = cfg
                    && !packed.iter().any(|p| p.nr() == q.params.nr)
                {
                    packed.push(q.pack(&w, n, k)?);
                }
            }
            let bytes = packed
                .iter()
                .map(PackedQ::bytes)
                .chain([w.len()])
                .max()
                .unwrap_or(0);
            let copies = self.rotate.map_or(1, |r| cold_copies(bytes, r));
            self.data = Some(Data {
                w: Copies::new((w, packed), copies),
                a,
                c,
                scratch: Vec::new(),
                rows,
                cols,
                got: Vec::new(),
                reference,
                gemm_reference,
                magnitude,
            });
        }
        Ok(self.data.as_mut().expect("made above"))
    }

    /// Runs config `i` on the first weight copy, or with `next` on the
    /// next one.
    fn call(&mut self, i: usize, next: bool) -> Result<(), TunerError> {
        let (m, n, k) = (self.m, self.n, self.k);
        let cfg = self.configs[i];
        let d = self.data()?;
        let (w, packed) = if next { d.w.next() } else { d.w.first() };
        match cfg {
            Config::Gemm(q) => {
                let p = packed
                    .iter()
                    .find(|p| p.nr() == q.params.nr)
                    .expect("every interleave was packed");
                Ok(q.run(p, &d.a, m, &mut d.c, &mut d.scratch)?)
            }
            Config::Rows(q) => {
                if k == 0 || n == 0 {
                    d.c.fill(0.0);
                    return Ok(());
                }
                for (x, y) in d.a.chunks_exact(k).zip(d.c.chunks_exact_mut(n)) {
                    let xq = qgemv::quantize_activations(q.format, x)?;
                    q.run_prequantized(w, &xq, k, y)?;
                }
                Ok(())
            }
        }
    }
}

impl KernelProblem for QGemmTune {
    fn spec(&self) -> &Problem {
        &self.spec
    }
    fn candidates(&self) -> &[Candidate] {
        &self.cands
    }
    fn default_index(&self) -> usize {
        0
    }
    fn validate(&mut self, i: usize) -> Result<f32, String> {
        self.data().map_err(|e| e.to_string())?.c.fill(f32::NAN);
        self.call(i, false).map_err(|e| e.to_string())?;
        let gemm = matches!(self.configs[i], Config::Gemm(_));
        let n = self.n;
        let d = self.data().map_err(|e| e.to_string())?;
        let want = match (gemm, &d.gemm_reference) {
            (true, Some(g)) => g,
            _ => &d.reference,
        };
        if picked(&d.rows, &d.cols, &d.c, n, &mut d.got).is_none() {
            return Ok(f32::INFINITY);
        }
        Ok(row_scaled_err(&d.got, want, &d.magnitude))
    }
    fn tolerance(&self) -> f32 {
        1e-5
    }
    fn run(&mut self, i: usize) {
        let _ = self.call(i, true);
    }
    fn prepare(&mut self) {
        // An error resurfaces at the first validation.
        let _ = self.data();
    }
    fn release(&mut self) {
        self.data = None;
    }
    fn work(&self) -> Work {
        let (m, n, k) = (self.m as u64, self.n as u64, self.k as u64);
        Work {
            bytes: (self.n * self.format.row_bytes(self.k)) as u64 + 4 * m * k + 4 * m * n,
            flops: 2 * m * n * k,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checked_outputs_hold_the_edges_and_a_sample_between() {
        let mut rng = Rng::new(3);
        for len in [0, 1, 17, 48, 49, 77, 512] {
            let at = checked(len, 16, &mut rng);
            assert!(at.windows(2).all(|p| p[0] < p[1]), "len={len}: {at:?}");
            assert!(at.iter().all(|&r| r < len));
            if len <= 48 {
                assert_eq!(at, (0..len).collect::<Vec<_>>());
            } else {
                assert_eq!(at.len(), 48);
                assert!(
                    (0..16).chain(len - 16..len).all(|r| at.contains(&r)),
                    "len={len}"
                );
            }
        }
    }

    /// A model's decode GEMV (m = 1) and a prefill bucket on the same
    /// weight read the same bytes: the second does not make them again
    /// after the first released its operands, and a weight of another
    /// shape is its own.
    #[test]
    fn problems_on_one_weight_share_its_bytes() {
        let mach = Machine::small_for_tests(0x5EED_0002);
        let (n, k) = (40, 256);
        let make = |m: usize, n: usize| {
            let spec = Problem::new("gemm", "q4_k", [("m", m), ("n", n), ("k", k)]).unwrap();
            QGemmTune::new(spec, QuantFormat::Q4K, m, n, k, &mach).unwrap()
        };
        let (mut decode, mut prefill, mut other) = (make(1, n), make(16, n), make(16, n + 8));
        let bytes = |p: &mut QGemmTune| {
            p.prepare();
            Arc::clone(&p.data().unwrap().w.first().0)
        };
        let first = bytes(&mut decode);
        decode.release();
        let second = bytes(&mut prefill);
        assert!(Arc::ptr_eq(&first, &second));
        // The slot, the prefill problem's operands and the two here.
        assert_eq!(Arc::strong_count(&first), 4);
        assert!(!Arc::ptr_eq(&first, &bytes(&mut other)));
        // Both are still checked against their references.
        assert_eq!(decode.validate(0), Ok(0.0));
        assert_eq!(prefill.validate(0), Ok(0.0));
    }

    /// The references on the checked outputs are those outputs of the
    /// whole GEMM's, and a candidate's are read from where they are in C:
    /// a C shifted by one row, or by one column, is far out of tolerance,
    /// and one output left NaN anywhere fails.
    #[test]
    fn the_checked_outputs_are_the_whole_references() {
        let (m, n, k) = (200, 401, 64usize);
        for format in [QuantFormat::Q4_0, QuantFormat::Q4K] {
            let k = k.next_multiple_of(format.block_size());
            let w = SharedWeights::new(format, n, k, 5);
            let o = Operands::new(&w, format, (m, n, k), 5, 2).unwrap();
            assert_eq!((o.rows.len(), o.cols.len()), (192, 384));
            let mut whole = vec![0.0f32; m * n];
            qgemm::scalar::reference(format, &o.w, &o.a, m, n, k, &mut whole).unwrap();
            for (i, &r) in o.rows.iter().enumerate() {
                for (j, &c) in o.cols.iter().enumerate() {
                    let want = whole[r * n + c] as f64;
                    assert_eq!(o.reference[i * 384 + j], want, "{format} ({r}, {c})");
                }
            }
            let err = |c: &[f32]| {
                let mut got = Vec::new();
                match picked(&o.rows, &o.cols, c, n, &mut got) {
                    Some(()) => row_scaled_err(&got, &o.reference, &o.magnitude),
                    None => f32::INFINITY,
                }
            };
            assert_eq!(err(&whole), 0.0);
            if let Some(gemm) = &o.gemm_reference {
                let mut def = vec![0.0f32; m * n];
                qgemm::scalar::definition(format, &o.w, &o.a, m, n, k, &mut def).unwrap();
                for (i, &r) in o.rows.iter().enumerate() {
                    for (j, &c) in o.cols.iter().enumerate() {
                        assert_eq!(gemm[i * 384 + j], def[r * n + c] as f64, "{format}");
                    }
                }
            }
            // The rows split over other thread counts give the same values.
            for threads in [1, 3] {
                let t = Operands::new(&w, format, (m, n, k), 5, threads).unwrap();
                assert_eq!(t.reference, o.reference, "{format}, {threads} thread(s)");
                assert_eq!(t.gemm_reference, o.gemm_reference, "{format}");
                assert_eq!(t.magnitude, o.magnitude, "{format}");
            }
            let by_row: Vec<f32> = whole[n..].iter().chain(&whole[..n]).copied().collect();
            assert!(err(&by_row) > 1e-2, "{format}");
            let by_col: Vec<f32> = whole[1..].iter().chain(&whole[..1]).copied().collect();
            assert!(err(&by_col) > 1e-2, "{format}");
            // An output in a column the sample leaves out, left NaN.
            let mut hole = whole.clone();
            let j = (0..n).find(|j| !o.cols.contains(j)).unwrap();
            hole[20 * n + j] = f32::NAN;
            assert_eq!(err(&hole), f32::INFINITY, "{format}");
        }
    }
}
