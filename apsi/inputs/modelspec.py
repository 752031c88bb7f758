"""Which model is planned: PARAMS (a size, a preset or a config.json) and the architecture options.

Owns turning the positional PARAMS and the options `layers`, `width`, `heads`, `kv_heads`, ...
into one frozen ModelSpec: the Architecture, the parameter counts the plan uses, where they came
from and which fields were derived. It reads a config.json through apsi.inputs.hf_config and presets
through apsi.inputs.presets, counts through apsi.model.counting, and plans nothing.

Four cases, by what is given (docs/method.md, "Architectures"):
  - a bare size, or a size with only layers / width / heads (the reference arithmetic's options):
    the reference shape rule; the size is the parameter count, exactly as the reference computes.
  - a size with other fields, layers or width derived from the size: the rule fills the missing
    fields (its FFN sized to count the size where 4 d counts past RULE_ROUNDING), the plan lists
    them, and the size is the parameter count under the reference arithmetic; a framework or
    engine counts the architecture (placed()), which is refused past SHAPE_TOLERANCE from the size.
  - a size with layers and width both given, plus other fields: the architecture is described in
    full (missing fields from the rule) and its own count is used; if it differs from the size by
    more than SIZE_TOLERANCE, the plan says so in one line.
  - a preset or a config.json, with any fields overriding it: the architecture's count.
Under a framework a bare size is planned as its shape-rule architecture, its FFN sized to count
the size where the rule's steps count past RULE_ROUNDING (placed(); counted(): that architecture's
count for memory and FLOPs alike); the reference arithmetic keeps the size.
Sizes default to the reference's full-attention FLOPs convention, architectures to Megatron's causal.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from apsi.errors import InputError, brief, did_you_mean, unknown
from apsi.fmt import billions, counted as noun
from apsi.model.architecture import MAX_DIM, MAX_FFN, MAX_LAYERS, Architecture, interned, shape_rule
from apsi.model.counting import FLOPS_CONVENTIONS, ParameterParts, count_parameters, ffn_sized
from apsi.units import human, looks_like_size, parse_flag, parse_size, refuse_bool

ARCHITECTURE_OPTIONS: tuple[str, ...] = (
    "layers", "width", "heads", "kv_heads", "head_dim", "ffn", "mlp", "vocab", "tied", "experts", "top_k",
    "shared_experts", "expert_ffn", "dense_layers", "q_lora_rank", "kv_lora_rank", "qk_nope_dim",
    "qk_rope_dim", "v_head_dim", "mtp_layers")
"""Options that set one Architecture field each, named as the field (plan(), scenario keys, --kebab-case)."""
REFERENCE_OPTIONS = ("layers", "width", "heads")
"""The options the reference arithmetic has: with only these, a size keeps the reference arithmetic."""
SIZE_TOLERANCE = 0.02
"""How far a given size and a fully described architecture's count may differ before the plan
says so (2%: published sizes round, e.g. Llama 3.1 70B counts 70.55B)."""
ACTIVE_TOLERANCE = 0.02
"""How far a given `active` may differ from an MoE architecture's active count before it is an error
(2%: DeepSeek-V3's published "37B activated" is 37.55B counted)."""

MLP_KINDS = ("swiglu", "gelu")


class ModelSpec(BaseModel):
    """The model a run plans: its architecture and the counts every formula uses."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    architecture: Architecture
    name: str | None
    """The model's name for a preset (Llama 3.1 405B); None otherwise."""
    source: str
    """size (a bare size: the reference shape rule), shape (a size with architecture fields), preset or config."""
    family: str | None = None
    """The config's model_type, for a preset or a config."""
    origin: str
    """What was given: the preset's key, the config's path, or the size as typed."""
    params: int
    """Total parameters the plan reports and serves (MoE: all experts; without MTP blocks)."""
    active: int
    """Parameters one token uses."""
    mtp_params: int = 0
    """Parameters of multi-token-prediction blocks, trained with the model (model states count them)."""
    matmul_active: int
    """Matrix weights per token behind the 6 N of the FLOPs (with the MTP blocks' when there are
    any); for a size, the active size itself, as the reference counts."""
    parts: ParameterParts | None = None
    """The count by part, when the architecture is the count (None when the size is)."""
    active_parts: ParameterParts | None = None
    derived: tuple[str, ...] = ()
    """Fields not given and filled by the reference shape rule or solved from the size."""
    notes: tuple[str, ...] = ()
    """One line each: the fields derived from a size, a size that disagrees with the architecture."""
    flops_convention: str
    """causal or full (apsi.model.counting.FLOPS_CONVENTIONS)."""
    context_tokens: int | None = None
    """The longest sequence the model was built for: its config's max_position_embeddings (GPT-2
    and GPT-3: n_positions); None for a size, or where the config gives none. A serving engine
    refuses a longer --max-model-len (apsi.outputs.export.engines)."""

    @property
    def trained_params(self) -> int:
        """Parameters with model states during training: the model and its MTP blocks."""
        return self.params + self.mtp_params


class _Options(BaseModel):
    """Range checks for the architecture options given (all optional)."""

    model_config = ConfigDict(extra="forbid")
    _no_bools = field_validator("*", mode="before")(refuse_bool)

    layers: int | None = Field(default=None, ge=1, le=MAX_LAYERS)
    width: int | None = Field(default=None, ge=1, le=MAX_DIM)
    heads: int | None = Field(default=None, ge=1, le=MAX_DIM)
    kv_heads: int | None = Field(default=None, ge=1, le=MAX_DIM)
    head_dim: int | None = Field(default=None, ge=1, le=MAX_DIM)
    ffn: int | None = Field(default=None, ge=1, le=MAX_FFN)
    vocab: int | None = Field(default=None, ge=0, le=MAX_DIM)
    experts: int | None = Field(default=None, ge=0, le=1_000_000)
    top_k: int | None = Field(default=None, ge=0, le=1_000_000)
    shared_experts: int | None = Field(default=None, ge=0, le=1024)
    expert_ffn: int | None = Field(default=None, ge=1, le=MAX_FFN)
    dense_layers: int | None = Field(default=None, ge=0, le=MAX_LAYERS)
    q_lora_rank: int | None = Field(default=None, ge=1, le=MAX_DIM)
    kv_lora_rank: int | None = Field(default=None, ge=1, le=MAX_DIM)
    qk_nope_dim: int | None = Field(default=None, ge=0, le=MAX_DIM)
    qk_rope_dim: int | None = Field(default=None, ge=0, le=MAX_DIM)
    v_head_dim: int | None = Field(default=None, ge=1, le=MAX_DIM)
    mtp_layers: int | None = Field(default=None, ge=0, le=64)


def _problem(err: ValidationError) -> str:
    """The first problem pydantic found, as "field: what is wrong, got value" (or the rule's own
    sentence for a rule over several fields)."""
    e = err.errors()[0]
    message = e["msg"].removeprefix("Value error, ")
    if not e["loc"]:
        return message
    field = ".".join(str(p) for p in e["loc"])
    return f"{field}: {message[:1].lower() + message[1:]}, got {brief(e.get('input'), 60)}"


def check_options(fields: dict[str, Any]) -> dict[str, Any]:
    """The architecture options given (None dropped), typed and range-checked."""
    given = {k: v for k, v in fields.items() if v is not None}
    for key in given:
        if key not in ARCHITECTURE_OPTIONS:
            raise unknown("option", key, ARCHITECTURE_OPTIONS)
    out: dict[str, Any] = {}
    if "mlp" in given:
        value = given.pop("mlp")
        if not isinstance(value, str) or value.strip().lower() not in MLP_KINDS:
            raise unknown("mlp kind", value, MLP_KINDS)
        out["mlp"] = value.strip().lower()
    if "tied" in given:
        out["tied"] = parse_flag(given.pop("tied"), "tied", "input embedding and output head shared")
    try:
        numbers = _Options(**given)
    except ValidationError as err:
        raise InputError(_problem(err)) from None
    return {**out, **numbers.model_dump(exclude_none=True)}


def resolve_model(params: Any, *, active: Any = None, flops_convention: Any = None, **fields: Any) -> ModelSpec:
    """The ModelSpec for PARAMS and the options (module docstring: the four cases). PARAMS is
    judged first, then active, then the options, so that the first problem reported is the
    first one given."""
    source = _source(params)
    if isinstance(source, int):
        act = source if active is None else parse_size(active, "active")
        if act > source:
            raise InputError(f"active parameters ({act:,}) exceed total parameters ({source:,}): active must be <= params")
    given = check_options(fields)
    if flops_convention is not None and (not isinstance(flops_convention, str)
                                         or flops_convention.strip().lower() not in FLOPS_CONVENTIONS):
        raise unknown("flops_convention", flops_convention, FLOPS_CONVENTIONS)
    convention = flops_convention.strip().lower() if flops_convention is not None else None
    if isinstance(source, int):
        return _from_size(source, params, act, active, given, convention)
    kind, origin, name, family, base, context = source
    spec = _from_architecture(base, kind, origin, name, active, given, convention or "causal", family=family)
    return spec if context is None else spec.model_copy(update={"context_tokens": context})


def _context(config: dict[str, Any], where: str) -> int | None:
    """A Hugging Face config's context length: max_position_embeddings (n_positions for GPT-2's
    kind), None where it gives none; one line naming the field where it is not a whole number of
    at least 1 (0, -5, 1.5 and "big" were taken for no limit at all)."""
    from apsi.inputs.hf_config import ConfigError

    key = "max_position_embeddings" if config.get("max_position_embeddings") is not None else "n_positions"
    value = config.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where}: {key} must be a whole number >= 1 (the longest sequence the model takes), "
                          f"got {value!r:.60}")
    return value


