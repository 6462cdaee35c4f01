//! Placements in the search space, on a fake two-cluster SoC whose clusters
//! are this machine's CPUs 0 and 1 (so pinning really happens): the
//! candidate list holds the pinned placements, a campaign measures and
//! records them, a pinned winner round-trips through the selector table and
//! a JSON export, and a pinned measurement runs where it was asked.

use std::path::PathBuf;
use std::time::Duration;
use tiletune_bench::MeasureConfig;
use tiletune_bench::pin::{affinity, affinity_of};
use tiletune_soc::SocInfo;
use tiletune_tables::{
    Campaign, Lookup, Placement, Problem, SelectorDb, SocRecord, read_export, write_export,
};
use tiletune_tuner::adapters::{DbStore, HarnessMeasure};
use tiletune_tuner::campaign::{CampaignConfig, Measure, Stats, run_campaign};
use tiletune_tuner::families::{Machine, instantiate, worker_tids};
use tiletune_tuner::placement::{ThreadPlacement, placements, with_placements};
use tiletune_tuner::{KernelProblem, Strategy};

fn fixture(name: &str) -> SocInfo {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../soc/tests/fixtures");
    tiletune_soc::probe_root(&root.join(name)).unwrap()
}

/// A big.LITTLE-shaped SoC: cluster 0 is CPU 0 (3 GHz), cluster 1 is CPU 1
/// (2 GHz). Separate frequencies, so no cross-cluster domain.
fn two_clusters() -> SocInfo {
    let mut soc = fixture("x86-epyc-zen5");
    let proto = soc.clusters[0].clone();
    soc.clusters = [(0, 3_000_000, "big"), (1, 2_000_000, "little")]
        .into_iter()
        .map(|(cpu, khz, name)| {
            let mut c = proto.clone();
            c.core_name = name.to_string();
            c.cpus = vec![cpu];
            c.cpu_list = cpu.to_string();
            c.max_freq_khz = Some(khz);
            c
        })
        .collect();
    soc
}

/// Both CPUs exist here (every lane runs on a machine with at least two).
fn have_two_cpus() -> bool {
    let a = affinity().unwrap();
    a.contains(&0) && a.contains(&1)
}

fn machine() -> Machine {
    Machine::small_for_tests(3)
}

fn problem() -> Problem {
    Problem::new("gemv", "f32", [("n", 24), ("k", 40)]).unwrap()
}

fn placed_problem(soc: &SocInfo) -> Box<dyn KernelProblem> {
    let inner = instantiate(&problem(), &machine()).unwrap();
    with_placements(inner, &placements(soc, 2)).unwrap()
}

#[test]
fn candidates_cover_each_clusters_pinned_placements() {
    let soc = two_clusters();
    let names: Vec<String> = placements(&soc, 2).iter().map(|p| p.name()).collect();
    assert_eq!(names, ["t1@cluster0", "t1@cluster1", "t2"]);

    let inner = instantiate(&problem(), &machine()).unwrap();
    let inner_keys: Vec<String> = inner.candidates().iter().map(|c| c.key()).collect();
    let p = placed_problem(&soc);
    let cands = p.candidates();
    let count = |name: &str| {
        cands
            .iter()
            .filter(|c| c.placement().name() == name)
            .count()
    };
    let one_thread = inner
        .candidates()
        .iter()
        .filter(|c| c.threads() == 1)
        .count();
    assert!(one_thread > 0);
    // Every 1-thread candidate on each cluster, none unpinned.
    assert_eq!(count("t1@cluster0"), one_thread);
    assert_eq!(count("t1@cluster1"), one_thread);
    assert_eq!(count("t1"), 0);
    let pinned = &cands[cands
        .iter()
        .position(|c| c.placement().name() == "t1@cluster1")
        .unwrap()];
    assert_eq!(pinned.placement().cpus(), [1]);
    assert!(pinned.key().contains("/t1@cluster1/"), "{}", pinned.key());
    // The default stays the unpinned default.
    let d = &cands[p.default_index()];
    assert_eq!(d.key(), inner_keys[inner.default_index()]);
    assert!(!d.placement().is_pinned());
    // Keys stay unique.
    let mut keys: Vec<String> = cands.iter().map(|c| c.key()).collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), cands.len());
}

#[test]
fn single_cluster_machines_keep_todays_candidates() {
    let soc = fixture("x86-epyc-zen5");
    let inner = instantiate(&problem(), &machine()).unwrap();
    let want: Vec<String> = inner.candidates().iter().map(|c| c.key()).collect();
    let default = inner.default_index();
    let p = with_placements(inner, &placements(&soc, 2)).unwrap();
    let got: Vec<String> = p.candidates().iter().map(|c| c.key()).collect();
    assert_eq!(got, want);
    assert_eq!(p.default_index(), default);
}

/// Measures with the harness, and says the candidate was fast when it ran
/// on `fast`: a deterministic winner while every placement is really
/// applied and timed.
struct Prefer {
    harness: HarnessMeasure,
    fast: String,
    current: String,
}

