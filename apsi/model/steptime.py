"""Step time of one layout from its compute and its communication over the real links.

Owns a roofline step model (derived; structure from CAL and SB): per micro-batch, each pipeline
rank's layers take their FLOPs over the GPU's peak times an achieved GEMM efficiency (by
precision and GEMM size) plus their memory-bound work over HBM, plus the exposed TP, CP and EP
communication; the schedule runs m + (p - 1) / v of the slowest rank's micro-batches (1F1B and
interleaved, Narayanan et al. 2021; UPB, L3); then the data-parallel traffic the framework does
not hide, the pipeline's fill and drain messages, and the optimizer step. Every collective moves
its ring bytes (NCCLT, SB, UPB) at an achievable bus bandwidth (DGXC, SB, MLE) over the link its
group uses: the NVLink domain while the group fits in it, the scale-out network (the GPU's own
NIC) beyond.

Pure functions: numbers, an Architecture and a GPU in, seconds out. How a framework reduces and
gathers its states (DP traffic) is data it passes in (DpTraffic); no framework names here. The
two GEMM efficiencies, the attention core's and the EP overlap's share are its fitted constants
(with torchtitan's KERNEL_EFFICIENCY; benchmarks/calibrate.py, on the benchmark tables of
MB-PERF and TT-BENCH only; docs/validation.md lists every point and the residuals). Source
keys: docs/sources.md.
"""

from __future__ import annotations

import functools
import math
from typing import Callable, NamedTuple

from apsi.catalog import GPU
from apsi.model.architecture import Architecture
from apsi.model.counting import attention_flops_per_layer

GEMM_EFFICIENCY: dict[str, float] = {"bf16": 0.615, "fp8": 0.58}
"""Achieved share of the dense peak of a large GEMM in training under Megatron's kernels, by the
precision the linear layers run in (fp16 as bf16). Fitted by benchmarks/calibrate.py on the
benchmark tables of Megatron-Bridge and torchtitan (MB-PERF, TT-BENCH), with torchtitan's
KERNEL_EFFICIENCY, ATTENTION_EFFICIENCY and EP_OVERLAP_EFFICIENCY: the time model's only fitted
constants (median error 5.8% over 21 rows). FP8 reaches 0.58 of its doubled peak, 1.9x bf16's 0.615 in FLOP/s
(quantisation and scaling cost it the rest)."""

ATTENTION_EFFICIENCY = 0.27
"""Achieved share of the bf16 dense peak of the attention core (FlashAttention; its FLOPs counted
causally, forward and backward, as attention_flops_per_layer does), under Megatron's kernels like
GEMM_EFFICIENCY: a framework's KERNEL_EFFICIENCY scales both. Fitted by benchmarks/calibrate.py on
TT-BENCH's long-context rows (Tables 2 and 6: 32K to 256K tokens, context parallel), the only
benchmark rows whose time is mostly attention; torchtitan's attention there is 0.27 x 0.64 = 17%
of the peak. For scale, FlashAttention-2's forward reaches 35% of H100's peak and
FlashAttention-3's 75% (Shah et al. 2024, arXiv 2407.08608, abstract); a training step adds the
slower backward and, under context parallelism, the ring's chunked kernels. Before this constant
the attention core ran at the GEMMs' efficiency, and apsi was 22% (32K) to 99% (256K) fast on
those rows."""

CALIBRATION_SPREAD = (-0.069, 0.262)
"""The smallest and largest relative error of the predicted step time on the calibration set
(benchmarks/calibrate.py): a plan's days_low and days_high are its days times 1 + each."""

GEMM_SIZE_CURVE: tuple[tuple[float, float], ...] = ((1e9, 0.60 / 0.95), (16e9, 0.90 / 0.95), (128e9, 1.0))
"""Efficiency of a GEMM of so many FLOPs relative to a large one: Calculon's H100 table (0.1 below
1 GFLOP, 0.6 from 1, 0.9 from 16, 0.95 from 128 GFLOP; CAL systems/h100_80g_nvl8.json),
interpolated in log size between its points and divided by its top figure."""
SMALL_GEMM = 0.10 / 0.95
"""Calculon's figure for GEMMs under 1 GFLOP, relative to a large one."""

