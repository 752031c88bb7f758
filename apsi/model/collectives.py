"""Communication time over the real links: what each collective of a step costs and which link it crosses.

Owns the two links of a GPU (the one-way NVLink figure and the GPU's own NIC, each at its
achievable bus efficiency; SB, MLE), the time of the collectives the step model
(apsi.model.steptime) charges: ring reduce-scatters and all-gathers moving their ring bytes
(NCCLT, SB, UPB) at a bus bandwidth that ramps with the message (DGXC, MLE), over the NVLink
domain while the group fits in it and hierarchically over the NICs beyond (SB); all-to-alls and
point-to-point sends after a start-up latency (CAL); the NVLink domains one token's routed experts
reach (DSV3); and a framework's data-parallel traffic (DpTraffic, data the framework passes in)
with its cached per-group time: each bucket's bytes plus NCCL's latency for its collective
(NCCL's ring or, for an all-reduce, tree, whichever its tuning model finds faster; NCCL-TUNE).

Pure functions: numbers and a GPU in, seconds and a link name out. Source keys: docs/sources.md.
"""

from __future__ import annotations

import functools
import math
from typing import Callable, NamedTuple

from apsi.catalog import GPU
from apsi.model.architecture import Architecture

SCALEUP_EFFICIENCY = 370 / 450
"""Largest bus bandwidth a collective reaches over NVLink, as a share of the one-way link: "difficult
in practice to exceed 370 GB/s" of H100's 450 (SB "Empirical measurements").
A catalog's scaleup_efficiency overrides it."""
SCALEOUT_EFFICIENCY = 380 / 400
"""The same over the scale-out network: 4 x P6-B200 inter-node all-reduce at ~380 GB/s bus of the
node's 400 (MLE "Inter-node speed"). A catalog's scaleout_efficiency overrides it."""
SCALEUP_HALF_BYTES = 16 * 2**20
"""Message size at which an NVLink collective reaches half its top bus bandwidth: 8 x H100
all-reduce, 237 GB/s at 16 MiB of ~480 at >= 4 GiB (DGXC nccl-tests sample)."""
SCALEOUT_HALF_BYTES = 92 * 2**20
"""The same over the scale-out network: 156 GB/s at 64 MiB of ~380 (MLE 4 x P6-B200 all-reduce),
64 MiB x (380 / 156 - 1) = 92 MiB."""
SCALEUP_LATENCY = 10e-6
SCALEOUT_LATENCY = 20e-6
"""Start-up time of one point-to-point or all-to-all operation, seconds: Calculon's H100 system
file, NVLink 10 us and InfiniBand 20 us (CAL systems/h100_80g_nvl8.json).
Point-to-point sends and all-to-alls move their bytes at the link's top bus bandwidth after it
(DeepEP's cross-node EP all-to-all reaches ~50-55 GB/s of a 400 Gb/s NIC, MB-GUIDE "DeepEP")."""
DEFAULT_SCALEOUT_GBPS = 12.5
"""Scale-out per GPU when the catalog gives none: 100 Gb/s Ethernet."""

# NCCL's own latency model of a collective (NCCL-TUNE: NVIDIA/nccl src/graph/tuning.cc,
# ncclTopoTuneModel, the Simple protocol that large messages run): a base latency, then one step
# per ring hop, a hop inside a node at the NVLink figure and one between nodes at the network's.
NCCL_RING_BASE = 8.4e-6
"""Ring base latency, seconds (baseLat, Ring / Simple: 8.4 us)."""
NCCL_RING_NVLINK_STEP = 3.4e-6
"""One ring step between GPUs of a node (hwLat NVLink, Ring / Simple: 3.4 us)."""
NCCL_RING_NET_STEP = 9.6e-6
"""One ring step between nodes (hwLat NET, Ring / Simple: 9.6 us)."""
NCCL_RING_PLATEAU = 1.9
"""A multi-node ring all-reduce's latency is taken 1.9 times ("plateau effect of ring",
ncclTopoGetAlgoTime)."""
NCCL_TREE_NVLINK_STEP = 28e-6
NCCL_TREE_NET_STEP = 50e-6
"""One tree step inside a node and between nodes (hwLat Tree / Simple: 28 and 50 us); the tree
runs all-reduces only, 2 ((ranks per node - 1) intra + log2(nodes) inter) steps, and NCCL takes
it where it is faster than the ring (ncclTopoTuneModel: reduce-scatters and all-gathers are ring
only)."""


