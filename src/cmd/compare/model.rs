//! `tiletune compare --model M`: model throughput, tiletune vs peers.

use super::ModelCompareArgs;
use super::output::{available_threads, print_doc, store, tiletune_exe, write_json_file};
use crate::cmd::Global;
use anyhow::Context;
use std::process::ExitCode;
use std::time::Duration;
use tiletune_bench::peers::BenchTests;
use tiletune_bench::peers::compare::ModelCompare;
use tiletune_tables::{PeerResult, now_unix};

pub(super) fn run(g: &Global, a: ModelCompareArgs) -> anyhow::Result<ExitCode> {
    let model = crate::cmd::pull::model_path(&a.model.clone().context("--model is required")?)?;
    if !model.is_file() {
        anyhow::bail!("model {} does not exist", model.display());
    }
    if a.reps == 0 {
        anyhow::bail!("--reps must be at least 1");
    }
    if a.tests
        .n_prompt
        .iter()
        .chain(&a.tests.n_gen)
        .all(|&x| x == 0)
    {
        anyhow::bail!("-p and -n are all 0; nothing to measure");
    }
    let threads = if a.threads.is_empty() {
        vec![available_threads()]
    } else {
        a.threads.clone()
    };
    if threads.contains(&0) {
        anyhow::bail!("-t: thread counts must be at least 1");
    }
    let soc = tiletune_soc::probe().context("probing this SoC")?;
    let cmp = ModelCompare {
        model: model.clone(),
        tiletune: tiletune_exe()?,
        llama_bench: a.llama_bench.clone(),
        llama_args: a
            .llama_args
            .as_deref()
            .map(|s| s.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default(),
        mnn_bench: a.mnn_bench.clone(),
        mnn_config: a.mnn_config.clone(),
        tests: BenchTests {
            n_prompt: a.tests.n_prompt.clone(),
            n_gen: a.tests.n_gen.clone(),
            n_depth: a.tests.n_depth.clone(),
            cache_type: a.kv_type.map(|k| k.name().to_string()),
        },
        threads,
        rounds: a.reps,
        timeout: Duration::from_secs(a.timeout.max(1)),
        report_dir: std::env::temp_dir().join(format!("tiletune-compare-{}", std::process::id())),
    };
    let run = cmp.run(&soc.name, &soc.fingerprint, |engine, round| {
        eprintln!("round {round}/{}: {engine}", a.reps);
    })?;
    let doc = &run.doc;

    let mut notes = Vec::new();
    if !a.no_store && !doc.rows.is_empty() {
        let now = now_unix();
        let results: Vec<PeerResult> = doc
            .rows
            .iter()
            .map(|r| PeerResult {
                soc: soc.fingerprint.clone(),
                model: doc.model.clone(),
                engine: r.engine.clone(),
                engine_version: r.engine_version.clone(),
                test: r.test.clone(),
                threads: r.threads,
                tokens_per_s: r.mean,
                std: r.std,
                json: run.stored_json(r),
                measured_at: now,
            })
            .collect();
        notes.push(store(&a.db, &results, &soc));
    }
    if let Some(p) = &a.out {
        write_json_file(p, doc)?;
        notes.push(format!("wrote {}", p.display()));
    }
    print_doc(g, doc, |o| doc.write_table(o))?;
    for n in notes {
        eprintln!("{n}");
    }
    Ok(if run.has_reference() {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "error: tiletune's own benchmark gave no result (see above); nothing to compare against"
        );
        ExitCode::FAILURE
    })
}