def _source(params: Any) -> int | tuple[str, str, str | None, str, Architecture, int | None]:
    """A size (int), or (kind, origin, name, model_type, architecture, context length) for a
    config.json or a preset.

    An existing file, or a folder holding config.json, is read before the preset names are looked
    up, so that a model folder named like a preset (a download of meta-llama/Llama-3.1-8B) is
    read as the files it holds."""
    if isinstance(params, Mapping):
        # A config's contents (transformers' AutoConfig(...).to_dict()) is read from its file, whose
        # folder an export and an engine launch name: a size's message would tell it to give a number.
        raise InputError(f"params is a mapping ({brief(params, 60)}), not a size, a preset or a config.json's path: "
                         "write the config to a config.json (json.dump) and give its path, or give a size (70B) "
                         "or a preset name (apsi models lists them)")
    if not isinstance(params, (str, os.PathLike)) or (isinstance(params, str) and (looks_like_size(params)
                                                                                  or not params.strip())):
        return parse_size(params, "params")
    from apsi.inputs.hf_config import architecture_from_config, config_path, read_config
    from apsi.inputs.presets import find_preset, preset_architecture, presets

    text = os.fspath(params)
    path = config_path(text)
    preset = find_preset(text) if isinstance(params, str) else None
    if path is not None and (path.exists() or preset is None):
        data = read_config(path)
        arch = architecture_from_config(data, where=f"config {path}")  # refuses a missing or unknown model_type
        return "config", str(path), None, data["model_type"], arch, _context(data, f"config {path}")
    if preset is not None:
        return ("preset", preset.key, preset.name, preset.config["model_type"], preset_architecture(preset),
                _context(preset.config, f"preset {preset.key}"))
    if "\0" in text or os.path.lexists(text):  # a NUL byte, or a link to nothing (a loop, a missing target)
        why = "a path cannot hold a NUL byte" if "\0" in text else "a symbolic link to no file (a loop or a missing target)"
        raise InputError(f"params {text!r:.200} cannot be read: {why}; give the path of a Hugging Face config.json "
                         "or of the model folder holding it")
    if "/" in text or os.sep in text or text.lower().endswith(".json"):
        raise InputError(f"params {text!r:.200}: no such file or folder; give the path of a Hugging Face "
                         "config.json or of the model folder holding it")
    raise InputError(f"params {text!r:.200} is not a size, a preset or a config.json: give a number with an optional "
                     f"K/M/B/T suffix (70B, 1.5T, 7e10), a preset name ({did_you_mean(text, presets())}apsi models "
                     "lists them) or the path of a Hugging Face config.json")


