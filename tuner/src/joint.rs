//! A weight's layout is one decision: the joint choice over every kernel
//! problem that reads one weight, and the workload it is chosen for.
//!
//! The runtime holds one copy of each weight (`KernelChoice::layout`: one
//! packed interleave, or the GGUF rows), and decode (m = 1) and every
//! prefill bucket read that copy. Problems are tuned one at a time, so
//! their winners can disagree (decode fastest at AVX2's interleave 8,
//! prefill at AVX-512's 16). [`choose`] takes every valid measurement of
//! the problems of one weight and picks, for each layout every problem has
//! a measured candidate for, each problem's candidate that reads it: the
//! one that runs (its selection, else its default) where it does, else the
//! fastest; the layout whose total [`Workload`] cost is least wins. Where
//! what runs already agrees on one layout, that layout stands. Only
//! single-copy layouts are offered: keeping the GGUF rows beside a packed
//! copy would double the weight's memory, which a phone's RAM is the
//! first to run out of.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use tiletune_kernels::choice::{KernelChoice, Layout, Op, WeightKind};
use tiletune_tables::{Candidate, Problem};

use crate::TunerError;

/// One test of a workload, as llama-bench names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Test {
    /// `ppN`: an N-token prompt.
    Prefill(usize),
    /// `tgN`: N generated tokens, one at a time.
    Decode(usize),
}

impl Test {
    /// Tokens the test processes.
    pub fn tokens(self) -> usize {
        match self {
            Test::Prefill(n) | Test::Decode(n) => n,
        }
    }

    /// The same test with at most `max` tokens.
    pub fn capped(self, max: usize) -> Self {
        match self {
            Test::Prefill(n) => Test::Prefill(n.min(max)),
            Test::Decode(n) => Test::Decode(n.min(max)),
        }
    }
}

impl fmt::Display for Test {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Test::Prefill(n) => write!(f, "pp{n}"),
            Test::Decode(n) => write!(f, "tg{n}"),
        }
    }
}

/// What a tuned plan is chosen for: a mix of tests, each weighted by its
/// time, as llama-bench's default run (pp512 + tg128) spends it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workload {
    pub tests: Vec<Test>,
}

impl Default for Workload {
    /// llama-bench's default tests: pp512 and tg128.
    fn default() -> Self {
        Workload {
            tests: vec![Test::Prefill(512), Test::Decode(128)],
        }
    }
}

/// Tests as llama-bench's flags and `--workload` name them: `pp512,tg128`.
pub fn label(tests: &[Test]) -> String {
    let t: Vec<String> = tests.iter().map(Test::to_string).collect();
    t.join(",")
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&label(&self.tests))
    }
}

impl FromStr for Workload {
    type Err = TunerError;

    /// `pp512,tg128` (any list of `ppN` / `tgN`), or `decode` (tg128),
    /// `prefill` (pp512), `default` (pp512,tg128).
    fn from_str(s: &str) -> Result<Self, TunerError> {
        let bad = |why: String| {
            TunerError::BadWorkload(format!(
                "`{s}`: {why}; use e.g. pp512,tg128, decode or prefill"
            ))
        };
        let tests = match s.trim() {
            "default" => return Ok(Workload::default()),
            "decode" => vec![Test::Decode(128)],
            "prefill" => vec![Test::Prefill(512)],
            list => list
                .split(',')
                .map(|t| {
                    let t = t.trim();
                    let n = |rest: &str| -> Result<usize, TunerError> {
                        match rest.parse::<usize>() {
                            Ok(n) if (1..=1 << 20).contains(&n) => Ok(n),
                            _ => Err(bad(format!("`{t}` needs a token count from 1 to 1048576"))),
                        }
                    };
                    if let Some(r) = t.strip_prefix("pp") {
                        Ok(Test::Prefill(n(r)?))
                    } else if let Some(r) = t.strip_prefix("tg") {
                        Ok(Test::Decode(n(r)?))
                    } else {
                        Err(bad(format!("`{t}` is neither ppN nor tgN")))
                    }
                })
                .collect::<Result<Vec<_>, _>>()?,
        };
        Ok(Workload { tests })
    }
}

