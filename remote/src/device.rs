//! What a device is and what state it is in, and what to tell the user
//! about it. Two sources: one shell command before anything is pushed
//! ([`Facts`]: architecture, Android or not, counter settings, free space
//! in the work directory, screen and doze state, the files already pushed),
//! and the pushed binary's own `tiletune --json probe` ([`DeviceProbe`]:
//! the SoC and its fingerprint, whether counters open, the thermal zones),
//! read before and after a run.

use crate::error::{RemoteError, Result};
use crate::push::list_command;
use crate::shell::quote;
use crate::transport::{Transport, capture};
use serde::Deserialize;
use tiletune_pmu::availability::PmuAvailability;
use tiletune_soc::SocInfo;
use tiletune_soc::thermal::{self, HOT_CELSIUS, ThermalZone};

/// Where tiletune keeps its files on a device by default: on Android the
/// one directory the shell user may write and execute in, elsewhere a
/// directory under the login's home.
pub fn default_dir(android: bool) -> &'static str {
    if android {
        "/data/local/tmp/tiletune"
    } else {
        ".cache/tiletune-remote"
    }
}

/// What one shell command says about the device.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Facts {
    /// `uname -m`: `aarch64`, `x86_64`, ...
    pub arch: String,
    /// Android's SDK level (`ro.build.version.sdk`), `None` off Android.
    pub android_sdk: Option<u32>,
    /// `security.perf_harden` (Android): `1` blocks counters whatever the paranoid level.
    pub perf_harden: Option<String>,
    pub perf_event_paranoid: Option<i32>,
    /// Free bytes in the work directory's file system.
    pub free_bytes: Option<u64>,
    /// `mWakefulness` from `dumpsys power`: `Awake`, `Asleep`, `Dozing`.
    pub wakefulness: Option<String>,
    /// `dumpsys deviceidle get deep`: `ACTIVE`, `IDLE`, ...
    pub deep_idle: Option<String>,
    /// The work directory as an absolute path.
    pub dir: Option<String>,
    /// `slot/name` of every file already pushed.
    pub have: Vec<String>,
}

impl Facts {
    /// The command that prints them, `key=value` a line. `df -Pk` keeps
    /// each file system on one line; toybox and busybox both take it.
    pub fn command(dir: &str) -> String {
        format!(
            "echo arch=$(uname -m); \
             sdk=$(getprop ro.build.version.sdk 2>/dev/null); echo sdk=$sdk; \
             echo harden=$(getprop security.perf_harden 2>/dev/null); \
             echo paranoid=$(cat /proc/sys/kernel/perf_event_paranoid 2>/dev/null); \
             if [ -n \"$sdk\" ]; then \
               echo wake=$(dumpsys power 2>/dev/null | grep -m 1 -o 'mWakefulness=[A-Za-z]*'); \
               echo idle=$(dumpsys deviceidle get deep 2>/dev/null); fi; \
             {list}; \
             echo free=$(df -Pk {d} 2>/dev/null | tail -n 1 | while read a b c avail rest; do echo $avail; done)",
            list = list_command(dir),
            d = quote(dir)
        )
    }

    pub fn parse(text: &str) -> Facts {
        let mut f = Facts::default();
        for line in text.lines() {
            let Some((k, v)) = line.split_once('=') else {
                continue;
            };
            let v = v.trim();
            let some = || Some(v.to_string()).filter(|v| !v.is_empty());
            match k.trim() {
                "arch" => f.arch = v.to_string(),
                "sdk" => f.android_sdk = v.parse().ok(),
                "harden" => f.perf_harden = some(),
                "paranoid" => f.perf_event_paranoid = v.parse().ok(),
                "wake" => {
                    f.wakefulness = v.strip_prefix("mWakefulness=").map(str::to_string);
                }
                "idle" => f.deep_idle = some(),
                "have" => f.have.push(v.to_string()),
                "dir" => f.dir = some(),
                "free" => f.free_bytes = v.parse::<u64>().ok().map(|k| k * 1024),
                _ => {}
            }
        }
        f
    }

    /// Reads them (creating the work directory's slots on the way).
    pub fn read(t: &dyn Transport, dir: &str) -> Result<Facts> {
        let out = capture(t, "read the device's facts", &Self::command(dir))?;
        let f = Facts::parse(&String::from_utf8_lossy(&out));
        if f.arch.is_empty() {
            return Err(RemoteError::Parse {
                device: t.name(),
                what: "uname -m".into(),
                detail: "no architecture printed".into(),
            });
        }
        Ok(f)
    }

