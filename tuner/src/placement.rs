//! Thread placements: how many workers a kernel runs on and which CPUs they
//! are pinned to. On a big.LITTLE SoC "2 threads" is not one configuration:
//! two Cortex-X cores, two Cortex-A7xx or two little cores differ by 2–4×,
//! and a kernel tuned on one cluster is the wrong pick on another. So the
//! thread dimension of the search space is a list of placements:
//!
//! - `t{n}@cluster{c}`: `n` workers, each pinned to one CPU of cluster `c`
//!   (`c` indexes `SocInfo::clusters`, the order `tiletune probe` prints),
//!   for `n` = 1..=the cluster's size;
//! - `t{n}@cluster{a}+{b}`: clusters of one frequency domain together (e.g.
//!   the Cortex-A715 and A710 pairs of a Snapdragon 8 Gen 2, both at 2.8 GHz)
//!   for the counts that do not fit one of them;
//! - `t{n}`: not pinned, for the counts no cluster or domain holds (and for
//!   every count on a single-cluster machine, where pinning buys nothing).
//!
//! Pinning itself is `tiletune_bench::pin` (the measuring thread and each
//! pool worker, by TID, through `sched_setaffinity`).
//!
//! Every family enumerates its candidates over thread counts;
//! [`with_placements`] turns that thread dimension into placements: each
//! candidate of `t` threads becomes one candidate per placement of `t`
//! workers (on a single-cluster machine exactly one, the unpinned `t{t}`, so
//! the list is unchanged there). The placement is part of the candidate
//! (`tiletune_tables::Placement`, in its key), so it is measured, stored and
//! selected like an ISA or a tile size; the campaign's measure applies it
//! around each timing ([`crate::Measure::use_placement`]).

use crate::TunerError;
use crate::campaign::{KernelProblem, Work};
use tiletune_soc::SocInfo;
use tiletune_tables::{Candidate, Placement, Problem};

/// `threads` workers on `cpus` (empty: not pinned).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadPlacement {
    pub threads: usize,
    /// Indices of the clusters used, in probe order (empty: not pinned).
    pub clusters: Vec<usize>,
    /// The CPUs the workers are pinned to (one each, round robin).
    pub cpus: Vec<usize>,
}

impl ThreadPlacement {
    /// The stable name, e.g. `t4@cluster2`, `t3@cluster1+2`, `t8`.
    pub fn name(&self) -> String {
        if self.clusters.is_empty() {
            return format!("t{}", self.threads);
        }
        let list: Vec<String> = self.clusters.iter().map(|c| c.to_string()).collect();
        format!("t{}@cluster{}", self.threads, list.join("+"))
    }

    pub fn pinned(&self) -> bool {
        !self.cpus.is_empty()
    }

    /// The placement as candidates and tables record it.
    pub fn to_key(&self) -> Result<Placement, TunerError> {
        Ok(if self.pinned() {
            Placement::pinned(self.threads, self.clusters.clone(), self.cpus.clone())?
        } else {
            Placement::unpinned(self.threads)?
        })
    }
}

impl std::fmt::Display for ThreadPlacement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

