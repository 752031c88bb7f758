"""The public API: plan(), evaluate(), inference(), gpu_table().

Composes input validation (apsi.inputs.question, the knobs of apsi.inputs.knobs) with the planner of the question's
framework: under megatron (the default), torchtitan and deepspeed the exact layout walk
(apsi.training.frameworks.planner), under the reference arithmetic its CP-SAT program (apsi.training.reference.planning,
apsi.training.reference.program); the explanations on top when asked (apsi.training.explain: levers). Returns pydantic models.
No printing, no formatting.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from apsi.inputs import knobs
from apsi.training import assembly
from apsi.training.reference import planning
from apsi.catalog import GPU, catalog as _catalog
from apsi.errors import InputError
from apsi.inputs.question import check_serving, given_options, resolve
from apsi.model.schema import ModelRow, Plan, ServingPlan, SolverReport

if TYPE_CHECKING:
    from apsi.training.frameworks.interface import Framework

__all__ = ["plan", "evaluate", "inference", "gpu_table", "models"]


def plan(params: Any, *, active: Any = None, tokens: Any = None, gpu: Any = None, gpus: Any = None,
         days: Any = None, precision: Any = None, optimizer: Any = None, seq: Any = None, batch: Any = None,
         mfu: Any = None, max_gpus: Any = None, catalog: Any = None, tp: Any = None, pp: Any = None, dp: Any = None,
         recompute: Any = None, objective: Any = None, price: Any = None, pue: Any = None,
         flops_convention: Any = None, framework: Any = None, batch_tolerance: Any = None, failures: Any = None,
         checkpoint_minutes: Any = None, include_consumer: Any = None, node_granularity: Any = None,
         levers: Any = False, explain: Any = False, **more: Any) -> Plan:
    """The layout with the fewest GPUs that trains in `days` (or the fastest on `gpus` GPUs).

    `params` is a size ("70B"), a preset name ("llama-3.1-405b", see models()) or the path of a
    Hugging Face config.json (or its folder). Every keyword is optional, None taking the default:
    active (= params), tokens (20 per active parameter), gpu ("H100"; a list or "any" lets the
    program choose the type), gpus (the fastest on at most this many; with objective cost or
    energy, the least of it meeting the target on at most this many), days (90), precision
    ("bf16"), optimizer ("adamw"), seq (4,096, or a learned position table's length where
    shorter: GPT-3's 2,048), batch (tokens, 2^22), mfu (a flat MFU; default: the step-time model,
    0.4 under the reference), max_gpus (200,000), catalog (a YAML file), tp, pp,
    dp, recompute (pins), objective ("gpus", "days", "cost", "energy"), price ($/GPU-hour), pue
    (1.3), flops_convention ("causal" or "full"), framework ("megatron"; "torchtitan",
    "deepspeed", "reference"), batch_tolerance (0.05), failures (True), checkpoint_minutes (30),
    include_consumer (False), node_granularity (under a framework the GPU count is a multiple of this
    many GPUs: whole nodes of the GPU type by default, 1 for any count), levers (False; True solves
    nearby changes again, each a full plan, and lists them in `levers`: apsi.training.explain.levers),
    explain (False; under a framework, also search for the runner-up between GPU types,
    gpu_choice.runner_up, a second walk; the CLI asks for it; the reference always does), and
    in `more`, the framework knobs of apsi.inputs.knobs.KNOBS (cp, ep, etp, vpp, micro_batch, zero,
    dp_replicate, recompute_modules and the frameworks' settings such as grad_dtype, tp_overlap or
    dispatcher; docs/method.md 3.4) and the architecture fields of
    apsi.inputs.modelspec.ARCHITECTURE_OPTIONS (layers, width, heads, kv_heads, ...), which override a
    preset's or config's fields one by one. When no layout meets the target, the plan is the
    fastest within max_gpus and says target_met=False.

    >>> p = plan("1T", active="32B", tokens="15T", precision="fp8", framework="reference")
    >>> (p.gpus, p.layout.tp, p.layout.dp, round(p.days, 1), p.serving.gpus)
    (520, 8, 65, 89.3, 13)
    """
    options = given_options(locals(), "params")
    levers = options.pop("levers", False)
    explain = options.pop("explain", False)
    if not isinstance(explain, bool):
        raise InputError(f"explain is true or false, got {type(explain).__name__}")
    if not isinstance(levers, bool):
        raise InputError(f"levers is true or false, got {type(levers).__name__}")
    asked = dict(options)  # the keywords as given, for levers: each is this plan() with one change
    framework = _framework(options)
    if framework != "reference":
        from apsi.training.frameworks import planner

        fw, pins, tolerance = framework_question(framework, options)
        # gpu="any" under a framework: data-centre parts, unless include_consumer (the reference
        # arithmetic keeps its whole-catalog choice).
        options.setdefault("include_consumer", False)
        setup = resolve(params, **options)
        result = planner.plan(fw, setup, pins, tolerance, explain=explain)
        if levers:
            from apsi.training.explain.levers import solve_framework_levers

            asked = {"params": params, **asked, "framework": framework}
            result = result.model_copy(update={"levers": solve_framework_levers(result, setup, asked, plan)})
        return result
    from apsi.training.frameworks import framework_module as reference_module

    setup = resolve(params, **options)
    # The reference arithmetic as a framework module: its plan is the CP-SAT program (apsi.training.reference.planning).
    result = reference_module("reference").plan(setup, {}, 0.0)
    if levers:
        from apsi.training.explain.levers import solve_levers

        result = result.model_copy(update={"levers": solve_levers(result, setup, {"params": params, **options})})
    return result


def framework_question(framework: str, options: dict[str, Any]) -> tuple[Framework, dict[str, Any], float]:
    """A framework question's module, its pinned knobs (popped from `options`, checked against
    the framework's: apsi.inputs.question.check_knobs) and its batch tolerance (popped; the default
    apsi.training.frameworks.batch.BATCH_TOLERANCE): what plan() and frontier() give the planner."""
    from apsi.training.frameworks import framework_module
    from apsi.training.frameworks.batch import BATCH_TOLERANCE
    from apsi.inputs.question import check_knobs, check_tolerance

    fw = framework_module(framework)
    tolerance = options.pop("batch_tolerance", None)
    pins = check_knobs({k: options.pop(k) for k in (*knobs.REFERENCE_KNOBS, *knobs.FRAMEWORK_KNOBS) if k in options},
                       fw)
    return fw, pins, BATCH_TOLERANCE if tolerance is None else check_tolerance(tolerance)


FRAMEWORK_KNOBS = knobs.FRAMEWORK_KNOBS
"""Layout knobs only a framework other than the reference has."""
_ONE_IS_NONE = tuple(k.name for k in knobs.KNOBS if not k.reference and k.kind == "degree" and k.low == 1)
"""Framework degrees the reference arithmetic has at 1 (no context, expert or virtual stage split)."""


def _framework(options: dict[str, Any]) -> str:
    """The framework named in `options` (popped, the default if none), checking the reference gets
    none of the frameworks' knobs and options (batch_tolerance, node_granularity): plan(),
    frontier() and evaluate() ask it."""
    from apsi.training.frameworks import DEFAULT, check_framework

    name = check_framework(options.pop("framework", DEFAULT))
    if name == "reference":
        for key in FRAMEWORK_KNOBS:
            value = options.pop(key, None)
            if value is not None and not (key in _ONE_IS_NONE and value == 1):
                raise InputError(f"{key} is a framework knob the reference arithmetic does not have: give "
                                 "framework='megatron' to use it")
        if options.get("batch_tolerance") is not None:
            raise InputError("batch_tolerance is a framework option: the reference arithmetic keeps the batch exact "
                             "(give framework='megatron' to use it)")
        if options.get("node_granularity") is not None:
            raise InputError("node_granularity is a framework option: the reference arithmetic's plans keep their "
                             "GPU counts (give framework='megatron' to use it)")
        options.pop("batch_tolerance", None)
        options.pop("node_granularity", None)
    return name


EVALUATE_KNOBS = (*knobs.REFERENCE_KNOBS, "framework", *knobs.FRAMEWORK_KNOBS, "batch_tolerance")
"""evaluate()'s layout keywords, handled apart from the run's."""


def evaluate(params: Any, *, tp: Any = None, pp: Any = None, dp: Any = None, recompute: Any = None,
             framework: Any = None, batch_tolerance: Any = None, active: Any = None,
             tokens: Any = None,
             gpu: Any = None, gpus: Any = None, days: Any = None, precision: Any = None, optimizer: Any = None,
             seq: Any = None, batch: Any = None, mfu: Any = None, max_gpus: Any = None, catalog: Any = None,
             objective: Any = None, price: Any = None, pue: Any = None, flops_convention: Any = None,
             failures: Any = None, checkpoint_minutes: Any = None, **more: Any) -> Plan:
    """The plan for exactly this layout, without searching; `fits` says whether it fits memory.

    The run's keywords are plan()'s (None: the default); the layout's are these.

    framework="reference" (the reference arithmetic) needs tp, pp, dp and recompute. Under a
    framework (megatron, the default; torchtitan; deepspeed; apsi.training.frameworks) the layout is judged
    by that framework's rules and memory, stage by stage: knobs tp, pp, vpp, cp, ep, etp, dp,
    micro_batch, recompute and, under recompute="selective", recompute_modules (Megatron's
    --recompute-modules: core_attn, mla_up_proj, layernorm, mlp, moe, moe_act), zero (the ZeRO
    stage: Megatron 0 or 1, DeepSpeed 0 to 3), dp_replicate (torchtitan's HSDP replicas), each
    left out taking the framework's default (1, none; etp = tp under Megatron; dp = gpus / (tp pp
    cp) when gpus is given), plus grad_dtype ("fp32", Megatron's default, or "bf16":
    --grad-reduce-in-bf16), moments_dtype ("fp32" or "bf16": Adam's moments in bf16, Megatron's
    precision-aware optimizer --exp-avg-dtype / --exp-avg-sq-dtype bf16) and fp8_param_gather
    (False), and tp_overlap (False; Megatron's --tp-comm-overlap, which Megatron-Bridge's performance
    recipes turn on: TP collectives hidden under the GEMMs, which lose 16 SMs), and ep_overlap
    (False; Megatron's EP A2A overlap, --overlap-moe-expert-parallel-comm --delay-wgrad-compute:
    each MoE layer's all-to-alls under the adjacent micro-batch's compute, where the layout allows
    it: EP > 1, VPP > 1 under PP, no full recomputation or recomputed MoE), and dispatcher
    ("alltoall", Megatron's NCCL all-to-all, the default; "flex": its flex dispatcher with DeepEP
    or HybridEP, which sends a token across the scale-out network once per other node its experts
    are in). A knob the framework lacks is an error.
    As plan() does, the batch moves to the nearest whole number of micro-batches per replica
    within batch_tolerance (default 0.05; 0 keeps it exact), and the plan says so.
    The pipeline split is the first of the framework's under which the layout fits. The plan's
    memory is its most loaded pipeline stage against the memory the driver reports, less a
    reserve (apsi.model.memory)."""
    options = given_options(locals(), "params", *EVALUATE_KNOBS)
    if options.get("node_granularity") is not None:
        raise InputError("node_granularity is a plan() and frontier() option: evaluate() judges the layout given, "
                         "on its own GPU count")
    extra = {key: options.pop(key, None) for key in knobs.FRAMEWORK_KNOBS}  # the knobs given in `more`
    name = _framework({"framework": framework if framework is not None else _default(), **extra,
                       "batch_tolerance": batch_tolerance})
    report = SolverReport(status="NOT_SOLVED", seconds=0.0, solves=0, mode="evaluate")
    if name != "reference":
        return _evaluate_framework(name, params, dict(tp=tp, pp=pp, dp=dp, recompute=recompute, **extra), options,
                                   report, batch_tolerance)
    for key in ("tp", "pp", "dp", "recompute"):
        if locals()[key] is None:
            raise InputError(f"evaluate() needs {key}: it plans exactly the layout given (use plan() to search)")
    setup = resolve(params, tp=tp, pp=pp, dp=dp, recompute=recompute, **options)
    if len(setup.candidates) > 1:
        raise InputError("evaluate() takes one GPU, not a list or any: it plans exactly the layout given")
    # resolve() keeps the pins given, and all four were given (checked above).
    assert setup.tp is not None and setup.pp is not None and setup.dp is not None and setup.recompute is not None
    return planning.assemble(setup, setup.tp, setup.pp, setup.dp, setup.recompute, report, binding="pinned",
                             objective=setup.objective)


def _default() -> str:
    from apsi.training.frameworks import DEFAULT

    return DEFAULT


def _evaluate_framework(name: str, params: Any, knobs: dict[str, Any], options: dict[str, Any], report: SolverReport,
                        tolerance: Any) -> Plan:
    from apsi.training.frameworks import framework_module, planner
    from apsi.training.frameworks.batch import BATCH_TOLERANCE
    from apsi.inputs.question import check_knobs, check_tolerance

    fw = framework_module(name)
    tolerance = BATCH_TOLERANCE if tolerance is None else check_tolerance(tolerance)
    setup = resolve(params, **options)
    if len(setup.candidates) > 1:
        raise InputError("evaluate() takes one GPU, not a list or any: it plans exactly the layout given")
    return planner.evaluate(fw, setup, check_knobs({key: value for key, value in knobs.items() if value is not None}, fw),
                            tolerance, report)


def inference(
    params: Any,
    *,
    precision: str | None = "bf16",
    gpu: Any = "H100",
    seq: int | None = 4096,
    batch: Any = 1,
    active: Any = None,
    catalog: Any = None,
    **architecture: Any,
) -> ServingPlan:
    """GPUs to serve the model: weights at `precision` plus the KV cache of `batch` sequences;
    gpu may be a list or "any": the type serving on the fewest GPUs is chosen (then the cheaper).

    `params` and the architecture keywords (layers, width, heads, kv_heads, head_dim, ...) are
    plan()'s; the KV cache follows the architecture: K and V per KV head under grouped-query
    attention, the compressed latent under multi-head latent attention. None takes a keyword's
    default, as in plan()."""
    from apsi.errors import unknown

    precision = "bf16" if precision is None else precision
    gpu = "H100" if gpu is None else gpu
    seq = 4096 if seq is None else seq
    batch = 1 if batch is None else batch
    from apsi.inputs.modelspec import ARCHITECTURE_OPTIONS

    for key in architecture:
        if key not in ARCHITECTURE_OPTIONS:
            raise unknown("keyword", key, ("precision", "gpu", "seq", "batch", "active", "catalog") + ARCHITECTURE_OPTIONS)
    setup = resolve(params, active=active, gpu=gpu, precision=precision, seq=seq, catalog=catalog,
                    serving_only=True, **architecture)
    sequences = check_serving(batch).batch
    # A list or "any": the type that serves on the fewest GPUs, then the cheaper per hour, then the
    # catalog's order.
    options = [(assembly.serving(setup.on(g), sequences), i, g) for i, g in enumerate(setup.candidates)]
    best = min(options, key=lambda x: (x[0].gpus, x[0].gpus * (setup.price_per_hour(x[2]) or float("inf")), x[1]))
    return best[0]


def gpu_table(catalog: Any = None) -> list[GPU]:
    """Every GPU in the catalog (shipped, plus `catalog`'s entries), in catalog order."""
    return list(_catalog(catalog).values())


def models() -> list[ModelRow]:
    """Every shipped preset with its counted parameters and its source, in catalog order."""
    from apsi.inputs.modelspec import resolve_model
    from apsi.inputs.presets import presets

    rows = []
    for p in presets().values():
        m = resolve_model(p.key)
        rows.append(ModelRow(key=p.key, name=p.name, family=m.family, params=m.params, active_params=m.active,
                             mtp_params=m.mtp_params, layers=m.architecture.layers, width=m.architecture.width,
                             published=p.published, source=p.source))
    return rows
