"""The transformer being planned, as data: one frozen `Architecture` with every dimension named.

Owns the fields, their meaning and their consistency checks, and the reference arithmetic's shape
rule for a bare size (`shape_rule`, `default_layers`, `default_width`). It counts nothing
(apsi.model.counting does) and reads no file (apsi.inputs.hf_config reads a Hugging Face config.json
into one of these).

Field names are the ones a user types (`--kv-heads`, scenario key `kv_heads`), so an override
is a field replaced by name. Every count is a plain number of elements (not bytes); widths are
in elements per token.

Worked example, Llama 3.1 405B (meta-llama/Llama-3.1-405B config.json):
layers=126, width=16384, ffn=53248, mlp="swiglu", heads=128, kv_heads=8, head_dim=128,
vocab=128256, tied=False, norm="rmsnorm"; no experts, no MLA, no MTP.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

HEAD_DIM = 128
"""Default attention head width and width-to-depth ratio (d = 128 * L), as in the reference's
default shapes (48 x 6144 for 21B, 72 x 9216 for 70B); GPT-3 and Llama use head size 128."""

MAX_DIM = 10_000_000
"""Largest width, head count or vocabulary apsi accepts: far past any model, small enough that
every count stays an exact integer well inside float range."""
MAX_FFN = 4 * MAX_DIM
"""Largest MLP width: the reference shape rule's 4 x width at the largest width."""
MAX_LAYERS = 100_000

Mlp = Literal["swiglu", "gelu"]
Norm = Literal["rmsnorm", "layernorm", "nonparametric"]


