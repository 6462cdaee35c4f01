//! The selector table handle and the tuning campaign: `tiletune tune
//! --model` (campaign, joint layout choice, model-level check, verdicts),
//! run by `tiletune_flow::tune` with its events forwarded to a progress
//! callback.

use crate::ffi::{
    CapiError, Result, TtStatus, arg_opt_str, arg_out, arg_ref, arg_str, give_string, guard,
    guard_void, try_lock,
};
use std::ffi::{CString, c_char, c_void};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tiletune_flow::{Target, TuneEvent, TuneOptions};
use tiletune_tables::{OpenOptions, SelectorDb};
use tiletune_tuner::Strategy;
use tiletune_tuner::joint::Workload;

/// A selector table (opaque): where tuned winners and verdicts are kept,
/// and where a model's plan is read from.
pub struct TtTable {
    pub(crate) path: PathBuf,
}

/// Opens the selector table at `path` (NULL: the user's table,
/// $TILETUNE_DB else the XDG data directory). With `create` a missing file
/// is made; without it a missing, corrupt or foreign file is an error
/// (`TT_ERR_TABLE`) that says what is wrong.
///
/// Ownership: the caller owns `*out` and frees it with `tt_table_free`.
/// Thread safety: any thread; a table handle may be shared by threads.
///
/// # Safety
/// `path` is NULL or NUL-terminated; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_table_open(
    path: *const c_char,
    create: bool,
    out: *mut *mut TtTable,
) -> TtStatus {
    guard(|| {
        // SAFETY: checked by the helpers.
        let (path, out) = unsafe { (arg_opt_str(path, "path")?, arg_out(out, "out")?) };
        *out = std::ptr::null_mut();
        let path = path.map_or_else(tiletune_tables::default_db_path, PathBuf::from);
        SelectorDb::open_with(
            &path,
            OpenOptions {
                create,
                read_only: !create,
                ..OpenOptions::default()
            },
        )?;
        *out = Box::into_raw(Box::new(TtTable { path }));
        Ok(())
    })
}

/// Frees a table handle (NULL is ignored); the file stays.
///
/// Thread safety: any thread, once no other call on this table runs.
///
/// # Safety
/// `table` came from `tt_table_open` and is not freed yet.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_table_free(table: *mut TtTable) {
    if !table.is_null() {
        // SAFETY: a box made by `tt_table_open`, freed once.
        guard_void(|| drop(unsafe { Box::from_raw(table) }));
    }
}

/// Every SoC's rows as JSON, as `tiletune table export` writes them (an
/// array of exports).
///
/// Ownership: `*out` is the caller's; free it with `tt_string_free`.
/// Thread safety: any thread, concurrently.
///
/// # Safety
/// `table` is live; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_table_export_json(
    table: *const TtTable,
    out: *mut *mut c_char,
) -> TtStatus {
    guard(|| {
        // SAFETY: checked by the helpers.
        let (t, out) = unsafe { (arg_ref(table, "table")?, arg_out(out, "out")?) };
        *out = std::ptr::null_mut();
        let db = SelectorDb::open_with(
            &t.path,
            OpenOptions {
                read_only: true,
                ..OpenOptions::default()
            },
        )?;
        let json = serde_json::to_string(&db.export_all()?)
            .map_err(|e| CapiError::Tune(tiletune_flow::FlowError::Json(e)))?;
        *out = give_string(json);
        Ok(())
    })
}

/// A `tune --model` campaign; `tt_tune_options_default` fills
/// `tiletune tune`'s defaults.
#[repr(C)]
pub struct TtTuneOptions {
    /// The GGUF model whose kernel problems are tuned. Required.
    pub model: *const c_char,
    /// Where winners and verdicts go; NULL: the user's table.
    pub table: *const TtTable,
    /// Wall-clock budget for measuring in seconds, shared by the problems;
    /// 0: none (every problem searched in full).
    pub budget_seconds: f64,
    /// Most threads to search and the thread budget stored; 0: every core.
    pub threads: u32,
    /// What the joint layout choice is for, llama-bench's tests
    /// ("pp512,tg128", "decode", ...); NULL: "pp512,tg128".
    pub workload: *const c_char,
    /// Alternated rounds of the model-level check, 3 to 50.
    pub rounds: u32,
    /// "adaptive", "descent", "halving", "random" or "exhaustive"; NULL:
    /// adaptive.
    pub strategy: *const c_char,
    /// Seed of the kernels' random inputs.
    pub seed: u64,
}