    /// The Rust target whose static build runs on this device.
    pub fn target(&self) -> Option<&'static str> {
        match self.arch.as_str() {
            "aarch64" | "arm64" | "armv8l" => Some("aarch64-unknown-linux-musl"),
            "x86_64" | "amd64" => Some("x86_64-unknown-linux-musl"),
            _ => None,
        }
    }

    /// Warnings about the screen and doze (Android only): a phone with its
    /// screen off moves work to little cores and doze suspends it.
    pub fn screen_warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if let Some(s) = &self.wakefulness
            && s != "Awake"
        {
            w.push(format!(
                "the screen is off ({s}): Android may throttle or move the work to little cores; \
                 wake it and keep it on while plugged in: `adb shell svc power stayon usb`"
            ));
        }
        if let Some(s) = &self.deep_idle
            && s != "ACTIVE"
        {
            w.push(format!(
                "the device is in doze ({s}): it may suspend the run; `adb shell dumpsys \
                 deviceidle disable` keeps it awake until `enable`"
            ));
        }
        w
    }
}

/// The pushed binary's `tiletune --json probe`.
#[derive(Debug, Clone, Deserialize)]
pub struct DeviceProbe {
    pub soc: SocInfo,
    pub pmu: Option<PmuAvailability>,
    #[serde(default)]
    pub thermal: Vec<ThermalZone>,
}

impl DeviceProbe {
    pub fn parse(device: &str, bytes: &[u8]) -> Result<DeviceProbe> {
        serde_json::from_slice(bytes).map_err(|e| RemoteError::Parse {
            device: device.to_string(),
            what: "tiletune --json probe".into(),
            detail: e.to_string(),
        })
    }

    /// CPUs the device has but that are offline now.
    pub fn offline_cpus(&self) -> Vec<usize> {
        self.soc
            .cores
            .iter()
            .filter(|c| !c.online)
            .map(|c| c.cpu)
            .collect()
    }

    /// The hottest zone, for the before/after line.
    pub fn hottest(&self) -> Option<&ThermalZone> {
        thermal::hottest(&self.thermal)
    }
}

/// Why counters are off on the device and what the user can do, or `None`
/// when they are on.
pub fn counter_advice(probe: &DeviceProbe, facts: &Facts) -> Option<String> {
    let pmu = probe.pmu.as_ref()?;
    if pmu.available {
        return None;
    }
    let blocked_by_setting = facts.perf_event_paranoid.is_some_and(|p| p > 2)
        || facts.perf_harden.as_deref() == Some("1");
    let what = match (facts.android_sdk.is_some(), blocked_by_setting) {
        (true, true) => format!(
            "perf_event_paranoid is {} and security.perf_harden is {}: Android keeps counters \
             from the shell user. On a userdebug or rooted device run `adb root`, or `adb shell \
             setprop security.perf_harden 0` (lowers perf_event_paranoid until the next boot), \
             then run again",
            facts
                .perf_event_paranoid
                .map_or("unknown".to_string(), |p| p.to_string()),
            facts.perf_harden.as_deref().unwrap_or("unset")
        ),
        (false, true) => format!(
            "perf_event_paranoid is {}: run `sudo sysctl kernel.perf_event_paranoid=2` on the \
             device, then run again",
            facts.perf_event_paranoid.unwrap_or(3)
        ),
        (_, false) => pmu.reason.clone(),
    };
    Some(format!(
        "hardware counters are unavailable on the device ({}); measurements use wall-clock \
         time and software counters: {what}",
        pmu.errno
            .map_or_else(|| "no errno".to_string(), |e| format!("errno {e}"))
    ))
}

