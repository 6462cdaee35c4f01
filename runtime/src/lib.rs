//! GGUF/safetensors loading, tokenizer, Qwen3/Qwen2/Llama models, sampling, the tuned execution plan (being written).
