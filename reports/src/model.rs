//! From table rows to plot models: pure functions that decide what each plot
//! and table shows (which ceilings form the roof, where each problem sits,
//! which two parameters span a heatmap, which counters a candidate has), so
//! the decisions are tested without drawing anything.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use tiletune_bench::roofline::{Arithmetic, CeilingKind};
use tiletune_tables::{Candidate, Ceiling, Measurement, PeerResult, Problem, Selection, Work};

// ---- labels ------------------------------------------------------------------

/// `gemv f32 896x896`: a problem for people.
pub fn problem_label(p: &Problem) -> String {
    format!("{} {} {}", p.op(), p.dtype(), p.shape_string())
}

/// A selection's problem with its thread budget: `gemv f32 896x896 ≤2t`.
pub fn selection_label(s: &Selection) -> String {
    format!("{} ≤{}t", problem_label(&s.problem), s.thread_budget)
}

/// `avx512 kc=45,nr=8 t1` (or `t2@cluster1` when pinned), as `tiletune
/// tune` prints winners: two placements with one thread count differ.
pub fn candidate_label(c: &Candidate) -> String {
    let params = match c.params() {
        Value::Object(m) if !m.is_empty() => m
            .iter()
            .map(|(k, v)| format!("{k}={}", value_text(v)))
            .collect::<Vec<_>>()
            .join(","),
        Value::Object(_) | Value::Null => String::new(),
        other => value_text(other),
    };
    if params.is_empty() {
        format!("{} {}", c.variant(), c.placement().name())
    } else {
        format!("{} {params} {}", c.variant(), c.placement().name())
    }
}

/// A JSON scalar as plain text (strings unquoted).
pub fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "null".to_string(),
        other => other.to_string(),
    }
}

/// Whether a measurement is the analytic default of its problem: the tuner
/// stores the default's median as the selection's `default_ns`, copied from
/// the same number, so equality (to rounding) identifies it.
fn is_default(m: &Measurement, default_ns: Option<f64>) -> bool {
    match (m.median_ns, default_ns) {
        (Some(a), Some(b)) => (a - b).abs() <= 1e-9 * b.abs().max(1.0),
        _ => false,
    }
}

// ---- roofline ----------------------------------------------------------------

/// One ceiling line of the roofline.
#[derive(Clone, Debug, PartialEq)]
pub struct Roof {
    pub kind: String,
    /// e.g. `STREAM triad`, `FMA peak avx512`, `int8 peak neon_dotprod`.
    pub label: String,
    pub threads: usize,
    /// GB/s for a bandwidth roof, GFLOP/s for an FMA roof, GOP/s for an int8 roof.
    pub value: f64,
}

/// A tuned problem on the roofline.
#[derive(Clone, Debug, PartialEq)]
pub struct RoofPoint {
    pub label: String,
    /// FLOP (int8: operations) per byte.
    pub intensity: f64,
    /// GFLOP/s, or GOP/s for int8 work (the work model counts an integer
    /// multiply-add as two operations, as the int8 peak does).
    pub tuned_gflops: f64,
    pub default_gflops: Option<f64>,
    /// What the tuned winner computes in: f32 work sits under the best FMA
    /// peak, int8 work under the int8 peak of its ISA.
    pub arith: Arithmetic,
    /// The int8 roof of the winner's ISA, for int8 work.
    pub int8_roof: Option<Roof>,
    /// Why int8 work has no roof: no int8 peak for its ISA in this table,
    /// or an ISA without an int8 dot-product instruction.
    pub no_roof: Option<String>,
}

/// The machine's roofline and every tuned problem that has a work model.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Roofline {
    pub bandwidth: Vec<Roof>,
    /// The f32 FMA peaks.
    pub peaks: Vec<Roof>,
    /// The int8 dot-product peaks (GOP/s).
    pub int8_peaks: Vec<Roof>,
    pub points: Vec<RoofPoint>,
    /// Selections without a point, with the reason.
    pub skipped: Vec<String>,
}

/// A stored ceiling kind for people: `STREAM triad`, `FMA peak avx512`,
/// `int8 peak neon_dotprod`; a kind no tiletune writes as it is stored.
pub fn ceiling_label(kind: &str) -> String {
    match kind.parse::<CeilingKind>() {
        Ok(CeilingKind::FmaPeak(isa)) => format!("FMA peak {}", isa.name()),
        Ok(CeilingKind::Int8Peak(isa)) => format!("int8 peak {}", isa.name()),
        _ => match kind.strip_prefix("mem_bw_") {
            Some(k) => format!("STREAM {k}"),
            None => kind.to_string(),
        },
    }
}

/// The best value of every ceiling kind over its thread counts (the roof is
/// what the machine can reach; a noisy 2-thread run below the 1-thread one
/// must not lower it), by unit: GB/s roofs slope, GFLOP/s (f32 FMA) and
/// GOP/s (int8) roofs are flat. Returns (bandwidth, FMA, int8) roofs.
pub fn best_ceilings(ceilings: &[Ceiling]) -> (Vec<Roof>, Vec<Roof>, Vec<Roof>) {
    let mut best: BTreeMap<&str, &Ceiling> = BTreeMap::new();
    for c in ceilings
        .iter()
        .filter(|c| c.value.is_finite() && c.value > 0.0)
    {
        let e = best.entry(c.kind.as_str()).or_insert(c);
        if c.value > e.value {
            *e = c;
        }
    }
    let (mut bw, mut peak, mut int8) = (Vec::new(), Vec::new(), Vec::new());
    for (kind, c) in best {
        let roof = Roof {
            kind: kind.to_string(),
            label: ceiling_label(kind),
            threads: c.threads,
            value: c.value,
        };
        match c.unit.as_str() {
            "GB/s" => bw.push(roof),
            "GFLOP/s" => peak.push(roof),
            "GOP/s" => int8.push(roof),
            _ => {}
        }
    }
    // Highest first: the legend reads top-down like the plot.
    let by_value = |a: &Roof, b: &Roof| b.value.total_cmp(&a.value);
    bw.sort_by(by_value);
    peak.sort_by(by_value);
    int8.sort_by(by_value);
    (bw, peak, int8)
}

/// The int8 roof of a tuned winner doing int8 work, or why it has none.
fn int8_roof(int8_peaks: &[Roof], dtype: &str, variant: &str) -> Result<Roof, String> {
    let kind = CeilingKind::compute_roof(Arithmetic::Int8, variant)?.to_string();
    int8_peaks
        .iter()
        .find(|r| r.kind == kind)
        .cloned()
        .ok_or_else(|| {
            format!(
                "int8 work ({dtype}, `{variant}`) but no `{kind}` ceiling stored (a table from before `tiletune bench roofline` measured int8 peaks, or a run without that lane): re-run `tiletune bench roofline` to place it under its int8 roof"
            )
        })
}

