"""serve()'s inputs checked and resolved: the model, the GPU types, the engine, the precisions,
the workload, the targets, the load and the inventory. Every problem is one ApsiError naming it
and what would be valid."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from apsi import fmt
from apsi.catalog import GPU, catalog as load_catalog, find_gpu
from apsi.errors import InputError, brief, unknown
from apsi.inputs.question import DEFAULT_PUE
from apsi.model.architecture import Architecture
from apsi.serving import replica as rp
from apsi.serving.engine import Engine, maker
from apsi.serving.engines import DEFAULT_ENGINE, engine as find_engine
from apsi.serving.walk import Targets

DEFAULT_ISL = 1000
DEFAULT_OSL = 1000
"""Input and output tokens per request when not given: 1,000 / 1,000, one of the workloads of
TensorRT-LLM's performance overview (docs/source/performance/perf-overview.md) and of vLLM's and
SGLang's serving benchmarks (--random-input-len / --random-output-len)."""
MAX_TOKENS = 10_000_000
"""The longest request apsi plans: ten million tokens, past every model's context."""
MAX_RATE = 1e9
MAX_CONCURRENCY = 1_000_000_000
MAX_MS = 1e9
MIN_MS = 1e-3
"""The shortest TTFT or TPOT target, ms: a microsecond, below any engine step (5e-324 ms, a positive
float, became 0 s in the arithmetic and divided by it)."""


VENDORS = {"nvidia": "NVIDIA", "amd": "AMD"}
"""GPU makers as messages name them."""


class Question(NamedTuple):
    name: str | None
    repo: str | None
    params: int
    architecture: Architecture
    unshaped_experts: int
    """A size-only mixture of experts' params - active (apsi.serving.replica.shape)."""
    full_attention_size: bool
    """A bare size whose KV heads are its query heads (the shape rule's default: no GQA)."""
    gpus: tuple[GPU, ...]
    skipped: tuple[str, ...]
    engine: Engine
    weights: str
    kv: str
    workload: rp.Workload
    targets: Targets
    rate: float | None
    concurrency: int | None
    inventory: dict[str, int] | None
    objective: str
    tp: int | None
    pp: int | None
    pue: float
    price: float | None
    catalog: str | None
    placed: tuple[str, ...] = ()
    """The inputs' own Notes: how a bare size became the architecture served
    (apsi.inputs.modelspec.placed), and a sliding window apsi does not model."""
    context_tokens: int | None = None
    """The model's context length (apsi.inputs.modelspec.ModelSpec.context_tokens), where known."""


