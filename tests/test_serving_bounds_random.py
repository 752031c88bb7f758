"""The serving walk's bounds against the whole walk over seeded random questions: serve()'s bound
(apsi.serving.walk.Bound) and the frontier's (apsi.serving.frontier.Staircase) set aside only
layouts that cannot change the answer, so the plan, and the frontier, are the whole walk's
(tests/test_serving_pinned.py checks a few chosen questions so). The expected values are the
whole walk's own answers: no figure is typed in.

Each case draws a model preset (dense and MoE), an engine, a precision, GPU types ("any" among
them), a load (a rate, a concurrency or none), an inventory now and then, and TTFT and TPOT
targets. 20 cases here; APSI_DEEP=1 runs 400."""

from __future__ import annotations

import os
import random

import pytest

import apsi.serving.plan as plan_module
from apsi import ApsiError, serve
from apsi.serving.plan import serve_frontier

DEEP = os.environ.get("APSI_DEEP") == "1"
CASES = 400 if DEEP else 20
MODELS = ["llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "llama-3.2-1b", "mistral-7b", "mixtral-8x7b",
          "qwen3-32b", "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3", "gemma-2-27b"]
GPUS = ["H100", "H200", "B200", "A100", "L40S", "MI300X", "H100,H200", "any", "any"]


def question(seed: int) -> tuple[str, dict]:
    """A random serving question (module docstring), the same for a seed."""
    r = random.Random(seed)
    options: dict = dict(engine=r.choice(["vllm", "sglang", "trtllm"]), precision=r.choice(["bf16", "fp8", "fp8"]),
                         gpu=r.choice(GPUS))
    load = r.random()
    if load < 0.5:
        options["rate"] = r.choice([0.5, 2, 10, 40, 200])
    elif load < 0.8:
        options["concurrency"] = r.choice([1, 16, 200, 2000])
    if r.random() < 0.4:
        options["tpot"] = r.choice([15, 30, 60, 120])
    if r.random() < 0.4:
        options["ttft"] = r.choice([300, 1000, 5000, "p99:500", "p99:3000"])
    if "rate" in options or "concurrency" in options:
        if r.random() < 0.2:
            options["objective"] = "cost"
        if r.random() < 0.25:
            types = ["H100", "H200"] if "," in options["gpu"] or options["gpu"] == "any" else [options["gpu"]]
            options["inventory"] = ",".join(f"{t}={r.choice([8, 16, 32])}" for t in types)
    return r.choice(MODELS), options


def _answer(call, model: str, options: dict):
    try:
        return call(model, **options)
    except ApsiError as e:
        return f"{type(e).__name__}: {e}"


def _plain(plan) -> object:
    """A plan as compared: the Solver's counts differ, and the note listing KV-starved layouts names
    those weighed in full (as tests/test_serving_pinned.py compares them)."""
    if isinstance(plan, str):
        return plan
    d = plan.model_dump()
    d.pop("solver")
    d["notes"] = [n for n in d["notes"] if not n.startswith("KV-starved layouts weighed")]
    return d


@pytest.mark.parametrize("seed", range(CASES))
def test_the_bounds_give_the_whole_walks_answers(seed: int, monkeypatch) -> None:
    model, options = question(seed)
    bounded = _plain(_answer(serve, model, options))
    frontier_options = {k: v for k, v in options.items() if k not in ("rate", "concurrency", "inventory", "objective")}
    front = _answer(serve_frontier, model, frontier_options)
    whole = plan_module.walked
    monkeypatch.setattr(plan_module, "walked", lambda q, bounded=False, aside=None: whole(q, False))
    assert _plain(_answer(serve, model, options)) == bounded, (model, options)
    assert _answer(serve_frontier, model, frontier_options) == front, (model, frontier_options)