def _active_check(arch_active: int, active: Any, what: str, embedding: int = 0) -> None:
    """`active`, where given, within ACTIVE_TOLERANCE of the architecture's count per token; the
    refusal gives the count without the input `embedding` too (a lookup some model cards leave out:
    DeepSeek-V2-Lite's 2.4B activated is 2.66B less its 0.21B embedding)."""
    if active is None:
        return
    given = parse_size(active, "active")
    if abs(given - arch_active) > ACTIVE_TOLERANCE * arch_active:
        without = f" ({arch_active - embedding:,} without the input embedding)" if embedding else ""
        raise InputError(f"active {given:,} does not match {what}, which uses {arch_active:,} parameters per token"
                         f"{without}: leave active out, or change the architecture (experts, top_k, expert_ffn)")


def _from_architecture(base: Architecture, kind: str, origin: str, name: str | None, active: Any,
                       given: dict[str, Any], convention: str, derived: tuple[str, ...] = (),
                       notes: tuple[str, ...] = (), family: str | None = None) -> ModelSpec:
    if base.mla and "kv_heads" in given and given["kv_heads"] != base.kv_heads:
        # MLA's keys and values come from one latent per token (kv_heads is the heads, as the config
        # loader sets it): a KV head count changes nothing real, and moved the step time.
        raise InputError(f"kv_heads has no meaning under the multi-latent attention of the {kind} {origin}: its keys "
                         "and values come from one latent per token; leave kv_heads out")
    arch = _build(base.model_dump(), given, f"the {kind} {origin}") if given else base
    counts = count_parameters(arch)
    _active_check(counts.active.total, active, f"the {kind}'s architecture" if kind != "shape" else "the architecture",
                  counts.active.embedding)
    return ModelSpec(
        architecture=arch, name=name, source=kind, family=family, origin=origin, params=counts.total.total,
        active=counts.active.total, mtp_params=counts.mtp, matmul_active=counts.matmul_active + counts.mtp_matmul_active,
        parts=counts.total, active_parts=counts.active, derived=derived, notes=notes, flops_convention=convention)