/// Fills `opts` with `tiletune tune`'s defaults (model NULL: set it).
///
/// Thread safety: any thread.
///
/// # Safety
/// `opts` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_tune_options_default(opts: *mut TtTuneOptions) -> TtStatus {
    guard(|| {
        let d = TuneOptions::new(Target::Model(PathBuf::new()), PathBuf::new());
        // SAFETY: checked by the helper.
        *unsafe { arg_out(opts, "opts") }? = TtTuneOptions {
            model: std::ptr::null(),
            table: std::ptr::null(),
            budget_seconds: 0.0,
            threads: 0,
            workload: std::ptr::null(),
            rounds: d.rounds as u32,
            strategy: std::ptr::null(),
            seed: d.seed,
        };
        Ok(())
    })
}

/// A tuning campaign (opaque): its options, then its report once run.
pub struct TtCampaign {
    opts: TuneOptions,
    /// The flag `tt_campaign_stop` raises (`opts.stop` holds it too).
    stop: Arc<AtomicBool>,
    report: Mutex<Option<String>>,
}

/// The flow's options for `o`.
///
/// # Safety
/// `o`'s pointers are NULL or valid.
unsafe fn tune_options(o: &TtTuneOptions) -> Result<TuneOptions> {
    // SAFETY: forwarded.
    let (model, workload, strategy, table) = unsafe {
        (
            arg_str(o.model, "opts.model")?,
            arg_opt_str(o.workload, "opts.workload")?,
            arg_opt_str(o.strategy, "opts.strategy")?,
            o.table.as_ref(),
        )
    };
    if !(o.budget_seconds.is_finite() && o.budget_seconds >= 0.0 && o.budget_seconds < 1e9) {
        return Err(CapiError::arg(
            "opts.budget_seconds",
            format!(
                "{} is not a budget; pass seconds, or 0 for none",
                o.budget_seconds
            ),
        ));
    }
    if !(3..=50).contains(&o.rounds) {
        return Err(CapiError::arg(
            "opts.rounds",
            format!("{} is out of range; pass 3 to 50", o.rounds),
        ));
    }
    let db = table.map_or_else(tiletune_tables::default_db_path, |t| t.path.clone());
    let mut t = TuneOptions::new(Target::Model(PathBuf::from(model)), db);
    t.budget = (o.budget_seconds > 0.0).then(|| Duration::from_secs_f64(o.budget_seconds));
    t.threads = (o.threads > 0).then_some(o.threads as usize);
    t.rounds = o.rounds as usize;
    t.seed = o.seed;
    if let Some(w) = workload {
        t.workload = w
            .parse::<Workload>()
            .map_err(|e| CapiError::arg("opts.workload", e.to_string()))?;
    }
    if let Some(s) = strategy {
        t.strategy = s
            .parse::<Strategy>()
            .map_err(|e| CapiError::arg("opts.strategy", e))?;
    }
    Ok(t)
}

/// A campaign with these options, checked now, run by `tt_campaign_run`.
///
/// Ownership: the caller owns `*out` and frees it with `tt_campaign_free`.
/// Thread safety: any thread.
///
/// # Safety
/// `opts` points to valid options; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_campaign_new(
    opts: *const TtTuneOptions,
    out: *mut *mut TtCampaign,
) -> TtStatus {
    guard(|| {
        // SAFETY: checked by the helpers.
        let out = unsafe { arg_out(out, "out") }?;
        *out = std::ptr::null_mut();
        // SAFETY: as documented.
        let mut opts = unsafe { tune_options(arg_ref(opts, "opts")?) }?;
        let stop = Arc::new(AtomicBool::new(false));
        opts.stop = Some(Arc::clone(&stop));
        *out = Box::into_raw(Box::new(TtCampaign {
            opts,
            stop,
            report: Mutex::new(None),
        }));
        Ok(())
    })
}

/// Frees a campaign (NULL is ignored).
///
/// Thread safety: any thread, once no other call on this campaign runs.
///
/// # Safety
/// `campaign` came from `tt_campaign_new` and is not freed yet.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_campaign_free(campaign: *mut TtCampaign) {
    if !campaign.is_null() {
        // SAFETY: a box made by `tt_campaign_new`, freed once.
        guard_void(|| drop(unsafe { Box::from_raw(campaign) }));
    }
}

