"""The arithmetic of one serving replica: its memory per GPU, the time of one engine step, and
TTFT, TPOT and throughput at a batch. The one source of truth for serving: serve(), the walk
(apsi.serving.walk), the replica-mix program (apsi.serving.mix), the frontier and the tests all
call these functions.

A replica is TP ranks inside the NVLink domain (or a node over PCIe, without NVLink) times PP
stages (whole nodes); a MoE may instead run attention DP groups with its experts split over them
(`Replica`). Its memory per GPU (`Shape`): the weights of its worst stage (the layers' matrices at
the weight precision, split over TP, K and V over min(tp, kv_heads) ranks, MLA's down-projections
whole on every rank; the routed experts over the stage's GPUs; norms and routers replicated in 16
bits; the embedding and the output head in 16 bits, as FP8 and NVFP4 checkpoints keep them), the activations of one
prefill chunk, and the engine's fixed overhead; the KV cache gets what the engine's memory rule
leaves (apsi.serving.engine.Engine.memory_rule). A token's KV cache per GPU: 2 d_h per KV head the
rank holds (ceil(g / tp): more ranks than KV heads replicate them, as vLLM and TensorRT-LLM do),
or MLA's latent, which every TP rank keeps whole; over its stage's layers.

One step (`step_seconds`) of a stage runs d decoding sequences and p prefill tokens (chunked
prefill mixes them, as vLLM, SGLang and TensorRT-LLM's in-flight batching do): a roofline, the
larger of the bytes it reads from HBM at the engine's bandwidth efficiency (the weights once, for
an MoE layer only the experts the step's tokens touch, and every decoding sequence's KV cache)
and its FLOPs at the engine's compute efficiency, plus a fixed cost per layer, one per decoding
sequence (its scheduling and sampling) and, under TP, two all-reduces per layer (a fixed cost per
doubling of the group, and their bytes over NVLink).

A replica at a steady batch, its TTFT, TPOT and requests per second, is apsi.serving.operating's,
from these steps.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from apsi.catalog import GPU
from apsi.model.architecture import Architecture
from apsi.model.collectives import links
from apsi.model.counting import layer_shards, mla_down_projection
from apsi.serving.engine import Engine
from apsi.units import GIB

WEIGHT_BYTES: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5 + 1 / 16}
"""Bytes per matrix weight served at a precision. NVFP4 stores 4-bit values with one FP8 (E4M3)
scale per block of 16 (NVIDIA, "Introducing NVFP4", 2025): 0.5 + 1/16 bytes."""
KV_BYTES: dict[str, int] = {"bf16": 2, "fp16": 2, "fp8": 1}
"""Bytes per KV-cache element at a KV precision."""
HIGH_BYTES = 2
"""Bytes per weight the checkpoints keep in 16 bits whatever the precision: embedding, output
head, norms, routers (vLLM's Fp8LinearMethod and ModelOpt's FP8/NVFP4 export quantize the
decoder's linear layers only)."""
ACTIVATION_BYTES = 2
"""Bytes per activation element (bf16), in the step's peak and in the all-reduces."""
LOGIT_BYTES = 4
"""Bytes per logit: engines sample from fp32 logits."""
COMPUTE_PRECISION: dict[str, str] = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "fp4": "fp4"}
"""The tensor-core rate a precision's matrix products run at (FP8 weights with FP8 activations,
NVFP4 weights with FP4 activations, as TensorRT-LLM and vLLM run them on GPUs that have them)."""


class Workload(NamedTuple):
    isl: int
    """Input tokens per request."""
    osl: int
    """Output tokens per request."""
    prefix: int = 0
    """Input tokens already in the prefix cache (not prefilled again)."""
    closed: bool = False
    """The load is a concurrency (a closed loop: each client sends its next request when its last
    one is done, as benchmark clients at a fixed concurrency do), not a rate of requests arriving
    at random (apsi.serving.operating.operating_point)."""