/// Every placement of 1..=`max_threads` workers on `soc` (see the module docs).
pub fn placements(soc: &SocInfo, max_threads: usize) -> Vec<ThreadPlacement> {
    let max = max_threads.max(1);
    let unpinned = |threads| ThreadPlacement {
        threads,
        clusters: Vec::new(),
        cpus: Vec::new(),
    };
    if soc.clusters.len() <= 1 {
        return (1..=max).map(unpinned).collect();
    }
    let mut out = Vec::new();
    let mut largest = 0;
    for (ci, c) in soc.clusters.iter().enumerate() {
        for t in 1..=c.cpus.len().min(max) {
            out.push(ThreadPlacement {
                threads: t,
                clusters: vec![ci],
                cpus: c.cpus.clone(),
            });
        }
        largest = largest.max(c.cpus.len());
    }
    // Frequency domains holding several clusters: the counts above each
    // member's size.
    let mut seen = Vec::new();
    for c in &soc.clusters {
        let Some(freq) = c.max_freq_khz else { continue };
        if seen.contains(&freq) {
            continue;
        }
        seen.push(freq);
        let members: Vec<usize> = (0..soc.clusters.len())
            .filter(|&i| soc.clusters[i].max_freq_khz == Some(freq))
            .collect();
        if members.len() < 2 {
            continue;
        }
        let mut cpus: Vec<usize> = members
            .iter()
            .flat_map(|&i| soc.clusters[i].cpus.iter().copied())
            .collect();
        cpus.sort_unstable();
        let biggest_member = members
            .iter()
            .map(|&i| soc.clusters[i].cpus.len())
            .max()
            .unwrap_or(0);
        for t in biggest_member + 1..=cpus.len().min(max) {
            out.push(ThreadPlacement {
                threads: t,
                clusters: members.clone(),
                cpus: cpus.clone(),
            });
        }
        largest = largest.max(cpus.len());
    }
    out.extend((largest + 1..=max).map(unpinned));
    out
}

/// Keeps the placements this process can pin: a pinned placement keeps only
/// the CPUs in `allowed` (the process's affinity mask, which leaves out
/// offline CPUs: a phone hot-unplugs cores, a container gets a few) and is
/// dropped when fewer remain than it has workers, since two workers pinned
/// to one CPU time a configuration the runtime never runs. Returns the kept
/// placements and, for the user, one note per CPU set that lost some.
pub fn runnable(
    places: Vec<ThreadPlacement>,
    allowed: &[usize],
) -> (Vec<ThreadPlacement>, Vec<String>) {
    let mut kept = Vec::with_capacity(places.len());
    // (the CPU set, how many of them are usable, the placements left out)
    let mut dropped: Vec<(Vec<usize>, usize, Vec<String>)> = Vec::new();
    for mut p in places {
        if !p.pinned() {
            kept.push(p);
            continue;
        }
        let on: Vec<usize> = p
            .cpus
            .iter()
            .copied()
            .filter(|c| allowed.contains(c))
            .collect();
        if on.len() >= p.threads {
            p.cpus = on;
            kept.push(p);
            continue;
        }
        match dropped.iter_mut().find(|(cpus, _, _)| *cpus == p.cpus) {
            Some((_, _, names)) => names.push(p.name()),
            None => dropped.push((p.cpus.clone(), on.len(), vec![p.name()])),
        }
    }
    let notes = dropped
        .into_iter()
        .map(|(cpus, usable, names)| {
            format!(
                "{} left out: cpus {}, {usable} of them usable (offline, or outside this \
                 process's affinity mask); bring them online to tune there",
                names.join(", "),
                tiletune_soc::sysfs::format_cpu_list(&cpus),
            )
        })
        .collect();
    (kept, notes)
}

/// Parses a placement name (`t4@cluster2`, `t3@cluster1+2`, `t8`) against
/// `soc`'s clusters.
pub fn parse_placement(s: &str, soc: &SocInfo) -> Result<ThreadPlacement, TunerError> {
    let bad = |why: String| TunerError::BadPlacement {
        placement: s.to_string(),
        reason: why,
    };
    let (t, at) = match s.split_once('@') {
        Some((t, at)) => (t, Some(at)),
        None => (s, None),
    };
    let threads: usize = t
        .strip_prefix('t')
        .and_then(|n| n.parse().ok())
        .filter(|&n| n > 0)
        .ok_or_else(|| bad("it must start with t<threads>, e.g. t2".into()))?;
    let Some(at) = at else {
        return Ok(ThreadPlacement {
            threads,
            clusters: Vec::new(),
            cpus: Vec::new(),
        });
    };
    let list = at
        .strip_prefix("cluster")
        .ok_or_else(|| bad("after @ comes cluster<index>, e.g. t2@cluster1".into()))?;
    let mut clusters = Vec::new();
    let mut cpus = Vec::new();
    for part in list.split('+') {
        let ci: usize = part
            .parse()
            .map_err(|_| bad(format!("`{part}` is not a cluster index")))?;
        let c = soc.clusters.get(ci).ok_or_else(|| {
            bad(format!(
                "this SoC has {} cluster(s), numbered from 0 as `tiletune probe` lists them",
                soc.clusters.len()
            ))
        })?;
        clusters.push(ci);
        cpus.extend(c.cpus.iter().copied());
    }
    cpus.sort_unstable();
    cpus.dedup();
    if threads > cpus.len() {
        return Err(bad(format!(
            "{threads} workers do not fit the {} CPU(s) of {at}",
            cpus.len()
        )));
    }
    Ok(ThreadPlacement {
        threads,
        clusters,
        cpus,
    })
}

