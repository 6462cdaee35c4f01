//! Group planning: split an event set into `perf_event_open` groups that fit
//! the number of hardware counters, so that the kernel never has to time-slice
//! the events *inside* one group.
//!
//! Every group carries the cycle counter as its reference, so per-group ratios
//! (IPC, stall shares, top-down fractions) are taken over one window even when
//! the groups themselves are multiplexed against each other. Events that are
//! ratios of each other (same [`EventDef::affinity`]) are packed together.
//! Packing is first-fit decreasing on affinity blocks; a block larger than a
//! group is split and the plan says so.
//!
//! On ARMv8 the cycle counter is the dedicated PMCCNTR_EL0 and does not take
//! one of the programmable counters (`cycles_free`); on x86 the generic
//! budget counts it (AMD has no fixed cycle counter).

use crate::events::{EventDef, EventSetKind};
use serde::Serialize;

/// Default programmable counters: 6 on Cortex-A/Neoverse cores (PMCR_EL0.N
/// is 6 on A53/A55/A76/A78/N1), 4 on x86 (Intel general-purpose counters
/// per hyper-thread; Zen has 6, so 4 is safe everywhere).
pub fn default_counters(kind: EventSetKind) -> usize {
    match kind.resolve() {
        EventSetKind::Armv8 => 6,
        _ => 4,
    }
}

/// How many events one group may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PlanConfig {
    /// Programmable counters available to one group.
    pub counters: usize,
    /// Whether the cycle reference uses its own fixed counter.
    pub cycles_free: bool,
}

impl PlanConfig {
    /// The defaults for an event set kind.
    pub fn for_kind(kind: EventSetKind) -> PlanConfig {
        PlanConfig {
            counters: default_counters(kind),
            cycles_free: kind.resolve() == EventSetKind::Armv8,
        }
    }
}

/// The planned groups; `groups[i][0]` is the cycle reference when there is one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupPlan {
    pub groups: Vec<Vec<EventDef>>,
    /// Affinity blocks that had to be split across groups.
    pub split_blocks: Vec<&'static str>,
}

impl GroupPlan {
    /// Number of hardware counters the fullest group uses.
    pub fn max_group_len(&self) -> usize {
        self.groups.iter().map(Vec::len).max().unwrap_or(0)
    }
}

