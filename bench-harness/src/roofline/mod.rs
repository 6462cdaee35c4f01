//! This machine's roofline ceilings: sustained memory bandwidth (STREAM Copy
//! and Triad, 1..N threads, arrays far larger than the LLC), the f32
//! multiply-add peak of every ISA lane the CPU has and the int8 dot-product
//! peak of every int8 lane (VNNI, AVX2, dotprod, i8mm), 1..N threads. The tuner
//! and the reports express kernel results as a fraction of these.
//!
//! Sizes: each STREAM array is `max(4 × LLC, 256 MiB / 3)` by default, so the
//! three arrays together are ≥ 256 MiB and each is 4× the LLC, following
//! STREAM's rule that every array be at least 4× the sum of all caches.
//! Workers are pinned one per allowed CPU (in order) when there are enough.

pub mod ceiling;
mod fma;
#[cfg(target_arch = "aarch64")]
mod fma_neon;
#[cfg(target_arch = "x86_64")]
mod fma_x86;
mod int8;
#[cfg(target_arch = "aarch64")]
mod int8_neon;
#[cfg(target_arch = "x86_64")]
mod int8_x86;
pub mod stream;

pub use ceiling::{
    Arithmetic, CeilingKind, CeilingRow, Roofline, StoredCeiling, UnknownCeilingKind,
};
pub use fma::{FmaIsa, fma_loop};
pub use int8::{Int8Isa, int8_loop};

use crate::error::BenchError;
use crate::stats::median;
use serde::{Deserialize, Serialize};
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// LLC size assumed when sysfs does not report one.
pub const DEFAULT_LLC_BYTES: u64 = 32 << 20;
/// Minimum total size of the three STREAM arrays.
pub const MIN_TOTAL_BYTES: u64 = 256 << 20;

/// What to measure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RooflineConfig {
    /// Thread counts to measure (each ≥ 1).
    pub threads: Vec<usize>,
    /// Elements (f64) per STREAM array.
    pub array_len: usize,
    /// STREAM repetitions (the first is a warm-up and is not reported).
    pub reps: usize,
    /// Wall time one FMA repetition should last.
    pub fma_target: Duration,
    pub fma_reps: usize,
    /// FMA lanes to measure; `None` = every available lane.
    pub isas: Option<Vec<FmaIsa>>,
    /// Int8 lanes to measure; `None` = every available lane.
    pub int8_isas: Option<Vec<Int8Isa>>,
    /// Pin worker `i` to the `i`-th allowed CPU.
    pub pin: bool,
    /// The LLC size used to size the arrays (recorded).
    pub llc_bytes: u64,
    /// Memory the STREAM arrays may take, in bytes (MemAvailable); `None`:
    /// not checked.
    pub memory: Option<u64>,
}

/// Default thread counts: 1, 2, 4, ... and `max`.
pub fn thread_counts(max: usize) -> Vec<usize> {
    let mut v: Vec<usize> = std::iter::successors(Some(1usize), |t| t.checked_mul(2))
        .take_while(|&t| t < max)
        .collect();
    v.push(max.max(1));
    v
}

impl RooflineConfig {
    /// Full-size defaults for this machine.
    pub fn for_machine(llc_bytes: Option<u64>, max_threads: usize) -> RooflineConfig {
        let llc = llc_bytes.unwrap_or(DEFAULT_LLC_BYTES);
        let per_array = (4 * llc).max(MIN_TOTAL_BYTES.div_ceil(3));
        RooflineConfig {
            threads: thread_counts(max_threads),
            array_len: per_array.div_ceil(8) as usize,
            reps: 10,
            fma_target: Duration::from_millis(100),
            fma_reps: 5,
            isas: None,
            int8_isas: None,
            pin: true,
            llc_bytes: llc,
            memory: None,
        }
    }

    /// Tiny sizes for tests (numbers meaningless; exercises every path).
    pub fn tiny() -> RooflineConfig {
        RooflineConfig {
            threads: vec![1, 2],
            array_len: 4096,
            reps: 3,
            fma_target: Duration::from_micros(200),
            fma_reps: 2,
            isas: None,
            int8_isas: None,
            pin: false,
            llc_bytes: 0,
            memory: None,
        }
    }

