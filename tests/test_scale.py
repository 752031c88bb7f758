"""Tests for apsi.api.plan, the public API: plan(), evaluate(), inference(), gpu_table().

Owns the reference plan and the reference table (the reference arithmetic's) run
through plan(), agreement between plan() and evaluate(), pinned layouts and --gpus mode. Every
expected number is either the reference arithmetic's or a hand calculation written out beside it
from its formulas (GiB = 2^30 bytes, usable = 90%).
"""

from __future__ import annotations

import functools

import pytest

from apsi import ApsiError, evaluate, gpu_table, inference, plan
from apsi.model.schema import Plan

# These tests are about the reference arithmetic and its CP-SAT program: plans that name no
# framework are planned under it here (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("reference_default")

GIB = 2**30

SCENARIOS = {
    # The reference arithmetic: `apsi plan 1T --active 32B --tokens 15T --precision fp8`
    "reference": dict(params="1T", active="32B", tokens="15T", precision="fp8"),
    # The reference arithmetic's table rows
    "21B": dict(params="21B", tokens="420B"),
    "70B": dict(params="70B", tokens="1.4T"),
    "2T-MoE-B200": dict(params="2T", active="64B", tokens="1.28T", gpu="B200", precision="fp8"),
    "2T-dense-B200": dict(params="2T", tokens="40T", gpu="B200", precision="fp8", batch="16M"),
    "2T-dense-H100": dict(params="2T", tokens="40T"),
}


@functools.lru_cache(maxsize=None)
def planned(name: str) -> Plan:
    """plan() for a scenario, computed once per test session (plans are pure functions)."""
    options = dict(SCENARIOS[name])
    return plan(options.pop("params"), **options)


# -- the reference plan ---------------------------------------------------------------------------


def test_reference_plan_layout() -> None:
    # The reference arithmetic: "520 x H100 (65 node(s)), 8x1x65 TPxPPxDP, none recompute".
    p = planned("reference")
    assert (p.gpus, p.nodes, p.gpu) == (520, 65, "H100")
    assert (p.layout.tp, p.layout.pp, p.layout.dp, p.layout.recompute) == (8, 1, 65, "none")
    assert p.target_met and p.fits
    assert p.solver.status == "OPTIMAL"
    assert p.binding == "time"


def test_reference_plan_memory() -> None:
    # The acceptance range is about 66-68 GiB/GPU; apsi's arithmetic gives 65.79 GiB. By hand:
    # model states 1e12 * 16 / 520 / 2^30 = 28.656 GiB, plus activations at TP 8
    # 56 * 4096 * 7168 * (34 + 5 * 56 * 4096 / 7168) / 8 / 2^30 = 37.133 GiB: 65.789 GiB.
    p = planned("reference")
    hand = 1e12 * 16 / 520 / GIB + 56 * 4096 * 7168 * (34 + 5 * 56 * 4096 / 7168) / 8 / GIB
    assert hand == pytest.approx(65.79, abs=0.01)
    assert p.memory_per_gpu_gib == pytest.approx(65.79, abs=0.01)
    assert p.memory.model_states_gib == pytest.approx(28.656, abs=0.001)
    assert p.memory.activations_gib == pytest.approx(37.133, abs=0.001)
    # The reference arithmetic: "model states in total: 14,901 GB" (16e12 bytes / 2^30 = 14,901.16 GiB).
    assert p.memory.model_states_total_gib == pytest.approx(14_901.16, abs=0.01)
    # The breakdown sums to the total, and the total fits 90% of 80 GiB = 72 GiB.
    m = p.memory
    assert m.weights_gib + m.gradients_gib + m.optimizer_gib == pytest.approx(m.model_states_gib, rel=1e-12)
    assert m.model_states_gib + m.activations_gib == pytest.approx(m.total_gib, rel=1e-12)
    assert m.usable_gib == pytest.approx(72.0, abs=1e-9)


def test_reference_plan_duration_and_data() -> None:
    # The reference arithmetic: "89.3 days". By hand: (6 * 32e9 + 12 * 56 * 7168 * 4096) * 15e12 FLOPs
    # = 3.17595e24, over 520 * 1978.9e12 (H100 FP8 dense, gpus.yaml S1) * 0.4, / 86,400 = 89.304 days.
    p = planned("reference")
    assert p.days == pytest.approx(89.3, abs=0.05)
    assert p.total_flops == pytest.approx(3.17595009024e24, rel=1e-9)
    assert p.target_days == 90
    # The reference arithmetic: "3,576,279 steps of 4.19M tokens": ceil(15e12 / 2^22) = 3,576,279.
    assert (p.steps, p.batch_tokens, p.batch_sequences) == (3_576_279, 4_194_304, 1024)
    # "~55,879 GB as 32-bit token ids": 15e12 * 4 / 2^30 = 55,879.35.
    assert p.data_gib == pytest.approx(55_879.35, abs=0.01)
    # The default shape for 32B active is 56 layers x 7,168 (the default-shape rule in apsi/model/arithmetic.py), heads = 7168 / 128 = 56.
    assert (p.model.layers, p.model.width, p.model.heads, p.model.moe) == (56, 7168, 56, True)


