"""Step time of one layout from its compute and its communication over the real links.

Owns a roofline step model (derived; structure from CAL and SB): per micro-batch, each pipeline
rank's layers take their FLOPs over the GPU's peak times an achieved GEMM efficiency (by
precision and GEMM size) plus their memory-bound work over HBM, plus the exposed TP, CP and EP
communication; the schedule runs m + (p - 1) / v of the slowest rank's micro-batches (1F1B and
interleaved, Narayanan et al. 2021; UPB, L3); then the data-parallel traffic the framework does
not hide, the pipeline's fill and drain messages, and the optimizer step (the step's tail,
apsi.model.steptail). What each collective costs over the link its group uses is
apsi.model.collectives' (NCCLT, SB, UPB, DGXC, MLE); this module counts the collectives and the
bytes they move.

Pure functions: numbers, an Architecture and a GPU in, seconds out. How a framework reduces and
gathers its states (DP traffic) is data it passes in (DpTraffic); no framework names here. The
two GEMM efficiencies, the attention core's and the EP overlap's share are its fitted constants
(with Ampere's own GEMM efficiency and torchtitan's and DeepSpeed's KERNEL_EFFICIENCY;
benchmarks/calibrate.py, on the benchmark tables of MB-PERF, TT-BENCH, MLM-SC21, MLM-DOCS and
MDS-REBASE only; docs/validation.md lists every point and the residuals). Source keys: docs/sources.md.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from apsi.catalog import GPU
from apsi.model.architecture import Architecture
# The links and collectives (apsi.model.collectives); DpTraffic stays importable from here, where
# the frameworks import it.
from apsi.model.collectives import DpTraffic, all_to_all, collective, remote_domains, send
from apsi.model.counting import attention_flops_per_layer
from apsi.model.steptail import tail

GEMM_EFFICIENCY: dict[str, float] = {"bf16": 0.58, "fp8": 0.57}
"""Achieved share of the dense peak of a large GEMM in training under Megatron's kernels, by the
precision the linear layers run in (fp16 as bf16), on every GPU architecture without figures of
its own (ARCHITECTURE_GEMM_EFFICIENCY; gemm_efficiency() chooses): Hopper's. Fitted by
benchmarks/calibrate.py on Megatron's Hopper tables: FP8 on Megatron-Bridge's H100 rows (MB-PERF),
bf16 on Megatron-Core's GPT-3 175B on 96 H100 (MLM-DOCS, 47% MFU), with Ampere's and Blackwell's
own (ARCHITECTURE_GEMM_EFFICIENCY), torchtitan's and DeepSpeed's KERNEL_EFFICIENCY,
ATTENTION_EFFICIENCY and EP_OVERLAP_EFFICIENCY: the time model's only fitted constants
(docs/validation.md). FP8 reaches 0.57 of its doubled peak, 2.0x bf16's 0.58 in FLOP/s. Before
Megatron's own bf16 row, bf16 was inferred from torchtitan's bf16 rows through torchtitan's FP8
ratio to Megatron (0.61): Megatron's 2024 bf16 runs read up to 11% fast."""

ARCHITECTURE_GEMM_EFFICIENCY: dict[str, dict[str, float]] = {"ampere": {"bf16": 0.62}, "blackwell": {"fp8": 0.59}}
"""GEMM_EFFICIENCY of a GPU architecture with benchmark rows of its own (the catalog's
GPU.architecture), by precision; every other architecture and precision, and a GPU that names
none, takes GEMM_EFFICIENCY (fitted on Hopper rows). Each is fitted by benchmarks/calibrate.py on
its own generation's rows only:

- Ampere's bf16 (fp16 alike) on the ten rows of Megatron-LM's A100 weak-scaling table (MLM-SC21:
  Narayanan et al. 2021, arXiv 2104.04473, Table 1, and the Megatron-LM README's table; GPT 1.7B
  to 1T on 32 to 3,072 A100 at 135 to 163 TFLOP/s per GPU, each layout from the repository's
  examples/sc21/run_table_1.sh). Before it they were priced at Hopper's 0.61 of then: median error
  4.2%, against 4.0% at 0.62 (the A100's large GEMMs reach about the share of their peak H100's
  do); the residual runs from 25% fast at 1.7B to 10% slow at 1T (most likely the unfused
  2021-era attention, no FlashAttention, that weighs most on the narrow rows; docs/validation.md).
- Blackwell's FP8 (MXFP8 under Bridge's GB200 recipes) on Megatron-Bridge's two GB200 rows
  (MB-PERF: Llama 3.1 405B and DeepSeek-V3 on 256 GB200). Fitted with Hopper's rows as one
  constant, both read 0.58; each generation on its own rows, Hopper's four H100 rows choose 0.57
  and these two 0.59. Blackwell's bf16 has no Megatron row and takes Hopper's."""