/// `problem` with its thread dimension made of `placements`: candidate `c`
/// of `t` threads becomes `c` on each placement of `t` workers, in list
/// order; a count the list lacks keeps `c` unpinned. The default stays the
/// unpinned default (what runs untuned), with the count's pinned
/// placements as further candidates. Validation does not depend on where
/// the workers run, so each underlying candidate is validated once.
pub fn with_placements<'a>(
    problem: Box<dyn KernelProblem + 'a>,
    placements: &[ThreadPlacement],
) -> Result<Box<dyn KernelProblem + 'a>, TunerError> {
    let keys = placements
        .iter()
        .map(ThreadPlacement::to_key)
        .collect::<Result<Vec<_>, _>>()?;
    let inner_default = problem.default_index();
    let mut cands = Vec::new();
    let mut inner_of = Vec::new();
    let mut default = 0;
    for (i, c) in problem.candidates().iter().enumerate() {
        let t = c.threads();
        let mut here: Vec<&Placement> = keys.iter().filter(|p| p.threads() == t).collect();
        if c.placement().is_pinned() || here.is_empty() {
            here = vec![c.placement()];
        } else if i == inner_default && !here.contains(&c.placement()) {
            here.insert(0, c.placement());
        }
        for p in here {
            if i == inner_default && p == c.placement() {
                default = cands.len();
            }
            cands.push(c.clone().with_placement(p.clone())?);
            inner_of.push(i);
        }
    }
    let validated = vec![None; problem.candidates().len()];
    Ok(Box::new(Placed {
        inner: problem,
        cands,
        inner_of,
        default,
        validated,
    }))
}

/// A problem whose candidates carry placements (see [`with_placements`]).
struct Placed<'a> {
    inner: Box<dyn KernelProblem + 'a>,
    cands: Vec<Candidate>,
    /// The inner candidate each of `cands` runs.
    inner_of: Vec<usize>,
    default: usize,
    /// Validation result per inner candidate, once known.
    validated: Vec<Option<Result<f32, String>>>,
}

