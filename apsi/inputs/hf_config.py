"""Hugging Face config.json -> Architecture, family by family.

Owns reading a config.json (a file, or a folder holding one) with the standard library's json
(through apsi.textfiles: regular files only, a key given twice refused),
and mapping each family's field names onto apsi's Architecture (HFCFG). A field the
family needs and the file lacks, an unknown model_type, a value of the wrong type: each is one
ApsiError naming the field, never a guess. Where transformers itself falls back when a field is
absent, the same fallback is taken: num_key_value_heads -> num_attention_heads (the class default
where it has its own: _KV_HEADS_DEFAULT); head_dim -> hidden_size / heads (the class default where
it has one: _HEAD_DIM_DEFAULT); Mistral's sliding_window -> 4096; tie_word_embeddings ->
the family's class default (_TIED_DEFAULT); GPT-NeoX attention_bias -> true; Qwen2-MoE
shared_expert_intermediate_size -> 5632 and qkv_bias -> true. No arithmetic: counting is
apsi.model.counting's. rope_theta, rope_scaling and DeepSeek's scoring_func and
routed_scaling_factor are read too: nothing counts them, and the launch exports (apsi.outputs.export)
carry them so that the framework builds the model described.

Families and what sets them apart (transformers' modeling_<family>.py):
  llama, mistral     RMSNorm, SwiGLU, GQA, no biases unless attention_bias / mlp_bias
  mixtral            mistral with num_local_experts experts of intermediate_size in every layer
  qwen2              llama with biases on q, k, v
  qwen2_moe          qwen2 with num_experts of moe_intermediate_size, a shared expert of
                     shared_expert_intermediate_size with a sigmoid gate, decoder_sparse_step
  qwen3, qwen3_moe   no biases, RMSNorm on each head's q and k; MoE as qwen2_moe without shared
  deepseek_v2, _v3   MLA, n_routed_experts + n_shared_experts of moe_intermediate_size after
                     first_k_dense_replace dense layers; V3 adds a router bias and MTP blocks
  gemma, gemma2,     tied embeddings, GeGLU (three matrices), explicit head_dim; gemma2/3 four
  gemma3_text        norms per layer, gemma3 q/k norms
  gpt_neox           LayerNorm with biases, fused qkv with bias, GELU MLP with biases
  olmo, olmo2        olmo: norms without weights; olmo2: two post-norms, q/k norms over the projections
  nemotron           LayerNorm (1p) with biases, squared-ReLU MLP of two matrices, no linear biases
  gpt2               LayerNorm with biases, biases everywhere, learned positions, tied (GPT-3 too)
"""

from __future__ import annotations

import builtins
import json
import os
import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from apsi.errors import InputError
from apsi.model.architecture import Architecture, interned
from apsi.textfiles import load_json, read_text_file

MAX_CONFIG_BYTES = 4 * 2**20
"""A config.json is a few KB; anything past 4 MiB is not one, and is not read whole."""

_LLAMA_LIKE = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "olmo", "olmo2",
               "gemma", "gemma2", "gemma3_text", "nemotron")
FAMILIES: tuple[str, ...] = _LLAMA_LIKE + ("deepseek_v2", "deepseek_v3", "gpt_neox", "gpt2")
"""model_type values apsi reads."""

# transformers' class default for tie_word_embeddings where a config omits it
# (configuration_<family>.py): True for the Gemma and GPT-2 families, False elsewhere.
_TIED_DEFAULT = {"gemma": True, "gemma2": True, "gemma3_text": True, "gpt2": True}

# transformers' class defaults where a config omits the field and the family's default is not the
# generic fallback (transformers 008e574, configuration_<family>.py): MistralConfig and
# MixtralConfig num_key_value_heads=8, Qwen2Config and Qwen3Config 32, Qwen3MoeConfig 4 (each class's own; a
# null there falls back to num_attention_heads, here too); head_dim 256 for the Gemma families
# (GemmaConfig(head_dim=256)) and 128 for Qwen3Config (Qwen3MoeConfig has no head_dim field: its
# attention takes hidden_size / heads).
_KV_HEADS_DEFAULT = {"mistral": 8, "mixtral": 8, "qwen2": 32, "qwen3": 32, "qwen3_moe": 4}
_HEAD_DIM_DEFAULT = {"gemma": 256, "gemma2": 256, "gemma3_text": 256, "qwen3": 128}