/// Plans groups for `events`. `reference` (the cycle counter) is put at the
/// front of every group; software events go into one group of their own since
/// they use no hardware counter. A `counters` of 0 is treated as 1.
pub fn plan_groups(events: &[EventDef], reference: Option<EventDef>, cfg: PlanConfig) -> GroupPlan {
    let counters = cfg.counters.max(1);
    let reference = reference.filter(|r| events.contains(r));
    let ref_cost = usize::from(reference.is_some() && !cfg.cycles_free);
    // Room for non-reference events in one group; at least one event.
    let room = counters.saturating_sub(ref_cost).max(1);

    let mut software = Vec::new();
    // Affinity blocks in first-appearance order.
    let mut blocks: Vec<(&'static str, Vec<EventDef>)> = Vec::new();
    for e in events {
        if Some(*e) == reference {
            continue;
        }
        if !e.code.is_hardware() {
            software.push(*e);
            continue;
        }
        match blocks.iter_mut().find(|(a, _)| *a == e.affinity) {
            Some((_, v)) => v.push(*e),
            None => blocks.push((e.affinity, vec![*e])),
        }
    }

    let mut split_blocks = Vec::new();
    let mut pieces: Vec<Vec<EventDef>> = Vec::new();
    for (affinity, block) in blocks {
        if block.len() > room {
            split_blocks.push(affinity);
            pieces.extend(block.chunks(room).map(<[EventDef]>::to_vec));
        } else {
            pieces.push(block);
        }
    }
    // First-fit decreasing; the sort is stable so equal sizes keep table order.
    pieces.sort_by_key(|p| std::cmp::Reverse(p.len()));
    let mut bins: Vec<Vec<EventDef>> = Vec::new();
    for piece in pieces {
        match bins.iter_mut().find(|b| b.len() + piece.len() <= room) {
            Some(b) => b.extend(piece),
            None => bins.push(piece),
        }
    }
    if bins.is_empty() && reference.is_some() {
        bins.push(Vec::new());
    }
    let mut groups: Vec<Vec<EventDef>> = bins
        .into_iter()
        .map(|b| reference.into_iter().chain(b).collect())
        .collect();
    if !software.is_empty() {
        groups.push(software);
    }
    GroupPlan {
        groups,
        split_blocks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::*;

    fn hw_len(g: &[EventDef], cycles_free: bool) -> usize {
        g.iter()
            .filter(|e| e.code.is_hardware())
            .filter(|e| !(cycles_free && e.affinity == "cycles"))
            .count()
    }

    #[test]
    fn armv8_fits_six_counters_and_keeps_pairs_together() {
        let cfg = PlanConfig::for_kind(EventSetKind::Armv8);
        let plan = plan_groups(ARMV8_EVENTS, Some(ARM_CPU_CYCLES), cfg);
        for g in &plan.groups {
            assert_eq!(g[0], ARM_CPU_CYCLES);
            assert!(hw_len(g, true) <= 6, "{g:?}");
        }
        // Each of the 15 non-cycle events appears exactly once.
        let total: usize = plan.groups.iter().map(|g| g.len() - 1).sum();
        assert_eq!(total, ARMV8_EVENTS.len() - 1);
        assert!(plan.split_blocks.is_empty());
        for pair in [
            ("L1D_CACHE", "L1D_CACHE_REFILL"),
            ("L2D_CACHE", "L2D_CACHE_REFILL"),
            ("ASE_SPEC", "INST_SPEC"),
            ("OP_SPEC", "STALL_SLOT_BACKEND"),
        ] {
            let g = plan
                .groups
                .iter()
                .find(|g| g.iter().any(|e| e.name == pair.0))
                .unwrap();
            assert!(g.iter().any(|e| e.name == pair.1), "{pair:?} split");
        }
        // 15 events in bins of 6: 5 (topdown) + others packs into 3 groups.
        assert_eq!(plan.groups.len(), 3);
    }

    #[test]
    fn x86_budget_counts_the_cycle_reference() {
        let cfg = PlanConfig::for_kind(EventSetKind::X86);
        let plan = plan_groups(X86_EVENTS, Some(X86_CYCLES), cfg);
        for g in &plan.groups {
            assert!(hw_len(g, false) <= 4, "{g:?}");
            assert_eq!(g[0], X86_CYCLES);
        }
        // 7 non-cycle events, 3 per group -> 3 groups.
        assert_eq!(plan.groups.len(), 3);
    }

    #[test]
    fn small_budget_splits_blocks_and_says_so() {
        let cfg = PlanConfig {
            counters: 2,
            cycles_free: true,
        };
        let plan = plan_groups(ARMV8_EVENTS, Some(ARM_CPU_CYCLES), cfg);
        assert_eq!(plan.split_blocks, vec!["topdown"]);
        assert!(plan.groups.iter().all(|g| g.len() <= 3));
        assert_eq!(plan.max_group_len(), 3);
        // A zero budget still makes progress (one event per group).
        let plan = plan_groups(
            X86_EVENTS,
            Some(X86_CYCLES),
            PlanConfig {
                counters: 0,
                cycles_free: false,
            },
        );
        assert_eq!(plan.groups.len(), X86_EVENTS.len() - 1);
    }

    #[test]
    fn software_events_form_their_own_group() {
        let mut evs = X86_EVENTS[..2].to_vec();
        evs.extend_from_slice(SOFTWARE_EVENTS);
        let plan = plan_groups(
            &evs,
            Some(X86_CYCLES),
            PlanConfig::for_kind(EventSetKind::X86),
        );
        assert_eq!(plan.groups.len(), 2);
        assert_eq!(plan.groups[1], SOFTWARE_EVENTS);
        let plan = plan_groups(
            SOFTWARE_EVENTS,
            None,
            PlanConfig::for_kind(EventSetKind::X86),
        );
        assert_eq!(plan.groups, vec![SOFTWARE_EVENTS.to_vec()]);
    }
}
