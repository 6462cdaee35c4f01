//! Parser for the text of `/proc/cpuinfo` (x86-64 and aarch64 layouts).
//!
//! The file is a list of `key : value` lines. A `processor : N` line starts
//! the entry of logical CPU N and a blank line ends it; lines outside any
//! entry (the old Android `Processor : AArch64 Processor rev 14` header, the
//! Raspberry Pi `Hardware`/`Model` trailer) are global. Keys are kept verbatim
//! (`CPU implementer`, `cpu family`) because both layouts are parsed by the
//! same code.

use std::collections::BTreeMap;

/// One logical CPU's block.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcEntry {
    /// The number after `processor :`.
    pub cpu: usize,
    /// Every other `key : value` line of the block.
    pub fields: BTreeMap<String, String>,
}

impl ProcEntry {
    /// The trimmed value of `key`, if the block has it.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields.get(key).map(String::as_str)
    }

    /// `key` parsed as an integer, decimal or `0x` hexadecimal.
    pub fn get_int(&self, key: &str) -> Option<u64> {
        self.get(key).and_then(parse_int)
    }
}

/// The architecture whose layout a cpuinfo text uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuinfoLayout {
    X86,
    Arm,
    Unknown,
}

/// A parsed `/proc/cpuinfo`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cpuinfo {
    pub entries: Vec<ProcEntry>,
    /// Lines outside any processor block.
    pub global: BTreeMap<String, String>,
}

impl Cpuinfo {
    /// Parses the text; never fails, unknown lines are ignored.
    pub fn parse(text: &str) -> Cpuinfo {
        let mut info = Cpuinfo::default();
        let mut current: Option<ProcEntry> = None;
        for line in text.lines() {
            if line.trim().is_empty() {
                if let Some(entry) = current.take() {
                    info.entries.push(entry);
                }
                continue;
            }
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let key = key.trim();
            let value = value.trim();
            if key == "processor"
                && let Ok(cpu) = value.parse::<usize>()
            {
                if let Some(entry) = current.take() {
                    info.entries.push(entry);
                }
                current = Some(ProcEntry {
                    cpu,
                    fields: BTreeMap::new(),
                });
                continue;
            }
            match current.as_mut() {
                Some(entry) => {
                    entry.fields.insert(key.to_string(), value.to_string());
                }
                None => {
                    info.global.insert(key.to_string(), value.to_string());
                }
            }
        }
        if let Some(entry) = current.take() {
            info.entries.push(entry);
        }
        info
    }

    /// Which architecture wrote this text, judged by its keys.
    pub fn layout(&self) -> CpuinfoLayout {
        let has = |k: &str| {
            self.entries.iter().any(|e| e.fields.contains_key(k)) || self.global.contains_key(k)
        };
        if has("vendor_id") || has("flags") {
            CpuinfoLayout::X86
        } else if has("CPU implementer") || has("Features") {
            CpuinfoLayout::Arm
        } else {
            CpuinfoLayout::Unknown
        }
    }

    /// The entry of logical CPU `cpu`.
    pub fn entry(&self, cpu: usize) -> Option<&ProcEntry> {
        self.entries.iter().find(|e| e.cpu == cpu)
    }

    /// The feature words every listed CPU reports (`flags` on x86,
    /// `Features` on arm), so a heterogeneous system reports only what every
    /// core can run. A global `Features` line (very old kernels) counts too.
    pub fn common_flags(&self) -> Vec<String> {
        let key = match self.layout() {
            CpuinfoLayout::X86 => "flags",
            _ => "Features",
        };
        let mut sets = self
            .entries
            .iter()
            .filter_map(|e| e.get(key))
            .chain(self.global.get(key).map(String::as_str))
            .map(|line| line.split_whitespace().collect::<Vec<_>>());
        let Some(first) = sets.next() else {
            return Vec::new();
        };
        let mut common: Vec<&str> = first;
        for set in sets {
            common.retain(|w| set.contains(w));
        }
        common.sort_unstable();
        common.dedup();
        common.into_iter().map(str::to_string).collect()
    }
}

/// Parses `123` or `0x7b`.
pub fn parse_int(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD_ANDROID: &str = "Processor\t: AArch64 Processor rev 14 (aarch64)\n\
processor\t: 0\nFeatures\t: fp asimd asimddp\nCPU implementer\t: 0x51\nCPU part\t: 0x805\n\n\
processor\t: 1\nFeatures\t: fp asimd\nCPU implementer\t: 0x51\nCPU part\t: 0x804\n\n\
Hardware\t: Qualcomm Technologies, Inc SM8150\n";

    #[test]
    fn parses_old_android_layout_with_header_and_trailer() {
        let info = Cpuinfo::parse(OLD_ANDROID);
        assert_eq!(info.entries.len(), 2);
        assert_eq!(info.layout(), CpuinfoLayout::Arm);
        assert_eq!(info.entry(1).unwrap().get_int("CPU part"), Some(0x804));
        assert_eq!(
            info.global.get("Hardware").map(String::as_str),
            Some("Qualcomm Technologies, Inc SM8150")
        );
        assert!(info.global.contains_key("Processor"));
        // asimddp is only on cpu0, so it is not common.
        assert_eq!(info.common_flags(), vec!["asimd", "fp"]);
    }

    #[test]
    fn garbage_and_empty_text_do_not_panic() {
        assert!(Cpuinfo::parse("").entries.is_empty());
        let info = Cpuinfo::parse("no colon here\nprocessor : x\n:::\n\n\n");
        assert!(info.entries.is_empty());
        assert_eq!(info.layout(), CpuinfoLayout::Unknown);
        assert!(info.common_flags().is_empty());
    }

    #[test]
    fn parse_int_reads_decimal_and_hex() {
        assert_eq!(parse_int("0xd4e"), Some(0xd4e));
        assert_eq!(parse_int(" 26 "), Some(26));
        assert_eq!(parse_int("zz"), None);
    }
}
