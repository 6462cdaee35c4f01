//! The report in a real browser: a selector table filled through the tables
//! API with realistic rows (an Arm SoC with hardware counters, GEMV and GEMM
//! sweeps, ceilings, peer speeds and perplexities) becomes a report, and
//! headless Chromium renders it. An injected script checks that every plot
//! drew (an `<svg>` with shapes and a non-zero bounding box), that no two
//! texts of the roofline or a heatmap overlap (ten crowded points, x values
//! wider than their cells), that a 1.02× speedup bar is visibly longer than
//! a 1.00× one, that nothing
//! logged an error or loaded a resource (the page must be self-contained),
//! and that hostile text was shown as text. A PNG screenshot for humans is
//! written under the target directory (`target/tmp/report_browser/`).
//!
//! Gated on a browser: `chromium` or `chromium-browser` on PATH, or the
//! `CHROMIUM` environment variable (Debian package `chromium`; `scripts/setup`
//! installs it). Without one, or under qemu-user (which cannot run the x86
//! browser from an emulated test), the test reports a skip.

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use tiletune_reports::ReportBuilder;
use tiletune_tables::{
    Campaign, Candidate, Ceiling, Measurement, MeasurementStats, PeerResult, Problem, Selection,
    SelectorDb, SocRecord, Work,
};

const SOC: &str = "5e1ec7ab1e5eed00";
const HOSTILE: &str = "<b>evil</b> & \"quoted\" <script>document.title='pwned'</script>";

fn find_chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CHROMIUM").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|d| ["chromium", "chromium-browser"].map(|n| d.join(n)))
        .find(|p| p.is_file())
}

fn probe() -> Value {
    let cache = |level: u32, kind: &str, kib: u64, shared: &str| {
        json!({"level": level, "kind": kind, "size_bytes": kib * 1024, "line_bytes": 64,
               "ways": 4, "shared_cpu_list": shared})
    };
    json!({
        "arch": "aarch64", "vendor": "ARM", "model_name": "Cortex-X3 + Cortex-A715 + Cortex-A510",
        "soc_label": "Test SoC 8550", "x86": null,
        "cores": (0..8).map(|c| json!({"cpu": c, "online": true})).collect::<Vec<_>>(),
        "clusters": [
            {"core_name": "Cortex-A510", "cpus": [0, 1, 2], "max_freq_khz": 2016000,
             "caches": [cache(1, "data", 32, "0"), cache(2, "unified", 128, "0-1"), cache(3, "unified", 8192, "0-7")]},
            {"core_name": "Cortex-A715", "cpus": [3, 4, 5, 6], "max_freq_khz": 2803000,
             "caches": [cache(1, "data", 64, "3"), cache(2, "unified", 512, "3"), cache(3, "unified", 8192, "0-7")]},
            {"core_name": "Cortex-X3", "cpus": [7], "max_freq_khz": 3187000,
             "caches": [cache(1, "data", 64, "7"), cache(2, "unified", 1024, "7"), cache(3, "unified", 8192, "0-7")]}
        ],
        "features": ["asimd", "dotprod", "fp16", "i8mm", "bf16", "sve2"],
        "feature_source": "run_time", "mem_total_bytes": 12u64 << 30,
        "name": "Test SoC 8550 (1x Cortex-X3 + 4x Cortex-A715 + 3x Cortex-A510)",
        "fingerprint": SOC, "notes": [HOSTILE]
    })
}

/// PMUv3-style counters whose metrics move with the candidate's speed.
fn counters(quality: f64) -> Value {
    let q = quality.clamp(0.05, 1.0);
    json!({
        "counts": {"backend": {"kind": "perf_hardware"}, "slots": 8, "missing": [], "notes": [],
                   "values": {"CPU_CYCLES": {"raw": 1_000_000, "scaled": 1.0e6, "multiplexed": false}}},
        "metrics": {
            "ipc": 0.6 + 2.4 * q, "l1d_miss_rate": 0.02 + 0.2 * (1.0 - q),
            "l2_miss_rate": 0.1 + 0.5 * (1.0 - q), "llc_miss_rate": null, "branch_mpki": 0.3,
            "frontend_stall_share": 0.05, "backend_stall_share": 0.7 - 0.5 * q, "simd_share": 0.4 + 0.5 * q,
            "topdown": {"retiring": 0.2 + 0.5 * q, "frontend_bound": 0.05,
                        "backend_bound": 0.7 - 0.5 * q, "bad_speculation": 0.05},
            "task_clock_ns": 1.0e5
        },
        "fallback": null
    })
}

