"""Planning arithmetic: pure functions, each with its unit and its source.

Nothing here searches, reads files or knows the catalog; every function takes numbers (or the
resolved model, apsi.inputs.modelspec.ModelSpec) and returns numbers. Bytes are exact integers where
the inputs allow it; GiB means 2^30 bytes.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from apsi.model.architecture import Architecture
from apsi.model.counting import attention_flops_per_layer, kv_cache_elements_per_token, training_flops_per_token
from apsi.errors import InputError
from apsi.units import SECONDS_PER_DAY

if TYPE_CHECKING:
    from apsi.inputs.modelspec import ModelSpec

RECOMPUTE_LEVELS: tuple[str, ...] = ("none", "selective", "full")
"""Activation recomputation, lightest first (the solver's tie-break order)."""

USABLE_FRACTION = 0.9
"""Share of GPU memory a plan may fill; the rest is CUDA context, allocator fragmentation and
communication buffers. The reference arithmetic's layout rule keeps 90%."""

TOKEN_ID_BYTES = 4
"""A token id stored as a 32-bit integer (the reference's "GB as 32-bit token ids")."""

# Bytes per parameter of model states under mixed precision, split as (weights, gradients,
# optimizer states). AdamW: BF16 weights and gradients, FP32 master weights and two FP32 moments
# = 2 + 2 + 12 = 16 (Rajbhandari et al. 2020, ZeRO, Sec. 3.1: "16 bytes"). 8-bit Adam keeps the
# two moments in 8 bits (Dettmers et al. 2022): 2 + 2 + (4 + 1 + 1) = 10, the reference's figure.
# SGD with momentum keeps FP32 master weights and one FP32 momentum: 2 + 2 + 8 = 12.
OPTIMIZER_BYTES: dict[str, tuple[int, int, int]] = {
    "adamw": (2, 2, 12),
    "adam8bit": (2, 2, 6),
    "sgd": (2, 2, 8),
}

SERVING_BYTES: dict[str, int] = {"bf16": 2, "fp16": 2, "fp8": 1}
"""Bytes per weight and per KV-cache element when serving at a precision."""


def training_flops(model: ModelSpec, tokens: int, seq: int, recompute: str,
                   modules: tuple[str, ...] = ("core_attn",)) -> float:
    """Training FLOPs for `tokens` tokens of `seq`, including what recomputation re-runs.

    Per token, apsi.model.counting.training_flops_per_token: 6 N over the matrix weights a token
    uses (the active size itself for a size) plus the attention core of every layer and MTP
    block under the model's FLOPs convention. For the reference shape rule this is the reference
    document's 6 N D + 12 L d s D (Narayanan et al. 2021, Eq. 3), in exact integers per token.
    """
    return float(flops_per_token(model, seq, recompute, modules)) * float(tokens)


def flops_per_token(model: ModelSpec, seq: int, recompute: str = "none",
                    modules: tuple[str, ...] = ("core_attn",)) -> int:
    """Training FLOPs of one token at sequence length `seq` (model FLOPs with recompute "none").

    Selective recomputation re-runs what its modules hold (Megatron --recompute-modules): the
    attention core forward (core_attn, the default), the MLA up-projections (2 FLOPs per weight),
    the dense MLPs' matrices (mlp), the MoE blocks' active experts, shared experts and router (moe);
    layernorm and moe_act re-run elementwise work, not counted. MTP blocks' MLPs are left out.
    The reference's selective level is core_attn alone."""
    a = model.architecture
    per_layer = attention_flops_per_layer(a.heads, a.qk_head_dim, a.v_dim, seq, model.flops_convention)
    layers = a.layers + a.mtp_layers
    if recompute != "selective" or tuple(modules) == ("core_attn",):
        return training_flops_per_token(model.matmul_active, layers, per_layer, recompute)
    per_token = training_flops_per_token(model.matmul_active, layers, per_layer, "none")
    if "core_attn" in modules:
        per_token += layers * per_layer // 3
    if "mla_up_proj" in modules and a.kv_lora_rank is not None:  # MLA (Architecture.mla)
        up = (a.q_lora_rank or 0) * a.heads * a.qk_head_dim + a.kv_lora_rank * a.heads * (a.qk_nope_dim + a.v_head_dim)
        per_token += 2 * layers * up
    if "mlp" in modules or "moe" in modules:
        if model.active_parts is None:
            raise InputError("recompute modules mlp and moe need the model's parts: give a preset or a config.json, "
                             "not a size")
        p = model.active_parts
        per_token += 2 * p.mlp if "mlp" in modules else 0
        per_token += 2 * (p.experts + p.shared_experts + p.router) if "moe" in modules else 0
    return per_token


def state_bytes(params: int, optimizer: str) -> tuple[int, int, int]:
    """(weights, gradients, optimizer states) in bytes for all `params` parameters, before sharding."""
    weights, grads, opt = OPTIMIZER_BYTES[optimizer]
    return params * weights, params * grads, params * opt


def activation_bytes_per_layer(seq: int, micro_batch: int, width: int, heads: int, recompute: str) -> int:
    """Activation memory of one transformer layer for one micro-batch, bytes, before TP.

    Korthikanti et al. 2022, Table 2 / Eq. 1: s b d (34 + 5 a s / d) with nothing recomputed,
    34 s b d with selective recomputation (the 5 a s^2 b attention term is dropped), and 2 s b d
    (the layer input only) with full recomputation. Written s b (34 d + 5 a s) to stay integral.
    """
    if recompute == "none":
        return seq * micro_batch * (34 * width + 5 * heads * seq)
    if recompute == "selective":
        return 34 * seq * micro_batch * width
    return 2 * seq * micro_batch * width


def activation_bytes(
    layers: int, seq: int, micro_batch: int, width: int, heads: int, recompute: str
) -> int:
    """Activation bytes one GPU holds with TP = 1, whatever the pipeline depth.

    With a 1F1B schedule the first stage holds PP micro-batches of L/PP layers in flight
    (Narayanan et al. 2021 Sec. 2.2; Korthikanti et al. 2022 Sec. 4.2.3), i.e. L layers' worth
    for one micro-batch: pipelining does not shrink it. Divide by TP for one GPU's share.
    """
    return layers * activation_bytes_per_layer(seq, micro_batch, width, heads, recompute)


def pipeline_factor(pp: int, micro_batches: float) -> float:
    """Time of a 1F1B step over its ideal: 1 + (PP - 1) / m (Narayanan et al. 2021, Sec. 2.2)."""
    return 1.0 + (pp - 1) / micro_batches


def duration_seconds(
    flops: float, gpus: int, peak_flops: float, mfu: float, pp: int, micro_batches: float
) -> float:
    """Wall-clock seconds: FLOPs over (GPUs x dense peak x MFU), stretched by pipeline idle time."""
    return flops / (gpus * peak_flops * mfu) * pipeline_factor(pp, micro_batches)


def days(seconds: float) -> float:
    return seconds / SECONDS_PER_DAY


def kv_cache_bytes(arch: Architecture, seq: int, batch: int, bytes_per: int) -> int:
    """KV cache for `batch` sequences of `seq` tokens, bytes: the elements each token keeps
    (apsi.model.counting.kv_cache_elements_per_token: 2 g d_h per layer, or MLA's latent) x s x
    batch x bytes. With the reference shape rule (g = a, d_h = d / a): 2 L d s per sequence."""
    return kv_cache_elements_per_token(arch) * seq * batch * bytes_per


def divisors(n: int) -> tuple[int, ...]:
    """The divisors of n, ascending, in O(sqrt n)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return tuple(sorted(set(small + [n // d for d in small])))


def gpus_for_bytes(total_bytes: float, usable_bytes_per_gpu: float) -> int:
    """GPUs needed to hold `total_bytes` at `usable_bytes_per_gpu` each, rounded up."""
    return max(1, math.ceil(total_bytes / usable_bytes_per_gpu))
