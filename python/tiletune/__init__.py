"""tiletune from Python: tuned CPU LLM inference and kernel tuning.

A thin layer over tiletune's C ABI (``capi/include/tiletune.h``): every call
goes through the same library a C, C++, Swift or JNI app links, loaded with
cffi, which releases the GIL while the library computes. Lifetimes are the
C ABI's: a session holds its model and a generation its session, so a
generator or a logits array stays valid after ``del model`` and
``gc.collect()``.

    import tiletune
    m = tiletune.Model("SmolLM2-135M-Instruct.Q4_1.gguf", threads=2)
    for piece in m.generate("The capital of France is", max_tokens=16, temperature=0):
        print(piece, end="", flush=True)
    m.logits(m.tokenize("Hello"))          # numpy float32 (n, vocab), no copy
    m.chat([{"role": "user", "content": "Hi"}], max_tokens=32)
    m.perplexity(open("wiki.txt").read())
    tiletune.probe()                       # this SoC
    tiletune.tune("model.gguf", budget=60) # tune --model, with its verdicts
"""

from __future__ import annotations

import json
import os
from typing import Callable, Iterable, Iterator, Optional, Sequence, Union

import numpy as np

from ._native import ffi, lib

__all__ = [
    "Generation",
    "Model",
    "Session",
    "Table",
    "TiletuneError",
    "probe",
    "tune",
    "version",
]

PathLike = Union[str, "os.PathLike[str]"]

_STOP = {
    lib.TT_STOP_NONE: None,
    lib.TT_STOP_EOG: "eog",
    lib.TT_STOP_STRING: "stop_string",
    lib.TT_STOP_MAX_TOKENS: "max_tokens",
    lib.TT_STOP_CONTEXT_FULL: "context_full",
    lib.TT_STOP_INTERRUPTED: "interrupted",
}
_KV = {"f32": lib.TT_KV_F32, "f16": lib.TT_KV_F16, "q8_0": lib.TT_KV_Q8_0}
_PROGRESS = {
    lib.TT_PROGRESS_NOTE: "note",
    lib.TT_PROGRESS_STARTED: "started",
    lib.TT_PROGRESS_PROBLEM: "problem",
    lib.TT_PROGRESS_CANDIDATE: "candidate",
    lib.TT_PROGRESS_MEASURED: "measured",
    lib.TT_PROGRESS_JOINT: "joint",
    lib.TT_PROGRESS_CHECK: "check",
    lib.TT_PROGRESS_VERDICT: "verdict",
}


class TiletuneError(RuntimeError):
    """A failed call: ``status`` is the C ABI's ``TT_ERR_*`` code."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _check(status: int) -> None:
    if status != lib.TT_OK:
        p = lib.tt_last_error()
        msg = ffi.string(p).decode("utf-8", "replace") if p != ffi.NULL else "unknown error"
        raise TiletuneError(status, msg)


def _cstr(s: Optional[PathLike], keep: list):
    """A NUL-terminated copy of ``s`` (kept alive in ``keep``), or NULL."""
    if s is None:
        return ffi.NULL
    b = os.fsencode(s) if not isinstance(s, str) else s.encode("utf-8")
    if b"\0" in b:
        raise ValueError("strings passed to tiletune cannot hold NUL characters")
    c = ffi.new("char[]", b)
    keep.append(c)
    return c


def _take_string(pp) -> str:
    """The owned string in ``*pp``, freed."""
    try:
        return ffi.string(pp[0]).decode("utf-8")
    finally:
        lib.tt_string_free(pp[0])


def _take_ids(pids, pn) -> list:
    try:
        return list(ffi.unpack(pids[0], pn[0]))
    finally:
        lib.tt_tokens_free(pids[0], pn[0])


def _ids(token_ids: Iterable[int], what: str):
    """Token ids as a C array (the numpy array it views is returned too)."""
    a = np.asarray(list(token_ids) if not isinstance(token_ids, np.ndarray) else token_ids)
    if a.ndim != 1 or (a.size and not np.issubdtype(a.dtype, np.integer)):
        raise TypeError(f"{what} must be a sequence of int token ids")
    if a.size and (a.min() < 0 or a.max() > 0xFFFFFFFF):
        raise ValueError(f"{what} holds ids outside 0..2^32")
    a = np.ascontiguousarray(a, dtype=np.uint32)
    return a, ffi.from_buffer("uint32_t[]", a)


def version() -> str:
    """The C ABI library's version."""
    return ffi.string(lib.tt_version()).decode()


def probe() -> dict:
    """This SoC as ``tiletune probe`` describes it: cores, clusters, caches,
    ISA features and the fingerprint that keys its tuned kernels."""
    out = ffi.new("char **")
    _check(lib.tt_probe_json(out))
    return json.loads(_take_string(out))


