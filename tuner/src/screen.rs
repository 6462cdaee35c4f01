//! Screening rows from elsewhere (a `table import` or `table merge`) with the
//! rules the runtime applies when it reads a winner, so that a row the
//! runtime would have to reject never enters the table: an unknown op or
//! dtype, a variant of another family, an unknown ISA, parameters out of
//! range, threads outside the budget, or a kernel ABI newer than this build.
//! The CPU need not have the ISA: tables are merged across devices.

use crate::families::supported_dtypes;
use tiletune_kernels::choice::{KernelChoice, Op, WeightKind};
use tiletune_kernels::i8gemm::{self, I8GemmParams};
use tiletune_kernels::{Isa, Tunable};
use tiletune_tables::{Candidate, Problem, SocExport};

/// One row left out, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// `selection` or `measurement`, with its problem and candidate.
    pub row: String,
    pub reason: String,
}

/// Removes from `export` the selections and measurements the runtime could
/// not run (see the module docs) and returns what it removed.
pub fn screen_export(export: &mut SocExport, kernel_abi: u32) -> Vec<Refusal> {
    let mut refused = Vec::new();
    let mut keep = |what: &str, abi: u32, p: &Problem, c: &Candidate, budget: usize| match check(
        abi, kernel_abi, p, c, budget,
    ) {
        Ok(()) => true,
        Err(reason) => {
            refused.push(Refusal {
                row: format!("{what} {p} {}", c.key()),
                reason,
            });
            false
        }
    };
    export.selections.retain(|s| {
        keep(
            "selection",
            s.kernel_abi,
            &s.problem,
            &s.winner,
            s.thread_budget,
        )
    });
    export.measurements.retain(|m| {
        keep(
            "measurement",
            m.kernel_abi,
            &m.problem,
            &m.candidate,
            m.candidate.threads(),
        )
    });
    refused
}

fn check(abi: u32, ours: u32, p: &Problem, c: &Candidate, budget: usize) -> Result<(), String> {
    if abi > ours {
        return Err(format!(
            "kernel ABI {abi} is newer than this build's {ours}; import it with a newer tiletune"
        ));
    }
    let op = Op::from_name(p.op());
    if op.is_none() && p.op() != "i8gemm" {
        return Err(format!(
            "unknown op `{}`; tables hold gemv, gemm and i8gemm winners",
            p.op()
        ));
    }
    let dtypes = supported_dtypes(p.op());
    if !dtypes.contains(&p.dtype()) {
        return Err(format!(
            "unknown dtype `{}` for {}; known: {}",
            p.dtype(),
            p.op(),
            dtypes.join(", ")
        ));
    }
    // Rows of older ABIs describe kernels this build may not have; they are
    // kept as history and never run (the runtime reads its own ABI only).
    if abi < ours {
        return Ok(());
    }
    let Some(op) = op else {
        return check_i8gemm(c, budget);
    };
    KernelChoice::check_stored(
        op,
        WeightKind::of_dtype(p.dtype()),
        c.variant(),
        c.params(),
        c.threads(),
        budget,
    )
    .map(|_| ())
    .map_err(|e| e.to_string())
}

