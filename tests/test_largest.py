"""Tests for apsi.api.largest (largest(), `apsi plan --largest`): the answer's plan meets the target,
the next size up re-planned with plan() does not, a family's answer is its largest member that
trains (each member planned with plan()), the shape rule's grid and bound, and bad inputs as
one-line errors (exit 2 at the CLI).

Expected values come from plan() itself (the oracle the search must agree with) and from the
catalog's H100 peak (989 dense BF16 TFLOPS, apsi/gpus.yaml) for the bound; no answer is hard-coded.
"""

from __future__ import annotations

import json

import pytest

from apsi import plan
from apsi.catalog import catalog
from apsi.errors import ApsiError, InputError, LayoutError, UnknownNameError
from apsi.api.largest import Largest, _grid, families, largest, summary
from apsi.inputs.presets import presets

QUESTION = dict(gpus=256, days=30, tokens="500B")
"""A question whose scan is short (13 sizes, a fraction of a second warm)."""


@pytest.fixture(scope="module")
def shape() -> Largest:
    return largest(**QUESTION)


def test_the_answer_trains_and_the_next_size_up_does_not(shape: Largest) -> None:
    mine = shape.tried[-1]
    again = plan(shape.size, **QUESTION)
    assert again.target_met and again.days <= 30 and again.gpus <= 256, again
    assert shape.plan.target_met and shape.plan.model.params == again.model.params
    assert shape.plan.days == pytest.approx(again.days, rel=1e-9)
    up = shape.next_up
    assert up is not None and up.params > shape.plan.model.params
    replanned = plan(up.size, **QUESTION)  # plan() directly, not the search's record
    assert not replanned.target_met and replanned.days > 30
    assert up.days == pytest.approx(replanned.days, rel=1e-9)
    # Its fewest GPUs for 30 days: more than the 256 given.
    fewest = plan(up.size, days=30, tokens="500B")
    assert shape.next_up_gpus == fewest.gpus and fewest.gpus > 256


def test_every_size_above_the_answer_misses(shape: Largest) -> None:
    # The scan is top-down: every size tried before the answer misses, re-planned with plan().
    above = shape.tried[:-1]
    assert shape.tried[-1].size == shape.size and above
    for t in above:
        assert not t.meets
        assert not plan(t.size, **QUESTION).target_met, t.size
    sizes = [t.params for t in shape.tried]
    assert sizes == sorted(sizes, reverse=True)


def test_the_bound_is_the_dense_peak(shape: Largest) -> None:
    # 6 N T FLOPs at the H100's dense BF16 peak on 256 GPUs for 30 days (Kaplan et al. 2020).
    peak = catalog()["H100"].bf16_tflops * 1e12
    assert peak == pytest.approx(989e12, rel=0.01)
    bound = 256 * peak * 30 * 86400 / (6 * 500e9)
    assert shape.bound == pytest.approx(bound, rel=1e-9)
    # The first size tried counts more than the bound (no layout can train it), the one below it
    # less, give or take its width's rounding to 128 (under 2%); the answer's MFU is below 1.
    assert shape.tried[0].params > bound and shape.tried[1].params <= bound * 1.02
    assert shape.plan.mfu < 1 and shape.plan.tokens >= 500e9


def test_grid_is_two_significant_figures() -> None:
    assert [n / 1e9 for n in _grid(95_300_000_000)[:3]] == [96, 95, 94]
    # From the top of a decade into the next one, and from 10B down to 9.9B.
    assert [n / 1e9 for n in _grid(99_500_000_000)[:2]] == [100, 99]
    sizes = _grid(12_000_000_000)
    i = sizes.index(10_000_000_000)
    assert sizes[i + 1] == 9_900_000_000 and sizes[-1] == 10_000_000
    steps = [a / b - 1 for a, b in zip(sizes, sizes[1:])]
    assert max(steps) <= 0.1 + 1e-12 and min(steps) >= 0.01 - 1e-12