def gemm_efficiency(gpu: GPU, precision: str) -> float:
    """The achieved share of the dense peak of a large GEMM under Megatron's kernels on `gpu` in
    `precision` (fp8, or bf16 and fp16 alike): its architecture's own (ARCHITECTURE_GEMM_EFFICIENCY)
    where it has one, else GEMM_EFFICIENCY. The one lookup every path uses (compute(), hence the
    search's layer cache, floors and bounds, and benchmarks/calibrate.py)."""
    key = "fp8" if precision == "fp8" else "bf16"
    own = ARCHITECTURE_GEMM_EFFICIENCY.get(gpu.architecture) if gpu.architecture else None
    return own[key] if own is not None and key in own else GEMM_EFFICIENCY[key]


ATTENTION_EFFICIENCY = 0.26
"""Achieved share of the bf16 dense peak of the attention core (FlashAttention; its FLOPs counted
causally, forward and backward, as attention_flops_per_layer does), under Megatron's kernels like
GEMM_EFFICIENCY: a framework's KERNEL_EFFICIENCY scales both. Fitted by benchmarks/calibrate.py on
TT-BENCH's long-context rows (Tables 2 and 6: 32K to 256K tokens, context parallel), the only
benchmark rows whose time is mostly attention; torchtitan's attention there is 0.26 x 0.66 = 17%
of the peak. For scale, FlashAttention-2's forward reaches 35% of H100's peak and
FlashAttention-3's 75% (Shah et al. 2024, arXiv 2407.08608, abstract); a training step adds the
slower backward and, under context parallelism, the ring's chunked kernels. Before this constant
the attention core ran at the GEMMs' efficiency, and apsi was 22% (32K) to 99% (256K) fast on
those rows."""

CALIBRATION_SPREAD = (-0.198, 0.267)
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

TP_OVERLAP_SM_SHARE = 16 / 132
"""With TP communication overlap (Transformer Engine userbuffers) the collectives run on 16 of
H100's 132 SMs by default (MB-GUIDE "Communication Overlaps"; MLM-ARGS): the GEMMs lose that share."""

EP_OVERLAP_EFFICIENCY = 0.195
"""Under Megatron's EP A2A overlap, the share of a MoE layer's all-to-alls that the other
micro-batch's compute actually hides (never more than that compute: layer()). Fitted by
benchmarks/calibrate.py on the Megatron-Bridge rows that ran with it (Qwen3-235B-A22B on H100 and
DeepSeek-V3 on GB200 set moe_a2a_overlap=True): 0.195, the two rows at -0.2% and +0.4%. With none
hidden apsi is 12% and 3% below them; at a share of 1, all the compute can hide, 51% and 18% above.
Taken as a share of the layer's compute instead (hiding share x compute, at most the all-to-alls)
it fitted at 0.035 with the rows at -9.7% and -0.0%, and the calibration median was 3.6% (its
figure now: docs/validation.md)."""


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



def _layer_bytes(a: Architecture, moe: bool, tokens: float, fp8: bool, whole: int = 1) -> float:
    """HBM bytes one layer's memory-bound kernels move in its forward, for `tokens` tokens (bf16):
    two RMSNorms (read and write h), two residual adds (read 2 h, write h), RoPE on Q and K, the
    gated activation (read 2 f, write f), the MoE permutation of k copies there and back and the
    routed experts' activations; under FP8 the cast of each linear input (read 2, write 1 byte).
    The norms and residual adds run on `whole` times the tokens (tp without sequence parallelism)."""
    h = a.width
    q, kv = a.heads * a.qk_head_dim, a.kv_heads * a.qk_head_dim
    per = (4 * h * 2 + 6 * h * 2) * whole + 4 * (q + kv)
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
    """Megatron's EP A2A overlap (--overlap-moe-expert-parallel-comm --delay-wgrad-compute): a MoE
    layer's all-to-alls under the adjacent micro-batch's compute (MLM-MOE "EP A2A Overlap"), the
    share EP_OVERLAP_EFFICIENCY of them hidden (at most that compute), where the layout allows it (timing.shape)."""
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
    sequence_parallel: bool = True
    """Sequence parallelism with TP: the norms and residual adds run on s / tp tokens per rank and
    the pipeline's messages are s b h / (c t); without it each TP rank runs them on the whole
    sequence and sends whole messages. Its TP traffic is the same bytes either way (UPB "Sequence
    parallelism"; KOR Sec. 4.2.2): 2 all-gathers and 2 reduce-scatters, or 2 all-reduces of twice
    the ring bytes, per layer forward."""
    cp_all_gather: bool = False
    """CP's K and V all-gathered, exposed (--cp-comm-type all_gather; TE's AttnFuncWithCPAndKVAllGather,
    L3 Sec. 3.3.2), not a ring hidden under the attention core (p2p)."""

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


