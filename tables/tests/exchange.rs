//! JSON export → import round trips, imports are idempotent, and merging
//! tables from several devices keeps SoCs apart, the faster selection and the
//! newer verdict.

mod common;
use common::*;
use serde_json::json;
use tiletune_tables::{
    Candidate, Ceiling, Lookup, PeerResult, Phase, Placement, SelectorDb, TableError, parse_export,
    read_any, read_export, write_export,
};

fn device_db(path: &std::path::Path, fp: &str, ns: f64) -> SelectorDb {
    let mut db = SelectorDb::open(path).unwrap();
    let c = setup(&mut db, fp);
    for (i, p) in [gemv(4864, 896), gemv(896, 896)].iter().enumerate() {
        for (j, v) in ["avx2", "avx512"].iter().enumerate() {
            let m = meas(&c, fp, p, &cand(v, 8, 2), ns + (i * 10 + j) as f64);
            db.insert_measurement(&m).unwrap();
        }
        db.put_selection(&sel(
            fp,
            Some(&c),
            p,
            &cand("avx2", 8, 2),
            ns + (i * 10) as f64,
        ))
        .unwrap();
    }
    db.put_ceiling(&Ceiling {
        soc: fp.into(),
        kind: "fma_peak_avx512".into(),
        threads: 2,
        value: 400.0,
        unit: "GFLOP/s".into(),
        campaign: Some(c.clone()),
        measured_at: 1_700_000_300,
    })
    .unwrap();
    db.put_peer_result(&PeerResult {
        soc: fp.into(),
        model: "qwen2.5-0.5b-q4_0".into(),
        engine: "llama.cpp".into(),
        engine_version: "b5000".into(),
        test: "tg128".into(),
        threads: 2,
        tokens_per_s: 40.0,
        std: Some(0.5),
        json: json!({"avg_ts": 40.0}),
        measured_at: 1_700_000_400,
    })
    .unwrap();
    for phase in Phase::ALL {
        let mut v = verdict(fp, "qwen2.5-0.5b-q4_0.gguf", phase, 2);
        v.campaign = Some(c.clone());
        db.put_verdict(&v).unwrap();
    }
    db
}

#[test]
fn export_import_round_trip_is_idempotent() {
    let dir = tmp();
    let src = device_db(&dir.path().join("a.db"), "socA", 1000.0);
    let export = src.export_soc("socA").unwrap();
    assert_eq!(export.measurements.len(), 4);
    assert_eq!(export.selections.len(), 2);
    let file = dir.path().join("socA.json");
    write_export(&file, &export).unwrap();
    let read = read_export(&file).unwrap();
    assert_eq!(read, export);

    let mut dst = SelectorDb::open(dir.path().join("b.db")).unwrap();
    let st = dst.import(&read).unwrap();
    assert_eq!(
        (
            st.socs_added,
            st.campaigns_added,
            st.measurements_added,
            st.selections_added
        ),
        (1, 1, 4, 2)
    );
    assert_eq!((st.ceilings_added, st.peer_results_added), (1, 1));
    assert_eq!(export.verdicts.len(), 2);
    assert_eq!(st.verdicts_added, 2);
    assert_eq!(dst.export_soc("socA").unwrap(), export);
    assert_eq!(dst.verdicts(Some("socA")).unwrap(), export.verdicts);
    // Importing again changes nothing.
    let again = dst.import(&read).unwrap();
    assert_eq!(again.changed(), 0, "{again:?}");
    assert_eq!((again.selections_kept, again.verdicts_kept), (2, 2));
    assert_eq!(dst.export_soc("socA").unwrap(), export);
    // A table file reads as the same exports.
    drop(src);
    assert_eq!(
        read_any(&dir.path().join("a.db")).unwrap(),
        vec![export.clone()]
    );
    assert_eq!(read_any(&file).unwrap(), vec![export]);
}