def test_reference_plan_serving() -> None:
    # The reference arithmetic: "931 GB weights in fp8 + KV cache -> 13 x H100": 1e12 bytes = 931.3 GiB, plus
    # 2 * 56 * 7168 * 4096 bytes = 3.06 GiB of KV cache; over 72 GiB usable: 12.98 -> 13.
    p = planned("reference")
    assert p.serving.gpus == 13
    assert p.serving.weights_gib == pytest.approx(931.32, abs=0.01)
    assert p.serving.kv_cache_gib == pytest.approx(3.0625, abs=1e-6)


# -- the reference table --------------------------------------------------------------------------


def test_21b_dense() -> None:
    # The reference arithmetic: "20 GPUs, about 88 days"; accepted: about 86-88 days. By hand:
    # (6 * 21e9 + 12 * 48 * 6144 * 4096) * 420e9 / (20 * 989.4e12 * 0.4) / 86,400 = 86.285 days;
    # 19 GPUs would take 86.285 * 20 / 19 = 90.83 days, past the target, so 20 is the fewest.
    p = planned("21B")
    assert p.gpus == 20
    assert p.days == pytest.approx(86.285, abs=0.05)
    assert p.target_met
    assert (p.model.layers, p.model.width) == (48, 6144)


def test_70b_dense() -> None:
    # The reference arithmetic: "208 GPUs (8 x 26), about 89 days". By hand:
    # (6 * 70e9 + 12 * 72 * 9216 * 4096) * 1.4e12 / (208 * 989.4e12 * 0.4) / 86,400 = 89.094 days.
    p = planned("70B")
    assert (p.gpus, p.layout.tp, p.layout.pp, p.layout.dp) == (208, 8, 1, 26)
    assert p.days == pytest.approx(89.094, abs=0.05)
    assert (p.model.layers, p.model.width) == (72, 9216)


def test_2t_moe_b200_is_memory_bound() -> None:
    # The reference arithmetic: "2T MoE, 64B active, 1.28T tokens, B200 FP8: 226 B200, about 15 days"; the
    # acceptance asks for a memory-bound plan well inside 90 days. By hand (usable 0.9 * 180 = 162 GiB,
    # full recompute keeps 2 s d L = 2 * 4096 * 9216 * 72 bytes = 5.06 GiB at TP 1):
    # model states alone need 2e12 * 16 / (162 * 2^30) = 183.96 -> at least 184 GPUs. TP must
    # divide 8: 184 (TP 8): 161.97 + 0.63 = 162.60 > 162; 185 and 187 (TP 1): +5.06, no;
    # 186 (TP 2): 160.2 + 2.53 = 162.76, no; 188 (TP 4): 158.5 + 1.27 = 159.79 fits. So 188.
    # Days at full recompute: (8 * 64e9 + 16 * 72 * 9216 * 4096) * 1.28e12
    # / (188 * 4500e12 * 0.4) / 86,400 = 24.32.
    p = planned("2T-MoE-B200")
    assert p.binding == "memory"
    assert p.gpus == 188
    assert p.layout.recompute == "full"
    assert p.target_met and p.days < 45
    assert p.days == pytest.approx(24.32, abs=0.05)
    assert p.memory_per_gpu_gib <= 162.0


def test_2t_dense_b200_16m_batch_misses_the_target() -> None:
    # The reference arithmetic: "31,248 B200, about 103 days"; accepted: about 102 days. By hand: 16M = 16e6
    # tokens = 3,906 sequences of 4,096, so DP <= 3,906 and TP <= 8 (one NVLink domain): 31,248.
    # Selective recompute (no recompute needs 553 GiB of activations at TP 8): FLOPs
    # (6 * 2e12 + 16 * 216 * 27648 * 4096) * 40e12, over 31,248 * 4500e12 * 0.4: 101.99 days.
    p = planned("2T-dense-B200")
    assert not p.target_met
    assert (p.gpus, p.layout.tp, p.layout.pp, p.layout.dp) == (31_248, 8, 1, 3_906)
    assert 101 < p.days < 103
    assert p.days == pytest.approx(101.99, abs=0.05)
    assert p.layout.recompute == "selective"
    assert p.batch_sequences == 3_906
    assert p.binding == "batch"