/// The thermal record of a run: one line for the campaign's drift flags,
/// and a warning when the device was hot before or after.
pub fn thermal_record(
    device: &str,
    before: Option<&ThermalZone>,
    after: Option<&ThermalZone>,
) -> (Option<String>, Option<String>) {
    let show = |z: Option<&ThermalZone>| {
        z.map_or("unknown".to_string(), |z| {
            format!("{:.1} °C ({})", z.celsius, z.kind)
        })
    };
    if before.is_none() && after.is_none() {
        return (None, None);
    }
    let line = format!(
        "thermal on {device}: hottest zone {} before, {} after",
        show(before),
        show(after)
    );
    let hot = [before, after]
        .into_iter()
        .flatten()
        .any(|z| z.celsius >= HOT_CELSIUS);
    let warning = hot.then(|| {
        format!(
            "{device} was hot ({line}; throttling starts near {HOT_CELSIUS:.0} °C): its numbers may \
             be the throttled clocks'; let it cool (screen off, off the charger) and run again",
            line = line.trim_start_matches(&format!("thermal on {device}: "))
        )
    });
    (Some(line), warning)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_parse_from_an_android_shell() {
        let text = "arch=aarch64\nsdk=34\nharden=1\nparanoid=3\nwake=mWakefulness=Asleep\n\
                    idle=IDLE\ndir=/data/local/tmp/tiletune\nhave=bin/0123456789abcdef-tiletune\n\
                    free=1048576\n";
        let f = Facts::parse(text);
        assert_eq!(f.arch, "aarch64");
        assert_eq!(f.target(), Some("aarch64-unknown-linux-musl"));
        assert_eq!(f.android_sdk, Some(34));
        assert_eq!(f.perf_harden.as_deref(), Some("1"));
        assert_eq!(f.perf_event_paranoid, Some(3));
        assert_eq!(f.free_bytes, Some(1 << 30));
        assert_eq!(f.have, ["bin/0123456789abcdef-tiletune"]);
        assert_eq!(f.dir.as_deref(), Some("/data/local/tmp/tiletune"));
        let w = f.screen_warnings();
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("svc power stayon"));
        assert!(w[1].contains("deviceidle disable"));
    }

    #[test]
    fn facts_parse_from_a_linux_board() {
        let f = Facts::parse("arch=x86_64\nsdk=\nharden=\nparanoid=2\nfree=\n");
        assert_eq!(f.android_sdk, None);
        assert_eq!(f.perf_harden, None);
        assert_eq!(f.free_bytes, None);
        assert_eq!(f.target(), Some("x86_64-unknown-linux-musl"));
        assert!(f.screen_warnings().is_empty());
        assert_eq!(Facts::parse("arch=mips\n").target(), None);
    }

    fn probe(available: bool, errno: Option<i32>) -> DeviceProbe {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../soc/tests/fixtures/arm-sm8550");
        DeviceProbe {
            soc: tiletune_soc::probe_root(&root).unwrap(),
            pmu: Some(PmuAvailability {
                available,
                errno,
                reason: "the device's own reason".into(),
            }),
            thermal: Vec::new(),
        }
    }

    #[test]
    fn counter_advice_names_what_the_user_can_do() {
        let android = Facts::parse("arch=aarch64\nsdk=34\nharden=1\nparanoid=3\n");
        let a = counter_advice(&probe(false, Some(13)), &android).unwrap();
        assert!(a.contains("errno 13"), "{a}");
        assert!(a.contains("adb root"), "{a}");
        assert!(a.contains("setprop security.perf_harden 0"), "{a}");
        let board = Facts::parse("arch=aarch64\nparanoid=4\n");
        let b = counter_advice(&probe(false, Some(13)), &board).unwrap();
        assert!(b.contains("sysctl kernel.perf_event_paranoid=2"), "{b}");
        let open = Facts::parse("arch=aarch64\nparanoid=1\n");
        let c = counter_advice(&probe(false, Some(38)), &open).unwrap();
        assert!(c.contains("the device's own reason"), "{c}");
        assert!(counter_advice(&probe(true, None), &android).is_none());
    }

    #[test]
    fn a_hot_device_is_recorded_and_warned_about() {
        let z = |c| ThermalZone {
            zone: "thermal_zone1".into(),
            kind: "cpu-1-0".into(),
            celsius: c,
        };
        let (cool, warn) = thermal_record("adb:x", Some(&z(35.0)), Some(&z(41.5)));
        assert_eq!(
            cool.as_deref(),
            Some(
                "thermal on adb:x: hottest zone 35.0 °C (cpu-1-0) before, 41.5 °C (cpu-1-0) after"
            )
        );
        assert!(warn.is_none());
        let (_, warn) = thermal_record("adb:x", Some(&z(35.0)), Some(&z(78.0)));
        assert!(warn.unwrap().contains("was hot"));
        assert_eq!(thermal_record("adb:x", None, None), (None, None));
    }
}
