//! A model ready to run, loaded the one way every front end loads it (the
//! CLI's `run`, `chat`, `ppl` and `bench model`, the C ABI, the Python
//! package): the GGUF file (a Hugging Face folder is converted once to a
//! cached image), its configuration and tokenizer, the execution plan built
//! from the selector table, and the fast decoder on the plan's kernels.
//!
//! Loading never prints: what a front end should tell its user (an unusable
//! table, a placement that could not be applied) comes back as
//! [`Engine::notes`], so each says it its own way.

use crate::chat::ChatTemplate;
use crate::config::ModelConfig;
use crate::convert::{cached_gguf, default_cache_dir};
use crate::gguf::GgufFile;
use crate::models::{FastModel, check_tensors};
use crate::plan::{ExecutionPlan, PlanOptions, TableState, this_soc};
use crate::quantize::FileType;
use crate::tokenizer::Tokenizer;
use crate::{LoadError, Result};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tiletune_kernels::attention::KvDtype;
use tiletune_kernels::qgemv::QMode;

/// What to load and how to run it.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// A GGUF file, or a Hugging Face folder (`config.json`,
    /// `*.safetensors`, `tokenizer.json` for text).
    pub model: PathBuf,
    /// The file type a Hugging Face folder is converted to (`None` keeps
    /// the checkpoint's f32/f16); ignored for GGUF files.
    pub quant: Option<FileType>,
    /// The selector table (`None`: the user's default table).
    pub db: Option<PathBuf>,
    /// Worker threads and the table's thread budget (`None`: every core).
    pub threads: Option<usize>,
    /// Forces the activation mode of quantized weights.
    pub qmode: Option<QMode>,
    /// The paged KV cache's page type.
    pub kv_type: KvDtype,
    /// KV cache positions; more than the model's trained context is
    /// clamped to it ([`FastModel::max_ctx`] says how many it holds).
    pub ctx: usize,
    /// Where converted folders are cached (`None`: [`default_cache_dir`]).
    pub cache_dir: Option<PathBuf>,
}

impl LoadOptions {
    /// The defaults the CLI has: the user's table, every core, f32 KV pages
    /// (the accurate ones), 4096 positions.
    pub fn new(model: impl Into<PathBuf>) -> Self {
        LoadOptions {
            model: model.into(),
            quant: None,
            db: None,
            threads: None,
            qmode: None,
            kv_type: KvDtype::F32,
            ctx: 4096,
            cache_dir: None,
        }
    }

    /// What [`ExecutionPlan::build`] takes from these options.
    fn plan_options(&self, cores: usize) -> PlanOptions {
        PlanOptions {
            db: self.db.clone(),
            threads: self.threads.unwrap_or(cores).max(1),
            qmode: self.qmode,
        }
    }
}

/// A loaded model with everything needed to run it.
pub struct Engine {
    pub gguf: GgufFile,
    pub cfg: ModelConfig,
    /// `None` for a Hugging Face folder without `tokenizer.json`.
    tokenizer: Option<Tokenizer>,
    pub plan: ExecutionPlan,
    pub model: FastModel,
    pub load_time: Duration,
    /// What the user should be told about the load, one line each.
    pub notes: Vec<String>,
}

impl Engine {
    /// Opens the model, plans it on this machine, applies the plan's thread
    /// placement and builds the fast decoder for `opts.ctx` positions.
    pub fn load(opts: &LoadOptions) -> Result<Engine> {
        let t0 = Instant::now();
        let gguf = open_gguf(opts)?;
        let tokenizer = if opts.model.is_dir() {
            let path = opts.model.join("tokenizer.json");
            match path.is_file() {
                true => Some(Tokenizer::from_json_file(&path)?),
                false => None,
            }
        } else {
            Some(Tokenizer::from_gguf(&gguf)?)
        };
        let cfg = ModelConfig::from_gguf(&gguf)?;
        let (plan, mut notes) = plan_for(opts, &gguf)?;
        // Pin this thread and the kernel pools the way the plan's
        // placements were tuned (a no-op unless the table holds pinned
        // winners).
        if let Err(e) = plan.apply_placement() {
            notes.push(format!(
                "could not pin threads to {:?} ({e}); running unpinned",
                plan.pinned_cpus
            ));
        }
        let model = FastModel::new(&cfg, &gguf, &plan, opts.ctx)?.with_kv_dtype(opts.kv_type)?;
        Ok(Engine {
            gguf,
            cfg,
            tokenizer,
            plan,
            model,
            load_time: t0.elapsed(),
            notes,
        })
    }

    /// The tokenizer, or an error saying how to get one.
    pub fn tokenizer(&self) -> Result<&Tokenizer> {
        self.tokenizer.as_ref().ok_or_else(|| {
            LoadError::Tokenizer(
                "the model folder has no tokenizer.json, so text cannot be tokenized; copy it from the model repository, or pass token ids (--token-ids)".into(),
            )
        })
    }

    /// The model's chat template (ChatML when the file has none).
    pub fn chat_template(&self) -> Result<ChatTemplate> {
        ChatTemplate::from_gguf(&self.gguf, self.tokenizer()?)
    }

    /// Encodes rendered chat text: control tokens are parsed, and BOS is
    /// added only if the model wants it and the template did not write it.
    pub fn encode_chat(&self, text: &str) -> Result<Vec<u32>> {
        encode_chat(self.tokenizer()?, text)
    }
}

