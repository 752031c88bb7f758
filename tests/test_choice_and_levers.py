"""The GPU type as a decision, cost and energy, and levers.

Expected values come from solving each GPU type alone with plan() (the program must pick the same
type as that comparison) and from hand arithmetic on the catalog's prices and board power.
"""

from __future__ import annotations

import pytest

from apsi import plan
from apsi.errors import ApsiError
from apsi.model.arithmetic import OPTIMIZER_BYTES

# These tests are about the reference arithmetic and its CP-SAT program: plans that name no
# framework are planned under it here (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("reference_default")


RUN = dict(params="70B", tokens="1.4T")


def _key(p, objective: str):
    """The objective as the program orders plans: target met first, then the objective value,
    then fewer GPUs (cost/energy) or fewer days (gpus)."""
    value = {"gpus": (p.gpus, p.days), "cost": (p.cost_usd, p.gpus), "energy": (p.energy_mwh, p.gpus),
             "days": (p.days, p.gpus)}[objective]
    return (not p.target_met and objective != "days",) + value


@pytest.mark.parametrize("objective", ["gpus", "cost", "energy", "days"])
def test_any_gpu_matches_solving_each_type_alone(objective):
    chosen = plan(**RUN, gpu="any", objective=objective)
    assert chosen.gpu_choice is not None and chosen.gpu in chosen.gpu_choice.considered
    alone = {}
    for name in chosen.gpu_choice.considered:
        try:
            alone[name] = plan(**RUN, gpu=name, objective=objective)
        except ApsiError:  # no price (cost) or nothing fits on this type
            continue
    best = min(alone, key=lambda name: _key(alone[name], objective))
    # Same objective value as the best single-type plan (ties between types go to catalog order).
    assert _key(chosen, objective) == pytest.approx(_key(alone[best], objective), rel=1e-6)
    assert chosen.gpus == alone[chosen.gpu].gpus
    # The runner-up is the best plan on any other type.
    others = [n for n in alone if n != chosen.gpu]
    runner = min(others, key=lambda name: _key(alone[name], objective))
    assert chosen.gpu_choice.runner_up.gpu == runner


def test_a_list_of_gpus_chooses_among_them_only():
    p = plan(**RUN, gpu="H100,H200,A100")
    assert p.gpu_choice.considered == ["H100", "H200", "A100"]
    assert p.gpu in ("H100", "H200", "A100")


def test_any_skips_gpus_without_the_precision():
    p = plan(**RUN, gpu="any", precision="fp8")
    skipped = " ".join(p.gpu_choice.skipped)
    # The catalog has no FP8 on A100, A100-40, RTX3090 and GTX1660 (NVIDIA datasheets, gpus.yaml).
    for name in ("A100", "RTX3090", "GTX1660"):
        assert name in skipped
    assert "A100" not in p.gpu_choice.considered


def test_cost_and_energy_follow_from_gpu_hours():
    p = plan(**RUN)
    # GPU-hours = GPUs x days x 24; cost at the catalog's $2.69/GPU-hour for H100 (RunPod, March
    # 2026); energy at 700 W board power (NVIDIA H100 SXM) times PUE 1.3 (the default), in MWh.
    hours = p.gpus * p.days * 24
    assert p.gpu_hours == pytest.approx(hours, rel=1e-12)
    assert p.cost_usd == pytest.approx(hours * 2.69, rel=1e-12)
    assert p.energy_mwh == pytest.approx(hours * 700 * 1.3 / 1e6, rel=1e-12)
    priced = plan(**RUN, price=2.0, pue=1.1)
    assert priced.cost_usd == pytest.approx(priced.gpu_hours * 2.0, rel=1e-12)
    assert priced.energy_mwh == pytest.approx(priced.gpu_hours * 700 * 1.1 / 1e6, rel=1e-12)


def test_cost_needs_a_price():
    # GB200 has no reliable per-GPU price in the catalog.
    with pytest.raises(ApsiError, match="objective cost needs a price"):
        plan(**RUN, gpu="GB200", objective="cost")
    assert plan(**RUN, gpu="GB200").cost_usd is None


