//! `tiletune run`: load a GGUF model (or a Hugging Face folder, converted once to a cached GGUF image) with its tuned execution plan, run a
//! prompt and stream the generated text, then print load time, prefill and
//! decode speed and peak memory. `--token-ids` + `--dump-logits` bypass the
//! tokenizer and write logits as JSON for checking against other
//! implementations; with the global `--json` the prompt ids, generated ids,
//! text and the two largest logits of every sampling step are printed as one
//! JSON object instead of streamed text (exact ids for comparing greedy
//! output with llama.cpp, and the margins that show a near tie). Also holds the model loading shared by `plan`, `ppl`
//! and `chat`.

use super::Global;
use anyhow::Context;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tiletune_kernels::attention::KvDtype;
use tiletune_kernels::qgemv::QMode;
use tiletune_runtime::GgufFile;
use tiletune_runtime::chat::{ChatTemplate, Message};
use tiletune_runtime::config::ModelConfig;
use tiletune_runtime::convert::{cached_gguf, default_cache_dir};
use tiletune_runtime::models::{FastModel, generate_fast};
use tiletune_runtime::plan::{ExecutionPlan, PlanOptions, TableState, this_soc};
use tiletune_runtime::quantize::FileType;
use tiletune_runtime::sampling::{Sampler, SamplerConfig, StopCriteria};
use tiletune_runtime::tokenizer::Tokenizer;

/// Model and plan flags shared by `run`, `plan`, `ppl` and `chat`.
#[derive(Debug, Clone, clap::Args)]
pub struct ModelArgs {
    /// GGUF model file, or a Hugging Face model folder (config.json +
    /// *.safetensors, tokenizer.json for text): the folder is converted once
    /// to a GGUF image cached under $XDG_CACHE_HOME/tiletune/converted.
    #[arg(long, short = 'm', value_name = "FILE|DIR")]
    pub model: PathBuf,
    /// File type when converting a Hugging Face folder, as `tiletune
    /// quantize` takes it (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
    /// Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K, MXFP4) with its per-tensor choices (default: keep the
    /// checkpoint's f32/f16; bf16 becomes f32). Ignored for GGUF files.
    #[arg(long, value_parser = FileType::parse, value_name = "TYPE")]
    pub quant: Option<FileType>,
    /// Selector table (default: the user's table, see `tiletune table`).
    #[arg(long, value_name = "PATH")]
    pub db: Option<PathBuf>,
    /// Worker threads, also the table's thread budget (default: online cores).
    #[arg(long, short = 't', value_parser = super::parse_threads)]
    pub threads: Option<usize>,
    /// Force the activation mode of quantized weights: `a8` (8-bit
    /// activations, integer dot products) or `a32` (f32 activations).
    #[arg(long, value_parser = parse_qmode)]
    pub qmode: Option<QMode>,
    /// KV cache page type: f32, f16 or q8_0 (q8_0 needs a head size that
    /// is a multiple of 32). f32 is the default because it is the accurate
    /// one: teacher-forced on llama.cpp's greedy tokens for SmolLM2, f32
    /// pages stay within 0.02 logits of llama.cpp's picks, f16 pages drift
    /// up to 0.2 (tests/real_models_llamacpp.rs). f16 halves the cache
    /// memory and traffic (llama.cpp's default type); q8_0 quarters it.
    #[arg(long, value_parser = parse_kv_type, default_value = "f32")]
    pub kv_type: KvDtype,
}

/// A `--kv-type` value.
pub fn parse_kv_type(s: &str) -> Result<KvDtype, String> {
    KvDtype::ALL
        .into_iter()
        .find(|d| d.name() == s.to_ascii_lowercase())
        .ok_or_else(|| format!("`{s}` is not a KV cache type; use f32, f16 or q8_0"))
}

fn parse_qmode(s: &str) -> Result<QMode, String> {
    match s {
        "a8" => Ok(QMode::A8),
        "a32" => Ok(QMode::A32),
        _ => Err(format!("`{s}` is not a mode; use a8 or a32")),
    }
}

/// A loaded model with everything needed to run it.
pub struct Loaded {
    pub gguf: GgufFile,
    pub cfg: ModelConfig,
    /// `None` for a Hugging Face folder without tokenizer.json.
    tokenizer: Option<Tokenizer>,
    pub plan: ExecutionPlan,
    pub model: FastModel,
    pub load_time: Duration,
}