/// The work model the tuner stored with a problem's measurements (every
/// candidate of a problem shares it); `None` when no row carries one.
pub fn stored_work(problem: &Problem, measurements: &[Measurement]) -> Option<Work> {
    measurements
        .iter()
        .filter(|m| m.problem == *problem)
        .find_map(|m| m.stats.work)
}

/// Places each selection at its arithmetic intensity, tuned and default,
/// with the work model stored with its measurements.
pub fn roofline(
    ceilings: &[Ceiling],
    selections: &[Selection],
    measurements: &[Measurement],
) -> Roofline {
    let (bandwidth, peaks, int8_peaks) = best_ceilings(ceilings);
    let mut out = Roofline {
        bandwidth,
        peaks,
        int8_peaks,
        ..Roofline::default()
    };
    for s in selections {
        let label = selection_label(s);
        let Some(w) = stored_work(&s.problem, measurements) else {
            out.skipped.push(format!(
                "{label}: no work model stored with its measurements (rows from another tool or an older tiletune; re-tune to place it)"
            ));
            continue;
        };
        let (Some(intensity), Some(tuned)) = (w.intensity(), w.gflops(s.median_ns)) else {
            out.skipped.push(format!("{label}: no arithmetic work"));
            continue;
        };
        let variant = s.winner.variant();
        let arith = Arithmetic::of_kernel(s.problem.dtype(), variant);
        let (int8_roof, no_roof) = match arith {
            Arithmetic::F32 => (None, None),
            Arithmetic::Int8 => match int8_roof(&out.int8_peaks, s.problem.dtype(), variant) {
                Ok(r) => (Some(r), None),
                Err(why) => (None, Some(why)),
            },
        };
        out.points.push(RoofPoint {
            label,
            intensity,
            tuned_gflops: tuned,
            default_gflops: s.default_ns.and_then(|d| w.gflops(d)),
            arith,
            int8_roof,
            no_roof,
        });
    }
    out
}

impl Roofline {
    /// The attainable GFLOP/s at an intensity: min(best bandwidth × AI, best peak).
    pub fn attainable(&self, intensity: f64) -> Option<f64> {
        let bw = self.bandwidth.first().map(|r| r.value * intensity);
        let peak = self.peaks.first().map(|r| r.value);
        match (bw, peak) {
            (Some(b), Some(p)) => Some(b.min(p)),
            (b, p) => b.or(p),
        }
    }

    /// The attainable rate of a point under its own roof: min(best bandwidth
    /// × AI, its compute peak), the best FMA peak for f32 work and its ISA's
    /// int8 peak for int8 work; `None` when int8 work has no int8 roof
    /// (never the FMA one, which int8 dot products exceed).
    pub fn attainable_for(&self, p: &RoofPoint) -> Option<f64> {
        match p.arith {
            Arithmetic::F32 => self.attainable(p.intensity),
            Arithmetic::Int8 => {
                let peak = p.int8_roof.as_ref()?.value;
                Some(
                    self.bandwidth
                        .first()
                        .map_or(peak, |b| (b.value * p.intensity).min(peak)),
                )
            }
        }
    }

    /// The intensity where the best bandwidth roof meets the best peak.
    pub fn ridge(&self) -> Option<f64> {
        Some(self.peaks.first()?.value / self.bandwidth.first()?.value)
    }

    /// Axis ranges (x: FLOP/byte, y: GFLOP/s) covering every point and the
    /// ridge, padded to whole decades on a log scale.
    pub fn bounds(&self) -> ((f64, f64), (f64, f64)) {
        let mut xs: Vec<f64> = self.points.iter().map(|p| p.intensity).collect();
        xs.extend(self.ridge());
        let mut ys: Vec<f64> = self
            .points
            .iter()
            .flat_map(|p| std::iter::once(p.tuned_gflops).chain(p.default_gflops))
            .collect();
        ys.extend(self.peaks.iter().chain(&self.int8_peaks).map(|r| r.value));
        // A bandwidth roof is visible from where it crosses the lowest point.
        let decade = |v: f64, up: bool| {
            let l = v.log10();
            10f64.powf(if up { l.ceil() } else { l.floor() })
        };
        let span = |v: &[f64], lo_default: f64, hi_default: f64| {
            let lo = v
                .iter()
                .copied()
                .filter(|x| *x > 0.0)
                .fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(0.0, f64::max);
            if !lo.is_finite() || hi <= 0.0 {
                return (lo_default, hi_default);
            }
            let (lo, hi) = (decade(lo, false), decade(hi, true));
            if hi > lo { (lo, hi) } else { (lo, lo * 10.0) }
        };
        let x = span(&xs, 0.1, 100.0);
        let mut y = span(&ys, 0.1, 1000.0);
        // Room above the highest roof for its label.
        if ys.iter().any(|v| *v >= y.1 / 1.5) {
            y.1 *= 10.0;
        }
        (x, y)
    }
}

// ---- tuned vs default ---------------------------------------------------------

/// One problem's winner against the analytic default.
#[derive(Clone, Debug, PartialEq)]
pub struct SpeedupRow {
    pub label: String,
    pub winner: String,
    pub tuned_ns: f64,
    pub default_ns: Option<f64>,
    /// default / tuned: above 1 the tuned choice is faster.
    pub speedup: Option<f64>,
    pub tuned_gflops: Option<f64>,
}

/// Speedups in table order; recomputed from the medians rather than trusting
/// the stored column.
pub fn speedups(selections: &[Selection], measurements: &[Measurement]) -> Vec<SpeedupRow> {
    selections
        .iter()
        .map(|s| SpeedupRow {
            label: selection_label(s),
            winner: candidate_label(&s.winner),
            tuned_ns: s.median_ns,
            default_ns: s.default_ns,
            speedup: s.computed_speedup(),
            tuned_gflops: stored_work(&s.problem, measurements).and_then(|w| w.gflops(s.median_ns)),
        })
        .collect()
}

// ---- parameter heatmaps --------------------------------------------------------

/// What a heatmap cell holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CellMetric {
    /// Best GFLOP/s over the parameters not on the axes (higher is better).
    Gflops,
    /// Best GOP/s, when every candidate computes in int8 (the work model
    /// counts an integer multiply-add as 2 operations, as the int8 peak does).
    Gops,
    /// Best GFLOP/s or GOP/s, when the candidates mix f32 and int8 arithmetic
    /// (a quantized problem's W·A32 and W·A8 variants); the same work model
    /// counts both, so the cells compare.
    FlopsOrOps,
    /// Best median time in µs, when the problem has no work model (lower is better).
    Micros,
}

impl CellMetric {
    pub fn unit(self) -> &'static str {
        match self {
            CellMetric::Gflops => "GFLOP/s",
            CellMetric::Gops => "GOP/s",
            CellMetric::FlopsOrOps => "GFLOP/s or GOP/s",
            CellMetric::Micros => "µs",
        }
    }

    pub fn higher_is_better(self) -> bool {
        self != CellMetric::Micros
    }

    /// The rate metric of work computed in `ariths`.
    fn rate(ariths: impl IntoIterator<Item = Arithmetic>) -> Self {
        let (mut f32, mut int8) = (false, false);
        for a in ariths {
            match a {
                Arithmetic::F32 => f32 = true,
                Arithmetic::Int8 => int8 = true,
            }
        }
        match (f32, int8) {
            (false, true) => CellMetric::Gops,
            (true, true) => CellMetric::FlopsOrOps,
            _ => CellMetric::Gflops,
        }
    }
}

