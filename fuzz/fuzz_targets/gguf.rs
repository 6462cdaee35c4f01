//! Feeds arbitrary bytes to the GGUF reader and to the tokenizer and config
//! builders that read its metadata: any panic is a bug (they must return errors).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tiletune_runtime::config::ModelConfig;
use tiletune_runtime::gguf::GgufFile;
use tiletune_runtime::tokenizer::Tokenizer;

fuzz_target!(|data: &[u8]| {
    if let Ok(g) = GgufFile::from_bytes(data) {
        for t in g.tensors() {
            let (_, bytes) = g.tensor_data(&t.name).expect("listed tensor is readable");
            assert_eq!(bytes.len() as u64, t.size);
        }
        let _ = ModelConfig::from_gguf(&g);
        if let Ok(tok) = Tokenizer::from_gguf(&g) {
            if let Ok(ids) = tok.encode("Hello world <|im_start|>123", true, true) {
                let _ = tok.decode(&ids, false);
            }
        }
    }
});
