//! Model-level verdicts: stored per (soc, kernel ABI, model, phase, threads),
//! replaced on the same key, read back on a read-only open, and refused with
//! a message that says what to fix when the tuner's numbers cannot be trusted.

mod common;
use common::*;
use tiletune_tables::{OpenOptions, Phase, SelectorDb, TableError, Verdict};

#[test]
fn verdicts_are_stored_replaced_and_read_back_read_only() {
    let dir = tmp();
    let path = db_path(dir.path());
    let mut db = SelectorDb::open(&path).unwrap();
    let campaign = setup(&mut db, "socA");
    let decode = verdict("socA", "b.gguf", Phase::Decode, 2);
    let prefill = verdict("socA", "b.gguf", Phase::Prefill, 2);
    let mut other = verdict("socA", "a.gguf", Phase::Decode, 4);
    other.campaign = Some(campaign);
    for v in [&decode, &prefill, &other] {
        db.put_verdict(v).unwrap();
    }
    // The same key again replaces the row.
    let mut lost = decode.clone();
    lost.tuned_s = vec![1.3, 1.4, 1.2];
    lost.ratio = 1.1 / 1.3;
    lost.won = false;
    lost.plan_digest = "p-2".into();
    db.put_verdict(&lost).unwrap();
    drop(db);

    let ro = SelectorDb::open_with(&path, OpenOptions::read_only()).unwrap();
    // By model name, then prefill before decode, then threads.
    assert_eq!(
        ro.verdicts(Some("socA")).unwrap(),
        [other.clone(), prefill.clone(), lost.clone()]
    );
    assert_eq!(ro.verdicts(None).unwrap().len(), 3);
    assert!(ro.verdicts(Some("socB")).unwrap().is_empty());
    let got = ro
        .verdict("socA", ABI, "m-b.gguf", Phase::Decode, 2)
        .unwrap()
        .unwrap();
    assert_eq!(got, lost);
    assert_eq!(got.default_median_s(), 1.1);
    assert_eq!(got.tuned_median_s(), 1.3);
    // Removing one key leaves the others.
    let mut rw = SelectorDb::open(&path).unwrap();
    assert!(
        !rw.delete_verdict("socA", ABI, "m-b.gguf", Phase::Decode, 4)
            .unwrap()
    );
    assert!(
        rw.delete_verdict("socA", ABI, "m-b.gguf", Phase::Decode, 2)
            .unwrap()
    );
    assert_eq!(rw.verdicts(None).unwrap(), [other.clone(), prefill.clone()]);
    rw.put_verdict(&lost).unwrap();
    drop(rw);
    // Every key column matters.
    for (abi, model, phase, threads) in [
        (ABI + 1, "m-b.gguf", Phase::Decode, 2),
        (ABI, "m-a.gguf", Phase::Decode, 2),
        (ABI, "m-b.gguf", Phase::Decode, 1),
    ] {
        assert_eq!(
            ro.verdict("socA", abi, model, phase, threads).unwrap(),
            None
        );
    }
}

#[test]
fn untrustworthy_verdicts_are_refused_with_what_to_fix() {
    let dir = tmp();
    let mut db = SelectorDb::open(db_path(dir.path())).unwrap();
    setup(&mut db, "socA");
    let good = verdict("socA", "m.gguf", Phase::Decode, 2);
    // Each case spoils one field of a good verdict.
    type Spoil = fn(&mut Verdict);
    let cases: [(Spoil, &str); 9] = [
        (|v| v.tuned_s.truncate(2), "time both plans in every round"),
        (
            |v| {
                v.default_s.clear();
                v.tuned_s.clear()
            },
            "at least one round",
        ),
        (|v| v.tuned_s[1] = f64::NAN, "tuned_s[1] is NaN"),
        (|v| v.default_s[0] = 0.0, "default_s[0] is 0"),
        (|v| v.default_s[2] = f64::INFINITY, "positive finite"),
        (|v| v.threads = 0, "threads is 0"),
        (|v| v.model.clear(), "model is empty"),
        (|v| v.plan_digest.clear(), "plan_digest is empty"),
        (|v| v.ratio = -1.0, "ratio is -1"),
    ];
    for (spoil, needle) in cases {
        let mut v = good.clone();
        spoil(&mut v);
        let err = db.put_verdict(&v).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, TableError::InvalidKey { .. }), "{text}");
        assert!(text.contains(needle), "{needle:?} not in {text}");
        assert!(text.contains("m.gguf decode threads="), "{text}");
    }
    assert!(db.verdicts(None).unwrap().is_empty());
    // An unregistered SoC or campaign is named too.
    let err = db
        .put_verdict(&verdict("socZ", "m.gguf", Phase::Decode, 2))
        .unwrap_err();
    assert!(
        matches!(err, TableError::Unknown { what: "soc", .. }),
        "{err}"
    );
    let mut v = good.clone();
    v.campaign = Some("c-nope".into());
    let err = db.put_verdict(&v).unwrap_err();
    assert!(
        matches!(
            err,
            TableError::Unknown {
                what: "campaign",
                ..
            }
        ),
        "{err}"
    );
    db.put_verdict(&good).unwrap();
}