def nccl_latency(size: int, per_node: int, all_reduce: bool = False) -> float:
    """Seconds of NCCL's modelled latency for one collective over `size` ranks, `per_node` of them
    in each NVLink domain (NCCL-TUNE): a ring's size - 1 steps for a reduce-scatter or all-gather
    (2 (size - 1) for an all-reduce), nodes - 1 of them (2 (nodes - 1)) between nodes; an
    all-reduce takes the faster of that ring and the tree's 2 log2(nodes) network steps. E.g.
    a reduce-scatter over 96 ranks one per node: 8.4 + 95 x 9.6 = 920 us, the same 96 ranks
    all-reducing by tree: 2 x 6 x 50 = 600 us against the ring's (8.4 + 190 x 9.6) x 1.9 = 3,482 us."""
    if size <= 1:
        return 0.0
    local = max(1, min(size, per_node))
    nodes = math.ceil(size / local)
    hops, between = (2 * (size - 1), 2 * (nodes - 1)) if all_reduce else (size - 1, nodes - 1)
    ring = NCCL_RING_BASE + (hops - between) * NCCL_RING_NVLINK_STEP + between * NCCL_RING_NET_STEP
    if not all_reduce:
        return ring
    if nodes > 1:
        ring *= NCCL_RING_PLATEAU
    tree = 2 * ((local - 1) * NCCL_TREE_NVLINK_STEP + math.floor(math.log2(nodes)) * NCCL_TREE_NET_STEP)
    return min(ring, tree)


class DpTraffic(NamedTuple):
    """How a framework reduces gradients and gathers parameters over its data-parallel group
    (UPB, MB-GUIDE, MLM-ARGS), per parameter of the rank."""

    grad_bytes: float
    """Bytes per gradient element in the reduction (4: fp32, 2: bf16)."""
    gather_bytes: float
    """Bytes per parameter the all-gather moves (2: bf16, 1: FP8 param gather; 0: none)."""
    all_reduce: bool = False
    """Gradients all-reduced (DDP, ZeRO-0) instead of reduce-scattered, and the optimizer's states
    not sharded: every rank steps its whole replica's (apsi.model.steptail.tail)."""
    per_micro_batch: bool = False
    """Gathered twice (forward and backward) and reduced on every micro-batch, layer by layer,
    each layer's prefetched under the one before it (FSDP / ZeRO-3 resharding after forward:
    the forward's gathers under the forward, the backward's gathers and reduce-scatters under the
    backward; apsi.model.steptail.tail); else once per step, the reduction under the last
    micro-batch's backward and the gather under the first's forward (Megatron's distributed
    optimizer, MLM-ARGS --overlap-grad-reduce / --overlap-param-gather), as far as
    reduce_hidden and gather_hidden say."""
    bucket_elements: float = 40e6
    """Elements per bucket of a once-per-step reduction and gather (the message the bus bandwidth
    ramps with, and one collective's latency each): Megatron's --ddp-bucket-size default, at least
    40 M (MLM-DDP); DeepSpeed's reduce_bucket_size and allgather_bucket_size, 5e8 (DS
    config-json.md, zero/config.py)."""
    bucket_per_rank: float = 0.0
    """Elements per data-parallel rank a bucket holds at least: Megatron's default bucket is
    max(40 M, 1 M x the DP size), "to ensure that chunks used in NCCL ring-reduce implementations
    are large enough to remain bandwidth-bound rather than latency-bound" (MLM-DDP,
    DistributedDataParallel.__init__); 0 where the framework's bucket is fixed."""
    reduce_hidden: bool = True
    """Whether the once-per-step gradient reduction runs under the backward (Megatron's
    --overlap-grad-reduce; DeepSpeed's overlap_comm under ZeRO-1 and 2 without a pipeline); False:
    it runs after the backward, exposed (DeepSpeed ZeRO-0's engine all-reduce, its pipeline
    engine's reduce_grads step)."""
    gather_hidden: bool = True
    """Whether the once-per-step parameter all-gather runs under the next forward (Megatron's
    --overlap-param-gather); False: inside the optimizer step, exposed (DeepSpeed ZeRO-1 and 2,
    stage_1_and_2.py step: all_gather_dp_groups)."""
    reduce_per_micro_batch: bool = False
    """The once-per-step kind whose gradients are reduced on every micro-batch, each under its own
    backward (DeepSpeed ZeRO-2: partitioned gradients, engine.allreduce_gradients "ZeRO stage >= 2
    communicates during non gradient accumulation boundaries as well")."""