HBM_EFFICIENCY = 0.8
"""Share of the HBM bandwidth memory-bound kernels (norms, elementwise, casts, the optimizer)
reach: the "~80 % expectation" for measured over peak bandwidth (MLE)."""

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

TP_OVERLAP_SM_SHARE = 16 / 132
"""With TP communication overlap (Transformer Engine userbuffers) the collectives run on 16 of
H100's 132 SMs by default (MB-GUIDE "Communication Overlaps"; MLM-ARGS): the GEMMs lose that share."""

EP_OVERLAP_EFFICIENCY = 0.04
"""Under Megatron's EP A2A overlap, the share of a layer's compute of the other micro-batch that
actually hides its all-to-alls: fitted by benchmarks/calibrate.py on the Megatron-Bridge rows
that ran with it (Qwen3-235B-A22B on H100 and DeepSeek-V3 on GB200 set moe_a2a_overlap=True).
The fit is 0.04: with none of the all-to-all hidden apsi is 11% and 3% below them, and full
hiding (1) would put them 51% and 19% above their published throughput. So apsi credits the
overlap with little until a benchmark shows more gain."""

OPTIMIZER_BYTES_PER_PARAM = 30
"""HBM traffic of one Adam step per parameter of the rank's optimizer shard: read the fp32 master
weight, gradient and two moments (16 B), write the master weight and moments (12 B) and the bf16
weight (2 B)."""


class DpTraffic(NamedTuple):
    """How a framework reduces gradients and gathers parameters over its data-parallel group
    (UPB, MB-GUIDE, MLM-ARGS), per parameter of the rank."""

    grad_bytes: float
    """Bytes per gradient element in the reduction (4: fp32, 2: bf16)."""
    gather_bytes: float
    """Bytes per parameter the all-gather moves (2: bf16, 1: FP8 param gather; 0: none)."""
    all_reduce: bool = False
    """Gradients all-reduced (DDP, ZeRO-0) instead of reduce-scattered."""
    per_micro_batch: bool = False
    """Gathered twice (forward and backward) and reduced on every micro-batch, layer by layer,
    prefetched under its compute (FSDP / ZeRO-3 resharding after forward); else once per step,
    the reduction under the last micro-batch's backward and the gather under the first's forward
    (Megatron's distributed optimizer, MLM-ARGS --overlap-grad-reduce / --overlap-param-gather)."""


class StepTime(NamedTuple):
    """One training step of a layout, seconds, by part (the parts add up to `step`)."""

    compute: float
    """The slowest rank's per-micro-batch compute (GEMMs, attention, memory-bound work) x m."""
    tp: float
    """Exposed tensor-parallel collectives, over the step."""
    cp: float
    """Exposed context-parallel K/V exchange (what attention does not hide)."""
    ep: float
    """Expert-parallel all-to-all."""
    bubble: float
    """The pipeline's idle time: (p - 1) / v of the slowest rank's micro-batch."""
    pp: float
    """Point-to-point messages of the pipeline's fill and drain."""
    dp: float
    """Exposed data-parallel gradient reduction and parameter gathers."""
    optimizer: float
    step: float
    model_flops: float
    """Model FLOPs of the step on one GPU, on average (no recomputation)."""
    hardware_flops: float
    """The same with recomputation."""
    links: dict
    """Which link each kind of traffic uses: "nvlink" or "scale-out"."""


def gemm_factor(flops: float) -> float:
    """GEMM_SIZE_CURVE at a GEMM of `flops`: Calculon's efficiency ramp relative to a large GEMM."""
    if flops < GEMM_SIZE_CURVE[0][0]:
        return SMALL_GEMM
    for (x0, y0), (x1, y1) in zip(GEMM_SIZE_CURVE, GEMM_SIZE_CURVE[1:]):
        if flops < x1:
            return y0 + (y1 - y0) * math.log(flops / x0) / math.log(x1 / x0)
    return 1.0


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
    up, out = pair or links(gpu)  # type: ignore[arg-type]  # _dp_part, with a _Domain, passes pair
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