#[test]
fn merge_keeps_socs_apart() {
    let dir = tmp();
    let a = device_db(&dir.path().join("a.db"), "socA", 1000.0);
    let b = device_db(&dir.path().join("b.db"), "socB", 50.0);
    let mut merged = SelectorDb::open(dir.path().join("m.db")).unwrap();
    merged.merge_from(&a).unwrap();
    merged.merge_from(&b).unwrap();
    assert_eq!(merged.socs().unwrap().len(), 2);
    assert_eq!(
        merged.export_soc("socA").unwrap(),
        a.export_soc("socA").unwrap()
    );
    assert_eq!(
        merged.export_soc("socB").unwrap(),
        b.export_soc("socB").unwrap()
    );
    // socB's much faster rows never answer for socA.
    match merged.lookup("socA", ABI, 2, &gemv(4864, 896)).unwrap() {
        Lookup::Exact(s) => assert_eq!((s.soc.as_str(), s.median_ns), ("socA", 1000.0)),
        other => panic!("{other:?}"),
    }
    assert_eq!(merged.count_measurements(Some("socA")).unwrap(), 4);
    assert_eq!(merged.count_measurements(Some("socB")).unwrap(), 4);
    // Merging the same sources again adds nothing.
    assert_eq!(merged.merge_from(&a).unwrap().changed(), 0);
}

#[test]
fn merge_conflict_keeps_the_faster_selection() {
    let dir = tmp();
    let slow = device_db(&dir.path().join("slow.db"), "socA", 1000.0);
    let fast = device_db(&dir.path().join("fast.db"), "socA", 800.0);
    let mut m = SelectorDb::open(dir.path().join("m.db")).unwrap();
    m.merge_from(&slow).unwrap();
    let st = m.merge_from(&fast).unwrap();
    assert_eq!((st.selections_replaced, st.selections_kept), (2, 0));
    // Merging the slow one again keeps the fast winners.
    let st = m.merge_from(&slow).unwrap();
    assert_eq!((st.selections_replaced, st.selections_kept), (0, 2));
    let medians: Vec<f64> = m
        .selections(Some("socA"))
        .unwrap()
        .iter()
        .map(|s| s.median_ns)
        .collect();
    assert_eq!(medians, [800.0, 810.0]); // ordered by problem key
    // Both campaigns are kept; measurements keep the first one seen per key.
    assert_eq!(m.campaigns(Some("socA")).unwrap().len(), 2);
    assert_eq!(m.count_measurements(None).unwrap(), 4);
}

