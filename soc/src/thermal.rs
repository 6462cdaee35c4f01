//! The thermal zones of `sys/class/thermal` under a root: each zone's type
//! and temperature. A phone that is already hot throttles its clocks, so a
//! campaign measured on it says more about its heat than about its kernels;
//! `tiletune probe` reads the zones and `tiletune remote` compares them
//! before and after a campaign.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// A zone at or above this temperature is hot: phone SoCs start to lower
/// their clocks between 60 and 70 °C of their hottest CPU sensor, so a
/// campaign started or ended there was likely throttled.
pub const HOT_CELSIUS: f64 = 65.0;

/// Readings outside this range are sensors that are off or not wired
/// (`-273`, `0` on some boards, `255000` on others), not temperatures.
const PLAUSIBLE_CELSIUS: std::ops::RangeInclusive<f64> = -40.0..=150.0;

/// One `thermal_zoneN` directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThermalZone {
    /// `thermal_zone3`.
    pub zone: String,
    /// Its `type`: `cpu-1-0-usr`, `x86_pkg_temp`, `battery`, ...
    pub kind: String,
    pub celsius: f64,
}

/// Every zone under `root/sys/class/thermal` with a plausible temperature,
/// in zone-number order. Missing directories give an empty list.
pub fn read_zones(root: &Path) -> Vec<ThermalZone> {
    let dir = root.join("sys/class/thermal");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut zones: Vec<(u32, ThermalZone)> = entries
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let n: u32 = name.strip_prefix("thermal_zone")?.parse().ok()?;
            let path = dir.join(&name);
            let raw: f64 = crate::sysfs::read_trimmed(&path.join("temp"))?
                .parse()
                .ok()?;
            let kind = crate::sysfs::read_trimmed(&path.join("type")).unwrap_or_default();
            Some((
                n,
                ThermalZone {
                    zone: name,
                    kind,
                    celsius: to_celsius(raw),
                },
            ))
        })
        .filter(|(_, z)| PLAUSIBLE_CELSIUS.contains(&z.celsius))
        .collect();
    zones.sort_by_key(|(n, _)| *n);
    zones.into_iter().map(|(_, z)| z).collect()
}

/// The kernel reports millidegrees; a few vendor drivers report whole
/// degrees, which no real sensor confuses with millidegrees (1000 m°C is
/// 1 °C, never seen on a running SoC).
fn to_celsius(raw: f64) -> f64 {
    if raw.abs() >= 1000.0 {
        raw / 1000.0
    } else {
        raw
    }
}

/// The hottest zone, if any.
pub fn hottest(zones: &[ThermalZone]) -> Option<&ThermalZone> {
    zones.iter().max_by(|a, b| a.celsius.total_cmp(&b.celsius))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone(root: &Path, n: u32, kind: &str, temp: &str) {
        let d = root.join(format!("sys/class/thermal/thermal_zone{n}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("type"), format!("{kind}\n")).unwrap();
        std::fs::write(d.join("temp"), format!("{temp}\n")).unwrap();
    }

    #[test]
    fn zones_are_read_in_order_and_implausible_ones_dropped() {
        let dir = tempfile::tempdir().unwrap();
        zone(dir.path(), 10, "cpu-1-0", "71500");
        zone(dir.path(), 2, "battery", "31");
        zone(dir.path(), 3, "unwired", "-273000");
        std::fs::create_dir_all(dir.path().join("sys/class/thermal/cooling_device0")).unwrap();
        let z = read_zones(dir.path());
        assert_eq!(z.len(), 2, "{z:?}");
        assert_eq!((z[0].zone.as_str(), z[0].celsius), ("thermal_zone2", 31.0));
        assert_eq!((z[1].kind.as_str(), z[1].celsius), ("cpu-1-0", 71.5));
        assert_eq!(hottest(&z).unwrap().kind, "cpu-1-0");
    }

    #[test]
    fn no_thermal_directory_is_no_zones() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read_zones(dir.path()).is_empty());
        assert!(hottest(&[]).is_none());
    }
}