/// What a progress event is (`TtProgress::kind`).
pub type TtProgressKind = i32;
/// Something to tell the user: campaign resumed, problems skipped, a noisy
/// machine (`text`).
pub const TT_PROGRESS_NOTE: TtProgressKind = 0;
/// Measuring starts: `total` candidates in all.
pub const TT_PROGRESS_STARTED: TtProgressKind = 1;
/// A problem starts: `done` of `total` problems, `text` names it.
pub const TT_PROGRESS_PROBLEM: TtProgressKind = 2;
/// A candidate was measured: `done` of `total` candidates;
/// `best_seconds` is the problem's best so far (0 when none).
pub const TT_PROGRESS_CANDIDATE: TtProgressKind = 3;
/// Measuring is over (`text`: how many problems, whether the budget ran out).
pub const TT_PROGRESS_MEASURED: TtProgressKind = 4;
/// The joint layout choice is stored (`text` sums it up).
pub const TT_PROGRESS_JOINT: TtProgressKind = 5;
/// The model-level check starts (`total` rounds; `text`: how many phases
/// it times, or that it times none).
pub const TT_PROGRESS_CHECK: TtProgressKind = 6;
/// A phase's verdict (`text`: phase, test, ratio, won or not), or a
/// phase not timed because the tuned plan runs the default plan's choices
/// in it (`text`: phase, test, "not timed").
pub const TT_PROGRESS_VERDICT: TtProgressKind = 7;

/// One progress event. Borrowed: valid during the callback only.
#[repr(C)]
pub struct TtProgress {
    pub kind: TtProgressKind,
    pub done: u64,
    pub total: u64,
    pub best_seconds: f64,
    /// UTF-8, NUL-terminated; empty when the kind has no text.
    pub text: *const c_char,
}

/// Called with each progress event, on the thread running the campaign.
pub type TtProgressCallback = Option<unsafe extern "C" fn(user: *mut c_void, p: *const TtProgress)>;

/// The progress event for a flow event (`None` for the ones not passed on),
/// counting candidates in `evaluated`.
fn progress(
    e: &TuneEvent<'_>,
    evaluated: &mut u64,
    total: &mut u64,
) -> Option<(TtProgress, String)> {
    let p = |kind, done, total, text: String| {
        let ev = TtProgress {
            kind,
            done,
            total,
            best_seconds: 0.0,
            text: std::ptr::null(),
        };
        Some((ev, text))
    };
    match e {
        TuneEvent::Threads(_) | TuneEvent::ProblemDone(_) => None,
        TuneEvent::Resumed { campaign } => p(
            TT_PROGRESS_NOTE,
            0,
            0,
            format!(
                "resuming campaign {} (started {})",
                campaign.id, campaign.started_at
            ),
        ),
        TuneEvent::Skipped(s) => p(
            TT_PROGRESS_NOTE,
            0,
            0,
            format!("skipping {} problem(s) with no tunable kernel yet", s.len()),
        ),
        TuneEvent::Noisy(w) => p(TT_PROGRESS_NOTE, 0, 0, w.join("; ")),
        TuneEvent::PlacementsLeftOut(n) => p(
            TT_PROGRESS_NOTE,
            0,
            0,
            format!("placements {}", n.join("; ")),
        ),
        TuneEvent::CampaignStarted { candidates } => {
            *total = *candidates;
            p(TT_PROGRESS_STARTED, 0, *candidates, String::new())
        }
        TuneEvent::ProblemStarted {
            index,
            total,
            problem,
            ..
        } => p(
            TT_PROGRESS_PROBLEM,
            *index as u64,
            *total as u64,
            problem.to_string(),
        ),
        TuneEvent::Evaluated { best_s, .. } => {
            *evaluated += 1;
            let mut ev = p(TT_PROGRESS_CANDIDATE, *evaluated, *total, String::new())?;
            ev.0.best_seconds = best_s.unwrap_or(0.0);
            Some(ev)
        }
        TuneEvent::CampaignDone {
            reports,
            out_of_budget,
            ..
        } => p(
            TT_PROGRESS_MEASURED,
            reports.len() as u64,
            reports.len() as u64,
            match out_of_budget {
                true => "the budget ran out: the best so far was kept".into(),
                false => "every problem searched".into(),
            },
        ),
        TuneEvent::JointStored { weights, workload } => p(
            TT_PROGRESS_JOINT,
            weights.iter().filter(|w| !w.changed.is_empty()).count() as u64,
            weights.len() as u64,
            format!("joint layout choice for {workload}"),
        ),
        TuneEvent::CheckStarted { rounds, timed, .. } => p(
            TT_PROGRESS_CHECK,
            0,
            *rounds as u64,
            match timed {
                0 => {
                    "nothing to time: the tuned plan runs the default plan's choices in every phase"
                        .into()
                }
                n => format!("{n} phase(s) to time"),
            },
        ),
        TuneEvent::AsDefault { phase, tests } => p(
            TT_PROGRESS_VERDICT,
            0,
            0,
            format!(
                "{} {}: not timed, the tuned plan runs the default plan's choices",
                phase.name(),
                tiletune_tuner::joint::label(tests)
            ),
        ),
        TuneEvent::Verdict { verdict: v, .. } => p(
            TT_PROGRESS_VERDICT,
            0,
            0,
            format!(
                "{} {}: tuned {:.2}x, {}",
                v.phase.name(),
                v.test,
                v.ratio,
                if v.won {
                    "won"
                } else {
                    "no win beyond the noise"
                }
            ),
        ),
    }
}

