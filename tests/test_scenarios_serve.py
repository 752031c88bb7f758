"""Serving runs in scenario files (`kind: serve`): each is serve() with its keys, defaults apply to
the runs whose kind takes them, a bad serving run costs only itself, and every output format
carries them."""

from __future__ import annotations

import csv
import io
import json

from apsi.outputs.schema import RunOutput
from apsi.api.scenarios import run_scenarios
from apsi.serving.plan import serve
from apsi.serving.replica import layout_words
from apsi.outputs.tables import render

SCENARIO = {
    "defaults": {"tokens": "1T", "precision": "fp8"},
    "runs": [
        {"name": "train", "params": "llama-3.1-8b"},
        {"name": "serve", "kind": "serve", "params": "llama-3.1-70b", "tpot": 30, "rate": [5, 20]},
        {"name": "bad", "kind": "serve", "params": "llama-3.1-70b", "tokens": "1T"},
        {"name": "unreachable", "kind": "serve", "params": "llama-3.1-70b", "tpot": 1},
    ],
}


def test_a_serving_run_is_serve_with_its_keys_and_the_defaults_it_takes() -> None:
    results = run_scenarios(SCENARIO, jobs=1)
    by = {r.name: r for r in results}
    assert [r.kind for r in results] == ["train", "serve", "serve", "serve", "serve"]
    assert by["train"].plan is not None and by["train"].serve is None
    for rate in (5, 20):
        got = by[f"serve rate={rate}"].serve
        # precision fp8 comes from the defaults; tokens (a training key) does not apply.
        assert got == serve("llama-3.1-70b", precision="fp8", tpot=30, rate=rate)
    assert by["bad"].error is not None and "tokens is a key of a train run" in by["bad"].error
    assert by["unreachable"].error is not None and "no layout meets the targets" in by["unreachable"].error


def test_every_format_carries_the_serving_runs() -> None:
    results = run_scenarios(SCENARIO, jobs=1)
    text = render(results, "table")
    assert "serving run" in text and "serve rate=5" in text and "error: run 'bad'" in text
    rows = list(csv.DictReader(io.StringIO(render(results, "csv"))))
    served = {r["name"]: r for r in rows}
    want = serve("llama-3.1-70b", precision="fp8", tpot=30, rate=20)
    assert int(served["serve rate=20"]["serve_gpus"]) == want.gpus
    assert served["train"]["serve_gpus"] == "" and served["train"]["gpus"] != ""
    document = json.loads(render(results, "json"))
    RunOutput.model_validate(document)
    assert document[1]["name"] == "serve rate=5" and document[1]["gpus"] == serve(
        "llama-3.1-70b", precision="fp8", tpot=30, rate=5).gpus
    assert "| serving run |" in render(results, "markdown")


def test_a_file_without_serving_runs_prints_as_before() -> None:
    only = {"runs": [{"params": "7B", "framework": "reference"}]}
    results = run_scenarios(only, jobs=1)
    assert "serving run" not in render(results, "table")
    assert "serve_" not in render(results, "csv").splitlines()[0]


def test_a_mixed_plans_row_gives_every_kinds_batch_and_the_slowest_latencies() -> None:
    # A plan of two replica kinds (1 x TP 2 on H100 and 8 x TP 2 on H200 at 40 requests/s of
    # Llama 3.1 70B FP8) showed the first kind's batch and TTFT beside the slowest kind's TPOT:
    # one row mixed two kinds' figures. It now joins the batches as it joins the layouts, and
    # gives the slowest kind's TTFT and TPOT, the latencies every request is held to.
    mixed = {"runs": [{"name": "mix", "kind": "serve", "params": "llama-3.1-70b", "precision": "fp8", "rate": 40,
                       "inventory": {"H100": 16, "H200": 16}}]}
    want = serve("llama-3.1-70b", precision="fp8", rate=40, inventory={"H100": 16, "H200": 16})
    assert len(want.groups) == 2
    row = next(csv.DictReader(io.StringIO(render(run_scenarios(mixed, jobs=1), "csv"))))
    assert row["serve_batch"] == "; ".join(f"{g.batch:,}" for g in want.groups)
    assert float(row["serve_ttft_ms"]) == max(g.ttft_ms for g in want.groups)
    assert float(row["serve_tpot_ms"]) == max(g.tpot_ms for g in want.groups)
    assert row["serve_layout"] == "; ".join(layout_words(g.tp, g.pp, g.ep, g.attention_dp) for g in want.groups)
    # The GPUs joined as the layouts are ("H100,H200" read as one cell beside "TP 2; TP 2"), and the
    # p99 TTFT beside the mean: a p99 target is checked against its own column.
    assert row["serve_gpu"] == "; ".join(g.gpu for g in want.groups)
    assert float(row["serve_ttft_p99_ms"]) == max(g.ttft_p99_ms for g in want.groups)


def test_null_leaves_out_a_key_of_the_other_kind_as_its_default_is() -> None:
    # "null puts a key back to plan()'s default" (docs/scenarios.md): a serving run inherits a
    # training default such as tokens without a word, yet `tokens: null` on it was refused as "a
    # key of a train run". It now leaves the key out; a value for it is still refused.
    runs = run_scenarios({"defaults": {"tokens": "1.4T"}, "runs": [
        {"name": "nulled", "kind": "serve", "params": "llama-3.1-70b", "rate": 5, "tokens": None},
        {"name": "given", "kind": "serve", "params": "llama-3.1-70b", "rate": 5, "tokens": "1T"},
        {"name": "train", "params": "7B", "tokens": "1T", "framework": "reference", "rate": None}]}, jobs=1)
    by = {r.name: r for r in runs}
    assert by["nulled"].error is None and by["nulled"].serve == serve("llama-3.1-70b", rate=5)
    assert by["given"].error is not None and "tokens is a key of a train run" in by["given"].error
    assert by["train"].error is None and by["train"].plan is not None