def _build(fields: dict[str, Any], given: dict[str, Any], what: str) -> Architecture:
    """An Architecture from `fields` with `given` replacing fields by name, checked as a whole."""
    merged = {**fields, **given}
    if "expert_ffn" in given and fields.get("shared_expert_ffn") == fields.get("expert_ffn") and fields.get("shared_experts"):
        merged["shared_expert_ffn"] = given["expert_ffn"]  # DeepSeek's shared experts have the routed width
    if merged.get("shared_experts") and not merged.get("shared_expert_ffn"):
        merged["shared_expert_ffn"] = merged.get("expert_ffn", 0)
    try:
        return interned(Architecture(**merged))
    except ValidationError as err:
        changed = ", ".join(f"{k} {v}" for k, v in given.items())
        raise InputError(f"{what}{' with ' + changed if changed else ''} is not buildable: {_problem(err)}") from None


def _from_size(total: int, raw: Any, act: int, active: Any, given: dict[str, Any], convention: str | None) -> ModelSpec:
    try:
        layers, width, heads = shape_rule(act, given.get("layers"), given.get("width"), given.get("heads"))
    except ValueError as err:
        raise InputError(str(err)) from None
    if not 1 <= layers <= MAX_LAYERS or not 1 <= width <= MAX_DIM:
        raise InputError(f"the shape {layers:,} layers x {width:,} wide (from {act:,} active parameters) is "
                         f"outside 1..{MAX_LAYERS:,} layers and 1..{MAX_DIM:,} wide: give layers and width")
    if width % heads:
        raise InputError(f"width {width} is not divisible by {heads} heads: heads must divide the width")
    # The reference shape rule as an architecture: FFN 4 d with two matrices (12 L d^2 in all),
    # multi-head attention of width d, no vocabulary and no norms (the reference arithmetic).
    rule = dict(layers=layers, width=width, heads=heads, kv_heads=heads, head_dim=width // heads, ffn=4 * width,
                mlp="gelu", vocab=0, tied=False, norm="nonparametric", norms_per_layer=0)
    text = raw if isinstance(raw, str) else f"{total:,}"
    derived = tuple(k for k in ("layers", "width", "heads") if k not in given)
    # A field given at the rule's own value (--mlp gelu, --kv-heads equal to heads) changes nothing.
    fields = Architecture.model_fields
    extra = {k: v for k, v in given.items() if k not in REFERENCE_OPTIONS and v != rule.get(k, fields[k].default)}
    if not extra:
        return ModelSpec(architecture=_build(rule, {}, "the reference shape"), name=None, source="size", origin=text,
                         params=total, active=act, matmul_active=act, derived=derived,
                         flops_convention=convention or "full")
    full = "layers" in given and "width" in given
    if extra.get("mtp_layers") and not full:
        raise InputError("mtp_layers needs the architecture in full (give layers and width, or use a preset): with a "
                         "size as the parameter count the MTP blocks would have no parameters")
    derived += tuple(k for k in ("kv_heads", "head_dim", "ffn") if k not in given)
    if extra.get("experts"):
        if "top_k" not in given:
            raise InputError("top_k is needed with experts: the routed experts each token uses")
        if "expert_ffn" not in given:
            if full:
                raise InputError("expert_ffn is needed with experts when layers and width are given: the "
                                 "architecture, not the size, is then the parameter count")
            rule["expert_ffn"] = _solve_expert_ffn(total, act, rule, given)
            derived += ("expert_ffn",)
    arch = _build(rule, given, "the architecture")
    sized = ""
    if not full:
        rule_ffn = arch.ffn
        arch = _near_the_size(arch, total, act, text, given)
        if arch.ffn != rule_ffn:
            sized = f" (the FFN sized so the architecture counts {text if arch.moe or act == total else human(act)})"
    words = _derived_words(derived, arch)
    if full:
        # Described in full: the architecture is the count; a size that disagrees is said so.
        counted = count_parameters(arch).total.total
        notes: tuple[str, ...] = (f"derived by the reference shape rule: {words}",) if words else ()
        if abs(counted - total) > SIZE_TOLERANCE * total:
            notes += (f"{text} parameters were given but the architecture counts {billions(counted)}: "
                      "the plan uses the architecture's count",)
        return _from_architecture(arch, "shape", text, None, active, {}, convention or "full", derived=derived,
                                  notes=notes)
    return ModelSpec(architecture=arch, name=None, source="shape", origin=text, params=total, active=act,
                     matmul_active=act, derived=derived, notes=(f"derived from {text} by the reference shape rule: "
                                                              f"{words}{sized}",),
                     flops_convention=convention or "full")