/// Performance over the two most varied tuning parameters of one problem.
#[derive(Clone, Debug, PartialEq)]
pub struct Heatmap {
    pub problem: String,
    pub x_name: String,
    pub y_name: String,
    pub x_values: Vec<String>,
    pub y_values: Vec<String>,
    /// `cells[y][x]`; `None` where no valid candidate was measured.
    pub cells: Vec<Vec<Option<f64>>>,
    pub metric: CellMetric,
    /// Cell of the overall best candidate, and of the analytic default.
    pub best: Option<(usize, usize)>,
    pub default: Option<(usize, usize)>,
    /// Valid candidates folded into the grid.
    pub candidates: usize,
}

/// Why a problem has no heatmap.
#[derive(Clone, Debug, PartialEq)]
pub enum HeatmapOutcome {
    Map(Heatmap),
    NoData { problem: String, reason: String },
}

/// The tuning dimensions of a candidate: its params, `threads` and `variant`.
fn dimensions(c: &Candidate) -> Vec<(String, String)> {
    let mut dims = Vec::new();
    if let Value::Object(m) = c.params() {
        for (k, v) in m {
            dims.push((k.clone(), value_text(v)));
        }
    }
    dims.push(("threads".to_string(), c.threads().to_string()));
    dims.push(("variant".to_string(), c.variant().to_string()));
    dims
}

/// Numeric values in numeric order, anything else in text order.
fn sort_values(values: BTreeSet<String>) -> Vec<String> {
    let mut v: Vec<String> = values.into_iter().collect();
    if v.iter().all(|s| s.parse::<f64>().is_ok()) {
        v.sort_by(|a, b| {
            a.parse::<f64>()
                .unwrap_or(0.0)
                .total_cmp(&b.parse::<f64>().unwrap_or(0.0))
        });
    }
    v
}

/// Builds the heatmap of one problem from its measurements: the axes are the
/// two dimensions with the most distinct values (ties: parameters before
/// `threads` before `variant`, then by name); each cell keeps the best
/// candidate among those sharing its two values. With one varying dimension
/// the map is a single row.
pub fn heatmap(
    problem: &Problem,
    measurements: &[Measurement],
    default_ns: Option<f64>,
) -> HeatmapOutcome {
    let label = problem_label(problem);
    let valid: Vec<&Measurement> = measurements
        .iter()
        .filter(|m| m.valid && m.problem == *problem)
        .filter(|m| m.median_ns.is_some_and(|ns| ns.is_finite() && ns > 0.0))
        .collect();
    if valid.is_empty() {
        return HeatmapOutcome::NoData {
            problem: label,
            reason: "no valid timed candidate".to_string(),
        };
    }
    let w: Option<Work> = stored_work(problem, measurements).filter(|w| w.flops > 0);
    let metric = if w.is_some() {
        CellMetric::rate(
            valid
                .iter()
                .map(|m| Arithmetic::of_kernel(problem.dtype(), m.candidate.variant())),
        )
    } else {
        CellMetric::Micros
    };
    let value = |m: &Measurement| -> f64 {
        let ns = m.median_ns.unwrap_or(f64::NAN);
        match w {
            Some(w) => w.flops as f64 / ns,
            None => ns / 1e3,
        }
    };

    let rows: Vec<Vec<(String, String)>> = valid.iter().map(|m| dimensions(&m.candidate)).collect();
    let mut distinct: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for dims in &rows {
        for (k, v) in dims {
            distinct.entry(k.clone()).or_default().insert(v.clone());
        }
    }
    // A dimension absent from some candidates (another variant's params)
    // still counts; the missing value shows as "—".
    for dims in &rows {
        for (k, set) in distinct.iter_mut() {
            if !dims.iter().any(|(dk, _)| dk == k) {
                set.insert("—".to_string());
            }
        }
    }
    let rank = |name: &str| match name {
        "threads" => 1,
        "variant" => 2,
        _ => 0,
    };
    let mut varying: Vec<(&String, usize)> = distinct
        .iter()
        .filter(|(_, s)| s.len() > 1)
        .map(|(k, s)| (k, s.len()))
        .collect();
    varying.sort_by(|a, b| {
        b.1.cmp(&a.1)
            .then(rank(a.0).cmp(&rank(b.0)))
            .then(a.0.cmp(b.0))
    });
    let (x_name, y_name) = match varying.as_slice() {
        [] => {
            return HeatmapOutcome::NoData {
                problem: label,
                reason: format!(
                    "all {} valid measurement(s) share one configuration: nothing to map",
                    valid.len()
                ),
            };
        }
        [only] => (only.0.clone(), None),
        [a, b, ..] => (a.0.clone(), Some(b.0.clone())),
    };
    let x_values = sort_values(distinct[&x_name].clone());
    let y_values = match &y_name {
        Some(y) => sort_values(distinct[y].clone()),
        None => vec!["all".to_string()],
    };
    let lookup = |dims: &[(String, String)], name: &str| {
        dims.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| "—".to_string())
    };
    let better = |a: f64, b: f64| {
        if metric.higher_is_better() {
            a > b
        } else {
            a < b
        }
    };
    let mut cells = vec![vec![None; x_values.len()]; y_values.len()];
    let mut best: Option<((usize, usize), f64)> = None;
    let mut default = None;
    for (m, dims) in valid.iter().zip(&rows) {
        let xv = lookup(dims, &x_name);
        let yv = match &y_name {
            Some(y) => lookup(dims, y),
            None => "all".to_string(),
        };
        let (Some(xi), Some(yi)) = (
            x_values.iter().position(|v| *v == xv),
            y_values.iter().position(|v| *v == yv),
        ) else {
            continue;
        };
        let v = value(m);
        let cell: &mut Option<f64> = &mut cells[yi][xi];
        if cell.is_none_or(|c| better(v, c)) {
            *cell = Some(v);
        }
        if best.is_none_or(|(_, b)| better(v, b)) {
            best = Some(((xi, yi), v));
        }
        if is_default(m, default_ns) {
            default = Some((xi, yi));
        }
    }
    HeatmapOutcome::Map(Heatmap {
        problem: label,
        x_name,
        y_name: y_name.unwrap_or_else(|| "—".to_string()),
        x_values,
        y_values,
        cells,
        metric,
        best: best.map(|(c, _)| c),
        default,
        candidates: valid.len(),
    })
}

impl Heatmap {
    /// Smallest and largest cell values.
    pub fn range(&self) -> Option<(f64, f64)> {
        let vals = self.cells.iter().flatten().flatten().copied();
        let (lo, hi) = vals.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
        lo.is_finite().then_some((lo, hi))
    }
}

