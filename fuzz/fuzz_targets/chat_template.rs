//! Compiles a fuzzed chat template and renders fuzzed messages with it, as a
//! hostile GGUF's `tokenizer.chat_template` would be. The input is the
//! template source, then NUL-separated role, content, role, content, …; the
//! first byte of the template picks `add_generation_prompt`. Any panic, and
//! any render that outruns the product's fuel limit, is a bug.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tiletune_runtime::chat::{ChatTemplate, Message};

fuzz_target!(|data: &[u8]| {
    let mut parts = data.split(|&b| b == 0);
    let Some(source) = parts.next().and_then(|s| std::str::from_utf8(s).ok()) else {
        return;
    };
    let fields: Vec<String> = parts
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    let messages: Vec<Message> = fields
        .chunks(2)
        .map(|rc| Message::new(&rc[0], rc.get(1).map_or("", String::as_str)))
        .collect();
    let add_generation_prompt = source.as_bytes().first().is_some_and(|b| b & 1 == 1);
    if let Ok(t) = ChatTemplate::new(source, "<s>", "</s>") {
        let _ = t.render(&messages, add_generation_prompt);
    }
});
