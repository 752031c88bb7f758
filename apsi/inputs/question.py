"""Validation of everything a user can pass to plan(), evaluate() and inference().

Owns turning raw keyword values (strings from the CLI or YAML, numbers from Python) into one
frozen, checked `Setup`: sizes parsed, the GPU looked up, the model shape resolved, every range
checked with a one-line message. It does no planning arithmetic beyond the default shape.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator

from apsi.inputs import knobs
from apsi.catalog import GPU, PRECISIONS, catalog as load_catalog, find_gpu
from apsi.errors import InputError, LayoutError, brief, unknown
from apsi.model.architecture import MAX_LAYERS
from apsi.model.arithmetic import OPTIMIZER_BYTES, RECOMPUTE_LEVELS, divisors
from apsi.model.goodput import CHECKPOINT_MINUTES
from apsi.inputs.objectives import OBJECTIVES
from apsi.inputs.modelspec import ARCHITECTURE_OPTIONS, ModelSpec, resolve_model
from apsi.units import parse_flag, parse_size, refuse_bool

FRAMEWORK_SETTINGS: tuple[str, ...] = knobs.SETTINGS
"""A framework's own settings beyond the layout's degrees (apsi.inputs.knobs): checked by check_knobs,
passed to its memory() and step time, and reported as the plan's framework_knobs."""

DEFAULT_MFU = 0.4
"""The reference arithmetic's model FLOPs utilisation (40%)."""
DEFAULT_BATCH_TOKENS = 2**22
"""Default global batch: 4,194,304 tokens = 1,024 sequences of 4,096 (the reference plan's 4.19M)."""
CHINCHILLA_TOKENS_PER_PARAM = 20
"""Default tokens: 20 per active parameter (Hoffmann et al. 2022, the compute-optimal ratio)."""
MAX_BATCH_SEQUENCES = 2**24
"""Largest batch, in sequences, a question may ask: the reference program's objective scaling is
sized for it (apsi.training.reference.program; 68.7T tokens at 4,096)."""
MAX_GPUS_LIMIT = 1_000_000  # below apsi.training.reference.program.MAX_GPUS (2^20)
"""Largest cluster apsi will plan; the solver's integer scaling is proved up to here."""
MAX_DAYS = 1_000_000.0
MIN_DAYS = 1e-4
"""The shortest target, days (8.6 s): below it durations and GPU counts leave the range of floats."""
MIN_MFU = 1e-3
"""The smallest flat MFU (0.1%): a smaller one makes durations overflow."""
MIN_PRICE = 1e-4
"""The smallest price, $/GPU-hour."""
DEFAULT_PUE = 1.3
"""Power usage effectiveness (facility power / IT power) for energy: new large data centres reach
1.3 or better, the industry average is 1.58 (Uptime Institute Global Data Center Survey 2023/2024:
https://intelligence.uptimeinstitute.com/resource/large-data-centers-are-mostly-more-efficient-analysis-confirms)."""
MAX_SEQ = 10_000_000


class _Serving(BaseModel):
    """Range checks for inference()'s own options."""

    model_config = ConfigDict(extra="forbid")
    _no_bools = field_validator("*", mode="before")(refuse_bool)

    batch: int = Field(ge=1, le=MAX_GPUS_LIMIT)


def check_serving(batch: Any) -> _Serving:
    try:
        return _Serving(batch=batch)
    except ValidationError as err:
        if err.errors()[0]["loc"] == ("batch",):
            raise InputError(f"batch is the number of sequences served at once, a whole number from 1 to "
                             f"{MAX_GPUS_LIMIT:,} (for example 1 or 64), got {brief(batch)}") from None
        raise InputError(_first_problem(err)) from None


