//! Inputs the coverage-guided fuzz targets in `fuzz/` hang or crash on, kept
//! so that `cargo test` replays them on every architecture. GGUF inputs live
//! in `tests/gguf_regressions/` (replayed by `gguf_fuzz.rs`).

use std::time::{Duration, Instant};
use tiletune_runtime::chat::{ChatTemplate, Message};

/// A template carried by a hostile GGUF can loop for as long as it likes;
/// the render must stop with an error instead of hanging the chat. Ten
/// million loop iterations is more fuel than a render gets.
#[test]
fn a_looping_template_runs_out_of_fuel() {
    let source =
        "{% for i in range(100000) %}{% for j in range(100) %}{% endfor %}{% endfor %}done";
    let t = ChatTemplate::new(source, "<s>", "</s>").unwrap();
    let start = Instant::now();
    let err = t
        .render(&[Message::new("user", "hi")], true)
        .expect_err("a ten-million-step template must not render");
    assert!(err.to_string().contains("fuel"), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "{:?}",
        start.elapsed()
    );
}

/// A real conversation is far from the limit: a thousand turns render.
#[test]
fn a_long_conversation_has_fuel_enough() {
    let t = ChatTemplate::chatml();
    let turns: Vec<Message> = (0..1000)
        .map(|i| Message::new(if i % 2 == 0 { "user" } else { "assistant" }, "some words"))
        .collect();
    let text = t.render(&turns, true).unwrap();
    assert_eq!(text.matches("<|im_start|>").count(), 1001);
}
