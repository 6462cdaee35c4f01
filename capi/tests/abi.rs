//! The C ABI called as C calls it (raw pointers, out-parameters, status
//! codes) on a tiny GGUF model built here: bad arguments are codes with
//! messages, never crashes; tokens pulled step by step equal the streamed
//! ones and the session-level ones; handles outlive what made them; two
//! sessions of one model generate on two threads at once and give what they
//! give alone; a session used from its own callback is busy, not
//! deadlocked; and a `tune --model` campaign runs with progress events and
//! its verdicts reach the plan.

mod common;
use common::*;
use std::ffi::{CString, c_char, c_void};
use std::ptr::{null, null_mut};
use tiletune_capi::*;

fn under_qemu() -> bool {
    std::env::var_os("QEMU_CPU").is_some()
}

#[test]
fn bad_arguments_are_codes_with_messages() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = null_mut();
    // SAFETY: NULLs and valid pointers only.
    unsafe {
        assert_eq!(tt_model_load(null(), &mut m), TT_ERR_NULL);
        assert!(last_error().contains("`opts` is NULL"));
        let mut o = std::mem::zeroed::<TtModelOptions>();
        assert_eq!(tt_model_options_default(&mut o), TT_OK);
        assert_eq!(tt_model_load(&o, &mut m), TT_ERR_NULL);
        assert!(last_error().contains("`opts.path` is NULL"));
        let missing = CString::new(dir.path().join("no.gguf").to_str().unwrap()).unwrap();
        o.path = missing.as_ptr();
        assert_eq!(tt_model_load(&o, &mut m), TT_ERR_MODEL);
        assert!(last_error().contains("no.gguf"), "{}", last_error());
        assert!(m.is_null());
        let model = tiny_model(dir.path());
        let path = CString::new(model.to_str().unwrap()).unwrap();
        o.path = path.as_ptr();
        o.kv_type = 9;
        assert_eq!(tt_model_load(&o, &mut m), TT_ERR_ARGUMENT);
        assert!(last_error().contains("TT_KV_F16"), "{}", last_error());
        o.kv_type = TT_KV_F32;
        let q = c"Q9_X";
        o.quant = q.as_ptr();
        assert_eq!(tt_model_load(&o, &mut m), TT_ERR_ARGUMENT);
        assert!(last_error().contains("Q9_X"), "{}", last_error());

        let table = no_table(dir.path());
        let m = load(&model, 1, table);
        let mut out: *mut c_char = null_mut();
        assert_eq!(
            tt_tokenize(m, null(), 0, null_mut(), null_mut()),
            TT_ERR_NULL
        );
        let bad = c"\xffab";
        let (mut ids, mut n) = (null_mut(), 0usize);
        assert_eq!(
            tt_tokenize(m, bad.as_ptr(), 0, &mut ids, &mut n),
            TT_ERR_ARGUMENT
        );
        assert!(last_error().contains("not UTF-8"));
        assert_eq!(
            tt_detokenize(m, [99u32].as_ptr(), 1, true, &mut out),
            TT_ERR_ARGUMENT
        );
        assert!(last_error().contains("outside the 31-token vocabulary"));
        assert_eq!(tt_detokenize(m, null(), 2, true, &mut out), TT_ERR_NULL);
        assert_eq!(
            tt_model_logits(m, [40u32].as_ptr(), 1, &mut null_mut(), &mut n),
            TT_ERR_MODEL
        );
        let mut s = null_mut();
        assert_eq!(tt_session_new(m, &mut s), TT_OK);
        let mut g = null_mut();
        let o = greedy(4);
        assert_eq!(
            tt_generation_start(s, null(), 0, &o, &mut g),
            TT_ERR_ARGUMENT
        );
        assert!(last_error().contains("prompt"));
        let mut bad_sampler = greedy(4);
        bad_sampler.sampler.top_p = 0.0;
        let p = [BOS, 1];
        assert_eq!(
            tt_generation_start(s, p.as_ptr(), 2, &bad_sampler, &mut g),
            TT_ERR_MODEL
        );
        assert!(last_error().contains("top-p"), "{}", last_error());
        assert!(g.is_null());
        let (mut lp, mut ln) = (null(), 0usize);
        assert_eq!(tt_session_logits(s, &mut lp, &mut ln), TT_ERR_ARGUMENT);
        assert!(last_error().contains("tt_session_eval first"));
        tt_session_free(s);
        tt_model_free(m);
        // The free functions take NULL.
        tt_model_free(null_mut());
        tt_session_free(null_mut());
        tt_generation_free(null_mut());
        tt_table_free(table);
        let mut t = null_mut();
        let junk = dir.path().join("junk.db");
        std::fs::write(&junk, vec![0x5au8; 4096]).unwrap();
        let junk = CString::new(junk.to_str().unwrap()).unwrap();
        assert_eq!(tt_table_open(junk.as_ptr(), false, &mut t), TT_ERR_TABLE);
        assert!(last_error().contains("junk.db"), "{}", last_error());
    }
}