impl Workload {
    /// How many times the workload runs problem `p`'s kernel on a weight,
    /// in units of one call at the problem's row count: `tgN` calls the
    /// decode GEMV N times; `ppN` runs the GEMM of `bucket(N)` once on N
    /// rows, which costs about N / bucket calls at the bucket's rows (the
    /// runtime plans an N-row prompt with that bucket's kernel).
    pub fn calls(&self, p: &Problem, bucket: impl Fn(usize) -> usize) -> f64 {
        let m = p.dim("m");
        self.tests
            .iter()
            .map(|t| match (t, p.op(), m) {
                (Test::Decode(n), "gemv", _) => *n as f64,
                (Test::Prefill(n), "gemm", Some(m)) if bucket(*n) == m => *n as f64 / m as f64,
                _ => 0.0,
            })
            .sum()
    }
}

/// One problem of a weight with what was measured on it.
#[derive(Debug, Clone)]
pub struct Measured {
    pub problem: Problem,
    /// Calls per workload run of the problem's kernel: [`Workload::calls`]
    /// on each of the model's matrices that runs it (none for the LM
    /// head's prefill GEMMs: prefill multiplies its last row only).
    pub calls: f64,
    /// Valid, timed candidates with their medians (ns).
    pub timed: Vec<(Candidate, f64)>,
    /// The problem's current selection, if any: kept when it reads the
    /// layout chosen (its lead over the default was checked by the
    /// campaign); with none, the default runs and is kept the same way.
    pub selected: Option<Candidate>,
    /// The analytic default's candidate.
    pub default: Candidate,
}

/// The joint pick of one weight: the layout and, per problem (in the
/// order given), the candidate and its median.
#[derive(Debug, Clone)]
pub struct JointChoice {
    pub layout: Layout,
    /// Workload cost of the pick, ns per workload run.
    pub cost_ns: f64,
    /// Cost of each problem's own fastest candidate, layouts ignored: what
    /// the separate winners would cost if they could all be held.
    pub unconstrained_ns: f64,
    pub picks: Vec<(Candidate, f64)>,
}

/// The layout a stored candidate reads on problem `p`, or `None` when the
/// candidate is not a kernel of this weight.
pub fn layout_of(p: &Problem, c: &Candidate) -> Option<Layout> {
    let op = Op::from_name(p.op())?;
    KernelChoice::from_stored(
        op,
        WeightKind::of_dtype(p.dtype()),
        c.variant(),
        c.params(),
        c.threads(),
        usize::MAX,
        None,
    )
    .ok()
    .map(|k| k.layout())
}

/// The joint choice for the problems of one weight, or `None` when no
/// layout has a measured candidate on every problem.
pub fn choose(problems: &[Measured]) -> Option<JointChoice> {
    // Each timed candidate's layout, parsed once.
    let read: Vec<Vec<Option<Layout>>> = problems
        .iter()
        .map(|m| {
            m.timed
                .iter()
                .map(|(c, _)| layout_of(&m.problem, c))
                .collect()
        })
        .collect();
    let mut layouts: BTreeSet<Layout> = read.iter().flatten().flatten().copied().collect();
    // Where what runs (each problem's selection, else its default) already
    // reads one layout, that layout stands: the stored times of the rest
    // were taken at different moments, and a lead among them that the
    // campaign did not confirm back to back is the machine's noise.
    let running: BTreeSet<Option<Layout>> = problems
        .iter()
        .map(|m| layout_of(&m.problem, m.selected.as_ref().unwrap_or(&m.default)))
        .collect();
    if let [Some(agreed)] = running.iter().collect::<Vec<_>>()[..]
        && layouts.contains(agreed)
    {
        layouts = BTreeSet::from([*agreed]);
    }
    let unconstrained_ns = problems
        .iter()
        .filter(|m| !m.timed.is_empty())
        .map(|m| {
            m.calls
                * m.timed
                    .iter()
                    .map(|(_, t)| *t)
                    .fold(f64::INFINITY, f64::min)
        })
        .sum();
    let mut best: Option<JointChoice> = None;
    for layout in layouts {
        let mut picks = Vec::with_capacity(problems.len());
        let mut cost = 0.0;
        for (m, read) in problems.iter().zip(&read) {
            let reading = || {
                m.timed
                    .iter()
                    .zip(read)
                    .filter(|(_, l)| **l == Some(layout))
                    .map(|(t, _)| t)
            };
            // The selection, else (none made) the default that runs.
            let runs = m.selected.as_ref().unwrap_or(&m.default);
            let kept = reading().find(|(c, _)| c == runs);
            // Ties go to the first measured, which is the default when it
            // was measured (the campaign measures it first).
            let fastest = reading().min_by(|a, b| a.1.total_cmp(&b.1));
            let Some(pick) = kept.or(fastest) else {
                picks.clear();
                break;
            };
            cost += m.calls * pick.1;
            picks.push(pick.clone());
        }
        if picks.len() != problems.len() {
            continue;
        }
        if best.as_ref().is_none_or(|b| cost < b.cost_ns) {
            best = Some(JointChoice {
                layout,
                cost_ns: cost,
                unconstrained_ns,
                picks,
            });
        }
    }
    best
}

