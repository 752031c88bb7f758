"""Pydantic models for what serve() returns: the replica layout, its memory, its latency and
throughput at the load, the replicas, the GPUs, and the mix under an inventory.

Data only. Units are in the field names (`_gib` = 2^30 bytes, `_ms`, `_per_s`, `_usd`, `_kwh`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import RootModel

from apsi.model.notebook import Shown
from apsi.model.documented import Documented

Limit = Literal["tpot", "ttft", "kv_cache", "max_batch", "load"]


class ServeWorkload(Documented):
    """The requests and the service level asked for."""

    isl_tokens: int
    """Input (prompt) tokens per request."""
    osl_tokens: int
    """Output tokens per request."""
    prefix_tokens: int
    """Input tokens per request already in the prefix cache."""
    ttft_target_ms: float | None
    """Time to first token the plan must meet, milliseconds; None: not constrained."""
    ttft_percentile: Literal["mean", "p99"]
    """Whether ttft_target_ms bounds the mean or the 99th percentile."""
    tpot_target_ms: float | None
    """Time per output token after the first the plan must meet, milliseconds; None: not constrained."""
    rate_requests_per_s: float | None
    """Requests per second to serve; None when the load is a concurrency or not given."""
    concurrency: int | None
    """Requests in flight to serve; None when the load is a rate or not given."""


class ReplicaMemory(Documented):
    """One GPU of the replica."""

    memory_gib: float
    """What the engine sees of the GPU's memory, GiB (2^30 bytes)."""
    weights_gib: float
    """Weights of the replica's largest stage on one GPU, GiB."""
    activations_gib: float
    """Peak activations of one prefill chunk and one batch's logits, GiB."""
    overhead_gib: float
    """CUDA context, NCCL buffers and CUDA graphs, GiB."""
    memory_fraction: float
    """The engine's memory fraction (gpu_memory_utilization, free_gpu_memory_fraction or
    mem_fraction_static) on this GPU and layout; the launch file sets it."""
    kv_cache_gib: float
    """KV-cache memory the engine's rule leaves, GiB."""
    kv_cache_bytes_per_token: float
    """KV cache one token keeps on one GPU, bytes."""
    kv_cache_tokens: int
    """Tokens the KV cache holds on the replica."""


class ReplicaLayout(Documented):
    """A replica's GPU type and layout (a ReplicaGroup's, a disaggregated PoolGroup's first fields)."""

    gpu: str
    """The GPU type."""
    tp: int
    """Tensor-parallel size."""
    pp: int
    """Pipeline-parallel stages."""
    ep: int
    """Expert-parallel size of the MoE layers (1: the experts sliced over the ranks like the other matrices)."""
    attention_dp: int
    """Attention data-parallel groups of tp GPUs per stage (1: none)."""
    gpus_per_replica: int
    """tp x attention_dp x pp."""


class ReplicaGroup(ReplicaLayout):
    """Replicas of one kind: a GPU type, a layout, a batch."""

    batch: int
    """Requests one replica runs at once (under a concurrency the replicas do not share evenly, the
    most: `lighter_replicas` of them run one fewer)."""
    lighter_replicas: int = 0
    """Under a concurrency, the replicas that run batch - 1 requests, so that the group holds its share
    of the requests in flight exactly (13 over 3 replicas: 5, 4 and 4); 0 otherwise."""
    batch_limit: int
    """The largest batch meeting the targets: the launch's max batch (max sequences), so a burst
    does not push TPOT or TTFT past them."""
    max_batch: int
    """The most requests one replica can hold (its KV cache, the engine's max batch)."""
    engine_max_batch: int
    """The engine's own max batch for one replica on this GPU: its default max sequences in each
    attention-DP group (vLLM's 1,024; 256 below 70 GiB of memory and on an A100)."""
    gpus_per_node: int | None = None
    """GPUs of one node of this type, from the catalog the plan was made with (gpus.yaml
    gpus_per_node): a replica spans ceil(gpus_per_replica / gpus_per_node) nodes (the launch
    exports' node count); None in a plan saved before it was recorded."""
    limit: Limit
    """What stops the batch growing: the TPOT or TTFT target, the KV cache, the engine's max
    batch, or the load itself."""
    replicas: int
    """Replicas of this kind."""
    gpus: int
    """replicas x gpus_per_replica."""
    ttft_ms: float
    """Mean time to first token at this batch, milliseconds."""
    ttft_p99_ms: float
    """99th-percentile time to first token at this batch, milliseconds."""
    ttft_p50_ms: float
    """Median TTFT at the load (each part at its median: the wait to join half a stage's step, the
    prefill queue's from its tail)."""
    ttft_p90_ms: float
    """TTFT at the load's 90th percentile, likewise."""
    tpot_ms: float
    """Time per output token after the first, milliseconds."""
    requests_per_s_per_replica: float
    """Requests one replica completes per second at this batch (with lighter_replicas, the mean over
    the group's replicas: each runs its own batch over its own latency, Little's law)."""
    output_tokens_per_s_per_gpu: float
    """Output tokens per second per GPU."""
    output_tokens_per_s_per_user: float
    """Output tokens per second one request sees (1 / TPOT)."""
    memory: ReplicaMemory
    """Memory of one GPU of the replica, by part."""


