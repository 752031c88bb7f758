"""Honest figures: ZeRO-3 and FSDP traffic priced less only what is overlapped, DeepSpeed at its own
kernels and overlap, every unvalidated figure marked, knobs that change nothing not shown applied.

Owns the audit of Llama 3.1 70B at TP 2 x DP 973 (DeepSpeed ZeRO-3 showed 0.0 s of DP time and
compute 1.60 s against torchtitan's 2.81 s for the same sharding; DeepSpeed now computes at its own
fitted efficiency, and `apsi compare` priced it
$5.3M under Megatron with no caveat), the exposed-DP arithmetic (apsi.model.steptail.exposed_dp),
Plan.caveats (apsi.training.frameworks.timing.caveats), the compare table's sharding row and marks
(apsi.outputs.compare.compare_text), and the Layout line's inert settings (apsi.outputs.text.inert_knobs).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from apsi import evaluate
from apsi.catalog import catalog
from apsi.training.frameworks import deepspeed, timing, torchtitan
from apsi.model import collectives as co
from apsi.model import steptime as st
from apsi.model.steptail import exposed_dp

ROOT = Path(__file__).resolve().parents[1]

# The audit's layout: Llama 3.1 70B, TP 2 x PP 1 x DP 973, one sequence of 4,096 per replica.
AUDIT = dict(gpu="H100", tp=2, pp=1, dp=973, seq=4096, batch=973 * 4096, tokens="15T", recompute="none")


def _plan(framework: str, **knobs):
    return evaluate("llama-3.1-70b", framework=framework, **{**AUDIT, **knobs})


# --- exposed_dp: the overlap arithmetic --------------------------------------------------------

FSDP = co.DpTraffic(grad_bytes=2, gather_bytes=2, per_micro_batch=True)


def test_per_micro_batch_traffic_with_no_compute_is_all_exposed() -> None:
    # Nothing to hide under: forward gathers (ag / 2) + backward gathers and reduction (ag / 2 + rs).
    assert exposed_dp(FSDP, rs=1.0, ag=2.0, compute_mb=0.0, n=80, micro_batches=3) == pytest.approx(3 * 3.0)


def test_per_micro_batch_traffic_keeps_the_first_gather_and_last_reduction_exposed() -> None:
    # Under ample compute one layer's forward gather (ag / 2 / n) and one layer's reduction (rs / n)
    # are left: the first layer has nothing before it to prefetch under, the last nothing after it.
    assert exposed_dp(FSDP, rs=0.8, ag=1.6, compute_mb=100.0, n=80, micro_batches=2) == pytest.approx(
        2 * (0.8 / 80 + 0.8 / 80))


def test_forward_gathers_hide_only_under_the_forward() -> None:
    # compute 3 s: forward 1 s, backward 2 s. ag 3 s (1.5 each way), rs 0: the forward exposes
    # 0.5 s, the backward's 1.5 s hide under its 2 s. The old rule hid all 3 s under the 3 s (0 s).
    assert exposed_dp(FSDP, rs=0.0, ag=3.0, compute_mb=3.0, n=10, micro_batches=1) == pytest.approx(0.5)


def test_once_per_step_overlap_flags() -> None:
    rs, ag, c = 1.0, 1.0, 0.9
    megatron = co.DpTraffic(grad_bytes=4, gather_bytes=2)
    assert exposed_dp(megatron, rs, ag, c, 80, 4) == pytest.approx((1.0 - 0.6) + (1.0 - 0.3))
    zero1 = deepspeed.dp_traffic(1, 1, "bf16", {})
    assert exposed_dp(zero1, rs, ag, c, 80, 4) == pytest.approx((1.0 - 0.6) + 1.0)  # gather inside step()
    zero2 = deepspeed.dp_traffic(1, 2, "bf16", {})
    assert exposed_dp(zero2, rs, ag, c, 80, 4) == pytest.approx(4 * (1.0 - 0.6) + 1.0)  # every micro-batch
    zero0 = deepspeed.dp_traffic(1, 0, "bf16", {})
    assert exposed_dp(zero0, rs, 0.0, c, 80, 4) == pytest.approx(1.0)  # after the backward
    piped = deepspeed.dp_traffic(4, 1, "bf16", {})
    assert exposed_dp(piped, rs, ag, c, 80, 4) == pytest.approx(2.0)  # the pipeline engine's reduce step


def test_zero3_moves_three_times_the_parameter_volume_of_zero1() -> None:
    # Rajbhandari et al. 2020 Sec. 7: ZeRO-1/2 reduce-scatter + all-gather (2 Psi), ZeRO-3 a second
    # all-gather in backward (3 Psi), per micro-batch. Same bucket, so the seconds are in that ratio.
    gpu = catalog()["H100"]
    pair = co.links(gpu)
    params, n = 35e9, 80
    one = co.DpTraffic(grad_bytes=2, gather_bytes=2, bucket_elements=params / n)
    three = co.DpTraffic(grad_bytes=2, gather_bytes=2, per_micro_batch=True)
    rs1, ag1, _ = co._dp_part(8, pair, one, params, 973, 2, n)
    rs3, ag3, _ = co._dp_part(8, pair, three, params, 973, 2, n)
    assert (rs3 + ag3) / (rs1 + ag1) == pytest.approx(1.5, rel=1e-9)


# --- the audit --------------------------------------------------------------------------------

def test_zero3_data_parallel_time_is_priced() -> None:
    # The audit saw 0.0 s. Rebuilt from its parts: the rank's 35B dense parameters (TP 2) reduced
    # and gathered twice over DP 973 (3 Psi per micro-batch, one layer per bucket), each of the 3 x 80
    # layer collectives paying NCCL's ring latency over 973 ranks, 4 per node (NCCL-TUNE), exposed as
    # exposed_dp says under this layout's compute.
    p = _plan("deepspeed", zero=3)
    t = p.time
    assert t is not None
    gpu = catalog()["H100"]
    traffic = deepspeed.dp_traffic(1, 3, "bf16", {})
    assert traffic.per_micro_batch and traffic.gather_bytes == 2 and traffic.grad_bytes == 2
    assert p.model.architecture is not None
    dense, _ = timing._params(p.model.architecture)
    rs, ag, link = co._dp_part(gpu.scaleup_domain, co.links(gpu), traffic, dense / 2, 973, 2, 80)
    assert link == "scale-out" and t.links.get("dp") == "scale-out"
    # NCCL-TUNE's ring: base 8.4 us, 972 - 243 hops inside nodes at 3.4 us, 243 between the 244 nodes at 9.6 us.
    latency = co.nccl_latency(973, 4)
    assert latency == pytest.approx((8.4 + 729 * 3.4 + 243 * 9.6) * 1e-6, rel=1e-9)
    assert rs + ag - 3 * 80 * latency == pytest.approx(1.56, rel=0.05)  # the 3 Psi, seconds, before any overlap
    expected = exposed_dp(traffic, rs, ag, t.compute_seconds, 80, 1)
    assert t.dp_seconds == pytest.approx(expected, rel=1e-9)
    assert t.dp_seconds >= rs / 80 + ag / 2 / 80 > 0


def test_deepspeed_computes_at_its_own_fitted_efficiency(monkeypatch: pytest.MonkeyPatch) -> None:
    # Same layout, same FSDP-style sharding, no recomputation: DeepSpeed runs the kernel model
    # torchtitan does at its own rate, fitted on Megatron-DeepSpeed's published throughput
    # (MDS-REBASE; tests/test_steptime.py holds it to benchmarks/calibrate.py's fit), not at
    # torchtitan's, which put BLOOM and MT-NLG 27-32% slow (docs/validation.md).
    ds, tt = _plan("deepspeed", zero=3, sequence_parallel=True), _plan("torchtitan")
    assert deepspeed.KERNEL_EFFICIENCY != torchtitan.KERNEL_EFFICIENCY
    assert ds.time is not None and tt.time is not None
    assert ds.time.compute_seconds < tt.time.compute_seconds
    monkeypatch.setattr(torchtitan, "KERNEL_EFFICIENCY", deepspeed.KERNEL_EFFICIENCY)
    same = _plan("torchtitan")
    assert same.time is not None
    assert ds.time.compute_seconds == pytest.approx(same.time.compute_seconds, rel=1e-6)
    # Still below Megatron's Transformer Engine rate (the audit's 1.60 s).
    assert ds.time.compute_seconds > 1.6 / deepspeed.KERNEL_EFFICIENCY["bf16"] * 0.99


# --- caveats ----------------------------------------------------------------------------------

def test_validated_frameworks_are_the_validation_sets() -> None:
    spec = importlib.util.spec_from_file_location("validation", ROOT / "benchmarks" / "validation.py")
    assert spec is not None and spec.loader is not None
    validation = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(validation)
    timed = {row[1] for row in validation.VALIDATION}
    assert set(timing.VALIDATED["timing"]) == timed
    text = (ROOT / "docs" / "validation.md").read_text(encoding="utf-8")
    memory_section = text.split("## Time", 1)[0]
    for name in ("megatron", "torchtitan", "deepspeed"):
        assert (f"| {name} |" in memory_section) == (name in timing.VALIDATED["memory"]), name


def test_deepspeed_plans_carry_their_caveats() -> None:
    # DeepSpeed's step time has validation rows (BLOOM, MT-NLG: docs/validation.md), its memory none.
    p = _plan("deepspeed", zero=3)
    assert len(p.caveats) == 1
    assert p.caveats[0].startswith("DeepSpeed: " + timing.MEMORY_CAVEAT)
    assert p.model_dump()["caveats"] == p.caveats  # in the JSON
    from apsi.outputs.text import plan_text

    text = plan_text(p, width=200)
    assert text.count("  Caveat      DeepSpeed: no validated") == 1


def test_validated_frameworks_carry_none() -> None:
    assert _plan("torchtitan").caveats == []
    assert evaluate("llama-3.1-70b", framework="megatron", gpu="H100", tp=8, pp=4, dp=8, seq=4096,
                    batch=256 * 4096, tokens="1T").caveats == []


def test_a_flat_mfu_drops_the_timing_caveat() -> None:
    p = _plan("deepspeed", zero=3, mfu=0.4)
    assert [c.split(" (")[0] for c in p.caveats] == ["DeepSpeed: " + timing.MEMORY_CAVEAT]


def test_compare_shows_sharding_and_marks_unvalidated_figures() -> None:
    from apsi.outputs.compare import UNVALIDATED, compare_text

    mg = evaluate("llama-3.1-70b", framework="megatron", gpu="H100", tp=8, pp=4, dp=8, seq=4096,
                  batch=256 * 4096, tokens="1T")
    tt = evaluate("llama-3.1-70b", framework="torchtitan", gpu="H100", tp=8, dp=32, seq=4096,
                  batch=256 * 4096, tokens="1T")
    ds = evaluate("llama-3.1-70b", framework="deepspeed", gpu="H100", tp=8, dp=32, zero=3, seq=4096,
                  batch=256 * 4096, tokens="1T")
    text = compare_text([mg, tt, ds], ["m", "t", "d"], width=400)
    rows = {line[2:16].strip(): line for line in text.splitlines() if line[:2] in ("  ", "* ")}
    sharding = rows["sharding"]
    assert "distributed optimizer over DP x CP" in sharding and "FSDP2 over dp_shard x cp = 32" in sharding
    assert "ZeRO-3 over DP" in sharding
    # DeepSpeed's memory has no validation row (its step time has: BLOOM, MT-NLG), so its memory
    # figure alone is marked.
    assert rows["GiB/GPU"].rstrip().endswith(UNVALIDATED)  # the DeepSpeed column, the last
    assert rows["GiB/GPU"].count(UNVALIDATED) == 1  # and only it
    for label in ("GPUs", "days", "cost", "GPU-hours", "MFU"):
        assert UNVALIDATED not in rows[label], label
    assert "- DeepSpeed: no validated timing row" not in text and "- DeepSpeed: no validated memory reading" in text
    assert "Marked" not in compare_text([mg, tt], ["m", "t"], width=400)


# --- knobs that change nothing ----------------------------------------------------------------

def test_ep_overlap_off_its_layouts_is_not_shown_applied() -> None:
    from apsi.outputs.text import plan_text

    # PP 4 without VPP: Megatron does not run its EP A2A overlap (megatron.ep_overlap_allowed).
    off = evaluate("qwen3-30b-a3b", framework="megatron", gpu="H100", tp=1, pp=4, ep=8, dp=8, seq=4096,
                   batch=256 * 4096, tokens="1T", ep_overlap=True)
    text = plan_text(off, width=400)
    layout = next(line for line in text.splitlines() if line.startswith("  Layout"))
    assert "EP overlap" not in layout
    assert "EP overlap given but not applied" in text
    plain = evaluate("qwen3-30b-a3b", framework="megatron", gpu="H100", tp=1, pp=4, ep=8, dp=8, seq=4096,
                     batch=256 * 4096, tokens="1T")
    assert off.days == plain.days  # it changes nothing
    # With VPP under PP it runs, and is shown.
    on = evaluate("qwen3-30b-a3b", framework="megatron", gpu="H100", tp=1, pp=4, vpp=2, ep=8, dp=8, seq=4096,
                  batch=256 * 4096, tokens="1T", ep_overlap=True)
    shown = next(line for line in plan_text(on, width=400).splitlines() if line.startswith("  Layout"))
    assert "EP overlap" in shown


def test_tp_overlap_at_tp_1_is_not_shown_applied() -> None:
    from apsi.outputs.text import plan_text

    p = evaluate("llama-3.1-8b", framework="megatron", gpu="H100", tp=1, dp=8, seq=4096, batch=64 * 4096,
                 tokens="100B", tp_overlap=True)
    layout = next(line for line in plan_text(p, width=400).splitlines() if line.startswith("  Layout"))
    assert "TP overlap" not in layout


# --- sequence parallelism as a knob -----------------------------------------------------------

def test_sequence_parallel_defaults_by_framework() -> None:
    # Megatron's model and torchtitan (parallelism.enable_sequence_parallel = True, TT-CFG) run it
    # with TP; Megatron-DeepSpeed's --sequence-parallel is store_true, off unless given (MDS-ARGS).
    from apsi.inputs import knobs

    assert knobs.flag_value("sequence_parallel", "megatron", {})
    assert knobs.flag_value("sequence_parallel", "torchtitan", {})
    assert not knobs.flag_value("sequence_parallel", "deepspeed", {})
    assert _plan("torchtitan").layout.sequence_parallel
    ds = _plan("deepspeed", zero=3)
    assert not ds.layout.sequence_parallel and "sequence_parallel" not in ds.framework_knobs
    pinned = _plan("deepspeed", zero=3, sequence_parallel=True)
    assert pinned.layout.sequence_parallel and pinned.framework_knobs["sequence_parallel"] is True


def test_without_sp_the_sequence_wide_activations_are_whole_on_every_tp_rank() -> None:
    # A dense layer, no recomputation: the attention norm input, the QKV-linear input, the MLP norm
    # input and the FC1 input, 2 s b h each (KOR Sec. 4.2.2), are no longer split over tp.
    from apsi.model import memory as mem
    from apsi.inputs.presets import find_preset, preset_architecture

    preset = find_preset("llama-3.1-70b")
    assert preset is not None
    a = preset_architecture(preset)
    s, b, tp = 4096, 1, 8
    on = mem.layer_activation_bytes(a, False, s, b, tp, "none", sp=True)
    off = mem.layer_activation_bytes(a, False, s, b, tp, "none", sp=False)
    assert off - on == pytest.approx(4 * 2 * s * b * a.width * (1 - 1 / tp), rel=1e-12)
    # Full recomputation keeps the layer input, whole without SP.
    assert mem.layer_activation_bytes(a, False, s, b, tp, "full", sp=False) == 2 * s * b * a.width
    # At tp 1 there is nothing to split.
    assert mem.layer_activation_bytes(a, False, s, b, 1, "none", sp=False) == mem.layer_activation_bytes(
        a, False, s, b, 1, "none", sp=True)
    # torchtitan's selective policy keeps the block input and w2's output, s b h each.
    tt_on = torchtitan.layer_bytes(a, False, seq=s, micro_batch=b, tp=tp, etp=1, recompute="selective")
    tt_off = torchtitan.layer_bytes(a, False, seq=s, micro_batch=b, tp=tp, etp=1, recompute="selective",
                                    sequence_parallel=False)
    assert tt_off - tt_on == pytest.approx(2 * 2 * s * b * a.width * (1 - 1 / tp), rel=1e-12)


@pytest.mark.parametrize("framework", ["megatron", "torchtitan", "deepspeed"])
def test_sp_off_never_beats_sp_on(framework: str) -> None:
    # The argument docs/method.md gives for keeping SP a setting, not a searched dimension: the same
    # TP bytes, more memory, and the norms and residual adds run on the whole sequence.
    knobs = dict(gpu="H100", tp=8, pp=2, dp=8, seq=4096, batch=128 * 4096, tokens="1T")
    if framework == "deepspeed":
        knobs["zero"] = 1
    on = evaluate("llama-3.1-70b", framework=framework, sequence_parallel=True, **knobs)
    off = evaluate("llama-3.1-70b", framework=framework, sequence_parallel=False, **knobs)
    assert on.time is not None and off.time is not None
    assert off.time.tp_seconds == pytest.approx(on.time.tp_seconds, rel=1e-12)
    assert off.time.step_seconds > on.time.step_seconds
    assert off.memory.activations_gib > on.memory.activations_gib
    assert off.memory.model_states_gib == on.memory.model_states_gib


def test_sp_off_refusals() -> None:
    from apsi.errors import ApsiError

    with pytest.raises(ApsiError, match="MoE and tensor parallelism"):
        evaluate("qwen3-30b-a3b", framework="megatron", gpu="H100", tp=2, ep=8, dp=8, seq=4096,
                 batch=64 * 4096, tokens="1T", sequence_parallel=False)
    with pytest.raises(ApsiError, match="tp_overlap needs sequence_parallel"):
        evaluate("llama-3.1-70b", framework="megatron", gpu="H100", tp=8, pp=4, dp=8, seq=4096,
                 batch=256 * 4096, tokens="1T", sequence_parallel=False, tp_overlap=True)
    with pytest.raises(ApsiError, match="not modelled"):
        evaluate("qwen3-30b-a3b", framework="torchtitan", gpu="H100", tp=2, ep=8, etp=1, dp=8, seq=4096,
                 batch=64 * 4096, tokens="1T", sequence_parallel=False)


def test_the_search_honours_a_pinned_sp() -> None:
    from apsi import plan

    off = plan("llama-3.1-70b", framework="megatron", gpu="H100", gpus=512, tokens="2T", sequence_parallel=False)
    on = plan("llama-3.1-70b", framework="megatron", gpu="H100", gpus=512, tokens="2T")
    assert off.layout.tp > 1 and not off.layout.sequence_parallel
    assert on.layout.sequence_parallel
    assert off.days >= on.days


def test_cp_all_gather_is_shown_applied_only_under_cp() -> None:
    from apsi.outputs.text import plan_text

    # cp_comm_type="all_gather" changes the step under CP (its K and V exchange exposed) and nothing
    # at CP 1 (megatron.inert_settings): the Layout line shows it only where it applies.
    base = dict(framework="megatron", gpu="H100", tp=8, pp=1, dp=2, seq=32768, batch=64 * 32768, tokens="100B",
                cp_comm_type="all_gather")
    on = evaluate("llama-3.1-8b", cp=4, **base)
    text = plan_text(on, width=400)
    layout = next(line for line in text.splitlines() if line.startswith("  Layout"))
    assert "CP all_gather" in layout and "given but not applied" not in text
    off = plan_text(evaluate("llama-3.1-8b", cp=1, **base), width=400)
    assert "CP all_gather given but not applied" in off
    assert "CP all_gather" not in next(line for line in off.splitlines() if line.startswith("  Layout"))


def test_compare_shows_a_fractional_micro_batch_count_as_it_is() -> None:
    # The reference arithmetic's DP need not divide the batch: 1,024 sequences over DP 26 are 39.38
    # micro-batches per replica, which compare showed as "1 x 39" (39 x 26 = 1,014, not the batch).
    from apsi.outputs.compare import compare_text

    ref = evaluate("70B", framework="reference", tp=8, pp=1, dp=26, recompute="none", tokens="1T", seq=4096,
                   batch=1024 * 4096)
    assert ref.layout.micro_batches_per_replica == pytest.approx(1024 / 26)
    text = compare_text([ref, ref], ["a", "b"], width=400)
    row = next(line for line in text.splitlines() if line[2:16].strip() == "micro-batch")
    assert "1 x 39.38" in row and "1 x 39 " not in row + " "


def test_the_duration_line_says_what_the_recomputation_adds_to_the_flops() -> None:
    # The total counts the recomputed forward, the per-token figure (MFU's numerator) does not:
    # "1.03e+22 FLOPs (causal attention, 4.82e+10 per token)" read as 33% wrong against 160.6B tokens.
    from apsi.outputs.text import plan_text

    full = evaluate("llama-3.1-8b", framework="torchtitan", tp=1, pp=1, dp=8, recompute="full", tokens="160B")
    extra = full.total_flops / (full.model_flops_per_token * full.tokens) - 1
    assert 0.25 < extra < 0.40  # a forward again on a forward and backward (3 passes to 4), attention aside
    line = next(x for x in plan_text(full).splitlines() if x.strip().startswith("Duration"))
    assert line.endswith(f"per token, the total {extra:.0%} more for the recomputation)")
    none = evaluate("llama-3.1-8b", framework="torchtitan", tp=1, pp=1, dp=8, recompute="none", tokens="160B")
    line = next(x for x in plan_text(none).splitlines() if x.strip().startswith("Duration"))
    assert line.endswith(f"(causal attention, {none.model_flops_per_token:.3g} per token)")
