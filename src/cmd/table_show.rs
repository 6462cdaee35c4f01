//! What `tiletune table show` prints: the tuned winners per SoC, then that
//! SoC's model-level verdicts, as aligned text tables.

use std::io::Write;
use tiletune_tables::{Selection, Verdict};

/// `812 ns`, `12.4 µs`, `3.10 ms`.
fn fmt_ns(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.1} µs", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

/// Per SoC, its selections and then its model-level verdicts.
pub(super) fn print_show(
    out: &mut impl Write,
    sels: &[Selection],
    verdicts: &[Verdict],
    names: &std::collections::HashMap<String, String>,
) -> anyhow::Result<()> {
    let socs: std::collections::BTreeSet<&str> = sels
        .iter()
        .map(|s| s.soc.as_str())
        .chain(verdicts.iter().map(|v| v.soc.as_str()))
        .collect();
    for (i, soc) in socs.into_iter().enumerate() {
        if i > 0 {
            writeln!(out)?;
        }
        let mine: Vec<Selection> = sels.iter().filter(|s| s.soc == soc).cloned().collect();
        let after_selections = !mine.is_empty();
        if after_selections {
            print_selections(out, &mine, names)?;
        }
        let mine: Vec<&Verdict> = verdicts.iter().filter(|v| v.soc == soc).collect();
        if !mine.is_empty() {
            if after_selections {
                writeln!(out)?;
            }
            writeln!(out, "model-level verdicts for {}:", soc_cell(soc, names))?;
            print_verdicts(out, &mine)?;
        }
    }
    Ok(())
}

fn soc_cell(soc: &str, names: &std::collections::HashMap<String, String>) -> String {
    names
        .get(soc)
        .map_or(soc.to_string(), |n| format!("{n} ({})", short(soc)))
}

fn print_selections(
    out: &mut impl Write,
    sels: &[Selection],
    names: &std::collections::HashMap<String, String>,
) -> anyhow::Result<()> {
    let header = [
        "soc",
        "abi",
        "op",
        "dtype",
        "shape",
        "budget",
        "winner",
        "placement",
        "median",
        "speedup",
    ];
    let rows: Vec<Vec<String>> = sels
        .iter()
        .map(|s| {
            vec![
                soc_cell(&s.soc, names),
                s.kernel_abi.to_string(),
                s.problem.op().to_string(),
                s.problem.dtype().to_string(),
                s.problem.dims_string(),
                s.thread_budget.to_string(),
                format!("{} {}", s.winner.variant(), s.winner.params_json()),
                placement_cell(s.winner.placement()),
                fmt_ns(s.median_ns),
                s.speedup.map_or("-".to_string(), |x| format!("{x:.2}x")),
            ]
        })
        .collect();
    print_table(out, &header, &rows, &[1, 5, 8, 9])
}

/// One line per verdict: the whole model timed with the tuned plan against
/// the default one, medians over the alternated rounds.
fn print_verdicts(out: &mut impl Write, verdicts: &[&Verdict]) -> anyhow::Result<()> {
    let header = [
        "model",
        "phase",
        "threads",
        "test",
        "default ms",
        "tuned ms",
        "ratio",
        "verdict",
    ];
    let rows: Vec<Vec<String>> = verdicts
        .iter()
        .map(|v| {
            vec![
                v.model_name.clone(),
                v.phase.to_string(),
                v.threads.to_string(),
                v.test.clone(),
                format!("{:.1}", v.default_median_s() * 1e3),
                format!("{:.1}", v.tuned_median_s() * 1e3),
                format!("{:.2}x", v.ratio),
                if v.won { "tuned runs" } else { "default runs" }.to_string(),
            ]
        })
        .collect();
    print_table(out, &header, &rows, &[2, 4, 5, 6])
}

/// Columns padded to their widest cell; `numeric` columns right-aligned.
fn print_table(
    out: &mut impl Write,
    header: &[&str],
    rows: &[Vec<String>],
    numeric: &[usize],
) -> anyhow::Result<()> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |out: &mut dyn Write, cells: &[&str]| -> std::io::Result<()> {
        let mut s = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i > 0 {
                s.push_str("  ");
            }
            let pad = w - c.chars().count();
            if numeric.contains(&i) {
                s.push_str(&" ".repeat(pad));
                s.push_str(c);
            } else {
                s.push_str(c);
                s.push_str(&" ".repeat(pad));
            }
        }
        writeln!(out, "{}", s.trim_end())
    };
    line(out, header)?;
    for r in rows {
        let cells: Vec<&str> = r.iter().map(String::as_str).collect();
        line(out, &cells)?;
    }
    Ok(())
}

