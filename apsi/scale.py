"""The public API: plan(), evaluate(), inference(), gpu_table().

Composes input validation (apsi.inputs), the arithmetic (apsi.model.arithmetic) and the layout
program (apsi.solver) and returns pydantic models. No printing, no formatting.
"""

from __future__ import annotations

import math
from typing import Any

from apsi import solver as _solver
from apsi.catalog import GPU, catalog as _catalog, find_gpu
from apsi.errors import InputError, LayoutError
from apsi.inputs import Setup, check_serving, resolve
from apsi.model import arithmetic as ar
from apsi.model.schema import Layout, MemoryBreakdown, ModelShape, Plan, ServingPlan, SolverReport
from apsi.units import GIB, SECONDS_PER_DAY

__all__ = ["plan", "evaluate", "inference", "gpu_table"]


def plan(params: Any, **options: Any) -> Plan:
    """The layout with the fewest GPUs that trains in `days` (or the fastest on `gpus` GPUs).

    Keywords (all optional): active, tokens, gpu="H100", gpus, days=90, precision="bf16",
    optimizer="adamw", seq=4096, layers, width, heads, batch (tokens), mfu=0.4, max_gpus=200_000,
    catalog (a YAML file), tp, pp, dp, recompute. Pinned tp/pp/dp/recompute are kept; the solver
    fills in the rest. When no layout meets the target, the plan is the fastest within max_gpus
    and says target_met=False.

    >>> p = plan("1T", active="32B", tokens="15T", precision="fp8")
    >>> (p.gpus, p.layout.tp, p.layout.dp, round(p.days, 1), p.serving.gpus)
    (520, 8, 65, 89.3, 13)
    """
    setup = resolve(params, **options)
    return _plan(setup)


def evaluate(params: Any, *, tp: int, pp: int, dp: int, recompute: str, **options: Any) -> Plan:
    """The plan for exactly this layout, without searching; `fits` says whether it fits memory."""
    setup = resolve(params, tp=tp, pp=pp, dp=dp, recompute=recompute, **options)
    report = SolverReport(status="NOT_SOLVED", seconds=0.0, solves=0, mode="evaluate")
    return _assemble(setup, setup.tp, setup.pp, setup.dp, setup.recompute, report, binding="pinned")


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
    return _serving(setup, extra.batch, kv)


def gpu_table(catalog: Any = None) -> list[GPU]:
    """Every GPU in the catalog (shipped, plus `catalog`'s entries), in catalog order."""
    return list(_catalog(catalog).values())


# -- composition ---------------------------------------------------------------------------------


def _serving(s: Setup, batch: int = 1, kv_heads: int | None = None) -> ServingPlan:
    per = ar.SERVING_BYTES[s.precision]
    weights = s.params * per
    kv = ar.kv_cache_bytes(s.layers, s.width, s.seq, batch, per, s.heads, kv_heads or s.heads)
    usable = ar.USABLE_FRACTION * s.gpu.memory_gib * GIB
    return ServingPlan(
        gpu=s.gpu.name, gpus=ar.gpus_for_bytes(weights + kv, usable), precision=s.precision,
        weights_gib=weights / GIB, kv_cache_gib=kv / GIB, total_gib=(weights + kv) / GIB,
        seq=s.seq, batch=batch,
    )


