"""Pydantic models for what serve_disagg() returns: a disaggregated serving plan, prefill and
decode on separate replica pools (xPyD), its latencies at the load, and the aggregated plan it is
weighed against.

Data only. Units are in the field names (`_gib` = 2^30 bytes, `_ms`, `_per_s`, `_usd`).
"""

from __future__ import annotations

from typing import Literal

from apsi.model.serve_schema import ReplicaLayout, ReplicaMemory, ServeSolver, ServeWorkload
from apsi.model.notebook import Shown
from apsi.model.documented import Documented


class PoolGroup(ReplicaLayout):
    """Replicas of one layout in one pool."""

    role: Literal["prefill", "decode"]
    """prefill: computes each prompt's KV cache and hands it on; decode: receives it and makes every
    output token."""
    replicas: int
    gpus: int
    requests_per_s_per_replica: float
    """Requests per second one replica carries within the targets: for prefill, the prompts whose
    queue wait keeps the TTFT target; for decode, its batch over a request's time in it."""
    utilization: float
    """Share of the pool's capacity the load uses (for prefill: its busy share, which sets the
    queue wait)."""
    batch: int
    """Decode: requests each replica runs at once at the load; prefill: 0 (prompts run as they come)."""
    prefill_ms: float
    """Prefill: one prompt's prefill through every stage; decode: 0."""
    queue_ms: float
    """Prefill: a prompt's mean wait for the replica at the load (M/D/1); decode: 0."""
    kv_transfer_ms: float
    """A request's KV cache over this pool's network links (the pool's side of the transfer)."""
    tpot_ms: float
    """Decode: time per output token at the load; prefill: 0."""
    memory: ReplicaMemory
    """Memory of one GPU of the replica, by part."""


class DisaggPlan(Shown, Documented):
    """A disaggregated serving plan: a prefill pool and a decode pool meeting the targets at a rate,
    with the aggregated plan of the same question beside it."""

    model_name: str | None
    params: int
    engine: str
    engine_version: str
    precision: str
    kv_precision: str
    workload: ServeWorkload
    groups: list[PoolGroup]
    """The pools' replicas, prefill first."""
    prefill_replicas: int
    decode_replicas: int
    gpus: int
    """GPUs over both pools."""
    ttft_ms: float
    """Mean time to first token at the load: the front end, the prefill queue and prefill, the KV
    transfer, and the decode replica's first step (the slowest pairing of the pools' kinds)."""
    ttft_p99_ms: float
    ttft_p50_ms: float
    ttft_p90_ms: float
    tpot_ms: float
    """Time per output token at the load (the slowest decode kind)."""
    requests_per_s: float
    """The rate asked for, which both pools carry."""
    output_tokens_per_s: float
    cost_usd_per_hour: float | None
    usd_per_million_output_tokens: float | None = None
    """Price of a million output tokens at the rate (the pools are sized to it), USD; None without
    a price."""
    objective: Literal["gpus", "cost"]
    aggregated_gpus: int | None
    """GPUs of the aggregated plan (apsi.serving.plan.serve) for the same question; None when no
    aggregated layout meets the targets."""
    aggregated_cost_usd_per_hour: float | None
    wins: bool
    """Whether disaggregation needs fewer GPUs (objective gpus) or less cost than aggregated serving."""
    why: str
    """What decided the pools, and whether disaggregation wins."""
    notes: list[str]
    solver: ServeSolver
    """cp-sat: the pool counts over every prefill and decode kind, proved or with its gap."""
