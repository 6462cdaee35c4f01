"""The tiletune package as a user runs it: greedy tokens and logits bit for
bit equal to `tiletune run` (`--json`, `--dump-logits`), perplexity equal to
`tiletune ppl`, objects that outlive what made them (also under
`gc.collect()` and from two Python threads), the GIL released while the
library computes, clear errors, and a small `tune --model` campaign."""

import gc
import json
import threading

import numpy as np
import pytest

import tiletune
from conftest import BOS, IM_END, fixture, models_dir


@pytest.mark.parametrize("name", ["tied", "untied"])
def test_hf_fixtures_match_the_cli_bit_for_bit(name, cli, tmp_path):
    d, exp = fixture(name)
    ids = ",".join(map(str, exp["tokens"]))
    run = json.loads(cli("--json", "run", "--model", d, "--token-ids", ids, "-n", 8,
                         "--temp", 0, "-t", 2))
    dump = tmp_path / "logits.json"
    cli("run", "--model", d, "--token-ids", ids, "-n", 8, "--temp", 0, "-t", 2,
        "--dump-logits", dump)
    dumped = json.loads(dump.read_text())

    m = tiletune.Model(d, threads=2)
    g = m.generate(exp["tokens"], max_tokens=8, temperature=0)
    assert list(g) == []  # no tokenizer.json: ids only
    assert g.tokens == run["generated_ids"] == exp["greedy"]
    assert g.stop_reason == "max_tokens"

    logits = m.logits(exp["tokens"])
    assert logits.shape == (len(exp["tokens"]), 256) and logits.dtype == np.float32
    assert np.array_equal(logits, np.array(dumped["prompt_logits"], dtype=np.float32))
    # Step by step, as the dump's decode steps ran.
    s = m.session()
    s.eval(exp["tokens"])
    for step in dumped["generated"]:
        assert np.array_equal(s.eval([step["token"]]), np.array(step["logits"], dtype=np.float32))
    assert len(s) == len(exp["tokens"]) + 8


def test_text_generation_and_perplexity_match_the_cli(tiny, cli):
    m = tiletune.Model(tiny, threads=2)
    assert m.tokenize("ab abc") == [BOS, 28, 26, 29]
    assert m.detokenize([28, 26, 29]) == "ab abc"
    run = json.loads(cli("--json", "run", "--model", tiny, "--prompt", "ab abc", "-n", 24,
                         "--temp", 0, "-t", 2))
    g = m.generate("ab abc", max_tokens=24, temperature=0)
    pieces = list(g)
    assert pieces and all(isinstance(p, str) and p for p in pieces)
    assert g.tokens == run["generated_ids"]
    assert "".join(pieces) == g.text == run["text"]
    # Sampled, seeded: the same seed gives the same tokens as the CLI.
    run = json.loads(cli("--json", "run", "--model", tiny, "--prompt", "abc", "-n", 16,
                         "--temp", 0.9, "--seed", 5, "-t", 2))
    assert m.generate("abc", max_tokens=16, temperature=0.9, seed=5).run().tokens == \
        run["generated_ids"]

    text = tiny.parent / "text.txt"
    text.write_text("abc ab a b c ab abc " * 40)
    out = cli("--json", "ppl", "--model", tiny, "-f", text, "--ctx", 32, "--chunks", 4, "-t", 2)
    want = json.loads(out.strip().splitlines()[-1])
    assert m.perplexity(text.read_text(), ctx=32, chunks=4) == want["ppl"]