def test_family_is_its_largest_member_that_trains() -> None:
    q = dict(gpus=1024, days=30, tokens="2T")
    found = largest("llama-3.1", **q)
    members = families()["llama-3.1"]
    assert sorted(members) == ["llama-3.1-405b", "llama-3.1-70b", "llama-3.1-8b"]
    # Cross-check: each member planned with plan(); the answer is the one with the most
    # parameters whose plan meets the target.
    planned = {key: plan(key, **q) for key in members}
    trains = [key for key, p in planned.items() if p.target_met]
    expected = max(trains, key=lambda key: planned[key].model.params)
    assert found.size == expected
    assert found.plan.target_met and found.plan.model.params == planned[expected].model.params
    assert {t.size for t in found.tried} == set(members)
    for t in found.tried:
        assert t.meets == planned[t.size].target_met
    bigger = [key for key in members if planned[key].model.params > planned[expected].model.params]
    if bigger:
        assert found.next_up is not None and found.next_up.size == min(bigger, key=lambda k: planned[k].model.params)
        assert not plan(found.next_up.size, **q).target_met
    lines = summary(found)
    assert lines[0].startswith(f"largest: {expected}") and lines[1].startswith("next size up:")


def test_families_come_from_the_preset_names() -> None:
    known = families()
    assert {"llama-3.1", "qwen3", "deepseek"} <= set(known)
    for name, keys in known.items():
        assert keys and all(k in presets() and k.startswith(name + "-") for k in keys), name
    assert known["qwen3"] == [k for k in presets() if k.startswith("qwen3-")]


def test_size_caches_do_not_leak_between_sizes() -> None:
    # A bare size shares its shape-rule architecture with a band of sizes (99B and 100B: 80
    # layers); the walk's caches are keyed on the counts too, so planning 99B first changes
    # nothing of 100B's plan (the search plans neighbouring sizes one after another).
    from apsi.training.frameworks import layouts, space

    q = dict(max_gpus=1024, days=30, tokens="2T")
    layouts._BOUNDS.clear()
    space._FAMILIES.clear()
    fresh = plan("100B", **q)
    layouts._BOUNDS.clear()
    space._FAMILIES.clear()
    plan("95B", **q)
    again = plan("100B", **q)
    # Before the counts were in the keys: 1,000 GPUs and 30.8 days, 95B's durations reused.
    assert again.gpus == fresh.gpus and again.days == pytest.approx(fresh.days, rel=1e-12)
    assert again.target_met == fresh.target_met


def test_nothing_trains_is_one_line() -> None:
    with pytest.raises(LayoutError, match=r"no size from 10M up trains on 1 GPU in"):
        largest(gpus=1, days=0.001, tokens="1T")
    # A bound of 14.2M (989 TFLOPS for a day over 6 x 1T): 15M down to 10M tried, none trains.
    # 10M to 12M share one shape-rule architecture, which a framework plans alike: tried once.
    with pytest.raises(LayoutError, match=r"no size from 10M to 14.2M trains on 1 GPU in .* the smallest, 1[0-2]M, "
                                          r"takes [\d.]+ days on 1 GPU$"):
        largest(gpus=1, days=1, tokens="1T", node_granularity=1)
    with pytest.raises(LayoutError, match=r"no member of llama-3.1 trains on 8 GPUs .* the smallest, llama-3.1-8b"):
        largest("llama-3.1", gpus=8, days=1, tokens="15T")


@pytest.mark.parametrize("kw, match", [
    (dict(days=30, tokens="1T"), r"needs gpus: give gpus, days and tokens"),
    (dict(gpus=8, tokens="1T"), r"needs days"),
    (dict(gpus=8, days=30), r"needs tokens"),
    (dict(gpus=8, days=30, tokens="1T", params="70B"), r"searched, not given: .*llama-3\.1.* or none"),
    (dict(gpus=8, days=30, tokens="1T", active="3B"), r"active is a size's own"),
])
def test_bad_inputs(kw: dict, match: str) -> None:
    with pytest.raises(InputError, match=match):
        largest(**kw)


