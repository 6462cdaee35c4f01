//! `tiletune run`: load a GGUF model (or a Hugging Face folder, converted
//! once to a cached GGUF image) with its tuned execution plan, run a prompt
//! and stream the generated text, then print load time, prefill and decode
//! speed and peak memory. `--token-ids` + `--dump-logits` bypass the
//! tokenizer and write logits as JSON for checking against other
//! implementations (a model folder without `tokenizer.json` generates ids
//! from `--token-ids` too); with the global `--json` the prompt ids, generated ids,
//! text and the two largest logits of every sampling step are printed as one
//! JSON object instead of streamed text (exact ids for comparing greedy
//! output with llama.cpp, and the margins that show a near tie).
//! `--image FILE` (repeatable) runs a Qwen2.5-VL prompt: one
//! `<|image_pad|>` per image in the ids or text (the placeholders go before
//! the text when it has none), expanded to one pad per merged patch, or
//! `--token-ids` with the pads already expanded as transformers' processor
//! writes them.

use super::Global;
use super::model_args::{ModelArgs, SampleArgs, load, warn_ctx_clamped};
use anyhow::Context;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tiletune_runtime::chat::Message;
use tiletune_runtime::engine::{Engine, ImagePrompt, peak_rss_kib};
use tiletune_runtime::models::{Extra, generate_extra};
use tiletune_runtime::plan::ExecutionPlan;
use tiletune_runtime::sampling::StopCriteria;
use tiletune_runtime::vision::image::{Rgb, read_rgb};
use tiletune_runtime::vision::prompt::IMAGE_PLACEHOLDER;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub m: ModelArgs,
    /// The prompt, fed as-is (see --chat-template).
    #[arg(long, short = 'p', conflicts_with = "file")]
    pub prompt: Option<String>,
    /// A file holding the prompt (UTF-8 text, at most 1 GiB).
    #[arg(long, short = 'f', value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Tokens to generate; -1 generates until the end of text or a full
    /// context.
    #[arg(short = 'n', long = "n-predict", default_value = "64",
          allow_negative_numbers = true, value_parser = super::parse_n_predict)]
    pub n: usize,
    #[command(flatten)]
    pub s: SampleArgs,
    /// Wrap the prompt as a user turn with the model's chat template.
    #[arg(long)]
    pub chat_template: bool,
    /// Context size (KV cache positions).
    #[arg(
        long = "ctx",
        short = 'c',
        visible_alias = "ctx-size",
        default_value_t = 4096
    )]
    pub ctx: usize,
    /// Comma-separated token ids to feed instead of a prompt.
    #[arg(long, value_name = "IDS")]
    pub token_ids: Option<String>,
    /// Write the logits of every prompt position (and of each generated
    /// step) to this JSON file.
    #[arg(long, value_name = "FILE")]
    pub dump_logits: Option<PathBuf>,
    /// A PNG or JPEG picture for a vision model (repeatable, in prompt
    /// order).
    #[arg(long, value_name = "FILE")]
    pub image: Vec<PathBuf>,
}

pub fn run(g: &Global, mut args: Args) -> anyhow::Result<ExitCode> {
    args.m.resolve()?;
    let l = load(&args.m, args.ctx)?;
    warn_ctx_clamped(&l, args.ctx);
    if g.verbose {
        eprintln!("{}", l.plan.summary());
        eprintln!(
            "weights held: {:.1} MiB (quantized matrices repacked for the quantized GEMM where the format has one)",
            l.model.weight_bytes() as f64 / (1024.0 * 1024.0)
        );
    }
    eprintln!(
        "loaded {} ({} layers, {} threads) in {:.2} s",
        args.m.model.display(),
        l.cfg.n_layers,
        l.plan.threads,
        l.load_time.as_secs_f64()
    );
    let file_prompt = match &args.file {
        Some(f) => Some(tiletune_runtime::input::read_text(
            f,
            tiletune_runtime::input::TEXT_LIMIT,
        )?),
        None => None,
    };
    let mut prompt_text = args.prompt.clone().or(file_prompt);
    if !args.image.is_empty()
        && let Some(p) = &mut prompt_text
        && !p.contains("<|image_pad|>")
    {
        *p = IMAGE_PLACEHOLDER.repeat(args.image.len()) + p;
    }
    let prompt_text = prompt_text.as_ref();
    let prompt: Vec<u32> = match (&args.token_ids, prompt_text) {
        (Some(ids), _) => ids
            .split(',')
            .map(|s| s.trim().parse::<u32>())
            .collect::<Result<_, _>>()
            .context("--token-ids takes comma-separated integers, e.g. 1,2,3")?,
        (None, Some(p)) if args.chat_template => {
            let t = l.chat_template()?;
            l.encode_chat(&t.render(&[Message::new("user", p)], true)?)?
        }
        (None, Some(p)) => l.tokenizer()?.encode(p, true, true)?,
        (None, None) => anyhow::bail!("pass --prompt TEXT, --file FILE or --token-ids 1,2,3"),
    };
    if prompt.is_empty() {
        anyhow::bail!("the prompt encodes to no tokens; pass a non-empty prompt");
    }
    let images = read_images(&args.image)?;
    let mm = match images.is_empty() {
        true => None,
        false => Some(l.image_prompt(&prompt, &images, 0)?),
    };
    let refs = mm.as_ref().map(ImagePrompt::embed_refs).unwrap_or_default();
    let extra = Extra {
        embeds: &refs,
        positions: mm.as_ref().map(|p| &p.positions[..]),
    };
    let prompt = mm.as_ref().map_or(prompt.clone(), |p| p.ids.clone());
    if let Some(p) = &mm {
        eprintln!(
            "encoded {} image(s) into {} tokens in {:.1} ms",
            images.len(),
            p.image_tokens,
            p.encode_time.as_secs_f64() * 1e3
        );
    }
    if let Some(path) = &args.dump_logits {
        return dump_logits(&l, &prompt, extra, &args, path);
    }
    let mut st = l.model.new_state();
    let mut sampler = args.s.sampler()?;
    // A folder without tokenizer.json still generates ids from --token-ids:
    // no text, and the end-of-generation ids its config names.
    let tok = l.tokenizer().ok();
    let eog = tok.map_or_else(|| l.cfg.eos_ids.clone(), |t| t.eog_ids());
    let mut stop = StopCriteria::new(eog, Vec::new(), args.n);
    let mut out = std::io::stdout().lock();
    if !g.json && args.token_ids.is_none() && !args.chat_template && mm.is_none() {
        write!(out, "{}", prompt_text.map_or("", |p| p.as_str()))?;
    }
    let mut top2 = Vec::new();
    let res = generate_extra(
        &l.model,
        tok,
        &mut st,
        &prompt,
        extra,
        &mut sampler,
        &mut stop,
        |t| {
            if !g.json {
                let _ = write!(out, "{t}");
                let _ = out.flush();
            }
        },
        |logits| {
            if g.json {
                top2.push(top_two(logits));
            }
        },
    )?;
    if g.json {
        let doc = serde_json::json!({
            "prompt_ids": prompt,
            "generated_ids": res.tokens,
            "text": res.text,
            "top2": top2,
            "stop": format!("{:?}", res.stop),
            "prefill_seconds": res.prefill_time.as_secs_f64(),
            "decode_seconds": res.decode_time.as_secs_f64(),
        });
        writeln!(out, "{doc}")?;
    } else {
        writeln!(out)?;
    }
    let pf = prompt.len() as f64 / res.prefill_time.as_secs_f64().max(1e-9);
    // The first token is sampled from the prefill logits; decode steps are the rest.
    let steps = res.tokens.len().saturating_sub(1);
    let dec = steps as f64 / res.decode_time.as_secs_f64().max(1e-9);
    eprintln!(
        "load {:.2} s | plan {} | prefill {} tok in {:.3} s = {pf:.1} tok/s | decode {steps} tok in {:.3} s = {dec:.1} tok/s | peak mem {} MiB | stop: {:?}",
        l.load_time.as_secs_f64(),
        plan_source(&l.plan),
        prompt.len(),
        res.prefill_time.as_secs_f64(),
        res.decode_time.as_secs_f64(),
        peak_rss_kib().map_or("?".into(), |k| (k / 1024).to_string()),
        res.stop
    );
    Ok(ExitCode::SUCCESS)
}

