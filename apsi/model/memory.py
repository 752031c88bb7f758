"""Memory of one GPU under a real framework: activations with FlashAttention, SP (or without) and CP, the
schedule's in-flight micro-batches, logits, MoE token copies, and the reserve no formula sees.

Owns the per-tensor activation accounting (derived: Korthikanti et al. 2022's method, KOR,
applied to the kernels frameworks run today), the in-flight micro-batch counts of 1F1B
and interleaved schedules (MLM-SCHED), the MoE activation terms (derived from MLM-MOE) and the
reserve (derived from MLE, UPB); source keys: docs/sources.md. How model states are sharded is
each framework's (apsi.training.frameworks); this module has no framework names in it. Pure functions:
numbers (and an Architecture) in, bytes out.

Worked example (derived; MB-RECIPE's Megatron-Bridge Llama 3.1 405B on 1,024 H100: TP 8, CP 2, s
8,192, micro-batch 1): one layer keeps [s b h (12 + 4 g/a) + 6 s b f + 4 s b a] / t with s = 4,096
per CP rank: (67,108,864 x 12.25 + 6 x 4,096 x 53,248 + 4 x 4,096 x 128) / 8 = 266,600,448 bytes
(254 MiB); stage 0's 15 layers at VPP 8 hold 15 x (8 + 7/8) = 133 of them: 33.1 GiB.
"""

from __future__ import annotations

import functools

from apsi.model.architecture import Architecture

FP8 = 1
BF16 = 2
FP32 = 4

RECOMPUTE_MODULES: tuple[str, ...] = ("core_attn", "mla_up_proj", "layernorm", "mlp", "moe", "moe_act")
"""Megatron's --recompute-modules that change what is stored (MLM-TC recompute_modules;
MLM-MOE): core_attn (the default of --recompute-granularity selective), mla_up_proj, layernorm and
moe_act (output-discarding), mlp (the dense MLP checkpointed), moe (the MoE block checkpointed)."""
DEFAULT_MODULES: tuple[str, ...] = ("core_attn",)

RESERVE_FIXED_GIB = 2.5
"""Memory outside every formula, per GPU: the CUDA context and kernels (0.5-0.9 GiB with lazy
loading on PyTorch 2.1, "1-2 GB" per the Ultra-Scale Playbook) plus NCCL's own buffers after the
first collective (about 1.5 GiB, "~1-2 GiB ... the more GPUs the higher") (MLE,
UPB). NVLS buffers and CUDA graphs take more and are off in this accounting."""
RESERVE_FRACTION = 0.05
"""Allocator fragmentation and transient buffers on top of the activations: 5%, the figure
Megatron-LM's own estimator adds to them ("buffer for optimizer and miscellaneous temporaries
(5 % overhead)", MLM-TMU), the low end of the derived 5-10% (MLE, MLM-MOE, MB-GUIDE;
expandable_segments on, as Megatron and Bridge recommend). Model states are allocated once, in a
few large buffers."""


def attention_activation_bytes(a: Architecture, seq: int, micro_batch: int, tp: int, recompute: str,
                               fp8: bool = False, modules: tuple[str, ...] = DEFAULT_MODULES,
                               sp: bool = True) -> float:
    """Bytes one attention block keeps for backward, per micro-batch, on one GPU (derived, after KOR).

    Norm input 2 s b h, QKV-linear input 2 s b h, Q 2 s b a d_qk, K and V 2 s b g (d_qk + d_v),
    output O 2 s b a d_v, FlashAttention's fp32 log-sum-exp 4 s b a (no s x s matrix is stored).
    MLA keeps its two latents (q_r and kv_r + rope wide) for the up-projections, and its K and V
    per query head; each up-projection is a Transformer Engine LayerNormLinear, which saves its
    normed input beside the input (q_r + kv_r more; MLM gpt_layer_specs: linear_q_up_proj and
    linear_kv_up_proj fuse q_layernorm and kv_layernorm). A QK norm (Qwen3's per head, OLMo 2's
    over the projection) keeps its input, the pre-norm Q and K, for its backward (MLM attention.py:
    q_layernorm / k_layernorm are TENorm modules). With sequence parallelism (sp) all of it is
    split over tp (K and V over min(tp, g)); without it the norm input, the QKV-linear input and
    MLA's latents are whole on every TP rank (KOR Sec. 4.2.2: the s b h tensors outside the
    tensor-parallel regions; the head-split ones are split either way). `seq` is the tokens on
    this GPU (s / cp under context parallelism).

    Selective recomputation drops what its modules recompute: core_attn (the default) the
    log-sum-exp (with FlashAttention the rest is kept anyway; MB-GUIDE: core-attention recompute
    "saves little"), mla_up_proj the per-head Q, K and V of MLA and the up-projections' normed
    latents (the checkpoint keeps only its inputs), layernorm the input norm's output (the
    QKV-linear input; the QK norms are not in that module, MLM transformer_layer.py). Under FP8,
    Transformer Engine caches the QKV-linear input as its
    1-byte FP8 copy, and O, which flash's backward needs in bf16, gets an FP8 copy beside it for
    the output projection (TE "Activations saved for backward").
    """
    sb, h, n = seq * micro_batch, a.width, a.heads
    dropped = set(modules) if recompute == "selective" else set()
    per_head = not (a.mla and "mla_up_proj" in dropped)
    if a.kv_lora_rank is not None:  # MLA (Architecture.mla)
        kv_heads, qk, v = n, a.qk_nope_dim + a.qk_rope_dim, a.v_head_dim
        normed = (a.q_lora_rank or 0) + a.kv_lora_rank if per_head else 0
        latents = BF16 * sb * ((a.q_lora_rank or 0) + a.kv_lora_rank + a.qk_rope_dim + normed)
        q_heads, k_heads = n * qk, kv_heads * (qk + v)
    else:
        kv_heads, qk, v = a.kv_heads, a.head_dim, a.head_dim
        latents = 0
        pre_norm = 2 if a.qk_norm != "none" else 1  # the QK norm's input beside its output
        q_heads, k_heads = pre_norm * n * qk, kv_heads * (pre_norm * qk + v)
    linear_in = 0 if "layernorm" in dropped else (FP8 if fp8 else BF16)
    out = BF16 + (FP8 if fp8 else 0)
    kept = (sb * ((BF16 * q_heads if per_head else 0) + out * n * v)
            + (FP32 * sb * n if recompute == "none" or "core_attn" not in dropped else 0))
    sequence = sb * (BF16 * h + linear_in * h) + latents  # split over tp by SP only
    # With more TP ranks than KV heads each rank keeps a whole KV head (num_query_groups < tp).
    kv = BF16 * sb * k_heads / min(tp, kv_heads) if per_head else 0
    return ((kept + sequence) / tp if sp else kept / tp + sequence) + kv