/// What the joint pass did to one weight.
#[derive(Debug, Clone)]
pub struct WeightReport {
    /// `q4_0 896x4864` style: the weight's dtype and `n x k`.
    pub weight: String,
    pub choice: JointChoice,
    /// Problems whose stored selection the joint choice replaced, with the
    /// candidate it replaced.
    pub changed: Vec<(Problem, Option<Candidate>)>,
}

/// Runs [`choose`] on every weight of `problems` (each problem with its
/// analytic default's candidate) over the valid measurements stored for
/// this SoC and kernel ABI within `thread_budget`, and stores the joint
/// choice as the problems' selections. A weight with a problem that has no
/// measurement is left as it is (that problem runs its default, and the
/// runtime's layout rule keeps the other problems consistent with it).
/// `calls` gives a problem's calls per workload run ([`Measured::calls`]).
pub fn store_joint(
    db: &mut tiletune_tables::SelectorDb,
    soc: &str,
    kernel_abi: u32,
    thread_budget: usize,
    problems: &[(Problem, Candidate)],
    calls: impl Fn(&Problem) -> f64,
    campaign: Option<&str>,
) -> Result<Vec<WeightReport>, TunerError> {
    let specs: Vec<Problem> = problems.iter().map(|(p, _)| p.clone()).collect();
    let mut out = Vec::new();
    for group in weight_groups(&specs) {
        let mut measured = Vec::with_capacity(group.len());
        for p in &group {
            let default = problems
                .iter()
                .find(|(q, _)| q == p)
                .map(|(_, d)| d.clone())
                .expect("every grouped problem came from the list");
            let timed: Vec<(Candidate, f64)> = db
                .measurements(soc, kernel_abi, p)?
                .into_iter()
                .filter(|m| m.valid && m.candidate.threads() <= thread_budget)
                .filter_map(|m| Some((m.candidate, m.median_ns?)))
                .filter(|(_, t)| t.is_finite() && *t > 0.0)
                .collect();
            let selected = match db.lookup(soc, kernel_abi, thread_budget, p)? {
                tiletune_tables::Lookup::Exact(s) => Some(s.winner),
                _ => None,
            };
            measured.push(Measured {
                problem: p.clone(),
                calls: calls(p),
                timed,
                selected,
                default,
            });
        }
        if measured.iter().any(|m| m.timed.is_empty()) {
            continue;
        }
        let Some(choice) = choose(&measured) else {
            continue;
        };
        let mut changed = Vec::new();
        for (m, (winner, median_ns)) in measured.iter().zip(&choice.picks) {
            if m.selected.as_ref().unwrap_or(&m.default) == winner {
                continue;
            }
            let default_ns = m
                .timed
                .iter()
                .find(|(c, _)| *c == m.default)
                .map(|(_, t)| *t);
            db.put_selection(&tiletune_tables::Selection {
                soc: soc.to_string(),
                kernel_abi,
                problem: m.problem.clone(),
                thread_budget,
                winner: winner.clone(),
                median_ns: *median_ns,
                default_ns,
                speedup: None,
                campaign: campaign.map(str::to_string),
                selected_at: tiletune_tables::now_unix(),
            })?;
            changed.push((m.problem.clone(), m.selected.clone()));
        }
        let p = &group[0];
        out.push(WeightReport {
            weight: format!(
                "{} {}x{}",
                p.dtype(),
                p.dim("n").unwrap_or(0),
                p.dim("k").unwrap_or(0)
            ),
            choice,
            changed,
        });
    }
    Ok(out)
}

