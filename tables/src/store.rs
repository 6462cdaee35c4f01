//! Reads and writes of the records on an open [`SelectorDb`]. Every write is
//! one `BEGIN IMMEDIATE` transaction: the write lock is taken up front, so
//! concurrent writers wait on the busy timeout instead of failing with a
//! lock-upgrade deadlock.

use crate::db::{SelectorDb, sql_err};
use crate::error::{Result, TableError};
use crate::key::{Candidate, Problem, canonical_json};
use crate::records::{
    CAMPAIGN_COLS, CEIL_COLS, Campaign, Ceiling, MEAS_COLS, Measurement, PEER_COLS, PeerResult,
    SEL_COLS, SOC_COLS, Selection, SocRecord, campaign_row, ceiling_row, check_measurement,
    check_selection, insert, invalid, measurement_row, peer_row, selection_row, soc_row,
};
use rusqlite::{Connection, OptionalExtension, Row, TransactionBehavior, params};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn require(
    c: &Connection,
    path: &Path,
    what: &'static str,
    sql: &str,
    key: &str,
    hint: &'static str,
) -> Result<()> {
    let found = c
        .query_row(sql, [key], |_| Ok(()))
        .optional()
        .map_err(|e| sql_err(path, "checking a reference", e))?;
    match found {
        Some(()) => Ok(()),
        None => Err(TableError::Unknown {
            path: path.to_path_buf(),
            what,
            key: key.to_string(),
            hint,
        }),
    }
}

pub(crate) fn require_soc(c: &Connection, path: &Path, soc: &str) -> Result<()> {
    require(
        c,
        path,
        "soc",
        "SELECT 1 FROM socs WHERE fingerprint = ?1",
        soc,
        "register it first with SelectorDb::register_soc",
    )
}

pub(crate) fn require_campaign(c: &Connection, path: &Path, id: &str) -> Result<()> {
    require(
        c,
        path,
        "campaign",
        "SELECT 1 FROM campaigns WHERE id = ?1",
        id,
        "start it first with SelectorDb::start_campaign",
    )
}

impl SelectorDb {
    /// Runs `f` in one `BEGIN IMMEDIATE` transaction and commits.
    pub(crate) fn write<T>(
        &mut self,
        context: &'static str,
        f: impl FnOnce(&rusqlite::Transaction<'_>, &Path) -> Result<T>,
    ) -> Result<T> {
        let path = self.path.clone();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| sql_err(&path, context, e))?;
        let out = f(&tx, &path)?;
        tx.commit().map_err(|e| sql_err(&path, context, e))?;
        Ok(out)
    }

    pub(crate) fn err(
        &self,
        context: &'static str,
    ) -> impl Fn(rusqlite::Error) -> TableError + use<> {
        let path = self.path.clone();
        move |e| sql_err(&path, context, e)
    }