class _Numbers(BaseModel):
    """Range checks for the plain-number options; pydantic turns violations into messages."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    _no_bools = field_validator("*", mode="before")(refuse_bool)

    days: float = Field(ge=MIN_DAYS, le=MAX_DAYS)
    mfu: float = Field(ge=MIN_MFU, le=1)
    seq: int = Field(ge=1, le=MAX_SEQ)
    max_gpus: int = Field(ge=1, le=MAX_GPUS_LIMIT)
    gpus: int | None = Field(default=None, ge=1, le=MAX_GPUS_LIMIT)
    tp: int | None = Field(default=None, ge=1, le=MAX_GPUS_LIMIT)
    pp: int | None = Field(default=None, ge=1, le=MAX_LAYERS)
    dp: int | None = Field(default=None, ge=1, le=MAX_GPUS_LIMIT)
    price: float | None = Field(default=None, ge=MIN_PRICE, le=1e6)
    pue: float = Field(ge=1, le=5)
    checkpoint_minutes: float = Field(ge=0.1, le=10_080)
    node_granularity: int | None = Field(default=None, ge=1, le=MAX_GPUS_LIMIT)


def given_options(named: dict[str, Any], *skip: str) -> dict[str, Any]:
    """The keywords a caller gave, from its locals() taken on entry: every named one that is not
    None (None takes the default) less `skip`, and its `architecture` or `more` keywords (a
    **kwargs dict: architecture fields, and framework knobs, apsi.inputs.knobs)."""
    out = {k: v for k, v in named.items() if v is not None and k not in skip and k not in ("architecture", "more")}
    for extra in ("architecture", "more"):
        out.update(named.get(extra) or {})
    return out


def _count(value: Any, what: str) -> Any:
    """A count given with a suffix or as a power ("4K", "16K", "2^13") as its number (apsi.units
    parse_size: decimal suffixes); anything else as given, for the range checks to judge."""
    if isinstance(value, str) and re.search(r"[kKmMbBtT^]", value.strip()) and not value.strip().lower() in ("nan",):
        return parse_size(value, what)
    return value


def _first_problem(err: ValidationError) -> str:
    e = err.errors()[0]
    field = ".".join(str(p) for p in e["loc"]) or "value"
    msg = e['msg'].removeprefix('Value error, ').lower().replace(", got a number with a fractional part", "")
    return f"{field}: {msg}, got {brief(e.get('input'))}"


class Setup(BaseModel):
    """A validated run: every input resolved to numbers and names."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: ModelSpec
    """The architecture and the counts every formula uses."""
    tokens: int
    gpu: GPU
    """The GPU (with several candidates: the first, until the solver picks one)."""
    candidates: tuple[GPU, ...]
    """GPU types the solver may choose from, in tie-break order."""
    skipped: tuple[str, ...] = ()
    """Candidates left out, each with its reason."""
    objective: str = "gpus"
    price: float | None = None
    """$/GPU-hour overriding the catalog's price."""
    pue: float = DEFAULT_PUE
    gpus: int | None
    days: float
    precision: str
    optimizer: str
    seq: int
    batch_tokens: int
    batch_sequences: int
    batch_tokens_asked: int | None = None
    """The batch as asked, tokens (batch_tokens is its whole sequences); None when not given."""
    micro_batch: int
    mfu: float
    """The flat MFU of the reference arithmetic and of `flat_mfu` plans (DEFAULT_MFU unless given)."""
    flat_mfu: bool = False
    """Whether the MFU was given: then every duration is FLOPs / (GPUs x peak x mfu) with the
    pipeline bubble, as the reference computes it; else a framework's durations come from the
    step-time model (apsi.model.steptime) and the MFU is an answer."""
    failures: bool = True
    """Whether the step-time model's durations include the time interruptions cost
    (apsi.model.goodput); a flat MFU never does."""
    checkpoint_minutes: float = 30.0
    """Minutes between checkpoints: half an interval of work is lost per interruption."""
    node_granularity: int | None = None
    """GPUs a framework plan's count is a multiple of: None for whole nodes of the GPU type
    (its gpus_per_node), 1 for any count. The reference arithmetic does not take it."""
    max_gpus: int
    catalog: str | None
    tp: int | None
    pp: int | None
    dp: int | None
    recompute: str | None

    @property
    def params(self) -> int:
        """Total parameters (without MTP blocks)."""
        return self.model.params

    @property
    def active(self) -> int:
        """Parameters one token uses."""
        return self.model.active

    @property
    def layers(self) -> int:
        return self.model.architecture.layers

    @property
    def width(self) -> int:
        return self.model.architecture.width

    @property
    def heads(self) -> int:
        return self.model.architecture.heads

    @property
    def kv_heads(self) -> int:
        return self.model.architecture.kv_heads

    @property
    def peak_flops(self) -> float:
        return self.gpu.peak_tflops(self.precision) * 1e12

    def tp_choices(self, gpu: GPU | None = None) -> tuple[int, ...]:
        """TP degrees that stay in one NVLink domain and split the heads evenly: Megatron-LM
        shards attention by head, so tp must divide heads (Shoeybi et al. 2019 Sec. 3), and the KV
        heads must split over tp or each be shared by a whole group of ranks (num_query_groups % tp
        == 0 or tp % num_query_groups == 0; MLM-TC)."""
        domain = (gpu or self.gpu).scaleup_domain
        kv = self.kv_heads
        return tuple(t for t in divisors(domain) if self.heads % t == 0 and (kv % t == 0 or t % kv == 0))

    def price_per_hour(self, gpu: GPU | None = None) -> float | None:
        return self.price if self.price is not None else (gpu or self.gpu).price_usd_per_hour

    def on(self, gpu: GPU) -> "Setup":
        """This run on one chosen GPU."""
        return self.model_copy(update={"gpu": gpu})

    def pp_choices(self) -> tuple[int, ...]:
        """Pipeline depths that split the layers evenly (Megatron-LM requires L % pp == 0)."""
        return divisors(self.layers)