/// The problems of a model grouped by the weight they read: the same
/// dtype and `(n, k)`; GEMV (decode) first, then the GEMM buckets in the
/// order given.
pub fn weight_groups(problems: &[Problem]) -> Vec<Vec<Problem>> {
    // A weight is its dtype and (n, k).
    type Weight = (String, Option<usize>, Option<usize>);
    let mut groups: Vec<(Weight, Vec<Problem>)> = Vec::new();
    for p in problems {
        if Op::from_name(p.op()).is_none() {
            continue;
        }
        let key = (p.dtype().to_string(), p.dim("n"), p.dim("k"));
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, g)) => g.push(p.clone()),
            None => groups.push((key, vec![p.clone()])),
        }
    }
    groups
        .into_iter()
        .map(|(_, mut g)| {
            g.sort_by_key(|p| (p.op() != "gemv", p.dim("m").unwrap_or(1)));
            g
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn gemv() -> Problem {
        Problem::new("gemv", "q4_0", [("n", 64), ("k", 64)]).unwrap()
    }
    fn gemm(m: usize) -> Problem {
        Problem::new("gemm", "q4_0", [("m", m), ("n", 64), ("k", 64)]).unwrap()
    }
    fn qgemm(isa: &str, mr: usize, nr: usize) -> Candidate {
        Candidate::new(
            format!("{isa}.qgemm"),
            json!({"mr": mr, "nr": nr, "pf": 0, "ku": 1}),
            1,
        )
        .unwrap()
    }

    #[test]
    fn workloads_parse_and_weigh_problems_by_their_calls() {
        let w: Workload = "pp512,tg128".parse().unwrap();
        assert_eq!(w, Workload::default());
        assert_eq!(w.to_string(), "pp512,tg128");
        let bucket = |n: usize| [16, 64, 256].into_iter().find(|&b| b >= n).unwrap_or(256);
        assert_eq!(w.calls(&gemv(), bucket), 128.0);
        assert_eq!(w.calls(&gemm(256), bucket), 2.0);
        assert_eq!(w.calls(&gemm(16), bucket), 0.0);
        let d: Workload = "decode".parse().unwrap();
        assert_eq!(d.calls(&gemm(256), bucket), 0.0);
        let mix: Workload = "pp10,pp2048,tg256".parse().unwrap();
        assert_eq!(mix.calls(&gemm(16), bucket), 10.0 / 16.0);
        assert_eq!(mix.calls(&gemm(256), bucket), 8.0);
        for bad in ["", "pp", "tg0", "xx12", "pp512,", "pp99999999999"] {
            assert!(bad.parse::<Workload>().is_err(), "{bad}");
        }
    }

    /// The case: decode fastest at AVX2's interleave 8, prefill at
    /// AVX-512's 16. Apart, the winners cannot be held at once; jointly,
    /// the layout that costs the workload least wins, and every pick reads it.
    #[test]
    fn the_layout_with_the_least_workload_cost_wins_and_every_pick_reads_it() {
        let d16 = qgemm("scalar", 1, 16);
        let d8 = qgemm("scalar", 1, 8);
        let p16 = qgemm("scalar", 8, 16);
        let p8 = qgemm("scalar", 4, 8);
        let rows = Candidate::new("scalar.a8", json!({"rows_per_block": 1}), 1).unwrap();
        let group = |dec_calls: f64, pre_calls: f64| {
            vec![
                Measured {
                    problem: gemv(),
                    calls: dec_calls,
                    timed: vec![
                        (d16.clone(), 100.0),
                        (d8.clone(), 95.0),
                        (rows.clone(), 90.0),
                    ],
                    selected: Some(rows.clone()),
                    default: d16.clone(),
                },
                Measured {
                    problem: gemm(256),
                    calls: pre_calls,
                    timed: vec![(p16.clone(), 1000.0), (p8.clone(), 2000.0)],
                    selected: Some(p16.clone()),
                    default: p16.clone(),
                },
            ]
        };
        // Decode-heavy: 128 × (100 vs 95) saves 640 ns, prefill loses 2000.
        let j = choose(&group(128.0, 2.0)).unwrap();
        assert_eq!(j.layout, Layout::Packed { nr: 16 });
        assert_eq!(j.picks[0].0, d16);
        assert_eq!(j.picks[1].0, p16);
        assert_eq!(j.cost_ns, 128.0 * 100.0 + 2.0 * 1000.0);
        assert!(j.unconstrained_ns < j.cost_ns);
        // Decode only: the prefill bucket still has to read the layout.
        let j = choose(&group(128.0, 0.0)).unwrap();
        assert_eq!(j.layout, Layout::Packed { nr: 8 });
        assert_eq!(j.picks[1].0, p8);
        for (m, (c, _)) in group(1.0, 1.0).iter().zip(&j.picks) {
            assert_eq!(layout_of(&m.problem, c), Some(j.layout));
        }
        // The per-row GEMV is fastest for decode but prefill has no
        // per-row candidate measured: GGUF rows are not a layout here.
        assert!(j.layout != Layout::Rows);
        // Nothing measured on one problem: no joint choice.
        let mut g = group(1.0, 1.0);
        g[1].timed.clear();
        assert!(choose(&g).is_none());
    }

    #[test]
    fn a_selection_that_reads_the_layout_is_kept() {
        let d16 = qgemm("scalar", 1, 16);
        let d16b = Candidate::new(
            "scalar.qgemm",
            json!({"mr": 1, "nr": 16, "pf": 8, "ku": 1}),
            1,
        )
        .unwrap();
        let m = Measured {
            problem: gemv(),
            calls: 1.0,
            timed: vec![(d16.clone(), 100.0), (d16b.clone(), 99.0)],
            selected: Some(d16.clone()),
            default: d16.clone(),
        };
        // d16b is 1% faster but the campaign did not find its lead beyond
        // the noise; the joint pass does not overrule it.
        let j = choose(&[m]).unwrap();
        assert_eq!(j.picks[0].0, d16);
    }

    /// The demo's LM head: every problem runs a candidate of the 16-column
    /// layout (two selections, one default), and the 8-column candidates
    /// were timed faster at other moments. The weight stays as it is.
    #[test]
    fn a_layout_what_runs_agrees_on_stands() {
        let (d16, p16) = (qgemm("scalar", 1, 16), qgemm("scalar", 8, 16));
        let (d8, p8) = (qgemm("scalar", 1, 8), qgemm("scalar", 8, 8));
        let m = |problem, default: &Candidate, selected: Option<&Candidate>, fast: &Candidate| {
            Measured {
                problem,
                calls: 1.0,
                timed: vec![(default.clone(), 100.0), (fast.clone(), 80.0)],
                selected: selected.cloned(),
                default: default.clone(),
            }
        };
        let mut g = vec![
            m(gemv(), &d16, Some(&d16), &d8),
            m(gemm(16), &p16, None, &p8),
            m(gemm(256), &p16, Some(&p16), &p8),
        ];
        let j = choose(&g).unwrap();
        assert_eq!(j.layout, Layout::Packed { nr: 16 });
        assert_eq!(j.cost_ns, 300.0);
        for (m, (c, _)) in g.iter().zip(&j.picks) {
            assert_eq!(c, &m.default);
        }
        // A selection of the 8-column layout (a confirmed lead) makes them
        // disagree: then the cheaper layout is chosen on the stored times.
        g[0].selected = Some(d8.clone());
        let j = choose(&g).unwrap();
        assert_eq!(j.layout, Layout::Packed { nr: 8 });
        assert_eq!(j.cost_ns, 240.0);
    }

    #[test]
    fn problems_group_by_weight_decode_first() {
        let other = Problem::new("gemv", "q4_0", [("n", 32), ("k", 64)]).unwrap();
        let g = weight_groups(&[gemm(64), gemm(16), gemv(), other.clone()]);
        assert_eq!(g.len(), 2);
        assert_eq!(g[0], vec![gemv(), gemm(16), gemm(64)]);
        assert_eq!(g[1], vec![other]);
    }
}