def _problem(s: Setup, *, target: bool, cap: int, relax: str | None = None,
             tie_break: bool = True) -> _solver.LayoutProblem:
    """The solver's numbers for `s`; `relax` drops one rule (pins, memory, time, batch) for what-ifs."""
    levels = ar.RECOMPUTE_LEVELS
    pinned = relax != "pinned"
    no_memory = relax == "memory"
    sequences = _sequences(s, cap, relax)
    return _solver.LayoutProblem(
        tp_choices=(s.tp,) if pinned and s.tp else s.tp_choices(),
        pp_choices=(s.pp,) if pinned and s.pp else s.pp_choices(),
        recompute_choices=(s.recompute,) if pinned and s.recompute else levels,
        dp_min=s.dp if pinned and s.dp else 1,
        dp_max=s.dp if pinned and s.dp else sequences // s.micro_batch,
        max_gpus=cap,
        state_bytes=0 if no_memory else sum(ar.state_bytes(s.params, s.optimizer)),
        activation_bytes={r: 0 if no_memory else
                          ar.activation_bytes(s.layers, s.seq, s.micro_batch, s.width, s.heads, r)
                          for r in levels},
        usable_bytes=ar.USABLE_FRACTION * s.gpu.memory_gib * GIB,
        gpu_seconds={r: ar.training_flops(s.active, s.tokens, s.layers, s.width, s.seq, r)
                     / (s.peak_flops * s.mfu) for r in levels},
        batch_sequences=sequences,
        micro_batch=s.micro_batch,
        target_seconds=(s.days * SECONDS_PER_DAY if relax != "time" else 1e30) if target else None,
        tie_break=tie_break,
    )


def _sequences(s: Setup, cap: int, relax: str | None) -> int:
    """Batch sequences; a what-if without the batch rule widens it to one micro-batch per GPU."""
    return max(s.batch_sequences, cap * s.micro_batch) if relax == "batch" else s.batch_sequences


def _seconds(s: Setup, sol: _solver.LayoutSolution, sequences: int) -> float:
    flops = ar.training_flops(s.active, s.tokens, s.layers, s.width, s.seq, sol.recompute)
    return ar.duration_seconds(flops, sol.tp * sol.pp * sol.dp, s.peak_flops, s.mfu, sol.pp,
                               sequences / (sol.dp * s.micro_batch))


def _plan(s: Setup) -> Plan:
    mode = "fastest" if s.gpus is not None else "min_gpus"
    cap = s.gpus if s.gpus is not None else s.max_gpus
    sol = _solver.solve_layout(_problem(s, target=mode == "min_gpus", cap=cap))
    runs = [sol]
    if sol.status == "INFEASIBLE" and mode == "min_gpus":
        mode = "fastest"
        sol = _solver.solve_layout(_problem(s, target=False, cap=cap))
        runs.append(sol)
    if sol.status not in ("OPTIMAL", "FEASIBLE"):
        if sol.status == "INFEASIBLE":
            raise LayoutError(_no_fit_message(s, cap))
        raise LayoutError(f"the solver found no layout within its time limit (status {sol.status})")
    binding = _binding(s, sol, mode, cap, runs)
    status = "FEASIBLE" if any(r.status == "FEASIBLE" for r in runs) else sol.status
    report = SolverReport(status=status, seconds=sum(r.seconds for r in runs),
                          solves=sum(r.solves for r in runs), mode=mode)
    return _assemble(s, sol.tp, sol.pp, sol.dp, sol.recompute, report, binding)


def _binding(s: Setup, sol: _solver.LayoutSolution, mode: str, cap: int, runs: list) -> str:
    """Which rule decided the answer, found by solving again without it (each what-if is appended
    to `runs` so the plan reports every solve).

    Fewest-GPU mode: the pins, if dropping them saves GPUs; else memory, if memory alone needs
    more GPUs than the target alone; else the batch, if a wider batch would meet the target on
    fewer GPUs; else time. Fastest mode: the pins, the batch, the GPU cap, then memory, whichever
    first gives a faster plan when dropped; else time.
    """

    def what_if(relax: str | None, target: bool, with_cap: int = cap) -> _solver.LayoutSolution | None:
        alt = _solver.solve_layout(_problem(s, target=target, cap=with_cap, relax=relax, tie_break=False))
        runs.append(alt)
        return alt if alt.tp is not None else None

    def count(x: _solver.LayoutSolution) -> int:
        return x.tp * x.pp * x.dp

    pins = any(v is not None for v in (s.tp, s.pp, s.dp, s.recompute))
    if mode == "min_gpus":
        if pins and (free := what_if("pinned", True)) and count(free) < count(sol):
            return "pinned"
        by_time, by_memory = what_if("memory", True), what_if("time", True)
        if by_time and by_memory and count(by_memory) > count(by_time):
            return "memory"
        wide = what_if("batch", True)
        return "batch" if wide and count(wide) < count(sol) else "time"
    current = _seconds(s, sol, s.batch_sequences) * (1 - 1e-9)
    for relax in (["pinned"] if pins else []) + ["batch", "cap", "memory"]:
        if relax == "cap":
            wider = min(cap * 10, _solver.MAX_GPUS)
            alt = what_if(None, False, wider) if wider > cap else None
        else:
            alt = what_if(relax, False)
        if alt and _seconds(s, alt, _sequences(s, cap, relax)) < current:
            return ("gpus" if s.gpus is not None else "max_gpus") if relax == "cap" else relax
    return "time"