def _choice(kind: str, value: Any, choices: tuple[str, ...] | list[str]) -> str:
    if not isinstance(value, str) or value.strip().lower() not in choices:
        raise unknown(kind, value, choices)
    return value.strip().lower()


def resolve(
    params: Any,
    *,
    active: Any = None,
    tokens: Any = None,
    gpu: Any = "H100",
    gpus: Any = None,
    days: Any = 90,
    precision: Any = "bf16",
    optimizer: Any = "adamw",
    seq: Any = None,
    batch: Any = None,
    mfu: Any = None,
    max_gpus: Any = 200_000,
    catalog: Any = None,
    tp: Any = None, pp: Any = None, dp: Any = None,
    recompute: Any = None,
    objective: Any = "gpus",
    price: Any = None, pue: Any = DEFAULT_PUE,
    failures: Any = None, checkpoint_minutes: Any = None,
    include_consumer: Any = None,
    flops_convention: Any = None,
    node_granularity: Any = None,
    serving_only: bool = False,
    **architecture: Any,
) -> Setup:
    """Check every input and resolve defaults; raises an ApsiError (a ValueError) naming the problem.

    `architecture` holds the options of apsi.inputs.modelspec.ARCHITECTURE_OPTIONS (layers, width, heads,
    kv_heads, ...); any other keyword is an error naming the valid ones."""
    for key in architecture:
        if key == "levers":  # plan() takes it before this; frontier(), evaluate() and the rest do not
            raise InputError("levers is plan()'s keyword (the nearby changes of one plan, each planned again): "
                             "leave it out here")
        if key not in ARCHITECTURE_OPTIONS:
            import inspect

            own = [k for k in inspect.signature(resolve).parameters if k not in ("serving_only", "architecture")]
            framework = ["framework", "batch_tolerance", *knobs.FRAMEWORK_KNOBS]
            raise unknown("keyword", key, sorted(own + list(ARCHITECTURE_OPTIONS) + ["levers"] + framework))
    model = resolve_model(params, active=active, flops_convention=flops_convention, **architecture)
    if seq is None:  # 4,096, or a learned position table's length where shorter (GPT-3's 2,048)
        seq = min(4096, model.architecture.position_embeddings or 4096)
    act = model.active
    tok = CHINCHILLA_TOKENS_PER_PARAM * act if tokens is None else parse_size(tokens, "tokens")
    try:
        n = _Numbers(days=days, mfu=DEFAULT_MFU if mfu is None else mfu,
                     checkpoint_minutes=CHECKPOINT_MINUTES if checkpoint_minutes is None else checkpoint_minutes,
                     seq=_count(seq, "seq"), max_gpus=_count(max_gpus, "max_gpus"), gpus=_count(gpus, "gpus"), tp=tp, pp=pp, dp=dp, price=price,
                     pue=pue, node_granularity=_count(node_granularity, "node_granularity"))
    except ValidationError as err:
        raise InputError(_first_problem(err)) from None
    if n.gpus is not None and n.gpus > n.max_gpus:
        raise InputError(f"gpus {n.gpus:,} exceeds max_gpus {n.max_gpus:,}: raise max_gpus or use fewer GPUs")
    learned = model.architecture.position_embeddings
    if learned and n.seq > learned and not serving_only:
        # A learned position table has a row per position (GPT-2's n_positions): no longer sequence
        # trains on it (the export's --max-position-embeddings would be another model).
        raise InputError(f"seq {n.seq:,} is longer than the model's {learned:,} learned positions (its config's "
                         f"n_positions or max_position_embeddings): give seq of at most {learned:,}")
    if catalog is not None and not isinstance(catalog, (str, os.PathLike)):
        raise InputError(f"catalog must be a path to a YAML file, got {brief(catalog)}")
    cat = None if catalog is None else str(Path(catalog))
    prec = _choice("precision", precision, PRECISIONS)
    candidates, skipped = _candidates(gpu, prec, cat, True if include_consumer is None
                                      else parse_flag(include_consumer, "include_consumer"))
    opt = _choice("optimizer", optimizer, list(OPTIMIZER_BYTES))
    goal = _choice("objective", objective, tuple(OBJECTIVES))
    level = None if recompute is None else _choice("recompute level", recompute, RECOMPUTE_LEVELS)

    batch_tokens_req = DEFAULT_BATCH_TOKENS if batch is None else parse_size(batch, "batch", whole=True)
    if serving_only:  # no training batch: one sequence stands in, and tokens are not checked
        batch_tokens_req = max(batch_tokens_req, n.seq)
        tok = max(tok, batch_tokens_req)
    if batch_tokens_req < n.seq:
        raise InputError(f"batch of {batch_tokens_req:,} tokens is less than one sequence of {n.seq:,}: "
                         f"give at least {n.seq:,} tokens")
    sequences = batch_tokens_req // n.seq
    if sequences > MAX_BATCH_SEQUENCES:
        raise InputError(f"batch of {sequences:,} sequences is beyond what apsi plans: at most "
                         f"{MAX_BATCH_SEQUENCES:,} sequences ({MAX_BATCH_SEQUENCES * n.seq:,} tokens at seq {n.seq:,})")
    if tok < sequences * n.seq:
        raise InputError(f"{tok:,} training tokens are fewer than one batch of {sequences * n.seq:,}: "
                         "give more tokens or a smaller batch")

    setup = Setup(
        model=model, tokens=tok, gpu=candidates[0], candidates=candidates,
        skipped=skipped, objective=goal, price=n.price, pue=n.pue, gpus=n.gpus, days=n.days, precision=prec,
        optimizer=opt, seq=n.seq, batch_tokens=sequences * n.seq, batch_sequences=sequences,
        batch_tokens_asked=None if batch is None else batch_tokens_req, micro_batch=1, mfu=n.mfu, flat_mfu=mfu is not None,
        max_gpus=n.max_gpus, catalog=cat, tp=n.tp, pp=n.pp, dp=n.dp, recompute=level,
        failures=True if failures is None else parse_flag(failures, "failures"),
        checkpoint_minutes=n.checkpoint_minutes, node_granularity=n.node_granularity,
    )
    setup = _check_pins(setup)
    if isinstance(gpu, str) and gpu.strip().lower() == "any" and len(setup.candidates) > 1:
        kept, beaten = undominated(setup.candidates, goal)
        if beaten:
            setup = setup.model_copy(update={"candidates": kept, "gpu": kept[0], "skipped": setup.skipped + beaten})
    if len(setup.candidates) > 1 and goal in ("cost", "energy"):
        # A type the objective cannot be measured on is left out, and said so.
        has = (lambda g: setup.price_per_hour(g) is not None) if goal == "cost" else (lambda g: g.tdp_w is not None)
        kept = tuple(g for g in setup.candidates if has(g))
        if kept:
            why = "no price" if goal == "cost" else "no board power"
            setup = setup.model_copy(update={
                "candidates": kept, "gpu": kept[0],
                "skipped": setup.skipped + tuple(f"{g.name}: {why}" for g in setup.candidates if not has(g))})
    if goal == "cost" and not any(setup.price_per_hour(g) for g in setup.candidates):
        raise InputError(f"objective cost needs a price: {', '.join(g.name for g in setup.candidates)} "
                         "has no price in the catalog; give price ($/GPU-hour: --price)")
    if goal == "energy" and not any(g.tdp_w for g in setup.candidates):
        raise InputError(f"objective energy needs board power: {', '.join(g.name for g in setup.candidates)} has no "
                         "tdp_w in the catalog; give a catalog with it (--catalog FILE) or another GPU")
    return setup