impl KernelProblem for Placed<'_> {
    fn spec(&self) -> &Problem {
        self.inner.spec()
    }
    fn candidates(&self) -> &[Candidate] {
        &self.cands
    }
    fn default_index(&self) -> usize {
        self.default
    }
    fn validate(&mut self, i: usize) -> Result<f32, String> {
        let j = self.inner_of[i];
        if let Some(r) = &self.validated[j] {
            return r.clone();
        }
        let r = self.inner.validate(j);
        self.validated[j] = Some(r.clone());
        r
    }
    fn tolerance(&self) -> f32 {
        self.inner.tolerance()
    }
    fn run(&mut self, i: usize) {
        self.inner.run(self.inner_of[i]);
    }
    fn prepare(&mut self) {
        self.inner.prepare();
    }
    fn release(&mut self) {
        self.inner.release();
    }
    fn work(&self) -> Work {
        self.inner.work()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn fixture(name: &str) -> SocInfo {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../soc/tests/fixtures");
        tiletune_soc::probe_root(&root.join(name)).unwrap()
    }

    fn names(soc: &SocInfo, max: usize) -> Vec<String> {
        placements(soc, max).iter().map(|p| p.name()).collect()
    }

    /// A phone with its big cores offline (or a fake device on a 2-CPU
    /// host): placements on CPUs the process cannot use are left out with a
    /// note, a partly usable cluster keeps the counts its usable CPUs hold.
    #[test]
    fn placements_on_unusable_cpus_are_left_out() {
        let soc = fixture("arm-sm8550");
        let (kept, notes) = runnable(placements(&soc, 8), &[0, 1]);
        let names: Vec<String> = kept.iter().map(|p| p.name()).collect();
        assert_eq!(
            names,
            ["t1@cluster0", "t2@cluster0", "t5", "t6", "t7", "t8"]
        );
        assert_eq!(kept[1].cpus, vec![0, 1]);
        assert_eq!(notes.len(), 5, "{notes:?}");
        assert!(
            notes[0].starts_with("t3@cluster0 left out: cpus 0-2, 2 of them usable"),
            "{notes:?}"
        );
        assert!(
            notes[1].starts_with("t1@cluster1, t2@cluster1 left out: cpus 3-4, 0 of"),
            "{notes:?}"
        );
        let (all, none) = runnable(placements(&soc, 8), &[0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(all, placements(&soc, 8));
        assert!(none.is_empty());
    }

    /// Snapdragon 8 Gen 2: 3× A510 (cluster 0), 2× A715 (1), 2× A710 (2) —
    /// one 2.8 GHz domain with 1 — and 1× X3 (3).
    #[test]
    fn snapdragon_8_gen_2_gets_per_cluster_and_per_domain_placements() {
        let soc = fixture("arm-sm8550");
        assert_eq!(soc.clusters.len(), 4);
        assert_eq!(
            names(&soc, 8),
            [
                "t1@cluster0",
                "t2@cluster0",
                "t3@cluster0",
                "t1@cluster1",
                "t2@cluster1",
                "t1@cluster2",
                "t2@cluster2",
                "t1@cluster3",
                "t3@cluster1+2",
                "t4@cluster1+2",
                "t5",
                "t6",
                "t7",
                "t8",
            ]
        );
        let p = placements(&soc, 8);
        let x3 = p.iter().find(|p| p.name() == "t1@cluster3").unwrap();
        assert_eq!(x3.cpus, soc.clusters[3].cpus);
        let mid = p.iter().find(|p| p.name() == "t4@cluster1+2").unwrap();
        assert_eq!(mid.cpus, vec![3, 4, 5, 6]);
        // A thread budget caps every list.
        assert_eq!(names(&soc, 2).len(), 2 + 2 + 2 + 1);
        assert!(names(&soc, 2).iter().all(|n| !n.starts_with("t3")));
    }

    #[test]
    fn single_cluster_machines_are_not_pinned() {
        for f in ["arm-rpi5", "arm-graviton3", "x86-epyc-zen5"] {
            let soc = fixture(f);
            let p = placements(&soc, 4);
            assert_eq!(p.len(), 4, "{f}");
            assert!(p.iter().all(|p| !p.pinned()), "{f}");
            assert_eq!(p[3].name(), "t4");
        }
    }

    #[test]
    fn names_parse_back_and_bad_ones_say_why() {
        let soc = fixture("arm-sm8550");
        for p in placements(&soc, 8) {
            assert_eq!(parse_placement(&p.name(), &soc).unwrap(), p);
        }
        let err = |s: &str| parse_placement(s, &soc).unwrap_err().to_string();
        assert!(err("4@cluster1").contains("t<threads>"));
        assert!(err("t0").contains("t<threads>"));
        assert!(err("t2@big").contains("cluster<index>"));
        assert!(err("t2@cluster9").contains("4 cluster(s)"));
        assert!(err("t3@cluster1").contains("do not fit"));
        assert!(err("t2@clusterx").contains("not a cluster index"));
    }
}