// ---- PMU metrics per candidate ---------------------------------------------------

/// One column of a PMU table.
#[derive(Clone, Debug, PartialEq)]
pub struct PmuColumn {
    /// The key in the counters JSON (`ipc`, `topdown.retiring`, `sw.task-clock`…).
    pub key: &'static str,
    pub header: &'static str,
    /// A share in [0, 1], shown as a percentage.
    pub fraction: bool,
    /// Derived from hardware counters (false: software events).
    pub hardware: bool,
}

const PMU_COLUMNS: &[PmuColumn] = &[
    PmuColumn {
        key: "ipc",
        header: "IPC",
        fraction: false,
        hardware: true,
    },
    PmuColumn {
        key: "l1d_miss_rate",
        header: "L1D miss",
        fraction: true,
        hardware: true,
    },
    PmuColumn {
        key: "l2_miss_rate",
        header: "L2 miss",
        fraction: true,
        hardware: true,
    },
    PmuColumn {
        key: "llc_miss_rate",
        header: "LLC miss",
        fraction: true,
        hardware: true,
    },
    PmuColumn {
        key: "branch_mpki",
        header: "branch MPKI",
        fraction: false,
        hardware: true,
    },
    PmuColumn {
        key: "frontend_stall_share",
        header: "FE stall",
        fraction: true,
        hardware: true,
    },
    PmuColumn {
        key: "backend_stall_share",
        header: "BE stall",
        fraction: true,
        hardware: true,
    },
    PmuColumn {
        key: "simd_share",
        header: "SIMD share",
        fraction: true,
        hardware: true,
    },
    PmuColumn {
        key: "topdown.retiring",
        header: "TD retiring",
        fraction: true,
        hardware: true,
    },
    PmuColumn {
        key: "topdown.frontend_bound",
        header: "TD FE bound",
        fraction: true,
        hardware: true,
    },
    PmuColumn {
        key: "topdown.backend_bound",
        header: "TD BE bound",
        fraction: true,
        hardware: true,
    },
    PmuColumn {
        key: "topdown.bad_speculation",
        header: "TD bad spec",
        fraction: true,
        hardware: true,
    },
    PmuColumn {
        key: "task_clock_us",
        header: "task-clock µs/run (counted thread)",
        fraction: false,
        hardware: false,
    },
    PmuColumn {
        key: "sw.context-switches",
        header: "ctx switches/run",
        fraction: false,
        hardware: false,
    },
    PmuColumn {
        key: "sw.cpu-migrations",
        header: "migrations/run",
        fraction: false,
        hardware: false,
    },
    PmuColumn {
        key: "sw.page-faults",
        header: "page faults/run",
        fraction: false,
        hardware: false,
    },
];

/// One candidate's counters.
#[derive(Clone, Debug, PartialEq)]
pub struct PmuRow {
    pub candidate: String,
    /// `winner`, `default`, `winner, default` or empty.
    pub role: String,
    pub median_ns: f64,
    pub gflops: Option<f64>,
    /// The tuner's measurement fidelity (longer runs at higher levels); a
    /// short low-fidelity median can undercut the winner's full-fidelity one.
    pub fidelity: Option<u64>,
    /// Aligned with [`PmuTable::columns`].
    pub values: Vec<Option<f64>>,
}

/// Counters of one problem's candidates, fastest first.
#[derive(Clone, Debug, PartialEq)]
pub struct PmuTable {
    pub problem: String,
    pub columns: Vec<PmuColumn>,
    pub rows: Vec<PmuRow>,
    /// Whether any row has a hardware-counter metric.
    pub hardware: bool,
    /// Why hardware counters were not used, as the harness reported it.
    pub fallback: Option<String>,
    /// Valid candidates not listed (beyond the row limit).
    pub omitted: usize,
    /// Candidates that failed validation (never timed).
    pub invalid: usize,
}

fn metric_value(counters: &Value, key: &str) -> Option<f64> {
    let num = |v: Option<&Value>| v.and_then(Value::as_f64).filter(|x| x.is_finite());
    let metrics = counters.get("metrics");
    if let Some(name) = key.strip_prefix("topdown.") {
        return num(metrics?.get("topdown")?.get(name));
    }
    if let Some(name) = key.strip_prefix("sw.") {
        return num(counters
            .get("counts")?
            .get("values")?
            .get(name)?
            .get("scaled"));
    }
    if key == "task_clock_us" {
        // Counted on the calling thread only: with t > 1 it mostly waits for
        // the pool's workers, so this is not "CPUs busy".
        return num(metrics?.get("task_clock_ns")).map(|ns| ns / 1e3);
    }
    num(metrics?.get(key))
}

/// The PMU table of one problem: up to `max_rows` fastest valid candidates,
/// plus the default and the winner when they are further down.
pub fn pmu_table(
    problem: &Problem,
    measurements: &[Measurement],
    selection: Option<&Selection>,
    max_rows: usize,
) -> PmuTable {
    let mut valid: Vec<&Measurement> = measurements
        .iter()
        .filter(|m| m.problem == *problem && m.valid)
        .filter(|m| m.median_ns.is_some_and(|ns| ns.is_finite() && ns > 0.0))
        .collect();
    let invalid = measurements
        .iter()
        .filter(|m| m.problem == *problem && !m.valid)
        .count();
    valid.sort_by(|a, b| {
        a.median_ns
            .unwrap_or(f64::INFINITY)
            .total_cmp(&b.median_ns.unwrap_or(f64::INFINITY))
    });
    let default_ns = selection.and_then(|s| s.default_ns);
    let role = |m: &Measurement| {
        let mut r = Vec::new();
        if selection.is_some_and(|s| s.winner == m.candidate) {
            r.push("winner");
        }
        if is_default(m, default_ns) {
            r.push("default");
        }
        r.join(", ")
    };
    let mut picked: Vec<&Measurement> = valid.iter().take(max_rows).copied().collect();
    for m in valid.iter().skip(max_rows) {
        if !role(m).is_empty() {
            picked.push(m);
        }
    }
    let omitted = valid.len() - picked.len();
    let w = stored_work(problem, measurements);
    let fallback = valid
        .iter()
        .find_map(|m| m.counters.get("fallback").and_then(Value::as_str))
        .map(str::to_string);
    let present: Vec<PmuColumn> = PMU_COLUMNS
        .iter()
        .filter(|c| {
            picked
                .iter()
                .any(|m| metric_value(&m.counters, c.key).is_some())
        })
        .cloned()
        .collect();
    let rows = picked
        .iter()
        .map(|m| {
            let ns = m.median_ns.unwrap_or(f64::NAN);
            PmuRow {
                candidate: candidate_label(&m.candidate),
                role: role(m),
                median_ns: ns,
                gflops: w.and_then(|w| w.gflops(ns)),
                fidelity: m.stats.fidelity.map(u64::from),
                values: present
                    .iter()
                    .map(|c| metric_value(&m.counters, c.key))
                    .collect(),
            }
        })
        .collect();
    PmuTable {
        problem: problem_label(problem),
        hardware: present.iter().any(|c| c.hardware),
        columns: present,
        rows,
        fallback,
        omitted,
        invalid,
    }
}