class ConfigError(InputError):
    """A config.json that cannot be read as an architecture; the message names the field."""


def config_path(value: str | os.PathLike) -> Path | None:
    """The config.json that `value` names (the file, or a folder's config.json), or None if
    `value` names no existing file or folder."""
    path = Path(value)
    try:
        if path.is_dir():
            return path / "config.json"
        return path if path.exists() else None
    except (OSError, ValueError):  # a name too long, a NUL byte: not a path that exists
        return None


def read_config(path: Path) -> dict[str, Any]:
    """The JSON object in `path`; one line naming the problem otherwise: a FIFO, a device or a
    folder refused before it is opened, a file past MAX_CONFIG_BYTES before it is read, a key
    given twice or a whole number of more than apsi.textfiles.MAX_DIGITS digits when parsed."""
    where = f"config {path}"
    try:
        missing = not path.exists()
    except (OSError, ValueError) as err:
        raise ConfigError(f"{where} cannot be read ({getattr(err, 'strerror', None) or err}): "
                          "give a readable UTF-8 config.json") from None
    if missing:
        raise ConfigError(f"{path.parent} has no config.json: give a Hugging Face model folder or its config.json")
    text = read_text_file(path, "config", MAX_CONFIG_BYTES, kind="Hugging Face config.json", error=ConfigError)
    try:
        data = load_json(text, where, error=ConfigError)
    except (json.JSONDecodeError, RecursionError) as err:
        detail = f" (line {err.lineno}: {err.msg})" if isinstance(err, json.JSONDecodeError) else ""
        raise ConfigError(f"{where} is not JSON{detail}: give a Hugging Face config.json") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{where} holds a JSON {type(data).__name__}, not an object: give a Hugging Face config.json")
    return data


class _Fields:
    """Typed access to a config's fields, each error naming the field and the file."""

    def __init__(self, data: dict[str, Any], where: str):
        self.data, self.where = data, where

    def _get(self, key: str, kind: type, default: Any, required: bool, low: int = 1) -> Any:
        value = self.data.get(key)
        if value is None:
            if required:
                raise ConfigError(f"{self.where} has no {key}: a {self.data.get('model_type')} config needs it")
            return default
        if kind is int:
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"{self.where}: {key} must be a whole number >= {low}, got {value!r:.60}")
        elif kind is bool and not isinstance(value, bool):
            raise ConfigError(f"{self.where}: {key} must be true or false, got {value!r:.60}")
        elif kind is str and not isinstance(value, str):
            raise ConfigError(f"{self.where}: {key} must be a string, got {value!r:.60}")
        elif kind is float and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
            raise ConfigError(f"{self.where}: {key} must be a number > 0, got {value!r:.60}")
        return value

    def int(self, key: str, default: int | None = None, low: int = 1) -> int:
        return self._get(key, int, default, default is None, low)

    # builtins.int: in the class body below the method `int`, a bare `int` names the method.
    def opt_int(self, key: str, low: builtins.int = 1) -> builtins.int | None:
        return self._get(key, int, None, False, low)

    def flag(self, key: str, default: bool) -> bool:
        return self._get(key, bool, default, False)

    def text(self, key: str, default: str) -> str:
        return self._get(key, str, default, False)

    def opt_float(self, key: str) -> builtins.float | None:
        value = self._get(key, float, None, False)
        return None if value is None else builtins.float(value)


def _rope(f: _Fields) -> dict[str, Any]:
    """rope_theta and rope_scaling, as given (None where the config has none: transformers then
    takes its class default, 10000 for the families read here). Read for the launch exports only;
    nothing apsi counts depends on them."""
    scaling = f.data.get("rope_scaling")
    out: dict[str, Any] = dict(rope_theta=f.opt_float("rope_theta"), rope_scaling=None)
    if scaling is None:
        return out
    if not isinstance(scaling, dict):
        raise ConfigError(f"{f.where}: rope_scaling must be an object or null, got {scaling!r:.60}")
    s = _Fields(scaling, f"{f.where} rope_scaling")
    kind = scaling.get("rope_type", scaling.get("type"))
    if not isinstance(kind, str):
        raise ConfigError(f"{f.where}: rope_scaling has no rope_type (llama3, yarn, linear, ...)")
    if kind == "default":  # transformers' name for no scaling
        return out
    factor = s.opt_float("factor")
    if factor is None:
        raise ConfigError(f"{f.where}: rope_scaling {kind} has no factor")
    out["rope_scaling"] = dict(type=kind, factor=factor,
                               original_context=s.opt_int("original_max_position_embeddings"),
                               **{k: s.opt_float(k) for k in ("low_freq_factor", "high_freq_factor", "beta_fast",
                                                              "beta_slow", "mscale", "mscale_all_dim")})
    return out


