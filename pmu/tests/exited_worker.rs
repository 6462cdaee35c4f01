//! A thread that has exited is left out of a counter set with a note.
//!
//! This test has a binary of its own: the exited thread's tid is only
//! certainly dead while no other thread of the process can be handed it, and
//! the tests in `pmu.rs` spawn workers in parallel (under qemu a reused tid
//! was counted as a live thread).

use std::hint::black_box;
use tiletune_pmu::{CounterOptions, CounterSet, EventSetKind};

fn busy(n: u64) -> u64 {
    let mut x = 0u64;
    for i in 0..n {
        x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
    }
    x
}

/// The exited thread is left out with a note instead of failing the
/// whole set; the caller is still counted.
#[test]
fn an_exited_worker_is_noted_not_fatal() {
    let tid = std::thread::spawn(tiletune_pmu::counters::current_tid)
        .join()
        .unwrap();
    let (mut set, _note) =
        CounterSet::with_options(&CounterOptions::new(EventSetKind::Software).threads(vec![tid]));
    let ((), c) = set
        .measure(|| {
            black_box(busy(black_box(10_000)));
        })
        .unwrap();
    assert_eq!(c.threads, 1);
    assert!(c.get("task-clock").unwrap() > 0.0);
    assert!(
        c.notes
            .iter()
            .any(|n| n.contains(&tid.to_string()) && n.contains("not counted")),
        "{:?}",
        c.notes
    );
}