// ---- peers -------------------------------------------------------------------------

/// Whether a peer result is a perplexity run rather than a speed test.
pub fn is_ppl(test: &str) -> bool {
    test.to_ascii_lowercase().starts_with("ppl")
}

/// The newest result per (model, engine, test, threads).
fn newest(results: &[PeerResult]) -> Vec<&PeerResult> {
    let mut by_key: BTreeMap<(&str, &str, &str, usize), &PeerResult> = BTreeMap::new();
    for r in results {
        let e = by_key
            .entry((&r.model, &r.engine, &r.test, r.threads))
            .or_insert(r);
        if r.measured_at > e.measured_at {
            *e = r;
        }
    }
    by_key.into_values().collect()
}

/// Tokens/s and its standard deviation.
pub type Speed = (f64, Option<f64>);

/// Tokens/s of each engine per (test, threads) for one model: grouped bars.
#[derive(Clone, Debug, PartialEq)]
pub struct PeerChart {
    pub model: String,
    /// `pp512 · 2 threads`
    pub groups: Vec<String>,
    pub engines: Vec<String>,
    /// `values[group][engine]`: tokens/s and its standard deviation.
    pub values: Vec<Vec<Option<Speed>>>,
}

/// One speed result with its ratio to tiletune's on the same test.
#[derive(Clone, Debug, PartialEq)]
pub struct PeerRow {
    pub model: String,
    pub test: String,
    pub threads: usize,
    pub engine: String,
    pub version: String,
    pub tokens_per_s: f64,
    pub std: Option<f64>,
    /// tokens/s ÷ tiletune's tokens/s on the same model, test and threads.
    pub vs_tiletune: Option<f64>,
}

/// A perplexity result.
#[derive(Clone, Debug, PartialEq)]
pub struct PplRow {
    pub model: String,
    pub engine: String,
    pub version: String,
    pub test: String,
    pub threads: usize,
    /// From the raw record's `ppl` (or `perplexity`) field.
    pub ppl: Option<f64>,
    /// From `ppl_err` / `ppl_std` / `perplexity_err` / `plus_minus` (what
    /// `tiletune compare ppl` stores for llama-perplexity's `± x`).
    pub ppl_err: Option<f64>,
    pub tokens_per_s: f64,
}

/// The peer section's charts and tables.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Peers {
    pub charts: Vec<PeerChart>,
    pub rows: Vec<PeerRow>,
    pub ppl: Vec<PplRow>,
}

/// Splits peer results into speed charts per model and the perplexity table.
pub fn peers(results: &[PeerResult]) -> Peers {
    let latest = newest(results);
    let num = |r: &PeerResult, keys: &[&str]| {
        keys.iter()
            .find_map(|k| r.json.get(*k).and_then(Value::as_f64))
            .filter(|v| v.is_finite())
    };
    let mut out = Peers::default();
    for r in latest.iter().filter(|r| is_ppl(&r.test)) {
        out.ppl.push(PplRow {
            model: r.model.clone(),
            engine: r.engine.clone(),
            version: r.engine_version.clone(),
            test: r.test.clone(),
            threads: r.threads,
            ppl: num(r, &["ppl", "perplexity"]),
            ppl_err: num(r, &["ppl_err", "ppl_std", "perplexity_err", "plus_minus"]),
            tokens_per_s: r.tokens_per_s,
        });
    }
    // A speed that is not a finite non-negative number is a broken record.
    let speed: Vec<&PeerResult> = latest
        .into_iter()
        .filter(|r| !is_ppl(&r.test) && r.tokens_per_s.is_finite() && r.tokens_per_s >= 0.0)
        .collect();
    let models: BTreeSet<&str> = speed.iter().map(|r| r.model.as_str()).collect();
    for model in models {
        let rs: Vec<&PeerResult> = speed.iter().copied().filter(|r| r.model == model).collect();
        let mut group_keys: Vec<(&str, usize)> =
            rs.iter().map(|r| (r.test.as_str(), r.threads)).collect();
        group_keys.sort_by(|a, b| test_order(a.0).cmp(&test_order(b.0)).then(a.cmp(b)));
        group_keys.dedup();
        // tiletune first, then the peers by name.
        let mut engines: Vec<&str> = rs.iter().map(|r| r.engine.as_str()).collect();
        engines.sort_by_key(|e| (*e != "tiletune", *e));
        engines.dedup();
        let values = group_keys
            .iter()
            .map(|(t, th)| {
                engines
                    .iter()
                    .map(|e| {
                        rs.iter()
                            .find(|r| r.test == *t && r.threads == *th && r.engine == *e)
                            .map(|r| (r.tokens_per_s, r.std))
                    })
                    .collect()
            })
            .collect();
        for (t, th) in &group_keys {
            let base = rs
                .iter()
                .find(|r| r.engine == "tiletune" && r.test == *t && r.threads == *th)
                .map(|r| r.tokens_per_s)
                .filter(|v| *v > 0.0);
            for e in &engines {
                if let Some(r) = rs
                    .iter()
                    .find(|r| r.test == *t && r.threads == *th && r.engine == *e)
                {
                    out.rows.push(PeerRow {
                        model: model.to_string(),
                        test: r.test.clone(),
                        threads: r.threads,
                        engine: r.engine.clone(),
                        version: r.engine_version.clone(),
                        tokens_per_s: r.tokens_per_s,
                        std: r.std,
                        vs_tiletune: base.map(|b| r.tokens_per_s / b),
                    });
                }
            }
        }
        out.charts.push(PeerChart {
            model: model.to_string(),
            groups: group_keys
                .iter()
                .map(|(t, th)| format!("{t} · {th} thread{}", if *th == 1 { "" } else { "s" }))
                .collect(),
            engines: engines.iter().map(|e| e.to_string()).collect(),
            values,
        });
    }
    out
}