def architecture_from_config(data: dict[str, Any], where: str = "config") -> Architecture:
    """The Architecture a Hugging Face config describes (FAMILIES lists the model_types)."""
    family = data.get("model_type")
    if family is None:
        raise ConfigError(f"{where} has no model_type: apsi reads the families {', '.join(FAMILIES)}")
    if not isinstance(family, str) or family not in FAMILIES:
        # No nearest name is offered: a family named like another is another architecture (gpt_oss is
        # not gpt_neox), and a config relabelled so would be planned as a model it is not.
        from apsi.errors import brief

        text = data.get("text_config")
        inner = text.get("model_type") if isinstance(text, dict) else None
        hint = (f"; its text_config is a {inner} config, which apsi reads: give that part alone as the config "
                "(the other towers left out)" if isinstance(inner, str) and inner in FAMILIES else "")
        raise ConfigError(f"{where}: model_type {brief(family)} is not a family apsi reads{hint}; it reads "
                          f"{', '.join(FAMILIES)}")
    f = _Fields(data, where)
    build = _gpt2 if family == "gpt2" else _deepseek if family.startswith("deepseek") else _neox if family == "gpt_neox" \
        else _llama_like
    fields = build(f, family)
    if family != "gpt2":  # GPT-2 learns its positions
        fields.update(_rope(f))
    try:
        return interned(Architecture(**fields))
    except ValidationError as err:
        e = err.errors()[0]
        loc = ".".join(str(p) for p in e["loc"])
        message = e["msg"].removeprefix("Value error, ")
        if loc:  # the config's own key, not apsi's name for it (hidden_size, not width)
            key = _config_key(loc, data)
            raise ConfigError(f"{where}: {key if key == loc else f'{key} ({loc})'}: {message}") from None
        named = [f"{field} is {key}" for field in _CONFIG_KEYS if re.search(rf"\b{field}\b", message)
                 and (key := _config_key(field, data)) != field]
        also = f" (in the config: {', '.join(named)})" if named else ""
        raise ConfigError(f"{where}: {message}{also}") from None


_CONFIG_KEYS: dict[str, tuple[str, ...]] = {
    "layers": ("num_hidden_layers", "n_layer"), "width": ("hidden_size", "n_embd"),
    "heads": ("num_attention_heads", "n_head"), "kv_heads": ("num_key_value_heads", "num_attention_heads"),
    "ffn": ("intermediate_size", "n_inner"), "vocab": ("vocab_size",), "position_embeddings": ("n_positions",),
    "experts": ("num_local_experts", "num_experts", "n_routed_experts"), "top_k": ("num_experts_per_tok",),
    "expert_ffn": ("moe_intermediate_size", "intermediate_size"), "shared_experts": ("n_shared_experts",),
    "shared_expert_ffn": ("shared_expert_intermediate_size", "moe_intermediate_size"),
    "expert_groups": ("n_group",), "expert_group_topk": ("topk_group",),
    "dense_layers": ("first_k_dense_replace", "mlp_only_layers"), "moe_every": ("decoder_sparse_step",),
    "qk_nope_dim": ("qk_nope_head_dim",), "qk_rope_dim": ("qk_rope_head_dim",),
    "mtp_layers": ("num_nextn_predict_layers",), "router_score": ("scoring_func",),
    "router_scale": ("routed_scaling_factor",),
}
"""The config.json keys each Architecture field is read from (the first the config gives), so that a
message names the key in the file (transformers' configuration_<family>.py names)."""


def _config_key(field: str, data: dict[str, Any]) -> str:
    """The config's key behind Architecture `field` (hidden_size for width), else `field` itself."""
    return next((key for key in _CONFIG_KEYS.get(field, ()) if key in data), field)


