"""Disaggregated serving's arithmetic: a prefill pool of replicas that only compute prompts and a
decode pool that only makes output tokens, the KV cache of each request moving between them over
the GPUs' network links (NVIDIA Dynamo, vLLM's P/D connectors, SGLang PD; ../shared/reference/
serving.md section 4). Every step's time is apsi.serving.replica.step_seconds, the one source of
truth the aggregated plan uses; this module only arranges the steps per pool.

A prefill replica (PrefillKind) runs each prompt as its own step (the `own` prompt of
step_seconds, with no decoding sequences beside it); one prompt at a time per attention group, so
its queue is M/D/1 with that step as the service time, DistServe's model of a prefill instance
(serving.md 3.2), and its latency is the step through every pipeline stage. Its GPUs then send the
prompt's KV cache, each its shard, over its own NIC (apsi.model.collectives.links, the scale-out
link at its efficiency, plus its start-up).

A decode replica (DecodeKind) runs decode-only steps, no prefill chunk in them, at most at the
largest batch its KV cache (apsi.serving.admission) and the TPOT target allow, or held to a smaller
one (at_batch: a pool of more replicas, each at the batch its share of the rate needs). A request reaches it when its KV
cache has arrived and makes every output token there, the first included (Dynamo's flow: "decode
streams tokens", serving.md 4.1; vLLM's proxy runs the prefill with max_tokens 1 and the decode
instance makes the output), so its TTFT is the front end, the prefill queue, the prefill, the
transfer (the slower of the two pools' links: sender and receiver move the shards at once), half
a stage's step waiting to join the batch, and one step.

The prefill pool is sized for the TTFT target: what the target leaves after the fixed parts is the
queue's wait budget, and queues.busiest turns it into the busy share each prefill replica may run
at, hence the requests per second it carries (capacity()). That budget depends on the decode kind
(its first step and link), so the pools' sizes are chosen together (apsi.serving.pools).
"""

from __future__ import annotations

from typing import NamedTuple

from apsi.catalog import GPU
from apsi.model.architecture import Architecture
from apsi.model.collectives import links
from apsi.serving import admission, queues
from apsi.serving import replica as rp
from apsi.serving.engine import Engine
from apsi.serving.walk import Targets, largest


class PrefillKind(NamedTuple):
    """One prefill layout on one GPU type."""

    gpu: GPU
    order: int
    replica: rp.Replica
    shape: rp.Shape
    service_s: float
    """An attention group's busy time per prompt: a stage's step with the prompt alone."""
    prefill_s: float
    """One prompt through every stage (and the pipeline's hops)."""
    send_s: float
    """The prompt's KV shard out of one GPU over its NIC, with the link's start-up."""
    link_rate: float
    """Prompts per second the replica's NICs carry out (each attention group its own prompts)."""


class DecodeKind(NamedTuple):
    """One decode layout on one GPU type, at its largest batch within the targets."""

    gpu: GPU
    order: int
    replica: rp.Replica
    shape: rp.Shape
    max_batch: int
    """What its KV cache and the engine's max batch hold (admission.max_batch)."""
    batch: int
    tpot_s: float
    requests_per_s: float
    """Requests per second one replica carries at `batch`, within its NICs' intake."""
    first_s: float
    """The decode side of TTFT: the front end, half a stage's step to join the batch, one step."""
    first_p99_s: float
    """The same with a whole stage's step to join (the p99's)."""
    recv_s: float
    """The prompt's KV shard into one GPU over its NIC, with the link's start-up."""
    limit: str = "tpot"
    """What sets `batch`: kv_cache, max_batch, tpot or ttft (the layout's largest batch within the
    targets), or load (a smaller batch the pool is held to, at_batch)."""
    largest: int = 0
    """The layout's largest batch within the targets (`batch` but under at_batch)."""


def _link(gpu: GPU, tokens: float, sh: rp.Shape) -> tuple[float, float]:
    """(seconds for one request's KV shard of `tokens` over one GPU's NIC, requests/s the
    replica's NICs carry): the scale-out link's one-way bandwidth at its efficiency."""
    out = links(gpu)[1]
    shard = tokens * sh.kv_bytes_per_token
    return out.latency + shard / out.bandwidth, (sh.dp * out.bandwidth / shard if shard > 0 else float("inf"))


def prefill_kind(gpu: GPU, order: int, rep: rp.Replica, sh: rp.Shape, w: rp.Workload) -> PrefillKind | None:
    """A prefill replica of shape `sh`, or None when its KV cache cannot hold one prompt."""
    if sh.kv_bytes < sh.kv_bytes_per_token * w.isl:
        return None
    fresh = w.isl - w.prefix
    service = rp.step_seconds(sh, 0.0, 0.0, 0.0, w.prefix + fresh / 2, own=fresh)
    latency = service
    if sh.pp > 1:
        latency = sh.pp * service + (sh.pp - 1) * (sh.hop_latency_s + fresh * sh.hop_s_per_token)
    send, rate = _link(gpu, fresh, sh)
    return PrefillKind(gpu, order, rep, sh, service, latency, send, rate)


def _decode_tpot(sh: rp.Shape, w: rp.Workload, batch: int) -> float:
    """A decode replica's TPOT at `batch`: decode-only steps, pp micro-batches in turn as in
    operating.operating_point."""
    micro = max(1.0, batch / sh.pp)
    step = rp.step_seconds(sh, micro, w.isl + w.osl / 2, 0.0, 0.0)
    return step if sh.pp == 1 else sh.pp * step + (sh.pp - 1) * (sh.hop_latency_s + micro * sh.hop_s_per_token)


