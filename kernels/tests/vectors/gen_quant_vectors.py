#!/usr/bin/env python3
"""Generate GGUF quantization test vectors with the `gguf` Python package.

The `gguf` package (gguf-py, maintained in the llama.cpp repository) holds an
implementation of the block formats independent from tiletune's. Its
quantizers for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and MXFP4 are bit-exact ports of
ggml's reference quantizers, so for those formats the vectors pin both
directions: f32 rows -> GGUF bytes, and bytes -> f32. For Q4_K, Q5_K and Q6_K the
package only dequantizes, so the vectors hold seeded random (but
well-formed) blocks and gguf's dequantized values.

All floats are stored as their IEEE-754 bit patterns (u32) so that the Rust
test compares exactly. Run from the repository root:

    /work/venv-gguf/bin/python kernels/tests/vectors/gen_quant_vectors.py

It writes kernels/tests/vectors/quant_vectors.json (deterministic output).
"""

import json
import os
from importlib.metadata import version

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "quant_vectors.json")

# Formats gguf can quantize, and formats it can only dequantize.
QUANTIZE = [("q4_0", T.Q4_0), ("q4_1", T.Q4_1), ("q5_0", T.Q5_0), ("q5_1", T.Q5_1),
            ("q8_0", T.Q8_0), ("mxfp4", T.MXFP4)]
# (q5_K last, so that adding it left the earlier cases' random streams alone.)
DEQUANT_ONLY = [("q4_K", T.Q4_K), ("q6_K", T.Q6_K), ("q5_K", T.Q5_K)]


def bits(a: np.ndarray) -> list:
    return [int(v) for v in np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).ravel()]


def rows_32(rng: np.random.Generator) -> list:
    """Rows of 64 values (two 32-blocks) covering the edge cases."""
    n = 64
    rows = [rng.standard_normal(n).astype(np.float32) for _ in range(4)]
    rows.append(np.zeros(n, np.float32))                               # zeros
    rows.append(np.full(n, 0.7, np.float32))                           # constant
    rows.append(np.full(n, -3.25, np.float32))                         # negative constant
    big = (rng.standard_normal(n) * 2000.0).astype(np.float32)        # large magnitudes
    big[5] = 30000.0
    rows.append(big)
    neg = rng.uniform(-1, 1, n).astype(np.float32)                     # max |x| is negative
    neg[3] = -5.0
    neg[40] = -7.5
    rows.append(neg)
    rows.append((rng.standard_normal(n) * 1e-3).astype(np.float32))   # small magnitudes
    ints = rng.integers(-8, 8, n).astype(np.float32)                   # values on the grid
    rows.append(ints)
    p2 = rng.uniform(-1, 1, n).astype(np.float32)                      # amax just under 2^k
    p2[0] = np.float32(4.0) * np.float32(1 - 2**-24)
    p2[33] = np.float32(-0.5) * np.float32(1 - 2**-24)
    rows.append(p2)
    return rows


def random_blocks(rng: np.random.Generator, qtype, n_blocks: int) -> np.ndarray:
    """Well-formed random blocks: random quant bytes, finite f16 scales."""
    if qtype == T.Q4_K:
        raw = rng.integers(0, 256, (n_blocks, 144), dtype=np.uint8)
        d = rng.uniform(1e-3, 0.5, (n_blocks, 2)).astype(np.float16).view(np.uint8)
        raw[:, 0:4] = d
    elif qtype == T.Q5_K:
        raw = rng.integers(0, 256, (n_blocks, 176), dtype=np.uint8)
        d = rng.uniform(1e-3, 0.5, (n_blocks, 2)).astype(np.float16).view(np.uint8)
        raw[:, 0:4] = d
    elif qtype == T.Q6_K:
        raw = rng.integers(0, 256, (n_blocks, 210), dtype=np.uint8)
        d = rng.uniform(-0.05, 0.05, (n_blocks, 1)).astype(np.float16).view(np.uint8)
        raw[:, 208:210] = d
    else:
        raise ValueError(qtype)
    return raw


def main() -> None:
    rng = np.random.default_rng(20240601)
    cases = []
    for name, qtype in QUANTIZE:
        rows = []
        for x in rows_32(rng):
            q = quantize(x.reshape(1, -1), qtype)
            y = dequantize(q, qtype)
            rows.append({"input": bits(x), "bytes": q.tobytes().hex(), "dequant": bits(y)})
        cases.append({"format": name, "kind": "quantize", "rows": rows})
    for name, qtype in DEQUANT_ONLY:
        rows = []
        for _ in range(3):
            raw = random_blocks(rng, qtype, 2)
            y = dequantize(raw.reshape(1, -1), qtype)
            rows.append({"bytes": raw.tobytes().hex(), "dequant": bits(y)})
        cases.append({"format": name, "kind": "dequantize", "rows": rows})

    doc = {
        "generator": "kernels/tests/vectors/gen_quant_vectors.py",
        "gguf_version": version("gguf"),
        "numpy_version": np.__version__,
        "cases": cases,
    }
    with open(OUT, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {OUT} ({os.path.getsize(OUT)} bytes)")


if __name__ == "__main__":
    main()
