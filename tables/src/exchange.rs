//! Moving tables between devices: JSON export (one file per SoC, versioned),
//! idempotent import, and merging several tables into one without mixing SoCs.
//!
//! Export format (`format: "tiletune-selector"`, `version: 3`): one object with
//! the SoC record and every campaign, measurement, selection, ceiling, peer
//! result and model-level verdict of that SoC. Every row carries the SoC fingerprint, and an import
//! rejects a file in which any row names another SoC.
//!
//! Versions: 2 adds a candidate's thread placement (`"placement": {"name":
//! "t2@cluster1", "cpus": [4, 5]}`, present only when the workers were
//! pinned); version 1 files have none and import as unpinned candidates.
//! 3 adds `verdicts`, the model-level checks of tuned plans
//! ([`Verdict`](crate::Verdict)); version 1 and 2 files have none and import
//! without them. A reader older than a file's version refuses it, so a
//! placement or a verdict is never silently dropped.
//!
//! Conflict rules on import and merge (rows are keyed, so importing twice adds
//! nothing):
//! - SoC: the existing name and probe record stay; `first_seen` becomes the earlier.
//! - Campaign (by its globally unique id): the existing row stays; a missing
//!   `finished_at` is filled in.
//! - Measurement (by soc, kernel ABI, problem, candidate): the existing row stays.
//!   Measurements are observations; a re-measure is a deliberate
//!   `replace_measurement`, not a side effect of a merge.
//! - Selection (by soc, problem, thread budget, kernel ABI): the one with the
//!   smaller median wins; on a tie the existing row stays. Both were measured on
//!   the same SoC with the same kernels, so the faster one is the better choice.
//! - Ceiling and peer result (by their measured-at keys): added if absent.
//! - Verdict (by soc, kernel ABI, model, phase, threads): the newer
//!   `measured_at` wins; on a tie the existing row stays. A verdict judges the
//!   plan the tuner had when it was taken, so the newest one is about the
//!   newest plan (and the runtime ignores one whose plan digest is stale).

use crate::db::{OpenOptions, SelectorDb};
use crate::error::{Result, TableError};
use crate::records::{
    CAMPAIGN_COLS, CEIL_COLS, Campaign, Ceiling, MEAS_COLS, Measurement, PEER_COLS, PeerResult,
    SEL_COLS, Selection, SocRecord, campaign_row, ceiling_row, check_measurement, check_selection,
    insert, measurement_row, peer_row, selection_row,
};
use crate::verdict::{
    VERDICT_COLS, VERDICT_ORDER, Verdict, check_verdict, insert_verdict, verdict_row,
};
use rusqlite::{OptionalExtension, params};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::path::Path;

/// The `format` field of every export.
pub const EXPORT_FORMAT: &str = "tiletune-selector";
/// The export format version this build writes and reads.
pub const EXPORT_VERSION: u32 = 3;

/// Everything a table knows about one SoC.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SocExport {
    pub format: String,
    pub version: u32,
    pub soc: SocRecord,
    pub campaigns: Vec<Campaign>,
    pub measurements: Vec<Measurement>,
    pub selections: Vec<Selection>,
    pub ceilings: Vec<Ceiling>,
    #[serde(default)]
    pub peer_results: Vec<PeerResult>,
    /// Absent from version 1 and 2 files.
    #[serde(default)]
    pub verdicts: Vec<Verdict>,
}

/// What an import or merge changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ImportStats {
    pub socs_added: usize,
    pub campaigns_added: usize,
    pub measurements_added: usize,
    pub selections_added: usize,
    /// Existing selections replaced by a faster incoming one.
    pub selections_replaced: usize,
    /// Incoming selections dropped because the existing one is as fast or faster.
    pub selections_kept: usize,
    pub ceilings_added: usize,
    pub peer_results_added: usize,
    pub verdicts_added: usize,
    /// Existing verdicts replaced by a newer incoming one.
    pub verdicts_replaced: usize,
    /// Incoming verdicts dropped because the existing one is as new or newer.
    pub verdicts_kept: usize,
}

impl ImportStats {
    /// Rows added or replaced: 0 means the import changed nothing.
    pub fn changed(&self) -> usize {
        self.socs_added
            + self.campaigns_added
            + self.measurements_added
            + self.selections_added
            + self.selections_replaced
            + self.ceilings_added
            + self.peer_results_added
            + self.verdicts_added
            + self.verdicts_replaced
    }

