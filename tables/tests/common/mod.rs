//! Builders shared by the integration tests: a registered SoC, a campaign, and
//! measurements/selections with readable defaults.
#![allow(dead_code)] // each test file uses a different subset

use serde_json::json;
use std::path::{Path, PathBuf};
use tiletune_tables::{
    Campaign, Candidate, Measurement, MeasurementStats, Phase, Problem, Selection, SelectorDb,
    SocRecord, Verdict,
};

pub const ABI: u32 = 3;

pub fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

pub fn db_path(dir: &Path) -> PathBuf {
    dir.join("selector.db")
}

pub fn soc(fp: &str) -> SocRecord {
    SocRecord {
        fingerprint: fp.to_string(),
        name: format!("test soc {fp}"),
        probe: json!({"arch": "x86_64", "cores": 2, "fp": fp}),
        first_seen: 1_700_000_000,
    }
}

pub fn gemv(n: usize, k: usize) -> Problem {
    Problem::new("gemv", "q4_0", [("n", n), ("k", k)]).unwrap()
}

pub fn cand(variant: &str, nr: u64, threads: usize) -> Candidate {
    Candidate::new(variant, json!({"nr": nr, "kc": 256}), threads).unwrap()
}

/// Registers `fp` and starts a campaign on it; returns the campaign id.
pub fn setup(db: &mut SelectorDb, fp: &str) -> String {
    db.register_soc(&soc(fp)).unwrap();
    let mut c = Campaign::new(fp, "0.1.0", ABI, "exhaustive");
    c.budget_s = Some(300.0);
    db.start_campaign(&c).unwrap();
    c.id
}

pub fn meas(campaign: &str, fp: &str, p: &Problem, c: &Candidate, ns: f64) -> Measurement {
    Measurement {
        campaign: campaign.to_string(),
        soc: fp.to_string(),
        kernel_abi: ABI,
        problem: p.clone(),
        candidate: c.clone(),
        median_ns: Some(ns),
        stats: MeasurementStats {
            median_ns: Some(ns),
            mad_ns: Some(ns * 0.01),
            // A key tiletune does not write: kept through every round trip.
            other: [("n".to_string(), json!(31))].into(),
            ..MeasurementStats::default()
        },
        counters: json!({"source": "software"}),
        valid: true,
        invalid_reason: None,
        measured_at: 1_700_000_100,
    }
}

pub fn sel(fp: &str, campaign: Option<&str>, p: &Problem, c: &Candidate, ns: f64) -> Selection {
    Selection {
        soc: fp.to_string(),
        kernel_abi: ABI,
        problem: p.clone(),
        thread_budget: 2,
        winner: c.clone(),
        median_ns: ns,
        default_ns: Some(ns * 1.5),
        speedup: None,
        campaign: campaign.map(str::to_string),
        selected_at: 1_700_000_200,
    }
}

/// A verdict on `fp` for model `m-<name>` with three alternated rounds, the
/// tuned plan 10% faster.
pub fn verdict(fp: &str, name: &str, phase: Phase, threads: usize) -> Verdict {
    Verdict {
        soc: fp.to_string(),
        kernel_abi: ABI,
        model: format!("m-{name}"),
        model_name: name.to_string(),
        phase,
        threads,
        plan_digest: "p-1".to_string(),
        test: match phase {
            Phase::Prefill => "pp512".to_string(),
            Phase::Decode => "tg128".to_string(),
        },
        default_s: vec![1.1, 1.2, 1.0],
        tuned_s: vec![1.0, 1.0, 1.0],
        ratio: 1.1,
        won: true,
        campaign: None,
        measured_at: 1_700_000_500,
    }
}