def test_memory_bound_plan_names_memory_and_two_resolved_levers():
    # A memory-bound example: 2T MoE, 64B active, 1.28T tokens on B200 in fp8.
    p = plan("2T", active="64B", tokens="1.28T", gpu="B200", precision="fp8", levers=True)
    assert p.binding == "memory" and p.why.startswith("memory decides")
    assert f"{sum(OPTIMIZER_BYTES['adamw'])} bytes per parameter" in p.why
    assert len(p.levers) >= 2
    for lever in p.levers:
        # Each lever is a real solve: the same figures as plan() with that change.
        run = {"active": "64B", "tokens": "1.28T", "gpu": "B200", "precision": "fp8"}
        again = plan("2T", **{**run, **lever.change})
        assert (again.gpus, again.days) == (lever.gpus, pytest.approx(lever.days, rel=1e-12))
        assert (again.gpu, again.energy_mwh) == (lever.gpu, pytest.approx(lever.energy_mwh, rel=1e-12))
    eight_bit = next(lever for lever in p.levers if lever.name == "optimizer")
    assert eight_bit.gpus < p.gpus  # 10 bytes per parameter instead of 16 need fewer GPUs


def test_target_not_met_names_the_batch_lever():
    # A target that cannot be met: 2T dense on B200 fp8 with the default 4M batch misses 90 days because
    # data parallelism is capped at 1,024 sequences; a wider batch changes that.
    p = plan("2T", tokens="40T", gpu="B200", precision="fp8", levers=True)
    assert not p.target_met and p.binding == "batch"
    assert p.why.startswith("target not met")
    batch = [lever for lever in p.levers if lever.name == "batch"]
    assert batch and min(lever.days for lever in batch) < p.days
    assert any(lever.target_met for lever in batch)


def test_levers_are_off_by_default_in_the_api():
    assert plan(**RUN).levers == []


@pytest.mark.parametrize("question", [
    dict(params="llama-3.1-70b", tokens="15T"),
    dict(params="llama-3.1-8b", tokens="2T", objective="days", gpus=512),
    dict(params="70B", tokens="1.4T", framework="torchtitan"),
])
def test_any_leaves_out_dominated_types_without_changing_the_answer(question: dict) -> None:
    # gpu="any" leaves out a type an earlier one beats on every figure (H800 beside H100: the
    # same die, a narrower NVLink; A100 beside H200): such a type can only lose or tie, and the
    # earlier wins a tie. The answer equals the one over every type named (no type left out).
    from apsi.catalog import catalog
    from apsi.inputs.question import undominated

    params = question.pop("params")
    every = [g for g in catalog().values() if not g.consumer]
    kept, beaten = undominated(tuple(every), question.get("objective", "gpus"))
    assert any(b.startswith("H800: ") for b in beaten) and len(kept) + len(beaten) == len(every)
    some = plan(params, gpu="any", **question)
    named = plan(params, gpu=",".join(g.name for g in every), **question)
    assert (some.gpu, some.gpus, some.days, some.layout) == (named.gpu, named.gpus, named.days, named.layout)
    assert all(s in some.gpu_choice.skipped for s in beaten)


@pytest.mark.parametrize("objective", ["cost", "energy"])
def test_a_gpu_count_keeps_a_cost_or_energy_objective(objective: str) -> None:
    # gpus=N with objective cost or energy switched to the fastest layout on N without a word: on
    # H100, H200, MI300X and A100 at 256 GPUs, 256 MI300X for $490,851 where 144 meet the target
    # for $457,489. Now the objective is kept within the count, as the reference arithmetic keeps
    # it: the same answer as max_gpus=N.
    kw = dict(params="70B", gpu="H100,H200,MI300X,A100", objective=objective)
    held = plan(**kw, gpus=256)
    capped = plan(**kw, max_gpus=256)
    assert held.layout == capped.layout and held.cost_usd == capped.cost_usd and held.energy_mwh == capped.energy_mwh
    assert held.gpus < 256 and held.target_met


def test_a_framework_plan_the_batch_bounds_says_batch_not_the_cap():
    # Megatron's fastest 1T layout holds 8,568 of the 200,000 GPUs allowed: its next dp fits within
    # the cap and is not faster (21 micro-batches per replica, the interleaved schedule's least at
    # PP 21), so the batch binds, as the reference arithmetic says for the same question. It read
    # max_gpus. With the cap at 512, where the 70B's next dp would not fit, the cap binds.
    p = plan("1T", framework="megatron")
    assert not p.target_met and p.gpus < 200_000 and p.binding == "batch", p.why
    assert "its next dp would fit within the cap and is not faster (the batch of 1,024 sequences" in p.why
    capped = plan("llama-3.1-70b", tokens="15T", max_gpus=512, framework="megatron")
    assert capped.binding == "max_gpus" and "next dp" not in capped.why
