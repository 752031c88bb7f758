"""Levers under the frameworks (Megatron, torchtitan, DeepSpeed): each a full plan with one change.

Expected values come from asking plan() directly with each lever's change (the same GPU type, GPU
count, days within 1e-9 relative, target, cost and energy), from the framework's own refusal for a
change it cannot run, and from two orderings that hold by construction: a longer target cannot
need more GPUs than a plan that already meets the shorter one, and a layout planned within a cap
is still allowed under twice that cap.
"""

from __future__ import annotations

import json

import pytest

from apsi import plan
from apsi.errors import ApsiError

# The two questions the levers are shown on (README.md, docs/method.md 4.9): Megatron, the default.
QUESTIONS = {
    "llama-3.1-70b": ("llama-3.1-70b", {"tokens": "15T"}),
    "deepseek-v3": ("deepseek-v3", {"tokens": "14.8T", "precision": "fp8"}),
}


@pytest.fixture(scope="module")
def planned() -> dict:
    return {name: plan(params, **run, levers=True) for name, (params, run) in QUESTIONS.items()}


def _again(params: str, run: dict, change: dict):
    return plan(params, **{**run, **change})


@pytest.mark.parametrize("name", list(QUESTIONS))
def test_each_lever_is_the_plan_asked_with_its_change(name, planned):
    params, run = QUESTIONS[name]
    p = planned[name]
    solved = [lever for lever in p.levers if lever.gpus is not None]
    assert len(solved) >= 5, [lever.description for lever in p.levers]
    assert p.levers[:len(solved)] == solved  # refused changes come last
    for lever in p.levers:
        if lever.gpus is None:
            # A refused change: plan() asked directly refuses it with the same words.
            with pytest.raises(ApsiError) as err:
                _again(params, run, lever.change)
            assert lever.description.endswith(str(err.value))
            continue
        again = _again(params, run, lever.change)
        assert (lever.gpu, lever.gpus, lever.target_met) == (again.gpu, again.gpus, again.target_met)
        assert lever.days == pytest.approx(again.days, rel=1e-9)
        assert lever.cost_usd == pytest.approx(again.cost_usd, rel=1e-9)
        assert lever.energy_mwh == pytest.approx(again.energy_mwh, rel=1e-9)
        # A lever moves the answer: another type, count or duration than the plan itself.
        assert (lever.gpu, lever.gpus, round(lever.days, 9)) != (p.gpu, p.gpus, round(p.days, 9))
        assert f"{lever.gpus:,} x {lever.gpu}" in lever.description


@pytest.mark.parametrize("name", list(QUESTIONS))
def test_the_levers_tried_cover_the_nearby_questions(name, planned):
    p = planned[name]
    names = {lever.name for lever in p.levers}
    # Under a time-decided plan on one GPU type: a longer target, another type, each other
    # framework, micro-batches of 2, a wider batch, longer sequences.
    assert {"days", "gpu", "framework", "micro_batch", "batch", "seq"} <= names
    frameworks = {lever.change["framework"] for lever in p.levers if lever.name == "framework"}
    assert frameworks == {"torchtitan", "deepspeed"}
    longer = next(lever for lever in p.levers if lever.name == "days")
    assert longer.change == {"days": 135}  # 1.5 x the 90-day default
    assert longer.target_met and longer.gpus <= p.gpus


def test_fp8_lever_where_the_gpu_has_it_and_a_refused_framework_keeps_its_error(planned):
    llama = planned["llama-3.1-70b"]
    fp8 = next(lever for lever in llama.levers if lever.name == "precision")
    assert fp8.change == {"precision": "fp8"}
    # A time-decided plan at twice the dense peak (H100: 1,978.9 against 989.4 TFLOPS, gpus.yaml).
    assert fp8.gpus < llama.gpus
    dsv3 = planned["deepseek-v3"]
    assert not any(lever.name == "precision" for lever in dsv3.levers)  # already fp8
    deepspeed = next(lever for lever in dsv3.levers if lever.change == {"framework": "deepspeed"})
    assert deepspeed.gpus is None and "not fp8" in deepspeed.description


def test_each_pin_is_released_on_its_own():
    run = {"tokens": "1T", "tp": 2, "pp": 2, "days": 30}
    p = plan("llama-3.1-8b", **run, levers=True)
    released = {lever.name: lever for lever in p.levers if lever.name in ("tp", "pp")}
    assert set(released) == {"tp", "pp"}
    for key, lever in released.items():
        assert lever.change == {key: None}
        again = plan("llama-3.1-8b", **{k: v for k, v in run.items() if k != key})
        assert (lever.gpus, lever.gpu) == (again.gpus, again.gpu)
        assert lever.days == pytest.approx(again.days, rel=1e-9)


def test_a_binding_cap_gets_a_more_gpus_lever():
    run = {"tokens": "15T", "max_gpus": 512}
    p = plan("llama-3.1-70b", **run, levers=True)
    assert p.binding == "max_gpus" and not p.target_met
    more = next(lever for lever in p.levers if lever.name == "gpus")
    assert more.change == {"max_gpus": 1024}
    # Twice the cap still allows the capped plan's layout, so it is no slower.
    assert more.days <= p.days
    again = plan("llama-3.1-70b", **{**run, **more.change})
    assert (more.gpus, more.days) == (again.gpus, pytest.approx(again.days, rel=1e-9))


def test_other_frameworks_are_levers_of_torchtitan_too():
    p = plan("llama-3.1-8b", tokens="1T", days=30, framework="torchtitan", levers=True)
    frameworks = {lever.change["framework"] for lever in p.levers if lever.name == "framework"}
    assert frameworks <= {"megatron", "deepspeed"} and "megatron" in frameworks


def test_levers_are_off_by_default_under_a_framework(monkeypatch):
    import apsi.training.explain.levers

    def refuse(*args, **kwargs):
        raise AssertionError("levers solved though not asked for")

    monkeypatch.setattr(apsi.training.explain.levers, "solve_framework_levers", refuse)
    assert plan("llama-3.1-70b", tokens="15T").levers == []


def test_levers_take_true_or_false():
    with pytest.raises(ApsiError, match="levers is true or false, got str"):
        plan("llama-3.1-8b", levers="yes")


def test_cli_shows_every_lever_under_a_framework_and_only_when_asked(apsi):
    run = apsi("plan", "llama-3.1-70b", "--tokens", "15T", "--levers")
    assert run.code == 0, run.err
    p = plan("llama-3.1-70b", tokens="15T", levers=True)
    lines = run.out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  Lever "))
    shown = [line[14:] for line in lines[start:start + len(p.levers)]]
    assert shown == [lever.description for lever in p.levers]
    assert "more with --explain" not in run.out
    plain = apsi("plan", "llama-3.1-70b", "--tokens", "15T")
    assert plain.code == 0 and "  Lever " not in plain.out
    dumped = json.loads(apsi("plan", "llama-3.1-70b", "--tokens", "15T", "--levers", "--json").out)
    assert [(x["gpu"], x["gpus"], x["energy_mwh"]) for x in dumped["levers"]] == [
        (lever.gpu, lever.gpus, lever.energy_mwh) for lever in p.levers]
