//! `tiletune pull ORG/NAME[:QUANT|:FILE.gguf]`, and the model-id resolution
//! every command that takes `--model` uses (`model_path`): a path that
//! exists is a path; otherwise an id is looked up in the hubs' caches and,
//! unless offline, pulled.

use super::Global;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tiletune_hub::{Cache, Hub, HubKind, ModelId, PullOptions, find_cached, pull};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "The model lands in the hub's own cache (huggingface_hub's \
models--ORG--NAME layout under $HF_HUB_CACHE or ~/.cache/huggingface/hub; ModelScope's \
models/ORG/NAME under $MODELSCOPE_CACHE or ~/.cache/modelscope/hub), so models already \
downloaded by huggingface-cli or modelscope are found offline. Endpoints: HF_ENDPOINT, \
MODELSCOPE_ENDPOINT; tokens: HF_TOKEN (or huggingface-cli login's token file), \
MODELSCOPE_API_TOKEN. Other commands take the same ids for --model (HF_HUB_OFFLINE=1: cache only; \
TILETUNE_HUB=modelscope: download from ModelScope)."
)]
pub struct Args {
    /// ORG/NAME, ORG/NAME:QUANT (a quant tag such as Q4_K_M) or
    /// ORG/NAME:FILE.gguf. Without a pick, a repository's Q4_K_M file (as
    /// llama.cpp's -hf), or a checkpoint folder's files.
    pub id: String,
    /// Which hub.
    #[arg(long, default_value = "hf", value_parser = HubKind::parse)]
    pub hub: HubKind,
    /// Branch, tag or commit (ModelScope's default branch is master).
    #[arg(long)]
    pub revision: Option<String>,
    /// Only look in the cache; make no request.
    #[arg(long)]
    pub offline: bool,
}

fn default_revision(kind: HubKind) -> &'static str {
    match kind {
        HubKind::HuggingFace => "main",
        HubKind::ModelScope => "master",
    }
}

fn cache_of(kind: HubKind) -> anyhow::Result<Cache> {
    Cache::from_env(kind).ok_or_else(|| {
        anyhow::anyhow!(
            "no home directory to keep the model cache in; set HF_HUB_CACHE (or MODELSCOPE_CACHE)"
        )
    })
}

/// Pulls `id` with a progress bar (on a terminal); returns the local path.
fn pull_with_bar(
    kind: HubKind,
    id: &ModelId,
    o: &PullOptions,
    quiet: bool,
) -> anyhow::Result<PathBuf> {
    let hub = Hub::from_env(kind);
    let cache = cache_of(kind)?;
    let bar = if std::io::stderr().is_terminal() && !quiet && !o.offline {
        ProgressBar::new(0)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta} {msg}",
        )
        .expect("static template")
        .progress_chars("=> "),
    );
    let got = pull(&hub, &cache, id, o, |p| {
        if let Some(t) = p.total {
            bar.set_length(t);
        }
        bar.set_position(p.done);
        bar.set_message(p.file.to_string());
    });
    bar.finish_and_clear();
    Ok(got?.path)
}

pub fn run(g: &Global, args: Args) -> anyhow::Result<ExitCode> {
    let id = ModelId::parse(&args.id)?;
    let o = PullOptions {
        revision: args
            .revision
            .unwrap_or_else(|| default_revision(args.hub).to_string()),
        offline: args.offline,
    };
    let path = pull_with_bar(args.hub, &id, &o, g.json)?;
    if g.json {
        println!(
            "{}",
            serde_json::json!({ "id": id.to_string(), "path": path })
        );
    } else {
        println!("{}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// The local path of a `--model` value: a path that exists; else a model id
/// found in the Hugging Face or ModelScope cache; else (unless
/// `HF_HUB_OFFLINE` is set) pulled from Hugging Face, or from ModelScope with
/// `TILETUNE_HUB=modelscope`. Anything else is returned as given, so the
/// loader reports the missing file.
pub fn model_path(p: &Path) -> anyhow::Result<PathBuf> {
    let Some(s) = p.to_str().filter(|s| ModelId::looks_like(s)) else {
        return Ok(p.to_path_buf());
    };
    let id = ModelId::parse(s)?;
    for kind in [HubKind::HuggingFace, HubKind::ModelScope] {
        if let Some(cache) = Cache::from_env(kind)
            && let Ok(found) = find_cached(&cache, &id, default_revision(kind))
        {
            return Ok(found);
        }
    }
    let offline = std::env::var("HF_HUB_OFFLINE").is_ok_and(|v| !v.is_empty() && v != "0");
    let kind = match std::env::var("TILETUNE_HUB") {
        Ok(v) => HubKind::parse(&v).map_err(|e| anyhow::anyhow!("TILETUNE_HUB: {e}"))?,
        Err(_) => HubKind::HuggingFace,
    };
    if !offline {
        eprintln!("{id} is not cached: pulling it (tiletune pull {id})");
    }
    let o = PullOptions {
        revision: default_revision(kind).to_string(),
        offline,
    };
    pull_with_bar(kind, &id, &o, false)
}