class Table:
    """A selector table: where ``tune`` keeps winners and verdicts and where
    a ``Model`` reads its plan. ``path=None`` is the user's table
    ($TILETUNE_DB, else the XDG data directory). Without ``create`` a
    missing or corrupt file is an error."""

    def __init__(self, path: Optional[PathLike] = None, create: bool = True):
        keep: list = []
        out = ffi.new("TtTable **")
        _check(lib.tt_table_open(_cstr(path, keep), create, out))
        self._h = ffi.gc(out[0], lib.tt_table_free)

    def export(self) -> list:
        """Every SoC's rows, as ``tiletune table export`` writes them."""
        out = ffi.new("char **")
        _check(lib.tt_table_export_json(self._h, out))
        return json.loads(_take_string(out))


def _table(table: Union[None, PathLike, Table]) -> Optional[Table]:
    """A table to write to: a path is opened, and created if missing."""
    if table is None or isinstance(table, Table):
        return table
    return Table(table, create=True)


def _gen_options(max_tokens, temperature, top_k, top_p, min_p, repeat_penalty, seed, stop, keep):
    o = ffi.new("TtGenerateOptions *")
    _check(lib.tt_generate_options_default(o))
    if max_tokens is None or max_tokens < 0:
        max_tokens = 0  # until end of text or a full context
    o.max_tokens = max_tokens
    s = o.sampler
    s.temperature, s.top_k, s.top_p, s.min_p = temperature, top_k, top_p, min_p
    s.repeat_penalty, s.seed = repeat_penalty, seed
    stops = [_cstr(x, keep) for x in (stop or [])]
    if stops:
        arr = ffi.new("const char *[]", stops)
        keep.append(arr)
        o.stop_strings, o.n_stop_strings = arr, len(stops)
    keep.append(o)
    return o


class Generation:
    """A generation: iterate it for text pieces as they become complete.
    ``tokens`` holds the ids sampled so far, ``stop_reason`` why it ended
    (``"eog"``, ``"stop_string"``, ``"max_tokens"``, ``"context_full"``,
    ``"interrupted"``) once it has. It keeps its session and model alive.
    A model without a tokenizer generates ids only (no text pieces)."""

    def __init__(self, session: "Session", prompt: Sequence[int], options, keep: list):
        _, ids = _ids(prompt, "prompt")
        out = ffi.new("TtGeneration **")
        _check(lib.tt_generation_start(session._h, ids, len(ids), options, out))
        self._h = ffi.gc(out[0], lib.tt_generation_free)
        self._session = session
        self._keep = keep
        self._step = ffi.new("TtStep *")
        self.tokens: list = []
        self.stop_reason: Optional[str] = None
        self._pieces: list = []

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        while self.stop_reason is None:
            step = self._step
            _check(lib.tt_generation_next(self._h, step))
            if step.has_token:
                self.tokens.append(step.token)
            text = ffi.unpack(step.text, step.text_len).decode("utf-8") if step.text_len else ""
            self.stop_reason = _STOP[step.stop]
            if text:
                self._pieces.append(text)
                return text
        raise StopIteration

    @property
    def text(self) -> str:
        """The text of the pieces iterated so far."""
        return "".join(self._pieces)

    def run(self) -> "Generation":
        """Runs to the end; returns itself."""
        for _ in self:
            pass
        return self


class Session:
    """One sequence's KV cache on a model, step by step: ``eval`` runs ids
    after what it holds, ``logits`` are then the last position's. It keeps
    its model alive. Use a session from one thread at a time."""

    def __init__(self, model: "Model"):
        out = ffi.new("TtSession **")
        _check(lib.tt_session_new(model._h, out))
        self._h = ffi.gc(out[0], lib.tt_session_free)

    def __len__(self) -> int:
        n = ffi.new("size_t *")
        _check(lib.tt_session_len(self._h, n))
        return n[0]

    def eval(self, token_ids: Sequence[int]) -> np.ndarray:
        """Runs ``token_ids``; returns the last position's logits (a copy:
        the session reuses its buffer)."""
        _, ids = _ids(token_ids, "token_ids")
        _check(lib.tt_session_eval(self._h, ids, len(ids)))
        p, n = ffi.new("const float **"), ffi.new("size_t *")
        _check(lib.tt_session_logits(self._h, p, n))
        return np.frombuffer(ffi.buffer(p[0], n[0] * 4), dtype=np.float32).copy()

    def truncate(self, length: int) -> None:
        """Keeps the first ``length`` positions."""
        _check(lib.tt_session_truncate(self._h, length))

    def generate(self, prompt: Sequence[int], max_tokens: int = 64, temperature: float = 0.8,
                 top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05,
                 repeat_penalty: float = 1.0, seed: int = 0,
                 stop: Optional[Sequence[str]] = None) -> Generation:
        """Generates after what the session holds (see ``Model.generate``)."""
        keep: list = []
        o = _gen_options(max_tokens, temperature, top_k, top_p, min_p, repeat_penalty, seed,
                         stop, keep)
        return Generation(self, prompt, o, keep)