def send(gpu: GPU, span: int, message: float) -> tuple[float, str]:
    """(seconds, link) of one point-to-point message between ranks `span` apart in the rank
    order: over NVLink when both are in one domain, else over the NIC."""
    up, out = links(gpu)
    link = up if span < gpu.scaleup_domain else out
    return link.latency + message / link.bandwidth, link.name


def _layer_bytes(a: Architecture, moe: bool, tokens: float, fp8: bool) -> float:
    """HBM bytes one layer's memory-bound kernels move in its forward, for `tokens` tokens (bf16):
    two RMSNorms (read and write h), two residual adds (read 2 h, write h), RoPE on Q and K, the
    gated activation (read 2 f, write f), the MoE permutation of k copies there and back and the
    routed experts' activations; under FP8 the cast of each linear input (read 2, write 1 byte)."""
    h = a.width
    q, kv = a.heads * a.qk_head_dim, a.kv_heads * a.qk_head_dim
    per = 4 * h * 2 + 6 * h * 2 + 4 * (q + kv)
    if moe:
        per += 8 * a.top_k * h + 6 * (a.top_k * a.expert_ffn + a.shared_experts * a.shared_expert_ffn)
        casts = 3 * (2 * h + q + a.top_k * (h + a.expert_ffn))
    else:
        per += 6 * a.ffn
        casts = 3 * (2 * h + q + a.ffn)
    return tokens * (per + (casts if fp8 else 0))


class Shape(NamedTuple):
    """What the time model needs of a layout (the framework's knobs resolved)."""

    tp: int
    pp: int
    vpp: int
    cp: int
    ep: int
    etp: int
    dp: int
    micro_batch: int
    micro_batches: int
    seq: int
    rank_layers: tuple[int, ...]
    """Decoder layers on each pipeline rank."""
    recompute: str
    modules: tuple[str, ...]
    precision: str
    tp_overlap: bool = False
    ep_overlap: bool = False
    """Megatron's EP A2A overlap (--overlap-moe-expert-parallel-comm --delay-wgrad-compute): each
    MoE layer's all-to-alls run under the adjacent micro-batch's compute (MLM-MOE "EP A2A
    Overlap": "merging FWD-BWD passes of adjacent microbatches"), the share EP_OVERLAP_EFFICIENCY
    of it hiding them; where the layout allows it (apsi.frameworks.timing.shape)."""
    efficiency: float = 1.0
    """The framework's compute rate relative to GEMM_EFFICIENCY's (Megatron's kernels)."""
    core_recomputed: bool = True
    """Whether selective recomputation with core_attn re-runs the attention core (Megatron's; not
    torchtitan's per-op policy, which keeps the SDPA outputs)."""
    hierarchical_dispatch: bool = False
    """The EP dispatcher sends each token over the scale-out network once per other NVLink domain
    its experts are in, and fans it out there over NVLink (Megatron's flex dispatcher with DeepEP
    or HybridEP; DeepSeek-V3's own, DSV3 Sec. 3.2.2); otherwise every token copy is its own
    message (NCCL all-to-all)."""

    def at(self, dp: int, micro_batches: int) -> "Shape":
        """This shape with another dp and micro-batches per replica (faster than _replace, which
        the search's floors would call thousands of times: fields 6 and 8)."""
        return Shape._make(self[:6] + (dp, self.micro_batch, micro_batches) + self[9:])


class Compute(NamedTuple):
    """Per micro-batch, one GPU: a decoder layer's seconds (GEMMs, attention core, memory-bound
    work) and the output layer's, with the HBM rate the optimizer step also runs at."""

    layer: float
    gemm: float
    core: float
    head: float
    hbm: float