def mlp_activation_bytes(a: Architecture, seq: int, micro_batch: int, tp: int, ffn: int, fp8: bool = False,
                         dropped: frozenset[str] = frozenset(), sp: bool = True) -> float:
    """Bytes one dense MLP keeps: norm input and FC1 input 2 s b h each; gated FC1 output (gate
    and up) 4 s b f and FC2 input 2 s b f (SwiGLU: 6 s b f); ungated 2 s b f twice (GELU input and
    output: 4 s b f). Split over tp with sequence parallelism (derived, after KOR); without it (sp
    false) the two s b h tensors are whole on every TP rank. Under FP8 the two linear inputs are
    cached as 1-byte copies (TE; "50 % activation reduction", MLM-MOE).
    Recomputed modules: mlp keeps only the MLP's input; layernorm drops the FC1 input."""
    sb = seq * micro_batch
    linear_in = FP8 if fp8 else BF16
    if "mlp" in dropped:
        return BF16 * 2 * sb * a.width / (tp if sp else 1)
    fc1_in = 0 if "layernorm" in dropped else linear_in
    fc1_out = 4 if a.mlp == "swiglu" else 2
    sequence = BF16 * sb * a.width + fc1_in * sb * a.width  # split over tp by SP only
    split = fc1_out * sb * ffn + linear_in * sb * ffn
    return (sequence + split) / tp if sp else sequence + split / tp


def moe_activation_bytes(a: Architecture, seq: int, micro_batch: int, tp: int, fp8: bool = False,
                         etp: int = 1, dropped: frozenset[str] = frozenset(), sp: bool = True) -> float:
    """Bytes one MoE block keeps (derived from MLM-MOE): its norm input 2 s b h / t, the norm's output
    the router's linear saves (MLM moe_utils RouterGatingLinearFunction; torchtitan's gate is an
    nn.Linear), the router's fp32 logits over E experts, and each token's top_k copies through a
    routed expert (its input h and the expert MLP's own tensors, as mlp_activation_bytes) plus the
    shared experts, one MLP of their summed width whose input is the router's (under FP8 its
    1-byte copy beside it; MLM SharedExpertMLP). Tokens per
    GPU T = s b / t (SP); with balanced routing each expert-parallel rank receives about T k
    copies whatever EP is. Expert TP gathers the tokens of etp ranks and splits each expert's FFN
    over them: the routed inputs are etp times larger, the FFN tensors the same. Recomputed
    modules: moe keeps only the block's input; moe_act drops the experts' FC2 input (the
    activation's output: the 2 f_e term, derived from MLM-MOE); layernorm the norm's
    output (Megatron discards it and recomputes it for the router and the shared experts).
    Without sequence parallelism (sp false; the frameworks allow it only with etp = tp) every TP
    rank holds all s b tokens before the dispatch: the block's input, the norm's output, the
    router's logits and the shared experts' FP8 input are tp times larger; each expert's tokens
    and its FFN split are what etp = tp gives anyway."""
    tokens = seq * micro_batch / tp
    whole = tp if not sp else 1  # the pre-dispatch tensors' factor without SP
    if "moe" in dropped:
        return BF16 * 2 * tokens * a.width * whole
    linear_in = FP8 if fp8 else BF16
    fc1_out = 4 if a.mlp == "swiglu" else 2
    fc2_in = 0 if "moe_act" in dropped else linear_in

    routed = tokens * a.top_k * (etp * linear_in * a.width + (fc1_out + fc2_in) * a.expert_ffn)
    shared_ffn = a.shared_experts * a.shared_expert_ffn
    shared = tokens * ((FP8 * a.width * whole if fp8 else 0) + (fc1_out + fc2_in) * shared_ffn) if shared_ffn else 0
    normed = 0 if "layernorm" in dropped else BF16 * tokens * a.width
    return (BF16 * tokens * a.width + normed + FP32 * tokens * a.experts) * whole + routed + shared


