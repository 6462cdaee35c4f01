//! `tiletune bench model --image`: the vision tower's encode time for each
//! picture and thread count, beside the prefill and decode tests. The
//! picture is preprocessed once (its time reported on its own) and the
//! tower alone is timed, as llama.cpp's `llama-mtmd-cli` reports "image
//! slice encoded in N ms", over the same repetitions as the other tests
//! after one warm-up; the GEMM / attention / rest shares come from the
//! tower's own profile ([`EncodeProfile`]), summed over the timed runs.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tiletune_runtime::engine::Engine;
use tiletune_runtime::vision::EncodeProfile;
use tiletune_runtime::vision::image::{Rgb, preprocess, read_rgb};

/// One picture's timing at one thread count.
pub struct ImageTiming {
    pub path: PathBuf,
    pub size: (usize, usize),
    pub threads: usize,
    pub tokens: usize,
    pub preprocess: Duration,
    pub samples: Vec<Duration>,
    pub profile: EncodeProfile,
}

impl ImageTiming {
    fn ms(&self) -> (f64, f64) {
        let v: Vec<f64> = self.samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (v.len().max(2) - 1) as f64;
        (mean, var.sqrt())
    }

    fn shares(&self) -> [f64; 3] {
        let p = &self.profile;
        let t = p.total.as_secs_f64().max(1e-12);
        [p.gemm, p.attention, p.rest()].map(|d| 100.0 * d.as_secs_f64() / t)
    }
}

/// Reads the `--image` files.
pub fn read_all(paths: &[PathBuf]) -> anyhow::Result<Vec<(PathBuf, Rgb)>> {
    paths
        .iter()
        .map(|p| Ok((p.clone(), read_rgb(p)?)))
        .collect()
}

/// Times the tower of `l` on `img`: a warm-up (unless `warmup` is false),
/// then `reps` timed encodes.
pub fn time_image(
    l: &Engine,
    path: &Path,
    img: &Rgb,
    reps: usize,
    warmup: bool,
) -> anyhow::Result<ImageTiming> {
    let v = l.vision.as_ref().ok_or_else(|| {
        anyhow::anyhow!(
            "--image needs a vision model: pass --mmproj FILE (llama.cpp's two-file form) or a Qwen2.5-VL folder"
        )
    })?;
    let t0 = Instant::now();
    let px = preprocess(img, &v.config().pre)?;
    let preprocess = t0.elapsed();
    if warmup {
        v.encode(&px)?;
    }
    let mut samples = Vec::with_capacity(reps);
    let mut profile = EncodeProfile::default();
    let mut tokens = 0;
    for _ in 0..reps {
        let t = Instant::now();
        let e = v.encode(&px)?;
        samples.push(t.elapsed());
        tokens = e.tokens(v.config().out_hidden);
        profile.gemm += e.profile.gemm;
        profile.attention += e.profile.attention;
        profile.total += e.profile.total;
    }
    Ok(ImageTiming {
        path: path.to_path_buf(),
        size: (img.width, img.height),
        threads: l.plan.threads,
        tokens,
        preprocess,
        samples,
        profile,
    })
}

/// Prints the timings: a Markdown table (`md`), else one JSON object a
/// line with llama-bench-like field names (`avg_ms`, `stddev_ms`,
/// `samples_ns`).
pub fn print(out: &mut impl Write, format: &str, rows: &[ImageTiming]) -> anyhow::Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    if format == "md" {
        writeln!(out)?;
        writeln!(
            out,
            "| image | size | threads | tokens | preprocess ms | encode ms | gemm % | attention % | rest % |"
        )?;
        writeln!(
            out,
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
        )?;
        for r in rows {
            let (m, s) = r.ms();
            let [g, a, o] = r.shares();
            writeln!(
                out,
                "| {} | {}x{} | {} | {} | {:.1} | {m:.1} ± {s:.1} | {g:.1} | {a:.1} | {o:.1} |",
                r.path.display(),
                r.size.0,
                r.size.1,
                r.threads,
                r.tokens,
                r.preprocess.as_secs_f64() * 1e3
            )?;
        }
        return Ok(());
    }
    for r in rows {
        let (m, s) = r.ms();
        let [g, a, o] = r.shares();
        let doc = serde_json::json!({
            "test": "image_encode",
            "image": r.path.display().to_string(),
            "width": r.size.0,
            "height": r.size.1,
            "n_threads": r.threads,
            "tokens": r.tokens,
            "preprocess_ms": r.preprocess.as_secs_f64() * 1e3,
            "avg_ms": m,
            "stddev_ms": s,
            "samples_ns": r.samples.iter().map(|d| d.as_nanos() as u64).collect::<Vec<_>>(),
            "gemm_pct": g,
            "attention_pct": a,
            "rest_pct": o,
        });
        writeln!(out, "{doc}")?;
    }
    Ok(())
}