def _reach(gpu: GPU) -> tuple[float, ...]:
    """What a GPU type offers, each figure the more the better for every plan (memory, peaks,
    bandwidths: a layout that fits and runs on less fits and runs at least as fast on more), in
    the terms the models read them (apsi.model.collectives: a link's bandwidth times its
    efficiency, the defaults where the catalog gives none)."""
    from apsi.model import collectives as co

    up = (gpu.scaleup_gbps or 0) * (gpu.scaleup_efficiency or co.SCALEUP_EFFICIENCY)
    out = (gpu.scaleout_gbps or co.DEFAULT_SCALEOUT_GBPS) * (gpu.scaleout_efficiency or co.SCALEOUT_EFFICIENCY)
    return (gpu.memory_gib, gpu.visible_memory_gib or gpu.memory_gib, gpu.bf16_tflops or 0, gpu.fp16_tflops or 0,
            gpu.fp8_tflops or 0, gpu.fp4_tflops or 0, gpu.hbm_tbps or 0, up, out)


def undominated(candidates: tuple[GPU, ...], objective: str) -> tuple[tuple[GPU, ...], tuple[str, ...]]:
    """`gpu="any"`'s types less those an earlier type dominates, and a word on each left out: the
    same NVLink domain, node size and kind (consumer or not), at least every figure of _reach, and
    for cost a price (energy: a board power) no higher. An earlier type wins a tie (the walk's
    order), so a dominated type can never be the answer: searching it is work for nothing (H800,
    H100's die with a narrower NVLink, made every `any` question a tenth dearer)."""
    kept: list[GPU] = []
    beaten: list[str] = []
    for g in candidates:
        over = next((h for h in kept if h.scaleup_domain == g.scaleup_domain and h.gpus_per_node == g.gpus_per_node
                     and h.consumer == g.consumer and all(a >= b for a, b in zip(_reach(h), _reach(g)))
                     and (objective != "cost" or (h.price_usd_per_hour is not None and g.price_usd_per_hour is not None
                                                  and h.price_usd_per_hour <= g.price_usd_per_hour))
                     and (objective != "energy" or (h.tdp_w is not None and g.tdp_w is not None and h.tdp_w <= g.tdp_w))),
                    None)
        if over is None:
            kept.append(g)
        else:
            beaten.append(f"{g.name}: {over.name} has every figure at least as good")
    return tuple(kept), tuple(beaten)