    /// Adds another import's counts to these.
    pub fn add(&mut self, o: &ImportStats) {
        self.socs_added += o.socs_added;
        self.campaigns_added += o.campaigns_added;
        self.measurements_added += o.measurements_added;
        self.selections_added += o.selections_added;
        self.selections_replaced += o.selections_replaced;
        self.selections_kept += o.selections_kept;
        self.ceilings_added += o.ceilings_added;
        self.peer_results_added += o.peer_results_added;
        self.verdicts_added += o.verdicts_added;
        self.verdicts_replaced += o.verdicts_replaced;
        self.verdicts_kept += o.verdicts_kept;
    }
}

impl SocExport {
    /// Checks the header and that every row belongs to this SoC and refers
    /// only to campaigns in the export. `origin` names the file in errors.
    pub fn validate(&self, origin: &Path) -> Result<()> {
        let bad = |detail: String| TableError::BadExport {
            path: origin.to_path_buf(),
            detail,
        };
        if self.format != EXPORT_FORMAT {
            return Err(bad(format!(
                "format is {:?}, expected {EXPORT_FORMAT:?}",
                self.format
            )));
        }
        if self.version > EXPORT_VERSION {
            return Err(bad(format!(
                "export version {} is newer than this tiletune reads ({EXPORT_VERSION}); upgrade tiletune",
                self.version
            )));
        }
        let fp = &self.soc.fingerprint;
        if fp.is_empty() {
            return Err(bad("the soc fingerprint is empty".to_string()));
        }
        let foreign = |kind: &str, soc: &str| {
            bad(format!(
                "a {kind} row belongs to soc {soc:?}, not to the file's soc {fp:?}; \
                 an export holds exactly one soc"
            ))
        };
        let ids: HashSet<&str> = self.campaigns.iter().map(|c| c.id.as_str()).collect();
        let missing = |kind: &str, id: &str| {
            bad(format!(
                "a {kind} row refers to campaign {id:?}, which the file does not contain"
            ))
        };
        for c in &self.campaigns {
            if &c.soc != fp {
                return Err(foreign("campaign", &c.soc));
            }
        }
        for m in &self.measurements {
            if &m.soc != fp {
                return Err(foreign("measurement", &m.soc));
            }
            if !ids.contains(m.campaign.as_str()) {
                return Err(missing("measurement", &m.campaign));
            }
            check_measurement(m)?;
        }
        for s in &self.selections {
            if &s.soc != fp {
                return Err(foreign("selection", &s.soc));
            }
            if let Some(c) = &s.campaign
                && !ids.contains(c.as_str())
            {
                return Err(missing("selection", c));
            }
            check_selection(s)?;
        }
        for c in &self.ceilings {
            if &c.soc != fp {
                return Err(foreign("ceiling", &c.soc));
            }
            if let Some(id) = &c.campaign
                && !ids.contains(id.as_str())
            {
                return Err(missing("ceiling", id));
            }
        }
        for p in &self.peer_results {
            if &p.soc != fp {
                return Err(foreign("peer result", &p.soc));
            }
        }
        for v in &self.verdicts {
            if &v.soc != fp {
                return Err(bad(format!(
                    "verdict {} (model {}) belongs to soc {:?}, not to the file's soc {fp:?}; \
                     an export holds exactly one soc",
                    v.label(),
                    v.model,
                    v.soc
                )));
            }
            if let Some(c) = &v.campaign
                && !ids.contains(c.as_str())
            {
                return Err(missing("verdict", c));
            }
            check_verdict(v).map_err(|e| bad(format!("{e} (model {})", v.model)))?;
        }
        Ok(())
    }
}

/// Writes an export as pretty JSON, atomically (temporary file, then rename).
pub fn write_export(path: &Path, export: &SocExport) -> Result<()> {
    let io = |action, source| TableError::Io {
        path: path.to_path_buf(),
        action,
        source,
    };
    let json = serde_json::to_vec_pretty(export).map_err(|e| TableError::BadExport {
        path: path.to_path_buf(),
        detail: e.to_string(),
    })?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, json).map_err(|e| io("write", e))?;
    std::fs::rename(&tmp, path).map_err(|e| io("rename into place", e))
}

