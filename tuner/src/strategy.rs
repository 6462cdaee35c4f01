//! Search strategies over a finite candidate list.
//!
//! A strategy only sees indices into the candidate list, each candidate's
//! coordinates (its tunable parameters, for neighbourhood moves) and an
//! [`Evaluator`] that measures a candidate at a given *fidelity* (how long to
//! measure: fidelity 1 is the shortest measurement, fidelity `f` spends about
//! `f` times as long). Strategies never see kernels or clocks, so they are
//! tested deterministically on synthetic objectives.
//!
//! - [`Strategy::Exhaustive`] measures everything at full fidelity.
//! - [`Strategy::Random`] measures a seeded random subset (always including the
//!   default) at full fidelity.
//! - [`Strategy::Halving`] is successive halving (Jamieson & Talwalkar 2016,
//!   "Non-stochastic best arm identification and hyperparameter optimization"):
//!   every candidate is measured briefly, the best `1/eta` survive to a
//!   measurement `eta` times longer, until one remains. Most of the time goes to
//!   the few candidates that matter.
//! - [`Strategy::Descent`] is coordinate descent from the analytic default:
//!   move to the best neighbour that differs in exactly one parameter until
//!   none improves by more than the noise margin. It evaluates a small fraction
//!   of a large space because the analytic default is usually close.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Full fidelity: the measurement effort a winner is confirmed with.
pub const FULL_FIDELITY: u32 = 9;

/// Measures candidates for a strategy.
pub trait Evaluator {
    /// Measures candidate `index` at `fidelity` and returns its time in
    /// seconds, or `None` when the candidate is invalid (it failed validation
    /// against the reference, or the kernel refused it).
    fn eval(&mut self, index: usize, fidelity: u32) -> Option<f64>;

    /// Whether the time budget allows another evaluation.
    fn budget_left(&self) -> bool {
        true
    }
}

/// Which search to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Strategy {
    Exhaustive,
    Random { samples: usize, seed: u64 },
    Halving { eta: u32 },
    Descent,
}

impl Strategy {
    /// The stable name stored with a campaign.
    pub fn name(&self) -> String {
        match self {
            Strategy::Exhaustive => "exhaustive".into(),
            Strategy::Random { samples, seed } => format!("random(n={samples},seed={seed})"),
            Strategy::Halving { eta } => format!("halving(eta={eta})"),
            Strategy::Descent => "descent".into(),
        }
    }
}

impl std::str::FromStr for Strategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "exhaustive" => Ok(Strategy::Exhaustive),
            "random" => Ok(Strategy::Random {
                samples: 16,
                seed: 0x7173,
            }),
            "halving" => Ok(Strategy::Halving { eta: 3 }),
            "descent" => Ok(Strategy::Descent),
            other => Err(format!(
                "unknown strategy `{other}`; expected exhaustive, random, halving or descent"
            )),
        }
    }
}

/// One measurement a strategy asked for.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    pub index: usize,
    pub fidelity: u32,
    pub seconds: Option<f64>,
}

/// What a search found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchResult {
    /// Index of the fastest valid candidate, if any was valid.
    pub best: Option<usize>,
    /// Its time at the highest fidelity it was measured with.
    pub best_seconds: Option<f64>,
    pub evaluations: Vec<Evaluation>,
    /// True when the budget ran out before the strategy finished.
    pub stopped_by_budget: bool,
}

impl SearchResult {
    /// Total measurement effort spent, in fidelity units.
    pub fn effort(&self) -> u64 {
        self.evaluations.iter().map(|e| e.fidelity as u64).sum()
    }
}

/// A candidate as a strategy sees it: its coordinates (parameter name → value
/// rendered as a string), used to find neighbours.
pub type Coords = Vec<(String, String)>;

/// Runs `strategy` over `coords.len()` candidates, starting from `default`.
pub fn search(
    strategy: Strategy,
    coords: &[Coords],
    default: usize,
    ev: &mut dyn Evaluator,
) -> SearchResult {
    let mut rec = Recorder {
        ev,
        evals: Vec::new(),
        cache: HashMap::new(),
        stopped: false,
    };
    let n = coords.len();
    if n == 0 {
        return rec.finish(None);
    }
    let default = default.min(n - 1);
    let best = match strategy {
        Strategy::Exhaustive => rec.best_of(0..n, FULL_FIDELITY),
        Strategy::Random { samples, seed } => {
            let mut picks = vec![default];
            let mut rng = seed ^ 0x9E37_79B9_7F4A_7C15;
            let mut order: Vec<usize> = (0..n).filter(|&i| i != default).collect();
            // Fisher–Yates with SplitMix64: reproducible across platforms.
            for i in (1..order.len()).rev() {
                rng = rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = rng;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                let j = ((z ^ (z >> 31)) % (i as u64 + 1)) as usize;
                order.swap(i, j);
            }
            picks.extend(order.into_iter().take(samples.saturating_sub(1)));
            rec.best_of(picks, FULL_FIDELITY)
        }
        Strategy::Halving { eta } => halving(&mut rec, n, eta.max(2)),
        Strategy::Descent => descent(&mut rec, coords, default),
    };
    rec.finish(best)
}