struct Tuned {
    problem: Problem,
    /// The work model the tuner stores with each measurement.
    work: Work,
    /// (candidate, median ns)
    runs: Vec<(Candidate, f64)>,
    default: usize,
    /// The default's time when it is not among `runs`.
    default_ns: Option<f64>,
    /// Whether the runs carry hardware counters.
    counters: bool,
}

fn gemv_sweep() -> Tuned {
    let problem = Problem::new("gemv", "q4_0", [("n", 4864), ("k", 896)]).unwrap();
    let mut runs = Vec::new();
    // W·A32 on NEON, W·A8 on NEON and with `sdot`: the winner does int8 work.
    for variant in ["neon.a32", "neon.a8", "neon_dotprod.a8"] {
        for rpb in [1, 2, 4, 8] {
            for threads in [1, 2, 4, 8] {
                let v = match variant {
                    "neon.a32" => 1.0,
                    "neon.a8" => 0.7,
                    _ => 0.6,
                };
                let t = 900_000.0 * v / (threads as f64).powf(0.8)
                    * (1.0 + 0.08 * (rpb as f64 - 2.0).abs());
                runs.push((
                    Candidate::new(variant, json!({"rows_per_block": rpb}), threads).unwrap(),
                    t,
                ));
            }
        }
    }
    // The default: neon.a32, rows_per_block 2, 8 threads.
    let default = runs
        .iter()
        .position(|(c, _)| {
            c.variant() == "neon.a32" && c.threads() == 8 && c.params()["rows_per_block"] == 2
        })
        .unwrap();
    // 2·n·k flops; the Q4_0 weights (18 bytes per 32) and f32 x and y.
    let work = Work {
        bytes: 4864 * 896 * 18 / 32 + 4 * (4864 + 896),
        flops: 2 * 4864 * 896,
    };
    Tuned {
        problem,
        work,
        runs,
        default,
        default_ns: None,
        counters: true,
    }
}

fn gemm_sweep() -> Tuned {
    let problem = Problem::new("gemm", "f32", [("m", 64), ("n", 896), ("k", 896)]).unwrap();
    let mut runs = Vec::new();
    for mr in [4, 6, 8] {
        for nr in [8, 12, 16, 24] {
            let penalty = ((mr * nr) as f64 - 96.0).abs() / 96.0;
            let t = 4.0e6 * (1.0 + penalty);
            runs.push((
                Candidate::new("neon", json!({"mr": mr, "nr": nr, "kc": 256}), 4).unwrap(),
                t,
            ));
        }
    }
    let default = runs
        .iter()
        .position(|(c, _)| c.params()["mr"] == 4 && c.params()["nr"] == 16)
        .unwrap();
    // 2·m·n·k flops; f32 weights once, A in and C out.
    let work = Work {
        bytes: 4 * (896 * 896 + 64 * 896 + 64 * 896),
        flops: 2 * 64 * 896 * 896,
    };
    Tuned {
        problem,
        work,
        runs,
        default,
        default_ns: None,
        counters: true,
    }
}

/// A quantized GEMM on `smmla` over 16 tile shapes with long names: the
/// heatmap's x labels are wider than its cells.
fn wide_sweep() -> Tuned {
    let problem = Problem::new("gemm", "q4_0", [("m", 16), ("n", 4096), ("k", 4096)]).unwrap();
    let mut runs = Vec::new();
    for mr in [1, 2, 4, 8] {
        for nr in [4, 8, 12, 16] {
            for threads in [1, 4] {
                let t = 3.0e6 / threads as f64 * (1.0 + ((mr * nr) as f64 - 32.0).abs() / 64.0);
                runs.push((
                    Candidate::new(
                        "neon_i8mm.qgemm",
                        json!({"tile": format!("mr{mr}×nr{nr}×kc256")}),
                        threads,
                    )
                    .unwrap(),
                    t,
                ));
            }
        }
    }
    let default = runs
        .iter()
        .position(|(c, _)| c.threads() == 4 && c.params()["tile"] == "mr4×nr12×kc256")
        .unwrap();
    Tuned {
        problem,
        work: Work {
            bytes: 4096 * 4096 * 18 / 32 + 4 * 16 * (4096 + 4096),
            flops: 2 * 16 * 4096 * 4096,
        },
        runs,
        default,
        default_ns: None,
        counters: false,
    }
}