/// `t2`, or `t2@cluster1 (cpus 4,5)` when pinned.
fn placement_cell(p: &tiletune_tables::Placement) -> String {
    if !p.is_pinned() {
        return p.name();
    }
    let cpus: Vec<String> = p.cpus().iter().map(|c| c.to_string()).collect();
    format!("{} (cpus {})", p.name(), cpus.join(","))
}

/// The first 12 characters of a fingerprint: enough to tell SoCs apart on screen.
fn short(fp: &str) -> &str {
    fp.char_indices().nth(12).map_or(fp, |(i, _)| &fp[..i])
}

#[cfg(test)]
mod tests {
    use super::*;
    use tiletune_tables::{Candidate, Phase, Placement, Problem};

    #[test]
    fn show_prints_the_placement_column() {
        let sel = |winner: Candidate| Selection {
            soc: "socA".into(),
            kernel_abi: 1,
            problem: Problem::new("gemv", "f32", [("n", 64), ("k", 32)]).unwrap(),
            thread_budget: 2,
            winner,
            median_ns: 1500.0,
            default_ns: Some(3000.0),
            speedup: Some(2.0),
            campaign: None,
            selected_at: 0,
        };
        let pinned = Placement::pinned(2, vec![1], vec![4, 5]).unwrap();
        let sels = [
            sel(Candidate::placed("neon", serde_json::json!({"nr": 4}), pinned).unwrap()),
            sel(Candidate::new("neon", serde_json::json!({"nr": 8}), 1).unwrap()),
        ];
        let mut out = Vec::new();
        print_selections(&mut out, &sels, &Default::default()).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("placement"), "{text}");
        assert!(lines[1].contains("t2@cluster1 (cpus 4,5)"), "{text}");
        assert!(lines[2].contains(" t1 "), "{text}");
        assert!(lines[1].contains(r#"neon {"nr":4}"#), "{text}");
    }

    #[test]
    fn show_prints_model_level_verdicts_after_the_selections() {
        let sel = Selection {
            soc: "socA".into(),
            kernel_abi: 1,
            problem: Problem::new("gemv", "f32", [("n", 64), ("k", 32)]).unwrap(),
            thread_budget: 2,
            winner: Candidate::new("neon", serde_json::json!({"nr": 8}), 2).unwrap(),
            median_ns: 1500.0,
            default_ns: Some(3000.0),
            speedup: Some(2.0),
            campaign: None,
            selected_at: 0,
        };
        let verdict = |phase, tuned_s: Vec<f64>, won| Verdict {
            soc: "socA".into(),
            kernel_abi: 1,
            model: "d1g35t".into(),
            model_name: "SmolLM2-135M.gguf".into(),
            phase,
            threads: 2,
            plan_digest: "p1".into(),
            test: if phase == Phase::Prefill {
                "pp512"
            } else {
                "tg128"
            }
            .into(),
            default_s: vec![0.214, 0.2, 0.21],
            ratio: 0.21 / tuned_s[1],
            tuned_s,
            won,
            campaign: None,
            measured_at: 0,
        };
        let verdicts = [
            verdict(Phase::Prefill, vec![0.19, 0.196, 0.2], true),
            verdict(Phase::Decode, vec![0.22, 0.2206, 0.23], false),
        ];
        let names = [("socA".to_string(), "Test SoC".to_string())].into();
        let mut out = Vec::new();
        print_show(&mut out, &[sel], &verdicts, &names).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("placement"), "{text}");
        assert!(lines[1].contains("Test SoC (socA)"), "{text}");
        assert_eq!(lines[2], "", "{text}");
        assert_eq!(
            lines[3], "model-level verdicts for Test SoC (socA):",
            "{text}"
        );
        for h in [
            "model",
            "phase",
            "threads",
            "test",
            "default ms",
            "tuned ms",
            "ratio",
        ] {
            assert!(lines[4].contains(h), "{h:?} missing: {text}");
        }
        let prefill: Vec<&str> = lines[5].split_whitespace().collect();
        assert_eq!(
            prefill,
            [
                "SmolLM2-135M.gguf",
                "prefill",
                "2",
                "pp512",
                "210.0",
                "196.0",
                "1.07x",
                "tuned",
                "runs"
            ],
            "{text}"
        );
        assert!(
            lines[6].contains("decode") && lines[6].contains("tg128"),
            "{text}"
        );
        assert!(
            lines[6].contains("220.6") && lines[6].contains("0.95x"),
            "{text}"
        );
        assert!(lines[6].ends_with("default runs"), "{text}");
        assert_eq!(lines.len(), 7, "{text}");
    }
}