struct Recorder<'a> {
    ev: &'a mut dyn Evaluator,
    evals: Vec<Evaluation>,
    /// Best-fidelity result per candidate, so no candidate is measured twice
    /// at the same or a lower fidelity.
    cache: HashMap<usize, (u32, Option<f64>)>,
    stopped: bool,
}

impl Recorder<'_> {
    fn eval(&mut self, i: usize, fidelity: u32) -> Option<Option<f64>> {
        if let Some(&(f, s)) = self.cache.get(&i)
            && (f >= fidelity || s.is_none())
        {
            return Some(s);
        }
        if self.stopped || !self.ev.budget_left() {
            self.stopped = true;
            return None;
        }
        let s = self.ev.eval(i, fidelity);
        self.evals.push(Evaluation {
            index: i,
            fidelity,
            seconds: s,
        });
        self.cache.insert(i, (fidelity, s));
        Some(s)
    }

    /// Measures each index at `fidelity` (until the budget runs out) and
    /// returns the fastest valid one.
    fn best_of(&mut self, idx: impl IntoIterator<Item = usize>, fidelity: u32) -> Option<usize> {
        let mut best: Option<(usize, f64)> = None;
        for i in idx {
            match self.eval(i, fidelity) {
                None => break,
                Some(Some(s)) if best.is_none_or(|(_, b)| s < b) => best = Some((i, s)),
                Some(_) => {}
            }
        }
        best.map(|(i, _)| i)
    }

    fn finish(self, best: Option<usize>) -> SearchResult {
        let best_seconds = best.and_then(|b| self.cache.get(&b).and_then(|&(_, s)| s));
        SearchResult {
            best,
            best_seconds,
            evaluations: self.evals,
            stopped_by_budget: self.stopped,
        }
    }
}

fn halving(rec: &mut Recorder<'_>, n: usize, eta: u32) -> Option<usize> {
    let mut alive: Vec<usize> = (0..n).collect();
    let mut fidelity = 1u32;
    loop {
        let mut scored: Vec<(usize, f64)> = Vec::new();
        for &i in &alive {
            match rec.eval(i, fidelity) {
                None => break,
                Some(Some(s)) => scored.push((i, s)),
                Some(None) => {}
            }
        }
        scored.sort_by(|a, b| a.1.total_cmp(&b.1));
        if rec.stopped || scored.len() <= 1 || fidelity >= FULL_FIDELITY {
            return scored.first().map(|&(i, _)| i);
        }
        let keep = (scored.len() / eta as usize).max(1);
        alive = scored.into_iter().take(keep).map(|(i, _)| i).collect();
        fidelity = (fidelity * eta).min(FULL_FIDELITY);
    }
}

/// Relative improvement a neighbour must show to be moved to: below this the
/// difference is within typical measurement noise.
const DESCENT_MARGIN: f64 = 0.01;

fn descent(rec: &mut Recorder<'_>, coords: &[Coords], start: usize) -> Option<usize> {
    let fid = FULL_FIDELITY / 3;
    let mut cur = start;
    let mut cur_s = match rec.eval(cur, fid)? {
        Some(s) => s,
        // An invalid default: fall back to a cheap pass over everything.
        None => return halving(rec, coords.len(), 3),
    };
    loop {
        let neighbours: Vec<usize> = (0..coords.len())
            .filter(|&j| j != cur && differs_in_one(&coords[cur], &coords[j]))
            .collect();
        let mut moved = false;
        let mut best = (cur, cur_s);
        for j in neighbours {
            match rec.eval(j, fid) {
                None => break,
                Some(Some(s)) if s < best.1 * (1.0 - DESCENT_MARGIN) => best = (j, s),
                Some(_) => {}
            }
        }
        if best.0 != cur {
            (cur, cur_s) = best;
            moved = true;
        }
        if !moved || rec.stopped {
            break;
        }
    }
    // Confirm the winner at full fidelity when the budget allows.
    let _ = rec.eval(cur, FULL_FIDELITY);
    Some(cur)
}