class RopeScaling(BaseModel):
    """HF rope_scaling: Llama 3's frequency bands (rope_type llama3) or YaRN (DeepSeek-V3)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: str
    """rope_type (or the older key type): llama3, yarn, linear, dynamic, ..."""
    factor: float = Field(gt=0)
    original_context: int | None = Field(default=None, ge=1)
    """original_max_position_embeddings."""
    low_freq_factor: float | None = None
    high_freq_factor: float | None = None
    beta_fast: float | None = None
    beta_slow: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None


class Architecture(BaseModel):
    """A decoder-only transformer, dimension by dimension."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    layers: int = Field(ge=1, le=MAX_LAYERS)
    """Decoder layers (HF num_hidden_layers), MTP blocks not included."""
    width: int = Field(ge=1, le=MAX_DIM)
    """Hidden size h (HF hidden_size)."""
    ffn: int = Field(ge=1, le=MAX_FFN)
    """Intermediate width of a dense MLP (HF intermediate_size); in an MoE model, that of its dense
    layers (unused when every layer is MoE)."""
    mlp: Mlp = "swiglu"
    """swiglu: gated MLP, three matrices h x f (SwiGLU, GeGLU); gelu: two matrices (GELU, squared
    ReLU). Megatron counts 3 h f vs 2 h f (MLM-TMU)."""
    activation: str | None = None
    """The activation's own name (silu, gelu_pytorch_tanh, relu2, ...), for display only."""
    heads: int = Field(ge=1, le=MAX_DIM)
    """Query heads a (HF num_attention_heads)."""
    kv_heads: int = Field(ge=1, le=MAX_DIM)
    """Key/value heads g (HF num_key_value_heads): = heads for MHA, fewer under GQA, 1 for MQA."""
    head_dim: int = Field(ge=1, le=MAX_DIM)
    """Width of one head d_h (HF head_dim, default width / heads); a d_h need not equal width."""
    vocab: int = Field(ge=0, le=MAX_DIM)
    """Vocabulary V (HF vocab_size); 0 for the reference shape rule, which has no embedding."""
    tied: bool = False
    """Input embedding and output head share one V x h matrix (HF tie_word_embeddings)."""
    position_embeddings: int = Field(default=0, ge=0, le=MAX_DIM)
    """Rows of a learned absolute position table (GPT-2/GPT-3: context length); 0 with RoPE."""
    norm: Norm = "rmsnorm"
    """RMSNorm (h weights), LayerNorm (h weights + h biases) or a norm without weights (OLMo 1)."""
    norms_per_layer: int = Field(default=2, ge=0, le=8)
    """Norms in one layer: 2 pre-norms usually, 4 in Gemma 2/3 (pre and post), 2 post-norms in OLMo 2."""
    qk_norm: Literal["none", "head", "projection"] = "none"
    """Norms on queries and keys: per head (Qwen3, Gemma 3: d_h weights each) or over the whole
    projection (OLMo 2: a d_h and g d_h weights)."""
    attention_bias: Literal["none", "qkv", "all"] = "none"
    """Biases on the attention projections: none (Llama), on q, k, v (Qwen2) or all four (GPT-2, NeoX)."""
    mlp_bias: bool = False
    """Biases on the MLP matrices (GPT-2, NeoX)."""
    sliding_window: int | None = Field(default=None, ge=1)
    """Tokens a query attends to when the model uses sliding-window attention (Mistral 7B, Gemma 2);
    apsi does not model the window (see method.md) and says so when seq exceeds it."""

    # Mixture of experts (all zero for a dense model).
    experts: int = Field(default=0, ge=0, le=1_000_000)
    """Routed experts E per MoE layer (HF num_local_experts / num_experts / n_routed_experts)."""
    top_k: int = Field(default=0, ge=0, le=1_000_000)
    """Routed experts each token uses (HF num_experts_per_tok)."""
    expert_ffn: int = Field(default=0, ge=0, le=MAX_FFN)
    """Intermediate width of one routed expert (HF moe_intermediate_size; Mixtral: intermediate_size)."""
    shared_experts: int = Field(default=0, ge=0, le=1024)
    """Experts every token uses (HF n_shared_experts; Qwen2-MoE: 1 when shared_expert_intermediate_size is set)."""
    shared_expert_ffn: int = Field(default=0, ge=0, le=MAX_FFN)
    """Intermediate width of one shared expert (DeepSeek: moe_intermediate_size; Qwen2-MoE:
    shared_expert_intermediate_size)."""
    shared_expert_gate: bool = False
    """A sigmoid gate h -> 1 on the shared expert's output (Qwen2-MoE)."""
    router_bias: bool = False
    """A per-expert bias of E terms on the router (DeepSeek-V3 e_score_correction_bias)."""
    expert_groups: int = Field(default=0, ge=0, le=1_000_000)
    """Groups of contiguous experts that group-limited routing chooses among (HF n_group;
    DeepSeek-V3: 8); 0 when routing is not group-limited."""
    expert_group_topk: int = Field(default=0, ge=0, le=1_000_000)
    """Groups each token's experts are drawn from under group-limited routing (HF topk_group;
    DeepSeek-V3: 4, "each token will be sent to at most 4 nodes", DSV3 Sec. 3.2.2)."""
    dense_layers: int = Field(default=0, ge=0, le=MAX_LAYERS)
    """Leading layers with a dense MLP in an MoE model (HF first_k_dense_replace)."""
    moe_every: int = Field(default=1, ge=1, le=MAX_LAYERS)
    """After the dense layers, every n-th layer is MoE, counted from the n-th (HF decoder_sparse_step)."""

    # Multi-head latent attention (DeepSeek-V2/V3); kv_lora_rank set means MLA.
    q_lora_rank: int | None = Field(default=None, ge=1, le=MAX_DIM)
    """Rank of the query down-projection; None projects queries directly (DeepSeek-V2-Lite)."""
    kv_lora_rank: int | None = Field(default=None, ge=1, le=MAX_DIM)
    """Rank of the compressed key/value latent that the KV cache holds."""
    qk_nope_dim: int = Field(default=0, ge=0, le=MAX_DIM)
    """Per-head query/key width without rotary embedding (HF qk_nope_head_dim)."""
    qk_rope_dim: int = Field(default=0, ge=0, le=MAX_DIM)
    """Per-head query/key width with rotary embedding, the key part shared by all heads (HF qk_rope_head_dim)."""
    v_head_dim: int = Field(default=0, ge=0, le=MAX_DIM)
    """Per-head value width (HF v_head_dim)."""

    # What launching the model needs and the memory does not (apsi.outputs.export): RoPE and the router's
    # scores. None where the description does not say (a size, a shape, a config without them).
    rope_theta: float | None = Field(default=None, gt=0)
    """Base of the rotary embedding (HF rope_theta; Llama 3.1: 500,000)."""
    rope_scaling: RopeScaling | None = None
    """The rotary embedding's long-context scaling (HF rope_scaling), or None for none."""
    router_score: Literal["softmax", "sigmoid"] | None = None
    """How the router turns logits into expert scores (HF scoring_func; DeepSeek-V3: sigmoid)."""
    router_scale: float | None = Field(default=None, gt=0)
    """Factor on the routed experts' combined weights (HF routed_scaling_factor; DeepSeek-V3: 2.5)."""

    mtp_layers: int = Field(default=0, ge=0, le=64)
    """Multi-token-prediction depth (HF num_nextn_predict_layers): extra blocks trained alongside
    the model (DeepSeek-V3 Sec. 2.2), sharing its embedding and head."""

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def moe(self) -> bool:
        return self.experts > 0

    def is_moe_layer(self, index: int) -> bool:
        """Whether layer `index` (from 0) has routed experts: after the dense ones, every
        moe_every-th, counted from the moe_every-th (Qwen's decoder_sparse_step)."""
        return self.moe and index >= self.dense_layers and (index - self.dense_layers + 1) % self.moe_every == 0

    @property
    def moe_layers(self) -> int:
        """Layers with routed experts (is_moe_layer)."""
        if not self.moe:
            return 0
        return max(0, self.layers - self.dense_layers) // self.moe_every

    @property
    def qk_head_dim(self) -> int:
        """Width of one head's query and key: d_h, or nope + rope under MLA."""
        return self.qk_nope_dim + self.qk_rope_dim if self.mla else self.head_dim

    @property
    def v_dim(self) -> int:
        """Width of one head's value: d_h, or v_head_dim under MLA."""
        return self.v_head_dim if self.mla else self.head_dim

    def __hash__(self) -> int:
        # The model functions' caches hash their Architecture on every call: an interned one
        # (interned()) keeps its hash; any other hashes its fields as pydantic's frozen hash does.
        entry = _HASHES.get(id(self))
        if entry is not None and entry[0] is self:
            return entry[1]
        return hash(tuple(self.__dict__.values()))

    @model_validator(mode="after")
    def _consistent(self) -> "Architecture":
        problems = consistency_problems(self)
        if problems:
            raise ValueError(problems[0])
        return self


