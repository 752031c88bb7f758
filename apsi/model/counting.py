"""Parameters, FLOPs and KV cache of an Architecture: pure functions returning named parts.

Owns the counting formulas of MLM-TMU, MLM-FLOPS and TT-FLOPS (Megatron-LM's
theoretical_memory_usage.py and num_floating_point_operations, torchtitan's
get_*_nparams_and_flops; source keys in docs/sources.md), applied per component so the parts
sum to the total, and ffn_sized(): the FFN width at which an architecture counts a size. Nothing
here reads a file or knows a preset; every function takes an Architecture (or plain numbers).

Checked against published totals in tests/test_counting.py: Llama 3.1 405B counts
405,853,388,800 (126 x (570,425,344 attention + 2,617,245,696 MLP + 32,768 norms) +
2 x 2,101,346,304 embedding and head + 16,384 final norm).
"""

from __future__ import annotations

import functools
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict

from apsi.model.architecture import MAX_FFN, Architecture, interned

FlopsConvention = Literal["causal", "full"]
FLOPS_CONVENTIONS: tuple[str, ...] = ("causal", "full")
"""causal: the attention core counts the lower triangle only, Megatron-LM since MR !2789
(2025-03) and Megatron-Bridge (MLM-FLOPS, MB-FLOPS); full: the whole s x s, PaLM App. B,
torchtitan (TT-FLOPS) and the reference arithmetic's 12 L d s."""