fn differs_in_one(a: &Coords, b: &Coords) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).filter(|(x, y)| x != y).count() == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A synthetic separable objective over a 3-D grid, with noise that
    /// shrinks with fidelity and a few invalid points.
    struct Grid {
        dims: [usize; 3],
        noise: f64,
        calls: usize,
        limit: usize,
    }

    impl Grid {
        fn coords(&self) -> Vec<Coords> {
            let mut v = Vec::new();
            for a in 0..self.dims[0] {
                for b in 0..self.dims[1] {
                    for c in 0..self.dims[2] {
                        v.push(vec![
                            ("a".into(), a.to_string()),
                            ("b".into(), b.to_string()),
                            ("c".into(), c.to_string()),
                        ]);
                    }
                }
            }
            v
        }
        fn truth(&self, i: usize) -> Option<f64> {
            let c = i % self.dims[2];
            let b = (i / self.dims[2]) % self.dims[1];
            let a = i / (self.dims[1] * self.dims[2]);
            if (a + b + c) % 11 == 10 {
                return None;
            }
            let f = |x: usize, opt: f64| (x as f64 - opt).powi(2);
            Some(1.0 + f(a, 4.0) * 0.05 + f(b, 2.0) * 0.1 + f(c, 6.0) * 0.02)
        }
    }

    impl Evaluator for Grid {
        fn eval(&mut self, i: usize, fidelity: u32) -> Option<f64> {
            self.calls += 1;
            let t = self.truth(i)?;
            // Deterministic "noise": a hash of (i, fidelity), shrinking with fidelity.
            let h = ((i as u64 * 2654435761) ^ (fidelity as u64 * 40503)) % 1000;
            Some(t * (1.0 + self.noise * (h as f64 / 1000.0 - 0.5) / fidelity as f64))
        }
        fn budget_left(&self) -> bool {
            self.calls < self.limit
        }
    }

    fn grid() -> Grid {
        Grid {
            dims: [8, 5, 9],
            noise: 0.02,
            calls: 0,
            limit: usize::MAX,
        }
    }

    fn true_best(g: &Grid, n: usize) -> (usize, f64) {
        (0..n)
            .filter_map(|i| g.truth(i).map(|t| (i, t)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap()
    }

    #[test]
    fn exhaustive_finds_true_optimum() {
        let mut g = grid();
        let coords = g.coords();
        let r = search(Strategy::Exhaustive, &coords, 0, &mut g);
        assert_eq!(r.evaluations.len(), coords.len());
        assert_eq!(r.best, Some(true_best(&g, coords.len()).0));
    }

    #[test]
    fn descent_and_halving_are_near_optimal_with_less_effort() {
        let coords = grid().coords();
        let (_, opt) = true_best(&grid(), coords.len());
        let exhaustive_effort = coords.len() as u64 * FULL_FIDELITY as u64;
        for strategy in [Strategy::Descent, Strategy::Halving { eta: 3 }] {
            let mut g = grid();
            let r = search(strategy, &coords, 0, &mut g);
            let got = g.truth(r.best.unwrap()).unwrap();
            let regret = got / opt - 1.0;
            assert!(regret <= 0.05, "{strategy:?}: regret {regret}");
            assert!(
                r.effort() * 2 < exhaustive_effort,
                "{strategy:?}: effort {} vs {exhaustive_effort}",
                r.effort()
            );
        }
    }

    #[test]
    fn invalid_candidates_are_never_best() {
        let mut g = grid();
        let coords = g.coords();
        for s in [
            Strategy::Exhaustive,
            Strategy::Halving { eta: 2 },
            Strategy::Descent,
            Strategy::Random {
                samples: 30,
                seed: 5,
            },
        ] {
            let r = search(s, &coords, 0, &mut g);
            assert!(g.truth(r.best.unwrap()).is_some(), "{s:?}");
        }
    }

    #[test]
    fn random_includes_default_and_is_reproducible() {
        let coords = grid().coords();
        let s = Strategy::Random {
            samples: 10,
            seed: 42,
        };
        let r1 = search(s, &coords, 17, &mut grid());
        let r2 = search(s, &coords, 17, &mut grid());
        assert_eq!(r1, r2);
        assert_eq!(r1.evaluations[0].index, 17);
        assert_eq!(r1.evaluations.len(), 10);
    }

    #[test]
    fn budget_stops_with_best_so_far() {
        let mut g = grid();
        g.limit = 7;
        let coords = g.coords();
        let r = search(Strategy::Exhaustive, &coords, 0, &mut g);
        assert!(r.stopped_by_budget);
        assert_eq!(r.evaluations.len(), 7);
        assert!(r.best.is_some());
    }

    #[test]
    fn empty_space_gives_nothing() {
        let r = search(Strategy::Descent, &[], 0, &mut grid());
        assert_eq!(r.best, None);
        assert!(r.evaluations.is_empty());
    }

    #[test]
    fn strategy_names_parse() {
        for s in ["exhaustive", "random", "halving", "descent"] {
            assert!(s.parse::<Strategy>().is_ok());
        }
        assert!("annealing".parse::<Strategy>().is_err());
    }
}
