"""Tests for apsi.model.arithmetic: FLOPs, model-state bytes, activations, shapes, pipeline time.

FLOPs go through the reference shape rule's model (a bare size), whose counts are the reference's.

Each expected value is a hand calculation written out next to it, from the formulas of the
reference arithmetic and the papers they come from:
Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models", Eq. 1-2
and Table 2), Narayanan et al. 2021 (1F1B pipeline bubble), Kaplan et al. 2020 (6 N D).
"""

from __future__ import annotations

import pytest

from apsi.model import arithmetic as ar
from apsi.model.architecture import HEAD_DIM, Architecture, default_layers, default_width
from apsi.inputs.modelspec import resolve_model
from apsi.units import GIB


def _size(active: int, layers: int, width: int):
    """The reference shape rule's model of `active` parameters with `layers` x `width` (a bare size)."""
    return resolve_model(active, layers=layers, width=width)


def _shape(layers: int, width: int, heads: int, kv_heads: int) -> Architecture:
    return Architecture(layers=layers, width=width, heads=heads, kv_heads=kv_heads, head_dim=width // heads,
                        ffn=4 * width, mlp="gelu", vocab=0, norm="nonparametric", norms_per_layer=0)

# GPT-3 175B as in Korthikanti et al. 2022 Table 3: a = 96 heads, h = 12,288, L = 96, s = 2,048.
GPT3 = dict(seq=2048, width=12288, heads=96)


def test_activations_no_recompute_korthikanti_eq1() -> None:
    # s b h (34 + 5 a s / h) with b = 1: 5 * 96 * 2048 / 12288 = 80, so
    # 2048 * 12288 * (34 + 80) = 25,165,824 * 114 = 2,868,903,936 bytes per layer.
    assert ar.activation_bytes_per_layer(micro_batch=1, recompute="none", **GPT3) == 2_868_903_936


def test_activations_selective_korthikanti_eq2() -> None:
    # Selective recomputation drops the 5 a s^2 b attention term: 34 s b h
    # = 34 * 2048 * 12288 = 855,638,016 bytes per layer.
    assert ar.activation_bytes_per_layer(micro_batch=1, recompute="selective", **GPT3) == 855_638_016


def test_activations_full_recompute() -> None:
    # Full recomputation keeps only the layer input, 2 s b h bytes (BF16): 2 * 2048 * 12288 = 50,331,648.
    assert ar.activation_bytes_per_layer(micro_batch=1, recompute="full", **GPT3) == 50_331_648


@pytest.mark.parametrize("recompute", ar.RECOMPUTE_LEVELS)
def test_activations_scale_with_micro_batch_and_layers(recompute: str) -> None:
    one = ar.activation_bytes_per_layer(micro_batch=1, recompute=recompute, **GPT3)
    assert ar.activation_bytes_per_layer(micro_batch=4, recompute=recompute, **GPT3) == 4 * one
    # A GPU holds L layers' worth whatever the pipeline depth (1F1B: PP micro-batches of L/PP layers).
    assert ar.activation_bytes(96, micro_batch=1, recompute=recompute, **GPT3) == 96 * one


def test_reference_plan_activations() -> None:
    # The reference plan's shape (56 layers x 7,168, 56 heads, s = 4,096): per layer
    # 4096 * (34 * 7168 + 5 * 56 * 4096) = 4096 * 1,390,592 = 5,695,864,832 bytes; x 56 layers
    # = 318,968,430,592 bytes = 297.06 GiB at TP 1, 37.13 GiB at TP 8.
    total = ar.activation_bytes(56, 4096, 1, 7168, 56, "none")
    assert total == 318_968_430_592
    assert total / 8 / GIB == pytest.approx(37.1328125, abs=1e-9)


def test_training_flops_6nd_plus_12ldsd() -> None:
    # Reference plan: N = 32e9 active, D = 15e12, L = 56, d = 7,168, s = 4,096.
    # 6 N = 192e9; 12 L d s = 12 * 56 * 7168 * 4096 = 19,730,006,016; per token 211,730,006,016;
    # times 15e12 tokens = 3.17595009024e24 FLOPs.
    flops = ar.training_flops(_size(32 * 10**9, 56, 7168), 15 * 10**12, 4096, "none")
    assert flops == pytest.approx(3.17595009024e24, rel=1e-12)


def test_recompute_flops() -> None:
    # Selective re-runs the attention core forward, 4 L d s per token; full re-runs the whole
    # forward, 2 N + 4 L d s per token. With N = 1e9, D = 1e6, L = 2, d = 1024, s = 512:
    # L d s = 1,048,576; none = (6e9 + 12 * 1,048,576) * 1e6 = 6.012582912e15;
    # selective adds 4 * 1,048,576 * 1e6 = 4.194304e12; full adds (2e9 + 4,194,304) * 1e6.
    model = _size(10**9, 2, 1024)
    base = ar.training_flops(model, 10**6, 512, "none")
    assert base == pytest.approx(6.012582912e15, rel=1e-12)
    assert ar.training_flops(model, 10**6, 512, "selective") - base == pytest.approx(4.194304e12, rel=1e-9)
    assert ar.training_flops(model, 10**6, 512, "full") - base == pytest.approx(2.004194304e15, rel=1e-9)


@pytest.mark.parametrize(("optimizer", "per_param"), [("adamw", 16), ("adam8bit", 10), ("sgd", 12)])
def test_optimizer_bytes(optimizer: str, per_param: int) -> None:
    # The reference arithmetic: 16 bytes per parameter with mixed-precision AdamW (BF16 weights and gradients,
    # FP32 master weights and two moments), 10 with 8-bit Adam; SGD with momentum: 2 + 2 + 4 + 4 = 12.
    weights, grads, states = ar.state_bytes(1000, optimizer)
    assert (weights, grads) == (2000, 2000)
    assert weights + grads + states == per_param * 1000


