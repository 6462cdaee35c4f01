//! Complete keys: selections never leak across SoCs, kernel ABIs, thread
//! budgets or shapes, except through the reported nearest-shape fallback.

mod common;
use common::*;
use tiletune_tables::{Lookup, OpenOptions, Problem, SelectorDb};

fn tuned_db(dir: &std::path::Path) -> SelectorDb {
    let mut db = SelectorDb::open(db_path(dir)).unwrap();
    let ca = setup(&mut db, "socA");
    let cb = setup(&mut db, "socB");
    db.put_selection(&sel(
        "socA",
        Some(&ca),
        &gemv(4864, 896),
        &cand("avx512", 8, 2),
        1000.0,
    ))
    .unwrap();
    db.put_selection(&sel(
        "socA",
        Some(&ca),
        &gemv(896, 896),
        &cand("avx2", 4, 1),
        300.0,
    ))
    .unwrap();
    // socB has a different winner for a shape socA never tuned.
    db.put_selection(&sel(
        "socB",
        Some(&cb),
        &gemv(4800, 900),
        &cand("neon", 16, 2),
        5.0,
    ))
    .unwrap();
    db
}

#[test]
fn exact_match_for_the_complete_key_only() {
    let dir = tmp();
    let db = tuned_db(dir.path());
    let p = gemv(4864, 896);
    match db.lookup("socA", ABI, 2, &p).unwrap() {
        Lookup::Exact(s) => {
            assert_eq!(s.winner, cand("avx512", 8, 2));
            assert_eq!(s.soc, "socA");
            assert_eq!(s.speedup, Some(1.5));
        }
        other => panic!("expected exact, got {other:?}"),
    }
    // Another kernel ABI, another thread budget, another SoC: nothing.
    assert_eq!(db.lookup("socA", ABI + 1, 2, &p).unwrap(), Lookup::Missing);
    assert_eq!(db.lookup("socA", ABI, 4, &p).unwrap(), Lookup::Missing);
    assert_eq!(db.lookup("socC", ABI, 2, &p).unwrap(), Lookup::Missing);
    // Another dtype or op is never a neighbour.
    let q8 = Problem::new("gemv", "q8_0", [("n", 4864), ("k", 896)]).unwrap();
    assert_eq!(db.lookup("socA", ABI, 2, &q8).unwrap(), Lookup::Missing);
    let gemm = Problem::new("gemm", "q4_0", [("n", 4864), ("k", 896)]).unwrap();
    assert_eq!(db.lookup("socA", ABI, 2, &gemm).unwrap(), Lookup::Missing);
    // Same op/dtype but other dim names: not comparable.
    let other_dims = Problem::new("gemv", "q4_0", [("m", 4864), ("k", 896)]).unwrap();
    assert_eq!(
        db.lookup("socA", ABI, 2, &other_dims).unwrap(),
        Lookup::Missing
    );
}

#[test]
fn foreign_soc_rows_are_never_returned() {
    let dir = tmp();
    let db = tuned_db(dir.path());
    // socB tuned exactly 4800x900; socA must not see it, only its own nearest.
    let p = gemv(4800, 900);
    let got = db.lookup("socA", ABI, 2, &p).unwrap();
    let s = got.selection().expect("socA has neighbours");
    assert_eq!(s.soc, "socA");
    assert_eq!(got.source(), "nearest");
    // And socB never sees socA's shapes, even as neighbours of its own.
    for probe in [gemv(4864, 896), gemv(896, 896), gemv(1, 1)] {
        let got = db.lookup("socB", ABI, 2, &probe).unwrap();
        assert_eq!(got.selection().unwrap().soc, "socB", "{probe}");
    }
    for l in db
        .lookup_many("socB", ABI, 2, &[gemv(4864, 896), gemv(896, 896)])
        .unwrap()
    {
        assert_eq!(l.selection().unwrap().winner, cand("neon", 16, 2));
    }
}

#[test]
fn nearest_shape_picks_the_log_space_neighbour() {
    let dir = tmp();
    let db = tuned_db(dir.path());
    let ask = gemv(4800, 900);
    match db.lookup("socA", ABI, 2, &ask).unwrap() {
        Lookup::Nearest {
            sel,
            from,
            distance,
        } => {
            assert_eq!(from, gemv(4864, 896));
            assert_eq!(sel.problem, from);
            let want = (4800f64.ln() - 4864f64.ln()).powi(2) + (900f64.ln() - 896f64.ln()).powi(2);
            assert!((distance - want).abs() < 1e-12, "{distance} vs {want}");
        }
        other => panic!("expected nearest, got {other:?}"),
    }
    // Closer to 896x896 in log space even though it is 1000 away from 4864 in n.
    match db.lookup("socA", ABI, 2, &gemv(1200, 896)).unwrap() {
        Lookup::Nearest { from, .. } => assert_eq!(from, gemv(896, 896)),
        other => panic!("expected nearest, got {other:?}"),
    }
    // Dims are matched by name, not position.
    let swapped = Problem::new("gemv", "q4_0", [("k", 896), ("n", 4700)]).unwrap();
    match db.lookup("socA", ABI, 2, &swapped).unwrap() {
        Lookup::Nearest { from, .. } => assert_eq!(from, gemv(4864, 896)),
        other => panic!("expected nearest, got {other:?}"),
    }
}

#[test]
fn lookup_many_answers_in_order_from_a_read_only_table() {
    let dir = tmp();
    drop(tuned_db(dir.path()));
    let db = SelectorDb::open_with(db_path(dir.path()), OpenOptions::read_only()).unwrap();
    let silu = Problem::new("silu", "f32", [("n", 896)]).unwrap();
    let asks = [gemv(896, 896), silu, gemv(4800, 900), gemv(4864, 896)];
    let got = db.lookup_many("socA", ABI, 2, &asks).unwrap();
    let sources: Vec<_> = got.iter().map(Lookup::source).collect();
    assert_eq!(sources, ["exact", "missing", "nearest", "exact"]);
    assert_eq!(got[0].selection().unwrap().problem, gemv(896, 896));
    assert_eq!(got[3].selection().unwrap().problem, gemv(4864, 896));
    assert!(db.lookup_many("socA", ABI, 2, &[]).unwrap().is_empty());
}
