//! Run-time detection under qemu-user: qemu passes `QEMU_CPU` through to the
//! guest, so a test can check that `probe()` reports the emulated CPU's
//! features (cortex-a53: NEON only; cortex-a76: + dotprod; max: + i8mm, SVE).
//! Outside qemu (variable unset, or not aarch64) the test has nothing to
//! compare against and returns.

#[test]
fn probe_reports_the_emulated_cpu() {
    let Ok(model) = std::env::var("QEMU_CPU") else {
        return;
    };
    if std::env::consts::ARCH != "aarch64" {
        return;
    }
    let info = tiletune_soc::probe().unwrap();
    assert_eq!(info.arch, "aarch64");
    assert_eq!(info.feature_source, tiletune_soc::FeatureSource::RunTime);
    let has = |f: &str| info.features.iter().any(|x| x == f);
    match model.as_str() {
        "cortex-a53" => {
            assert!(has("neon"), "{:?}", info.features);
            assert!(!has("dotprod"), "{:?}", info.features);
            assert!(!has("i8mm"), "{:?}", info.features);
        }
        "cortex-a76" => {
            assert!(
                has("neon") && has("dotprod") && has("fp16"),
                "{:?}",
                info.features
            );
            assert!(!has("i8mm"), "{:?}", info.features);
            assert!(!has("sve"), "{:?}", info.features);
        }
        "max" => {
            for f in ["neon", "dotprod", "i8mm", "sve", "sve2", "bf16"] {
                assert!(has(f), "{f}: {:?}", info.features);
            }
        }
        other => eprintln!("no feature expectations for QEMU_CPU={other}"),
    }
    // When the core type came from MIDR_EL1 (host cpuinfo is not arm), it
    // must be the emulated one.
    let expected_core = match model.as_str() {
        "cortex-a53" => Some("Cortex-A53"),
        "cortex-a76" => Some("Cortex-A76"),
        "max" => Some("QEMU-max"),
        _ => None,
    };
    if let Some(name) = expected_core
        && info.notes.iter().any(|n| n.contains("MIDR_EL1"))
    {
        assert!(info.clusters.iter().all(|c| c.core_name == name), "{info}");
    }
    eprintln!("checked QEMU_CPU={model}: {:?}", info.features);
}