/// The int8 GEMM's winner (not a weight's kernel, so no
/// [`KernelChoice`]): a variant of the family, a tile of some variant, the
/// threads within the budget.
fn check_i8gemm(c: &Candidate, budget: usize) -> Result<(), String> {
    let isa: Isa = c.variant().parse().map_err(|e| format!("{e}"))?;
    if !i8gemm::variants().contains(&isa) {
        return Err(format!("i8gemm has no {isa} variant"));
    }
    let params: I8GemmParams =
        serde_json::from_value(c.params().clone()).map_err(|e| e.to_string())?;
    params.validate().map_err(|e| e.to_string())?;
    if c.threads() > budget {
        return Err(format!(
            "{} threads outside the budget of {budget}",
            c.threads()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tiletune_kernels::KERNEL_ABI;
    use tiletune_tables::{Selection, SocRecord};

    fn sel(op: &str, dtype: &str, variant: &str, params: serde_json::Value, abi: u32) -> Selection {
        let dims: Vec<(&str, usize)> = if op == "gemm" || op == "i8gemm" {
            vec![("m", 16), ("n", 64), ("k", 64)]
        } else {
            vec![("n", 64), ("k", 64)]
        };
        Selection {
            soc: "s".into(),
            kernel_abi: abi,
            problem: Problem::new(op, dtype, dims).unwrap(),
            thread_budget: 2,
            winner: Candidate::new(variant, params, 2).unwrap(),
            median_ns: 1.0,
            default_ns: None,
            speedup: None,
            campaign: None,
            selected_at: 0,
        }
    }

    fn export(selections: Vec<Selection>) -> SocExport {
        SocExport {
            format: tiletune_tables::exchange::EXPORT_FORMAT.into(),
            version: tiletune_tables::exchange::EXPORT_VERSION,
            soc: SocRecord {
                fingerprint: "s".into(),
                name: "s".into(),
                probe: json!({}),
                first_seen: 0,
            },
            campaigns: vec![],
            measurements: vec![],
            selections,
            ceilings: vec![],
            peer_results: vec![],
            verdicts: vec![],
        }
    }

    #[test]
    fn rows_the_runtime_would_reject_are_refused_with_why() {
        let gemv = json!({"nr": 4, "unroll": 1, "prefetch": 0, "kc": 0});
        let ok_gemv = sel("gemv", "f32", "scalar", gemv.clone(), KERNEL_ABI);
        let mut export = export(vec![
            ok_gemv.clone(),
            sel("gemv", "f32", "avx9000", json!({}), KERNEL_ABI),
            sel("gemv", "q4_0", "scalar", json!({}), KERNEL_ABI),
            sel("gemv", "q9_9", "neon", json!({}), KERNEL_ABI),
            sel("conv", "f32", "neon", json!({}), KERNEL_ABI),
            sel("gemv", "f32", "neon", json!({}), 999),
            sel(
                "gemm",
                "f32",
                "scalar",
                json!({"mr": 1_000_000, "nr": 8, "kc": 256, "mc": 64, "nc": 256, "pack": true}),
                KERNEL_ABI,
            ),
            // An old ABI's row is history: kept, never run.
            sel("gemv", "f32", "avx9000", json!({}), KERNEL_ABI - 1),
        ]);
        let refused = screen_export(&mut export, KERNEL_ABI);
        let reasons: Vec<&str> = refused.iter().map(|r| r.reason.as_str()).collect();
        assert_eq!(refused.len(), 6, "{reasons:#?}");
        assert_eq!(export.selections.len(), 2);
        assert_eq!(export.selections[0], ok_gemv);
        assert!(reasons[0].contains("avx9000"), "{}", reasons[0]);
        assert!(
            reasons[1].contains("a32") || reasons[1].contains("a8"),
            "{}",
            reasons[1]
        );
        assert!(
            reasons[2].contains("unknown dtype `q9_9`"),
            "{}",
            reasons[2]
        );
        assert!(reasons[3].contains("unknown op `conv`"), "{}", reasons[3]);
        assert!(reasons[4].contains("kernel ABI 999"), "{}", reasons[4]);
        assert!(
            refused[5].row.starts_with("selection gemm"),
            "{:?}",
            refused[5]
        );
    }

    /// Int8 GEMM winners: an SME tile from any device (its vector length
    /// is the device's), never a variant or tile the family lacks.
    #[test]
    fn i8gemm_rows_are_checked_as_the_family_reads_them() {
        let sme = json!({"mr": 32, "nr": 32, "pf": 0});
        let ok = sel("i8gemm", "i8", "sme", sme, KERNEL_ABI);
        let neon = sel(
            "i8gemm",
            "i8_zp",
            "neon_i8mm",
            json!({"mr": 2, "nr": 4}),
            KERNEL_ABI,
        );
        let mut export = export(vec![
            ok.clone(),
            neon.clone(),
            sel(
                "i8gemm",
                "i8",
                "avx2",
                json!({"mr": 3, "nr": 4}),
                KERNEL_ABI,
            ),
            sel(
                "i8gemm",
                "i8",
                "sme",
                json!({"mr": 24, "nr": 24}),
                KERNEL_ABI,
            ),
            sel(
                "i8gemm",
                "f32",
                "neon",
                json!({"mr": 2, "nr": 4}),
                KERNEL_ABI,
            ),
        ]);
        let refused = screen_export(&mut export, KERNEL_ABI);
        let reasons: Vec<&str> = refused.iter().map(|r| r.reason.as_str()).collect();
        assert_eq!(export.selections, vec![ok, neon], "{reasons:#?}");
        assert!(reasons[0].contains("tile 3x4"), "{}", reasons[0]);
        assert!(reasons[1].contains("tile 24x24"), "{}", reasons[1]);
        assert!(reasons[2].contains("unknown dtype `f32`"), "{}", reasons[2]);
    }

    /// A table from a device of the other architecture imports whole.
    #[test]
    fn rows_for_another_architecture_are_kept() {
        let gemv = json!({"nr": 4, "unroll": 1, "prefetch": 0, "kc": 0});
        let gemm = json!({"mr": 4, "nr": 16, "kc": 256, "mc": 64, "nc": 256, "pack": true});
        let (v, m) = if cfg!(target_arch = "x86_64") {
            ("neon", "neon")
        } else {
            ("avx2", "avx512")
        };
        let mut export = export(vec![
            sel("gemv", "f32", v, gemv, KERNEL_ABI),
            sel("gemm", "f32", m, gemm, KERNEL_ABI),
        ]);
        let refused = screen_export(&mut export, KERNEL_ABI);
        assert!(refused.is_empty(), "{refused:#?}");
    }
}