impl Measure for Prefer {
    fn measure(&mut self, fidelity: u32, run: &mut (dyn FnMut() + Send)) -> Stats {
        let mut s = self.harness.measure(fidelity, run);
        s.median_s = if self.current == self.fast {
            1e-6
        } else {
            2e-6
        };
        s.mad_s = 0.0;
        s
    }
    fn use_placement(&mut self, p: &Placement) {
        self.current = p.name();
        self.harness.use_placement(p);
    }
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tt-place-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn a_campaign_records_pinned_placements_and_the_winner_round_trips() {
    if !have_two_cpus() {
        eprintln!("skipped: needs CPUs 0 and 1");
        return;
    }
    let soc = two_clusters();
    let dir = temp_dir("campaign");
    let mut db = SelectorDb::open(dir.join("a.db")).unwrap();
    let fp = "fake-two-cluster";
    db.register_soc(&SocRecord {
        fingerprint: fp.into(),
        name: "fake big.LITTLE".into(),
        probe: serde_json::json!({}),
        first_seen: 0,
    })
    .unwrap();
    let campaign = Campaign::new(fp, "test", 1, "exhaustive");
    db.start_campaign(&campaign).unwrap();
    let mut problems = vec![placed_problem(&soc)];
    let quick = MeasureConfig::quick()
        .warmup(1, Duration::ZERO)
        .min(5, Duration::from_micros(200))
        .max(20, Duration::from_millis(2));
    let mut measure = Prefer {
        harness: HarnessMeasure::new(quick),
        fast: "t1@cluster1".into(),
        current: String::new(),
    };
    let reports = {
        let mut store = DbStore {
            db: &mut db,
            soc: fp.into(),
            kernel_abi: 1,
            campaign: campaign.id.clone(),
        };
        let cfg = CampaignConfig {
            strategy: Strategy::Exhaustive,
            budget: None,
            stop: None,
            shares: Vec::new(),
        };
        run_campaign(&mut problems, &cfg, &mut measure, &mut store, &mut ())
    };
    let sel = reports[0].selection.clone().expect("a selection");
    assert_eq!(sel.winner.placement().name(), "t1@cluster1");
    assert_eq!(sel.thread_budget, 2);

    // Every placement was measured and stored under its own key, with where
    // the pinned runs were observed.
    let ms = db.campaign_measurements(&campaign.id).unwrap();
    for name in ["t1@cluster0", "t1@cluster1", "t2"] {
        assert!(
            ms.iter().any(|m| m.candidate.placement().name() == name),
            "{name} not measured"
        );
    }
    for m in ms.iter().filter(|m| m.candidate.placement().is_pinned()) {
        let observed = &m.counters["placement"];
        assert_eq!(
            observed["pinned_to"],
            serde_json::json!(m.candidate.placement().cpus())
        );
    }

    // The winner's placement round-trips through the table ...
    let got = db.lookup(fp, 1, 2, &problem()).unwrap();
    let Lookup::Exact(stored) = got else {
        panic!("{got:?}")
    };
    assert_eq!(stored.winner, sel.winner);
    assert_eq!(stored.winner.placement().cpus(), [1]);
    // ... and through an export file and an import elsewhere.
    let file = dir.join("export.json");
    write_export(&file, &db.export_soc(fp).unwrap()).unwrap();
    let mut other = SelectorDb::open(dir.join("b.db")).unwrap();
    other.import(&read_export(&file).unwrap()).unwrap();
    let Lookup::Exact(imported) = other.lookup(fp, 1, 2, &problem()).unwrap() else {
        panic!("the import lost the selection")
    };
    assert_eq!(imported.winner, sel.winner);
    let _ = std::fs::remove_dir_all(&dir);
}

/// What a pinned measurement really does: inside the timed closure each
/// pool worker, the measuring one included, is on its one CPU; a 1-thread
/// candidate runs on the caller, pinned to the placement's CPUs; afterwards
/// everything is back.
#[test]
fn pinned_measurements_pin_the_caller_and_each_worker() {
    if !have_two_cpus() {
        eprintln!("skipped: needs CPUs 0 and 1");
        return;
    }
    let caller_before = affinity().unwrap();
    let tids = worker_tids(2);
    let workers_before: Vec<Vec<usize>> = tids.iter().map(|&t| affinity_of(t).unwrap()).collect();
    let quick = MeasureConfig::quick()
        .warmup(1, Duration::ZERO)
        .min(5, Duration::from_micros(100))
        .max(10, Duration::from_millis(1));
    let mut m = HarnessMeasure::new(quick);
    // Two workers pinned across both clusters' CPUs, in reverse order.
    let both = ThreadPlacement {
        threads: 2,
        clusters: vec![0, 1],
        cpus: vec![1, 0],
    };
    let key = both.to_key().unwrap();
    assert_eq!(key.cpus(), [0, 1]);
    m.use_placement(&key);
    let mut seen = Vec::new();
    let mut me = 0;
    m.measure(1, &mut || {
        if seen.is_empty() {
            me = tiletune_pmu::counters::current_tid();
            for &t in &tids {
                seen.push(affinity_of(t).unwrap());
            }
        }
    });
    // Worker i on cpus[i], as `pool::pin_workers` places them at run time;
    // the measuring thread is one of those workers (the runtime calls
    // kernels from inside the pool).
    assert_eq!(seen, [vec![0], vec![1]]);
    assert!(tids.contains(&me), "measured on {me}, workers {tids:?}");
    // One thread on cluster 1: the caller runs the kernel, on CPU 1.
    let little = ThreadPlacement {
        threads: 1,
        clusters: vec![1],
        cpus: vec![1],
    };
    m.use_placement(&little.to_key().unwrap());
    let mut on = Vec::new();
    m.measure(1, &mut || {
        if on.is_empty() {
            on = affinity().unwrap();
        }
    });
    assert_eq!(on, [1]);
    assert_eq!(affinity().unwrap(), caller_before);
    let after: Vec<Vec<usize>> = tids.iter().map(|&t| affinity_of(t).unwrap()).collect();
    assert_eq!(after, workers_before);
}
