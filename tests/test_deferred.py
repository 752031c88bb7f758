"""What a training plan defers (apsi.model.schema.Plan.defer) costs nothing until it is read and
reads the same as when worked out at once: its Serving line (apsi.serving.trained, `apsi serve`
on the same inputs) and, without explain, its binding rule and Why line."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import pytest

from apsi import ApsiError, evaluate, plan, serve
from apsi.outputs.text import plan_text


def test_the_serving_line_is_serve_of_the_placed_model() -> None:
    # A bare MoE size: the plan serves the architecture it placed (1,001.44B, 34.67B active), and
    # so does serve() on the same size, GPU, precision and load (10 requests/s,
    # apsi.serving.trained.DEFAULT_RATE): the same replicas, GPUs and TPOT, to the bit.
    p = plan("1T", active="32B", tokens="15T", precision="fp8")
    alone = serve("1T", active="32B", precision="fp8", gpu=p.gpu, rate=10)
    assert p.serve is not None
    # The same plan but for the Notes on the placement, which the training plan says itself.
    assert p.serve.model_dump(exclude={"notes"}) == alone.model_dump(exclude={"notes"})
    extra = [n for n in alone.notes if n not in p.serve.notes]
    assert [n.split(",", 1)[1] for n in extra] == [n.split(",", 1)[1] for n in p.notes if "placed" in n]
    # The mix is named whole: each kind with its replicas, not its first group alone.
    line = next(x for x in plan_text(p).splitlines() if x.strip().startswith("Serving"))
    if len(alone.groups) > 1:
        for g in alone.groups:
            assert f"{g.replicas:,} x " in line and f"batch {g.batch:,}" in line
    assert f"({alone.gpus:,} GPUs)" in line


def test_a_plan_without_a_serving_plan_says_why_as_serve_does(tmp_path) -> None:
    # GPT-2's 1,024 learned positions hold no request of the Serving line's 1,000 in + 1,000 out:
    # the line said "no replica fits on H100 (apsi serve says why)". It now gives serve()'s own
    # line for the same question, and the JSON carries it (serve_refused).
    config = tmp_path / "gpt2.json"
    config.write_text(json.dumps({"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12,
                                  "vocab_size": 50257, "n_positions": 1024}))
    p = plan(str(config), tokens="10B", seq=1024)
    # Without seq, a learned position table shorter than the default 4,096 sets it (GPT-2's 1,024).
    assert plan(str(config), tokens="10B").seq == 1024
    with pytest.raises(ApsiError) as refused:
        serve(str(config), gpu=p.gpu, rate=10)
    assert p.serve is None and p.serve_refused == str(refused.value)
    assert "1,024-token context" in p.serve_refused
    line = next(x for x in plan_text(p).splitlines() if x.strip().startswith("Serving"))
    assert line.strip() == f"Serving     none on {p.gpu}; apsi serve on it says: {refused.value}"
    assert json.loads(p.model_dump_json())["serve_refused"] == p.serve_refused
    served = plan("llama-3.1-70b", tokens="15T")
    assert served.serve is not None and served.serve_refused is None


def test_the_serving_plan_is_worked_out_when_read_and_the_json_is_the_same() -> None:
    p = plan("llama-3.1-70b", tokens="15T")
    assert "serve" not in p.__dict__  # deferred: the walk and evaluate() never built it
    dumped = json.loads(p.model_dump_json())
    keys = list(dumped)
    assert keys == list(type(p).model_fields)  # the fields' order, serve in its place
    q = plan("llama-3.1-70b", tokens="15T")
    assert q.serve is not None and "serve" in q.__dict__
    assert q.model_dump_json() == p.model_dump_json()  # read first or dumped first: the same bytes
    # Across processes (apsi run --jobs) a deferred plan travels as it is.
    r = pickle.loads(pickle.dumps(plan("llama-3.1-70b", tokens="15T")))
    assert r.model_dump_json() == p.model_dump_json()
    e = evaluate("llama-3.1-70b", tokens="15T", tp=8, pp=5, dp=65)
    assert "serve" not in e.__dict__ and e.serve is not None


def test_a_training_plan_imports_no_or_tools() -> None:
    # The default CLI plan (its Serving line read) needs no CP-SAT: a mix without an inventory is
    # settled by apsi.serving.mix.cover_free. Nor PyYAML: the shipped catalog is read from its
    # parsed copy (apsi.catalog.SHIPPED_CACHE).
    code = ("import sys, io, contextlib\nfrom apsi.cli.app import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    main(['plan', '1T', '--active', '32B', '--tokens', '15T', '--precision', 'fp8'])\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('ortools', 'pandas', 'numpy', 'yaml')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_explanation_is_deferred_without_explain_and_reads_the_same() -> None:
    # DeepSeek-V3 on H100 is decided by memory: the Why line's what-if walk (the fastest layout on
    # fewer GPUs) runs when binding or why is first read, on the plan's own searches, and says
    # what explain=True says at once.
    lazy = plan("deepseek-v3")
    assert "why" not in lazy.__dict__ and "binding" not in lazy.__dict__
    eager = plan("deepseek-v3", explain=True)
    assert (lazy.binding, lazy.why) == (eager.binding, eager.why)
    assert lazy.binding == "memory" and lazy.why.startswith("memory decides: no Megatron layout on fewer than 168")
    # The JSON holds every field in its place; a deferred plan pickles with its explanation worked out.
    other = plan("deepseek-v3")
    assert pickle.loads(pickle.dumps(other)).model_dump_json() == lazy.model_dump_json()


def test_a_copy_and_its_original_each_read_what_they_deferred() -> None:
    # model_copy shares the private dict's values: reading a copy must leave the original's
    # deferred fields to it (apsi.model.deferred), in either order.
    original = plan("llama-3.1-70b", tokens="15T")
    copy = original.model_copy(update={"levers": []})
    assert copy.serve is not None and copy.why
    assert "serve" not in original.__dict__ and original.serve == copy.serve and original.why == copy.why
