//! Where the selector table lives when the user does not say: `$TILETUNE_DB`,
//! else the XDG data directory (`$XDG_DATA_HOME/tiletune/selector.db`, falling
//! back to `~/.local/share/tiletune/selector.db`). The binary's `--db` flag
//! overrides all of these.
//!
//! An app ships its tables as files named by fingerprint (`<fingerprint>.db`,
//! one SoC each: `table export --soc FP` then `table import --db FP.db`) in
//! a directory of its assets, read-only; `$TILETUNE_TABLE_DIR` names that
//! directory, and [`table_for_soc`] picks the running SoC's file from it
//! when the user named no table.

use std::ffi::OsString;
use std::path::PathBuf;

/// The environment variable that overrides the default database path.
pub const DB_ENV: &str = "TILETUNE_DB";

/// The environment variable naming a directory of per-SoC tables.
pub const TABLE_DIR_ENV: &str = "TILETUNE_TABLE_DIR";

/// The table to read for SoC `fingerprint` when the user named none:
/// `$TILETUNE_DB` if set, else `$TILETUNE_TABLE_DIR/<fingerprint>.db` if that
/// file exists, else [`default_db_path`].
pub fn table_for_soc(fingerprint: &str) -> PathBuf {
    table_for_soc_from(fingerprint, |k| std::env::var_os(k))
}

/// [`table_for_soc`] with the environment given as a function.
pub fn table_for_soc_from(fingerprint: &str, env: impl Fn(&str) -> Option<OsString>) -> PathBuf {
    let set = |k: &str| env(k).filter(|v| !v.is_empty());
    if set(DB_ENV).is_none()
        && let Some(dir) = set(TABLE_DIR_ENV)
    {
        let file = PathBuf::from(dir).join(format!("{fingerprint}.db"));
        if file.is_file() {
            return file;
        }
    }
    default_db_path_from(env)
}

/// The default selector table path for this user, from the process environment.
pub fn default_db_path() -> PathBuf {
    default_db_path_from(|k| std::env::var_os(k))
}

/// [`default_db_path`] with the environment given as a function (for tests and
/// for callers that sandbox the environment).
pub fn default_db_path_from(env: impl Fn(&str) -> Option<OsString>) -> PathBuf {
    let set = |k: &str| env(k).filter(|v| !v.is_empty());
    if let Some(p) = set(DB_ENV) {
        return PathBuf::from(p);
    }
    // The XDG spec says relative values are invalid and must be ignored.
    if let Some(p) = set("XDG_DATA_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
    {
        return p.join("tiletune").join("selector.db");
    }
    match set("HOME") {
        Some(home) => PathBuf::from(home).join(".local/share/tiletune/selector.db"),
        // No home (a bare container): the working directory is all we have.
        None => PathBuf::from("tiletune-selector.db"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn a_table_directory_gives_the_socs_own_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("abc123.db"), b"").unwrap();
        let d = dir.path().to_str().unwrap();
        let vars = [("TILETUNE_TABLE_DIR", d), ("HOME", "/h")];
        assert_eq!(
            table_for_soc_from("abc123", env(&vars)),
            dir.path().join("abc123.db")
        );
        // Another SoC has no file there: the user's table.
        assert_eq!(
            table_for_soc_from("ffff", env(&vars)),
            PathBuf::from("/h/.local/share/tiletune/selector.db")
        );
        // A table named by the user wins.
        let named = [("TILETUNE_DB", "/x/t.db"), ("TILETUNE_TABLE_DIR", d)];
        assert_eq!(
            table_for_soc_from("abc123", env(&named)),
            PathBuf::from("/x/t.db")
        );
    }

    #[test]
    fn precedence_env_then_xdg_then_home() {
        let all = [
            ("TILETUNE_DB", "/x/t.db"),
            ("XDG_DATA_HOME", "/xdg"),
            ("HOME", "/h"),
        ];
        assert_eq!(default_db_path_from(env(&all)), PathBuf::from("/x/t.db"));
        assert_eq!(
            default_db_path_from(env(&all[1..])),
            PathBuf::from("/xdg/tiletune/selector.db")
        );
        assert_eq!(
            default_db_path_from(env(&all[2..])),
            PathBuf::from("/h/.local/share/tiletune/selector.db")
        );
        // Empty and relative values are ignored.
        let odd = [
            ("TILETUNE_DB", ""),
            ("XDG_DATA_HOME", "rel"),
            ("HOME", "/h"),
        ];
        assert_eq!(
            default_db_path_from(env(&odd)),
            PathBuf::from("/h/.local/share/tiletune/selector.db")
        );
        assert_eq!(
            default_db_path_from(env(&[])),
            PathBuf::from("tiletune-selector.db")
        );
    }
}