impl Loaded {
    /// The tokenizer, or an error saying how to get one.
    pub fn tok(&self) -> anyhow::Result<&Tokenizer> {
        self.tokenizer.as_ref().ok_or_else(|| {
            anyhow::anyhow!(
                "the model folder has no tokenizer.json; copy it from the model repository, or pass --token-ids"
            )
        })
    }
}

/// The execution plan of the model in `a` on this machine.
pub fn plan_for(a: &ModelArgs, g: &GgufFile) -> anyhow::Result<ExecutionPlan> {
    // The plan of a file the runtime could not load would be a lie: check
    // its meaning (dims, heads, layers) and its tensors first.
    let cfg = ModelConfig::from_gguf(g)?;
    tiletune_runtime::models::check_tensors(&cfg, g)?;
    let (soc, caps) = this_soc();
    let opts = PlanOptions {
        db: a.db.clone(),
        threads: a.threads.unwrap_or(caps.cores).max(1),
        qmode: a.qmode,
    };
    super::warn_oversubscribed(opts.threads);
    let problems = tiletune_runtime::problems::kernel_problems(g)?;
    let plan = ExecutionPlan::build(&problems, &soc, &caps, &opts);
    // An unusable table, or one asked for by path that is not there, is
    // one line on stderr: the model still runs, on the default plan.
    match plan.table {
        TableState::Unusable => eprintln!(
            "warning: selector table {}: {}; running the default plan",
            plan.db_path.display(),
            plan.db_status
        ),
        TableState::Missing if a.db.is_some() => eprintln!(
            "warning: selector table {} does not exist; running the default plan",
            plan.db_path.display()
        ),
        _ => {}
    }
    Ok(plan)
}

/// The model's GGUF file; a Hugging Face folder is converted (with
/// `--quant`) to a GGUF image in the cache first, or its cached image reused.
pub fn open_gguf(a: &ModelArgs) -> anyhow::Result<GgufFile> {
    if !a.model.is_dir() {
        return Ok(GgufFile::open(&a.model)?);
    }
    let path = cached_gguf(&a.model, a.quant, &default_cache_dir())
        .with_context(|| format!("cannot convert the model folder {}", a.model.display()))?;
    Ok(GgufFile::open(&path)?)
}

/// Opens the model, plans it and builds the fast decoder for `ctx` positions.
pub fn load(a: &ModelArgs, ctx: usize) -> anyhow::Result<Loaded> {
    let t0 = Instant::now();
    let gguf = open_gguf(a)?;
    let tokenizer = if a.model.is_dir() {
        let tok_path = a.model.join("tokenizer.json");
        match tok_path.is_file() {
            true => Some(Tokenizer::from_json_file(&tok_path)?),
            false => None,
        }
    } else {
        Some(Tokenizer::from_gguf(&gguf)?)
    };
    let cfg = ModelConfig::from_gguf(&gguf)?;
    let plan = plan_for(a, &gguf)?;
    // Pin this thread and the kernel pools the way the plan's placements
    // were tuned (a no-op unless the table holds pinned winners).
    if let Err(e) = plan.apply_placement() {
        eprintln!(
            "warning: could not pin threads to {:?} ({e}); running unpinned",
            plan.pinned_cpus
        );
    }
    let model = FastModel::new(&cfg, &gguf, &plan, ctx)?.with_kv_dtype(a.kv_type)?;
    Ok(Loaded {
        gguf,
        cfg,
        tokenizer,
        plan,
        model,
        load_time: t0.elapsed(),
    })
}

/// Encodes rendered chat text: control tokens are parsed, and BOS is added
/// only if the model wants it and the template did not write it.
pub fn encode_chat(tok: &Tokenizer, text: &str) -> anyhow::Result<Vec<u32>> {
    let has_bos = tok
        .bos()
        .and_then(|b| tok.token_str(b))
        .is_some_and(|s| !s.is_empty() && text.starts_with(s));
    Ok(tok.encode(text, !has_bos, true)?)
}

