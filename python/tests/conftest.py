"""What the tests share: a scratch environment (conversion cache and a
selector table that does not exist, so the default plan runs everywhere),
the `tiletune` binary to compare with (`TILETUNE_BIN`), the Hugging Face
Qwen3 fixtures, and a tiny Llama GGUF with a byte-level BPE tokenizer and
ChatML's markers, written here by a minimal GGUF v3 writer."""

import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "runtime" / "tests" / "fixtures" / "hf_qwen3"


@pytest.fixture(scope="session", autouse=True)
def scratch_env(tmp_path_factory):
    """Every model load in this process (the library reads the environment)
    and every CLI run caches conversions here and plans with no table."""
    d = tmp_path_factory.mktemp("env")
    os.environ["XDG_CACHE_HOME"] = str(d / "cache")
    os.environ["TILETUNE_DB"] = str(d / "no-table.db")
    return d


@pytest.fixture(scope="session")
def cli():
    """Runs the `tiletune` binary; returns its stdout."""
    exe = os.environ.get("TILETUNE_BIN") or shutil.which("tiletune")
    if not exe:
        pytest.skip("set TILETUNE_BIN to the tiletune binary to compare with (scripts/test does)")

    def run(*args):
        p = subprocess.run([exe, *map(str, args)], capture_output=True, text=True)
        assert p.returncode == 0, f"tiletune {args}: {p.stderr}"
        return p.stdout

    return run


def fixture(name):
    d = FIXTURES / name
    return d, json.loads((d / "expected.json").read_text())


def models_dir():
    d = os.environ.get("TILETUNE_MODELS_DIR")
    return Path(d) if d else None


# The tiny model's vocabulary: a..z, space (Ġ), newline (Ċ), two merges'
# results, then the special tokens.
VOCAB = [chr(c) for c in range(ord("a"), ord("z") + 1)] + [
    "Ġ", "Ċ", "ab", "abc", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
BOS, EOS, IM_END = 30, 31, 33

_STRING, _ARRAY, _U32, _I32, _F32, _BOOL = 8, 9, 4, 5, 6, 7


def _gguf_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def _gguf_kv(key, value):
    out = _gguf_str(key)
    if isinstance(value, bool):
        return out + struct.pack("<I?", _BOOL, value)
    if isinstance(value, str):
        return out + struct.pack("<I", _STRING) + _gguf_str(value)
    if isinstance(value, float):
        return out + struct.pack("<If", _F32, value)
    if isinstance(value, int):
        return out + struct.pack("<II", _U32, value)
    if all(isinstance(v, str) for v in value):
        return out + struct.pack("<IIQ", _ARRAY, _STRING, len(value)) + b"".join(map(_gguf_str, value))
    return out + struct.pack("<IIQ", _ARRAY, _I32, len(value)) + struct.pack(f"<{len(value)}i", *value)


def write_tiny_gguf(path, seed=7):
    """A 2-layer Llama (hidden 32, 4 heads, 2 KV heads, 128 positions)
    with random f32 weights and the vocabulary above, whose special tokens
    are never sampled greedily."""
    d, f, layers, vocab = 32, 64, 2, len(VOCAB)
    kvd = d // 4 * 2
    kvs = {
        "general.architecture": "llama",
        "general.alignment": 32,
        "llama.vocab_size": vocab,
        "llama.embedding_length": d,
        "llama.feed_forward_length": f,
        "llama.block_count": layers,
        "llama.attention.head_count": 4,
        "llama.attention.head_count_kv": 2,
        "llama.rope.freq_base": 10000.0,
        "llama.attention.layer_norm_rms_epsilon": 1e-5,
        "llama.context_length": 128,
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "gpt2",
        "tokenizer.ggml.tokens": VOCAB,
        "tokenizer.ggml.token_type": [3 if t.startswith("<") else 1 for t in VOCAB],
        "tokenizer.ggml.merges": ["a b", "ab c"],
        "tokenizer.ggml.bos_token_id": BOS,
        "tokenizer.ggml.eos_token_id": EOS,
        "tokenizer.ggml.add_bos_token": True,
    }
    rng = np.random.default_rng(seed)
    tensors = [("token_embd.weight", (vocab, d), False), ("output_norm.weight", (d,), True),
               ("output.weight", (vocab, d), False)]
    for l in range(layers):
        for n, shape, norm in [("attn_norm", (d,), True), ("attn_q", (d, d), False),
                               ("attn_k", (kvd, d), False), ("attn_v", (kvd, d), False),
                               ("attn_output", (d, d), False), ("ffn_norm", (d,), True),
                               ("ffn_gate", (f, d), False), ("ffn_up", (f, d), False),
                               ("ffn_down", (d, f), False)]:
            tensors.append((f"blk.{l}.{n}.weight", shape, norm))
    infos, data = b"", b""
    for name, shape, norm in tensors:
        v = rng.uniform(-0.3, 0.3, size=shape).astype(np.float32) + (1.0 if norm else 0.0)
        if name == "output.weight":
            # Special tokens get logit 0, below the best of the 30 others:
            # generations run their whole length instead of ending at once.
            v[BOS:] = 0.0
        data += b"\0" * (-len(data) % 32)
        dims = tuple(reversed(shape))  # GGUF lists the fastest dimension first
        infos += _gguf_str(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, 0, len(data))
        data += v.astype("<f4").tobytes()
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    head += b"".join(_gguf_kv(k, v) for k, v in kvs.items()) + infos
    Path(path).write_bytes(head + b"\0" * (-len(head) % 32) + data)
    return Path(path)


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf")
