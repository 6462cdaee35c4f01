//! The environment record stored with every result: which SoC, how its CPU
//! frequency was governed and set, how loaded the machine was, and which
//! build of tiletune measured it. Everything the kernel does not expose (a
//! VM has no cpufreq) is `None`, never guessed. Reads go through a root
//! directory so tests can use a fixture tree.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// Conditions of a measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    /// The SoC fingerprint (from the soc crate, passed in by the caller).
    pub soc_fingerprint: String,
    /// cpufreq governor of cpu0 (`performance`, `schedutil`, ...).
    pub governor: Option<String>,
    /// Current frequency of cpu0 in kHz.
    pub cur_freq_khz: Option<u64>,
    /// 1, 5 and 15 minute load averages.
    pub loadavg: Option<[f64; 3]>,
    /// Online CPUs (`/sys/devices/system/cpu/online`).
    pub online_cpus: Option<String>,
    /// Last-level cache size of cpu0 in bytes.
    pub llc_bytes: Option<u64>,
    pub tool_version: String,
    pub git_commit: Option<String>,
    pub arch: String,
    /// Seconds since the Unix epoch.
    pub timestamp: u64,
}

fn read_trim(root: &Path, rel: &str) -> Option<String> {
    std::fs::read_to_string(root.join(rel))
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// Parses `/proc/loadavg`.
pub fn parse_loadavg(s: &str) -> Option<[f64; 3]> {
    let mut it = s.split_whitespace().map(|x| x.parse::<f64>().ok());
    Some([it.next()??, it.next()??, it.next()??])
}

/// Parses a sysfs cache size (`32768K`, `2M`, `512`).
pub fn parse_cache_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.as_bytes().last()? {
        b'K' | b'k' => (&s[..s.len() - 1], 1u64 << 10),
        b'M' | b'm' => (&s[..s.len() - 1], 1 << 20),
        b'G' | b'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().ok().map(|n| n * mult)
}

/// The largest data/unified cache level of cpu0 under `root`.
pub fn llc_bytes_from(root: &Path) -> Option<u64> {
    let dir = root.join("sys/devices/system/cpu/cpu0/cache");
    let mut best: Option<(u32, u64)> = None;
    for e in std::fs::read_dir(dir).ok()?.filter_map(Result::ok) {
        let p = e.path();
        let level: Option<u32> = read_trim(&p, "level").and_then(|s| s.parse().ok());
        let kind = read_trim(&p, "type").unwrap_or_default();
        let size = read_trim(&p, "size").and_then(|s| parse_cache_size(&s));
        if let (Some(l), Some(sz)) = (level, size)
            && kind != "Instruction"
            && best.is_none_or(|(bl, _)| l > bl)
        {
            best = Some((l, sz));
        }
    }
    best.map(|(_, s)| s)
}

/// The LLC size of this machine, if sysfs tells.
pub fn detect_llc_bytes() -> Option<u64> {
    llc_bytes_from(Path::new("/"))
}

impl Environment {
    /// Captures the environment of this machine now.
    pub fn capture(
        soc_fingerprint: &str,
        tool_version: &str,
        git_commit: Option<&str>,
    ) -> Environment {
        Environment::capture_from(Path::new("/"), soc_fingerprint, tool_version, git_commit)
    }

    /// Captures from a filesystem root (fixtures in tests).
    pub fn capture_from(
        root: &Path,
        soc_fingerprint: &str,
        tool_version: &str,
        git_commit: Option<&str>,
    ) -> Environment {
        let cpufreq = "sys/devices/system/cpu/cpu0/cpufreq";
        Environment {
            soc_fingerprint: soc_fingerprint.to_string(),
            governor: read_trim(root, &format!("{cpufreq}/scaling_governor")),
            cur_freq_khz: read_trim(root, &format!("{cpufreq}/scaling_cur_freq"))
                .and_then(|s| s.parse().ok()),
            loadavg: read_trim(root, "proc/loadavg").and_then(|s| parse_loadavg(&s)),
            online_cpus: read_trim(root, "sys/devices/system/cpu/online"),
            llc_bytes: llc_bytes_from(root),
            tool_version: tool_version.to_string(),
            git_commit: git_commit
                .map(str::to_string)
                .or_else(|| option_env!("TILETUNE_GIT_COMMIT").map(str::to_string)),
            arch: std::env::consts::ARCH.to_string(),
            timestamp: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        }
    }

    /// Warnings worth printing before trusting numbers taken here.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if let Some(g) = &self.governor
            && g != "performance"
        {
            w.push(format!(
                "cpufreq governor is `{g}`; for stable numbers set `performance` \
                 (cpupower frequency-set -g performance)"
            ));
        }
        if let Some([one, _, _]) = self.loadavg {
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
            if one > 0.5 * cpus {
                w.push(format!(
                    "1-minute load average is {one:.2} on {cpus} CPUs; other work will disturb the timings"
                ));
            }
        }
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn fixture() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/root")
    }

    #[test]
    fn reads_a_fixture_tree() {
        let e = Environment::capture_from(&fixture(), "soc:abc123", "0.1.0", Some("deadbeef"));
        assert_eq!(e.soc_fingerprint, "soc:abc123");
        assert_eq!(e.governor.as_deref(), Some("schedutil"));
        assert_eq!(e.cur_freq_khz, Some(2_841_600));
        assert_eq!(e.loadavg, Some([1.25, 0.80, 0.50]));
        assert_eq!(e.online_cpus.as_deref(), Some("0-7"));
        assert_eq!(e.llc_bytes, Some(8 << 20));
        assert_eq!(e.git_commit.as_deref(), Some("deadbeef"));
        assert!(e.warnings().iter().any(|w| w.contains("schedutil")));
        let json = serde_json::to_string(&e).unwrap();
        assert_eq!(serde_json::from_str::<Environment>(&json).unwrap(), e);
    }

    #[test]
    fn missing_files_are_none() {
        let e = Environment::capture_from(Path::new("/nonexistent-root"), "x", "0", None);
        assert_eq!(e.governor, None);
        assert_eq!(e.cur_freq_khz, None);
        assert_eq!(e.loadavg, None);
        assert_eq!(e.llc_bytes, None);
        assert!(e.warnings().is_empty());
    }

    #[test]
    fn parsers() {
        assert_eq!(parse_cache_size("32768K"), Some(32 << 20));
        assert_eq!(parse_cache_size("2M"), Some(2 << 20));
        assert_eq!(parse_cache_size("512"), Some(512));
        assert_eq!(parse_cache_size("K"), None);
        assert_eq!(
            parse_loadavg("0.15 0.24 0.12 4/127 7935"),
            Some([0.15, 0.24, 0.12])
        );
        assert_eq!(parse_loadavg("0.15"), None);
    }
}