def test_2t_dense_h100_takes_years() -> None:
    # The reference arithmetic: "needs a ~200,000-GPU cluster for ~500 days". With the default 2^22-token batch
    # (1,024 sequences) DP <= 1,024 and TP <= 8, so the fastest layout is 8,192 GPUs (pipeline
    # stages add GPUs but with DP at 1,024 each step is one micro-batch and the bubble cancels
    # them). Full recompute (selective needs 100.5 GiB > 72): FLOPs (8 * 2e12 + 16 * 216 * 27648
    # * 4096) * 40e12 / (8192 * 989.4e12 * 0.4) / 86,400 = 2,340.7 days.
    p = planned("2T-dense-H100")
    assert not p.target_met
    assert p.days > 365
    assert p.gpus == 8192
    assert p.days == pytest.approx(2340.67, abs=0.05)
    assert p.binding == "batch"


# -- evaluate() agrees with plan() ----------------------------------------------------------------


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_evaluate_agrees_with_plan(name: str) -> None:
    p = planned(name)
    options = dict(SCENARIOS[name])
    e = evaluate(options.pop("params"), tp=p.layout.tp, pp=p.layout.pp, dp=p.layout.dp,
                 recompute=p.layout.recompute, **options)
    assert e.fits
    assert e.gpus == p.gpus
    assert e.memory_per_gpu_gib == pytest.approx(p.memory_per_gpu_gib, rel=1e-12)
    assert e.days == pytest.approx(p.days, rel=1e-12)
    assert e.target_met == p.target_met
    assert e.solver.mode == "evaluate"


def test_evaluate_reports_a_layout_that_does_not_fit() -> None:
    # 70B on 8 H100 (TP 8, DP 1): states 70e9 * 16 / 8 / 2^30 = 130.4 GiB > 72 usable.
    e = evaluate("70B", tokens="1.4T", tp=8, pp=1, dp=1, recompute="full")
    assert not e.fits
    assert e.memory.model_states_gib == pytest.approx(70e9 * 16 / 8 / GIB, rel=1e-12)


def test_evaluate_requires_every_layout_value() -> None:
    # Under the reference arithmetic every value of the layout is needed (it has no defaults).
    with pytest.raises(ApsiError, match=r"^evaluate\(\) needs recompute: it plans exactly the layout given"):
        evaluate("70B", tp=8, pp=1, dp=1)


# -- pins and --gpus mode ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pins",
    [dict(tp=4), dict(recompute="selective"), dict(tp=2, pp=3, recompute="full"), dict(pp=2), dict(dp=13),
     dict(tp=8, pp=1, dp=26, recompute="none")],
    ids=lambda pins: ",".join(f"{k}={v}" for k, v in pins.items()),
)
def test_pins_are_kept(pins: dict) -> None:
    p = plan("70B", tokens="1.4T", **pins)
    for key, value in pins.items():
        assert getattr(p.layout, key) == value
    assert p.fits


def test_pinning_the_optimum_changes_nothing() -> None:
    free = planned("70B")
    pinned = plan("70B", tokens="1.4T", tp=8, pp=1, dp=26, recompute="none")
    assert (pinned.gpus, pinned.days) == (free.gpus, pytest.approx(free.days, rel=1e-12))


def test_a_costly_pin_is_reported_as_binding() -> None:
    # TP 4 leaves 72 * 4096 * 9216 * 194 / 4 / 2^30 = 123 GiB of activations without recompute,
    # so it must recompute and needs more GPUs than the free optimum of 208.
    p = plan("70B", tokens="1.4T", tp=4)
    assert p.gpus > 208
    assert p.binding == "pinned"


def test_pinned_pp_still_minimises_gpus() -> None:
    # evaluate() shows a 224-GPU layout with pp = 2 that meets 90 days: TP 8 x PP 2 x DP 14,
    # (6 * 70e9 + 12 * 72 * 9216 * 4096) * 1.4e12 / (224 * 989.4e12 * 0.4) / 86,400 = 82.73 days,
    # times the 1F1B bubble 1 + 1 / (1024 / 14) = 1.0137: 83.86 days. The plan may use no more.
    witness = evaluate("70B", tokens="1.4T", tp=8, pp=2, dp=14, recompute="none")
    assert witness.fits and witness.days == pytest.approx(83.86, abs=0.01)
    p = plan("70B", tokens="1.4T", pp=2)
    assert p.target_met
    assert p.gpus <= witness.gpus