    /// Measures only these lanes (FMA and int8 alike).
    pub fn only(&mut self, lanes: &[PeakLane]) {
        let (mut fma, mut int8) = (Vec::new(), Vec::new());
        for l in lanes {
            match *l {
                PeakLane::Fma(i) => fma.push(i),
                PeakLane::Int8(i) => int8.push(i),
            }
        }
        self.isas = Some(fma);
        self.int8_isas = Some(int8);
    }

    fn validate(&self) -> Result<(), BenchError> {
        let bad = |r: String| Err(BenchError::InvalidConfig { reason: r });
        if self.threads.is_empty() || self.threads.contains(&0) {
            return bad(format!(
                "thread counts must be >= 1, got {:?}",
                self.threads
            ));
        }
        if self.reps < 2 || self.fma_reps == 0 {
            return bad("roofline needs reps >= 2 and fma_reps >= 1".into());
        }
        if let Some(&t) = self.threads.iter().max()
            && self.array_len < t
        {
            return bad(format!(
                "array_len {} is smaller than {t} threads",
                self.array_len
            ));
        }
        // STREAM's a, b and c, of 8-byte elements.
        let need = 24 * self.array_len as u128;
        if let Some(available) = self.memory
            && need > available as u128
        {
            let gib = |b: u128| b as f64 / (1u64 << 30) as f64;
            return bad(format!(
                "the three STREAM arrays need {:.1} GiB and {:.1} GiB of memory is available; use a smaller --array-mib",
                gib(need),
                gib(available as u128)
            ));
        }
        Ok(())
    }
}

/// The Read pass at one software prefetch distance (GB/s).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ReadRate {
    /// Bytes ahead each line was requested (0: no software prefetch).
    pub ahead: usize,
    pub gbs: f64,
    pub median_gbs: f64,
}

/// Bandwidth at one thread count (GB/s = 10^9 bytes/s, STREAM byte counting).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BandwidthPoint {
    pub threads: usize,
    pub copy_gbs: f64,
    pub triad_gbs: f64,
    pub copy_median_gbs: f64,
    pub triad_median_gbs: f64,
    /// Read-only bandwidth (`Σ b[i]`, 8 bytes per element): the ceiling of
    /// kernels that only stream their operand in. 0 in reports from before
    /// it was measured.
    #[serde(default)]
    pub read_gbs: f64,
    #[serde(default)]
    pub read_median_gbs: f64,
    /// Bytes the fastest Read pass prefetched ahead (0: none, and in
    /// reports from before the distances were swept).
    #[serde(default)]
    pub read_ahead: usize,
    /// The Read pass at every distance of [`stream::READ_AHEADS`] (empty in
    /// older reports).
    #[serde(default)]
    pub read_by_ahead: Vec<ReadRate>,
    pub validated: bool,
}

/// FMA peak of one lane at one thread count (f32 GFLOP/s).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FmaPoint {
    pub isa: FmaIsa,
    pub lanes: usize,
    pub accumulators: usize,
    pub threads: usize,
    pub gflops: f64,
    pub median_gflops: f64,
}

/// Int8 dot-product peak of one lane at one thread count (GOP/s, a
/// multiply-add counted as two operations).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Int8Point {
    pub isa: Int8Isa,
    /// i32 lanes per accumulator register.
    pub lanes: usize,
    pub accumulators: usize,
    pub threads: usize,
    pub gops: f64,
    pub median_gops: f64,
}

/// The measured ceilings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ceilings {
    pub llc_bytes: u64,
    pub array_bytes: u64,
    pub total_bytes: u64,
    pub reps: usize,
    pub bandwidth: Vec<BandwidthPoint>,
    pub fma: Vec<FmaPoint>,
    /// Empty where no int8 lane ran (and in older records).
    #[serde(default)]
    pub int8: Vec<Int8Point>,
    /// Best Triad bandwidth over thread counts.
    pub peak_bandwidth_gbs: f64,
    /// Best FMA peak over lanes and thread counts.
    pub peak_gflops: f64,
    pub pinned: bool,
}