RULE_ROUNDING = 0.05
"""How far the reference shape rule's own architecture may count from its size (whole layers and a
width of whole heads: 70B counts 73.38B). A size with fields whose derived architecture counts
within it keeps the rule's FFN of 4 d, as the bare size does; past it the FFN is sized to count the size."""
SHAPE_TOLERANCE = 0.10
"""How far a size with fields (layers or width derived) may count from its size and active size
before it is refused: the shape rule's own rounding is within 5% (70B counts 73.38B); past 10% the
fields describe another model than the size (top-8 of 64 experts cannot be 32B active of 1T)."""


def _near_the_size(arch: Architecture, total: int, act: int, text: str, given: dict[str, Any]) -> Architecture:
    """A size with fields, its FFN (when derived, dense, and the rule's 4 d counts past RULE_ROUNDING
    from the size) the width at which the architecture counts the size (the active size, for a bare
    MoE size whose experts placed() adds); refused in one line when it counts more than
    SHAPE_TOLERANCE from it, so that the size and the model planned under a framework or engine
    (its architecture's count: placed()) are one model."""
    changed = ", ".join(f"{k} {v}" for k, v in given.items())
    target = total if arch.moe else act  # a dense architecture is the active part of a bare MoE size
    if "ffn" not in given and not arch.moe:
        arch = ffn_sized(arch, target, RULE_ROUNDING)
    counts = count_parameters(arch)
    have, used = counts.total.total, counts.active.total
    if abs(have - target) > SHAPE_TOLERANCE * target or (arch.moe and abs(used - act) > SHAPE_TOLERANCE * act):
        size = text + (f" ({human(act)} active)" if act < total else "")
        what = f"{billions(have)}" + (f" ({billions(used)} active)" if used < have else "")
        raise InputError(f"{size} with {changed}: the architecture the shape rule derives counts {what}, more than "
                         f"{SHAPE_TOLERANCE:.0%} from the size; give layers and width (the architecture is then the "
                         "count), or fields that fit the size")
    return arch