#[test]
fn exports_that_mix_socs_or_formats_are_refused() {
    let dir = tmp();
    let a = device_db(&dir.path().join("a.db"), "socA", 1000.0);
    let mut bad = a.export_soc("socA").unwrap();
    bad.selections[0].soc = "socB".into();
    let mut dst = SelectorDb::open(dir.path().join("b.db")).unwrap();
    let err = dst.import(&bad).unwrap_err();
    assert!(err.to_string().contains("exactly one soc"), "{err}");
    assert!(
        dst.socs().unwrap().is_empty(),
        "a refused import wrote rows"
    );

    let mut newer = a.export_soc("socA").unwrap();
    newer.version = 99;
    assert!(matches!(
        dst.import(&newer),
        Err(TableError::BadExport { .. })
    ));

    let file = dir.path().join("x.json");
    std::fs::write(&file, br#"{"format":"something-else"}"#).unwrap();
    let err = read_export(&file).unwrap_err();
    assert!(
        err.to_string().contains(&file.display().to_string()),
        "{err}"
    );
    assert!(matches!(
        a.export_soc("nope"),
        Err(TableError::Unknown { .. })
    ));
}

/// An export held in memory (what `table import` reads, and the fuzz target
/// feeds) parses as the file does, and its errors name the origin given.
#[test]
fn an_export_parses_from_bytes_as_from_its_file() {
    let dir = tmp();
    let export = device_db(&dir.path().join("a.db"), "socA", 1000.0)
        .export_soc("socA")
        .unwrap();
    let bytes = serde_json::to_vec(&export).unwrap();
    let origin = std::path::Path::new("<upload>");
    assert_eq!(parse_export(&bytes, origin).unwrap(), export);
    for bad in [&b"{\"format\":1}"[..], b"\xff\xfe", b""] {
        let err = parse_export(bad, origin).unwrap_err().to_string();
        assert!(err.contains("<upload>"), "{err}");
    }
    let mut foreign = export;
    foreign.selections[0].soc = "socB".into();
    let err = parse_export(&serde_json::to_vec(&foreign).unwrap(), origin).unwrap_err();
    assert!(err.to_string().contains("exactly one soc"), "{err}");
}

/// A pinned winner's placement survives the table, an export file and an
/// import; a version 1 export (written before placements) still imports,
/// its candidates unpinned.
#[test]
fn placements_round_trip_and_version_1_exports_still_import() {
    let dir = tmp();
    let mut src = SelectorDb::open(dir.path().join("a.db")).unwrap();
    let c = setup(&mut src, "socA");
    let p = gemv(896, 896);
    let pinned = |cluster: usize, cpus: Vec<usize>| {
        Candidate::placed(
            "neon",
            json!({"nr": 4}),
            Placement::pinned(2, vec![cluster], cpus).unwrap(),
        )
        .unwrap()
    };
    let big = pinned(1, vec![4, 5]);
    let little = pinned(0, vec![0, 1, 2, 3]);
    let plain = Candidate::new("neon", json!({"nr": 4}), 2).unwrap();
    for (cand, ns) in [(&big, 900.0), (&little, 2000.0), (&plain, 1200.0)] {
        assert!(
            src.insert_measurement(&meas(&c, "socA", &p, cand, ns))
                .unwrap()
        );
    }
    src.put_selection(&sel("socA", Some(&c), &p, &big, 900.0))
        .unwrap();
    assert_eq!(src.count_measurements(None).unwrap(), 3);
    let stored = src.selections(Some("socA")).unwrap();
    assert_eq!(stored[0].winner, big);
    assert_eq!(
        src.lookup("socA", ABI, 2, &p).unwrap(),
        Lookup::Exact(stored[0].clone())
    );

    let export = src.export_soc("socA").unwrap();
    assert_eq!(export.version, tiletune_tables::EXPORT_VERSION);
    let file = dir.path().join("socA.json");
    write_export(&file, &export).unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains(r#""name": "t2@cluster1""#), "{text}");
    let mut dst = SelectorDb::open(dir.path().join("b.db")).unwrap();
    dst.import(&read_export(&file).unwrap()).unwrap();
    let got = dst.selections(Some("socA")).unwrap();
    assert_eq!(got[0].winner, big);
    assert_eq!(got[0].winner.placement().cpus(), [4, 5]);
    assert_eq!(dst.export_soc("socA").unwrap(), export);

    // The same table as a version 1 exporter wrote it: no placement fields.
    let mut v1: serde_json::Value = serde_json::from_str(&text).unwrap();
    v1["version"] = json!(1);
    let strip = |v: &mut serde_json::Value| {
        if let Some(o) = v.as_object_mut() {
            o.remove("placement");
        }
    };
    let mut only_unpinned = v1.clone();
    let ms = only_unpinned["measurements"].as_array_mut().unwrap();
    ms.retain(|m| m["candidate"].get("placement").is_none());
    only_unpinned["selections"] = json!([]);
    for m in v1["measurements"].as_array_mut().unwrap() {
        strip(&mut m["candidate"]);
    }
    for s in v1["selections"].as_array_mut().unwrap() {
        strip(&mut s["winner"]);
    }
    let old = dir.path().join("v1.json");
    std::fs::write(&old, serde_json::to_vec(&only_unpinned).unwrap()).unwrap();
    let mut third = SelectorDb::open(dir.path().join("c.db")).unwrap();
    let st = third.import(&read_export(&old).unwrap()).unwrap();
    assert_eq!(st.measurements_added, 1);
    let m = third.measured("socA", ABI, &p, &plain).unwrap().unwrap();
    assert!(!m.candidate.placement().is_pinned());
    // Stripped of their placements, the pinned rows read as unpinned `t2`.
    let stripped = dir.path().join("v1-stripped.json");
    std::fs::write(&stripped, serde_json::to_vec(&v1).unwrap()).unwrap();
    let e = read_export(&stripped).unwrap();
    assert!(
        e.measurements
            .iter()
            .all(|m| m.candidate.placement().name() == "t2")
    );
}

/// For one verdict key the newer measurement wins a merge, whichever side
/// it comes from; a tie keeps the existing row.
#[test]
fn merge_keeps_the_newer_verdict() {
    let dir = tmp();
    let old = device_db(&dir.path().join("old.db"), "socA", 1000.0);
    let mut new = device_db(&dir.path().join("new.db"), "socA", 1000.0);
    let mut lost = verdict("socA", "qwen2.5-0.5b-q4_0.gguf", Phase::Decode, 2);
    lost.tuned_s = vec![1.2, 1.2, 1.3];
    lost.ratio = 1.1 / 1.2;
    lost.won = false;
    lost.plan_digest = "p-2".into();
    lost.measured_at += 100;
    new.put_verdict(&lost).unwrap();

    let mut m = SelectorDb::open(dir.path().join("m.db")).unwrap();
    let st = m.merge_from(&old).unwrap();
    assert_eq!(st.verdicts_added, 2);
    let st = m.merge_from(&new).unwrap();
    assert_eq!((st.verdicts_replaced, st.verdicts_kept), (1, 1), "{st:?}");
    // The older table merged again changes nothing.
    let st = m.merge_from(&old).unwrap();
    assert_eq!((st.verdicts_replaced, st.verdicts_kept), (0, 2), "{st:?}");
    assert_eq!(st.changed(), 0, "{st:?}");
    let got = m
        .verdict("socA", ABI, "m-qwen2.5-0.5b-q4_0.gguf", Phase::Decode, 2)
        .unwrap()
        .unwrap();
    assert_eq!(got, lost);
    assert_eq!(m.verdicts(None).unwrap().len(), 2);
}

/// A version 2 export (written before verdicts) has no `verdicts` field and
/// still imports everything else.
#[test]
fn version_2_exports_without_verdicts_still_import() {
    let dir = tmp();
    let src = device_db(&dir.path().join("a.db"), "socA", 1000.0);
    let mut v2 = serde_json::to_value(src.export_soc("socA").unwrap()).unwrap();
    v2["version"] = json!(2);
    v2.as_object_mut().unwrap().remove("verdicts");
    let file = dir.path().join("v2.json");
    std::fs::write(&file, serde_json::to_vec(&v2).unwrap()).unwrap();
    let read = read_export(&file).unwrap();
    assert!(read.verdicts.is_empty());
    let mut dst = SelectorDb::open(dir.path().join("b.db")).unwrap();
    let st = dst.import(&read).unwrap();
    assert_eq!(
        (
            st.measurements_added,
            st.selections_added,
            st.verdicts_added
        ),
        (4, 2, 0)
    );
    assert!(dst.verdicts(None).unwrap().is_empty());
    // A version 2 reader would refuse this build's files rather than drop verdicts.
    let mut v3 = src.export_soc("socA").unwrap();
    v3.version = tiletune_tables::EXPORT_VERSION + 1;
    assert!(matches!(dst.import(&v3), Err(TableError::BadExport { .. })));
}

/// An imported verdict must belong to the export's SoC and pass the same
/// checks as `put_verdict`; the error names the row and nothing is written.
#[test]
fn bad_verdicts_are_refused_by_name() {
    let dir = tmp();
    let src = device_db(&dir.path().join("a.db"), "socA", 1000.0);
    let mut dst = SelectorDb::open(dir.path().join("b.db")).unwrap();

    let mut foreign = src.export_soc("socA").unwrap();
    foreign.verdicts[1].soc = "socB".into();
    let err = dst.import(&foreign).unwrap_err().to_string();
    for needle in [
        "verdict qwen2.5-0.5b-q4_0.gguf decode threads=2",
        "\"socB\"",
        "exactly one soc",
    ] {
        assert!(err.contains(needle), "{needle:?} not in {err}");
    }

    let mut unpaired = src.export_soc("socA").unwrap();
    unpaired.verdicts[0].tuned_s.pop();
    let err = dst.import(&unpaired).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, TableError::BadExport { .. }), "{text}");
    for needle in [
        "qwen2.5-0.5b-q4_0.gguf prefill threads=2",
        "time both plans in every round",
        "model m-qwen2.5-0.5b-q4_0.gguf",
    ] {
        assert!(text.contains(needle), "{needle:?} not in {text}");
    }

    // The same through a file: the error names the file.
    let file = dir.path().join("bad.json");
    write_export(&file, &unpaired).unwrap();
    let err = read_export(&file).unwrap_err().to_string();
    assert!(err.contains(&file.display().to_string()), "{err}");
    assert!(
        dst.socs().unwrap().is_empty(),
        "a refused import wrote rows"
    );
}
