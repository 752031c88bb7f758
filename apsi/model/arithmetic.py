"""Planning arithmetic: pure functions, each with its unit and its source.

Nothing here searches, reads files or knows the catalog; every function takes numbers and returns
numbers. Bytes are exact integers where the inputs allow it; GiB means 2^30 bytes.
"""

from __future__ import annotations

import math

from apsi.units import SECONDS_PER_DAY

RECOMPUTE_LEVELS: tuple[str, ...] = ("none", "selective", "full")
"""Activation recomputation, lightest first (the solver's tie-break order)."""

USABLE_FRACTION = 0.9
"""Share of GPU memory a plan may fill; the rest is CUDA context, allocator fragmentation and
communication buffers. The reference plan (apsi-plan.md, "Layout") keeps 90%."""

HEAD_DIM = 128
"""Default attention head width and width-to-depth ratio (d = 128 * L), as in the reference's
default shapes (48 x 6144 for 21B, 72 x 9216 for 70B); GPT-3 and Llama use head size 128."""

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


def default_layers(active_params: int) -> int:
    """Depth for a model of `active_params` when none is given.

    The reference shape keeps d = 128 L, so N = 12 L d^2 = 12 * 128^2 * L^3 (the 12 L d^2
    parameter count of Kaplan et al. 2020, Eq. 2.1, without embeddings). L is the multiple of 8
    nearest the cube root: 21B -> 48, 32B -> 56, 70B -> 72. Where that multiple would be 0 (cube
    root below 4, i.e. under 12 * 128^2 * 4^3 = 12,582,912 parameters), the nearest whole number
    of layers (at least 1). Python's round() sends exact halves to the even neighbour.
    """
    exact = (active_params / (12 * HEAD_DIM**2)) ** (1 / 3)
    by_eight = 8 * round(exact / 8)
    return by_eight if by_eight >= 8 else max(1, round(exact))


def default_width(active_params: int, layers: int) -> int:
    """Width for `layers` layers holding `active_params` (12 L d^2 = N), a multiple of 128."""
    exact = math.sqrt(active_params / (12 * layers))
    return max(HEAD_DIM, HEAD_DIM * round(exact / HEAD_DIM))


def training_flops(
    active_params: int, tokens: int, layers: int, width: int, seq: int, recompute: str
) -> float:
    """Training FLOPs for `tokens` tokens, including what recomputation re-runs.

    6 N D (forward 2 N D + backward 4 N D, Kaplan et al. 2020 Sec. 2.1) plus attention scores
    and values, 4 L d s per token forward and 12 L d s forward+backward (Narayanan et al. 2021,
    Eq. 3). Selective recomputation re-runs the attention core forward (4 L d s per token,
    Korthikanti et al. 2022 Sec. 5); full recomputation re-runs the whole forward (2 N + 4 L d s).
    """
    per_token = 6 * active_params + 12 * layers * width * seq
    if recompute == "selective":
        per_token += 4 * layers * width * seq
    elif recompute == "full":
        per_token += 2 * active_params + 4 * layers * width * seq
    return float(per_token) * float(tokens)


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


def kv_cache_bytes(layers: int, width: int, seq: int, batch: int, bytes_per: int, heads: int, kv_heads: int) -> int:
    """KV cache for `batch` sequences of `seq` tokens: 2 (K and V) x L x d x s x bytes, scaled by
    kv_heads / heads under grouped-query attention (Ainslie et al. 2023)."""
    return 2 * layers * (width * kv_heads // heads) * seq * batch * bytes_per


def gpus_for_bytes(total_bytes: float, usable_bytes_per_gpu: float) -> int:
    """GPUs needed to hold `total_bytes` at `usable_bytes_per_gpu` each, rounded up."""
    return max(1, math.ceil(total_bytes / usable_bytes_per_gpu))