/// Encodes rendered chat text with `tok` (see [`Engine::encode_chat`]).
pub fn encode_chat(tok: &Tokenizer, text: &str) -> Result<Vec<u32>> {
    let has_bos = tok
        .bos()
        .and_then(|b| tok.token_str(b))
        .is_some_and(|s| !s.is_empty() && text.starts_with(s));
    tok.encode(text, !has_bos, true)
}

/// The model's GGUF file; a Hugging Face folder is converted (with
/// `opts.quant`) to a GGUF image in the cache first, or its cached image
/// reused.
pub fn open_gguf(opts: &LoadOptions) -> Result<GgufFile> {
    if !opts.model.is_dir() {
        return GgufFile::open(&opts.model);
    }
    let cache = opts.cache_dir.clone().unwrap_or_else(default_cache_dir);
    GgufFile::open(&cached_gguf(&opts.model, opts.quant, &cache)?)
}

/// The execution plan of `g` on this machine, with what the user should be
/// told about the selector table. The plan of a file the runtime could not
/// load would be a lie, so the model's meaning (dims, heads, layers) and
/// its tensors are checked first.
pub fn plan_for(opts: &LoadOptions, g: &GgufFile) -> Result<(ExecutionPlan, Vec<String>)> {
    let cfg = ModelConfig::from_gguf(g)?;
    check_tensors(&cfg, g)?;
    let (soc, caps) = this_soc();
    let problems = crate::problems::kernel_problems(g)?;
    let plan = ExecutionPlan::build(&problems, &soc, &caps, &opts.plan_options(caps.cores));
    let notes = table_notes(&plan, opts);
    Ok((plan, notes))
}

/// An unusable table, or one asked for by path that is not there, is one
/// note: the model still runs, on the default plan.
fn table_notes(plan: &ExecutionPlan, opts: &LoadOptions) -> Vec<String> {
    let mut notes = Vec::new();
    match plan.table {
        TableState::Unusable => notes.push(format!(
            "selector table {}: {}; running the default plan",
            plan.db_path.display(),
            plan.db_status
        )),
        TableState::Missing if opts.db.is_some() => notes.push(format!(
            "selector table {} does not exist; running the default plan",
            plan.db_path.display()
        )),
        _ => {}
    }
    notes
}

/// The plan a device builds for `g` from the table at `opts.db`: `soc` is
/// its fingerprint (or a prefix that names one SoC of the table), and its
/// cache model, core count and CPUs come from the probe record stored with
/// it (`tiletune remote` stores the device's own), so a winner pinned to
/// CPUs the device lacks is rejected as the device would. Returns the plan,
/// the fingerprint and the SoC's name, with the notes of [`plan_for`].
pub fn plan_for_soc(
    opts: &LoadOptions,
    g: &GgufFile,
    soc: &str,
) -> Result<(ExecutionPlan, tiletune_soc::SocInfo, Vec<String>)> {
    let cfg = ModelConfig::from_gguf(g)?;
    check_tensors(&cfg, g)?;
    let info = table_soc(opts.db.as_deref(), soc)?;
    let caps = info.cpu_caps();
    let cpus: Vec<usize> = info
        .cores
        .iter()
        .filter(|c| c.online)
        .map(|c| c.cpu)
        .collect();
    let problems = crate::problems::kernel_problems(g)?;
    let plan = ExecutionPlan::build_on(
        &problems,
        &info.fingerprint,
        &caps,
        &opts.plan_options(caps.cores),
        &cpus,
    );
    let notes = table_notes(&plan, opts);
    Ok((plan, info, notes))
}

/// The probe record the table at `db` (default: the user's) stores for
/// the SoC `soc` names.
fn table_soc(db: Option<&Path>, soc: &str) -> Result<tiletune_soc::SocInfo> {
    use tiletune_tables::{OpenOptions, SelectorDb};
    let path = db.map_or_else(|| tiletune_tables::table_for_soc(soc), Path::to_path_buf);
    let err = |detail: String| LoadError::NoSuchSoc {
        path: path.clone(),
        detail,
    };
    let table =
        SelectorDb::open_with(&path, OpenOptions::read_only()).map_err(|e| err(format!("{e}")))?;
    let socs = table.socs().map_err(|e| err(e.to_string()))?;
    let matching: Vec<_> = socs
        .iter()
        .filter(|s| s.fingerprint == soc || s.fingerprint.starts_with(soc))
        .collect();
    let record = match matching.as_slice() {
        [one] => *one,
        [] => {
            let known: Vec<String> = socs
                .iter()
                .map(|s| format!("{} ({})", s.fingerprint, s.name))
                .collect();
            return Err(err(format!(
                "no soc {soc:?} in it; it holds {}: pass one of those fingerprints, or run \
                 `tiletune remote ... probe` on the device first",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            )));
        }
        many => {
            return Err(err(format!(
                "{soc:?} names {} socs; give more of the fingerprint",
                many.len()
            )));
        }
    };
    serde_json::from_value(record.probe.clone()).map_err(|e| {
        err(format!(
            "the probe record of soc {} cannot be read ({e}); probe the device again with \
             `tiletune remote ... probe`",
            record.fingerprint
        ))
    })
}

/// Peak resident memory of this process (VmHWM) in KiB, where `/proc`
/// says.
pub fn peak_rss_kib() -> Option<u64> {
    let s = std::fs::read_to_string(Path::new("/proc/self/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}