@pytest.mark.parametrize("family, error, match", [
    ("70B", InputError, r"'70B' is a size; give a preset family \(deepseek, .*qwen3\) or none"),
    ("llama-3.1-8b", InputError, r"'llama-3.1-8b' is a preset; give a preset family"),
    ("lama", UnknownNameError, r"unknown family 'lama': did you mean llama\? valid: deepseek"),
])
def test_bad_family(family: str, error: type[ApsiError], match: str) -> None:
    with pytest.raises(error, match=match):
        largest(family, gpus=8, days=30, tokens="1T")


def test_cli_largest_text_and_json(apsi) -> None:
    args = ("plan", "--largest", "--gpus", "256", "--days", "30", "--tokens", "500B")
    run = apsi(*args)
    assert run.code == 0, run.why()
    answer = largest(**QUESTION)
    # Each size named with its architecture's count where that differs (apsi.inputs.modelspec.counted).
    assert f"\nlargest: {answer.size}" in run.out and ", the largest that trains in 30.0 days" in run.out, run.why()
    assert f"\nnext size up: {answer.next_up.size} " in run.out and "takes" in run.out, run.why()
    run = apsi(*args, "--json")
    assert run.code == 0, run.why()
    # The JSON is the answer's Plan (what `apsi export` reads); the summary is on stderr.
    data = json.loads(run.out)
    assert data == json.loads(answer.plan.model_dump_json()) and data["target_met"] is True
    assert f"largest: {answer.size}" in run.err and "next size up:" in run.err, run.why()
    from apsi.model.schema import Plan

    Plan.model_validate_json(run.out)
    run = apsi("plan", "--largest", "llama-3.1", "--gpus", "1024", "--days", "30", "--tokens", "2T", "--format", "csv")
    assert run.code == 0, run.why()
    assert "largest: llama-3.1-" in run.err and "largest:" not in run.out, run.why()


@pytest.mark.parametrize("args, match", [
    (("--largest", "--gpus", "8", "--tokens", "1T"), "needs days"),
    (("--largest", "--days", "30", "--tokens", "1T"), "needs gpus"),
    (("--largest", "--gpus", "8", "--days", "30"), "needs tokens"),
    (("--largest", "70B", "--gpus", "8", "--days", "30", "--tokens", "1T"), "'70B' is a size"),
    (("--largest", "qwen", "--gpus", "8", "--days", "30", "--tokens", "1T"), "unknown family 'qwen'"),
    (("--gpus", "8",), "Missing argument 'PARAMS': give a size, a preset or a config.json, or --largest"),
])
def test_cli_bad_inputs_are_one_line(apsi, args: tuple[str, ...], match: str) -> None:
    run = apsi("plan", *args)
    assert run.code == 2, run.why()
    assert match in run.err and run.err.count("\n") == 1 and "Traceback" not in run.err, run.why()


def test_each_size_is_an_architecture_of_about_its_own_count(shape: Largest) -> None:
    # The shape rule alone steps in multiples of 8 layers (72 x 9,216 = 73.4B, 80 x 10,240 =
    # 100.7B), so "86B" was once planned as 73.4B. Each size is planned as `apsi plan SIZE` plans
    # it: the rule's architecture, its FFN sized to count the size where the rule's count is more
    # than 5% (its rounding, RULE_ROUNDING) from it, so every size counts within 5% of itself.
    from apsi.inputs.modelspec import RULE_ROUNDING
    from apsi.units import parse_size

    for t in shape.tried:
        n = parse_size(t.size, "params")
        assert abs(t.params / n - 1) <= RULE_ROUNDING, (t.size, t.params)
        assert t.params == plan(t.size, **QUESTION).model.params
    a = shape.plan.model.architecture
    assert a.width % 128 == 0
