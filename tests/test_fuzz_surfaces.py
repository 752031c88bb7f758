"""A fuzz run of serve(), serve_frontier(), fleet() and scenario files (issue 38): generated inputs,
good and hostile, must give an answer or one line (an ApsiError, a ValueError), never another
exception or a run past the hang guard; every serving plan must hold its own arithmetic (replicas
x capacity covers the load, its targets met, the inventory kept), and every fleet schedule must
pass an independent validator (capacity on every day, start dates, dependencies, lateness).
A few hundred examples per surface in CI; APSI_DEEP=1 runs the thousands of docs/bad-inputs.md.
"""

from __future__ import annotations

import copy
import math
import os

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import apsi
from apsi import ApsiError
from conftest import time_limit

DEEP = os.environ.get("APSI_DEEP") == "1"
HANG = 30
"""Seconds past which a call is taken for a hang (a guard, not a speed test)."""


def profile(ci: int, deep: int) -> settings:
    return settings(max_examples=deep if DEEP else ci, deadline=None, derandomize=not DEEP, database=None,
                    suppress_health_check=list(HealthCheck))


HOSTILE = st.one_of(st.sampled_from([0, -1, 1e-300, 5e-324, 1e308, float("inf"), float("nan"), True, "abc", "",
                                     "-3", "1e400", None, [], {}, "--help", "²"]),
                    st.floats(allow_nan=True, allow_infinity=True), st.integers(-10, 10**9))


def mixed(valid, hostile=HOSTILE):
    """Mostly a valid value (nine times in ten), sometimes a hostile one."""
    return st.integers(0, 9).flatmap(lambda n: hostile if n == 9 else valid)


def _one_line(err: Exception) -> None:
    text = str(err)
    assert text and "\n" not in text and "Traceback" not in text, repr(text)


# -- serving ---------------------------------------------------------------------------------------

SERVE = st.fixed_dictionaries({}, optional={
    "engine": mixed(st.sampled_from(["vllm", "sglang", "trtllm"])),
    "gpu": mixed(st.sampled_from(["H100", "H200", "B200", "MI300X", "A100", "L40S", "H100,H200", "any"])),
    "precision": mixed(st.sampled_from(["bf16", "fp8", "fp4"])),
    "kv_precision": mixed(st.sampled_from(["bf16", "fp8"])),
    "isl": mixed(st.integers(1, 200_000)), "osl": mixed(st.integers(1, 20_000)),
    "prefix": mixed(st.integers(0, 5_000)),
    "ttft": mixed(st.floats(0.5, 20_000)), "tpot": mixed(st.floats(0.5, 500)),
    "rate": mixed(st.floats(0.001, 5_000)), "concurrency": mixed(st.integers(1, 100_000)),
    "inventory": mixed(st.sampled_from(["H100=64", "H100=8,H200=16", "B200=4", {"H100": 32}])),
    "objective": mixed(st.sampled_from(["gpus", "cost"])),
    "tp": mixed(st.sampled_from([1, 2, 4, 8])), "pp": mixed(st.sampled_from([1, 2, 4])),
})
MODELS = mixed(st.sampled_from(["llama-3.1-8b", "llama-3.1-70b", "8B", "70B", "qwen3-30b-a3b", "1T"]))


def _check_serve_plan(plan, options: dict) -> None:
    """A plan's own arithmetic: each group's GPUs are its replicas' x GPUs per replica, the whole the
    groups' sum; the replicas carry the asked rate; each group meets the targets asked; an
    inventory is kept."""
    assert plan.gpus == sum(g.gpus for g in plan.groups) and plan.replicas == sum(g.replicas for g in plan.groups)
    for g in plan.groups:
        assert g.gpus == g.replicas * g.gpus_per_replica and g.replicas >= 1
        w = plan.workload
        if w.tpot_target_ms is not None:
            assert g.tpot_ms <= w.tpot_target_ms * (1 + 1e-9), (g.tpot_ms, w.tpot_target_ms)
        if w.ttft_target_ms is not None and w.ttft_percentile == "mean":
            assert g.ttft_ms <= w.ttft_target_ms * (1 + 1e-9), (g.ttft_ms, w.ttft_target_ms)
    w = plan.workload
    if w.rate_requests_per_s is not None:
        carried = sum(g.replicas * g.requests_per_s_per_replica for g in plan.groups)
        assert carried >= w.rate_requests_per_s * (1 - 1e-9), (carried, w.rate_requests_per_s)
    given = options.get("inventory")
    if isinstance(given, str) and "=" in given:
        have = {k.strip(): int(v) for k, v in (x.split("=") for x in given.split(","))}
        for gpu in {g.gpu for g in plan.groups}:
            assert sum(g.gpus for g in plan.groups if g.gpu == gpu) <= have.get(gpu, 0)


@profile(150, 4_000)
@given(params=MODELS, options=SERVE)
def test_serve_fuzz(params, options: dict) -> None:
    try:
        with time_limit(HANG):
            plan = apsi.serve(params, **options)
    except ApsiError as err:
        _one_line(err)
        event("refused")
        return
    event("planned")
    _check_serve_plan(plan, options)


@profile(40, 1_000)
@given(params=MODELS, options=SERVE)
def test_serve_frontier_fuzz(params, options: dict) -> None:
    options = {k: v for k, v in options.items() if k not in ("rate", "concurrency", "inventory", "objective")}
    try:
        with time_limit(HANG):
            points = apsi.serve_frontier(params, **options)
    except ApsiError as err:
        _one_line(err)
        event("refused")
        return
    event("answered")
    # Tokens/s per user falls along the frontier, and per GPU rises: no point beats another on both.
    for a, b in zip(points, points[1:]):
        assert a.output_tokens_per_s_per_user >= b.output_tokens_per_s_per_user
        assert a.output_tokens_per_s_per_gpu <= b.output_tokens_per_s_per_gpu