#[test]
fn text_tokens_chat_logits_and_perplexity() {
    let dir = tempfile::tempdir().unwrap();
    let table = no_table(dir.path());
    let m = load(&tiny_model(dir.path()), 1, table);
    let ids = tokenize(m, "ab abc");
    assert_eq!(ids, [BOS, 27, 26, 28]);
    let mut out = null_mut();
    // SAFETY: valid pointers; owned results freed by the helpers.
    unsafe {
        assert_eq!(
            tt_detokenize(m, ids.as_ptr(), ids.len(), true, &mut out),
            TT_OK
        );
        assert_eq!(take_string(out), "ab abc");
        assert_eq!(tt_model_info_json(m, &mut out), TT_OK);
        let info: serde_json::Value = serde_json::from_str(&take_string(out)).unwrap();
        assert_eq!(info["vocab"], 31);
        assert_eq!(info["has_tokenizer"], true);
        assert_eq!(info["eog"], serde_json::json!([EOS]));
        assert_eq!(tt_model_plan(m, true, &mut out), TT_OK);
        let plan: serde_json::Value = serde_json::from_str(&take_string(out)).unwrap();
        assert!(
            plan["entries"].as_array().is_some_and(|e| !e.is_empty()),
            "{plan}"
        );
        assert_eq!(tt_model_plan(m, false, &mut out), TT_OK);
        assert!(take_string(out).contains("default"));

        let (role, content) = (c"user", c"ab");
        let msg = TtChatMessage {
            role: role.as_ptr(),
            content: content.as_ptr(),
        };
        assert_eq!(tt_chat_apply_template(m, &msg, 1, true, &mut out), TT_OK);
        let text = take_string(out);
        assert!(text.contains("<|im_start|>user\nab<|im_end|>"), "{text}");
        // ChatML's markers are not in this vocabulary: an error that says so.
        let (mut ids, mut n) = (null_mut(), 0usize);
        assert_eq!(tt_chat_tokenize(m, &msg, 1, &mut ids, &mut n), TT_ERR_MODEL);
        assert!(last_error().starts_with("tokenizer: "), "{}", last_error());
        assert!(ids.is_null() && n == 0);

        // Logits of every position, handed over whole.
        let prompt = [BOS, 27, 26, 28];
        let (mut l, mut nl) = (null_mut(), 0usize);
        assert_eq!(
            tt_model_logits(m, prompt.as_ptr(), 4, &mut l, &mut nl),
            TT_OK
        );
        assert_eq!(nl, 4 * 31);
        let all = std::slice::from_raw_parts(l, nl).to_vec();
        tt_floats_free(l, nl);
        // A session's step-by-step logits pick the same greedy tokens.
        let mut s = null_mut();
        assert_eq!(tt_session_new(m, &mut s), TT_OK);
        assert_eq!(tt_session_eval(s, prompt.as_ptr(), 4), TT_OK);
        assert_eq!(session_len(s), 4);
        let (mut lp, mut ln) = (null(), 0usize);
        assert_eq!(tt_session_logits(s, &mut lp, &mut ln), TT_OK);
        let last = std::slice::from_raw_parts(lp, ln);
        let argmax = |v: &[f32]| {
            (0..v.len())
                .max_by(|&a, &b| v[a].total_cmp(&v[b]).then(b.cmp(&a)))
                .unwrap() as u32
        };
        assert_eq!(argmax(last), argmax(&all[3 * 31..]));
        let mut sampler = null_mut();
        assert_eq!(tt_sampler_new(&greedy(1).sampler, &mut sampler), TT_OK);
        let mut tok = 0;
        assert_eq!(
            tt_sampler_sample(sampler, lp, ln, prompt.as_ptr(), 4, &mut tok),
            TT_OK
        );
        assert_eq!(tok, argmax(last));
        tt_sampler_free(sampler);
        assert_eq!(tt_session_truncate(s, 2), TT_OK);
        assert_eq!(session_len(s), 2);
        tt_session_free(s);

        let text = CString::new("abc ab a b c ".repeat(30)).unwrap();
        let mut p = std::mem::zeroed::<TtPerplexity>();
        assert_eq!(tt_model_perplexity(m, text.as_ptr(), 16, 3, &mut p), TT_OK);
        assert_eq!((p.chunks, p.ctx, p.scored), (3, 16, 3 * 7));
        assert!(p.ppl.is_finite() && p.ppl > 1.0, "{}", p.ppl);

        assert_eq!(tt_probe_json(&mut out), TT_OK);
        let soc: serde_json::Value = serde_json::from_str(&take_string(out)).unwrap();
        assert!(soc["fingerprint"].is_string(), "{soc}");
        tt_model_free(m);
        tt_table_free(table);
    }
}