_INTERNED: dict[Architecture, Architecture] = {}
_HASHES: dict[int, tuple[Architecture, int]] = {}
"""The hash of each interned Architecture, by id (each is kept alive by _INTERNED)."""
_INTERNED_MAX = 4096


def interned(a: Architecture) -> Architecture:
    """The one Architecture object equal to `a`: the first built. The model functions cache by
    Architecture (functools.lru_cache), and a cache hit on the same object skips pydantic's
    field-by-field comparison; a warm plan() rebuilds its Architecture on every call. Bounded:
    past _INTERNED_MAX distinct architectures the table starts again."""
    if len(_INTERNED) >= _INTERNED_MAX:
        _INTERNED.clear()
        _HASHES.clear()
    out = _INTERNED.setdefault(a, a)
    if out is a:
        _HASHES[id(a)] = (a, hash(tuple(a.__dict__.values())))
    return out


def consistency_problems(a: Architecture) -> list[str]:
    """What makes `a` not a buildable transformer, each as a sentence naming the fields."""
    out = []
    if a.heads % a.kv_heads:
        out.append(f"kv_heads {a.kv_heads} must divide heads {a.heads} (each KV head serves a whole group of query heads)")
    if a.moe:
        if not 1 <= a.top_k <= a.experts:
            out.append(f"top_k {a.top_k} must be from 1 to the {a.experts} experts")
        if a.expert_ffn < 1:
            out.append("expert_ffn is needed with experts: the intermediate width of one routed expert")
        if a.expert_groups and (a.experts % a.expert_groups or not 1 <= a.expert_group_topk <= a.expert_groups):
            out.append(f"expert_groups {a.expert_groups} must divide the {a.experts} experts, and expert_group_topk "
                       f"{a.expert_group_topk} be from 1 to expert_groups")
        if a.moe_layers < 1:
            out.append(f"dense_layers {a.dense_layers} and moe_every {a.moe_every} leave no MoE layer among the "
                       f"{a.layers} layers: give fewer dense layers")
    elif a.top_k or a.shared_experts or a.dense_layers or a.expert_groups:
        out.append("top_k, shared_experts and dense_layers describe experts: give experts (the routed experts per layer)")
    if a.shared_experts and a.shared_expert_ffn < 1:
        out.append("shared_experts needs the shared expert's width (shared_expert_ffn, or expert_ffn)")
    if a.mla and (a.qk_nope_dim + a.qk_rope_dim < 1 or a.v_head_dim < 1):
        out.append("multi-head latent attention needs qk_nope_dim or qk_rope_dim, and v_head_dim")
    if not a.mla and (a.q_lora_rank is not None):
        out.append("q_lora_rank belongs to multi-head latent attention: give kv_lora_rank too")
    return out