/// Peak resident memory (VmHWM) in KiB, if /proc says.
pub fn peak_rss_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Sampling flags shared by `run` and `chat`.
#[derive(Debug, Clone, clap::Args)]
pub struct SampleArgs {
    /// Temperature: higher is more random; 0 is greedy (the most likely
    /// token every step, and the other sampling flags are ignored).
    #[arg(long = "temp", default_value_t = 0.8)]
    pub temp: f32,
    /// Top-k sampling: keep only the k most likely tokens; 0 keeps all.
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Top-p (nucleus) sampling: keep the most likely tokens whose
    /// probabilities add up to p; 1.0 keeps all.
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Min-p sampling: drop tokens less likely than p times the most likely
    /// one; 0.0 keeps all.
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// Divide the logits of tokens already in the context by this (above 1
    /// discourages repeats); 1.0 is off.
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Seed of the sampler's random numbers: the same seed, prompt and
    /// flags give the same text.
    #[arg(long, short = 's', default_value_t = 0)]
    pub seed: u64,
}

impl SampleArgs {
    pub fn sampler(&self) -> anyhow::Result<Sampler> {
        let cfg = if self.temp == 0.0 {
            SamplerConfig {
                seed: self.seed,
                repeat_penalty: self.repeat_penalty,
                ..SamplerConfig::greedy()
            }
        } else {
            SamplerConfig {
                temperature: self.temp,
                top_k: self.top_k,
                top_p: self.top_p,
                min_p: self.min_p,
                repeat_penalty: self.repeat_penalty,
                seed: self.seed,
                ..SamplerConfig::default()
            }
        };
        Ok(Sampler::new(cfg)?)
    }
}

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
}

pub fn run(g: &Global, mut args: Args) -> anyhow::Result<ExitCode> {
    args.m.model = super::pull::model_path(&args.m.model)?;
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
    let prompt_text = args.prompt.as_ref().or(file_prompt.as_ref());
    let prompt: Vec<u32> = match (&args.token_ids, prompt_text) {
        (Some(ids), _) => ids
            .split(',')
            .map(|s| s.trim().parse::<u32>())
            .collect::<Result<_, _>>()
            .context("--token-ids takes comma-separated integers, e.g. 1,2,3")?,
        (None, Some(p)) if args.chat_template => {
            let t = ChatTemplate::from_gguf(&l.gguf, l.tok()?)?;
            encode_chat(l.tok()?, &t.render(&[Message::new("user", p)], true)?)?
        }
        (None, Some(p)) => l.tok()?.encode(p, true, true)?,
        (None, None) => anyhow::bail!("pass --prompt TEXT, --file FILE or --token-ids 1,2,3"),
    };
    if prompt.is_empty() {
        anyhow::bail!("the prompt encodes to no tokens; pass a non-empty prompt");
    }
    if let Some(path) = &args.dump_logits {
        return dump_logits(&l, &prompt, &args, path);
    }
    let mut st = l.model.new_state();
    let mut sampler = args.s.sampler()?;
    let mut stop = StopCriteria::new(l.tok()?.eog_ids(), Vec::new(), args.n);
    let mut out = std::io::stdout().lock();
    if !g.json && args.token_ids.is_none() && !args.chat_template {
        write!(out, "{}", prompt_text.map_or("", |p| p.as_str()))?;
    }
    let mut top2 = Vec::new();
    let res = generate_fast(
        &l.model,
        l.tok()?,
        &mut st,
        &prompt,
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

/// Says so when `--ctx` asks for more positions than the model holds: the
/// cache is sized to the model's trained context instead.
pub fn warn_ctx_clamped(l: &Loaded, ctx: usize) {
    if ctx > l.model.max_ctx() {
        eprintln!(
            "warning: --ctx {ctx} is more than the {} positions this model holds (its trained context); using {}",
            l.model.max_ctx(),
            l.model.max_ctx()
        );
    }
}

/// Where the plan's choices came from, for the summary line: `tuned` (all
/// from the table), `default`, or the counts when mixed.
fn plan_source(p: &ExecutionPlan) -> String {
    match p.counts() {
        (0, 0, _) => "default".into(),
        (t, 0, 0) => format!("tuned ({t})"),
        (t, n, d) => format!("{t} tuned, {n} nearest, {d} default"),
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

fn dump_logits(l: &Loaded, prompt: &[u32], args: &Args, path: &Path) -> anyhow::Result<ExitCode> {
    let vocab = l.cfg.vocab;
    let mut st = l.model.new_state();
    let all = l.model.forward(prompt, &mut st, true)?.to_vec();
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