class Replica(NamedTuple):
    """A replica's layout: attention TP x attention DP ranks per stage, PP stages; a MoE's routed
    experts split over ep of a stage's tp x dp ranks (whole experts, expert parallelism) and, within
    each expert group, sliced over the other tp x dp / ep."""

    tp: int
    pp: int
    ep: int = 1
    """Expert-parallel size (vLLM --enable-expert-parallel, SGLang --ep-size, TensorRT-LLM
    moe_expert_parallel_size); 1: experts sliced over the ranks like the other matrices."""
    dp: int = 1
    """Attention data parallelism (SGLang --enable-dp-attention --dp-size, TensorRT-LLM
    enable_attention_dp, vLLM --data-parallel-size with expert parallelism): dp groups of tp ranks
    each run attention for their own sequences, and meet at the MoE layers."""

    @property
    def gpus(self) -> int:
        return self.tp * self.dp * self.pp

    @property
    def ranks(self) -> int:
        """GPUs of one stage: what the MoE layers' experts are spread over."""
        return self.tp * self.dp

    @property
    def words(self) -> str:
        """The layout as plans write it: "TP 8", "TP 8 x PP 2", "TP 8, EP 8", "attention DP 8, EP 8"."""
        return layout_words(self.tp, self.pp, self.ep, self.dp)


def layout_words(tp: int, pp: int, ep: int = 1, dp: int = 1) -> str:
    """A replica layout in words (Replica.words; plans, exports and tables say it so)."""
    parts = [f"attention DP {dp}" if tp == 1 and dp > 1 else f"TP {tp}" + (f" x attention DP {dp}" if dp > 1 else "")]
    if ep > 1:
        parts.append(f"EP {ep}")
    return ", ".join(parts) + (f" x PP {pp}" if pp > 1 else "")


class Shape(NamedTuple):
    """What one GPU of a replica holds and what a step reads and computes, per token."""

    weights_bytes: float
    """Weights of the worst stage on one GPU."""
    dense_read_bytes: float
    """Weights every step reads whatever the tokens (all but the routed experts)."""
    expert_read_bytes: float
    """Routed-expert weights on one GPU, read in the share the step's tokens touch."""
    activation_bytes: float
    """Peak activations of one chunk of engine.chunk_tokens and the logits of a full batch."""
    kv_bytes_per_token: float
    """KV cache one token keeps on one GPU (its stage's layers)."""
    kv_bytes: float
    """KV-cache memory on one GPU after the engine's rule (may be negative: it does not fit)."""
    memory_fraction: float
    """The engine's memory fraction on this GPU and layout (Engine.memory_fraction, or its own choice)."""
    memory_bytes: float
    """The GPU's memory the engine sees."""
    layers: int
    """Layers in the worst stage."""
    matmul_flops_per_token: float
    """FLOPs of the stage's matrix products but the routed experts, for one token of this GPU's
    attention group, on one GPU."""
    expert_flops_per_token: float
    """FLOPs of the routed experts on one GPU per token of the whole stage (every attention group's
    tokens meet at the experts; balanced routing spreads them over the stage's GPUs)."""
    attention_flops_per_context: float
    """FLOPs of the stage's attention core on one GPU for one token per token of context."""
    head_flops: float
    """FLOPs of the output head on one GPU per sequence that samples a token."""
    hidden: int
    experts: int
    top_k: int
    dp: int
    """Attention data-parallel groups: a step's sequences and prompts are spread over them."""
    # The step's rates and fixed costs on this GPU under the engine's calibration (step_seconds):
    bytes_per_s: float
    """HBM bandwidth at the engine's bandwidth efficiency."""
    flops_per_s: float
    """Dense peak at the weight precision, at the engine's compute efficiency."""
    attention_flops_per_s: float
    """16-bit dense peak (the attention core's), at the engine's compute efficiency."""
    fixed_s: float
    """A step's fixed part: layers x the per-layer cost, and under TP the all-reduces' fixed costs."""
    collective_s_per_token: float
    """The all-reduces' bytes per token of the step over NVLink, seconds."""
    tp: int
    pp: int
    hop_latency_s: float
    """A pipeline hop's start-up (NVLink within a domain, else the NIC)."""
    hop_s_per_token: float
    """A pipeline hop's bytes per token of the micro-batch (its hidden states), seconds."""
    experts_per_gpu: float
    """Routed experts whose weights one GPU holds (a share of each under slicing)."""
    expert_cost: float
    """Time of a routed expert's bytes and FLOPs relative to the dense matrices' (1 / Calibration.expert_efficiency)."""
    request_s: float
    """The engine's fixed latency of a request to its first token outside the steps, seconds."""
    stream_s: float
    """The front end's time per output token it streams, seconds (Calibration.stream_us)."""
    sequence_s: float
    """A step's cost per decoding sequence, seconds (Calibration.sequence_us)."""
    overlap: float = 1.0
    """Share of the shorter of a step's two parts hidden under the longer (Calibration.overlap)."""