# -- fleets ----------------------------------------------------------------------------------------

RUN = st.fixed_dictionaries({
    "params": st.sampled_from(["7B", "13B", "70B", "llama-3.1-8b"]),
    "tokens": st.sampled_from(["100B", "1T", "2T"]),
}, optional={
    "deadline": mixed(st.integers(1, 400)), "start_after": mixed(st.integers(0, 200)),
    "optional": mixed(st.booleans()), "gpu": mixed(st.sampled_from(["H100", "B200", "any"])),
    "max_gpus": mixed(st.integers(8, 4096)),
})
FLEET = st.fixed_dictionaries({
    "gpus": mixed(st.dictionaries(st.sampled_from(["H100", "B200", "A100"]), st.integers(8, 4096), min_size=1,
                                  max_size=2)),
}, optional={
    "horizon_days": mixed(st.integers(10, 400)), "power_cap_mw": mixed(st.floats(0.5, 50)),
    "objective": mixed(st.sampled_from(["deadlines", "cost", "makespan", ["deadlines", "cost"]])),
    "gap": mixed(st.floats(0, 0.2)),
})


def _validate_schedule(data: dict, result) -> None:
    """An independent check of a fleet schedule: each scheduled run within the horizon, from its
    start_after, after the runs it follows end; its lateness the days past its deadline; on each
    day no GPU type holds more GPUs than the inventory has (apsi.fleets.spec.read_fleet's capacity)."""
    from apsi.fleets.spec import read_fleet

    spec = read_fleet(copy.deepcopy(data))
    cap = spec.inventory.capacity(spec.horizon_days)
    rows = {row.name: row for row in result.runs}
    used: dict[str, list[int]] = {}
    for run in spec.runs:
        row = rows[run.name]
        if not row.scheduled:
            assert run.optional or result.status in ("INFEASIBLE", "UNKNOWN") or row.why, row
            continue
        assert row.start_day is not None and row.days is not None and row.gpus and row.gpu_type
        assert row.start_day >= (run.start_after or 0) and row.start_day + row.days <= spec.horizon_days
        for before in run.after:
            first = rows[before]
            assert first.scheduled and first.start_day + first.days <= row.start_day, (before, run.name)
        if run.deadline is not None:
            assert row.late_days == max(0, row.start_day + row.days - run.deadline), row
        day_use = used.setdefault(row.gpu_type, [0] * spec.horizon_days)
        for day in range(row.start_day, row.start_day + row.days):
            day_use[day] += row.gpus
    for gpu, use in used.items():
        for day, n in enumerate(use):
            assert n <= cap[gpu][day], f"{gpu} day {day}: {n} GPUs of {cap[gpu][day]}"


@profile(30, 700)
@given(fleet=FLEET, runs=st.lists(RUN, min_size=1, max_size=4), after=st.booleans())
def test_fleet_fuzz(fleet: dict, runs: list, after: bool) -> None:
    runs = [{"name": f"r{i}", **run} for i, run in enumerate(runs)]
    if after and len(runs) > 1:
        runs[1]["after"] = ["r0"]
    data = {"defaults": {"framework": "reference"}, "fleet": {"start": "2026-07-01", **fleet}, "runs": runs}
    try:
        with time_limit(HANG * 2):
            result = apsi.fleet(copy.deepcopy(data), jobs=1)
    except (ApsiError, ValueError) as err:
        _one_line(err)
        event("refused")
        return
    event(result.status)
    if result.status in ("OPTIMAL", "FEASIBLE"):
        _validate_schedule(data, result)


# -- scenario files --------------------------------------------------------------------------------

KEYS = st.sampled_from(["params", "tokens", "gpu", "days", "precision", "tp", "pp", "dp", "recompute", "objective",
                        "framework", "mfu", "seq", "batch", "max_gpus", "kind", "rate", "tpot", "engine", "bogus",
                        "tensor_parallel", "serve"])
VALUES = st.one_of(st.sampled_from(["7B", "70B", "llama-3.1-8b", "1T", "H100", "any", "bf16", "fp8", 8, 2, 1,
                                    "full", "days", "megatron", "reference", "serve", "plan", 0.4, 4096, "1M"]),
                   HOSTILE)


@profile(100, 2_000)
@given(runs=st.lists(st.tuples(st.sampled_from(["7B", "13B", "llama-3.1-8b", "70B"]),
                               st.dictionaries(KEYS, VALUES, max_size=3)), min_size=1, max_size=4))
def test_scenario_fuzz(runs: list) -> None:
    # One bad run costs only itself: each run gives a plan or its own one-line error.
    from apsi.api.scenarios import run_scenarios

    data = {"defaults": {"framework": "reference"},
            "runs": [{"name": f"r{i}", "params": params, "tokens": "1T", **r} for i, (params, r) in enumerate(runs)]}
    try:
        with time_limit(HANG * 2):
            results = run_scenarios(data, jobs=1)
    except (ApsiError, ValueError) as err:
        _one_line(err)
        return
    event("every run planned" if all(r.ok for r in results) else "some refused")
    assert len(results) >= len(runs)  # a list value expands a run into one per value
    for r in results:
        assert r.ok != (r.error is not None), r
        if r.error is not None:
            _one_line(ValueError(r.error))
        elif r.plan is not None:
            assert math.isfinite(r.plan.days) and r.plan.gpus >= 1