@functools.lru_cache(maxsize=65536)
def layer_activation_bytes(a: Architecture, moe: bool, seq: int, micro_batch: int, tp: int, recompute: str,
                           fp8: bool = False, etp: int = 1, modules: tuple[str, ...] = DEFAULT_MODULES,
                           sp: bool = True) -> float:
    """Bytes one layer keeps per micro-batch on one GPU, at a recomputation level, with sequence
    parallelism (sp) or without.

    none: attention + MLP (or MoE) as above; selective: less what `modules` recompute. full: the
    layer's input only, 2 s b h / t (Megatron full recomputation, uniform, one layer per
    checkpoint; KOR Table 2), whole on every TP rank without SP."""
    if recompute == "full":
        return BF16 * seq * micro_batch * a.width / (tp if sp else 1)
    dropped = frozenset(modules) if recompute == "selective" else frozenset()
    attention = attention_activation_bytes(a, seq, micro_batch, tp, recompute, fp8, modules, sp)
    if moe:
        return attention + moe_activation_bytes(a, seq, micro_batch, tp, fp8, etp, dropped, sp)
    return attention + mlp_activation_bytes(a, seq, micro_batch, tp, a.ffn, fp8, dropped, sp)


def in_flight(rank: int, pp: int, vpp: int, micro_batches: int) -> float:
    """Micro-batches, in whole-stage equivalents, whose activations pipeline rank `rank` holds at
    its peak (derived; MLM-SCHED num_warmup_microbatches).

    1F1B warms up p - rank - 1 micro-batches before its first backward and holds one more:
    min(m, p - rank) (Narayanan et al. 2021 Sec. 2.2). The interleaved schedule with v virtual
    stages warms up 2 (p - rank - 1) + (v - 1) p chunks of L / v layers: on rank 0 that is
    p + (p - 1) / v stage-equivalents, Megatron's interleave penalty L (1 + (p - 1) / (p v))
    (MLM-TMU). Never more than the m micro-batches of a step.
    """
    if vpp > 1:
        chunks = min(micro_batches * vpp, 2 * (pp - rank - 1) + (vpp - 1) * pp + 1)
        return chunks / vpp
    return min(micro_batches, pp - rank)


def working_layer_bytes(a: Architecture, moe: bool, seq: int, micro_batch: int, tp: int, fp8: bool = False,
                        etp: int = 1, sp: bool = True) -> float:
    """Under full recomputation, the one layer being recomputed holds its whole set of
    activations during its backward (derived from MLM-TC: plus one group's working set); under
    selective recomputation the checkpointed block's own (apsi.training.frameworks.megatron)."""
    return layer_activation_bytes(a, moe, seq, micro_batch, tp, "none", fp8, etp, DEFAULT_MODULES, sp)


LOGIT_BYTES = BF16 + FP32
"""Bytes per logit Megatron's loss keeps: the bf16 logits and the fp32 copy its fused
vocabulary-parallel cross-entropy works in (MLM-TMU: 4 s b h (1 + V / h) / t at p = 1)."""


def logits_bytes(a: Architecture, seq: int, micro_batch: int, tp: int, vocab: int | None = None,
                 per_logit: float = LOGIT_BYTES, sp: bool = True) -> float:
    """The last stage's output layer: the final norm's input and output 2 s b h each (split over
    tp by SP, whole without it), and the logits over the (padded) vocabulary at `per_logit` bytes
    each (Megatron: bf16 plus the fp32 copy for the cross-entropy, 6 s b V), vocabulary-parallel
    over tp."""
    sb = seq * micro_batch
    norm, logits = BF16 * 2 * sb * a.width, per_logit * sb * (vocab or a.vocab)
    return (norm + logits) / tp if sp else norm + logits / tp


def reserve_bytes(activations: float) -> float:
    """What no formula sees: RESERVE_FIXED_GIB plus RESERVE_FRACTION of the activations (bytes)."""
    return RESERVE_FIXED_GIB * 2**30 + RESERVE_FRACTION * activations