def tp_group(gpu: GPU) -> int:
    """The most GPUs one tensor-parallel group of a replica spans: the NVLink domain, or on a GPU
    without NVLink (scaleup_domain 1) its node over PCIe, as the engines run it (TensorRT-LLM's
    performance overview serves L40S at TP 4 and 8; vLLM and NCCL take PCIe when no NVLink joins
    the GPUs). Its all-reduces then move at the PCIe figure (gpus.yaml scaleup_gbps)."""
    return gpu.scaleup_domain if gpu.scaleup_domain > 1 else max(gpu.gpus_per_node, 1)


PCIE_EFFICIENCY = 40 / 64
"""All-reduce bus bandwidth over PCIe as a share of its one-way figure: 8 x H100 PCIe without
NVLink reach 35-45 GB/s of busbw in nccl-tests' all_reduce_perf at large sizes, of PCIe Gen5 x16's
64 GB/s each way (Alaya New, "NCCL-tests in practice", 2026-05-06, reference table): 40 / 64."""


def tp_bandwidth(gpu: GPU) -> float:
    """Bytes/s a replica's collectives reach inside its TP group: NVLink's one-way figure at its
    bus efficiency (apsi.model.collectives.links), or on a GPU without NVLink the one-way PCIe
    figure (half the catalog's bidirectional scaleup_gbps) at PCIE_EFFICIENCY."""
    up, out = links(gpu)
    if gpu.scaleup_domain > 1 or not gpu.scaleup_gbps:
        return up.bandwidth if gpu.scaleup_domain > 1 else out.bandwidth
    return gpu.scaleup_gbps / 2 * 1e9 * PCIE_EFFICIENCY


def tp_choices(a: Architecture, gpu: GPU) -> tuple[int, ...]:
    """Tensor-parallel sizes a replica can use on `gpu`: inside one group (tp_group), dividing the
    query heads (vLLM's and SGLang's check: num_attention_heads % tp == 0), and the KV heads
    dividing TP or TP dividing them (vLLM's QKVParallelLinear replicates a KV head over tp / g
    ranks); MLA has no KV heads to split."""
    out = []
    for t in range(1, min(tp_group(gpu), a.heads) + 1):
        if a.heads % t:
            continue
        if not a.mla and a.kv_heads % t and t % a.kv_heads:
            continue
        out.append(t)
    return tuple(out)


MAX_PP = 16
"""The most pipeline stages a replica is split into: 16 nodes of 8 GPUs hold 1.8 TB of weights at
80 GiB each, past any model apsi knows."""


def replicas(a: Architecture, gpu: GPU, tp: int | None = None, pp: int | None = None) -> tuple[Replica, ...]:
    """Every replica layout the walk considers on `gpu`: each TP choice on one stage, and PP (2 to
    MAX_PP stages, at least one layer each) at each TP choice too, as engines run a model one node
    cannot hold, or one a narrower group serves on fewer GPUs (vLLM's and SGLang's
    --pipeline-parallel-size, TP inside each stage; a stage's GPUs and the replica's nodes are
    apsi.outputs.export.engines'); for a MoE, attention DP over 2 to 8 GPUs of a node with its
    experts split over them (expert parallelism). PP at a TP that divides a node or is whole nodes
    (its stages pack node by node). A pinned tp or pp keeps the layouts with it, so every pinned
    layout is among the unpinned ones (the walk weighs them all: apsi.serving.walk)."""
    tps = tp_choices(a, gpu)
    node = [t for t in tps if t <= max(gpu.gpus_per_node, 1)] or [1]
    out = [Replica(t, 1) for t in tps]
    # A stage's TP group divides a node or is whole nodes, so the stages pack node by node and no TP
    # group straddles two hosts (TP 5 x PP 2 on 8-GPU nodes put ranks 5 to 9 over both, its
    # all-reduces over the network the walk priced on NVLink: apsi.outputs.export.engines.replica_nodes).
    per = max(gpu.gpus_per_node, 1)
    out += [Replica(t, p) for t in tps if per % t == 0 or t % per == 0 for p in range(2, min(MAX_PP, a.layers) + 1)]
    if a.experts:
        # A MoE's experts split whole over a node's ranks under attention DP (tp 1, dp = ep), as the
        # three engines run DeepSeek and Qwen3 MoE models. Expert parallelism under attention TP
        # alone is not a layout of its own here: every rank holds every token, so its memory, reads
        # and all-reduce are those of experts sliced over the TP ranks (shape).
        for t in node:
            if t > 1 and a.experts % t == 0:
                out.append(Replica(1, 1, ep=t, dp=t))
    if tp is not None:
        out = [r for r in out if r.tp == tp]
    if pp is not None:
        out = [r for r in out if r.pp == pp]
    return tuple(out)


