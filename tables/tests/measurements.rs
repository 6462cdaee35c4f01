//! Measurements are idempotent on their complete key (resume never
//! duplicates), rows need their SoC and campaign, and an invalid candidate can
//! never become a selection.

mod common;
use common::*;
use serde_json::json;
use tiletune_tables::{Campaign, SelectorDb, TableError, now_unix};

#[test]
fn inserts_are_idempotent_and_measured_finds_them() {
    let dir = tmp();
    let mut db = SelectorDb::open(db_path(dir.path())).unwrap();
    let c = setup(&mut db, "socA");
    let p = gemv(4864, 896);
    let m = meas(&c, "socA", &p, &cand("avx512", 8, 2), 1234.0);
    assert!(
        db.measured("socA", ABI, &p, &m.candidate)
            .unwrap()
            .is_none()
    );
    assert!(db.insert_measurement(&m).unwrap());
    // A resumed run (even under a new campaign id) adds nothing.
    let c2 = setup(&mut db, "socA");
    let again = meas(&c2, "socA", &p, &cand("avx512", 8, 2), 999.0);
    assert!(!db.insert_measurement(&again).unwrap());
    assert_eq!(db.count_measurements(Some("socA")).unwrap(), 1);
    let got = db.measured("socA", ABI, &p, &m.candidate).unwrap().unwrap();
    assert_eq!(got, m);
    // The same candidate with other params, threads or ABI is a different key.
    assert!(
        db.measured("socA", ABI, &p, &cand("avx512", 8, 1))
            .unwrap()
            .is_none()
    );
    assert!(
        db.measured("socA", ABI, &p, &cand("avx512", 16, 2))
            .unwrap()
            .is_none()
    );
    assert!(
        db.measured("socA", ABI + 1, &p, &m.candidate)
            .unwrap()
            .is_none()
    );
    assert!(
        db.measured("socB", ABI, &p, &m.candidate)
            .unwrap()
            .is_none()
    );
    // A deliberate re-measure replaces.
    db.replace_measurement(&again).unwrap();
    let got = db.measured("socA", ABI, &p, &m.candidate).unwrap().unwrap();
    assert_eq!(got.median_ns, Some(999.0));
    assert_eq!(db.count_measurements(None).unwrap(), 1);
    assert_eq!(db.campaign_measurements(&c2).unwrap().len(), 1);
}

#[test]
fn rows_need_their_soc_and_campaign() {
    let dir = tmp();
    let mut db = SelectorDb::open(db_path(dir.path())).unwrap();
    let err = db
        .start_campaign(&Campaign::new("nosoc", "0.1.0", ABI, "random"))
        .unwrap_err();
    assert!(
        matches!(err, TableError::Unknown { what: "soc", .. }),
        "{err}"
    );
    let c = setup(&mut db, "socA");
    let m = meas("c-missing", "socA", &gemv(8, 8), &cand("scalar", 1, 1), 5.0);
    let err = db.insert_measurement(&m).unwrap_err();
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
    // A failing row rolls back the whole batch.
    let good = meas(&c, "socA", &gemv(8, 8), &cand("scalar", 1, 1), 5.0);
    assert!(db.insert_measurements(&[good, m]).is_err());
    assert_eq!(db.count_measurements(None).unwrap(), 0);
    // A valid measurement without a median is refused.
    let mut untimed = meas(&c, "socA", &gemv(8, 8), &cand("scalar", 1, 1), 5.0);
    untimed.median_ns = None;
    assert!(matches!(
        db.insert_measurement(&untimed),
        Err(TableError::InvalidKey { .. })
    ));
}

#[test]
fn an_invalid_candidate_can_never_be_selected() {
    let dir = tmp();
    let mut db = SelectorDb::open(db_path(dir.path())).unwrap();
    let c = setup(&mut db, "socA");
    let p = gemv(512, 512);
    let wrong = cand("avx512", 64, 1);
    let mut m = meas(&c, "socA", &p, &wrong, 1.0);
    m.valid = false;
    m.median_ns = None;
    m.invalid_reason = Some("max abs error 3.2 > 1e-3".into());
    assert!(db.insert_measurement(&m).unwrap());
    let err = db
        .put_selection(&sel("socA", Some(&c), &p, &wrong, 1.0))
        .unwrap_err();
    assert!(err.to_string().contains("failed validation"), "{err}");
    assert!(db.selections(None).unwrap().is_empty());
    // A selection using more threads than its budget is refused too.
    let err = db
        .put_selection(&sel("socA", None, &p, &cand("avx512", 8, 4), 2.0))
        .unwrap_err();
    assert!(err.to_string().contains("thread budget"), "{err}");
}

#[test]
fn unfinished_campaign_is_what_a_restart_continues() {
    let dir = tmp();
    let mut db = SelectorDb::open(db_path(dir.path())).unwrap();
    let first = setup(&mut db, "socA");
    assert_eq!(
        db.unfinished_campaign("socA", ABI, "exhaustive")
            .unwrap()
            .unwrap()
            .id,
        first
    );
    assert!(
        db.unfinished_campaign("socA", ABI, "random")
            .unwrap()
            .is_none()
    );
    assert!(
        db.unfinished_campaign("socA", ABI + 1, "exhaustive")
            .unwrap()
            .is_none()
    );
    db.finish_campaign(&first, now_unix(), &json!(["freq_drift"]))
        .unwrap();
    assert!(
        db.unfinished_campaign("socA", ABI, "exhaustive")
            .unwrap()
            .is_none()
    );
    let c = db.campaign(&first).unwrap().unwrap();
    assert!(c.finished_at.is_some());
    assert_eq!(c.drift_flags, json!(["freq_drift"]));
    assert_eq!(c.budget_s, Some(300.0));
    // Ids are unique even when made back to back.
    assert_ne!(Campaign::new_id(), Campaign::new_id());
    let dup = db.campaign(&first).unwrap().unwrap();
    assert!(db.start_campaign(&dup).is_err());
}