class ParameterParts(BaseModel):
    """Parameters by component; `total` is their sum. Biases sit with their matrices; every norm
    weight (layer, final, q/k and MLA latent norms) sits in `norms`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    embedding: int
    """Input embedding V x h, plus a learned position table if any."""
    attention: int
    """Attention projections of every layer (q, k, v, o; MLA's down- and up-projections)."""
    mlp: int
    """Dense MLPs (every layer of a dense model; the dense layers of an MoE model)."""
    experts: int
    """Routed experts (in the active count: the top_k each token uses)."""
    shared_experts: int
    """Experts every token passes through, with their gate if any."""
    router: int
    """Router matrices h x E (and DeepSeek-V3's per-expert bias)."""
    norms: int
    head: int
    """Output head V x h; 0 when tied to the embedding."""

    @property
    def total(self) -> int:
        return (self.embedding + self.attention + self.mlp + self.experts + self.shared_experts
                + self.router + self.norms + self.head)


class ParameterCount(BaseModel):
    """Total and active parameters of an architecture, by part, and its MTP blocks apart."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    total: ParameterParts
    active: ParameterParts
    """What one token uses: the routed experts scaled to top_k of E."""
    mtp: int
    """Parameters of the multi-token-prediction blocks (trained with the model, sharing its
    embedding and head; not in `total`, as DeepSeek-V3's 671B is counted without them)."""
    mtp_active: int
    matmul_active: int
    """Matrix weights one token multiplies through in the model proper: active attention, MLP and
    expert matrices, the router and the output head (V x h even when tied: the logits are a
    matmul); not the embedding lookup, norms or biases (Megatron's FLOPs count, MLM-FLOPS)."""
    mtp_matmul_active: int
    """The same for the MTP blocks: each block's matrices, its 2h -> h projection and the head again."""


def _norm(width: int, a: Architecture) -> int:
    """Weights of one norm over `width` features: RMSNorm a scale, LayerNorm a scale and a bias."""
    return {"rmsnorm": width, "layernorm": 2 * width, "nonparametric": 0}[a.norm]


def _mlp(a: Architecture, ffn: int) -> tuple[int, int]:
    """(matrix weights, biases) of one MLP of intermediate width `ffn`: 3 h f gated, 2 h f not."""
    h = a.width
    matrices = 3 if a.mlp == "swiglu" else 2
    biases = ((matrices - 1) * ffn + h) if a.mlp_bias else 0
    return matrices * h * ffn, biases


def _attention(a: Architecture) -> tuple[int, int, int]:
    """(matrix weights, biases, norm weights) of one layer's attention.

    MLA (MLM-TMU's MLA branch): q = h q_r + q_r a (nope + rope) (or h a (nope +
    rope) without q_r), kv = h (kv_r + rope) + kv_r a (nope + v), o = a v h; the q_r and kv_r
    latent norms are norms. Otherwise q = h a d_h, k = v = h g d_h, o = a d_h h.
    """
    h, n = a.width, a.heads
    if a.kv_lora_rank is not None:  # MLA (Architecture.mla)
        qk = a.qk_nope_dim + a.qk_rope_dim
        if a.q_lora_rank is None:
            q, q_norm = h * n * qk, 0
        else:
            q, q_norm = h * a.q_lora_rank + a.q_lora_rank * n * qk, a.q_lora_rank
        kv = h * (a.kv_lora_rank + a.qk_rope_dim) + a.kv_lora_rank * n * (a.qk_nope_dim + a.v_head_dim)
        return q + kv + n * a.v_head_dim * h, 0, q_norm + a.kv_lora_rank
    q, kv = n * a.head_dim, a.kv_heads * a.head_dim
    weights = 2 * h * q + 2 * h * kv
    biases = {"none": 0, "qkv": q + 2 * kv, "all": q + 2 * kv + h}[a.attention_bias]
    norms = {"none": 0, "head": 2 * a.head_dim, "projection": q + kv}[a.qk_norm]
    return weights, biases, norms


class _Layer(NamedTuple):
    """One layer's parameters by part, and its active matrix weights."""

    attention: int
    mlp: int
    experts: int
    experts_active: int
    shared: int
    router: int
    norms: int
    matmul_active: int


def _layer(a: Architecture, moe: bool) -> _Layer:
    attn_w, attn_b, attn_norms = _attention(a)
    norms = a.norms_per_layer * _norm(a.width, a) + (attn_norms if a.norm != "nonparametric" else 0)
    if not moe:
        w, b = _mlp(a, a.ffn)
        return _Layer(attention=attn_w + attn_b, mlp=w + b, experts=0, experts_active=0, shared=0, router=0,
                      norms=norms, matmul_active=attn_w + w)
    ew, eb = _mlp(a, a.expert_ffn)
    sw, sb = _mlp(a, a.shared_expert_ffn) if a.shared_experts else (0, 0)
    gate = a.width if a.shared_expert_gate else 0
    router = a.width * a.experts
    return _Layer(attention=attn_w + attn_b, mlp=0, experts=a.experts * (ew + eb),
                  experts_active=a.top_k * (ew + eb), shared=a.shared_experts * (sw + sb) + gate,
                  router=router + (a.experts if a.router_bias else 0), norms=norms,
                  matmul_active=attn_w + a.top_k * ew + a.shared_experts * sw + gate + router)


def count_parameters(a: Architecture) -> ParameterCount:
    """Total and active parameters of `a` by part (MLM-TMU), MTP blocks apart."""
    moe_layers = a.moe_layers
    dense, sparse = _layer(a, False), (_layer(a, True) if moe_layers else None)
    n_dense = a.layers - moe_layers

    def parts(active: bool) -> ParameterParts:
        def both(field: str) -> int:
            return n_dense * getattr(dense, field) + (moe_layers * getattr(sparse, field) if sparse else 0)

        return ParameterParts(
            embedding=a.vocab * a.width + a.position_embeddings * a.width,
            attention=both("attention"), mlp=both("mlp"),
            experts=both("experts_active" if active else "experts"), shared_experts=both("shared"),
            router=both("router"), norms=both("norms") + _norm(a.width, a),
            head=0 if a.tied else a.vocab * a.width)

    # An MTP block (DeepSeek-V3 Sec. 2.2): a decoder layer (MoE where the model's later layers
    # are), a 2h -> h projection, and norms on its two inputs and before the shared head.
    block = sparse or dense
    mtp_fixed = 2 * a.width * a.width + 3 * _norm(a.width, a)
    block_total = block.attention + block.mlp + block.experts + block.shared + block.router + block.norms
    block_active = block_total - block.experts + block.experts_active
    head_matmul = a.vocab * a.width
    return ParameterCount(
        total=parts(False), active=parts(True),
        mtp=a.mtp_layers * (block_total + mtp_fixed), mtp_active=a.mtp_layers * (block_active + mtp_fixed),
        matmul_active=n_dense * dense.matmul_active + (moe_layers * sparse.matmul_active if sparse else 0)
        + head_matmul,
        mtp_matmul_active=a.mtp_layers * (block.matmul_active + 2 * a.width * a.width + head_matmul),
    )


def attention_flops_per_layer(heads: int, qk_dim: int, v_dim: int, seq: int, convention: str) -> int:
    """Training FLOPs of one layer's attention core (scores and values) per token, forward and backward.

    Forward: Q K^T is 2 s a d_qk per token and A V 2 s a d_v; backward twice that, so 6 s a (d_qk
    + d_v) over the full s x s (PaLM App. B's 12 L H Q T with d_qk = d_v; the reference's 12 L d s),
    half of it counting only the causal triangle, 3 s a (d_qk + d_v) (Megatron-LM since MR !2789:
    `standard_self_attn_core_term`, MLM-FLOPS; MLA with d_qk = nope + rope). Integers.
    """
    full = 6 * seq * heads * (qk_dim + v_dim)
    return full if convention == "full" else full // 2


def training_flops_per_token(matmul_params: int, attention_layers: int, attention_per_layer: int,
                             recompute: str) -> int:
    """Training FLOPs per token including what recomputation re-runs.

    6 N (forward 2 N, backward 4 N; Kaplan et al. 2020 Sec. 2.1) for the N matrix weights a token
    goes through, plus the attention core of every layer (attention_flops_per_layer). Selective
    recomputation re-runs the attention core forward, a third of it (Korthikanti et al. 2022
    Sec. 5); full recomputation re-runs the whole forward, 2 N plus that third. With the reference
    shape rule (N the active size, a d_h = d, full convention) this is the reference's 6 N + 12 L d s.
    """
    attention = attention_layers * attention_per_layer
    per_token = 6 * matmul_params + attention
    if recompute == "selective":
        per_token += attention // 3
    elif recompute == "full":
        per_token += 2 * matmul_params + attention // 3
    return per_token


def kv_cache_elements_per_token(a: Architecture) -> int:
    """KV-cache elements one token keeps across all layers while serving.

    Grouped-query attention keeps K and V for each KV head: 2 g d_h per layer (Ainslie et al.
    2023). MLA keeps the compressed latent and the shared rotary key: kv_lora_rank + rope per
    layer (DeepSeek-V2 Sec. 2.1.2, "KV cache ... (d_c + d_h^R) l"). MTP blocks are not served.
    """
    per_layer = a.kv_lora_rank + a.qk_rope_dim if a.kv_lora_rank is not None else 2 * a.kv_heads * a.head_dim
    return a.layers * per_layer


class LayerShards(NamedTuple):
    """One layer's parameters by how tensor and expert parallelism split them (MLM-PR4687,
    Megatron-LM PR #4687): `tp` split over TP ranks (q, o, MLA up-projections, dense MLP,
    shared experts); `kv` the K and V projections, split over min(tp, kv_heads) ranks (more TP
    ranks than KV heads replicate each head); `replicated` on every rank (norms, router, MLA
    down-projections and latent norms, the shared-expert gate); `experts` the routed experts,
    split over expert parallelism times expert TP."""

    tp: int
    kv: int
    replicated: int
    experts: int


def mla_down_projection(a: Architecture) -> int:
    """Parameters of one layer's MLA down-projections, the query's (h x q_lora_rank, where it has
    one) and the key-value latent's with its rotary part (h x (kv_lora_rank + qk_rope_dim)): matrices
    every TP rank holds whole (layer_shards counts them among the replicated parts); 0 without MLA."""
    if a.kv_lora_rank is None:
        return 0
    return (a.width * a.q_lora_rank if a.q_lora_rank else 0) + a.width * (a.kv_lora_rank + a.qk_rope_dim)


@functools.lru_cache(maxsize=1024)
def layer_shards(a: Architecture, moe: bool) -> LayerShards:
    """How one (dense or MoE) layer's parameters split; the four parts sum to its count."""
    h, n = a.width, a.heads
    norms = a.norms_per_layer * _norm(h, a)
    if a.kv_lora_rank is not None:  # MLA (Architecture.mla)
        qk = a.qk_nope_dim + a.qk_rope_dim
        down = mla_down_projection(a)
        up = (a.q_lora_rank * n * qk if a.q_lora_rank else h * n * qk) + a.kv_lora_rank * n * (a.qk_nope_dim + a.v_head_dim)
        tp, kv, replicated = up + n * a.v_head_dim * h, 0, down + norms + (a.q_lora_rank or 0) + a.kv_lora_rank
    else:
        weights, biases, qk_norms = _attention(a)
        kv = 2 * h * a.kv_heads * a.head_dim + (2 * a.kv_heads * a.head_dim if a.attention_bias != "none" else 0)
        tp, replicated = weights + biases - kv, norms + (qk_norms if a.norm != "nonparametric" else 0)
    if not moe:
        w, b = _mlp(a, a.ffn)
        return LayerShards(tp=tp + w + b, kv=kv, replicated=replicated, experts=0)
    ew, eb = _mlp(a, a.expert_ffn)
    sw, sb = _mlp(a, a.shared_expert_ffn) if a.shared_experts else (0, 0)
    router = a.width * a.experts + (a.experts if a.router_bias else 0) + (a.width if a.shared_expert_gate else 0)
    return LayerShards(tp=tp + a.shared_experts * (sw + sb), kv=kv, replicated=replicated + router,
                       experts=a.experts * (ew + eb))


FFN_MULTIPLE = 128
"""A sized FFN is a multiple of this: Megatron splits the FFN over TP and an expert's over ETP
(ffn_hidden_size and moe_ffn_hidden_size divisible by them, MLM-ARGS), as engines do; 128 keeps TP
up to 128 whole (and ETP up to 16 of the eighth-wide experts a bare MoE size is placed with), as
the shape rule keeps the width a multiple of 128. An odd width (7B's 18,511) exported with TP 2."""


def ffn_sized(arch: Architecture, target: int, within: float) -> Architecture:
    """A dense architecture whose count is more than `within` from `target`, its FFN the multiple
    of FFN_MULTIPLE at which it counts nearest `target` (the layers, width and heads kept); as it is
    where it counts within that, or where no such FFN up to MAX_FFN does (apsi.inputs.modelspec
    refuses it past its SHAPE_TOLERANCE)."""
    if abs(count_parameters(arch).total.total - target) <= within * target:
        return arch
    low = count_parameters(arch.model_copy(update={"ffn": 1})).total.total
    per = count_parameters(arch.model_copy(update={"ffn": 2})).total.total - low  # parameters per unit of FFN
    if per <= 0:
        return arch
    ffn = FFN_MULTIPLE * max(1, round((1 + (target - low) / per) / FFN_MULTIPLE))
    return interned(arch.model_copy(update={"ffn": ffn})) if ffn <= MAX_FFN else arch