def counted(m: ModelSpec, architecture: Architecture | None = None) -> tuple[ModelSpec, str]:
    """A bare size as its shape-rule architecture (or `architecture`, the one a framework placed
    for it: a bare MoE size's experts), counted: params, active and the matrix weights behind the
    FLOPs' 6 N all from apsi.model.counting.count_parameters, with the Note that says so. The
    origin (the size as typed) and the FLOPs convention stay. A framework plans a bare size so
    (placed(), apsi.training.frameworks.evaluate.placeable): its memory model places the architecture's layers, and
    the FLOPs must be of the same model. The reference arithmetic keeps the size (it never calls
    this)."""
    arch = m.architecture if architecture is None else architecture
    counts = count_parameters(arch)
    given = m.origin + (f" ({human(m.active)} active)" if m.active < m.params else "")
    active = f" ({billions(counts.active.total)} active)" if counts.active.total < counts.total.total else ""
    how = []
    if arch.width != m.architecture.width:
        how.append(f"its width solved for the size at its {noun(arch.layers, 'layer')}: {arch.width:,}, not the rule's "
                   f"{m.architecture.width:,}, {noun(arch.heads, 'head')} of {arch.head_dim}")
    if arch.ffn != 4 * arch.width:
        how.append(f"its FFN sized to {arch.ffn:,} wide, not the rule's 4 d of {4 * arch.width:,}, to count the "
                   f"{'active ' if m.active < m.params else ''}size")
    if arch.moe and not m.architecture.moe:
        how.append("the experts placed")
    placed = f" ({'; '.join(how)})" if how else ""
    note = (f"{given} given; the shape rule's architecture{placed} has {billions(counts.total.total)} parameters"
            f"{active}, used for memory and FLOPs")
    out = m.model_copy(update=dict(
        architecture=arch, params=counts.total.total, active=counts.active.total, mtp_params=counts.mtp,
        matmul_active=counts.matmul_active + counts.mtp_matmul_active, parts=counts.total,
        active_parts=counts.active))
    return out, note


FINE_GRAIN = 8
"""A bare MoE size is placed as top-8 routing over experts an eighth of the dense FFN wide, the
fine-grained shape of DeepSeek-V3 and Qwen3's MoEs (top-8 of 256 and of 128 experts)."""