def _attention(f: _Fields, head_dim: int | None = None, kv_heads: int | None = None) -> dict[str, Any]:
    """Shape fields common to every family; `head_dim` and `kv_heads` are the family's defaults
    where the config omits the field (else hidden_size / heads, and the query heads)."""
    h, heads = f.int("hidden_size"), f.int("num_attention_heads")
    absent = "num_key_value_heads" not in f.data  # null: the query heads, as transformers falls back
    kv = f.int("num_key_value_heads", kv_heads if absent and kv_heads is not None else heads)
    if f.data.get("head_dim") is None and head_dim is None and h % heads:
        raise ConfigError(f"{f.where} has no head_dim and hidden_size {h} is not divisible by num_attention_heads {heads}")
    return dict(width=h, heads=heads, kv_heads=kv, head_dim=f.int("head_dim", head_dim or h // heads),
                layers=f.int("num_hidden_layers"), vocab=f.int("vocab_size"))


def _moe_pattern(f: _Fields, family: str) -> dict[str, Any]:
    """decoder_sparse_step and mlp_only_layers (Qwen MoE) as dense_layers / moe_every."""
    step = f.int("decoder_sparse_step", 1)
    only = f.data.get("mlp_only_layers")
    only = [] if only is None else only
    if not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in only):
        raise ConfigError(f"{f.where}: mlp_only_layers must be a list of layer indices, got {only!r:.60}")
    leading = sorted(set(only))
    if leading != list(range(len(leading))) or (leading and step != 1):
        raise ConfigError(f"{f.where}: mlp_only_layers {only!r:.60} is not a run of leading layers with "
                          "decoder_sparse_step 1; apsi models dense layers only at the front")
    return dict(dense_layers=len(leading), moe_every=step)


def _llama_like(f: _Fields, family: str) -> dict[str, Any]:
    gemma = family.startswith("gemma")
    out = _attention(f, head_dim=_HEAD_DIM_DEFAULT.get(family), kv_heads=_KV_HEADS_DEFAULT.get(family))
    act = f.text("hidden_activation", "") or f.text("hidden_act", "gelu_pytorch_tanh" if gemma else "silu")
    gated = family != "nemotron"  # NemotronMLP is up -> relu2 -> down; the others are gated
    out.update(mlp="swiglu" if gated else "gelu", activation=act,
               tied=f.flag("tie_word_embeddings", _TIED_DEFAULT.get(family, False)),
               sliding_window=_sliding_window(f, family))
    bias = f.flag("attention_bias", False)
    if family == "qwen2":  # Qwen2Attention: q, k, v always carry a bias
        out["attention_bias"] = "qkv"
    elif family == "qwen2_moe":
        out["attention_bias"] = "qkv" if f.flag("qkv_bias", True) else "none"
    else:
        out["attention_bias"] = "all" if bias else "none"
    out["mlp_bias"] = f.flag("mlp_bias", False)
    if family == "nemotron":
        out.update(norm="layernorm")
    elif family == "olmo":
        out.update(norm="nonparametric")
    if family in ("gemma2", "gemma3_text"):
        out["norms_per_layer"] = 4
    if family in ("qwen3", "qwen3_moe", "gemma3_text"):
        out["qk_norm"] = "head"
    elif family == "olmo2":
        out["qk_norm"] = "projection"
    if family == "mixtral":
        ffn = f.int("intermediate_size")
        out.update(ffn=ffn, experts=f.int("num_local_experts"), top_k=f.int("num_experts_per_tok"), expert_ffn=ffn)
    elif family in ("qwen2_moe", "qwen3_moe"):
        out.update(ffn=f.int("intermediate_size"), experts=f.int("num_experts"), top_k=f.int("num_experts_per_tok"),
                   expert_ffn=f.int("moe_intermediate_size"), **_moe_pattern(f, family))
        if family == "qwen2_moe":  # Qwen2MoeSparseMoeBlock always builds the gated shared expert
            out.update(shared_experts=1, shared_expert_ffn=f.int("shared_expert_intermediate_size", 5632),
                       shared_expert_gate=True)
    else:
        out["ffn"] = f.int("intermediate_size")
    return out


def _sliding_window(f: _Fields, family: str) -> int | None:
    """The window of the config's sliding-window layers, None where every layer attends in full
    (apsi notes the window and does not model it): Mistral's sliding_window (4096 where the config
    omits it: MistralConfig's default; null: none), Mixtral's and Gemma 2/3's as given, and the
    Qwen families' only under use_sliding_window with a layer at or past max_window_layers
    (Qwen2Config and Qwen3Config set sliding_window to None otherwise; sliding_window 4096 and
    max_window_layers 28 where omitted; Qwen3MoeConfig has no max_window_layers: every layer)."""
    if family == "mistral":
        return f.opt_int("sliding_window") if "sliding_window" in f.data else 4096
    if family in ("mixtral", "gemma2", "gemma3_text"):
        return f.opt_int("sliding_window")
    if family in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe") and f.flag("use_sliding_window", False):
        if f.int("max_window_layers", 0 if family == "qwen3_moe" else 28, low=0) < f.int("num_hidden_layers"):
            return f.int("sliding_window", 4096)
    return None