/// Reads and validates one export file.
pub fn read_export(path: &Path) -> Result<SocExport> {
    let bytes = std::fs::read(path).map_err(|source| TableError::Io {
        path: path.to_path_buf(),
        action: "read",
        source,
    })?;
    parse_export(&bytes, path)
}

/// Parses and validates one export held in memory; `origin` names it in errors.
pub fn parse_export(bytes: &[u8], origin: &Path) -> Result<SocExport> {
    let export: SocExport = serde_json::from_slice(bytes).map_err(|e| TableError::BadExport {
        path: origin.to_path_buf(),
        detail: format!("{e} (expected a json object from `tiletune table export`)"),
    })?;
    export.validate(origin)?;
    Ok(export)
}

/// Reads every SoC from a file that is either a selector table (SQLite,
/// opened read-only) or a JSON export.
pub fn read_any(path: &Path) -> Result<Vec<SocExport>> {
    let mut head = [0u8; 16];
    let is_sqlite = std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read(&mut f, &mut head))
        .map(|n| n == 16 && &head == b"SQLite format 3\0")
        .map_err(|source| TableError::Io {
            path: path.to_path_buf(),
            action: "read",
            source,
        })?;
    if is_sqlite {
        SelectorDb::open_with(path, OpenOptions::read_only())?.export_all()
    } else {
        Ok(vec![read_export(path)?])
    }
}

impl SelectorDb {
    /// Everything about one SoC, read in one snapshot.
    pub fn export_soc(&self, fingerprint: &str) -> Result<SocExport> {
        let e = self.err("exporting");
        let tx = self.conn.unchecked_transaction().map_err(&e)?;
        let out = self.export_in(&tx, fingerprint)?;
        tx.finish().map_err(&e)?;
        Ok(out)
    }

    /// One export per SoC, read in one snapshot.
    pub fn export_all(&self) -> Result<Vec<SocExport>> {
        let e = self.err("exporting");
        let tx = self.conn.unchecked_transaction().map_err(&e)?;
        let fps: Vec<String> = tx
            .prepare("SELECT fingerprint FROM socs ORDER BY fingerprint")
            .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
            .map_err(&e)?;
        let out = fps
            .iter()
            .map(|fp| self.export_in(&tx, fp))
            .collect::<Result<Vec<_>>>()?;
        tx.finish().map_err(&e)?;
        Ok(out)
    }

    fn export_in(&self, c: &rusqlite::Connection, fp: &str) -> Result<SocExport> {
        let e = self.err("exporting");
        let soc = c
            .query_row(
                "SELECT fingerprint, name, probe, first_seen FROM socs WHERE fingerprint = ?1",
                [fp],
                crate::records::soc_row,
            )
            .optional()
            .map_err(&e)?
            .ok_or_else(|| TableError::Unknown {
                path: self.path.clone(),
                what: "soc",
                key: fp.to_string(),
                hint: "`tiletune table show --all` lists the socs it holds",
            })?;
        fn rows<T>(
            c: &rusqlite::Connection,
            sql: String,
            fp: &str,
            f: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
        ) -> rusqlite::Result<Vec<T>> {
            c.prepare(&sql)?.query_map([fp], f)?.collect()
        }
        Ok(SocExport {
            format: EXPORT_FORMAT.to_string(),
            version: EXPORT_VERSION,
            soc,
            campaigns: rows(
                c,
                format!("SELECT {CAMPAIGN_COLS} FROM campaigns WHERE soc = ?1 ORDER BY started_at, id"),
                fp,
                campaign_row,
            )
            .map_err(&e)?,
            measurements: rows(
                c,
                format!(
                    "SELECT {MEAS_COLS} FROM measurements WHERE soc = ?1
                     ORDER BY kernel_abi, problem_key, candidate_key"
                ),
                fp,
                measurement_row,
            )
            .map_err(&e)?,
            selections: rows(
                c,
                format!(
                    "SELECT {SEL_COLS} FROM selections WHERE soc = ?1
                     ORDER BY kernel_abi, problem_key, thread_budget"
                ),
                fp,
                selection_row,
            )
            .map_err(&e)?,
            ceilings: rows(
                c,
                format!("SELECT {CEIL_COLS} FROM ceilings WHERE soc = ?1 ORDER BY kind, threads, measured_at"),
                fp,
                ceiling_row,
            )
            .map_err(&e)?,
            peer_results: rows(
                c,
                format!(
                    "SELECT {PEER_COLS} FROM peer_results WHERE soc = ?1
                     ORDER BY model, engine, test, threads, measured_at"
                ),
                fp,
                peer_row,
            )
            .map_err(&e)?,
            verdicts: rows(
                c,
                format!("SELECT {VERDICT_COLS} FROM verdicts WHERE soc = ?1 ORDER BY {VERDICT_ORDER}"),
                fp,
                verdict_row,
            )
            .map_err(&e)?,
        })
    }