/// Ten f32 GEMVs of nearly one shape: their roofline points crowd into one
/// spot, and the first two are 1.02× and 1.00× faster than their defaults.
fn crowd() -> Vec<Tuned> {
    (0..10u64)
        .map(|i| {
            let (n, k) = (4096 + 64 * i, 4096);
            let work = Work {
                bytes: 4 * (n * k + n + k),
                flops: 2 * n * k,
            };
            // About 20 GFLOP/s each, a little apart.
            let ns = work.flops as f64 / (20.0 + 0.3 * i as f64);
            let speedup = [1.02, 1.0, 1.1, 1.3, 1.05, 1.2, 1.0, 1.15, 1.01, 1.25][i as usize];
            Tuned {
                problem: Problem::new("gemv", "f32", [("n", n as usize), ("k", k as usize)])
                    .unwrap(),
                work,
                runs: vec![(
                    Candidate::new("neon", json!({"rows_per_block": 2}), 8).unwrap(),
                    ns,
                )],
                default: 0,
                default_ns: Some(ns * speedup),
                counters: false,
            }
        })
        .collect()
}

fn fill(path: &Path) -> SelectorDb {
    let mut db = SelectorDb::open(path).unwrap();
    db.register_soc(&SocRecord {
        fingerprint: SOC.into(),
        name: "Test SoC 8550".into(),
        probe: probe(),
        first_seen: 1_790_000_000,
    })
    .unwrap();
    let campaign = Campaign::new(SOC, "0.1.0", 1, "descent");
    db.start_campaign(&campaign).unwrap();
    let all = [gemv_sweep(), gemm_sweep(), wide_sweep()]
        .into_iter()
        .chain(crowd());
    for tuned in all {
        let best = tuned.runs.iter().map(|r| r.1).fold(f64::INFINITY, f64::min);
        let mut ms: Vec<Measurement> = tuned
            .runs
            .iter()
            .map(|(c, ns)| Measurement {
                campaign: campaign.id.clone(),
                soc: SOC.into(),
                kernel_abi: 1,
                problem: tuned.problem.clone(),
                candidate: c.clone(),
                median_ns: Some(*ns),
                stats: MeasurementStats {
                    median_ns: Some(*ns),
                    mad_ns: Some(ns * 0.01),
                    samples: Some(30),
                    fidelity: Some(3),
                    work: Some(tuned.work),
                    ..MeasurementStats::default()
                },
                counters: if tuned.counters {
                    counters(best / ns)
                } else {
                    Value::Null
                },
                valid: true,
                invalid_reason: None,
                measured_at: 1_790_000_100,
            })
            .collect();
        // One candidate that failed validation: never timed, never selected.
        ms.push(Measurement {
            candidate: Candidate::new("neon", json!({"rows_per_block": 16}), 1).unwrap(),
            median_ns: None,
            counters: Value::Null,
            valid: false,
            invalid_reason: Some("max error 3e-2 over tolerance 1e-5".into()),
            ..ms[0].clone()
        });
        db.insert_measurements(&ms).unwrap();
        let (winner, median) = tuned
            .runs
            .iter()
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap()
            .clone();
        db.put_selection(&Selection {
            soc: SOC.into(),
            kernel_abi: 1,
            problem: tuned.problem.clone(),
            thread_budget: 8,
            winner,
            median_ns: median,
            default_ns: Some(tuned.default_ns.unwrap_or(tuned.runs[tuned.default].1)),
            speedup: None,
            campaign: Some(campaign.id.clone()),
            selected_at: 1_790_000_200,
        })
        .unwrap();
    }
    for (kind, threads, value, unit) in [
        ("mem_bw_copy", 1, 18.0, "GB/s"),
        ("mem_bw_triad", 1, 20.5, "GB/s"),
        ("mem_bw_triad", 8, 58.0, "GB/s"),
        ("fma_peak_neon", 1, 48.0, "GFLOP/s"),
        ("fma_peak_neon", 8, 260.0, "GFLOP/s"),
        ("fma_peak_scalar", 8, 31.0, "GFLOP/s"),
        ("int8_peak_neon_dotprod", 8, 1040.0, "GOP/s"),
        ("int8_peak_neon_i8mm", 8, 2080.0, "GOP/s"),
    ] {
        db.put_ceiling(&Ceiling {
            soc: SOC.into(),
            kind: kind.into(),
            threads,
            value,
            unit: unit.into(),
            campaign: None,
            measured_at: 1_790_000_300,
        })
        .unwrap();
    }
    let mut peer =
        |model: &str, engine: &str, test: &str, threads: usize, tps: f64, extra: Value| {
            db.put_peer_result(&PeerResult {
                soc: SOC.into(),
                model: model.into(),
                engine: engine.into(),
                engine_version: if engine == "llama.cpp" {
                    "b0c1e570".into()
                } else {
                    "0.1.0".into()
                },
                test: test.into(),
                threads,
                tokens_per_s: tps,
                std: Some(tps * 0.03),
                json: extra,
                measured_at: 1_790_000_400,
            })
            .unwrap();
        };
    for (model, scale) in [
        ("SmolLM2-135M-Instruct.Q4_1", 1.0),
        ("qwen2.5-coder-0.5b-instruct", 0.3),
    ] {
        for threads in [1, 4] {
            let t = threads as f64;
            peer(
                model,
                "tiletune",
                "pp512",
                threads,
                180.0 * scale * t,
                json!({}),
            );
            peer(
                model,
                "llama.cpp",
                "pp512",
                threads,
                210.0 * scale * t,
                json!({}),
            );
            peer(
                model,
                "tiletune",
                "tg128",
                threads,
                35.0 * scale * t.sqrt(),
                json!({}),
            );
            peer(
                model,
                "llama.cpp",
                "tg128",
                threads,
                31.0 * scale * t.sqrt(),
                json!({}),
            );
        }
        peer(
            model,
            "tiletune",
            "ppl",
            4,
            150.0,
            json!({"ppl": 18.62 / scale.sqrt(), "ppl_err": 0.41}),
        );
        peer(
            model,
            "llama.cpp",
            "ppl",
            4,
            170.0,
            json!({"ppl": 18.60 / scale.sqrt(), "ppl_err": 0.40}),
        );
    }
    peer(HOSTILE, "mnn", "tg128", 4, 12.0, json!({}));
    db
}