def _deepseek(f: _Fields, family: str) -> dict[str, Any]:
    out = _attention(f)
    experts = f.opt_int("n_routed_experts")
    if f.flag("attention_bias", False):
        raise ConfigError(f"{f.where}: attention_bias true is not modelled for {family} (its MLA projections would "
                          "carry biases apsi does not count); no published DeepSeek model sets it")
    out.update(ffn=f.int("intermediate_size"), mlp="swiglu", activation=f.text("hidden_act", "silu"),
               tied=f.flag("tie_word_embeddings", False),
               q_lora_rank=f.opt_int("q_lora_rank"), kv_lora_rank=f.int("kv_lora_rank"),
               qk_nope_dim=f.int("qk_nope_head_dim"), qk_rope_dim=f.int("qk_rope_head_dim"), v_head_dim=f.int("v_head_dim"),
               kv_heads=out["heads"], mtp_layers=f.int("num_nextn_predict_layers", 0, low=0))
    if experts:
        if f.int("moe_layer_freq", 1) != 1:
            raise ConfigError(f"{f.where}: moe_layer_freq {f.data['moe_layer_freq']!r} is not 1; apsi models "
                              "DeepSeek MoE layers in every layer after first_k_dense_replace")
        shared = f.int("n_shared_experts", 0, low=0)
        expert_ffn = f.int("moe_intermediate_size")
        # Group-limited routing (DeepSeek-V2 group_limited_greedy, V3 noaux_tc): each token's
        # experts come from topk_group of n_group groups; "greedy" ignores the groups.
        groups = f.int("n_group", 0, low=0)
        limited = groups > 1 and f.text("topk_method", "greedy") != "greedy"
        out.update(experts=experts, top_k=f.int("num_experts_per_tok"), expert_ffn=expert_ffn,
                   expert_groups=groups if limited else 0,
                   expert_group_topk=f.int("topk_group", 0, low=0) if limited else 0,
                   shared_experts=shared, shared_expert_ffn=expert_ffn if shared else 0,
                   dense_layers=f.int("first_k_dense_replace", 0, low=0),
                   router_bias=family == "deepseek_v3" or f.text("topk_method", "") == "noaux_tc",
                   # transformers' DeepseekV3 router always scores with a sigmoid and scales the
                   # routed weights by routed_scaling_factor (DeepseekV3Config default 2.5);
                   # DeepSeek-V2's scoring_func defaults to softmax.
                   router_score=f.text("scoring_func", "sigmoid" if family == "deepseek_v3" else "softmax"),
                   router_scale=f.opt_float("routed_scaling_factor") or (2.5 if family == "deepseek_v3" else None))
    return out


def _neox(f: _Fields, family: str) -> dict[str, Any]:
    out = _attention(f)
    # GPTNeoXAttention: query_key_value and dense carry a bias unless attention_bias is false.
    out.update(ffn=f.int("intermediate_size"), mlp="gelu", activation=f.text("hidden_act", "gelu"),
               tied=f.flag("tie_word_embeddings", False), norm="layernorm",
               attention_bias="all" if f.flag("attention_bias", True) else "none", mlp_bias=True,
               kv_heads=out["heads"])
    return out


def _gpt2(f: _Fields, family: str) -> dict[str, Any]:
    h, heads = f.int("n_embd"), f.int("n_head")
    if h % heads:
        raise ConfigError(f"{f.where}: n_embd {h} is not divisible by n_head {heads}")
    return dict(layers=f.int("n_layer"), width=h, heads=heads, kv_heads=heads, head_dim=h // heads,
                ffn=f.int("n_inner", 4 * h), mlp="gelu", activation=f.text("activation_function", "gelu_new"),
                vocab=f.int("vocab_size"), tied=f.flag("tie_word_embeddings", True),
                position_embeddings=f.int("n_positions"), norm="layernorm", attention_bias="all", mlp_bias=True)