def placed(m: ModelSpec, who: str) -> tuple[ModelSpec, list[str]]:
    """The model with an architecture whose layers and experts can be placed, and what was
    assumed to get it (`who` opens the Note: "Megatron places experts").

    A framework (apsi.training.frameworks.evaluate.placeable) and a serving engine place the architecture's
    own layers and experts. A bare size's rule architecture first gets its FFN sized to count the
    size (its active size) where the rule's steps count more than RULE_ROUNDING from it
    (apsi.model.counting.ffn_sized; below some 100M its width solved for the size first), and is refused past
    SHAPE_TOLERANCE. An MoE given as a bare size (total and active sizes, no experts) then gets
    the least structure that holds both: its active shape-rule layers, each MLP replaced by top-8
    routing over E experts an eighth of the FFN wide (so a token still uses one FFN's worth), E the
    multiple of 8 that brings the count nearest the total. Either way a bare size is then planned
    as that architecture (counted(): its count for memory and FLOPs alike, said in a Note), once:
    the spec counted has its parts. A model that has its parts already comes back as it is."""
    if m.parts is not None:
        return m, []  # the architecture is the count already (a preset, a config, a size counted)
    notes = []
    arch = None
    if m.source == "size":
        # A bare size: the rule's shape (its layers, width and heads, as the reference arithmetic
        # takes them) counts up to 30% from the size between its steps (9B is 32 x 4,096: 6.44B),
        # so its FFN is sized to count the size (the active size of an MoE), as a size with
        # fields is (_near_the_size).
        # A bare MoE size's active layers are sized only past SHAPE_TOLERANCE: the README's 1T at
        # 32B active counts 34.67B (+8.3%) at the rule's FFN, with 344 experts; sized to 32.15B it
        # takes 384, whose many divisors (EP choices) make 346,360 layouts of 215,960 and its
        # levers 1.8 times slower (189 to 345 ms, 2026-12-07).
        moe = m.active < m.params
        sized = ffn_sized(m.architecture, m.active, SHAPE_TOLERANCE if moe else RULE_ROUNDING)
        have = count_parameters(sized).total.total
        if abs(have - m.active) > SHAPE_TOLERANCE * m.active:
            # Below some 100M the rule's d = 128 L steps are too coarse for any FFN (15M is 8 x
            # 1,024, whose attention alone holds 33.6M): its depth kept, the width solved for the
            # size (12 L d^2 = N, d a multiple of 128, as a size with --layers is), then the FFN.
            # The heads and KV heads stay (given or the rule's: --heads 8 is kept), their head
            # dimension narrower, where the width holds them.
            a = m.architecture
            width = shape_rule(m.active, a.layers, None, None)[1]
            if width % a.heads == 0:
                solved = interned(a.model_copy(update=dict(width=width, head_dim=width // a.heads, ffn=4 * width)))
                sized = ffn_sized(solved, m.active, SHAPE_TOLERANCE if moe else RULE_ROUNDING)
                have = count_parameters(sized).total.total
        if abs(have - m.active) > SHAPE_TOLERANCE * m.active:
            size = m.origin + (f" ({human(m.active)} active)" if m.active < m.params else "")
            raise InputError(f"{size} as a bare size: the shape rule's architecture, {noun(sized.layers, 'layer')} x "
                             f"{sized.width:,} wide, counts {billions(have)} at any FFN width, more than {SHAPE_TOLERANCE:.0%} from "
                             f"{human(m.active)}; give layers and width (the architecture is then the count)")
        if sized is not m.architecture:
            arch = sized
    if m.active < m.params and not m.architecture.moe:
        a = arch or m.architecture
        dense = count_parameters(a).total
        per_ffn = dense.mlp / a.layers  # one dense FFN's parameters: FINE_GRAIN experts' worth
        experts = FINE_GRAIN * max(2, round(1 + (m.params - dense.total) / (per_ffn * a.layers)))
        arch = interned(a.model_copy(update={"experts": experts, "top_k": FINE_GRAIN,
                                             "expert_ffn": a.ffn // FINE_GRAIN}))
        placed = count_parameters(arch)
        placed_total, placed_active = placed.total.total, placed.active.total
        if (abs(placed_total - m.params) > SHAPE_TOLERANCE * m.params
                or abs(placed_active - m.active) > SHAPE_TOLERANCE * m.active):
            raise InputError(f"{m.origin} ({human(m.active)} active) as a bare MoE size: top-{FINE_GRAIN} routing over "
                             f"{experts:,} experts, the fewest that hold its active size, counts "
                             f"{billions(placed_total)} ({billions(placed_active)} active), more than "
                             f"{SHAPE_TOLERANCE:.0%} from it; give the experts (experts, top_k, expert_ffn), or a dense size")
        notes.append(f"{who}, and a bare MoE size has none: placed as top-{FINE_GRAIN} routing "
                     f"over {experts:,} experts {a.ffn // FINE_GRAIN:,} wide in each of its {noun(a.layers, 'layer')}")
    # A size, bare or with fields: its architecture is what the framework or engine places, so its
    # count is the plan's, for memory and FLOPs alike. A size with fields (whose FFN was sized to
    # it, its derived fields in a Note already) says the count only where it is not the size.
    model, note = counted(m, arch)
    if m.source == "shape" and arch is None and abs(model.params - m.params) <= SIZE_TOLERANCE * m.params:
        return model, notes
    return model, notes + [note]


def _solve_expert_ffn(total: int, active: int, rule: dict[str, Any], given: dict[str, Any]) -> int:
    """Expert width making an MoE of `total` parameters use `active` per token: the routed
    experts a token skips hold total - active, (E - k) experts in each MoE layer."""
    trial = _build({**rule, "expert_ffn": 1}, given, "the architecture")
    skipped_per_width = (trial.experts - trial.top_k) * trial.moe_layers * (3 if trial.mlp == "swiglu" else 2) * trial.width
    if total <= active or skipped_per_width <= 0:
        raise InputError("expert_ffn cannot be solved from the size: give active below params (and top_k below "
                         "experts), or give expert_ffn")
    return min(MAX_FFN, max(1, round((total - active) / skipped_per_width)))


def _derived_words(derived: tuple[str, ...], a: Architecture) -> str:
    shown = {"layers": noun(a.layers, "layer"), "width": f"width {a.width:,}", "heads": noun(a.heads, "head"),
             "kv_heads": noun(a.kv_heads, "KV head"), "head_dim": f"head_dim {a.head_dim}",
             "ffn": f"FFN {a.ffn:,}", "expert_ffn": f"expert FFN {a.expert_ffn:,}"}
    return ", ".join(shown[k] for k in derived)