/// Runs the browser with a deadline; a hung browser fails the test instead
/// of hanging CI.
fn run_browser(chromium: &Path, profile: &Path, args: &[String]) -> Output {
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--no-first-run",
            "--disable-extensions",
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", chromium.display()));
    let deadline = Instant::now() + Duration::from_secs(120);
    // Drain the pipes on threads so a chatty browser cannot block on them.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut out, &mut v).ok();
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut err, &mut v).ok();
        v
    });
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            child.kill().ok();
            panic!("{} did not finish within 120 s", chromium.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Output {
        status,
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
    }
}

/// Injected at the top of <head>: no network at all (CSP), and every error,
/// console error and CSP violation is recorded before the report loads.
const HOOKS: &str = r#"<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<script>
window.__errors = [];
window.addEventListener('error', function (e) {
  window.__errors.push('error: ' + (e.message || (e.target && (e.target.src || e.target.href)) || 'resource'));
}, true);
window.addEventListener('securitypolicyviolation', function (e) {
  window.__errors.push('csp: ' + e.blockedURI + ' (' + e.violatedDirective + ')');
});
var __ce = console.error;
console.error = function () { window.__errors.push('console: ' + Array.from(arguments).join(' ')); __ce.apply(console, arguments); };
</script>"#;

/// Injected at the end of <body>: checks each plot and writes the verdict.
const CHECK: &str = r#"<script>
(function () {
  var plots = [];
  document.querySelectorAll('figure.plot').forEach(function (f) {
    var svg = f.querySelector('svg');
    var r = { id: f.getAttribute('data-plot'), svg: !!svg };
    if (svg) {
      var b = svg.getBBox();
      var c = svg.getBoundingClientRect();
      r.bbox = [b.width, b.height];
      r.client = [c.width, c.height];
      r.shapes = svg.querySelectorAll('rect,line,polyline,polygon,path,circle').length;
      r.texts = svg.querySelectorAll('text').length;
      var drawn = 0;
      svg.querySelectorAll('rect,polyline,path,circle').forEach(function (e) {
        var bb = e.getBBox();
        if (bb.width > 0 || bb.height > 0) drawn++;
      });
      r.drawn = drawn;
    }
    plots.push(r);
  });
  // Pairs of texts whose boxes overlap (more than a pixel each way) per plot.
  var overlaps = {};
  document.querySelectorAll('figure.plot').forEach(function (f) {
    var boxes = [];
    f.querySelectorAll('svg text').forEach(function (t) {
      if (!t.textContent.trim()) return;
      var r = t.getBoundingClientRect();
      if (r.width > 0 && r.height > 0) boxes.push({ t: t.textContent, r: r });
    });
    var bad = [];
    for (var i = 0; i < boxes.length; i++) {
      for (var j = i + 1; j < boxes.length; j++) {
        var a = boxes[i].r, b = boxes[j].r;
        var w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
        var h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
        if (w > 1 && h > 1) bad.push(boxes[i].t + ' / ' + boxes[j].t);
      }
    }
    overlaps[f.getAttribute('data-plot')] = { texts: boxes.length, overlapping: bad };
  });
  // The speedup bar beside each value label: the rect centred on its row.
  var bars = {};
  var sp = document.querySelector('figure.plot[data-plot="speedup"] svg');
  if (sp) {
    sp.querySelectorAll('text').forEach(function (t) {
      var label = t.textContent.trim();
      if (!/^[0-9.]+×$/.test(label) || bars[label] !== undefined) return;
      var tr = t.getBoundingClientRect();
      var cy = (tr.top + tr.bottom) / 2;
      var best = null;
      sp.querySelectorAll('rect').forEach(function (r) {
        var rr = r.getBoundingClientRect();
        if (rr.height > 40) return;
        var ry = (rr.top + rr.bottom) / 2;
        if (Math.abs(ry - cy) < 4 && (best === null || rr.width > best)) best = rr.width;
      });
      bars[label] = best === null ? 0 : best;
    });
  }
  var v = {
    overlaps: overlaps,
    bars: bars,
    plots: plots,
    errors: window.__errors,
    resources: performance.getEntriesByType('resource').map(function (e) { return e.name; }),
    scripts: document.scripts.length,
    title: document.title,
    body_text_has_hostile: document.body.innerText.indexOf('<b>evil</b>') >= 0,
    bold_elements: document.querySelectorAll('b').length,
    height: document.documentElement.scrollHeight
  };
  var pre = document.createElement('pre');
  pre.id = 'verdict';
  pre.textContent = btoa(unescape(encodeURIComponent(JSON.stringify(v))));
  document.body.appendChild(pre);
})();
</script>"#;

