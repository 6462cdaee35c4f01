//! Selector lookup for the runtime: complete keys first, then the explicit
//! nearest-shape fallback, never anything else.
//!
//! A selection is returned only for the asked SoC fingerprint, kernel ABI and
//! thread budget. For the shape, an exact problem key wins; otherwise the
//! nearest tuned problem of the same op and dtype with the same dim names is
//! returned as [`Lookup::Nearest`], with its log-space distance
//! ([`Problem::log_distance`]): Σ (ln a − ln b)² over dims matched by name.
//! Ties break on the smaller problem key so the answer is deterministic.

use crate::db::SelectorDb;
use crate::error::Result;
use crate::key::Problem;
use crate::records::{SEL_COLS, Selection, selection_row};
use rusqlite::params;
use std::collections::HashMap;

/// What the table knows for one problem.
#[derive(Clone, Debug, PartialEq)]
pub enum Lookup {
    /// Tuned for exactly this problem.
    Exact(Selection),
    /// Tuned for `from`, the nearest shape of the same op/dtype, at `distance`.
    Nearest {
        sel: Selection,
        from: Problem,
        distance: f64,
    },
    /// Nothing of this op/dtype is tuned on this SoC, ABI and thread budget.
    Missing,
}

impl Lookup {
    /// The selection, exact or nearest.
    pub fn selection(&self) -> Option<&Selection> {
        match self {
            Lookup::Exact(s) | Lookup::Nearest { sel: s, .. } => Some(s),
            Lookup::Missing => None,
        }
    }

    /// `exact`, `nearest` or `missing`: where a choice came from, for plans and logs.
    pub fn source(&self) -> &'static str {
        match self {
            Lookup::Exact(_) => "exact",
            Lookup::Nearest { .. } => "nearest",
            Lookup::Missing => "missing",
        }
    }
}

/// Picks the answer for `problem` among the selections of its family.
fn resolve(problem: &Problem, family: &[Selection]) -> Lookup {
    let key = problem.key();
    if let Some(s) = family.iter().find(|s| s.problem.key() == key) {
        return Lookup::Exact(s.clone());
    }
    let mut best: Option<(f64, String, &Selection)> = None;
    for s in family {
        let Some(d) = problem.log_distance(&s.problem) else {
            continue;
        };
        let k = s.problem.key();
        let better = match &best {
            None => true,
            Some((bd, bk, _)) => d < *bd || (d == *bd && k < *bk),
        };
        if better {
            best = Some((d, k, s));
        }
    }
    match best {
        Some((distance, _, s)) => Lookup::Nearest {
            sel: s.clone(),
            from: s.problem.clone(),
            distance,
        },
        None => Lookup::Missing,
    }
}

impl SelectorDb {
    /// The winner for one problem. See [`SelectorDb::lookup_many`].
    pub fn lookup(
        &self,
        soc: &str,
        kernel_abi: u32,
        thread_budget: usize,
        problem: &Problem,
    ) -> Result<Lookup> {
        Ok(self
            .lookup_many(
                soc,
                kernel_abi,
                thread_budget,
                std::slice::from_ref(problem),
            )?
            .pop()
            .unwrap_or(Lookup::Missing))
    }

    /// The winners for every problem a model needs, read in one transaction
    /// (one consistent snapshot even while a tuner writes). The answer has one
    /// entry per input problem, in order.
    pub fn lookup_many(
        &self,
        soc: &str,
        kernel_abi: u32,
        thread_budget: usize,
        problems: &[Problem],
    ) -> Result<Vec<Lookup>> {
        let e = self.err("looking up selections");
        let tx = self.conn.unchecked_transaction().map_err(&e)?;
        // Only the families asked for: a model needs a handful of (op, dtype).
        let mut families: HashMap<(&str, &str), Vec<Selection>> = HashMap::new();
        for p in problems {
            families.entry((p.op(), p.dtype())).or_default();
        }
        {
            let mut stmt = tx
                .prepare_cached(&format!(
                    "SELECT {SEL_COLS} FROM selections
                     WHERE soc = ?1 AND kernel_abi = ?2 AND thread_budget = ?3 AND op = ?4 AND dtype = ?5"
                ))
                .map_err(&e)?;
            for ((op, dtype), rows) in families.iter_mut() {
                *rows = stmt
                    .query_map(
                        params![soc, kernel_abi, thread_budget, op, dtype],
                        selection_row,
                    )
                    .and_then(|r| r.collect())
                    .map_err(&e)?;
            }
        }
        tx.finish().map_err(&e)?;
        Ok(problems
            .iter()
            .map(|p| {
                let family = families
                    .get(&(p.op(), p.dtype()))
                    .map(Vec::as_slice)
                    .unwrap_or(&[]);
                resolve(p, family)
            })
            .collect())
    }
}