class ServeSolver(Documented):
    """How the answer was found."""

    method: Literal["walk", "cp-sat", "enumeration"]
    """walk: replicas of one layout, every layout and batch of every GPU type weighed; cp-sat: a
    mix of replica kinds under an inventory (or one too large to enumerate), an integer program
    over the walk's replica kinds; enumeration: a mix on fewer GPUs (or less cost) than any one
    layout without an inventory, every count within that bound weighed (apsi.serving.mix.cover_free)."""
    status: Literal["OPTIMAL", "FEASIBLE"]
    """OPTIMAL: proved the fewest GPUs (or least cost); FEASIBLE: the best found in the time limit."""
    gap: float
    """Relative gap between the answer and the best bound (0 when OPTIMAL)."""
    layouts: int
    """Replica layouts weighed (every GPU type's TP and PP choices)."""
    kinds: int
    """Replica kinds that meet the targets (a layout at its largest batch meeting them), of those
    weighed in full."""
    bounded: int = 0
    """Pipelined layouts among `layouts` ruled out by a bound without their batch being searched:
    their replicas need more GPUs (or cost, or give less per GPU) than the two best found, and
    a kind as small carries more (apsi.serving.walk.layouts). In a disaggregated plan, the prefill
    kinds set aside as in no optimal pools (apsi.serving.disagg_plan._useful)."""
    mixes_checked: bool
    """With a load: mixes of replica kinds were weighed too (replicas of several layouts; without
    an inventory every count that could beat one layout, apsi.serving.mix.cover_free), so the
    answer is the fewest GPUs (or least cost) over mixes as well as over single layouts."""


class ServePlan(Shown, Documented):
    """A serving plan: replicas of a layout (or a mix under an inventory) meeting the targets."""

    model_name: str | None
    """The model's name (a preset's; None for a size)."""
    model_repo: str | None
    """The model's Hugging Face repository (a preset's), or the config.json folder given; None for a size."""
    params: int
    """Parameters served."""
    context_tokens: int | None = None
    """The model's context length (its config's max_position_embeddings), where known: the launch's
    max length goes no further (apsi.outputs.export.engines)."""
    engine: str
    """The serving engine (vllm, sglang, trtllm)."""
    engine_version: str
    """The engine release whose defaults the plan uses."""
    precision: str
    """Weight precision: bf16, fp16, fp8 or fp4 (NVFP4)."""
    kv_precision: str
    """KV-cache precision: bf16, fp16 or fp8."""
    workload: ServeWorkload
    """The requests, the targets and the load asked for."""
    groups: list[ReplicaGroup]
    """The replicas, by kind: one kind without an inventory."""
    replicas: int
    """Replicas over all kinds."""
    gpus: int
    """GPUs over all replicas."""
    requests_per_s: float
    """Requests per second the replicas complete at their batches."""
    output_tokens_per_s: float
    """Output tokens per second over all replicas."""
    cost_usd_per_hour: float | None
    """GPU-hours' price of all replicas per hour, USD; None without a price."""
    usd_per_million_output_tokens: float | None
    """Price of a million output tokens at the plan's throughput, USD; None without a price."""
    kwh_per_million_output_tokens: float | None
    """Board power of the GPUs over a million output tokens, kWh (times PUE for the facility);
    None without board power."""
    objective: Literal["gpus", "cost", "throughput"]
    """What was minimised: GPUs (with a load), cost (with a load), or what was maximised without
    a load: output tokens per second per GPU on one replica."""
    why: str
    """What decided the answer."""
    notes: list[str]
    """What the reader should know: KV-starved layouts, GPU types left out, the engine's defaults."""
    solver: ServeSolver
    """How the answer was found and whether it is proved."""


class ServeFrontierPoint(Documented):
    """A replica at one batch that no other layout and batch beats on both tokens/s per GPU and per user."""

    gpu: str
    """The GPU type."""
    tp: int
    """Tensor-parallel size."""
    pp: int
    """Pipeline-parallel stages."""
    ep: int
    """Expert-parallel size of the MoE layers (1: none)."""
    attention_dp: int
    """Attention data-parallel groups (1: none)."""
    batch: int
    """Requests the replica runs at once."""
    output_tokens_per_s_per_gpu: float
    """Output tokens per second per GPU."""
    output_tokens_per_s_per_user: float
    """Output tokens per second one request sees (1 / TPOT)."""
    ttft_ms: float
    """Mean time to first token, milliseconds."""
    tpot_ms: float
    """Time per output token after the first, milliseconds."""


class ServeFrontierOutput(Shown, RootModel[list[ServeFrontierPoint]]):
    """What `apsi serve --frontier --json` prints: the points, by tokens/s per user falling."""
