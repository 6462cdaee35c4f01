//! A tuning campaign's time budget, as `tune --budget` takes it.

use std::time::Duration;

use crate::TunerError;

/// The longest budget accepted: a year, far past any real campaign, and
/// short enough that adding it to a clock never overflows.
pub const MAX_BUDGET_S: u64 = 365 * 24 * 3600;

/// Parses `90`, `90s`, `5m`, `1h`, `1h30m` (at most a year).
pub fn parse_budget(s: &str) -> Result<Duration, TunerError> {
    let bad = || TunerError::BadBudget(format!("`{s}` is not a duration; use e.g. 90s, 5m or 1h"));
    let long = || {
        TunerError::BadBudget(format!(
            "`{s}` is longer than a budget may be (8760h); use e.g. 90s, 5m or 1h"
        ))
    };
    let mut total = 0u64;
    let mut num = String::new();
    let mut add = |n: &str, unit: u64| -> Result<(), TunerError> {
        let n: u64 = n
            .parse()
            .map_err(|_| if n.is_empty() { bad() } else { long() })?;
        total = n
            .checked_mul(unit)
            .and_then(|v| total.checked_add(v))
            .filter(|&t| t <= MAX_BUDGET_S)
            .ok_or_else(long)?;
        Ok(())
    };
    for ch in s.trim().chars() {
        if ch.is_ascii_digit() {
            num.push(ch);
            continue;
        }
        let unit = match ch {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            _ => return Err(bad()),
        };
        add(&num, unit)?;
        num.clear();
    }
    if !num.is_empty() {
        add(&num, 1)?;
    }
    if total == 0 {
        return Err(bad());
    }
    Ok(Duration::from_secs(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_budget("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_budget("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_budget("1h30m").unwrap(), Duration::from_secs(5400));
        for bad in ["", "0", "5x", "m", "-3s"] {
            assert!(parse_budget(bad).is_err(), "{bad}");
        }
        // Sizes that would overflow the campaign's clock are refused.
        for long in [
            "99999999999999999h",
            "18446744073709551615s",
            "8761h",
            "366d",
        ] {
            assert!(parse_budget(long).is_err(), "{long}");
        }
        assert!(
            parse_budget("99999999999999999h")
                .unwrap_err()
                .to_string()
                .contains("longer")
        );
        assert_eq!(
            parse_budget("8760h").unwrap(),
            Duration::from_secs(MAX_BUDGET_S)
        );
    }
}