def test_chat_and_stop_strings(tiny):
    m = tiletune.Model(tiny, threads=1)
    msgs = [{"role": "user", "content": "ab"}]
    prompt = m.apply_chat_template(msgs)
    assert prompt == "<|im_start|>user\nab<|im_end|>\n<|im_start|>assistant\n"
    reply = m.chat(msgs, max_tokens=12, temperature=0)
    g = m.generate(m.tokenize(prompt), max_tokens=12, temperature=0).run()
    assert reply == g.text
    assert g.stop_reason in ("max_tokens", "eog")
    assert IM_END in m.info["eog"]
    streamed = m.chat(msgs, max_tokens=12, temperature=0, stream=True)
    assert "".join(streamed) == reply
    # A stop string ends the text before it.
    full = m.generate("ab", max_tokens=24, temperature=0).run().text
    cut = full[2:4]
    g = m.generate("ab", max_tokens=24, temperature=0, stop=[cut]).run()
    assert g.stop_reason == "stop_string" and g.text == full[: full.index(cut)]


def test_objects_outlive_the_model(tiny):
    m = tiletune.Model(tiny, threads=1)
    want = m.generate("ab", max_tokens=10, temperature=0).run()
    want_logits = np.array(m.logits([BOS, 1, 2]))  # a copy
    g = m.generate("ab", max_tokens=10, temperature=0)
    first = next(g)
    logits = m.logits([BOS, 1, 2])
    assert not logits.flags["OWNDATA"]  # the library's buffer, not a copy
    s = m.session()
    del m
    gc.collect()
    assert first + "".join(g) == want.text and g.tokens == want.tokens
    junk = [np.ones(1 << 16, dtype=np.float32) for _ in range(64)]  # reuse freed memory, if any
    assert np.array_equal(logits, want_logits)
    del junk
    assert s.eval([BOS, 1]).shape == (34,)
    # A generation whose session and model are gone is still complete.
    g2 = s.generate([3], max_tokens=3, temperature=0)
    del s
    gc.collect()
    assert len(g2.run().tokens) == 3


