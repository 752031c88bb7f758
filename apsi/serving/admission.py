"""What one request holds in a replica's KV cache under its engine's admission, and so the most
requests a replica runs at once (the batch its KV cache and its engine allow). Part of the serving
arithmetic's one source of truth (apsi.serving.replica holds the rest): the walk, serve(), the
validation harness and the tests call these.

TensorRT-LLM's default capacity policy (GUARANTEED_NO_EVICT) starts a request only when its whole
input + output fits, so it reserves it; vLLM allocates pages as tokens are made and preempts the
latest request when they run out; SGLang does the same and reserves new_token_ratio of each running
request's remaining output (../shared/reference/serving.md sections 1.1 to 1.3 and 7, B_max)."""

from __future__ import annotations

import math

from apsi.serving.engine import Engine
from apsi.serving.replica import Shape, Workload


def tokens_per_sequence(engine: Engine, w: Workload) -> int:
    """KV-cache tokens one request holds at its longest: whole pages of isl + osl."""
    return math.ceil((w.isl + w.osl) / engine.block_tokens) * engine.block_tokens


CLIP_NEW_TOKENS = 4096
"""SGLang counts at most this many of a request's remaining output tokens in its admission
estimate (SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION's default; ../shared/reference/serving.md 1.2)."""


def held_tokens(engine: Engine, w: Workload) -> float:
    """KV-cache tokens one running request costs on average under the engine's admission
    (Engine.admission): under `reserve`, tokens_per_sequence; else its tokens so far, isl + osl / 2
    over its life (it decodes osl tokens at a steady pace), plus, under `estimated`, the engine's
    new_token_ratio of its remaining output (osl / 2 on average, at most CLIP_NEW_TOKENS), and half
    a page (its last page's empty slots, on average)."""
    if engine.admission == "reserve":
        return float(tokens_per_sequence(engine, w))
    held = w.isl + w.osl / 2 + engine.block_tokens / 2
    if engine.admission == "estimated":
        held += engine.new_token_ratio * min(w.osl / 2, CLIP_NEW_TOKENS)
    return held


def max_batch(sh: Shape, engine: Engine, w: Workload) -> int:
    """The most requests a replica holds at once: the KV cache's requests at what each holds under
    the engine's admission (held_tokens), at most the engine's max batch, in each attention-DP
    group (each holds its own sequences' cache and schedules its own batch); 0 when the cache
    cannot hold one whole request (its last token needs every page of isl + osl)."""
    if sh.kv_bytes < sh.kv_bytes_per_token * tokens_per_sequence(engine, w):
        return 0
    fits = int(sh.kv_bytes // (sh.kv_bytes_per_token * held_tokens(engine, w)))
    return max(0, min(engine.max_sequences, fits)) * sh.dp
