//! The human-readable report `tiletune probe` prints (`Display` for
//! [`SocInfo`]); `--json` serializes the struct instead.

use crate::{FeatureSource, SocInfo};
use std::fmt;

/// `48 KiB`, `1 MiB`, `2.5 GiB`.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn mhz(khz: Option<u64>) -> String {
    khz.map_or_else(
        || "max freq unknown".to_string(),
        |k| format!("{} MHz", k / 1000),
    )
}

impl fmt::Display for SocInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "SoC          {}", self.name)?;
        writeln!(f, "fingerprint  {}", self.fingerprint)?;
        writeln!(f, "arch         {}", self.arch)?;
        writeln!(f, "vendor       {}", self.vendor)?;
        writeln!(f, "model        {}", self.model_name)?;
        if let Some(x) = &self.x86 {
            writeln!(
                f,
                "cpuid        {} family {:#x} model {:#x} stepping {}",
                x.vendor_id, x.family, x.model, x.stepping
            )?;
        }
        let mem = self
            .mem_total_bytes
            .map_or_else(|| "unknown".to_string(), human_bytes);
        writeln!(f, "memory       {mem}")?;
        let source = match self.feature_source {
            FeatureSource::RunTime => "run-time detection",
            FeatureSource::Cpuinfo => "from cpuinfo",
            FeatureSource::Unknown => "unknown",
        };
        let feats = if self.features.is_empty() {
            "none".to_string()
        } else {
            self.features.join(" ")
        };
        writeln!(f, "features     {feats}  ({source})")?;
        writeln!(
            f,
            "cpus         {} ({} online)",
            self.cores.len(),
            self.online_cpus()
        )?;
        writeln!(f, "clusters")?;
        for c in &self.clusters {
            let stepping = c
                .midr
                .map(|m| format!(" {}", m.stepping()))
                .unwrap_or_default();
            writeln!(
                f,
                "  cpus {:<8} {}x {}{}, {}",
                c.cpu_list,
                c.cpus.len(),
                c.core_name,
                stepping,
                mhz(c.max_freq_khz)
            )?;
            if c.caches.is_empty() {
                writeln!(f, "      caches unknown")?;
            }
            for k in &c.caches {
                let size = k
                    .size_bytes
                    .map_or_else(|| "size ?".to_string(), human_bytes);
                let ways = k.ways.map(|w| format!(", {w}-way")).unwrap_or_default();
                let line = k
                    .line_bytes
                    .map(|l| format!(", {l} B line"))
                    .unwrap_or_default();
                let shared = k
                    .shared_cpu_list
                    .as_deref()
                    .map(|s| format!(", shared by cpus {s}"))
                    .unwrap_or_default();
                writeln!(f, "      {:<4} {size}{ways}{line}{shared}", k.label())?;
            }
        }
        if self.cores.iter().any(|c| c.midr.is_some()) {
            writeln!(f, "cores (MIDR)")?;
            for c in &self.cores {
                match c.midr {
                    Some(m) => writeln!(
                        f,
                        "  cpu{:<3} implementer {:#04x} part {:#05x} variant {:#x} revision {}  {}{}",
                        c.cpu,
                        m.implementer,
                        m.part,
                        m.variant,
                        m.revision,
                        c.core_name,
                        if c.online { "" } else { " (offline)" }
                    )?,
                    None => writeln!(f, "  cpu{:<3} {}", c.cpu, c.core_name)?,
                }
            }
        }
        if !self.notes.is_empty() {
            writeln!(f, "notes")?;
            for n in &self.notes {
                writeln!(f, "  - {n}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::human_bytes;

    #[test]
    fn bytes_are_humanized() {
        assert_eq!(human_bytes(48 << 10), "48 KiB");
        assert_eq!(human_bytes(32 << 20), "32 MiB");
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
    }
}