def test_two_python_threads_share_a_model(tiny):
    m = tiletune.Model(tiny, threads=2)
    prompts = ["ab", "c b a"]
    alone = [m.generate(p, max_tokens=20, temperature=0).run().tokens for p in prompts]
    alone_logits = [np.array(m.logits(m.tokenize(p))) for p in prompts]
    assert alone[0] != alone[1]
    errors = []

    def work(i):
        try:
            for _ in range(10):
                assert m.generate(prompts[i], max_tokens=20, temperature=0).run().tokens == alone[i]
                assert np.array_equal(m.logits(m.tokenize(prompts[i])), alone_logits[i])
                gc.collect()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors

    # Generators and arrays made, the model dropped and collected, then the
    # generators drained on two threads at once.
    gens = [m.generate(p, max_tokens=20, temperature=0) for p in prompts]
    arrays = [m.logits(m.tokenize(p)) for p in prompts]
    del m
    gc.collect()
    drained = [None, None]

    def drain(i):
        drained[i] = gens[i].run().tokens
        gc.collect()

    threads = [threading.Thread(target=drain, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert drained == alone
    assert all(np.array_equal(a, b) for a, b in zip(arrays, alone_logits))


def test_the_gil_is_released_while_the_library_computes(tiny):
    m = tiletune.Model(tiny, threads=1)
    text = "abc ab a b c ab abc " * 3000
    counted, running = [0], [True]

    def count():
        while running[0]:
            counted[0] += 1

    t = threading.Thread(target=count)
    t.start()
    before = counted[0]
    m.perplexity(text, ctx=128)  # a few hundred milliseconds in the library
    during = counted[0] - before
    running[0] = False
    t.join()
    assert during > 1000, f"the counting thread ran {during} times during the call"


def test_errors_are_clear(tiny, tmp_path):
    with pytest.raises(tiletune.TiletuneError) as e:
        tiletune.Model(tmp_path / "missing.gguf")
    assert "missing.gguf" in str(e.value) and e.value.status != 0
    with pytest.raises(ValueError):
        tiletune.Model(tiny, kv_type="f8")
    d, _ = fixture("tied")
    m = tiletune.Model(d)
    with pytest.raises(tiletune.TiletuneError, match="tokenizer.json"):
        m.generate("hello")
    with pytest.raises(tiletune.TiletuneError, match="outside the 256-token vocabulary"):
        m.logits([999])
    with pytest.raises(ValueError):
        m.logits([-1])
    with pytest.raises(tiletune.TiletuneError, match="top-p"):
        m.generate([1, 2], top_p=0.0)
    with pytest.raises(tiletune.TiletuneError, match="does not exist"):
        tiletune.Table(tmp_path / "none.db", create=False)


def test_probe_describes_this_soc():
    soc = tiletune.probe()
    assert soc["fingerprint"] and len(soc["cores"]) >= 1
    assert tiletune.version().count(".") == 2


def test_tune_runs_a_model_campaign(tiny, tmp_path):
    events = []
    table = tiletune.Table(tmp_path / "tuned.db")
    report = tiletune.tune(tiny, budget=2, table=table, threads=2, workload="pp16,tg8",
                           progress=lambda *e: events.append(e))
    kinds = {e[0] for e in events}
    assert {"started", "problem", "candidate", "measured", "joint", "check", "verdict"} <= kinds
    # Each phase is timed, or not timed because its tuned choices are the
    # default plan's (or nothing of it was tuned).
    model = report["model"]
    assert sorted([v["phase"] for v in model["verdicts"]] + model["as_default"]) == ["decode", "prefill"]
    plan = tiletune.Model(tiny, table=table, threads=2).plan(as_json=False)
    for phase in ("prefill", "decode"):
        line = next(l for l in plan.splitlines() if l.startswith(f"verdict {phase}: "))
        assert any(s in line for s in ("over 3 alternated rounds", "(nothing to time)", "nothing tuned")), plan
    assert len(table.export()[0].get("verdicts", [])) == len(model["verdicts"])
    # An exception in the callback (Ctrl-C too) stops the campaign and is
    # raised; the same campaign run again resumes from what it measured.
    with pytest.raises(ZeroDivisionError):
        tiletune.tune(tiny, budget=1, table=table, threads=1, workload="tg4",
                      progress=lambda *e: 1 / 0)
    events.clear()
    tiletune.tune(tiny, budget=1, table=table, threads=1, workload="tg4",
                  progress=lambda *e: events.append(e))
    assert any(e[0] == "note" and e[4].startswith("resuming campaign") for e in events), events


@pytest.mark.skipif(models_dir() is None, reason="set TILETUNE_MODELS_DIR (scripts/setup fetches SmolLM2)")
def test_smollm2_matches_the_cli(cli, tmp_path):
    smol = models_dir() / "SmolLM2-135M-Instruct.Q4_1.gguf"
    prompt = "The capital of France is"
    run = json.loads(cli("--json", "run", "--model", smol, "--prompt", prompt, "-n", 24,
                         "--temp", 0, "-t", 2))
    m = tiletune.Model(smol, threads=2)
    assert m.tokenize(prompt) == run["prompt_ids"]
    g = m.generate(prompt, max_tokens=24, temperature=0)
    assert "".join(g) == run["text"] and g.tokens == run["generated_ids"]
    dump = tmp_path / "logits.json"
    cli("run", "--model", smol, "--token-ids", ",".join(map(str, run["prompt_ids"])), "-n", 0,
        "--temp", 0, "-t", 2, "--dump-logits", dump)
    want = np.array(json.loads(dump.read_text())["prompt_logits"], dtype=np.float32)
    assert np.array_equal(m.logits(run["prompt_ids"]), want)
    text = tmp_path / "text.txt"
    text.write_text("The quick brown fox jumps over the lazy dog. " * 60)
    out = cli("--json", "ppl", "--model", smol, "-f", text, "--ctx", 128, "--chunks", 2, "-t", 2)
    assert m.perplexity(text.read_text(), ctx=128, chunks=2) == \
        json.loads(out.strip().splitlines()[-1])["ppl"]
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    reply = m.chat(msgs, max_tokens=16, temperature=0)
    assert reply.strip() and reply == "".join(m.chat(msgs, max_tokens=16, temperature=0,
                                                     stream=True))
    assert m.apply_chat_template(msgs).startswith("<|im_start|>")
