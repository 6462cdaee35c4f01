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
use crate::vision::image::Rgb;
use crate::vision::prompt::{ImageTokens, expand_pads, mrope_positions};
use crate::vision::{Encoded, VisionModel, has_vision};
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
    /// llama.cpp's `mmproj` GGUF: the vision tower of a multimodal model
    /// whose language model is `model` (a converted folder holds both).
    pub mmproj: Option<PathBuf>,
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
            mmproj: None,
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
    /// The vision tower, when the model has one (`--mmproj`, or a
    /// converted Qwen2.5-VL folder).
    pub vision: Option<VisionModel>,
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
        let mmproj = match &opts.mmproj {
            Some(p) => Some(GgufFile::open(p)?),
            None => None,
        };
        let tower = match &mmproj {
            Some(m) if has_vision(m) => Some(m),
            Some(m) => {
                return Err(LoadError::Config(format!(
                    "{} holds no vision tower (no clip.has_vision_encoder and v.patch_embd.weight); pass the mmproj file llama.cpp's converter wrote",
                    m.path().display()
                )));
            }
            None => has_vision(&gguf).then_some(&gguf),
        };
        let (plan, mut notes) = plan_with(opts, &gguf, tower)?;
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
        let vision = match tower {
            Some(t) => {
                let v = VisionModel::new(t, &plan)?;
                if v.config().out_hidden != cfg.hidden || cfg.mrope_sections.is_none() {
                    return Err(LoadError::Config(format!(
                        "the vision tower projects to width {}, the language model ({}, width {}) {}; pass the mmproj file made with this model",
                        v.config().out_hidden,
                        cfg.arch.gguf_name(),
                        cfg.hidden,
                        if cfg.mrope_sections.is_none() {
                            "has no M-RoPE"
                        } else {
                            "differs"
                        }
                    )));
                }
                Some(v)
            }
            None => None,
        };
        Ok(Engine {
            gguf,
            cfg,
            tokenizer,
            plan,
            model,
            vision,
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

/// A prompt with its images encoded, ready for the language model.
#[derive(Debug, Clone)]
pub struct ImagePrompt {
    /// The ids, each image's pad expanded to one per merged patch.
    pub ids: Vec<u32>,
    /// Each image's first row in `ids` and its embeddings.
    pub embeds: Vec<(usize, Vec<f32>)>,
    /// M-RoPE positions `(t, h, w)` of every id.
    pub positions: Vec<[u32; 3]>,
    /// The vision tower's time for all images (preprocessing included).
    pub encode_time: Duration,
    /// Image tokens produced (pads).
    pub image_tokens: usize,
    /// The language model's width (values per embedded row).
    pub width: usize,
}

impl ImagePrompt {
    /// The embeddings as [`crate::models::Extra::embeds`] borrows them.
    pub fn embed_refs(&self) -> Vec<(usize, &[f32])> {
        self.embed_refs_from(0)
    }

    /// The largest `k <= keep` that does not cut an image's rows: a cached
    /// prefix is reused only up to the start of an image it would split.
    pub fn cut(&self, keep: usize) -> usize {
        self.embeds
            .iter()
            .find(|(r, e)| *r < keep && keep < r + e.len().max(1) / self.width().max(1))
            .map_or(keep, |(r, _)| *r)
    }

    /// The embeddings of the images at or after row `from`, their rows
    /// counted from `from` (the rows a pass that starts there runs).
    pub fn embed_refs_from(&self, from: usize) -> Vec<(usize, &[f32])> {
        self.embeds
            .iter()
            .filter(|(r, _)| *r >= from)
            .map(|(r, e)| (*r - from, &e[..]))
            .collect()
    }

    fn width(&self) -> usize {
        self.width
    }
}

impl Engine {
    /// The ids of `<|vision_start|>`, `<|image_pad|>` and `<|vision_end|>`
    /// in this model's vocabulary.
    pub fn image_tokens(&self) -> Result<ImageTokens> {
        let tok = self.tokenizer()?;
        let id = |s: &str| {
            tok.token_id(s).ok_or_else(|| {
                LoadError::Tokenizer(format!(
                    "the vocabulary has no `{s}`; images need a Qwen2-VL vocabulary"
                ))
            })
        };
        Ok(ImageTokens {
            vision_start: id("<|vision_start|>")?,
            image_pad: id("<|image_pad|>")?,
            vision_end: id("<|vision_end|>")?,
        })
    }

    /// Encodes `images` with the vision tower and lays them into `ids`
    /// (one `<|image_pad|>` per image, or runs already expanded as the
    /// processor writes them), positions starting at `start` (a chat's
    /// [`crate::models::RunState::rope_pos`]).
    pub fn image_prompt(&self, ids: &[u32], images: &[Rgb], start: u32) -> Result<ImagePrompt> {
        let t0 = Instant::now();
        let encoded = images
            .iter()
            .map(|img| self.encode_image(img))
            .collect::<Result<Vec<_>>>()?;
        let mut p = self.lay_out(ids, &encoded, start)?;
        p.encode_time = t0.elapsed();
        Ok(p)
    }

    /// The vision tower, or an error saying how to get one.
    pub fn vision(&self) -> Result<&VisionModel> {
        self.vision.as_ref().ok_or_else(|| {
            LoadError::Config(
                "this model has no vision tower; pass llama.cpp's mmproj file with --mmproj, or a Qwen2.5-VL folder".into(),
            )
        })
    }

    /// One picture through the vision tower (preprocessing included).
    pub fn encode_image(&self, img: &Rgb) -> Result<Encoded> {
        self.vision()?.encode_image(img)
    }

    /// Lays encoded pictures into `ids` as [`Engine::image_prompt`] does.
    pub fn lay_out(&self, ids: &[u32], encoded: &[Encoded], start: u32) -> Result<ImagePrompt> {
        let merge = self.vision()?.config().pre.merge;
        let pad = self.image_tokens()?.image_pad;
        let encode_time = Duration::ZERO;
        let width = self.cfg.hidden;
        let counts: Vec<usize> = encoded.iter().map(|e| e.tokens(width)).collect();
        let ids = expand_pads(ids, pad, &counts)?;
        let grids: Vec<[usize; 3]> = encoded
            .iter()
            .map(|e| [e.grid[0], e.grid[1] / merge, e.grid[2] / merge])
            .collect();
        let (positions, _) = mrope_positions(&ids, pad, &grids, start)?;
        let mut embeds = Vec::with_capacity(encoded.len());
        let mut i = 0;
        for e in encoded {
            while ids[i] != pad {
                i += 1;
            }
            let n = e.tokens(width);
            embeds.push((i, e.embeddings.clone()));
            i += n;
        }
        Ok(ImagePrompt {
            ids,
            embeds,
            positions,
            encode_time,
            image_tokens: counts.iter().sum(),
            width,
        })
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
    let mmproj = match &opts.mmproj {
        Some(p) => Some(GgufFile::open(p)?),
        None => None,
    };
    let tower = mmproj.as_ref().or(has_vision(g).then_some(g));
    plan_with(opts, g, tower)
}

/// [`plan_for`] with the vision tower's file already open (`None`: no
/// tower): its GEMMs join the language model's problems.
fn plan_with(
    opts: &LoadOptions,
    g: &GgufFile,
    tower: Option<&GgufFile>,
) -> Result<(ExecutionPlan, Vec<String>)> {
    let cfg = ModelConfig::from_gguf(g)?;
    check_tensors(&cfg, g)?;
    let (soc, caps) = this_soc();
    let mut problems = crate::problems::kernel_problems(g)?;
    if let Some(t) = tower {
        problems.extend(crate::vision::tower_problems(t)?);
    }
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