def decode_point(sh: rp.Shape, w: rp.Workload, batch: int) -> tuple[float, float, float, float]:
    """(TPOT, requests/s, the decode side of TTFT, its p99) of a decode replica running `batch`
    requests (_decode_tpot)."""
    tpot = _decode_tpot(sh, w, batch)
    wait = tpot / sh.pp
    per_request = 0.5 * wait + w.osl * tpot
    front, front99 = queues.front_end_quantiles(sh.request_s, sh.stream_s, batch, tpot, (0.99,))
    return tpot, batch / per_request, front + 0.5 * wait + tpot, front99 + wait + tpot


def decode_quantiles(sh: rp.Shape, w: rp.Workload, batch: int) -> tuple[float, float, float]:
    """The decode side of TTFT at its p50, p90 and p99 (decode_point's, the front end's own
    quantiles and that share of a stage's step to join), as operating.operating_point takes them."""
    tpot = _decode_tpot(sh, w, batch)
    wait = tpot / sh.pp
    _, f50, f90, f99 = queues.front_end_quantiles(sh.request_s, sh.stream_s, batch, tpot, queues.REPORTED)
    return f50 + 0.5 * wait + tpot, f90 + 0.9 * wait + tpot, f99 + wait + tpot


def decode_kind(gpu: GPU, order: int, rep: rp.Replica, sh: rp.Shape, engine: Engine, w: rp.Workload,
                targets: Targets) -> DecodeKind | None:
    """A decode replica at the largest batch its KV cache holds with TPOT within its target and its
    side of TTFT within the TTFT target; None when even one request misses them."""
    top = admission.max_batch(sh, engine, w)

    def ok(b: int) -> bool:
        tpot, _, first, first_p99 = decode_point(sh, w, b)
        ttft = first_p99 if targets.p99 else first
        return ((targets.tpot_s is None or tpot <= targets.tpot_s)
                and (targets.ttft_s is None or ttft <= targets.ttft_s))

    best = largest(1, top, ok)
    if best < 1:
        return None
    if best < top:
        tpot = decode_point(sh, w, best + 1)[0]
        limit = "tpot" if targets.tpot_s is not None and tpot > targets.tpot_s else "ttft"
    else:
        limit = "max_batch" if top == engine.max_sequences * rep.dp else "kv_cache"
    tpot, rps, first, first_p99 = decode_point(sh, w, best)
    recv, rate = _link(gpu, w.isl - w.prefix, sh)
    return DecodeKind(gpu, order, rep, sh, top, best, tpot, min(rps, rate), first, first_p99, recv, limit, best)


def at_batch(d: DecodeKind, w: rp.Workload, batch: int) -> DecodeKind:
    """`d` held to at most `batch` requests per replica (batch <= d.batch): what a replica carries
    there and the decode side of TTFT there, which the prefill pool's TTFT budget then keeps
    (apsi.serving.disagg_plan: a pool of more decode replicas, each at a smaller batch, leaves the
    prefill pool more of the target)."""
    tpot, rps, first, first_p99 = decode_point(d.shape, w, batch)
    rate = _link(d.gpu, w.isl - w.prefix, d.shape)[1]
    return d._replace(batch=batch, tpot_s=tpot, requests_per_s=min(rps, rate), first_s=first,
                      first_p99_s=first_p99, limit="load")


def kinds(a: Architecture, gpus: tuple[GPU, ...], engine: Engine, weights: str, kv: str, w: rp.Workload,
          targets: Targets, tp: int | None = None, pp: int | None = None,
          unshaped_experts: int = 0) -> tuple[list[PrefillKind], list[DecodeKind], int]:
    """Every layout of every GPU type (replica.replicas) as a prefill kind and as a decode kind, where
    it serves that role; and the layouts weighed."""
    prefill, decode, weighed = [], [], 0
    for order, gpu in enumerate(gpus):
        on = engine.on(gpu)  # the engine's defaults on this GPU (vLLM's smaller ones below 70 GiB)
        for rep in rp.replicas(a, gpu, tp, pp):
            weighed += 1
            sh = rp.shape(a, gpu, on, weights, kv, rep, unshaped_experts)
            p = prefill_kind(gpu, order, rep, sh, w)
            if p is not None:
                prefill.append(p)
            d = decode_kind(gpu, order, rep, sh, on, w, targets)
            if d is not None:
                decode.append(d)
    return prefill, decode, weighed


def pair_fixed(p: PrefillKind, d: DecodeKind, p99: bool) -> float:
    """A request's TTFT but its prefill queue: the prefill, the KV transfer (the slower side), and
    the decode side (module docstring)."""
    return p.prefill_s + max(p.send_s, d.recv_s) + (d.first_p99_s if p99 else d.first_s)


def capacity(p: PrefillKind, d: DecodeKind, targets: Targets) -> float:
    """Requests per second one replica of `p` carries, beside decode kind `d`, with the TTFT target
    met: each attention group at the busy share whose queue wait fits what the target leaves
    (queues.busiest), at most its NICs' rate; 0 when the fixed parts alone miss the target."""
    assert targets.ttft_s is not None
    budget = targets.ttft_s - pair_fixed(p, d, targets.p99)
    if budget < 0:
        return 0.0
    rho = queues.busiest(budget, p.service_s, targets.p99)
    return min(p.shape.dp * rho / p.service_s, p.link_rate)


def ttft(p: PrefillKind, d: DecodeKind, rate_per_replica: float) -> tuple[float, float]:
    """(mean, p99) TTFT of a request through `p` and `d` with each prefill replica taking
    rate_per_replica requests a second (its attention groups share them)."""
    wait, wait_p99 = queues.prefill_queue(rate_per_replica / p.shape.dp, p.service_s)
    return wait + pair_fixed(p, d, False), wait_p99 + pair_fixed(p, d, True)
