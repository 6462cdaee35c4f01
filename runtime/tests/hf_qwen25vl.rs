//! Qwen2.5-VL against Hugging Face `transformers` itself: a tiny random
//! checkpoint and what transformers computed for it
//! (tests/fixtures/hf_qwen25vl/make_hf_qwen25vl.py). For two pictures, one
//! the processor resamples (181×139 → 168×140) and one it does not:
//! the preprocessed pixels match the PIL processor's, the vision tower's
//! merged output matches within 1e-4 of its largest value, the prompt's
//! M-RoPE positions are equal, the logits at every prompt position match
//! within 1e-4 of the largest logit, and the 16 greedy tokens are equal.
//! The model runs as every front end loads it (`Engine::load` on the
//! folder: converted to a GGUF image, planned, the fast decoder and the
//! vision tower on the kernels).

mod common;

use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use tiletune_runtime::engine::{Engine, LoadOptions};
use tiletune_runtime::models::Extra;
use tiletune_runtime::sampling::{Sampler, SamplerConfig};
use tiletune_runtime::vision::image::{preprocess, read_rgb};

const REL: f32 = 1e-4;

#[derive(Deserialize)]
struct Case {
    image: String,
    grid_thw: [usize; 3],
    pixels: String,
    vision: Vec<Vec<f32>>,
    input_ids: Vec<u32>,
    positions: [Vec<u32>; 3],
    logits: Vec<Vec<f32>>,
    greedy: Vec<u32>,
}

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf_qwen25vl")
}

fn case(name: &str) -> Case {
    let text = std::fs::read_to_string(dir().join("expected.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    serde_json::from_value(v[name].clone()).unwrap()
}

fn f32_file(p: &Path) -> Vec<f32> {
    std::fs::read(p)
        .unwrap()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

fn engine(tmp: &Path) -> Engine {
    let opts = LoadOptions {
        db: Some(tmp.join("no-table.db")),
        cache_dir: Some(tmp.join("cache")),
        threads: Some(2),
        ..LoadOptions::new(dir().join("model"))
    };
    Engine::load(&opts).unwrap()
}

#[test]
fn preprocessing_matches_the_processor() {
    let tmp = tempfile::tempdir().unwrap();
    let e = engine(tmp.path());
    let pre = &e
        .vision
        .as_ref()
        .expect("the folder has a tower")
        .config()
        .pre;
    for name in ["odd", "square"] {
        let c = case(name);
        let img = read_rgb(&dir().join(&c.image)).unwrap();
        let px = preprocess(&img, pre).unwrap();
        assert_eq!(px.grid, c.grid_thw, "{name}: grid");
        let want = f32_file(&dir().join(&c.pixels));
        assert_eq!(px.data.len(), want.len(), "{name}");
        let err = px
            .data
            .iter()
            .zip(&want)
            .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(err <= 1e-6, "{name}: pixels differ by {err}");
    }
}

#[test]
fn vision_tower_prompt_and_greedy_match_transformers() {
    let tmp = tempfile::tempdir().unwrap();
    let e = engine(tmp.path());
    let v = e.vision.as_ref().unwrap();
    // The fixture has what the test claims to cover.
    let vc = v.config();
    assert!(!vc.full_attn.is_empty() && vc.full_attn.len() < vc.depth);
    assert!(e.cfg.mrope_sections.is_some());
    for name in ["odd", "square"] {
        let c = case(name);
        let px = tiletune_runtime::vision::image::Pixels {
            grid: c.grid_thw,
            data: f32_file(&dir().join(&c.pixels)),
        };
        let enc = v.encode(&px).unwrap();
        let err = common::rel_err(&enc.embeddings, &c.vision.concat());
        assert!(err <= REL, "{name}: vision tower relative error {err:e}");

        let img = read_rgb(&dir().join(&c.image)).unwrap();
        let p = e.image_prompt(&c.input_ids, &[img], 0).unwrap();
        assert_eq!(p.ids, c.input_ids, "{name}: ids");
        for (k, comp) in c.positions.iter().enumerate() {
            let got: Vec<u32> = p.positions.iter().map(|q| q[k]).collect();
            assert_eq!(&got, comp, "{name}: M-RoPE component {k}");
        }
        let refs = p.embed_refs();
        let extra = Extra {
            embeds: &refs,
            positions: Some(&p.positions),
        };
        let mut st = e.model.new_state();
        let never = AtomicBool::new(false);
        let logits = e
            .model
            .forward_extra(&p.ids, extra, &mut st, true, &never)
            .unwrap()
            .unwrap()
            .to_vec();
        let err = common::rel_err(&logits, &c.logits.concat());
        assert!(err <= REL, "{name}: prompt logits relative error {err:e}");

        // Greedy decode continues at the image-shifted positions.
        let vocab = e.cfg.vocab;
        let mut last = logits[logits.len() - vocab..].to_vec();
        let mut sampler = Sampler::new(SamplerConfig::greedy()).unwrap();
        let mut history = p.ids.clone();
        let mut out = Vec::new();
        while out.len() < c.greedy.len() {
            let id = sampler.sample(&last, &history).unwrap();
            out.push(id);
            history.push(id);
            if e.cfg.eos_ids.contains(&id) {
                break;
            }
            last = e.model.forward(&[id], &mut st, false).unwrap().to_vec();
        }
        assert_eq!(out, c.greedy, "{name}: greedy tokens");
    }
}