class Link(NamedTuple):
    bandwidth: float
    """Bytes/s, one way, at the link's top efficiency."""
    half: float
    """Message bytes at which a collective reaches half of it."""
    latency: float
    """Seconds before a point-to-point or all-to-all operation moves its first byte."""
    name: str


def links(gpu: GPU) -> tuple[Link, Link]:
    """(scale-up, scale-out) of one GPU: the one-way NVLink figure (half the catalog's
    bidirectional headline: H100's 900 GB/s, gpus.yaml S1, is 450 GB/s each way) and the GPU's
    NIC, each at its bus efficiency."""
    return _links(gpu.scaleup_gbps, gpu.scaleup_efficiency, gpu.scaleout_gbps, gpu.scaleout_efficiency,
                  gpu.scaleup_domain)


@functools.lru_cache(maxsize=256)
def _links(scaleup_gbps: float | None, scaleup_efficiency: float | None, scaleout_gbps: float | None,
           scaleout_efficiency: float | None, domain: int) -> tuple[Link, Link]:
    up = (scaleup_gbps or 0) / 2 * 1e9 * (scaleup_efficiency or SCALEUP_EFFICIENCY)
    out = (scaleout_gbps or DEFAULT_SCALEOUT_GBPS) * 1e9 * (scaleout_efficiency or SCALEOUT_EFFICIENCY)
    if domain <= 1 or up <= 0:
        up = out
    return (Link(up, SCALEUP_HALF_BYTES, SCALEUP_LATENCY, "nvlink"),
            Link(out, SCALEOUT_HALF_BYTES, SCALEOUT_LATENCY, "scale-out"))


def _rate(link: Link, message: float) -> float:
    """Bus bandwidth a collective of `message` bytes reaches on `link` (nccl-tests-like ramp)."""
    return link.bandwidth * message / (message + link.half)


class _Domain(NamedTuple):
    """What collective() reads of a GPU: its NVLink domain (a hashable stand-in for the cache)."""

    scaleup_domain: int