def default_layers(active_params: int) -> int:
    """Depth for a model of `active_params` when none is given.

    The reference shape keeps d = 128 L, so N = 12 L d^2 = 12 * 128^2 * L^3 (the 12 L d^2
    parameter count of Kaplan et al. 2020, Eq. 2.1, without embeddings). L is the multiple of 8
    nearest the cube root: 21B -> 48, 32B -> 56, 70B -> 72. Where that multiple would be 0 (cube
    root below 4, i.e. under 12 * 128^2 * 4^3 = 12,582,912 parameters), the nearest whole number
    of layers (at least 1). Python's round() sends exact halves to the even neighbour.
    """
    exact = (active_params / (12 * HEAD_DIM**2)) ** (1 / 3)
    by_eight = 8 * round(exact / 8)
    return by_eight if by_eight >= 8 else max(1, round(exact))


def default_width(active_params: int, layers: int) -> int:
    """Width for `layers` layers holding `active_params` (12 L d^2 = N), a multiple of 128."""
    exact = math.sqrt(active_params / (12 * layers))
    return max(HEAD_DIM, HEAD_DIM * round(exact / HEAD_DIM))


def shape_rule(active: int, layers: int | None, width: int | None, heads: int | None) -> tuple[int, int, int]:
    """(layers, width, heads) of the reference shape rule for `active` parameters, keeping any given.

    d = 128 L with L from default_layers when neither is given; given layers,
    width solves 12 L d^2 = N (default_width); given width, layers = N / (12 d^2) rounded (at
    least 1). Heads = width / 128 unless given; raises ValueError when the width is not a
    multiple of 128 and no head count is given.
    """
    if width is None:
        if layers is None:
            layers = default_layers(active)
            width = HEAD_DIM * layers
        else:
            width = default_width(active, layers)
    elif layers is None:
        layers = max(1, round(active / (12 * width**2)))
    if heads is None:
        if width % HEAD_DIM:
            raise ValueError(f"width {width} is not a multiple of {HEAD_DIM}: give heads (a divisor of the width)")
        heads = width // HEAD_DIM
    return layers, width, heads