/// Runs the campaign: measures, stores the joint layout choice, times the
/// tuned plan against the default plan and stores the verdicts, calling
/// `on_progress` (may be NULL) along the way. Runs once per campaign to
/// the end; one stopped by `tt_campaign_stop` (`TT_ERR_STOPPED`) may be run
/// again, and continues from the measurements it kept.
///
/// Thread safety: one thread at a time per campaign; the callback runs on
/// the calling thread.
///
/// # Safety
/// `campaign` is live; `on_progress` is NULL or callable with `user`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_campaign_run(
    campaign: *mut TtCampaign,
    on_progress: TtProgressCallback,
    user: *mut c_void,
) -> TtStatus {
    guard(|| {
        // SAFETY: checked by the helper.
        let c = unsafe { arg_ref(campaign, "campaign") }?;
        let mut report = try_lock(&c.report, "campaign")?;
        if report.is_some() {
            return Err(CapiError::arg(
                "campaign",
                "has run already; make a new one to tune again",
            ));
        }
        c.stop.store(false, Ordering::SeqCst);
        let (mut evaluated, mut total) = (0, 0);
        let done = tiletune_flow::tune(&c.opts, &mut |e| {
            let (Some(cb), Some((mut ev, text))) =
                (on_progress, progress(&e, &mut evaluated, &mut total))
            else {
                return;
            };
            let text = CString::new(text.replace('\0', " ")).unwrap_or_default();
            ev.text = text.as_ptr();
            // SAFETY: the caller's callback with its own `user`; `ev` and
            // `text` live through the call.
            unsafe { cb(user, &ev) };
        })?;
        *report = Some(done.to_json().to_string());
        Ok(())
    })
}

/// Stops a running campaign: `tt_campaign_run` returns `TT_ERR_STOPPED`
/// after the measurement in flight (or the model-level check's round in
/// flight, or before the check if the search has ended), with every
/// measurement stored. Called before a run, it has no
/// effect: each run starts with the flag lowered.
///
/// Thread safety: any thread, while `tt_campaign_run` runs elsewhere (or
/// from its progress callback).
///
/// # Safety
/// `campaign` is live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_campaign_stop(campaign: *const TtCampaign) -> TtStatus {
    guard(|| {
        // SAFETY: checked by the helper.
        let c = unsafe { arg_ref(campaign, "campaign") }?;
        c.stop.store(true, Ordering::SeqCst);
        Ok(())
    })
}

/// The report of a run campaign as JSON: each problem's winner, and the
/// joint choice, the verdicts and what the runtime makes of them.
///
/// Ownership: `*out` is the caller's; free it with `tt_string_free`.
/// Thread safety: any thread, not during `tt_campaign_run`.
///
/// # Safety
/// `campaign` is live; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tt_campaign_report_json(
    campaign: *const TtCampaign,
    out: *mut *mut c_char,
) -> TtStatus {
    guard(|| {
        // SAFETY: checked by the helpers.
        let (c, out) = unsafe { (arg_ref(campaign, "campaign")?, arg_out(out, "out")?) };
        *out = std::ptr::null_mut();
        let report = try_lock(&c.report, "campaign")?;
        let json = report.as_ref().ok_or_else(|| {
            CapiError::arg("campaign", "has not run yet; call tt_campaign_run first")
        })?;
        *out = give_string(json.clone());
        Ok(())
    })
}