def collective(gpu: GPU | _Domain, size: int, stride: int, message: float, per_rank: float,
               pair: tuple[Link, Link] | None = None) -> tuple[float, str]:
    """(seconds, link) of a reduce-scatter or all-gather whose ring moves `per_rank` bytes in and
    out of each GPU, over a group of `size` ranks `stride` apart in the rank order. Inside the
    NVLink domain it runs at the NVLink bus bandwidth; a group that spans domains runs
    hierarchically, its share that leaves a domain over the NICs of the group's ranks there
    (SB "Cross-node collectives": T = max(S / W_GPU, S / W_node)). `pair` is
    links(gpu) where the caller has it."""
    if size <= 1 or per_rank <= 0:
        return 0.0, "none"
    if pair is None:
        assert isinstance(gpu, GPU), "a _Domain has no links: _dp_part passes pair"
        pair = links(gpu)
    up, out = pair
    domain = gpu.scaleup_domain
    if size * stride <= domain and domain % (size * stride) == 0:
        return per_rank / _rate(up, message), up.name
    local = max(1, min(size, domain // stride)) if stride <= domain else 1
    inside = per_rank * (local - 1) / size / _rate(up, message) if local > 1 else 0.0
    outside = per_rank * (size - local) / size / (local * _rate(out, message / local))
    return max(inside, outside), out.name


def all_to_all(gpu: GPU, size: int, stride: int, per_rank: float,
               crossing: Callable[[int], float] | None = None) -> tuple[float, str]:
    """(seconds, link) of an all-to-all sending `per_rank` bytes out of each GPU, spread evenly
    over the group: the share to ranks in its own domain over NVLink, the rest over its NIC
    (SB: spanning M nodes, about W_node / M each, 50 GB/s per GPU on H100-IB).
    `crossing`, where given, maps the number of domains the group spans to the share of
    `per_rank` that leaves the domain instead (a hierarchical dispatch, which then forwards every
    copy over NVLink)."""
    if size <= 1 or per_rank <= 0:
        return 0.0, "none"
    up, out = links(gpu)
    domain = gpu.scaleup_domain
    local = max(1, min(size, domain // stride)) if stride <= domain else 1
    if local < size and crossing is not None and stride <= domain and size % local == 0:
        inside = up.latency + per_rank * (size - 1) / size / up.bandwidth if local > 1 else 0.0
        return max(inside, out.latency + per_rank * crossing(size // local) / out.bandwidth), out.name
    inside = up.latency + per_rank * (local - 1) / size / up.bandwidth if local > 1 else 0.0
    outside = out.latency + per_rank * (size - local) / size / out.bandwidth if local < size else 0.0
    return max(inside, outside), (up.name if local == size else out.name)


def remote_domains(a: Architecture, domains: int) -> float:
    """Expected number of other NVLink domains one token's routed experts are in, with the EP
    group's experts spread contiguously over `domains` domains and routing uniform (Bridge's
    benchmarks force-balance it, MB-PERF): each other domain holds none of the token's k
    of E experts with probability C(E - E/D, k) / C(E, k). Under group-limited routing whose groups
    lie whole in domains (DeepSeek-V3: 8 groups, 4 per token, EP 64 over 8 nodes) the token's
    experts come from g of G groups, so a domain is missed with probability C(G - G/D, g) / C(G, g),
    and a token reaches at most g domains (DSV3 Sec. 3.2.2: "at most 4 nodes")."""
    d = domains
    if d <= 1:
        return 0.0
    groups, chosen = a.expert_groups, a.expert_group_topk
    if groups and chosen and groups % d == 0:
        total, draws = groups, chosen
    else:
        total, draws = a.experts, a.top_k
    return (d - 1) * (1 - math.comb(total - total // d, draws) / math.comb(total, draws))


def send(gpu: GPU, span: int, message: float, pair: tuple[Link, Link] | None = None) -> tuple[float, str]:
    """(seconds, link) of one point-to-point message between ranks `span` apart in the rank
    order: over NVLink when both are in one domain, else over the NIC (`pair`: links(gpu), where
    the caller has it)."""
    up, out = links(gpu) if pair is None else pair
    link = up if span < gpu.scaleup_domain else out
    return link.latency + message / link.bandwidth, link.name


@functools.lru_cache(maxsize=65536)
def _dp_part(domain: int, pair: tuple[Link, Link], traffic: DpTraffic, params: float, size: int, stride: int,
             n: int) -> tuple[float, float, str]:
    """(reduce-scatter, all-gather, link) seconds of one data-parallel group's traffic for `params`
    of the rank's parameters over `size` ranks `stride` apart in an NVLink domain of `domain`
    (apsi.model.steptail.tail): each bucket's bytes at the bus bandwidth its message reaches
    (collective()) plus NCCL's latency for its collective (nccl_latency). Cached: the search's
    floors ask it for the same groups over and over."""
    if size <= 1 or params <= 0:
        return 0.0, 0.0, ""
    gpu = _Domain(domain)
    grad = params * traffic.grad_bytes
    # Buckets: the framework's (DpTraffic.bucket_elements, grown with the group where
    # bucket_per_rank says), or one layer under FSDP and ZeRO-3.
    if traffic.per_micro_batch:
        buckets = max(1, n)
        elements = params / buckets
    else:
        elements = min(params, max(traffic.bucket_elements, traffic.bucket_per_rank * size))
        buckets = math.ceil(params / elements - 1e-9)
    per_node = max(1, min(size, domain // stride)) if stride <= domain else 1
    rs, link = collective(gpu, size, stride, elements * traffic.grad_bytes,
                          grad * (2 if traffic.all_reduce else 1) * (size - 1) / size, pair)
    rs += buckets * nccl_latency(size, per_node, traffic.all_reduce)
    gather = params * traffic.gather_bytes
    if not gather:
        return rs, 0.0, link
    passes = 2 if traffic.per_micro_batch else 1
    ag = collective(gpu, size, stride, elements * traffic.gather_bytes, gather * passes * (size - 1) / size, pair)[0]
    return rs, ag + passes * buckets * nccl_latency(size, per_node), link