/// Where the plan's choices came from, for the summary line: `default`
/// when every kernel is the default's (table choices that are their
/// defaults change nothing), `tuned` (all from the table), or the counts.
fn plan_source(p: &ExecutionPlan) -> String {
    match (p.counts(), p.differ) {
        (_, 0) => "default".into(),
        ((t, 0, 0), c) => format!("tuned ({t}, {c} not the default)"),
        ((t, n, d), c) => format!("{t} tuned, {n} nearest, {d} default, {c} not the default"),
    }
}

/// The two largest logits as `[[id, logit], [id, logit]]`, largest first
/// (ties keep the lower id first, as greedy sampling does).
fn top_two(logits: &[f32]) -> [(u32, f32); 2] {
    let mut best = [(0u32, f32::NEG_INFINITY); 2];
    for (i, &x) in logits.iter().enumerate() {
        if x > best[0].1 {
            best[1] = best[0];
            best[0] = (i as u32, x);
        } else if x > best[1].1 {
            best[1] = (i as u32, x);
        }
    }
    best
}

/// The `--image` files, decoded.
fn read_images(paths: &[PathBuf]) -> anyhow::Result<Vec<Rgb>> {
    Ok(paths
        .iter()
        .map(|p| read_rgb(p))
        .collect::<Result<_, _>>()?)
}

fn dump_logits(
    l: &Engine,
    prompt: &[u32],
    extra: Extra<'_>,
    args: &Args,
    path: &Path,
) -> anyhow::Result<ExitCode> {
    let vocab = l.cfg.vocab;
    let mut st = l.model.new_state();
    let never = std::sync::atomic::AtomicBool::new(false);
    let all = l
        .model
        .forward_extra(prompt, extra, &mut st, true, &never)?
        .context("the prompt's forward pass was stopped")?
        .to_vec();
    let prompt_logits: Vec<&[f32]> = all.chunks_exact(vocab).collect();
    let mut last = all[all.len() - vocab..].to_vec();
    let mut sampler = args.s.sampler()?;
    let mut history = prompt.to_vec();
    let mut steps = Vec::new();
    for _ in 0..args.n {
        if st.len() >= st.capacity() {
            break;
        }
        let id = sampler.sample(&last, &history)?;
        history.push(id);
        last.copy_from_slice(l.model.forward(&[id], &mut st, false)?);
        steps.push(serde_json::json!({ "token": id, "logits": last }));
    }
    let doc = serde_json::json!({
        "model": args.m.model.display().to_string(),
        "prompt": prompt,
        "vocab": vocab,
        "prompt_logits": prompt_logits,
        "generated": steps,
    });
    let f = std::fs::File::create(path)
        .with_context(|| format!("cannot create {}; check the directory", path.display()))?;
    serde_json::to_writer(std::io::BufWriter::new(f), &doc)?;
    eprintln!(
        "wrote logits of {} prompt positions and {} generated steps to {}",
        prompt.len(),
        history.len() - prompt.len(),
        path.display()
    );
    Ok(ExitCode::SUCCESS)
}
