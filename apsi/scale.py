"""The public API: plan(), evaluate(), inference(), gpu_table().

Composes input validation (apsi.inputs), the arithmetic (apsi.model.arithmetic) and the layout
program (apsi.solver) and returns pydantic models. No printing, no formatting.
"""

from __future__ import annotations

from typing import Any

from apsi import planning
from apsi.catalog import GPU, catalog as _catalog
from apsi.errors import InputError
from apsi.inputs import check_serving, resolve
from apsi.model.schema import Plan, ServingPlan, SolverReport

__all__ = ["plan", "evaluate", "inference", "gpu_table"]


def plan(params: Any, **options: Any) -> Plan:
    """The layout with the fewest GPUs that trains in `days` (or the fastest on `gpus` GPUs).

    Keywords (all optional): active, tokens, gpu="H100", gpus, days=90, precision="bf16",
    optimizer="adamw", seq=4096, layers, width, heads, batch (tokens), mfu=0.4, max_gpus=200_000,
    catalog (a YAML file), tp, pp, dp, recompute, objective="gpus" (or "days", "cost", "energy"),
    price ($/GPU-hour), pue=1.3, levers=False. Pinned tp/pp/dp/recompute are kept; the solver
    fills in the rest. gpu may be a list of names or "any": the program then chooses the type too.
    When no layout meets the target, the plan is the fastest within max_gpus and says
    target_met=False. levers=True solves a few nearby changes again and lists them in `levers`.

    >>> p = plan("1T", active="32B", tokens="15T", precision="fp8")
    >>> (p.gpus, p.layout.tp, p.layout.dp, round(p.days, 1), p.serving.gpus)
    (520, 8, 65, 89.3, 13)
    """
    levers = options.pop("levers", False)
    setup = resolve(params, **options)
    result = planning.solve(setup)
    if levers:
        from apsi.levers import solve_levers

        result = result.model_copy(update={"levers": solve_levers(result, setup, {"params": params, **options})})
    return result


def evaluate(params: Any, *, tp: int, pp: int, dp: int, recompute: str, **options: Any) -> Plan:
    """The plan for exactly this layout, without searching; `fits` says whether it fits memory."""
    for key in ("tp", "pp", "dp", "recompute"):
        if locals()[key] is None:
            raise InputError(f"evaluate() needs {key}: it plans exactly the layout given (use plan() to search)")
    setup = resolve(params, tp=tp, pp=pp, dp=dp, recompute=recompute, **options)
    if len(setup.candidates) > 1:
        raise InputError("evaluate() takes one GPU, not a list or any: it plans exactly the layout given")
    report = SolverReport(status="NOT_SOLVED", seconds=0.0, solves=0, mode="evaluate")
    return planning.assemble(setup, setup.tp, setup.pp, setup.dp, setup.recompute, report, binding="pinned",
                             objective=setup.objective)


def inference(
    params: Any,
    *,
    precision: str = "bf16",
    gpu: str = "H100",
    seq: int = 4096,
    batch: Any = 1,
    active: Any = None,
    layers: int | None = None,
    width: int | None = None,
    heads: int | None = None,
    kv_heads: Any = None,
    catalog: Any = None,
) -> ServingPlan:
    """GPUs to serve the model: weights at `precision` plus the KV cache of `batch` sequences."""
    setup = resolve(params, active=active, gpu=gpu, precision=precision, seq=seq, layers=layers,
                    width=width, heads=heads, catalog=catalog, serving_only=True)
    extra = check_serving(batch, kv_heads)
    kv = setup.heads if extra.kv_heads is None else extra.kv_heads
    if setup.heads % kv:
        raise InputError(f"kv_heads {kv} must divide the {setup.heads} heads")
    return planning.serving(setup, extra.batch, kv)


def gpu_table(catalog: Any = None) -> list[GPU]:
    """Every GPU in the catalog (shipped, plus `catalog`'s entries), in catalog order."""
    return list(_catalog(catalog).values())