def test_reference_model_states_total() -> None:
    # The reference arithmetic: "model states in total: 14,901 GB" for 1T parameters, i.e. 16e12 bytes in GiB:
    # 16e12 / 2^30 = 14,901.16.
    assert sum(ar.state_bytes(10**12, "adamw")) / GIB == pytest.approx(14_901.16, abs=0.01)


@pytest.mark.parametrize(
    ("active", "layers"),
    [
        # L = multiple of 8 nearest (N / (12 * 128^2))^(1/3):
        (21 * 10**9, 48),  # (21e9 / 196,608)^(1/3) = 47.45 -> 48, width 6,144
        (70 * 10**9, 72),  # (70e9 / 196,608)^(1/3) = 70.88 -> 72, width 9,216
        (32 * 10**9, 56),  # (32e9 / 196,608)^(1/3) = 54.60 -> 56, width 7,168
        (2 * 10**12, 216),  # (2e12 / 196,608)^(1/3) = 216.68 -> 216, width 27,648
        (10**6, 2),  # (1e6 / 196,608)^(1/3) = 1.72: below 8 the nearest whole number, 2
    ],
)
def test_default_shapes(active: int, layers: int) -> None:
    assert default_layers(active) == layers
    assert HEAD_DIM * layers == {48: 6144, 72: 9216, 56: 7168, 216: 27648, 2: 256}[layers]


def test_default_width_for_given_layers() -> None:
    # 70B on 80 layers: sqrt(70e9 / (12 * 80)) = 8,539.1 = 66.71 x 128 -> 67 x 128 = 8,576.
    assert default_width(70 * 10**9, 80) == 8576
    # Never below one head's width: sqrt(1e3 / 12) = 9.1 -> 128.
    assert default_width(1000, 1) == 128


@pytest.mark.parametrize(("pp", "micro", "factor"), [(1, 1, 1.0), (1, 16, 1.0), (8, 16, 1.4375), (4, 1, 4.0)])
def test_pipeline_factor(pp: int, micro: float, factor: float) -> None:
    # 1F1B: a step takes 1 + (PP - 1) / m of its ideal time; 8 stages, 16 micro-batches:
    # 1 + 7 / 16 = 1.4375; one micro-batch through 4 stages: 1 + 3 = 4.
    assert ar.pipeline_factor(pp, micro) == pytest.approx(factor, rel=1e-12)


def test_duration_seconds() -> None:
    # 1e24 FLOPs on 1,000 GPUs of 1e15 FLOP/s at 50% MFU: 1e24 / 5e17 = 2e6 s; with PP 4 and 12
    # micro-batches the bubble stretches it by 1 + 3/12 = 1.25: 2.5e6 s = 28.935 days.
    seconds = ar.duration_seconds(1e24, 1000, 1e15, 0.5, 4, 12)
    assert seconds == pytest.approx(2.5e6, rel=1e-12)
    assert ar.days(seconds) == pytest.approx(2.5e6 / 86_400, rel=1e-12)


def test_reference_plan_duration() -> None:
    # The reference arithmetic: 520 x H100 at FP8 (1,978.9 TFLOPS dense, gpus.yaml S1), 40% MFU, PP 1:
    # 3.17595009024e24 / (520 * 1978.9e12 * 0.4) / 86,400 = 89.304 days ("89.3 days").
    flops = ar.training_flops(_size(32 * 10**9, 56, 7168), 15 * 10**12, 4096, "none")
    days = ar.days(ar.duration_seconds(flops, 520, 1978.9e12, 0.4, 1, 1024 / 65))
    assert days == pytest.approx(89.304, abs=0.001)


def test_kv_cache_and_serving_gpus() -> None:
    # Reference serving: 1T params in FP8 (1 byte) plus the KV cache of one 4,096-token sequence,
    # 2 * 56 * 7,168 * 4,096 * 1 = 3,288,334,336 bytes (3.06 GiB); (1e12 + 3.29e9) bytes over
    # 0.9 * 80 GiB = 77,309,411,328 bytes per H100 -> 12.98 -> 13 x H100 (the reference arithmetic).
    kv = ar.kv_cache_bytes(_shape(56, 7168, heads=56, kv_heads=56), 4096, 1, 1)
    assert kv == 3_288_334_336
    assert ar.gpus_for_bytes(10**12 + kv, ar.USABLE_FRACTION * 80 * GIB) == 13
    # Grouped-query attention with 8 KV heads of 56 keeps 1/7 of the cache.
    assert ar.kv_cache_bytes(_shape(56, 7168, heads=56, kv_heads=8), 4096, 1, 1) == kv // 7


def test_gpus_for_bytes_rounds_up_and_is_at_least_one() -> None:
    assert ar.gpus_for_bytes(10, 10) == 1
    assert ar.gpus_for_bytes(11, 10) == 2
    assert ar.gpus_for_bytes(0, 10) == 1


def test_usable_fraction_and_token_bytes() -> None:
    # The reference arithmetic: layouts must fit "in 90 % of GPU memory"; data is counted "as 32-bit token ids":
    # 15T tokens x 4 bytes = 6e13 bytes = 55,879 GiB (the reference's "~55,879 GB").
    assert ar.USABLE_FRACTION == 0.9
    assert 15e12 * ar.TOKEN_ID_BYTES / GIB == pytest.approx(55_879.35, abs=0.01)