def compute(a: Architecture, gpu: GPU, x: Shape, hw_tok: float) -> Compute:
    """The compute of one micro-batch on one GPU, layer by layer (derived; CAL): the
    linear layers' FLOPs (head included) over the peak of the run's precision x GEMM_EFFICIENCY x
    the size of the forward's average GEMM, the attention core in bf16 (FlashAttention; DSV3
    3.3.1 keeps attention in bf16 under FP8 too), and the memory-bound kernels over HBM."""
    tp, cp, ep = x.tp, x.cp, x.ep
    layers = a.layers + a.mtp_layers
    tokens = x.seq * x.micro_batch
    fp8 = x.precision == "fp8"
    peak = gpu.peak_tflops(x.precision) * 1e12
    bf16_peak = (gpu.bf16_tflops or gpu.fp16_tflops or gpu.peak_tflops(x.precision)) * 1e12
    core = attention_flops_per_layer(a.heads, a.qk_head_dim, a.v_dim, x.seq, "causal")
    recomputes_core = x.recompute == "full" or (x.recompute == "selective" and "core_attn" in x.modules
                                                 and x.core_recomputed)
    core_tok = core * (4 / 3 if recomputes_core else 1)
    head_tok = 6 * a.width * a.vocab
    linear_tok = max(0.0, hw_tok - layers * core_tok - head_tok)
    per_layer_linear = linear_tok / layers * tokens / (tp * cp)
    per_layer_core = core_tok * tokens / (tp * cp)
    gemms = 4 + (2 * a.experts / ep if a.moe else 0)
    linear_rate = peak * GEMM_EFFICIENCY["fp8" if fp8 else "bf16"] * gemm_factor(per_layer_linear / 3 / gemms) * x.efficiency
    attn_rate = bf16_peak * ATTENTION_EFFICIENCY * gemm_factor(per_layer_core / 3) * x.efficiency
    if x.tp_overlap and tp > 1:
        linear_rate *= 1 - TP_OVERLAP_SM_SHARE
    hbm = (gpu.hbm_tbps or 1.0) * 1e12 * HBM_EFFICIENCY
    passes = 4 if x.recompute == "full" else 3  # forward, backward at twice its traffic, recomputed forward
    moe_share = a.moe_layers / a.layers if a.moe else 0.0
    mem_layer = (moe_share * _layer_bytes(a, True, tokens / (tp * cp), fp8)
                 + (1 - moe_share) * _layer_bytes(a, False, tokens / (tp * cp), fp8)) * passes / hbm
    gemm_layer = per_layer_linear / linear_rate
    core_layer = per_layer_core / attn_rate
    head = head_tok * tokens / (tp * cp) / linear_rate
    return Compute(gemm_layer + core_layer + mem_layer, gemm_layer, core_layer, head, hbm)


class Layer(NamedTuple):
    """One decoder layer on one GPU per micro-batch, seconds, and the output layer's compute."""

    compute: float
    tp: float
    ep: float
    cp: float
    head: float
    gemm: float
    hbm: float
    links: dict

    @property
    def total(self) -> float:
        return self.compute + self.tp + self.ep + self.cp


