"""The serving validation harness's own arithmetic (benchmarks/serving_validation.py): how a
benchmark's protocol enters the predicted figures, apart from the engine model it scores."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _harness():
    spec = importlib.util.spec_from_file_location("serving_validation", ROOT / "benchmarks" / "serving_validation.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("serving_validation", module)
    spec.loader.exec_module(module)
    return module


sv = _harness()


def test_a_replica_that_keeps_up_has_no_backlog() -> None:
    assert sv.backlog(500, 10.0, 64, 10.0) == 0.0
    assert sv.backlog(500, 4.0, 64, 10.0) == 0.0


def test_all_at_once_the_requests_past_the_places_wait_their_turn() -> None:
    # 500 requests released together ("INF" in TensorRT-LLM's online table), 100 places, 10
    # completions a second: the k-th of the other 400 finds a place (k - 99) / 10 s after the
    # start, so the mean over the run is sum_{j=1..400} j / 10 / 500 = 400 * 401 / 2 / 10 / 500.
    assert sv.backlog(500, None, 100, 10.0) == pytest.approx(400 * 401 / 2 / 10 / 500, rel=1e-12)
    # Every request has a place: none waits.
    assert sv.backlog(500, None, 500, 10.0) == 0.0


def test_an_offered_rate_past_capacity_queues_as_the_run_goes_on() -> None:
    # 20 requests/s offered to 10 places completing 10 a second: the k-th arrives at k / 20 and
    # finds a place at (k - 9) / 10, waiting (k - 9) / 10 - k / 20 when that is positive (k >= 19).
    want = sum(max(0.0, (k - 9) / 10 - k / 20) for k in range(10, 100)) / 100
    assert sv.backlog(100, 20.0, 10, 10.0) == pytest.approx(want, rel=1e-12)
    assert want > 0 and math.isfinite(want)


def test_the_fit_counts_absolute_log_errors_per_figure() -> None:
    # loss(): each figure's mean absolute log error, summed over the figures with WEIGHTS; a row the
    # model cannot state counts UNFIT_PENALTY for each of its figures.
    class Row:
        def __init__(self, measured: dict, got: dict | None) -> None:
            self.measured, self.got = measured, got

    rows = [Row({"ttft": 100.0, "tpot": 10.0}, {"ttft": 200.0, "tpot": 10.0}),
            Row({"ttft": 100.0}, {"ttft": 50.0}),
            Row({"throughput": 5.0}, None)]
    saved = sv.predict
    sv.predict = lambda case, cal: case.got
    try:
        got = sv.loss(rows, None)
    finally:
        sv.predict = saved
    want = (sv.WEIGHTS["ttft"] * (math.log(2) + math.log(2)) / 2 + sv.WEIGHTS["tpot"] * 0.0
            + sv.WEIGHTS["throughput"] * sv.UNFIT_PENALTY)
    assert got == pytest.approx(want, rel=1e-12)


def test_the_collection_with_a_request_queued_beyond_the_batch_waits_one_completion() -> None:
    # benchmarks/serving_validation.py QUEUED_BEYOND_BATCH: TensorRT-LLM 1.0.0rc3's Llama 3.1 8B rows
    # of aiconfigurator's sample are predicted as a run holding one request more than the engine's
    # batch, in process. Their TTFT is then the same row's without the queued request (and with no
    # per-request latency) plus one completion interval: 1 / the replica's completions per second,
    # which by Little's law is the predicted request latency over the concurrency.
    from apsi.serving.calibrated import CALIBRATION

    all_cases, _ = sv.cases()
    queued = [c for c in all_cases if sv._queued(c)]
    assert {(c.engine, c.row["model"], c.row["engine_version"]) for c in queued} == {("trtllm", "llama-3.1-8b", "1.0.0rc3")}
    assert len(queued) == 78  # benchmarks/serving/README.md: the collection's rows in the subset
    # No other row of any source is predicted so.
    assert not any(sv._queued(c) for c in all_cases if c.engine != "trtllm" or c.row["model"] != "llama-3.1-8b")
    cal = CALIBRATION["trtllm"]
    case = next(c for c in queued if c.row["concurrency"] == 8 and c.row["tp"] == 1 and c.row["osl"] == 128)
    got = sv.predict(case, cal)
    plain = sv.predict(case._replace(row={**case.row, "engine_version": None}),
                       cal.model_copy(update={"request_ms": 0.0, "stream_us": 0.0}))
    assert got is not None and plain is not None
    latency_ms = plain["ttft"] + (case.row["osl"] - 1) * plain["tpot"]
    assert got["tpot"] == pytest.approx(plain["tpot"], rel=1e-12)
    # plain's TTFT holds the closed loop's first wave (first_wave: a tenth of the requests wait for
    # up to 7 prompts), which the steady-state completion interval does not: about 1% here.
    assert got["ttft"] - plain["ttft"] == pytest.approx(latency_ms / case.row["concurrency"], rel=0.02)
    assert got["ttft"] - plain["ttft"] < latency_ms / case.row["concurrency"]


def test_the_requests_in_flight_at_a_rate_are_within_a_quarter_of_the_engines_own() -> None:
    # TensorRT-LLM's online validation rows that carried their offered rate: the run's in-flight
    # count by Little's law (achieved requests/s x (TTFT + (osl - 1) ITL), its published figures)
    # against the plan's at the batch serve() runs for that rate; every one within 25%
    # (docs/validation.md, "Requests in flight at a rate").
    found = sv.cases()
    rows = [x for x in sv.in_flight(found[0] if isinstance(found, tuple) else found)
            if x["case"].row["split"] == "validation"]
    assert len(rows) >= 10
    for x in rows:
        assert x["planned"] == pytest.approx(x["measured"], rel=0.25), x["case"].row