class Model:
    """A model ready to run: a GGUF file or a Hugging Face folder, planned
    with a selector table (``table``: a ``Table``, a path, or None for the
    user's table), on ``threads`` workers (None: every core). Any number of
    threads may use one model at once."""

    def __init__(self, path: PathLike, table: Union[None, PathLike, Table] = None,
                 threads: Optional[int] = None, ctx: Optional[int] = None,
                 kv_type: str = "f32", quant: Optional[str] = None):
        keep: list = []
        o = ffi.new("TtModelOptions *")
        _check(lib.tt_model_options_default(o))
        o.path = _cstr(path, keep)
        if isinstance(table, Table):
            o.table = table._h
            keep.append(table)
        else:
            # A path that does not exist runs the defaults, with a note in
            # `info["notes"]`, as `tiletune run --db` does.
            o.table_path = _cstr(table, keep)
        if threads is not None:
            if threads < 1:
                raise ValueError("threads must be at least 1 (None: every core)")
            o.threads = threads
        if ctx is not None:
            o.ctx = ctx
        if kv_type not in _KV:
            raise ValueError(f"kv_type {kv_type!r} is not one of {sorted(_KV)}")
        o.kv_type = _KV[kv_type]
        o.quant = _cstr(quant, keep)
        out = ffi.new("TtModel **")
        _check(lib.tt_model_load(o, out))
        self._h = ffi.gc(out[0], lib.tt_model_free)
        self.path = os.fspath(path)

    @property
    def info(self) -> dict:
        """Architecture, sizes, context, threads, special ids, load notes."""
        out = ffi.new("char **")
        _check(lib.tt_model_info_json(self._h, out))
        return json.loads(_take_string(out))

    def plan(self, as_json: bool = True) -> Union[dict, str]:
        """The execution plan, as ``tiletune plan`` (``--json``) shows it."""
        out = ffi.new("char **")
        _check(lib.tt_model_plan(self._h, as_json, out))
        s = _take_string(out)
        return json.loads(s) if as_json else s

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list:
        """Token ids of ``text`` (as ``tiletune run`` encodes a prompt)."""
        keep: list = []
        flags = (lib.TT_TOKENIZE_ADD_SPECIAL if add_special else 0) | (
            lib.TT_TOKENIZE_PARSE_SPECIAL if parse_special else 0)
        ids, n = ffi.new("uint32_t **"), ffi.new("size_t *")
        _check(lib.tt_tokenize(self._h, _cstr(text, keep), flags, ids, n))
        return _take_ids(ids, n)

    def detokenize(self, token_ids: Sequence[int], skip_special: bool = True) -> str:
        _, ids = _ids(token_ids, "token_ids")
        out = ffi.new("char **")
        _check(lib.tt_detokenize(self._h, ids, len(ids), skip_special, out))
        return _take_string(out)

    def _messages(self, messages: Sequence[dict], keep: list):
        msgs = ffi.new("TtChatMessage[]", max(len(messages), 1))
        for i, m in enumerate(messages):
            msgs[i].role = _cstr(m["role"], keep)
            msgs[i].content = _cstr(m["content"], keep)
        keep.append(msgs)
        return msgs

    def apply_chat_template(self, messages: Sequence[dict],
                            add_generation_prompt: bool = True) -> str:
        """The model's chat template applied to ``[{"role", "content"}]``."""
        keep: list = []
        msgs = self._messages(messages, keep)
        out = ffi.new("char **")
        _check(lib.tt_chat_apply_template(self._h, msgs, len(messages), add_generation_prompt,
                                          out))
        return _take_string(out)

    def session(self) -> Session:
        """A new, empty session (KV cache) on this model."""
        return Session(self)

    def generate(self, prompt: Union[str, Sequence[int]], max_tokens: int = 64,
                 temperature: float = 0.8, top_k: int = 40, top_p: float = 0.95,
                 min_p: float = 0.05, repeat_penalty: float = 1.0, seed: int = 0,
                 stop: Optional[Sequence[str]] = None) -> Generation:
        """Generates from ``prompt`` (text, tokenized as ``tiletune run``
        does, or token ids) on a new session: an iterator of text pieces.
        The defaults are ``tiletune run``'s; ``temperature=0`` is greedy;
        ``max_tokens=None`` runs to the end of text or a full context."""
        ids = self.tokenize(prompt) if isinstance(prompt, str) else prompt
        return self.session().generate(ids, max_tokens, temperature, top_k, top_p, min_p,
                                       repeat_penalty, seed, stop)

    def chat(self, messages: Sequence[dict], max_tokens: int = 256, temperature: float = 0.8,
             top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05,
             repeat_penalty: float = 1.0, seed: int = 0, stream: bool = False
             ) -> Union[str, Generation]:
        """The assistant's reply to ``[{"role": ..., "content": ...}]``,
        prompted as ``tiletune chat`` does; with ``stream`` a ``Generation``
        to iterate instead of the whole reply."""
        keep: list = []
        msgs = self._messages(messages, keep)
        ids, n = ffi.new("uint32_t **"), ffi.new("size_t *")
        _check(lib.tt_chat_tokenize(self._h, msgs, len(messages), ids, n))
        g = self.generate(_take_ids(ids, n), max_tokens, temperature, top_k, top_p, min_p,
                          repeat_penalty, seed)
        return g if stream else g.run().text

    def logits(self, token_ids: Sequence[int]) -> np.ndarray:
        """The logits of every position of ``token_ids`` run from an empty
        context, as ``tiletune run --dump-logits`` writes them: a float32
        array (n, vocab) over the library's own buffer (no copy), which
        stays valid after the model is gone."""
        arr, ids = _ids(token_ids, "token_ids")
        p, n = ffi.new("float **"), ffi.new("size_t *")
        _check(lib.tt_model_logits(self._h, ids, len(ids), p, n))
        count = n[0]
        owner = ffi.gc(p[0], lambda q: lib.tt_floats_free(q, count))
        flat = np.frombuffer(ffi.buffer(owner, count * 4), dtype=np.float32)
        return flat.reshape(len(arr), count // max(len(arr), 1))

    def perplexity(self, text: str, ctx: int = 512, chunks: Optional[int] = None) -> float:
        """Perplexity of ``text`` as ``tiletune ppl`` computes it (chunks of
        ``ctx`` tokens, the second half of each scored)."""
        keep: list = []
        out = ffi.new("TtPerplexity *")
        _check(lib.tt_model_perplexity(self._h, _cstr(text, keep), ctx, chunks or 0, out))
        return out.ppl


def tune(model_path: PathLike, budget: float = 60.0, table: Union[None, PathLike, Table] = None,
         threads: Optional[int] = None, workload: Optional[str] = None, rounds: int = 3,
         strategy: Optional[str] = None, seed: int = 0x7EE1,
         progress: Optional[Callable[[str, int, int, float, str], None]] = None) -> dict:
    """``tiletune tune --model``: tunes the model's kernel problems for this
    SoC within ``budget`` seconds (0: no limit), stores the joint layout
    choice, times the tuned plan against the default plan and stores the
    verdicts in ``table`` (a ``Table``, a path, or None for the user's).
    ``progress(kind, done, total, best_seconds, text)`` hears each event.
    Returns the report (problems, verdicts, what the runtime makes of them)."""
    keep: list = []
    t = _table(table)
    o = ffi.new("TtTuneOptions *")
    _check(lib.tt_tune_options_default(o))
    o.model = _cstr(model_path, keep)
    o.table = t._h if t is not None else ffi.NULL
    o.budget_seconds = float(budget)
    o.threads = threads or 0
    o.workload = _cstr(workload, keep)
    o.rounds = rounds
    o.strategy = _cstr(strategy, keep)
    o.seed = seed
    out = ffi.new("TtCampaign **")
    _check(lib.tt_campaign_new(o, out))
    campaign = ffi.gc(out[0], lib.tt_campaign_free)
    raised: list = []

    def on_event(user, p):
        if raised:
            return
        try:
            text = ffi.string(p.text).decode("utf-8", "replace")
            progress(_PROGRESS.get(p.kind, str(p.kind)), p.done, p.total, p.best_seconds, text)
        except BaseException as e:  # Ctrl-C too: stop, re-raise once the campaign returns
            raised.append(e)
            lib.tt_campaign_stop(campaign)

    cb = ffi.callback("void(void *, const TtProgress *)", on_event) if progress else ffi.NULL
    status = lib.tt_campaign_run(campaign, cb, ffi.NULL)
    if raised:
        raise raised[0]
    _check(status)
    rep = ffi.new("char **")
    _check(lib.tt_campaign_report_json(campaign, rep))
    return json.loads(_take_string(rep))