/// Prompt processing before generation, then by name.
fn test_order(test: &str) -> u8 {
    if test.starts_with("pp") {
        0
    } else if test.starts_with("tg") {
        1
    } else {
        2
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tiletune_tables::MeasurementStats;

    /// Two placements with the same thread count get different labels.
    #[test]
    fn candidate_labels_name_the_placement() {
        use tiletune_tables::Placement;
        let p = json!({"nr": 8});
        let plain = Candidate::new("avx2", p.clone(), 2).unwrap();
        let big = Candidate::placed(
            "avx2",
            p.clone(),
            Placement::pinned(2, vec![1], vec![2, 3]).unwrap(),
        )
        .unwrap();
        assert_eq!(candidate_label(&plain), "avx2 nr=8 t2");
        assert_eq!(candidate_label(&big), "avx2 nr=8 t2@cluster1");
        let bare = Candidate::new("scalar", json!({}), 1).unwrap();
        assert_eq!(candidate_label(&bare), "scalar t1");
    }

    const SOC: &str = "f00d";

    fn gemv() -> Problem {
        Problem::new("gemv", "f32", [("n", 1000), ("k", 1000)]).unwrap()
    }

    fn ceiling(kind: &str, threads: usize, value: f64, unit: &str) -> Ceiling {
        Ceiling {
            soc: SOC.into(),
            kind: kind.into(),
            threads,
            value,
            unit: unit.into(),
            campaign: None,
            measured_at: 100,
        }
    }

    fn selection(p: Problem, median_ns: f64, default_ns: Option<f64>) -> Selection {
        Selection {
            soc: SOC.into(),
            kernel_abi: 1,
            problem: p,
            thread_budget: 2,
            winner: Candidate::new("avx512", json!({"nr": 8, "kc": 256}), 2).unwrap(),
            median_ns,
            default_ns,
            speedup: None,
            campaign: None,
            selected_at: 0,
        }
    }

    /// The tuner's model for the f32 GEMV the tests use (2·n·k flops; the
    /// weights, x and y in f32); the other ops here have none stored.
    fn work_of(p: &Problem) -> Option<Work> {
        (*p == gemv()).then_some(Work {
            bytes: 4_000_000 + 8_000,
            flops: 2_000_000,
        })
    }

    fn meas(
        p: &Problem,
        params: Value,
        threads: usize,
        ns: Option<f64>,
        counters: Value,
    ) -> Measurement {
        Measurement {
            campaign: "c".into(),
            soc: SOC.into(),
            kernel_abi: 1,
            problem: p.clone(),
            candidate: Candidate::new("avx512", params, threads).unwrap(),
            median_ns: ns,
            stats: MeasurementStats {
                fidelity: Some(3),
                work: work_of(p),
                ..MeasurementStats::default()
            },
            counters,
            valid: ns.is_some(),
            invalid_reason: ns.is_none().then(|| "mismatch".to_string()),
            measured_at: 0,
        }
    }

    #[test]
    fn roofline_uses_the_best_ceiling_per_kind_and_places_points() {
        let ceilings = [
            ceiling("mem_bw_triad", 1, 14.0, "GB/s"),
            ceiling("mem_bw_triad", 2, 12.0, "GB/s"), // noisy: lower with more threads
            ceiling("mem_bw_copy", 2, 10.0, "GB/s"),
            ceiling("fma_peak_avx512", 1, 80.0, "GFLOP/s"),
            ceiling("fma_peak_scalar", 2, 4.0, "GFLOP/s"),
            ceiling("odd", 1, 1.0, "furlongs"),
        ];
        // 2 MFLOP in 1 ms = 2 GFLOP/s tuned; 4 ms default = 0.5 GFLOP/s.
        let sels = [
            selection(gemv(), 1e6, Some(4e6)),
            selection(
                Problem::new("softmax", "f32", [("rows", 4), ("dim", 8)]).unwrap(),
                1e3,
                None,
            ),
        ];
        let ms = [meas(&gemv(), json!({"nr": 8}), 2, Some(1e6), json!({}))];
        let r = roofline(&ceilings, &sels, &ms);
        assert_eq!(r.bandwidth.len(), 2);
        assert_eq!(r.bandwidth[0].label, "STREAM triad");
        assert_eq!((r.bandwidth[0].value, r.bandwidth[0].threads), (14.0, 1));
        assert_eq!(r.peaks[0].label, "FMA peak avx512");
        assert_eq!(r.peaks[1].value, 4.0);
        assert_eq!(r.points.len(), 1);
        let p = &r.points[0];
        let ai = 2e6 / (4e6 + 8e3);
        assert!((p.intensity - ai).abs() < 1e-12);
        assert!((p.tuned_gflops - 2.0).abs() < 1e-12);
        assert!((p.default_gflops.unwrap() - 0.5).abs() < 1e-12);
        assert_eq!(r.skipped.len(), 1);
        assert!(r.skipped[0].contains("softmax"), "{:?}", r.skipped);
        // Attainable: bandwidth-bound below the ridge, compute-bound above.
        assert!((r.attainable(0.5).unwrap() - 7.0).abs() < 1e-12);
        assert_eq!(r.attainable(100.0), Some(80.0));
        assert!((r.ridge().unwrap() - 80.0 / 14.0).abs() < 1e-12);
        // Bounds cover every point, the ridge and the peak, in whole decades.
        let ((x0, x1), (y0, y1)) = r.bounds();
        assert!(x0 <= p.intensity && p.intensity <= x1);
        assert!(x1 >= r.ridge().unwrap());
        assert!(y0 <= 0.5 && y1 >= 80.0);
        assert_eq!((x0, x1), (0.1, 10.0));
        assert_eq!(y0, 0.1);
    }

    /// An int8 problem with its work model and a winner on `variant`.
    fn int8_point(variant: &str, ceilings: &[Ceiling]) -> (Roofline, RoofPoint) {
        let p = Problem::new("i8gemm", "i8", [("m", 64), ("n", 256), ("k", 256)]).unwrap();
        let work = Work {
            bytes: 100_000,
            flops: 2 * 64 * 256 * 256,
        };
        let mut s = selection(p.clone(), 1e4, Some(2e4));
        s.winner = Candidate::new(variant, json!({"mr": 2}), 2).unwrap();
        let mut m = meas(&p, json!({"mr": 2}), 2, Some(1e4), json!({}));
        m.stats.work = Some(work);
        let r = roofline(ceilings, &[s], &[m]);
        let point = r.points[0].clone();
        (r, point)
    }

    #[test]
    fn int8_work_sits_under_its_int8_peak_not_the_fma_peak() {
        let ceilings = [
            ceiling("mem_bw_triad", 2, 20.0, "GB/s"),
            ceiling("fma_peak_avx512", 2, 100.0, "GFLOP/s"),
            ceiling("fma_peak_neon", 2, 50.0, "GFLOP/s"),
            ceiling("int8_peak_avx512_vnni", 2, 400.0, "GOP/s"),
            ceiling("int8_peak_neon_i8mm", 2, 600.0, "GOP/s"),
        ];
        // 8.4 MOP in 10 µs = 839 GOP/s at 84 op/byte: above both FMA peaks.
        for (variant, kind, peak) in [
            ("avx512_vnni", "int8_peak_avx512_vnni", 400.0),
            ("neon_i8mm", "int8_peak_neon_i8mm", 600.0),
        ] {
            let (r, p) = int8_point(variant, &ceilings);
            assert_eq!(p.arith, Arithmetic::Int8);
            assert_eq!(p.int8_roof.as_ref().unwrap().kind, kind);
            assert_eq!(r.attainable_for(&p), Some(peak));
            assert_eq!(r.int8_peaks[0].label, "int8 peak neon_i8mm");
            assert_eq!(r.peaks.len(), 2, "int8 peaks are not FMA roofs");
            assert!(p.no_roof.is_none());
        }
        // An f32 winner stays on the FMA roof.
        let f32_sel = selection(gemv(), 1e6, None);
        let ms = [meas(&gemv(), json!({"nr": 8}), 2, Some(1e6), json!({}))];
        let r = roofline(&ceilings, &[f32_sel], &ms);
        assert_eq!(r.points[0].arith, Arithmetic::F32);
        assert_eq!(
            r.attainable_for(&r.points[0]),
            r.attainable(r.points[0].intensity)
        );
    }

    #[test]
    fn int8_work_without_an_int8_peak_says_so_instead_of_using_the_fma_roof() {
        // A table from before the int8 peaks: FMA roofs only.
        let old = [
            ceiling("mem_bw_triad", 2, 20.0, "GB/s"),
            ceiling("fma_peak_avx512", 2, 100.0, "GFLOP/s"),
        ];
        let (r, p) = int8_point("avx512_vnni", &old);
        assert_eq!(r.attainable_for(&p), None);
        let why = p.no_roof.unwrap();
        assert!(
            why.contains("int8_peak_avx512_vnni") && why.contains("tiletune bench roofline"),
            "{why}"
        );
        // Int8 work on an ISA without dot products has no roof either.
        let (r, p) = int8_point("avx2", &old);
        assert_eq!(r.attainable_for(&p), None);
        assert!(p.no_roof.unwrap().contains("`avx2`"));
        assert_eq!(
            ceiling_label("int8_peak_neon_dotprod"),
            "int8 peak neon_dotprod"
        );
        assert_eq!(ceiling_label("fma_peak_avx2_fma"), "FMA peak avx2+fma");
        assert_eq!(ceiling_label("mem_bw_read"), "STREAM read");
        assert_eq!(ceiling_label("odd"), "odd");
    }

    #[test]
    fn roofline_without_ceilings_still_has_sane_bounds() {
        let r = roofline(&[], &[], &[]);
        assert!(r.points.is_empty() && r.ridge().is_none() && r.attainable(1.0).is_none());
        let ((x0, x1), (y0, y1)) = r.bounds();
        assert!(x0 > 0.0 && x1 > x0 && y0 > 0.0 && y1 > y0);
    }

    #[test]
    fn speedups_are_default_over_tuned() {
        let ms = [meas(&gemv(), json!({"nr": 8}), 2, Some(1e6), json!({}))];
        let rows = speedups(
            &[
                selection(gemv(), 1e6, Some(1.5e6)),
                selection(gemv(), 1e6, None),
            ],
            &ms,
        );
        assert_eq!(rows[0].speedup, Some(1.5));
        assert_eq!(rows[0].label, "gemv f32 1000x1000 ≤2t");
        assert_eq!(rows[0].winner, "avx512 kc=256,nr=8 t2");
        assert!((rows[0].tuned_gflops.unwrap() - 2.0).abs() < 1e-12);
        assert_eq!(rows[1].speedup, None);
    }

    #[test]
    fn heatmap_spans_the_two_most_varied_params_and_keeps_the_best() {
        let p = gemv();
        let mut ms = Vec::new();
        // nr ∈ {4, 8, 16} (3 values), kc ∈ {128, 256} (2), threads ∈ {1, 2} (2).
        for (nr, kc, t, ns) in [
            (4, 128, 1, 4e6),
            (4, 128, 2, 2e6), // best of cell (nr=4, kc=128)
            (8, 128, 1, 1e6), // overall best
            (8, 256, 1, 3e6),
            (16, 256, 2, 5e6),
        ] {
            ms.push(meas(
                &p,
                json!({"nr": nr, "kc": kc}),
                t,
                Some(ns),
                json!({}),
            ));
        }
        ms.push(meas(&p, json!({"nr": 16, "kc": 128}), 1, None, json!({}))); // invalid
        let HeatmapOutcome::Map(h) = heatmap(&p, &ms, Some(3e6)) else {
            panic!("expected a map")
        };
        assert_eq!(h.x_name, "nr");
        // kc and threads both have 2 values: the parameter wins the tie.
        assert_eq!(h.y_name, "kc");
        // Numeric order, not text order ("16" < "4" as text).
        assert_eq!(h.x_values, ["4", "8", "16"]);
        assert_eq!(h.y_values, ["128", "256"]);
        assert_eq!(h.metric, CellMetric::Gflops);
        let g = |ns: f64| Some(2e6 / ns);
        assert_eq!(h.cells[0], [g(2e6), g(1e6), None]); // the invalid one is not a cell
        assert_eq!(h.cells[1], [None, g(3e6), g(5e6)]);
        assert_eq!(h.best, Some((1, 0)));
        assert_eq!(h.default, Some((1, 1)));
        assert_eq!(h.candidates, 5);
        assert_eq!(h.range(), Some((0.4, 2.0)));
    }

    /// Int8 work is a rate in GOP/s, not GFLOP/s; a quantized problem whose
    /// candidates mix W·A32 and W·A8 variants says both.
    #[test]
    fn heatmap_rates_name_the_arithmetic_of_their_candidates() {
        let work = Work {
            bytes: 100_000,
            flops: 2 * 64 * 256 * 256,
        };
        let metric = |p: &Problem, variants: &[&str]| {
            let ms: Vec<Measurement> = variants
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let mut m = meas(p, json!({"mr": i + 1}), 1, Some(1e4), json!({}));
                    m.candidate = Candidate::new(*v, json!({"mr": i + 1}), 1).unwrap();
                    m.stats.work = Some(work);
                    m
                })
                .collect();
            match heatmap(p, &ms, None) {
                HeatmapOutcome::Map(h) => h.metric,
                HeatmapOutcome::NoData { reason, .. } => panic!("no map: {reason}"),
            }
        };
        let i8 = Problem::new("i8gemm", "i8", [("m", 64), ("n", 256), ("k", 256)]).unwrap();
        assert_eq!(metric(&i8, &["avx512_vnni", "avx2_vnni"]), CellMetric::Gops);
        let q4 = Problem::new("qgemv", "q4_0", [("n", 256), ("k", 256)]).unwrap();
        assert_eq!(metric(&q4, &["avx512", "avx2"]), CellMetric::Gflops);
        let mixed = metric(&q4, &["avx512", "avx512.a8"]);
        assert_eq!(mixed, CellMetric::FlopsOrOps);
        assert_eq!(mixed.unit(), "GFLOP/s or GOP/s");
        assert_eq!(CellMetric::Gops.unit(), "GOP/s");
    }

    #[test]
    fn heatmap_with_one_varying_dimension_is_a_row_and_unknown_ops_use_time() {
        let p = Problem::new("rope", "f32", [("rows", 2), ("heads", 2), ("head_dim", 64)]).unwrap();
        let ms: Vec<Measurement> = [1usize, 2]
            .iter()
            .map(|&t| meas(&p, json!({}), t, Some(1000.0 * t as f64), json!({})))
            .collect();
        let HeatmapOutcome::Map(h) = heatmap(&p, &ms, None) else {
            panic!("expected a map")
        };
        assert_eq!(h.x_name, "threads");
        assert_eq!(h.y_values, ["all"]);
        assert_eq!(h.metric, CellMetric::Micros);
        // Lower is better in µs: the 1-thread cell (1 µs) is best.
        assert_eq!(h.cells, [[Some(1.0), Some(2.0)]]);
        assert_eq!(h.best, Some((0, 0)));
        assert_eq!(h.default, None);
    }

    #[test]
    fn heatmap_says_why_there_is_nothing_to_map() {
        let p = gemv();
        let one = [meas(&p, json!({"nr": 8}), 1, Some(1e6), json!({}))];
        assert!(matches!(
            heatmap(&p, &one, None),
            HeatmapOutcome::NoData { reason, .. } if reason.contains("one configuration")
        ));
        let invalid = [meas(&p, json!({"nr": 8}), 1, None, json!({}))];
        assert!(matches!(
            heatmap(&p, &invalid, None),
            HeatmapOutcome::NoData { reason, .. } if reason.contains("no valid")
        ));
    }

    fn hw_counters(ipc: f64, l1: f64) -> Value {
        json!({
            "counts": {"backend": {"kind": "perf_hardware"}, "values": {}},
            "metrics": {"ipc": ipc, "l1d_miss_rate": l1, "l2_miss_rate": null,
                        "topdown": {"retiring": 0.5, "frontend_bound": 0.1,
                                    "backend_bound": 0.3, "bad_speculation": 0.1},
                        "task_clock_ns": 2.0e6},
            "fallback": null
        })
    }

    #[test]
    fn pmu_table_lists_fastest_first_with_hardware_columns() {
        let p = gemv();
        let ms = vec![
            meas(&p, json!({"nr": 4}), 2, Some(3e6), hw_counters(1.5, 0.2)),
            meas(&p, json!({"nr": 8}), 2, Some(1e6), hw_counters(2.5, 0.05)),
            meas(&p, json!({"nr": 16}), 2, Some(2e6), hw_counters(2.0, 0.1)),
            meas(&p, json!({"nr": 32}), 2, None, Value::Null),
        ];
        let mut sel = selection(p.clone(), 1e6, Some(3e6));
        sel.winner = ms[1].candidate.clone();
        let t = pmu_table(&p, &ms, Some(&sel), 1);
        assert!(t.hardware);
        assert_eq!(t.fallback, None);
        let keys: Vec<&str> = t.columns.iter().map(|c| c.key).collect();
        assert_eq!(
            keys,
            [
                "ipc",
                "l1d_miss_rate",
                "topdown.retiring",
                "topdown.frontend_bound",
                "topdown.backend_bound",
                "topdown.bad_speculation",
                "task_clock_us"
            ]
        );
        // Row limit 1, but the default (3 ms) is kept; the 2 ms one is omitted.
        assert_eq!(t.rows.len(), 2);
        assert_eq!(t.rows[0].role, "winner");
        assert_eq!(t.rows[0].values[0], Some(2.5));
        assert_eq!(t.rows[1].role, "default");
        assert_eq!(t.rows[1].candidate, "avx512 nr=4 t2");
        // task-clock in µs per run.
        assert_eq!(t.rows[0].values[6], Some(2000.0));
        assert_eq!(t.rows[0].fidelity, Some(3));
        assert_eq!((t.omitted, t.invalid), (1, 1));
    }

    #[test]
    fn pmu_table_with_software_counters_keeps_the_fallback_note() {
        let p = gemv();
        let sw = json!({
            "counts": {"backend": {"kind": "perf_software"}, "values": {
                "task-clock": {"raw": 1000, "scaled": 1.0e6},
                "context-switches": {"raw": 0, "scaled": 0.0}}},
            "metrics": {"ipc": null, "task_clock_ns": 1.0e6},
            "fallback": "no hardware PMU is exposed"
        });
        let ms = vec![meas(&p, json!({"nr": 4}), 1, Some(1e6), sw)];
        let t = pmu_table(&p, &ms, None, 10);
        assert!(!t.hardware);
        assert_eq!(t.fallback.as_deref(), Some("no hardware PMU is exposed"));
        let keys: Vec<&str> = t.columns.iter().map(|c| c.key).collect();
        assert_eq!(keys, ["task_clock_us", "sw.context-switches"]);
        assert_eq!(t.rows[0].values, [Some(1000.0), Some(0.0)]);
        assert_eq!(t.rows[0].fidelity, Some(3));
    }

    fn peer(
        model: &str,
        engine: &str,
        test: &str,
        threads: usize,
        tps: f64,
        at: i64,
    ) -> PeerResult {
        PeerResult {
            soc: SOC.into(),
            model: model.into(),
            engine: engine.into(),
            engine_version: "v1".into(),
            test: test.into(),
            threads,
            tokens_per_s: tps,
            std: Some(tps / 10.0),
            json: json!({"ppl": 18.6, "ppl_err": 0.4}),
            measured_at: at,
        }
    }

    #[test]
    fn peers_keep_the_newest_run_and_split_out_perplexity() {
        let rs = [
            peer("m", "llama.cpp", "tg128", 2, 40.0, 1),
            peer("m", "llama.cpp", "tg128", 2, 50.0, 2), // newer: replaces 40
            peer("m", "tiletune", "tg128", 2, 25.0, 1),
            peer("m", "tiletune", "pp512", 2, 300.0, 1),
            peer("m", "llama.cpp", "ppl", 2, 900.0, 1),
            peer("other", "mnn", "tg128", 1, 10.0, 1),
        ];
        let p = peers(&rs);
        assert_eq!(p.charts.len(), 2);
        let c = &p.charts[0];
        assert_eq!(c.model, "m");
        assert_eq!(c.engines, ["tiletune", "llama.cpp"]);
        // Prompt processing before generation.
        assert_eq!(c.groups, ["pp512 · 2 threads", "tg128 · 2 threads"]);
        assert_eq!(c.values[0], [Some((300.0, Some(30.0))), None]);
        assert_eq!(c.values[1][1], Some((50.0, Some(5.0))));
        let llama_tg = p
            .rows
            .iter()
            .find(|r| r.engine == "llama.cpp" && r.test == "tg128")
            .unwrap();
        assert_eq!(llama_tg.vs_tiletune, Some(2.0));
        assert_eq!(
            p.rows
                .iter()
                .find(|r| r.model == "other")
                .unwrap()
                .vs_tiletune,
            None
        );
        assert_eq!(p.ppl.len(), 1);
        assert_eq!((p.ppl[0].ppl, p.ppl[0].ppl_err), (Some(18.6), Some(0.4)));
        assert!(is_ppl("PPL-wiki") && !is_ppl("pp512"));
    }
}