/// The streamed callback's tokens and text.
#[derive(Default)]
struct Seen {
    ids: Vec<u32>,
    text: String,
    stop_after: usize,
    /// A session to use from inside the callback, and what that returned.
    reenter: Option<*mut TtSession>,
    reentered: Vec<i32>,
}

unsafe extern "C" fn on_token(
    user: *mut c_void,
    token: u32,
    text: *const c_char,
    len: usize,
) -> i32 {
    // SAFETY: `user` is the test's `Seen`; `text` holds `len` bytes.
    unsafe {
        let seen = &mut *user.cast::<Seen>();
        seen.ids.push(token);
        let bytes = std::slice::from_raw_parts(text.cast::<u8>(), len);
        seen.text.push_str(std::str::from_utf8(bytes).unwrap());
        if let Some(s) = seen.reenter {
            seen.reentered.push(tt_session_eval(s, [1u32].as_ptr(), 1));
        }
        i32::from(seen.ids.len() == seen.stop_after)
    }
}

#[test]
fn streamed_pulled_and_stopped_generations_agree() {
    let dir = tempfile::tempdir().unwrap();
    let table = no_table(dir.path());
    let m = load(&tiny_model(dir.path()), 1, table);
    let prompt = tokenize(m, "ab abc");
    let (ids, text, stop) = pull(m, &prompt, &greedy(12));
    assert_eq!(ids.len(), 12);
    assert_eq!(stop, TT_STOP_MAX_TOKENS);
    // SAFETY: valid pointers; every handle is freed.
    unsafe {
        let mut s = null_mut();
        assert_eq!(tt_session_new(m, &mut s), TT_OK);
        let mut seen = Seen::default();
        let (mut out, mut n) = (null_mut(), 0usize);
        let mut r = std::mem::zeroed::<TtGenerateResult>();
        let o = greedy(12);
        let user = (&raw mut seen).cast::<c_void>();
        let st = tt_session_generate(
            s,
            prompt.as_ptr(),
            prompt.len(),
            &o,
            Some(on_token),
            user,
            &mut out,
            &mut n,
            &mut r,
        );
        assert_eq!(st, TT_OK, "{}", last_error());
        assert_eq!(std::slice::from_raw_parts(out, n), &ids[..]);
        tt_tokens_free(out, n);
        assert_eq!(
            (seen.ids.as_slice(), seen.text.as_str()),
            (&ids[..], text.as_str())
        );
        assert_eq!((r.stop, r.n_tokens), (TT_STOP_MAX_TOKENS, 12));
        // The session kept the prompt and all but the last token.
        assert_eq!(session_len(s), prompt.len() + 11);

        // The callback stops it after 3 tokens; the session used from
        // inside its own callback is busy, not deadlocked.
        assert_eq!(tt_session_truncate(s, 0), TT_OK);
        let mut seen = Seen {
            stop_after: 3,
            reenter: Some(s),
            ..Seen::default()
        };
        let user = (&raw mut seen).cast::<c_void>();
        let st = tt_session_generate(
            s,
            prompt.as_ptr(),
            prompt.len(),
            &o,
            Some(on_token),
            user,
            null_mut(),
            null_mut(),
            &mut r,
        );
        assert_eq!(st, TT_OK);
        assert_eq!(seen.ids, ids[..3]);
        assert_eq!((r.stop, r.n_tokens), (TT_STOP_INTERRUPTED, 3));
        assert_eq!(seen.reentered, [TT_ERR_BUSY; 3]);

        // A stop string ends it, unshown; and a raised interrupt flag ends
        // the next generation's prefill before any token.
        let first = text.chars().take(3).collect::<String>();
        let stop = CString::new(first.clone()).unwrap();
        let stops = [stop.as_ptr()];
        let mut o2 = greedy(12);
        (o2.stop_strings, o2.n_stop_strings) = (stops.as_ptr(), 1);
        let (_, t2, why) = pull(m, &prompt, &o2);
        assert_eq!(
            (t2.as_str(), why),
            ("", TT_STOP_STRING),
            "stop at {first:?} in {text:?}"
        );
        tt_session_free(s);
    }
    tt_model_free_and_table(m, table);
}