def weight_precisions(gpu: GPU) -> list[str]:
    """The weight precisions `gpu` has tensor cores for."""
    return [p for p in WEIGHT_BYTES if getattr(gpu, f"{p}_tflops", None) is not None]


def shape(a: Architecture, gpu: GPU, engine: Engine, weights: str, kv: str, replica: Replica,
          unshaped_experts: int = 0) -> Shape:
    """What one GPU of `replica` holds and does per token (module docstring).

    `unshaped_experts`: parameters of a mixture of experts given only as a size (params and
    active, no experts in the architecture): its params - active, held split over TP like experts
    and read whole every step (a batch of a few dozen tokens routed top-k touches nearly every
    expert; `touched`)."""
    tp, pp, ep, dp = replica
    ranks = replica.ranks
    wb, kb = WEIGHT_BYTES[weights], KV_BYTES[kv]
    stage = math.ceil(a.layers / pp)
    moe_layers = a.moe_layers
    dense_layers = a.layers - moe_layers
    # The worst stage holds the model's mix of layers (the mean layer, times its layer count).
    share = stage / a.layers
    dense_read = expert = 0.0
    matmul = expert_flops = 0.0
    down = mla_down_projection(a)
    for moe, count in ((False, dense_layers), (True, moe_layers)):
        if not count:
            continue
        s = layer_shards(a, moe)
        kv_split = min(tp, a.kv_heads)
        matrices = s.tp / tp + s.kv / kv_split
        # MLA's down-projections (q_a_proj, kv_a_proj_with_mqa) are matrices every rank holds whole
        # (vLLM's ReplicatedLinear), quantized with the rest: at the weight precision; the norms and
        # the router stay in 16 bits.
        dense_read += count * share * (matrices * wb + down * wb + (s.replicated - down) * HIGH_BYTES)
        # The routed experts over the stage's ranks: ep groups of whole experts, each sliced over
        # ranks / ep (under attention DP the attention groups' tokens meet at them).
        expert += count * share * s.experts / ranks * wb
        used = s.experts * a.top_k / a.experts if moe else 0
        matmul += count * share * 2 * matrices
        expert_flops += count * share * 2 * used / ranks
    dense_read += unshaped_experts * share / ranks * wb
    vocab = a.vocab * a.width / tp
    # The stage holds the embedding (first stage) and the output head (last; one matrix when tied),
    # but a step reads only the head whole: the embedding gives each token its own row.
    ends = vocab * (1 if a.tied or pp > 1 else 2)
    weights_bytes = dense_read + ends * HIGH_BYTES + expert
    dense_read += vocab * HIGH_BYTES
    if a.mla:
        per_layer = (a.kv_lora_rank or 0) + a.qk_rope_dim
    else:
        per_layer = 2 * a.head_dim * math.ceil(a.kv_heads / tp)
    kv_token = stage * per_layer * kb
    # Attention core: q.K and p.V, 2 FLOPs per multiply-add, per head on this rank, per token of context.
    attention = stage * 2 * (a.heads / tp) * (a.qk_head_dim + a.v_dim)
    head = 2 * vocab
    # One chunk's activations: the residual and norm output (2 h), q k v (the heads' widths on the
    # rank), the MLP's gate and up products; then a full batch's fp32 logits (DERIVED, per tensor).
    ffn = max(a.ffn if dense_layers else 0, a.expert_ffn * a.top_k + a.shared_experts * a.shared_expert_ffn)
    per_token = 2 * a.width + (a.heads * a.qk_head_dim + 2 * a.kv_heads * a.head_dim) / tp + 2 * ffn / tp
    act = engine.chunk_tokens * per_token * ACTIVATION_BYTES + engine.max_sequences * a.vocab / tp * LOGIT_BYTES
    memory = (gpu.visible_memory_gib or gpu.memory_gib) * GIB
    fraction = memory_fraction(engine, memory, ranks, pp, dp)
    kv_mem = kv_memory(engine, memory, weights_bytes, act, fraction)
    c = engine.calibration
    rate = (gpu.fp4_tflops if weights == "fp4" else gpu.peak_tflops(COMPUTE_PRECISION[weights])) or 0.0
    attention_rate = gpu.bf16_tflops or gpu.fp16_tflops or rate
    fixed = stage * c.layer_us * 1e-6
    per_token = 0.0
    up, out = links(gpu)
    within = tp_bandwidth(gpu)
    reduce = 2 * (tp - 1) / tp * a.width * ACTIVATION_BYTES / within if tp > 1 else 0.0
    reduce_fixed = c.collective_us * 1e-6 * math.log2(tp)
    moe_share = moe_layers / a.layers
    # After attention, an all-reduce over the attention group's tp ranks; after the MLP, another on
    # the dense layers and on MoE layers without attention DP (every rank holds every token: under
    # TP slicing or expert parallelism alike, each rank's experts' outputs are summed). Each moves
    # 2 (tp - 1) / tp of the tokens' hidden states (a reduce-scatter and an all-gather, NCCL ring
    # bytes) at a fixed cost per doubling of the group.
    alltoall = dp > 1
    reduces = stage * (1 + (1 - moe_share if alltoall else 1))
    fixed += reduces * reduce_fixed
    per_token = reduces * reduce
    if alltoall and moe_layers:
        # Attention DP: the groups' tokens differ, so each MoE layer dispatches every token to its top-k
        # experts' ranks and combines their outputs back, two all-to-alls over the stage's ranks
        # moving k h of each token, (ranks - 1) / ranks of it off the GPU (DeepEP's and NCCL's
        # dispatch/combine; bf16 activations), at the all-reduce's fixed cost per doubling.
        moe_stage = stage * moe_share
        fixed += 2 * moe_stage * c.collective_us * 1e-6 * math.log2(ranks)
        per_token += 2 * moe_stage * a.top_k * (ranks - 1) / ranks * a.width * ACTIVATION_BYTES / within
    # A pipeline hop sends the micro-batch's hidden states to the next stage, tp ranks on
    # (apsi.model.collectives.send: NVLink within a domain, else the NIC).
    hop = up if tp < gpu.scaleup_domain else out
    return Shape(weights_bytes=weights_bytes, dense_read_bytes=dense_read, expert_read_bytes=expert,
                 activation_bytes=act, kv_bytes_per_token=kv_token, kv_bytes=kv_mem, memory_fraction=fraction,
                 memory_bytes=memory,
                 layers=stage, matmul_flops_per_token=matmul, expert_flops_per_token=expert_flops,
                 attention_flops_per_context=attention,
                 head_flops=head, hidden=a.width, experts=a.experts, top_k=a.top_k, dp=dp,
                 bytes_per_s=c.bandwidth_efficiency * (gpu.hbm_tbps or 0.0) * 1e12,
                 flops_per_s=c.prefill_efficiency * rate * 1e12,
                 attention_flops_per_s=c.prefill_efficiency * attention_rate * 1e12,
                 fixed_s=fixed, collective_s_per_token=per_token, tp=tp, pp=pp,
                 hop_latency_s=hop.latency, hop_s_per_token=a.width * ACTIVATION_BYTES / hop.bandwidth,
                 request_s=c.request_ms * 1e-3, stream_s=c.stream_us * 1e-6, experts_per_gpu=a.experts / ep,
                 expert_cost=1 / c.expert_efficiency, sequence_s=c.sequence_us * 1e-6, overlap=c.overlap)