def _candidates(gpu: Any, precision: str, cat: str | None,
                include_consumer: bool = True) -> tuple[tuple[GPU, ...], tuple[str, ...]]:
    """The GPU, or the GPU types to choose from: a list of names, or "any" (the whole catalog, less
    the consumer parts unless `include_consumer`)."""
    if isinstance(gpu, str) and gpu.strip().lower() == "any":
        every = [g for g in load_catalog(cat).values() if include_consumer or not g.consumer]
        usable = tuple(g for g in every if precision in g.precisions())
        skipped = tuple(f"{g.name}: no {precision}" for g in every if precision not in g.precisions())
        return usable, skipped
    names = [x.strip() for x in gpu.split(",")] if isinstance(gpu, str) and "," in gpu else gpu
    if isinstance(names, (list, tuple)):
        if not names:
            raise InputError("gpu list is empty: give at least one GPU name, or any")
        chosen = []
        for name in names:
            g = find_gpu(name, cat)
            g.peak_tflops(precision)  # raises if the GPU cannot do it
            if g not in chosen:
                chosen.append(g)
        return tuple(chosen), ()
    g = find_gpu(gpu, cat)
    g.peak_tflops(precision)
    return (g,), ()


def _check_pins(s: Setup) -> Setup:
    """A pinned value the layout rules forbid is the user's mistake; say which rule and what is valid.

    With several GPU types, a type on which a pinned tp cannot be built is left out (and said so);
    the error comes only when no type remains."""
    if s.tp is not None and len(s.candidates) > 1:
        fit = tuple(g for g in s.candidates if s.tp in s.tp_choices(g))
        if fit:
            dropped = tuple(f"{g.name}: tp {s.tp} not allowed" for g in s.candidates if g not in fit)
            s = s.model_copy(update={"candidates": fit, "gpu": fit[0], "skipped": s.skipped + dropped})
    if s.tp is not None and s.tp not in s.tp_choices():
        raise LayoutError(
            f"tp {s.tp} is not allowed on {s.gpu.name} with {s.heads} heads: tp must divide the NVLink "
            f"domain ({s.gpu.scaleup_domain} GPUs) and the heads; valid: {', '.join(map(str, s.tp_choices()))}")
    if s.pp is not None and s.pp not in s.pp_choices():
        if s.pp > s.layers:
            raise LayoutError(f"pp {s.pp} exceeds the {s.layers} layers: a pipeline stage needs at least one layer")
        raise LayoutError(f"pp {s.pp} does not divide the {s.layers} layers; valid: {', '.join(map(str, s.pp_choices()))}")
    if s.dp is not None and s.dp * s.micro_batch > s.batch_sequences:
        raise LayoutError(f"dp {s.dp:,} exceeds the batch of {s.batch_sequences:,} sequences: "
                          f"every replica needs a micro-batch; valid: dp <= {s.batch_sequences:,}")
    pinned = (s.tp or 1) * (s.pp or 1) * (s.dp or 1)
    cap = s.gpus if s.gpus is not None else s.max_gpus
    if pinned > cap:
        raise LayoutError(f"pinned tp x pp x dp = {pinned:,} GPUs exceeds the cap of {cap:,}")
    return s