def layer(a: Architecture, gpu: GPU, x: Shape, hw_tok: float) -> Layer:
    """A decoder layer's micro-batch (compute() and its exposed TP, expert-TP, EP and CP traffic),
    averaged over dense and MoE layers: what does not depend on dp or the split."""
    tp, cp, ep, etp = x.tp, x.cp, x.ep, x.etp
    tokens = x.seq * x.micro_batch
    c = compute(a, gpu, x, hw_tok)
    moe_share = a.moe_layers / a.layers if a.moe else 0.0
    recomputed = x.recompute == "full" or (x.recompute == "selective" and "moe" in x.modules)
    used: dict[str, str] = {}
    # TP (with sequence parallelism): 2 all-gathers and 2 reduce-scatters of the s b h activation
    # per layer forward, the same backward, and the forward's again when the layer is recomputed
    # (UPB, KOR). A MoE layer keeps attention's half; its experts talk over their own
    # expert-TP group below.
    tp_layer = 0.0
    count = 12 if x.recompute == "full" else 8
    if tp > 1:
        act = 2 * tokens / cp * a.width
        per, link = collective(gpu, tp, 1, act, act * (tp - 1) / tp)
        used["tp"] = link
        tp_layer = per * (moe_share * count / 2 + (1 - moe_share) * count)
    # Expert TP: the etp ranks sharing an expert gather their T k routed tokens before it and
    # reduce-scatter its output, forward and backward (Megatron's ETP group, MLM-PS).
    if a.moe and etp > 1:
        routed = 2 * tokens / (tp * cp) * a.top_k * a.width * etp
        per, link = collective(gpu, etp, 1, routed, routed * (etp - 1) / etp)
        used["etp"] = link
        tp_layer += moe_share * per * (6 if recomputed else 4)
    if x.tp_overlap and tp_layer:
        tp_layer = max(0.0, tp_layer - c.gemm)
    # EP: dispatch and combine forward and backward (4 all-to-alls; 6 when recomputed), each moving
    # the rank's T k token copies of h bf16 values, T = s b / (t c) (derived from MLM-MOE). A
    # hierarchical dispatch sends each token across the scale-out network once per other domain
    # its experts are in (remote_domains), not once per copy (DSV3 Sec. 3.2.2).
    ep_layer = 0.0
    if a.moe and ep > 1:
        out = tokens / (tp * cp) * a.top_k * a.width * 2 * (ep - 1) / ep
        crossing = ((lambda domains: remote_domains(a, domains) / (a.top_k * (ep - 1) / ep))
                    if x.hierarchical_dispatch else None)
        per, link = all_to_all(gpu, ep, etp, out, crossing)
        used["ep"] = link
        ep_layer = moe_share * per * (6 if recomputed else 4)
        if x.ep_overlap:
            # Hidden under the share EP_OVERLAP_EFFICIENCY of a MoE layer's compute of the other
            # micro-batch, the rest exposed.
            ep_layer = moe_share * max(0.0, per * (6 if recomputed else 4) - EP_OVERLAP_EFFICIENCY * c.layer)
    # CP ring: c - 1 hops of this rank's K and V chunk forward, twice that backward (K, V and their
    # gradients), hidden under the attention core (MLM-DOCS CP; MB-GUIDE).
    cp_layer = 0.0
    if cp > 1:
        kv_heads = a.heads if a.mla else a.kv_heads
        chunk = 2 * tokens / cp * kv_heads * (a.qk_head_dim + a.v_dim) / min(tp, kv_heads)
        hop, link = send(gpu, tp * (cp - 1), chunk)  # the ring's longest hop
        used["cp"] = link
        cp_layer = max(0.0, 3 * (cp - 1) * hop - c.core)
    return Layer(c.layer, tp_layer, ep_layer, cp_layer, c.head, c.gemm, c.hbm, used)


@functools.lru_cache(maxsize=65536)
def _dp_part(domain: int, pair: tuple[Link, Link], traffic: DpTraffic, params: float, size: int, stride: int,
             n: int) -> tuple[float, float, str]:
    """(reduce-scatter, all-gather, link) seconds of one data-parallel group's traffic for `params`
    of the rank's parameters over `size` ranks `stride` apart in an NVLink domain of `domain`
    (tail()). Cached: the search's floors ask it for the same groups over and over."""
    if size <= 1 or params <= 0:
        return 0.0, 0.0, ""
    gpu = _Domain(domain)
    grad = params * traffic.grad_bytes
    # Buckets: Megatron's default 40 M elements (MLM-ARGS --ddp-bucket-size), or one layer under FSDP.
    bucket = min(grad, 40e6 * traffic.grad_bytes) if not traffic.per_micro_batch else grad / max(1, n)
    rs, link = collective(gpu, size, stride, bucket, grad * (2 if traffic.all_reduce else 1) * (size - 1) / size, pair)
    gather = params * traffic.gather_bytes
    if not gather:
        return rs, 0.0, link
    passes = 2 if traffic.per_micro_batch else 1
    return rs, collective(gpu, size, stride, bucket, gather * passes * (size - 1) / size, pair)[0], link