def memory_fraction(engine: Engine, memory: float, ranks: int, pp: int, dp: int = 1) -> float:
    """The fraction of the engine's memory rule on a GPU of `memory` bytes, for `ranks` GPUs per
    stage in `dp` attention groups: its own choice where it makes one (Engine.auto_fraction:
    SGLang's), else Engine.memory_fraction."""
    if engine.auto_fraction and engine.name == "sglang":
        from apsi.serving.sglang import static_fraction

        return static_fraction(memory, ranks, pp, dp)
    return engine.memory_fraction


def kv_memory(engine: Engine, memory: float, weights: float, activations: float, f: float) -> float:
    """Bytes left for the KV cache on one GPU under the engine's memory rule (Engine.memory_rule)
    at fraction `f`."""
    overhead = engine.overhead_gib * GIB
    if engine.memory_rule == "total":
        return f * memory - weights - activations - overhead
    if engine.memory_rule == "free":
        return f * (memory - weights - activations - overhead)
    # static: the pool holds weights and cache; activations and overhead live in the rest, and
    # what they lack comes out of the pool.
    return f * memory - weights - max(0.0, activations + overhead - (1 - f) * memory)


def touched(sh: Shape, tokens: float) -> float:
    """Expected share of a layer's routed experts that `tokens` tokens use, each drawing top_k of
    E uniformly: 1 - (1 - k / E)^n (balanced routing, as benchmarks with random weights see)."""
    if not sh.experts:
        return 0.0
    return 1.0 - (1.0 - sh.top_k / sh.experts) ** tokens