class _KnobChecks(BaseModel):
    """Range checks for a framework layout's whole-number knobs (the degrees of apsi.inputs.knobs, each
    from its low to its high)."""

    model_config = ConfigDict(extra="forbid")
    _no_bools = field_validator("*", mode="before")(refuse_bool)


_Knobs = create_model("_Knobs", __base__=_KnobChecks, **{  # type: ignore[call-overload]
    k.name: (int | None, Field(default=None, ge=k.low, le=k.high)) for k in knobs.KNOBS if k.kind == "degree"})


def check_tolerance(value: Any) -> float:
    """batch_tolerance: a fraction from 0 (the batch exactly) to 0.5."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise InputError(f"batch_tolerance must be a fraction from 0 to 0.5 (for example 0.05), got {brief(value, 40)}")
    try:
        number = float(value.strip().rstrip("%")) / 100 if isinstance(value, str) and value.strip().endswith("%") \
            else float(value)
    except ValueError:
        raise InputError(f"batch_tolerance must be a fraction from 0 to 0.5 (for example 0.05 or 5%), "
                         f"got {brief(value, 40)}") from None
    if not 0 <= number <= 0.5:
        raise InputError(f"batch_tolerance must be a fraction from 0 to 0.5 (for example 0.05), got {brief(value, 40)}")
    return number


def check_knobs(given: dict[str, Any], fw=None) -> dict[str, Any]:
    """The layout knobs given, typed and range-checked; recompute one of the levels, and
    recompute_modules a list (or comma-separated string) of apsi.model.memory.RECOMPUTE_MODULES.
    With a framework module, a knob it does not have is an error naming the ones it has."""
    from apsi.model.memory import RECOMPUTE_MODULES

    if fw is not None:
        for key, value in given.items():
            if key not in fw.KNOBS and value is not None and not (value == 1 and key in ("cp", "ep", "etp", "vpp")):
                raise InputError(f"{key} is not a {fw.TITLE} knob; its knobs: {', '.join(fw.KNOBS)}")

    numbers = {k: v for k, v in given.items() if k not in ("recompute", "recompute_modules", *FRAMEWORK_SETTINGS)}
    # micro_batch "any": plan() chooses it (apsi.training.frameworks.batch.MICRO_BATCHES), as gpu "any" the type.
    choose = isinstance(numbers.get("micro_batch"), str) and numbers["micro_batch"].strip().lower() == "any"
    if choose:
        del numbers["micro_batch"]
    elif isinstance(numbers.get("micro_batch"), str) and not numbers["micro_batch"].strip().isdigit():
        raise InputError(f"micro_batch is a whole number of sequences or any, got {brief(numbers['micro_batch'], 40)}")
    try:
        out = _Knobs(**numbers).model_dump(exclude_none=True)
    except ValidationError as err:
        raise InputError(_first_problem(err)) from None
    if choose:
        out["micro_batch"] = "any"
    if given.get("recompute") is not None:
        out["recompute"] = _choice("recompute level", given["recompute"], RECOMPUTE_LEVELS)
    for knob in knobs.KNOBS:  # the settings, each by its kind (apsi.inputs.knobs)
        value = given.get(knob.name)
        if knob.setting and value is not None:
            out[knob.name] = (parse_flag(value, knob.name) if knob.kind == "flag"
                              else _choice(f"{knob.what} ({knob.name})" if knob.what else knob.name, value,
                                           knob.choices))
    modules = given.get("recompute_modules") or None  # [] (a plan's layout, recomputing no module): none
    if modules is not None:
        names = [m.strip() for m in modules.split(",")] if isinstance(modules, str) else modules
        if not isinstance(names, (list, tuple, set, frozenset)) or not names:  # a set: its order is the modules' own
            raise InputError(f"recompute_modules must be a list or set of {', '.join(RECOMPUTE_MODULES)}, got {brief(modules, 60)}")
        out["recompute_modules"] = tuple(sorted({_choice("recompute module", m, RECOMPUTE_MODULES) for m in names},
                                                key=RECOMPUTE_MODULES.index))
        if out.get("recompute") != "selective":
            raise InputError("recompute_modules go with recompute='selective' (Megatron's --recompute-granularity "
                             f"selective), not {out.get('recompute', 'none (the default)')!r}")
    return out