impl Ceilings {
    /// Best FMA peak of one lane (any thread count).
    pub fn peak_for(&self, isa: FmaIsa) -> Option<f64> {
        self.fma
            .iter()
            .filter(|p| p.isa == isa)
            .map(|p| p.gflops)
            .reduce(f64::max)
    }

    /// Best int8 peak of one lane (any thread count).
    pub fn int8_peak_for(&self, isa: Int8Isa) -> Option<f64> {
        self.int8
            .iter()
            .filter(|p| p.isa == isa)
            .map(|p| p.gops)
            .reduce(f64::max)
    }

    /// Arithmetic intensity (flop/byte) where the roofline's two ceilings meet.
    pub fn ridge_point(&self) -> f64 {
        self.peak_gflops / self.peak_bandwidth_gbs
    }
}

/// One step of the measurement, for progress display.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    pub done: usize,
    pub total: usize,
    pub step: String,
}

/// A register-resident peak loop: an f32 FMA lane or an int8 lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeakLane {
    Fma(FmaIsa),
    Int8(Int8Isa),
}

/// A loop with its own buffers: runs `iters` iterations, returns the operations done.
type Runner = Box<dyn FnMut(usize) -> Result<u64, BenchError>>;

impl PeakLane {
    /// Every lane, FMA lanes first.
    pub fn all() -> impl Iterator<Item = PeakLane> {
        FmaIsa::ALL
            .into_iter()
            .map(PeakLane::Fma)
            .chain(Int8Isa::ALL.into_iter().map(PeakLane::Int8))
    }

    pub fn name(self) -> &'static str {
        match self {
            PeakLane::Fma(i) => i.name(),
            PeakLane::Int8(i) => i.name(),
        }
    }

    /// The lane of a name (`avx2+fma`, `avx512_vnni`, ...), any case.
    pub fn from_name(s: &str) -> Option<PeakLane> {
        let s = s.trim();
        PeakLane::all().find(|l| l.name().eq_ignore_ascii_case(s))
    }

    pub fn is_available(self) -> bool {
        match self {
            PeakLane::Fma(i) => i.is_available(),
            PeakLane::Int8(i) => i.is_available(),
        }
    }

    fn runner(self) -> Runner {
        match self {
            PeakLane::Fma(isa) => {
                let init: Vec<f32> = (0..isa.accumulators()).map(|k| k as f32 * 0.01).collect();
                let mut out = vec![0.0f32; isa.accumulators() * isa.lanes()];
                Box::new(move |iters| {
                    let ops = fma_loop(isa, iters, 0.999_999, 1.0e-6, &init, &mut out)?;
                    std::hint::black_box(&out);
                    Ok(ops)
                })
            }
            PeakLane::Int8(isa) => {
                let (a, b) = int8::operands(isa);
                let init: Vec<i32> = (0..isa.accumulators() as i32).collect();
                let mut out = vec![0i32; isa.accumulators() * isa.lanes()];
                Box::new(move |iters| {
                    let ops = int8_loop(isa, iters, &a, &b, &init, &mut out)?;
                    std::hint::black_box(&out);
                    Ok(ops)
                })
            }
        }
    }
}

/// Runs the lane's loop on `threads` workers; returns per-rep wall times
/// (ns) and the operations of one worker's run.
fn peak_parallel(
    lane: PeakLane,
    iters: usize,
    threads: usize,
    reps: usize,
    cpus: Option<&[usize]>,
) -> Result<(Vec<f64>, u64), BenchError> {
    let barrier = Barrier::new(threads);
    let results: Vec<Result<(Vec<f64>, u64), BenchError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let barrier = &barrier;
                let cpu = cpus.and_then(|l| l.get(i)).copied();
                s.spawn(move || {
                    // Pinning is best effort: a failed pin must not leave the others at the barrier.
                    let _pin = cpu.and_then(|c| crate::pin::PinGuard::pin(&[c]).ok());
                    let mut run = lane.runner();
                    let mut times = Vec::with_capacity(reps);
                    let mut ops = 0;
                    for _ in 0..reps {
                        barrier.wait();
                        let t0 = Instant::now();
                        let r = run(iters);
                        barrier.wait();
                        times.push(t0.elapsed().as_nanos() as f64);
                        ops = r?;
                    }
                    Ok((times, ops))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(Err(BenchError::WorkerPanicked)))
            .collect()
    });
    let mut first = None;
    for r in results {
        let t = r?;
        first.get_or_insert(t);
    }
    Ok(first.expect("threads >= 1"))
}