def tail(a: Architecture, gpu: GPU, x: Shape, dense_params: float, expert_params: float, traffic: DpTraffic,
         hbm: float, n: int, compute_mb: float, used: dict | None = None) -> tuple[float, float, float]:
    """(PP fill and drain, exposed DP traffic, optimizer step) seconds of a step whose slowest rank
    holds `n` layers (MTP blocks counted) and computes `compute_mb` seconds per micro-batch; the
    links each crosses go into `used`. Rises with n and falls with compute_mb (the collectives'
    bytes grow with the rank's parameters, and the compute hides them), which the search's
    floors rely on (apsi.frameworks.timing.tail_floor)."""
    tp, pp, cp, ep, etp, dp = x.tp, x.pp, x.cp, x.ep, x.etp, x.dp
    pair = links(gpu)
    layers = a.layers + a.mtp_layers
    # PP: the fill and the drain each cross p - 1 boundaries with one s b h / (c t) message; the
    # steady state overlaps them (MB-GUIDE; MLM-SCHED).
    pp_time = 0.0
    if pp > 1:
        message = 2 * x.seq * x.micro_batch / (cp * tp) * a.width
        hop, link = send(gpu, tp * cp * dp, message)
        if used is not None:
            used["pp"] = link
        pp_time = 2 * (pp - 1) * hop

    # DP: the rank's parameters (its layers' share of the dense ones over tp, of the experts over
    # ep x etp) reduced over dp x cp (experts over their expert-data-parallel group).
    share = n / layers
    dense = dense_params * share / tp
    experts = expert_params * share / (ep * etp)
    ddp = dp * cp
    edp = max(1, tp * cp * dp // (ep * etp))
    rs_d, ag_d, link = _dp_part(gpu.scaleup_domain, pair, traffic, dense, ddp, tp, n)
    rs_e, ag_e, link_e = _dp_part(gpu.scaleup_domain, pair, traffic, experts, edp, ep * etp, n)
    if used is not None and (link or link_e):
        used["dp"] = link_e or link
    rs, ag = rs_d + rs_e, ag_d + ag_e
    if traffic.per_micro_batch:
        dp_time = x.micro_batches * max(0.0, rs + ag - compute_mb)
    else:
        dp_time = max(0.0, rs - compute_mb * 2 / 3) + max(0.0, ag - compute_mb / 3)
    state_share = dense / ddp + experts / edp
    optimizer = state_share * OPTIMIZER_BYTES_PER_PARAM / hbm
    return pp_time, dp_time, optimizer


def step_time(a: Architecture, gpu: GPU, x: Shape, flops_per_token: tuple[int, int], dense_params: float,
              expert_params: float, traffic: DpTraffic, one: Layer | None = None) -> StepTime:
    """The step of layout `x` on `gpu` (derived; CAL, SB). `flops_per_token` is (model, hardware)
    training FLOPs of one token as the GPUs execute them, the attention core causal
    (apsi.frameworks.timing.flops_per_token without and with the recomputation); `dense_params`
    and `expert_params` the parameters outside and inside the routed experts, over the whole model
    (the ranks' shares follow the split). `one` is layer()'s answer for x when the caller has it
    (it does not depend on dp, m or the split)."""
    tp, pp, vpp, cp, dp, mb = x.tp, x.pp, x.vpp, x.cp, x.dp, x.micro_batch
    tokens = x.seq * mb
    model_tok, hw_tok = flops_per_token
    one = layer(a, gpu, x, hw_tok) if one is None else one
    compute_layer, tp_layer, ep_layer, cp_layer, head_time = one.compute, one.tp, one.ep, one.cp, one.head
    used = dict(one.links)

    ranks = list(x.rank_layers)
    ranks[-1] += a.mtp_layers  # the MTP blocks run after the last stage's layers
    per_rank = [n * (compute_layer + tp_layer + ep_layer + cp_layer) + (head_time if r == pp - 1 else 0.0)
                for r, n in enumerate(ranks)]
    slow = max(range(pp), key=lambda r: per_rank[r])
    t_mb = per_rank[slow]
    n = ranks[slow]
    m = x.micro_batches
    compute_mb = n * compute_layer + (head_time if slow == pp - 1 else 0.0)
    pp_time, dp_time, optimizer = tail(a, gpu, x, dense_params, expert_params, traffic, one.hbm, n, compute_mb, used)

    step = (m + (pp - 1) / vpp) * t_mb + pp_time + dp_time + optimizer
    gpus = tp * pp * cp * dp
    batch_tokens = tokens * m * dp
    return StepTime(
        compute=m * compute_mb, tp=m * n * tp_layer, cp=m * n * cp_layer, ep=m * n * ep_layer,
        bubble=(pp - 1) / vpp * t_mb,
        pp=pp_time, dp=dp_time, optimizer=optimizer, step=step,
        model_flops=model_tok * batch_tokens / gpus, hardware_flops=hw_tok * batch_tokens / gpus, links=used)