def _no_fit_message(s: Setup, cap: int) -> str:
    states = sum(ar.state_bytes(s.params, s.optimizer)) / GIB
    usable = ar.USABLE_FRACTION * s.gpu.memory_gib
    lightest = ar.activation_bytes(s.layers, s.seq, s.micro_batch, s.width, s.heads, "full") / GIB
    tp_max = max(s.tp_choices())
    return (f"no layout fits: {states:,.0f} GiB of model states and at least {lightest / tp_max:,.1f} GiB of "
            f"activations per GPU do not fit in {usable:,.1f} GiB usable on at most {cap:,} x {s.gpu.name} "
            f"with the given pins; try a larger-memory GPU, a smaller batch or seq, or more GPUs")


def _assemble(s: Setup, tp: int, pp: int, dp: int, recompute: str, report: SolverReport, binding: str) -> Plan:
    gpus = tp * pp * dp
    w, g, o = (b / gpus / GIB for b in ar.state_bytes(s.params, s.optimizer))
    act = ar.activation_bytes(s.layers, s.seq, s.micro_batch, s.width, s.heads, recompute) / tp / GIB
    usable = ar.USABLE_FRACTION * s.gpu.memory_gib
    states_total = sum(ar.state_bytes(s.params, s.optimizer)) / GIB
    total = w + g + o + act
    micro = s.batch_sequences / (dp * s.micro_batch)
    flops = ar.training_flops(s.active, s.tokens, s.layers, s.width, s.seq, recompute)
    days = ar.days(ar.duration_seconds(flops, gpus, s.peak_flops, s.mfu, pp, micro))
    notes = []
    if s.batch_sequences % (dp * s.micro_batch):
        lo, hi = math.floor(micro), math.ceil(micro)
        notes.append(
            f"DP {dp:,} does not divide the batch of {s.batch_sequences:,} sequences: a framework runs "
            f"{hi:,} micro-batches per replica ({hi * dp * s.micro_batch:,} sequences per step)"
            + (f" or {lo:,} ({lo * dp * s.micro_batch:,})" if lo >= 1 else "")
            + "; the duration uses the exact ratio")
    return Plan(
        gpu=s.gpu.name, gpus=gpus, nodes=math.ceil(gpus / s.gpu.gpus_per_node),
        layout=Layout(tp=tp, pp=pp, dp=dp, recompute=recompute, micro_batch_sequences=s.micro_batch,
                      micro_batches_per_replica=micro),
        memory_per_gpu_gib=total,
        memory=MemoryBreakdown(weights_gib=w, gradients_gib=g, optimizer_gib=o, model_states_gib=w + g + o,
                               activations_gib=act, total_gib=total, usable_gib=usable,
                               gpu_memory_gib=s.gpu.memory_gib,
                               model_states_total_gib=states_total),
        fits=total <= usable, days=days, target_days=s.days, target_met=days <= s.days,
        total_flops=flops, steps=math.ceil(s.tokens / s.batch_tokens), batch_tokens=s.batch_tokens,
        batch_sequences=s.batch_sequences, tokens=s.tokens, data_gib=s.tokens * ar.TOKEN_ID_BYTES / GIB,
        precision=s.precision, optimizer=s.optimizer, mfu=s.mfu, seq=s.seq,
        peak_tflops=s.peak_flops / 1e12,
        model=ModelShape(params=s.params, active_params=s.active, layers=s.layers, width=s.width,
                         heads=s.heads, moe=s.active < s.params),
        serving=_serving(s), solver=report, binding=binding, notes=notes,
    )