def test_pinned_dp_still_minimises_gpus() -> None:
    # Regression: CP-SAT 9.15 once proved this fewest-GPU program infeasible (see apsi/training/reference/program.py)
    # and the plan fell back to the fastest layout, 7,488 GPUs.
    # evaluate() shows a 312-GPU layout with dp = 13 that meets 90 days: TP 8 x PP 3 x DP 13,
    # 89.094 * 208 / 312 = 59.40 days at PP 1, times the bubble 1 + 2 / (1024 / 13) = 1.0254:
    # 60.90 days; memory 70e9 * 16 / 312 / 2^30 + 61.38 (activations at TP 8) = 64.73 GiB <= 72.
    witness = evaluate("70B", tokens="1.4T", tp=8, pp=3, dp=13, recompute="none")
    assert witness.fits and witness.days == pytest.approx(60.90, abs=0.01)
    p = plan("70B", tokens="1.4T", dp=13)
    assert p.target_met
    assert p.gpus <= witness.gpus


@pytest.mark.parametrize("cap", [100, 300, 16])
def test_gpus_mode_stays_within_the_cap(cap: int) -> None:
    p = plan("70B", tokens="1.4T", gpus=cap)
    assert p.gpus <= cap
    assert p.solver.mode == "fastest"
    assert p.fits


def test_gpus_mode_below_the_time_bound_misses_the_target() -> None:
    # 70B in 90 days needs at least 208 * 89.094 / 90 = 205.9 GPUs of H100 time: 100 cannot.
    p = plan("70B", tokens="1.4T", gpus=100)
    assert not p.target_met and p.days > 90
    assert p.binding == "gpus"


def test_gpus_mode_is_at_least_as_fast_as_a_hand_layout() -> None:
    # TP 8 x DP 37 = 296 <= 300 fits (states 3.52 GiB + activations 61.4 GiB) and takes
    # 89.094 * 208 / 296 = 62.61 days; the fastest layout on 300 GPUs can be no slower.
    hand = evaluate("70B", tokens="1.4T", tp=8, pp=1, dp=37, recompute="none")
    assert hand.fits and hand.days == pytest.approx(62.61, abs=0.01)
    p = plan("70B", tokens="1.4T", gpus=300)
    assert p.days <= hand.days * (1 + 1e-9)


def test_max_gpus_caps_the_plan() -> None:
    p = plan("70B", tokens="1.4T", max_gpus=150)
    assert p.gpus <= 150
    assert not p.target_met
    assert p.binding == "max_gpus"


def test_default_tokens_are_chinchilla() -> None:
    # The reference arithmetic: "default 20 per active parameter": 7B -> 140B tokens.
    assert plan("7B").tokens == 140 * 10**9
    assert plan("1T", active="32B", gpus=8 * 64).tokens == 640 * 10**9


def test_model_that_fits_nowhere() -> None:
    # 100T parameters need 100e12 * 16 bytes = 1,490,116 GiB of model states; the 6 GiB GTX 1660
    # (5.4 usable) cannot hold them on 200,000 GPUs (1.08 million GiB in total). The default shape
    # is 800 layers x 102,400 ((1e14 / 196,608)^(1/3) = 798.6 -> 800); with full recompute at TP 1
    # each GPU keeps 2 * 4096 * 102400 * 800 bytes = 625.0 GiB of activations, plus
    # 1,490,116 / 200,000 = 7.45 GiB of states: 632.45 GiB needed at best.
    with pytest.raises(ApsiError, match=r"^no layout fits: .*GTX1660 needs 632\.5 GiB "
                                        r"\(1,490,116 GiB of model states.*5\.4 GiB usable"):
        plan("100T", gpu="GTX1660", precision="fp16")


# -- inference() and gpu_table() --------------------------------------------------------------------


def test_inference_reference() -> None:
    # The reference arithmetic: 1T in FP8 -> 13 x H100 (see test_reference_plan_serving for the arithmetic).
    s = inference("1T", active="32B", precision="fp8")
    assert (s.gpu, s.gpus, s.precision, s.seq, s.batch) == ("H100", 13, "fp8", 4096, 1)
    assert s.total_gib == pytest.approx(931.32 + 3.0625, abs=0.01)


def test_inference_70b_fp8() -> None:
    # The reference arithmetic names `inference("70B", precision="fp8")`. By hand: 70e9 bytes = 65.19 GiB plus
    # KV 2 * 72 * 9216 * 4096 = 5,435,817,984 bytes = 5.06 GiB: 70.25 GiB <= 72 usable -> 1 H100.
    s = inference("70B", precision="fp8")
    assert s.gpus == 1
    assert s.total_gib == pytest.approx(70.25, abs=0.01)


def test_inference_grouped_query_attention() -> None:
    # 8 KV heads of 72 keep 8/72 of the cache: 5.0625 GiB * 8 / 72 = 0.5625 GiB.
    s = inference("70B", precision="fp8", kv_heads=8)
    assert s.kv_cache_gib == pytest.approx(0.5625, abs=1e-9)


def test_gpu_table_lists_the_catalog() -> None:
    names = [g.name for g in gpu_table()]
    assert names[:3] == ["H100", "H200", "B200"] and "GTX1660" in names