    pub(crate) fn query_vec<T>(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
        f: impl FnMut(&Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<Vec<T>> {
        let e = self.err("reading rows");
        let mut stmt = self.conn.prepare_cached(sql).map_err(&e)?;
        stmt.query_map(params, f)
            .and_then(|rows| rows.collect())
            .map_err(&e)
    }

    // ---- socs ---------------------------------------------------------------

    /// Records a SoC (or refreshes its name and probe record, keeping `first_seen`).
    pub fn register_soc(&mut self, soc: &SocRecord) -> Result<()> {
        let e = self.err("registering a soc");
        self.write("registering a soc", |tx, _path| {
            tx.execute(
                "INSERT INTO socs (fingerprint, name, probe, first_seen) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT(fingerprint) DO UPDATE SET name = excluded.name, probe = excluded.probe",
                params![soc.fingerprint, soc.name, canonical_json(&soc.probe), soc.first_seen],
            )
            .map_err(&e)?;
            Ok(())
        })
    }

    /// Every SoC in the table, by fingerprint.
    pub fn socs(&self) -> Result<Vec<SocRecord>> {
        self.query_vec(
            &format!("SELECT {SOC_COLS} FROM socs ORDER BY fingerprint"),
            [],
            soc_row,
        )
    }

    /// One SoC by fingerprint.
    pub fn soc(&self, fingerprint: &str) -> Result<Option<SocRecord>> {
        Ok(self
            .query_vec(
                &format!("SELECT {SOC_COLS} FROM socs WHERE fingerprint = ?1"),
                [fingerprint],
                soc_row,
            )?
            .pop())
    }

    // ---- campaigns ------------------------------------------------------------

    /// Records the start of a campaign; its SoC must be registered.
    pub fn start_campaign(&mut self, c: &Campaign) -> Result<()> {
        let e = self.err("starting a campaign");
        self.write("starting a campaign", |tx, path| {
            require_soc(tx, path, &c.soc)?;
            if !insert::campaign(tx, c).map_err(&e)? {
                return Err(invalid(
                    "campaign id",
                    c.id.clone(),
                    "already exists; use Campaign::new_id for a fresh one",
                ));
            }
            Ok(())
        })
    }

    /// Marks a campaign finished (with its final drift flags).
    pub fn finish_campaign(
        &mut self,
        id: &str,
        finished_at: i64,
        drift_flags: &Value,
    ) -> Result<()> {
        let e = self.err("finishing a campaign");
        self.write("finishing a campaign", |tx, path| {
            require_campaign(tx, path, id)?;
            tx.execute(
                "UPDATE campaigns SET finished_at = ?2, drift_flags = ?3 WHERE id = ?1",
                params![id, finished_at, canonical_json(drift_flags)],
            )
            .map_err(&e)?;
            Ok(())
        })
    }

    /// One campaign by id.
    pub fn campaign(&self, id: &str) -> Result<Option<Campaign>> {
        Ok(self
            .query_vec(
                &format!("SELECT {CAMPAIGN_COLS} FROM campaigns WHERE id = ?1"),
                [id],
                campaign_row,
            )?
            .pop())
    }

    /// Campaigns of one SoC (or all), oldest first.
    pub fn campaigns(&self, soc: Option<&str>) -> Result<Vec<Campaign>> {
        self.query_vec(
            &format!(
                "SELECT {CAMPAIGN_COLS} FROM campaigns WHERE ?1 IS NULL OR soc = ?1
                 ORDER BY started_at, id"
            ),
            [soc],
            campaign_row,
        )
    }

    /// The most recent unfinished campaign with this SoC, kernel ABI and
    /// strategy that no running tuner holds, claimed for this process: what
    /// a restarted tuner continues. A campaign another live tuner is running
    /// is left to it (two tuners on one table each keep their own).
    pub fn claim_unfinished_campaign(
        &self,
        soc: &str,
        kernel_abi: u32,
        strategy: &str,
    ) -> Result<Option<(Campaign, CampaignClaim)>> {
        let candidates = self.query_vec(
            &format!(
                "SELECT {CAMPAIGN_COLS} FROM campaigns
                 WHERE soc = ?1 AND kernel_abi = ?2 AND strategy = ?3 AND finished_at IS NULL
                 ORDER BY started_at DESC, id DESC"
            ),
            params![soc, kernel_abi, strategy],
            campaign_row,
        )?;
        for c in candidates {
            let Some(claim) = CampaignClaim::try_new(&self.path, &c.id)? else {
                continue;
            };
            // Finished between the query and the claim: not resumable.
            if self
                .campaign(&c.id)?
                .is_some_and(|c| c.finished_at.is_none())
            {
                return Ok(Some((c, claim)));
            }
        }
        Ok(None)
    }

    /// Continues the campaign [`Self::claim_unfinished_campaign`] finds for
    /// `fresh`'s SoC, kernel ABI and strategy, or starts `fresh`; claimed
    /// either way (`fresh` before it exists, so no other tuner takes it
    /// over). The flag says whether it resumed.
    pub fn resume_or_start_campaign(
        &mut self,
        fresh: Campaign,
    ) -> Result<(Campaign, CampaignClaim, bool)> {
        if let Some((c, claim)) =
            self.claim_unfinished_campaign(&fresh.soc, fresh.kernel_abi, &fresh.strategy)?
        {
            return Ok((c, claim, true));
        }
        let claim = self.claim_campaign(&fresh.id)?;
        self.start_campaign(&fresh)?;
        Ok((fresh, claim, false))
    }

    /// Claims a campaign this process has just started, so that another
    /// tuner does not resume it while it runs.
    pub fn claim_campaign(&self, id: &str) -> Result<CampaignClaim> {
        CampaignClaim::try_new(&self.path, id)?.ok_or_else(|| {
            invalid(
                "campaign id",
                id.to_string(),
                "is already claimed by another running tuner",
            )
        })
    }

    /// The most recent unfinished campaign with this SoC, kernel ABI and
    /// strategy, claimed or not.
    pub fn unfinished_campaign(
        &self,
        soc: &str,
        kernel_abi: u32,
        strategy: &str,
    ) -> Result<Option<Campaign>> {
        Ok(self
            .query_vec(
                &format!(
                    "SELECT {CAMPAIGN_COLS} FROM campaigns
                     WHERE soc = ?1 AND kernel_abi = ?2 AND strategy = ?3 AND finished_at IS NULL
                     ORDER BY started_at DESC, id DESC LIMIT 1"
                ),
                params![soc, kernel_abi, strategy],
                campaign_row,
            )?
            .pop())
    }

    // ---- measurements ---------------------------------------------------------

    /// Stores one measurement in its own transaction. Returns false (and
    /// changes nothing) when the complete key (soc, kernel_abi, problem,
    /// candidate) is already measured: a resumed campaign never duplicates.
    pub fn insert_measurement(&mut self, m: &Measurement) -> Result<bool> {
        Ok(self.insert_measurements(std::slice::from_ref(m))? == 1)
    }

    /// Stores several measurements in one transaction; returns how many were new.
    pub fn insert_measurements(&mut self, ms: &[Measurement]) -> Result<usize> {
        ms.iter().try_for_each(check_measurement)?;
        let e = self.err("storing measurements");
        self.write("storing measurements", |tx, path| {
            let mut added = 0;
            for m in ms {
                require_campaign(tx, path, &m.campaign)?;
                require_soc(tx, path, &m.soc)?;
                added += insert::measurement(tx, m, false).map_err(&e)? as usize;
            }
            Ok(added)
        })
    }

    /// Overwrites the measurement with the same complete key (a deliberate re-measure).
    pub fn replace_measurement(&mut self, m: &Measurement) -> Result<()> {
        check_measurement(m)?;
        let e = self.err("replacing a measurement");
        self.write("replacing a measurement", |tx, path| {
            require_campaign(tx, path, &m.campaign)?;
            require_soc(tx, path, &m.soc)?;
            insert::measurement(tx, m, true).map_err(&e)?;
            Ok(())
        })
    }

    /// The stored measurement for a complete key, if any: the tuner skips
    /// candidates for which this returns `Some`.
    pub fn measured(
        &self,
        soc: &str,
        kernel_abi: u32,
        problem: &Problem,
        candidate: &Candidate,
    ) -> Result<Option<Measurement>> {
        Ok(self
            .query_vec(
                &format!(
                    "SELECT {MEAS_COLS} FROM measurements
                     WHERE soc = ?1 AND kernel_abi = ?2 AND problem_key = ?3 AND candidate_key = ?4"
                ),
                params![soc, kernel_abi, problem.key(), candidate.key()],
                measurement_row,
            )?
            .pop())
    }

    /// Every measurement of one problem on one SoC and kernel ABI, fastest valid first.
    pub fn measurements(
        &self,
        soc: &str,
        kernel_abi: u32,
        problem: &Problem,
    ) -> Result<Vec<Measurement>> {
        self.query_vec(
            &format!(
                "SELECT {MEAS_COLS} FROM measurements
                 WHERE soc = ?1 AND kernel_abi = ?2 AND problem_key = ?3
                 ORDER BY valid DESC, median_ns IS NULL, median_ns, candidate_key"
            ),
            params![soc, kernel_abi, problem.key()],
            measurement_row,
        )
    }

    /// Every measurement taken in one campaign.
    pub fn campaign_measurements(&self, campaign: &str) -> Result<Vec<Measurement>> {
        self.query_vec(
            &format!("SELECT {MEAS_COLS} FROM measurements WHERE campaign = ?1 ORDER BY id"),
            [campaign],
            measurement_row,
        )
    }

    /// How many measurements the table holds for one SoC (or all).
    pub fn count_measurements(&self, soc: Option<&str>) -> Result<usize> {
        self.conn
            .query_row(
                "SELECT count(*) FROM measurements WHERE ?1 IS NULL OR soc = ?1",
                [soc],
                |r| r.get(0),
            )
            .map_err(self.err("counting measurements"))
    }

    // ---- selections -----------------------------------------------------------

    /// Stores the winner for its complete key, replacing any previous one.
    /// Refuses a winner whose stored measurement is marked invalid.
    pub fn put_selection(&mut self, s: &Selection) -> Result<()> {
        check_selection(s)?;
        let e = self.err("storing a selection");
        self.write("storing a selection", |tx, path| {
            store_selection(tx, path, s, &e)
        })
    }

    /// Stores the winner of a campaign unless a campaign that ran at the
    /// same time already stored a faster one for the same key: two tuners
    /// on one table each keep their own campaign, and the table keeps the
    /// fastest winner either of them measured. A selection from a campaign
    /// that finished before this one started is replaced, as by
    /// [`SelectorDb::put_selection`] (a deliberate re-tune). Returns whether
    /// `s` was stored.
    pub fn put_campaign_selection(&mut self, s: &Selection) -> Result<bool> {
        let Some(campaign) = s.campaign.clone() else {
            self.put_selection(s)?;
            return Ok(true);
        };
        check_selection(s)?;
        let e = self.err("storing a selection");
        // One transaction: two tuners finishing the same problem at once
        // cannot both see the other's row missing and both write.
        self.write("storing a selection", |tx, path| {
            require_campaign(tx, path, &campaign)?;
            let faster_concurrent: i64 = tx
                .query_row(
                    "SELECT COUNT(*) FROM selections AS s
                   JOIN campaigns AS theirs ON theirs.id = s.campaign
                   JOIN campaigns AS ours ON ours.id = ?5
                 WHERE s.soc = ?1 AND s.kernel_abi = ?2 AND s.problem_key = ?3
                   AND s.thread_budget = ?4 AND s.campaign <> ?5 AND s.median_ns < ?6
                   AND (theirs.finished_at IS NULL OR theirs.finished_at >= ours.started_at)",
                    params![
                        s.soc,
                        s.kernel_abi,
                        s.problem.key(),
                        s.thread_budget,
                        campaign,
                        s.median_ns
                    ],
                    |r| r.get(0),
                )
                .map_err(&e)?;
            if faster_concurrent > 0 {
                return Ok(false);
            }
            store_selection(tx, path, s, &e)?;
            Ok(true)
        })
    }

    /// Every selection for one SoC (or all), ordered for display.
    pub fn selections(&self, soc: Option<&str>) -> Result<Vec<Selection>> {
        self.query_vec(
            &format!(
                "SELECT {SEL_COLS} FROM selections WHERE ?1 IS NULL OR soc = ?1
                 ORDER BY soc, kernel_abi, op, dtype, problem_key, thread_budget"
            ),
            [soc],
            selection_row,
        )
    }

    // ---- ceilings and peers ---------------------------------------------------

    /// Stores a machine ceiling; false if that exact (soc, kind, threads, time) exists.
    pub fn put_ceiling(&mut self, c: &Ceiling) -> Result<bool> {
        let e = self.err("storing a ceiling");
        self.write("storing a ceiling", |tx, path| {
            require_soc(tx, path, &c.soc)?;
            insert::ceiling(tx, c).map_err(&e)
        })
    }

    /// Ceilings of one SoC (or all), newest first.
    pub fn ceilings(&self, soc: Option<&str>) -> Result<Vec<Ceiling>> {
        self.query_vec(
            &format!(
                "SELECT {CEIL_COLS} FROM ceilings WHERE ?1 IS NULL OR soc = ?1
                 ORDER BY soc, kind, threads, measured_at DESC"
            ),
            [soc],
            ceiling_row,
        )
    }

    /// The newest ceiling of a kind at a thread count.
    pub fn latest_ceiling(&self, soc: &str, kind: &str, threads: usize) -> Result<Option<Ceiling>> {
        Ok(self
            .query_vec(
                &format!(
                    "SELECT {CEIL_COLS} FROM ceilings WHERE soc = ?1 AND kind = ?2 AND threads = ?3
                     ORDER BY measured_at DESC LIMIT 1"
                ),
                params![soc, kind, threads],
                ceiling_row,
            )?
            .pop())
    }

    /// Stores a peer engine's result; false if that exact row exists.
    pub fn put_peer_result(&mut self, p: &PeerResult) -> Result<bool> {
        let e = self.err("storing a peer result");
        self.write("storing a peer result", |tx, path| {
            require_soc(tx, path, &p.soc)?;
            insert::peer(tx, p).map_err(&e)
        })
    }

    /// Peer results of one SoC (or all).
    pub fn peer_results(&self, soc: Option<&str>) -> Result<Vec<PeerResult>> {
        self.query_vec(
            &format!(
                "SELECT {PEER_COLS} FROM peer_results WHERE ?1 IS NULL OR soc = ?1
                 ORDER BY soc, model, engine, test, threads, measured_at"
            ),
            [soc],
            peer_row,
        )
    }
}

/// Stores `s` inside a write transaction: its SoC and campaign must exist,
/// and a winner whose stored measurement is marked invalid is refused.
fn store_selection(
    tx: &rusqlite::Transaction<'_>,
    path: &Path,
    s: &Selection,
    e: &impl Fn(rusqlite::Error) -> TableError,
) -> Result<()> {
    require_soc(tx, path, &s.soc)?;
    if let Some(c) = &s.campaign {
        require_campaign(tx, path, c)?;
    }
    let reason: Option<Option<String>> = tx
        .query_row(
            "SELECT invalid_reason FROM measurements
             WHERE soc = ?1 AND kernel_abi = ?2 AND problem_key = ?3 AND candidate_key = ?4
               AND valid = 0",
            params![s.soc, s.kernel_abi, s.problem.key(), s.winner.key()],
            |r| r.get(0),
        )
        .optional()
        .map_err(e)?;
    if let Some(reason) = reason {
        return Err(invalid(
            "selection",
            s.winner.key(),
            format!(
                "this candidate failed validation on {} ({}) and can never be selected",
                s.problem,
                reason.unwrap_or_else(|| "no reason recorded".to_string())
            ),
        ));
    }
    insert::selection(tx, s).map_err(e)
}

/// A running tuner's hold on its campaign: an exclusive lock on a file next
/// to the table (`<table>.campaign-<id>.lock`). The operating system drops
/// the lock when the process ends however it ends (a killed tuner's
/// campaign becomes resumable at once), and dropping the claim removes the
/// file.
#[derive(Debug)]
pub struct CampaignClaim {
    path: PathBuf,
    _file: std::fs::File,
}

impl CampaignClaim {
    fn try_new(table: &Path, id: &str) -> Result<Option<CampaignClaim>> {
        let mut name = table.as_os_str().to_owned();
        name.push(format!(".campaign-{id}.lock"));
        let path = PathBuf::from(name);
        let io = |source| TableError::Io {
            path: path.clone(),
            action: "lock",
            source,
        };
        use std::os::unix::fs::MetadataExt;
        loop {
            let file = std::fs::File::options()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .map_err(io)?;
            match file.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
                Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
            }
            // The holder removes the file when it lets go; a lock taken on
            // the removed file would not keep out the next tuner, which
            // makes a new one. So the lock holds only if the file is still
            // the one at the path.
            let held = file.metadata().map_err(io)?;
            match std::fs::metadata(&path) {
                Ok(now) if now.ino() == held.ino() && now.dev() == held.dev() => {
                    return Ok(Some(CampaignClaim { path, _file: file }));
                }
                _ => continue,
            }
        }
    }
}

impl Drop for CampaignClaim {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
