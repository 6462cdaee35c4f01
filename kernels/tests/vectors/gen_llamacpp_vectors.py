#!/usr/bin/env python3
"""Generate K-quant (Q4_K, Q5_K, Q6_K) and MXFP4 test vectors with llama.cpp's own quantizer.

The `gguf` package only dequantizes the K-quants, so their quantizers are
pinned here against llama.cpp's reference code instead: this script writes a
small f32 GGUF with rows covering the edge cases (the same kinds as
gen_quant_vectors.py, in 256-element super-blocks), runs llama.cpp's
`llama-quantize` on it (`--pure Q4_K`, `Q5_K`, `Q6_K`, and `--tensor-type
...=mxfp4`), reads the quantized tensors back with `gguf`, and stores input
rows (as f32 bit patterns) and llama.cpp's bytes (hex). llama-quantize of an
f32 tensor without an importance matrix runs ggml's `quantize_row_*_ref`.

Usage, from the repository root (llama.cpp built outside the repository,
e.g. with ../shared/peers/build-llamacpp):

    /work/venv-gguf/bin/python kernels/tests/vectors/gen_llamacpp_vectors.py \\
        /path/to/llama.cpp/build/bin/llama-quantize

It writes kernels/tests/vectors/llamacpp_vectors.json (deterministic for a
given llama.cpp build; the build's version string is recorded).
"""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from gguf import GGUFReader, GGUFWriter

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "llamacpp_vectors.json")
N = 256  # one super-block per row


def bits(a: np.ndarray) -> list:
    return [int(v) for v in np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).ravel()]


def rows(rng: np.random.Generator) -> np.ndarray:
    r = [rng.standard_normal(N).astype(np.float32) for _ in range(6)]
    r.append(np.zeros(N, np.float32))                                # zeros
    r.append(np.full(N, 0.7, np.float32))                            # constant
    r.append(np.full(N, -3.25, np.float32))                          # negative constant
    big = (rng.standard_normal(N) * 2000.0).astype(np.float32)      # large, one outlier
    big[5] = 30000.0
    r.append(big)
    neg = rng.uniform(-1, 1, N).astype(np.float32)                   # max |x| negative
    neg[3], neg[200] = -5.0, -7.5
    r.append(neg)
    r.append((rng.standard_normal(N) * 1e-3).astype(np.float32))    # small magnitudes
    r.append(rng.integers(-8, 8, N).astype(np.float32))              # on the integer grid
    pos = np.abs(rng.standard_normal(N)).astype(np.float32)          # one sign only
    r.append(pos)
    half = rng.standard_normal(N).astype(np.float32)                 # sub-blocks of zeros
    half[::2] = 0.0
    half[64:96] = 0.0
    r.append(half)
    p2 = rng.uniform(-1, 1, N).astype(np.float32)                    # amax just under 2^k
    p2[0] = np.float32(4.0) * np.float32(1 - 2**-24)
    p2[33] = np.float32(-0.5) * np.float32(1 - 2**-24)
    r.append(p2)
    return np.stack(r)


def build_of(log: str) -> str:
    """llama-quantize's `version: 0.6.0-dev (build N, commit C)` line."""
    for line in log.splitlines():
        if line.startswith("version:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def main() -> None:
    quantize = sys.argv[1]
    data = rows(np.random.default_rng(20261202))
    cases = []
    build = "unknown"
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "f32.gguf")
        w = GGUFWriter(src, "llama")
        # Enough hyper-parameters for llama.cpp's loader; the tensors are
        # what it quantizes, not a model it runs.
        w.add_context_length(64)
        w.add_embedding_length(N)
        w.add_block_count(1)
        w.add_feed_forward_length(N)
        w.add_head_count(4)
        w.add_head_count_kv(4)
        w.add_layer_norm_rms_eps(1e-5)
        w.add_tensor("blk.0.ffn_up.weight", data)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        runs = [
            ("q4_K", ["--pure"], "Q4_K"),
            ("q5_K", ["--pure"], "Q5_K"),
            ("q6_K", ["--pure"], "Q6_K"),
            ("mxfp4", ["--pure", "--tensor-type", "ffn_up=mxfp4"], "Q8_0"),
        ]
        for name, flags, ftype in runs:
            dst = os.path.join(tmp, f"{name}.gguf")
            run = subprocess.run([quantize, *flags, src, dst, ftype, "1"], check=True,
                                 capture_output=True, text=True)
            build = build_of(run.stdout + run.stderr)
            t = next(t for t in GGUFReader(dst).tensors if t.name == "blk.0.ffn_up.weight")
            assert t.tensor_type.name.lower() == name.lower(), (name, t.tensor_type.name)
            raw = np.asarray(t.data).view(np.uint8).reshape(len(data), -1)
            cases.append({
                "format": name,
                "rows": [{"input": bits(x), "bytes": raw[i].tobytes().hex()}
                         for i, x in enumerate(data)],
            })
    doc = {
        "generator": "kernels/tests/vectors/gen_llamacpp_vectors.py",
        "llama_cpp_build": build,
        "cases": cases,
    }
    with open(OUT, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {OUT} ({os.path.getsize(OUT)} bytes)")


if __name__ == "__main__":
    main()