/// Iterations so that one single-thread run of `lane` lasts about `target`.
fn calibrate(lane: PeakLane, target: Duration) -> Result<usize, BenchError> {
    let mut run = lane.runner();
    let mut iters = 1024usize;
    loop {
        let t0 = Instant::now();
        run(iters)?;
        let dt = t0.elapsed();
        if dt >= target / 8 || iters >= 1 << 34 {
            let scale = target.as_secs_f64() / dt.as_secs_f64().max(1e-9);
            return Ok(((iters as f64 * scale) as usize).max(1));
        }
        iters *= 4;
    }
}

/// Best and median rate (ops per ns = G ops/s) of `threads` workers.
fn peak_rates(
    lane: PeakLane,
    iters: usize,
    threads: usize,
    reps: usize,
    cpus: Option<&[usize]>,
) -> Result<(f64, f64), BenchError> {
    let (times, ops) = peak_parallel(lane, iters, threads, reps, cpus)?;
    let ops = ops as f64 * threads as f64;
    let rates: Vec<f64> = times.iter().map(|&ns| ops / ns.max(1.0)).collect();
    Ok((rates.iter().copied().fold(0.0, f64::max), median(&rates)))
}

/// Measures every ceiling; `progress` is called before each step.
pub fn measure_ceilings(
    cfg: &RooflineConfig,
    mut progress: impl FnMut(Progress),
) -> Result<Ceilings, BenchError> {
    cfg.validate()?;
    let isas: Vec<FmaIsa> = match &cfg.isas {
        Some(v) => v.iter().copied().filter(|i| i.is_available()).collect(),
        None => FmaIsa::available(),
    };
    let int8_isas: Vec<Int8Isa> = match &cfg.int8_isas {
        Some(v) => v.iter().copied().filter(|i| i.is_available()).collect(),
        None => Int8Isa::available(),
    };
    let allowed = crate::pin::affinity().unwrap_or_default();
    let max_t = cfg.threads.iter().copied().max().unwrap_or(1);
    let pin = cfg.pin && allowed.len() >= max_t;
    let cpus = pin.then_some(allowed.as_slice());
    let total = cfg.threads.len() * (1 + isas.len() + int8_isas.len());
    let mut done = 0;
    let mut step = |s: String, done: &mut usize| {
        progress(Progress {
            done: *done,
            total,
            step: s,
        });
        *done += 1;
    };

    let mut bandwidth = Vec::new();
    for &t in &cfg.threads {
        step(format!("stream copy/triad/read, {t} thread(s)"), &mut done);
        let r = stream::run(cfg.array_len, t, cfg.reps, cpus)?;
        let bytes = cfg.array_len as f64 * 8.0;
        // Skip the first repetition (page faults, cold TLB), as STREAM does.
        let gbs = |ns: &[f64], words: f64| {
            let rates: Vec<f64> = ns[1..]
                .iter()
                .map(|&t| words * bytes / t.max(1.0))
                .collect();
            (rates.iter().copied().fold(0.0, f64::max), median(&rates))
        };
        let (copy_gbs, copy_median_gbs) = gbs(&r.copy_ns, 2.0);
        let (triad_gbs, triad_median_gbs) = gbs(&r.triad_ns, 3.0);
        let read_by_ahead: Vec<ReadRate> = r
            .read_ns
            .iter()
            .zip(stream::READ_AHEADS)
            .map(|(ns, ahead)| {
                let (gbs, median_gbs) = gbs(ns, 1.0);
                ReadRate {
                    ahead,
                    gbs,
                    median_gbs,
                }
            })
            .collect();
        // The ceiling is the distance read fastest at, its median with it.
        let best = read_by_ahead
            .iter()
            .copied()
            .reduce(|a, b| if b.gbs > a.gbs { b } else { a })
            .expect("READ_AHEADS is not empty");
        let (read_gbs, read_median_gbs, read_ahead) = (best.gbs, best.median_gbs, best.ahead);
        bandwidth.push(BandwidthPoint {
            threads: t,
            copy_gbs,
            triad_gbs,
            copy_median_gbs,
            triad_median_gbs,
            read_gbs,
            read_median_gbs,
            read_ahead,
            read_by_ahead,
            validated: r.validated,
        });
    }

    let mut fma = Vec::new();
    for &isa in &isas {
        let iters = calibrate(PeakLane::Fma(isa), cfg.fma_target)?;
        for &t in &cfg.threads {
            step(format!("fma peak {}, {t} thread(s)", isa.name()), &mut done);
            let (gflops, median_gflops) =
                peak_rates(PeakLane::Fma(isa), iters, t, cfg.fma_reps, cpus)?;
            fma.push(FmaPoint {
                isa,
                lanes: isa.lanes(),
                accumulators: isa.accumulators(),
                threads: t,
                gflops,
                median_gflops,
            });
        }
    }
    let mut int8 = Vec::new();
    for &isa in &int8_isas {
        let lane = PeakLane::Int8(isa);
        let iters = calibrate(lane, cfg.fma_target)?;
        for &t in &cfg.threads {
            step(
                format!("int8 peak {}, {t} thread(s)", lane.name()),
                &mut done,
            );
            let (gops, median_gops) = peak_rates(lane, iters, t, cfg.fma_reps, cpus)?;
            int8.push(Int8Point {
                isa,
                lanes: isa.lanes(),
                accumulators: isa.accumulators(),
                threads: t,
                gops,
                median_gops,
            });
        }
    }
    progress(Progress {
        done: total,
        total,
        step: "done".into(),
    });
    let array_bytes = cfg.array_len as u64 * 8;
    Ok(Ceilings {
        llc_bytes: cfg.llc_bytes,
        array_bytes,
        total_bytes: 3 * array_bytes,
        reps: cfg.reps,
        peak_bandwidth_gbs: bandwidth.iter().map(|b| b.triad_gbs).fold(0.0, f64::max),
        peak_gflops: fma.iter().map(|p| p.gflops).fold(0.0, f64::max),
        bandwidth,
        fma,
        int8,
        pinned: pin,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_sizes_follow_the_stream_rule() {
        let c = RooflineConfig::for_machine(Some(32 << 20), 2);
        assert_eq!(c.array_len as u64 * 8, 128 << 20);
        assert_eq!(c.threads, vec![1, 2]);
        // Small LLC: the 256 MiB total floor wins.
        let c = RooflineConfig::for_machine(Some(1 << 20), 8);
        assert!(3 * c.array_len as u64 * 8 >= MIN_TOTAL_BYTES);
        assert_eq!(c.threads, vec![1, 2, 4, 8]);
        assert_eq!(thread_counts(6), vec![1, 2, 4, 6]);
        assert_eq!(thread_counts(1), vec![1]);
        assert_eq!(
            RooflineConfig::for_machine(None, 1).llc_bytes,
            DEFAULT_LLC_BYTES
        );
    }

    #[test]
    fn tiny_roofline_measures_every_point() {
        let cfg = RooflineConfig::tiny();
        let mut steps = Vec::new();
        let c = measure_ceilings(&cfg, |p| steps.push(p)).unwrap();
        let isas = FmaIsa::available();
        let int8 = Int8Isa::available();
        assert_eq!(c.bandwidth.len(), 2);
        assert_eq!(c.fma.len(), 2 * isas.len());
        assert_eq!(c.int8.len(), 2 * int8.len());
        assert!(c.int8.iter().all(|p| p.gops.is_finite()
            && p.gops > 0.0
            && p.gops >= p.median_gops
            && p.lanes == p.isa.lanes()));
        for isa in &int8 {
            assert!(c.int8_peak_for(*isa).is_some_and(|v| v > 0.0));
        }
        assert!(
            c.bandwidth
                .iter()
                .all(|b| b.validated && b.triad_gbs > 0.0 && b.copy_gbs.is_finite())
        );
        assert!(
            c.bandwidth
                .iter()
                .all(|b| b.triad_gbs >= b.triad_median_gbs)
        );
        // The read ceiling is the fastest distance's, and names it.
        for b in &c.bandwidth {
            let aheads: Vec<usize> = b.read_by_ahead.iter().map(|r| r.ahead).collect();
            assert_eq!(aheads, stream::READ_AHEADS);
            let best = b.read_by_ahead.iter().map(|r| r.gbs).fold(0.0, f64::max);
            assert!(best > 0.0 && b.read_gbs == best, "{b:?}");
            let at = b.read_by_ahead.iter().find(|r| r.ahead == b.read_ahead);
            assert_eq!(
                at.map(|r| (r.gbs, r.median_gbs)),
                Some((b.read_gbs, b.read_median_gbs))
            );
        }
        assert!(
            c.fma
                .iter()
                .all(|p| p.gflops > 0.0 && p.gflops >= p.median_gflops)
        );
        assert!(c.peak_gflops > 0.0 && c.peak_bandwidth_gbs > 0.0 && c.ridge_point() > 0.0);
        assert!(c.peak_for(FmaIsa::Scalar).is_some());
        assert_eq!(steps.len(), 2 * (1 + isas.len() + int8.len()) + 1);
        assert_eq!(steps.last().unwrap().done, steps.last().unwrap().total);
        // serde_json may differ in the last bit of a float; compare the text.
        let json = serde_json::to_string(&c).unwrap();
        let back: Ceilings = serde_json::from_str(&json).unwrap();
        assert_eq!(back.fma.len(), c.fma.len());
        assert_eq!(back.int8.len(), c.int8.len());
        // A record from before the int8 peak reads with none.
        let mut old = serde_json::to_value(&c).unwrap();
        old.as_object_mut().unwrap().remove("int8");
        let old: Ceilings = serde_json::from_value(old).unwrap();
        assert!(old.int8.is_empty());
        assert!((back.peak_gflops - c.peak_gflops).abs() <= 1e-9 * c.peak_gflops);
    }

    #[test]
    fn lanes_are_found_by_name_in_any_case() {
        assert_eq!(
            PeakLane::from_name(" AVX512_VNNI"),
            Some(PeakLane::Int8(Int8Isa::Avx512Vnni))
        );
        assert_eq!(
            PeakLane::from_name("avx2+fma"),
            Some(PeakLane::Fma(FmaIsa::Avx2Fma))
        );
        assert_eq!(PeakLane::from_name("sse9"), None);
        assert_eq!(
            PeakLane::all().count(),
            FmaIsa::ALL.len() + Int8Isa::ALL.len()
        );
        assert!(PeakLane::Fma(FmaIsa::Scalar).is_available());
        let mut c = RooflineConfig::tiny();
        c.only(&[
            PeakLane::Int8(Int8Isa::NeonI8mm),
            PeakLane::Fma(FmaIsa::Scalar),
        ]);
        assert_eq!(c.isas, Some(vec![FmaIsa::Scalar]));
        assert_eq!(c.int8_isas, Some(vec![Int8Isa::NeonI8mm]));
    }

    #[test]
    fn bad_configs_are_rejected() {
        let mut c = RooflineConfig::tiny();
        c.threads = vec![0];
        assert!(measure_ceilings(&c, |_| {}).is_err());
        let mut c = RooflineConfig::tiny();
        c.reps = 1;
        assert!(measure_ceilings(&c, |_| {}).is_err());
        let mut c = RooflineConfig::tiny();
        c.array_len = 1;
        assert!(measure_ceilings(&c, |_| {}).is_err());
    }
}