fn b64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let clean: Vec<u8> = s
        .bytes()
        .filter(|c| !c.is_ascii_whitespace() && *c != b'=')
        .collect();
    let mut out = Vec::new();
    for chunk in clean.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= u32::from(val(c)) << (18 - 6 * i);
        }
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    out
}

#[test]
fn every_plot_renders_in_headless_chromium() {
    if std::env::var_os("QEMU_CPU").is_some() {
        eprintln!(
            "skipped: under qemu-user the x86 browser cannot be driven from an emulated test"
        );
        return;
    }
    let Some(chromium) = find_chromium() else {
        eprintln!(
            "skipped: no chromium on PATH and CHROMIUM unset (install the Debian package `chromium`, or run scripts/setup)"
        );
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let db = fill(&tmp.path().join("selector.db"));
    let export = db.export_soc(SOC).unwrap();
    let report = ReportBuilder::new(&export)
        .tool("tiletune test")
        .generated_at(1_790_000_500)
        .build()
        .unwrap();
    let ids: Vec<String> = report.plot_ids().iter().map(|s| s.to_string()).collect();
    // roofline, speedup, 3 heatmaps (the crowd's single candidates map
    // nothing), 2 PMU charts, 3 peer charts; ids number the problems.
    assert_eq!(
        ids,
        [
            "roofline",
            "speedup",
            "heatmap-1",
            "heatmap-2",
            "heatmap-13",
            "pmu-1",
            "pmu-13",
            "peers-1",
            "peers-2",
            "peers-3"
        ]
    );

    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report_browser");
    let written = report.write_to(&out_dir).unwrap();
    let html = std::fs::read_to_string(&written.html).unwrap();
    assert!(
        !html.contains("<script"),
        "the report itself runs no script"
    );
    let check = html
        .replacen("<head>", &format!("<head>\n{HOOKS}"), 1)
        .replacen("</body>", &format!("{CHECK}\n</body>"), 1);
    let check_path = out_dir.join("check.html");
    std::fs::write(&check_path, check).unwrap();

    let profile = tmp.path().join("chromium-profile");
    let dom = run_browser(
        &chromium,
        &profile,
        &[
            "--dump-dom".to_string(),
            format!("file://{}", check_path.display()),
        ],
    );
    let stdout = String::from_utf8_lossy(&dom.stdout);
    let stderr = String::from_utf8_lossy(&dom.stderr);
    assert!(dom.status.success(), "chromium failed: {stderr}");
    let verdict = stdout
        .split("<pre id=\"verdict\">")
        .nth(1)
        .and_then(|s| s.split("</pre>").next())
        .unwrap_or_else(|| panic!("no verdict in the DOM; stderr:\n{stderr}"));
    let v: Value = serde_json::from_slice(&b64_decode(verdict)).unwrap();
    eprintln!("verdict: {v:#}");

    let plots = v["plots"].as_array().unwrap();
    let found: Vec<&str> = plots.iter().filter_map(|p| p["id"].as_str()).collect();
    assert_eq!(found, ids, "every plot is in the page once, in order");
    for p in plots {
        let id = &p["id"];
        assert_eq!(p["svg"], true, "{id}: no <svg>");
        for key in ["bbox", "client"] {
            let wh: Vec<f64> = p[key]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect();
            assert!(
                wh[0] > 100.0 && wh[1] > 100.0,
                "{id}: {key} {wh:?} is (nearly) empty"
            );
        }
        assert!(
            p["shapes"].as_u64().unwrap() >= 10,
            "{id}: too few shapes: {p}"
        );
        assert!(
            p["drawn"].as_u64().unwrap() >= 5,
            "{id}: shapes with zero size: {p}"
        );
        assert!(
            p["texts"].as_u64().unwrap() >= 3,
            "{id}: no axis labels: {p}"
        );
    }
    // Readable labels: no two texts of the roofline or a heatmap overlap,
    // on a roofline with ten points in one spot and a heatmap whose x
    // values are wider than its cells.
    for (id, o) in v["overlaps"].as_object().unwrap() {
        if id == "roofline" || id.starts_with("heatmap") {
            assert!(o["texts"].as_u64().unwrap() >= 5, "{id}: {o}");
            assert_eq!(o["overlapping"], json!([]), "{id}: labels overlap");
        }
    }
    // Tuned vs default on a useful axis: 1.02× is a bar visibly longer
    // than 1.00× (which is none), not two bars of nearly one length.
    let bar = |label: &str| {
        v["bars"][label]
            .as_f64()
            .unwrap_or_else(|| panic!("no bar labelled {label}: {}", v["bars"]))
    };
    let (b102, b100) = (bar("1.02×"), bar("1.00×"));
    assert!(
        b102 >= 6.0 && b102 >= 2.0 * b100 + 4.0,
        "1.02× bar {b102} px vs 1.00× bar {b100} px"
    );
    assert_eq!(v["errors"], json!([]), "errors while rendering");
    assert_eq!(
        v["resources"],
        json!([]),
        "the report loaded external resources"
    );
    // Only the two injected scripts exist: hostile text did not become markup.
    assert_eq!(v["scripts"], 2);
    assert_eq!(v["bold_elements"], 0);
    assert_eq!(v["body_text_has_hostile"], true);
    assert!(v["title"].as_str().unwrap().starts_with("tiletune report"));
    for line in stderr.lines() {
        assert!(
            !(line.contains("CONSOLE") && (line.contains("ERROR") || line.contains("Uncaught"))),
            "console error: {line}"
        );
    }

    // A screenshot of the whole report (not the check page) for humans.
    let height = v["height"].as_u64().unwrap_or(4000).clamp(1000, 16000);
    let png = out_dir.join("report.png");
    let _ = std::fs::remove_file(&png);
    let shot = run_browser(
        &chromium,
        &profile,
        &[
            format!("--screenshot={}", png.display()),
            format!("--window-size=1280,{height}"),
            format!("file://{}", written.html.display()),
        ],
    );
    assert!(
        shot.status.success(),
        "{}",
        String::from_utf8_lossy(&shot.stderr)
    );
    let bytes = std::fs::read(&png).unwrap();
    assert!(
        bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() > 50_000,
        "{} bytes",
        bytes.len()
    );
    eprintln!("screenshot: {}", png.display());
}