def step_seconds(sh: Shape, decode: float, context: float, prefill: float, prefill_context: float,
                 prompt: float = 0.0, own: float = 0.0) -> float:
    """One stage's step: `decode` sequences at a mean `context` tokens, plus `prefill` prompt
    tokens each attending to `prefill_context` tokens on average (module docstring), spread over
    the stage's attention-DP groups; `own` more prefill tokens in one group (a request's own
    prompt: the step lasts as long as that group's). `prompt`, where given, is the size of one
    prompt: fewer prefill tokens than that per step are whole prompts in that share of the steps
    (the rest decode alone), which is what the routed experts' reads see."""
    read_s, compute_s = step_parts(sh, decode, context, prefill, prefill_context, prompt, own)
    mine = (decode + prefill) / sh.dp + own
    # The longer of the two parts, and what of the shorter the overlap leaves (Calibration.overlap).
    return (max(read_s, compute_s) + (1 - sh.overlap) * min(read_s, compute_s) + sh.fixed_s
            + mine * sh.collective_s_per_token + decode / sh.dp * sh.sequence_s)


def step_parts(sh: Shape, decode: float, context: float, prefill: float, prefill_context: float,
               prompt: float = 0.0, own: float = 0.0) -> tuple[float, float]:
    """A step's (step_seconds' arguments) two overlapping parts, in seconds: reading its bytes
    (weights, the experts its tokens touch, the decoding sequences' KV cache) at the GPU's
    bandwidth, and its FLOPs at the GPU's rate; the step lasts the longer of the two."""
    tokens = decode + prefill + own
    # One GPU's share: its attention group's sequences and prompts (all of them without attention DP).
    mine_decode = decode / sh.dp
    mine_prefill = prefill / sh.dp + own
    mine = mine_decode + mine_prefill
    if sh.experts and 0 < prefill < prompt:
        # The share of experts touched is concave in the tokens: averaged over the steps that
        # carry a prompt and those that do not, not taken at the mean.
        share = prefill / prompt
        used = share * touched(sh, decode + prompt) + (1 - share) * touched(sh, decode)
    else:
        used = touched(sh, tokens)
    read = (sh.dense_read_bytes + sh.expert_read_bytes * used * sh.expert_cost
            + mine_decode * context * sh.kv_bytes_per_token)
    compute_s = ((mine * sh.matmul_flops_per_token + tokens * sh.expert_flops_per_token * sh.expert_cost
                  + (mine_decode + min(mine_prefill, 1.0)) * sh.head_flops) / sh.flops_per_s
                 + (mine_decode * context + mine_prefill * prefill_context) * sh.attention_flops_per_context
                 / sh.attention_flops_per_s)
    return read / sh.bytes_per_s, compute_s


def kv_choices(weights: str) -> tuple[str, str]:
    """The KV-cache precisions an engine runs beside `weights`: the model's own 16-bit dtype (fp16
    for fp16 weights, else bf16: FP8 and NVFP4 models compute in bf16), or fp8 (vLLM's and SGLang's
    --kv-cache-dtype auto or fp8, TensorRT-LLM's kv_cache_config dtype likewise)."""
    return ("fp16" if weights == "fp16" else "bf16"), "fp8"


def default_kv(engine: Engine, weights: str) -> str:
    """The KV-cache precision an engine uses by default: FP8 under FP8 or NVFP4 weights where the
    engine sets it (Engine.fp8_kv_cache), else the model's 16-bit dtype."""
    if weights in ("fp8", "fp4"):
        return "fp8" if engine.fp8_kv_cache else "bf16"
    return weights