fn tt_model_free_and_table(m: *mut TtModel, t: *mut TtTable) {
    // SAFETY: live handles, freed once.
    unsafe {
        tt_model_free(m);
        tt_table_free(t);
    }
}

/// A session keeps its model, and a generation its session, after the
/// caller frees them: the generation goes on and gives what it would have.
#[test]
fn handles_outlive_what_made_them() {
    let dir = tempfile::tempdir().unwrap();
    let table = no_table(dir.path());
    let m = load(&tiny_model(dir.path()), 1, table);
    let prompt = tokenize(m, "abc");
    let (want, _, _) = pull(m, &prompt, &greedy(6));
    // SAFETY: valid pointers; each handle freed once, in the "wrong" order.
    unsafe {
        let (mut s, mut g) = (null_mut(), null_mut());
        assert_eq!(tt_session_new(m, &mut s), TT_OK);
        tt_model_free(m);
        tt_table_free(table);
        let o = greedy(6);
        assert_eq!(
            tt_generation_start(s, prompt.as_ptr(), prompt.len(), &o, &mut g),
            TT_OK
        );
        tt_session_free(s);
        let mut got = Vec::new();
        let mut step = std::mem::zeroed::<TtStep>();
        loop {
            assert_eq!(tt_generation_next(g, &mut step), TT_OK);
            got.extend(step.has_token.then_some(step.token));
            if step.stop != TT_STOP_NONE {
                break;
            }
        }
        // After the end, a step says so again and holds no token.
        assert_eq!(tt_generation_next(g, &mut step), TT_OK);
        assert!(!step.has_token && step.stop == TT_STOP_MAX_TOKENS);
        tt_generation_free(g);
        assert_eq!(got, want);
    }
}

/// Two sessions of one model (two worker threads each) generate on two
/// threads at once, many times, and each gives what it gives alone.
#[test]
fn two_sessions_on_one_model_run_on_two_threads() {
    let dir = tempfile::tempdir().unwrap();
    let table = no_table(dir.path());
    let m = load(&tiny_model(dir.path()), 2, table);
    let prompts = [tokenize(m, "ab"), tokenize(m, "c b a")];
    let alone: Vec<Vec<u32>> = prompts.iter().map(|p| pull(m, p, &greedy(20)).0).collect();
    assert_ne!(alone[0], alone[1]);
    struct Shared(*mut TtModel);
    // SAFETY: the ABI states a model may be used from any thread at once.
    unsafe impl Sync for Shared {}
    let shared = Shared(m);
    std::thread::scope(|sc| {
        for (p, want) in prompts.iter().zip(&alone) {
            let shared = &shared;
            sc.spawn(move || {
                for _ in 0..15 {
                    assert_eq!(&pull(shared.0, p, &greedy(20)).0, want);
                }
            });
        }
    });
    tt_model_free_and_table(m, table);
}