    /// Imports one SoC's rows in one transaction, following the conflict rules
    /// in the module docs. Importing the same export twice changes nothing.
    pub fn import(&mut self, export: &SocExport) -> Result<ImportStats> {
        // Errors name the export (the file it came from was checked by read_export).
        let origin = format!("the export of soc {:?}", export.soc.fingerprint);
        export.validate(Path::new(&origin))?;
        let e = self.err("importing");
        self.write("importing", |tx, path| {
            let mut st = ImportStats {
                socs_added: insert::soc_if_absent(tx, &export.soc).map_err(&e)? as usize,
                ..Default::default()
            };
            for c in &export.campaigns {
                st.campaigns_added += insert::campaign(tx, c).map_err(&e)? as usize;
            }
            for m in &export.measurements {
                st.measurements_added += insert::measurement(tx, m, false).map_err(&e)? as usize;
            }
            for s in &export.selections {
                let existing: Option<f64> = tx
                    .query_row(
                        "SELECT median_ns FROM selections
                         WHERE soc = ?1 AND problem_key = ?2 AND thread_budget = ?3 AND kernel_abi = ?4",
                        params![s.soc, s.problem.key(), s.thread_budget, s.kernel_abi],
                        |r| r.get(0),
                    )
                    .optional()
                    .map_err(&e)?;
                match existing {
                    Some(old) if s.median_ns >= old => st.selections_kept += 1,
                    other => {
                        let invalid: bool = tx
                            .query_row(
                                "SELECT count(*) > 0 FROM measurements
                                 WHERE soc = ?1 AND kernel_abi = ?2 AND problem_key = ?3
                                   AND candidate_key = ?4 AND valid = 0",
                                params![s.soc, s.kernel_abi, s.problem.key(), s.winner.key()],
                                |r| r.get(0),
                            )
                            .map_err(&e)?;
                        if invalid {
                            return Err(TableError::BadExport {
                                path: path.to_path_buf(),
                                detail: format!(
                                    "selection {} for {} names a candidate that failed validation",
                                    s.winner, s.problem
                                ),
                            });
                        }
                        insert::selection(tx, s).map_err(&e)?;
                        if other.is_some() {
                            st.selections_replaced += 1;
                        } else {
                            st.selections_added += 1;
                        }
                    }
                }
            }
            for c in &export.ceilings {
                st.ceilings_added += insert::ceiling(tx, c).map_err(&e)? as usize;
            }
            for p in &export.peer_results {
                st.peer_results_added += insert::peer(tx, p).map_err(&e)? as usize;
            }
            for v in &export.verdicts {
                let existing: Option<i64> = tx
                    .query_row(
                        "SELECT measured_at FROM verdicts
                         WHERE soc = ?1 AND kernel_abi = ?2 AND model = ?3 AND phase = ?4
                           AND threads = ?5",
                        params![v.soc, v.kernel_abi, v.model, v.phase.name(), v.threads],
                        |r| r.get(0),
                    )
                    .optional()
                    .map_err(&e)?;
                match existing {
                    Some(old) if v.measured_at <= old => st.verdicts_kept += 1,
                    other => {
                        insert_verdict(tx, v).map_err(&e)?;
                        if other.is_some() {
                            st.verdicts_replaced += 1;
                        } else {
                            st.verdicts_added += 1;
                        }
                    }
                }
            }
            Ok(st)
        })
    }

    /// Imports every SoC of another table (each in its own transaction).
    pub fn merge_from(&mut self, other: &SelectorDb) -> Result<ImportStats> {
        let mut total = ImportStats::default();
        for export in other.export_all()? {
            total.add(&self.import(&export)?);
        }
        Ok(total)
    }
}