def compute(a: Architecture, gpu: GPU, x: Shape, hw_tok: float, model_tok: float | None = None) -> Compute:
    """The compute of one micro-batch on one GPU, layer by layer (derived; CAL): the
    linear layers' FLOPs (head included) over the peak of the run's precision x gemm_efficiency x
    the size of the forward's average GEMM, the attention core in bf16 (FlashAttention; DSV3
    3.3.1 keeps attention in bf16 under FP8 too), and the memory-bound kernels over HBM. The
    GEMMs' size comes from the model FLOPs (`model_tok`, without recomputation, where given):
    recomputing a layer runs its GEMMs again at their own size, it does not make them larger."""
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
    forward_linear = (per_layer_linear if model_tok is None else
                      max(0.0, model_tok - layers * core - head_tok) / layers * tokens / (tp * cp))
    linear_rate = peak * gemm_efficiency(gpu, x.precision) * gemm_factor(forward_linear / 3 / gemms) * x.efficiency
    # The attention kernels' size is the forward's too: a recomputed core runs them again at it.
    attn_rate = bf16_peak * ATTENTION_EFFICIENCY * gemm_factor(core * tokens / (tp * cp) / 3) * x.efficiency
    if x.tp_overlap and tp > 1:
        linear_rate *= 1 - TP_OVERLAP_SM_SHARE
    hbm = (gpu.hbm_tbps or 1.0) * 1e12 * HBM_EFFICIENCY
    passes = 4 if x.recompute == "full" else 3  # forward, backward at twice its traffic, recomputed forward
    moe_share = a.moe_layers / a.layers if a.moe else 0.0
    whole = 1 if x.sequence_parallel else tp
    mem_layer = (moe_share * _layer_bytes(a, True, tokens / (tp * cp), fp8, whole)
                 + (1 - moe_share) * _layer_bytes(a, False, tokens / (tp * cp), fp8, whole)) * passes / hbm
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


def layer(a: Architecture, gpu: GPU, x: Shape, hw_tok: float, model_tok: float | None = None) -> Layer:
    """A decoder layer's micro-batch (compute() and its exposed TP, expert-TP, EP and CP traffic),
    averaged over dense and MoE layers: what does not depend on dp or the split."""
    tp, cp, ep, etp = x.tp, x.cp, x.ep, x.etp
    tokens = x.seq * x.micro_batch
    c = compute(a, gpu, x, hw_tok, model_tok)
    moe_share = a.moe_layers / a.layers if a.moe else 0.0
    recomputed = x.recompute == "full" or (x.recompute == "selective" and "moe" in x.modules)
    used: dict[str, str] = {}
    # TP (with sequence parallelism): 2 all-gathers and 2 reduce-scatters of the s b h activation
    # per layer forward, the same backward, and the forward's again when the layer is recomputed
    # (UPB, KOR); without it 2 all-reduces each way of twice their ring bytes, the same time here. A MoE layer keeps attention's half; its experts talk over their own
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
            # The share EP_OVERLAP_EFFICIENCY of them hidden, never more than the other
            # micro-batch's compute of the layer they run under; the rest exposed.
            sent = per * (6 if recomputed else 4)
            ep_layer = moe_share * (sent - min(EP_OVERLAP_EFFICIENCY * sent, c.layer))
    # CP ring: c - 1 hops of this rank's K and V chunk forward, twice that backward (K, V and their
    # gradients), hidden under the attention core (MLM-DOCS CP; MB-GUIDE); all exposed under all_gather
    # (its K and V gathered forward and backward, their gradients reduce-scattered: the same bytes).
    cp_layer = 0.0
    if cp > 1:
        kv_heads = a.heads if a.mla else a.kv_heads
        chunk = 2 * tokens / cp * kv_heads * (a.qk_head_dim + a.v_dim) / min(tp, kv_heads)
        hop, link = send(gpu, tp * (cp - 1), chunk)  # the ring's longest hop
        used["cp"] = link
        cp_layer = 3 * (cp - 1) * hop if x.cp_all_gather else max(0.0, 3 * (cp - 1) * hop - c.core)
    return Layer(c.layer, tp_layer, ep_layer, cp_layer, c.head, c.gemm, c.hbm, used)



def step_time(a: Architecture, gpu: GPU, x: Shape, flops_per_token: tuple[int, int], dense_params: float,
              expert_params: float, traffic: DpTraffic, one: Layer | None = None) -> StepTime:
    """The step of layout `x` on `gpu` (derived; CAL, SB). `flops_per_token` is (model, hardware)
    training FLOPs of one token as the GPUs execute them, the attention core causal
    (apsi.training.frameworks.timing.flops_per_token without and with the recomputation); `dense_params`
    and `expert_params` the parameters outside and inside the routed experts, over the whole model
    (the ranks' shares follow the split). `one` is layer()'s answer for x when the caller has it
    (it does not depend on dp, m or the split)."""
    tp, pp, vpp, cp, dp, mb = x.tp, x.pp, x.vpp, x.cp, x.dp, x.micro_batch
    tokens = x.seq * mb
    model_tok, hw_tok = flops_per_token
    one = layer(a, gpu, x, hw_tok, model_tok) if one is None else one
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