/// A progress callback that pushes each event's kind and text onto the
/// `Vec<(i32, String)>` its `user` points to.
unsafe extern "C" fn record_event(user: *mut c_void, p: *const TtProgress) {
    // SAFETY: the test's event list, and an event valid during the call.
    unsafe {
        (*user.cast::<Vec<(i32, String)>>()).push((
            (*p).kind,
            std::ffi::CStr::from_ptr((*p).text)
                .to_string_lossy()
                .into_owned(),
        ))
    };
}

/// A progress callback that stops the campaign its `user` points to when
/// the search has ended (`TT_PROGRESS_MEASURED`).
unsafe extern "C" fn stop_when_searched(user: *mut c_void, p: *const TtProgress) {
    // SAFETY: the test's campaign, and an event valid during the call.
    unsafe {
        if (*p).kind == TT_PROGRESS_MEASURED {
            assert_eq!(tt_campaign_stop(user.cast::<TtCampaign>()), TT_OK);
        }
    }
}

/// A `tune --model` campaign through the ABI: progress events in order,
/// a report with both phases' verdicts, and a model loaded with the table
/// afterwards plans with them.
#[test]
fn a_model_campaign_reports_progress_and_verdicts() {
    if under_qemu() {
        eprintln!("skipped under qemu-user: timings there mean nothing and take minutes");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let db = CString::new(dir.path().join("tuned.db").to_str().unwrap()).unwrap();
    let path = CString::new(model.to_str().unwrap()).unwrap();
    let workload = c"pp16,tg8";
    // SAFETY: valid pointers; every handle freed once.
    unsafe {
        let mut t = null_mut();
        assert_eq!(tt_table_open(db.as_ptr(), true, &mut t), TT_OK);
        let mut o = std::mem::zeroed::<TtTuneOptions>();
        assert_eq!(tt_tune_options_default(&mut o), TT_OK);
        let mut c = null_mut();
        assert_eq!(tt_campaign_new(&o, &mut c), TT_ERR_NULL);
        (o.model, o.table, o.workload) = (path.as_ptr(), t, workload.as_ptr());
        (o.budget_seconds, o.threads) = (2.0, 2);
        o.rounds = 1;
        assert_eq!(tt_campaign_new(&o, &mut c), TT_ERR_ARGUMENT);
        assert!(last_error().contains("3 to 50"));
        o.rounds = 3;
        assert_eq!(tt_campaign_new(&o, &mut c), TT_OK);
        let mut out = null_mut();
        assert_eq!(tt_campaign_report_json(c, &mut out), TT_ERR_ARGUMENT);
        // Stopped from its callback when the search has ended: the run
        // returns TT_ERR_STOPPED with nothing to report, and running it
        // again continues the campaign (its measurements were kept).
        assert_eq!(tt_campaign_stop(null()), TT_ERR_NULL);
        let st = tt_campaign_run(c, Some(stop_when_searched), c.cast());
        assert_eq!(st, TT_ERR_STOPPED, "{}", last_error());
        assert!(
            last_error().contains("continues from them"),
            "{}",
            last_error()
        );
        assert_eq!(tt_campaign_report_json(c, &mut out), TT_ERR_ARGUMENT);
        let mut events: Vec<(i32, String)> = Vec::new();
        let st = tt_campaign_run(c, Some(record_event), (&raw mut events).cast());
        assert_eq!(st, TT_OK, "{}", last_error());
        assert!(
            events
                .iter()
                .any(|e| e.0 == TT_PROGRESS_NOTE && e.1.starts_with("resuming campaign")),
            "{events:?}"
        );
        let kinds: Vec<i32> = events.iter().map(|e| e.0).collect();
        for k in [
            TT_PROGRESS_STARTED,
            TT_PROGRESS_PROBLEM,
            TT_PROGRESS_CANDIDATE,
            TT_PROGRESS_MEASURED,
            TT_PROGRESS_JOINT,
            TT_PROGRESS_CHECK,
        ] {
            assert!(kinds.contains(&k), "no event {k} in {events:?}");
        }
        let verdicts: Vec<&String> = events
            .iter()
            .filter(|e| e.0 == TT_PROGRESS_VERDICT)
            .map(|e| &e.1)
            .collect();
        assert!(
            verdicts.iter().any(|v| v.starts_with("prefill pp16")),
            "{verdicts:?}"
        );
        assert!(
            verdicts.iter().any(|v| v.starts_with("decode tg8")),
            "{verdicts:?}"
        );
        assert_eq!(tt_campaign_run(c, None, null_mut()), TT_ERR_ARGUMENT);
        assert_eq!(tt_campaign_report_json(c, &mut out), TT_OK);
        let report: serde_json::Value = serde_json::from_str(&take_string(out)).unwrap();
        // Each phase is timed, or not timed because its tuned choices are
        // the default plan's (or nothing of it was tuned).
        let phases = |key: &str| report["model"][key].as_array().map_or(0, Vec::len);
        assert_eq!(phases("verdicts") + phases("as_default"), 2, "{report}");
        tt_campaign_free(c);

        let m = load(&model, 2, t);
        assert_eq!(tt_model_plan(m, false, &mut out), TT_OK);
        let plan = take_string(out);
        for phase in ["verdict prefill: ", "verdict decode: "] {
            let line = plan.lines().find(|l| l.starts_with(phase));
            assert!(
                line.is_some_and(|l| l.contains("over 3 alternated rounds")
                    || l.contains("each the default plan's (nothing to time)")
                    || l.contains("nothing tuned")),
                "{plan}"
            );
        }
        assert_eq!(tt_table_export_json(t, &mut out), TT_OK);
        let export: serde_json::Value = serde_json::from_str(&take_string(out)).unwrap();
        assert_eq!(
            export[0]["verdicts"].as_array().map_or(0, Vec::len),
            phases("verdicts"),
            "{export}"
        );
        tt_model_free_and_table(m, t);
    }
}

/// A campaign stopped after its search, whose check has nothing to time
/// (a budget too short to select anything leaves the default plan in
/// every phase), returns `TT_ERR_STOPPED` all the same, and the same
/// campaign run again resumes and ends: the flag is read between the
/// search and the check, not only by the check's rounds.
#[test]
fn a_stop_after_the_search_holds_when_the_check_times_nothing() {
    if under_qemu() {
        eprintln!("skipped under qemu-user: timings there mean nothing and take minutes");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let db = CString::new(dir.path().join("tuned.db").to_str().unwrap()).unwrap();
    let path = CString::new(model.to_str().unwrap()).unwrap();
    // SAFETY: valid pointers; every handle freed once.
    unsafe {
        let mut t = null_mut();
        assert_eq!(tt_table_open(db.as_ptr(), true, &mut t), TT_OK);
        let mut o = std::mem::zeroed::<TtTuneOptions>();
        assert_eq!(tt_tune_options_default(&mut o), TT_OK);
        (o.model, o.table, o.workload) = (path.as_ptr(), t, c"pp16,tg8".as_ptr());
        (o.budget_seconds, o.threads) = (1e-6, 1);
        let mut c = null_mut();
        assert_eq!(tt_campaign_new(&o, &mut c), TT_OK);
        let st = tt_campaign_run(c, Some(stop_when_searched), c.cast());
        assert_eq!(st, TT_ERR_STOPPED, "the run ended with {st}");
        let mut events: Vec<(i32, String)> = Vec::new();
        let st = tt_campaign_run(c, Some(record_event), (&raw mut events).cast());
        assert_eq!(st, TT_OK, "{}", last_error());
        assert!(
            events
                .iter()
                .any(|e| e.0 == TT_PROGRESS_NOTE && e.1.starts_with("resuming campaign")),
            "{events:?}"
        );
        // The case this test is for: nothing was timed.
        assert!(
            events
                .iter()
                .any(|e| e.0 == TT_PROGRESS_CHECK && e.1.starts_with("nothing to time")),
            "{events:?}"
        );
        tt_campaign_free(c);
        tt_table_free(t);
    }
}