def _count(value: Any, what: str, low: int, high: int, example: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise InputError(f"{what} must be a whole number from {low:,} to {high:,} (for example {example}), got {brief(value)}")
    try:
        number = float(value.replace("_", "").replace(",", "")) if isinstance(value, str) else float(value)
    except (ValueError, OverflowError):
        raise InputError(f"{what} must be a whole number from {low:,} to {high:,} (for example {example}), "
                         f"got {brief(value)}") from None
    if not math.isfinite(number) or number != int(number) or not low <= number <= high:
        raise InputError(f"{what} must be a whole number from {low:,} to {high:,} (for example {example}), got {brief(value)}")
    return int(number)


def _number(value: Any, what: str, high: float, example: str, low: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise InputError(f"{what} must be a positive number (for example {example}), got {brief(value)}")
    try:
        number = float(value) if not isinstance(value, str) else float(value.strip())
    except (ValueError, OverflowError):
        raise InputError(f"{what} must be a positive number (for example {example}), got {brief(value)}") from None
    if not math.isfinite(number) or not 0 < number <= high:
        raise InputError(f"{what} must be a positive number of at most {fmt.load(high)} (for example {example}), got {brief(value)}")
    if number < low:
        raise InputError(f"{what} must be at least {low:g} (for example {example}), got {brief(value)}")
    return number


def _ttft(value: Any) -> tuple[float | None, bool]:
    """A TTFT target in ms: a number (the mean) or "p99:NUMBER" / "mean:NUMBER"."""
    if value is None:
        return None, False
    if isinstance(value, str) and ":" in value:
        kind, _, rest = value.partition(":")
        kind = kind.strip().lower()
        if kind not in ("p99", "mean"):
            raise InputError(f"ttft {brief(value)}: give milliseconds, or p99:MS or mean:MS (for example p99:500)")
        return _number(rest, "ttft", MAX_MS, "500 or p99:500", MIN_MS) / 1e3, kind == "p99"
    return _number(value, "ttft", MAX_MS, "500 or p99:500", MIN_MS) / 1e3, False


def unpriced(q: "Question") -> list[str]:
    """The GPU types of `q` without a price (none when the question gives one for all)."""
    return [] if q.price is not None else [g.name for g in q.gpus if g.price_usd_per_hour is None]


def gpus_for(gpu: Any, weights: str, cat: str | None, where: str = "") -> tuple[tuple[GPU, ...], tuple[str, ...]]:
    """The GPU types to serve on: a name, a list, or "any" (every non-consumer type that can
    run the weight precision and has a bandwidth figure). `where` follows a GPU's name in a
    refusal (" in the inventory")."""
    def able(g: GPU) -> bool:
        return weights in rp.weight_precisions(g) and g.hbm_tbps is not None

    if isinstance(gpu, str) and gpu.strip().lower() == "any":
        every = [g for g in load_catalog(cat).values() if not g.consumer]
        kept = tuple(g for g in every if able(g))
        if not kept:
            raise InputError(f"no GPU in the catalog can serve {weights} weights")
        return kept, tuple(f"{g.name}: no {weights}" for g in every if not able(g))
    names = [x.strip() for x in gpu.split(",")] if isinstance(gpu, str) and "," in gpu else gpu
    listed = names if isinstance(names, (list, tuple)) else [names]
    if not listed:
        raise InputError("gpu list is empty: give at least one GPU name, or any")
    chosen: list[GPU] = []
    for name in listed:
        g = find_gpu(name, cat)
        if weights not in rp.weight_precisions(g):
            have = [x.name for x in load_catalog(cat).values() if weights in rp.weight_precisions(x)]
            raise InputError(f"{g.name}{where} cannot serve {weights} weights (it has {', '.join(rp.weight_precisions(g))}); "
                             f"GPUs with {weights}: {', '.join(have) or 'none in the catalog'}")
        if g.hbm_tbps is None:
            raise InputError(f"{g.name}{where} has no memory bandwidth (hbm_tbps) in the catalog: serving time needs it")
        if g not in chosen:
            chosen.append(g)
    return tuple(chosen), ()


def inventory_of(value: Any, cat: str | None) -> dict[str, int] | None:
    """"H100=64,H200=32" or {"H100": 64}: GPUs of each type on hand, by catalog name."""
    if value is None:
        return None
    if isinstance(value, str):
        pairs = []
        for part in value.split(","):
            name, eq, count = part.partition("=")
            if not eq:
                raise InputError(f"inventory {brief(value)}: give NAME=COUNT pairs, for example H100=64,H200=32")
            pairs.append((name.strip(), count.strip()))
    elif isinstance(value, dict):
        pairs = list(value.items())
    else:
        raise InputError(f"inventory must be NAME=COUNT pairs (for example H100=64,H200=32), got {brief(value)}")
    if not pairs:
        raise InputError("inventory is empty: give NAME=COUNT pairs, for example H100=64,H200=32")
    out: dict[str, int] = {}
    for name, count in pairs:
        g = find_gpu(name, cat)
        if g.name in out:
            raise InputError(f"inventory names {g.name} twice: give each GPU type once")
        out[g.name] = _count(count, f"inventory count of {g.name}", 0, 100_000_000, "64")
    return out


def question(params: Any, *, engine: Any, gpu: Any, precision: Any, kv_precision: Any, isl: Any, osl: Any,
             prefix: Any, ttft: Any, tpot: Any, rate: Any, concurrency: Any, inventory: Any, objective: Any,
             active: Any, catalog: Any, price: Any, pue: Any, architecture: dict[str, Any], tp: Any = None,
             pp: Any = None, model: Any = None) -> Question:
    """Every input checked, in the order given. `model`, a ModelSpec, stands for params, active
    and the architecture where the caller has the model resolved (a training plan's, placed)."""
    from apsi.inputs.modelspec import placed, resolve_model

    given = model is not None
    if model is None:
        model = resolve_model(params, active=active, **architecture)
    eng = find_engine(DEFAULT_ENGINE if engine is None else engine)
    # An engine places the model's experts as a framework does (a bare MoE size gets the training
    # plan's placement): `apsi serve` and a training plan's Serving line serve the same model.
    model, placements = placed(model, f"{eng.title} places experts")
    precision = "bf16" if precision is None else precision  # None: the default, as every keyword's
    if not isinstance(precision, str) or precision.strip().lower() not in rp.WEIGHT_BYTES:
        raise unknown("precision", precision, list(rp.WEIGHT_BYTES))
    weights = precision.strip().lower()
    if kv_precision is None:
        kv = rp.default_kv(eng, weights)  # the engine's own default (Engine.fp8_kv_cache)
    elif not isinstance(kv_precision, str) or kv_precision.strip().lower() not in rp.KV_BYTES:
        raise unknown("kv_precision", kv_precision, list(rp.KV_BYTES))
    else:
        kv = kv_precision.strip().lower()
        choices = rp.kv_choices(weights)
        own = choices[0]
        if kv not in choices:
            raise InputError(f"{eng.title} keeps the KV cache in the model's dtype ({own}) or fp8, not {kv}: "
                             f"give kv_precision {own} or fp8 (--kv-precision)")
    cat = catalog
    inv = inventory_of(inventory, cat)
    if inv is not None and gpu is None:
        # Without gpu the inventory's types are the ones served on: each checked as a gpu list is.
        gpus, skipped = gpus_for(list(inv), weights, cat, " in the inventory")
    else:
        gpus, skipped = gpus_for("H100" if gpu is None else gpu, weights, cat)
    if eng.vendors:
        kept = tuple(g for g in gpus if maker(g) in eng.vendors or not maker(g))
        if not kept:
            raise InputError(f"{eng.title} runs on {', '.join(VENDORS.get(v, v) for v in eng.vendors)} GPUs only, not {', '.join(g.name for g in gpus)}: give --engine vllm or sglang, or another GPU")
        skipped += tuple(f"{g.name}: not a {eng.title} GPU" for g in gpus if g not in kept)
        gpus = kept
    if inv is not None and gpu is not None:
        listed = {g.name for g in gpus}
        missing = [n for n in inv if n not in listed]
        if missing:
            raise InputError(f"inventory names {', '.join(missing)}, which gpu does not allow; "
                             f"give gpu as a list holding them, or leave gpu out")
        gpus = tuple(g for g in gpus if g.name in inv)
    n_in = DEFAULT_ISL if isl is None else _count(isl, "isl (input tokens per request)", 1, MAX_TOKENS, "1000")
    n_out = DEFAULT_OSL if osl is None else _count(osl, "osl (output tokens per request)", 1, MAX_TOKENS, "1000")
    context = model.context_tokens
    if context is not None and n_in + n_out > context:
        # An engine refuses a max length past the model's (vLLM's max_model_len check, SGLang's
        # context_length): a request this long cannot be served.
        raise InputError(f"a request of {n_in:,} input + {n_out:,} output tokens is longer than the "
                         f"{context:,}-token context of {model.name or model.origin} (its config's "
                         f"max_position_embeddings): give isl + osl of at most {context:,}")
    window = model.architecture.sliding_window
    if window is not None and n_in + n_out > window:
        placements.append(f"the model's {window:,}-token sliding-window attention is not modelled: each request's KV "
                          f"cache is counted at its full {n_in + n_out:,} tokens in every layer (an upper bound: an "
                          "engine that frees the KV outside the window holds more requests) and its attention reads "
                          "as full attention's")
    cached = 0 if prefix is None else _count(prefix, "prefix (cached input tokens)", 0, MAX_TOKENS, "500")
    if cached >= n_in:
        raise InputError(f"prefix of {cached:,} tokens is not less than the {n_in:,} input tokens: "
                         f"give a prefix from 0 to {n_in - 1:,}")
    ttft_s, p99 = _ttft(ttft)
    tpot_s = None if tpot is None else _number(tpot, "tpot (ms per output token)", MAX_MS, "30", MIN_MS) / 1e3
    if tpot_s is not None and n_out == 1:
        # TPOT is the time between output tokens (vllm bench serve counts it only for outputs of more
        # than one): a target on one token held the GPUs to a time that no request has.
        raise InputError("tpot needs a second output token: with osl 1 every request ends at its first token, "
                         "whose time is the TTFT; leave tpot out (give ttft) or give osl of at least 2")
    if rate is not None and concurrency is not None:
        raise InputError("give the load as rate (requests/s) or as concurrency (requests in flight), not both")
    r = None if rate is None else _number(rate, "rate (requests per second)", MAX_RATE, "10")
    c = None if concurrency is None else _count(concurrency, "concurrency (requests in flight)", 1, MAX_CONCURRENCY, "64")
    goal = "gpus" if objective is None else objective
    if not isinstance(goal, str) or goal.strip().lower() not in ("gpus", "cost"):
        raise unknown("objective", objective, ["gpus", "cost"])
    goal = goal.strip().lower()
    p = None if price is None else _number(price, "price ($/GPU-hour)", 1e6, "2.5")
    e = DEFAULT_PUE if pue is None else _number(pue, "pue", 3.0, "1.2")
    if e < 1:
        raise InputError(f"pue must be at least 1 (facility power over IT power), got {brief(pue)}")
    tp_pin = None if tp is None else _count(tp, "tp", 1, 1_000_000, "4")
    pp_pin = None if pp is None else _count(pp, "pp", 1, rp.MAX_PP, "2")
    if tp_pin is not None:
        able = [g for g in gpus if tp_pin in rp.tp_choices(model.architecture, g)]
        if not able:
            valid = sorted({t for g in gpus for t in rp.tp_choices(model.architecture, g)})
            a = model.architecture
            rule = ("the query heads" if a.mla else
                    f"the {a.heads} query heads (the {a.kv_heads} KV heads a multiple of TP, or TP a multiple of them)")
            domains = ", ".join(f"{g.name}: {rp.tp_group(g)}" for g in gpus)
            raise InputError(f"tp {tp_pin} is not allowed: TP must divide {rule} and stay within one NVLink domain, "
                             f"or one node without NVLink ({domains}); valid: {', '.join(map(str, valid))}")
        skipped += tuple(f"{g.name}: tp {tp_pin} not allowed" for g in gpus if g not in able)
        gpus = tuple(able)
    if goal == "cost" and p is None and inv is None:
        # Cost ranks only what has a price: the others are left out, and said so (a Note).
        priced = tuple(g for g in gpus if g.price_usd_per_hour is not None)
        if not priced:
            raise InputError(f"objective cost needs a price: {', '.join(g.name for g in gpus)} "
                             f"{'has' if len(gpus) == 1 else 'have'} none in the catalog; give price ($/GPU-hour: --price)")
        skipped += tuple(f"{g.name}: no price for objective cost" for g in gpus if g not in priced)
        gpus = priced
    if pp_pin is not None and pp_pin > model.architecture.layers:
        raise InputError(f"pp {pp_pin} exceeds the {model.architecture.layers} layers: a stage needs at least one layer")
    return Question(name=model.name, repo=None if given else _repo(params), params=model.params, architecture=model.architecture,
                    unshaped_experts=model.params - model.active if not model.architecture.moe else 0,
                    full_attention_size=model.source == "size" and "kv_heads" not in architecture
                    and model.architecture.kv_heads == model.architecture.heads,
                    gpus=gpus, skipped=skipped, engine=eng, weights=weights, kv=kv,
                    workload=rp.Workload(n_in, n_out, cached, closed=c is not None), targets=Targets(ttft_s, p99, tpot_s),
                    rate=r, concurrency=c, inventory=inv, objective=goal, tp=tp_pin, pp=pp_pin, pue=e, price=p, catalog=cat,
                    placed=tuple(placements), context_tokens=model.context_tokens)


def _repo(params: Any) -> str | None:
    """The weights an engine loads: a preset's Hugging Face repository, or the config.json's folder
    (a file of another name names no folder an engine would load: None, as for a size)."""
    from apsi.inputs.hf_config import config_path
    from apsi.inputs.presets import find_preset

    if isinstance(params, str):
        found = find_preset(params)
        if found is not None:
            return found.repo
        path = config_path(params)
        if path is not None and path.name == "config.json":  # an engine reads the folder's config.json
            return folder_word(path.parent)
    return None


def folder_word(folder: Any) -> str:
    """A folder as an engine's command line takes it: absolute, or relative with its "./", so that
    a folder named like an option ("--trust-remote-code") is never read as one."""
    text = str(folder)
    if folder.is_absolute() or text == "." or text.startswith("./") or text.startswith("../"):
        return text
    return "./" + text
