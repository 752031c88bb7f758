"""Planning one run under the reference arithmetic: inputs -> layout program(s) -> a Plan.

Owns turning a validated Setup into the CP-SAT program's numbers (apsi.training.reference.problem),
choosing which program to run (fewest GPUs, fastest, cheapest, least energy), finding the rule
that decided the answer by solving again without it, comparing GPU types, and the reference's
layout arithmetic (assemble, whose Plan apsi.training.assembly.finish completes). No I/O, no
text beyond the plan's notes.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal, NamedTuple, get_args

from apsi.training.explain import reference as explain
from apsi.errors import InputError, LayoutError
from apsi.inputs.question import MAX_GPUS_LIMIT, Setup
from apsi.model import arithmetic as ar
from apsi.model.schema import (
    Alternative, Binding, GpuChoice, Layout, MemoryBreakdown, Plan, Recompute, SolverReport,
)
from apsi.catalog import GPU
from apsi.training.assembly import Money, finish, money_of
from apsi.units import GIB, SECONDS_PER_DAY

if TYPE_CHECKING:
    # The reference arithmetic's CP-SAT program: imported where a reference plan is made, so that
    # a plan under a framework never loads it.
    from apsi.training.reference import program as _solver

Mode = Literal["min_gpus", "fastest", "min_cost", "min_energy"]
"""The search modes of SolverReport.mode (its "evaluate" is no search)."""
_MODES: dict[_solver.Objective, Mode] = {"gpus": "min_gpus", "cost": "min_cost", "energy": "min_energy",
                                         "days": "fastest"}
# Setup.objective and Setup.recompute, and ar.RECOMPUTE_LEVELS, are typed plain str (validated against
# these names by apsi.inputs.question); the tables give the same names their literal types.
_OBJECTIVES: dict[str, _solver.Objective] = {"gpus": "gpus", "days": "days", "cost": "cost", "energy": "energy"}
"""apsi.training.reference.problem.Objective's names (tests/test_imports.py holds the two alike)."""
_LEVELS: dict[str, Recompute] = {name: name for name in get_args(Recompute)}


class Outcome(Money):
    """A plan's figures without its explanation (outcome, for levers)."""

    gpu: str
    gpus: int
    target_met: bool


class Search(NamedTuple):
    """What search() found: the solution and its layout, the mode, every solve so far, and how
    many of them were the search itself."""

    solution: _solver.LayoutSolution
    layout: _solver.SolvedLayout
    mode: Mode
    runs: list[_solver.LayoutSolution]
    main_runs: int


def hardware(s: Setup, gpu: GPU, *, pinned: bool = True) -> _solver.Hardware:
    """The solver's view of one GPU type for this run."""
    from apsi.training.reference import program as _solver

    peak = gpu.peak_tflops(s.precision) * 1e12
    price = s.price_per_hour(gpu)
    return _solver.Hardware(
        name=gpu.name,
        tp_choices=(s.tp,) if pinned and s.tp else s.tp_choices(gpu),
        usable_bytes=ar.USABLE_FRACTION * gpu.memory_gib * GIB,
        gpu_seconds={r: ar.training_flops(s.model, s.tokens, s.seq, r) / (peak * s.mfu)
                     for r in ar.RECOMPUTE_LEVELS},
        price_per_gpu_second=None if price is None else price / 3600,
        watts=gpu.tdp_w,
    )


def problem(s: Setup, *, objective: _solver.Objective, cap: int, relax: str | None = None, tie_break: bool = True,
            gpus: tuple[GPU, ...] | None = None) -> _solver.LayoutProblem:
    """The solver's numbers for `s`; `relax` drops one rule (pinned, memory, time, batch) for what-ifs."""
    from apsi.training.reference import program as _solver

    pinned = relax != "pinned"
    no_memory = relax == "memory"
    sequences = _sequences(s, cap, relax)
    return _solver.LayoutProblem(
        hardware=tuple(hardware(s, g, pinned=pinned) for g in (s.candidates if gpus is None else gpus)),
        pp_choices=(s.pp,) if pinned and s.pp else s.pp_choices(),
        recompute_choices=(s.recompute,) if pinned and s.recompute else ar.RECOMPUTE_LEVELS,
        dp_min=s.dp if pinned and s.dp else 1,
        dp_max=s.dp if pinned and s.dp else sequences // s.micro_batch,
        max_gpus=cap,
        state_bytes=0 if no_memory else sum(ar.state_bytes(s.model.trained_params, s.optimizer)),
        activation_bytes={r: 0 if no_memory else
                          ar.activation_bytes(s.layers, s.seq, s.micro_batch, s.width, s.heads, r)
                          for r in ar.RECOMPUTE_LEVELS},
        batch_sequences=sequences,
        micro_batch=s.micro_batch,
        target_seconds=s.days * SECONDS_PER_DAY if relax != "time" else None,
        objective=objective,
        tie_break=tie_break,
    )


def _sequences(s: Setup, cap: int, relax: str | None) -> int:
    """Batch sequences; a what-if without the batch rule widens it to one micro-batch per GPU."""
    return max(s.batch_sequences, cap * s.micro_batch) if relax == "batch" else s.batch_sequences


def seconds(s: Setup, tp: int, pp: int, dp: int, recompute: str, sequences: int | None = None) -> float:
    """Training seconds of one layout on s.gpu (evaluate()'s arithmetic)."""
    flops = ar.training_flops(s.model, s.tokens, s.seq, recompute)
    micro = (sequences or s.batch_sequences) / (dp * s.micro_batch)
    return ar.duration_seconds(flops, tp * pp * dp, s.peak_flops, s.mfu, pp, micro)


def _goal(s: Setup) -> tuple[int, _solver.Objective]:
    """The GPU cap and the program's objective: with gpus=N and the default objective, the fastest
    layout on at most N GPUs."""
    cap = s.gpus if s.gpus is not None else s.max_gpus
    if s.objective not in _OBJECTIVES:
        raise InputError(f"objective {s.objective} has no model in the reference arithmetic's program; valid there: "
                         f"{', '.join(_OBJECTIVES)} (or plan it under a framework)")
    return cap, "days" if s.objective == "gpus" and s.gpus is not None else _OBJECTIVES[s.objective]


def search(s: Setup) -> Search:
    """The layout for `s` from the program its objective asks for, without explaining it."""
    from apsi.training.reference import program as _solver

    cap, objective = _goal(s)
    mode = _MODES[objective]
    sol = _solver.solve_layout(problem(s, objective=objective, cap=cap))
    runs = [sol]
    if sol.status == "INFEASIBLE" and objective != "days":
        # No layout meets the target: the fastest one within the cap, said to miss it.
        mode = "fastest"
        sol = _solver.solve_layout(problem(s, objective="days", cap=cap))
        runs.append(sol)
    if sol.status not in ("OPTIMAL", "FEASIBLE"):
        if sol.status == "INFEASIBLE":
            raise LayoutError(no_fit_message(s, cap))
        raise LayoutError(f"the solver found no layout within its time limit (status {sol.status})")
    found = sol.layout
    assert found is not None, f"a {sol.status} solution carries its layout"
    return Search(sol, found, mode, runs, len(runs))


def outcome(s: Setup) -> Outcome:
    """GPU type, GPUs, days, target_met, cost and energy of the plan for `s`, without the
    explanation's what-if solves (for levers)."""
    sol = search(s).layout
    one = s.on(next(g for g in s.candidates if g.name == sol.gpu))
    money = money_of(one, sol.gpus, seconds(one, sol.tp, sol.pp, sol.dp, sol.recompute))
    return {**money, "gpu": sol.gpu, "gpus": sol.gpus, "target_met": money["days"] <= s.days}


def solve(s: Setup) -> Plan:
    """The plan for `s`: run the program its objective asks for, then explain and assemble."""
    cap, objective = _goal(s)
    sol, found, mode, runs, main_runs = search(s)
    chosen = next(g for g in s.candidates if g.name == found.gpu)
    one = s.on(chosen).model_copy(update={"candidates": (chosen,)})
    binding: Binding
    facts: explain.Facts
    if mode in ("min_gpus", "fastest"):
        binding, facts = _binding(one, found, mode, cap, runs)
    else:
        # min_cost or min_energy: the objective (s.objective, cost or energy) decided.
        binding, facts = ("cost" if mode == "min_cost" else "energy"), {}
    several = len(s.candidates) > 1 or s.skipped
    choice = _gpu_choice(s, found, objective if mode != "fastest" else "days", cap, runs) if several else None
    # The plan's status is the search's; what-if solves (binding, runner-up) only explain it.
    status = "FEASIBLE" if any(r.status == "FEASIBLE" for r in runs[:main_runs]) else sol.status
    # CP-SAT's deterministic time can differ in the last bit between processes (a float sum of
    # work counters); 6 significant digits keep the JSON byte-identical across runs and --jobs.
    report = SolverReport(status=status, seconds=float(f"{sum(r.seconds for r in runs):.6g}"),
                          solves=sum(r.solves for r in runs), mode=mode)
    plan = assemble(one, found.tp, found.pp, found.dp, found.recompute, report, binding, objective=s.objective,
                    gpu_choice=choice)
    if any(r.status not in ("OPTIMAL", "INFEASIBLE") for r in runs[main_runs:]):
        plan = plan.model_copy(update={"notes": plan.notes + [
            "a what-if solve behind the explanation (binding rule or runner-up) was cut short by its time "
            "budget: its figures are the best found, not proved"]})
    return plan.model_copy(update={"why": explain.why(plan, facts, cap)})


def _binding(s: Setup, sol: _solver.SolvedLayout, mode: Mode, cap: int,
             runs: list[_solver.LayoutSolution]) -> tuple[Binding, explain.Facts]:
    """Which rule decided the answer, found by solving again without it, and the what-if figures
    (each what-if is appended to `runs` so the plan reports every solve).

    Fewest-GPU mode: the pins, if dropping them saves GPUs; else memory, if memory alone needs
    more GPUs than the target alone; else the batch, if a wider batch would meet the target on
    fewer GPUs; else time. Fastest mode: the pins, the batch, the GPU cap, then memory, whichever
    first gives a faster plan when dropped; else time.
    """
    from apsi.training.reference import program as _solver


    def what_if(relax: str | None, objective: _solver.Objective, with_cap: int = cap) -> _solver.SolvedLayout | None:
        alt = _solver.solve_layout(problem(s, objective=objective, cap=with_cap, relax=relax, tie_break=False))
        runs.append(alt)
        return alt.layout

    pins = any(v is not None for v in (s.tp, s.pp, s.dp, s.recompute))
    if mode == "min_gpus":
        if pins and (free := what_if("pinned", "gpus")) and free.gpus < sol.gpus:
            return "pinned", {"without_pins_gpus": free.gpus}
        by_time, by_memory = what_if("memory", "gpus"), what_if("time", "gpus")
        facts: explain.Facts = {"time_alone_gpus": by_time.gpus if by_time else None,
                                "memory_alone_gpus": by_memory.gpus if by_memory else None}
        if by_time and by_memory and by_memory.gpus > by_time.gpus:
            return "memory", facts
        wide = what_if("batch", "gpus")
        if wide and wide.gpus < sol.gpus:
            return "batch", {**facts, "wider_batch_gpus": wide.gpus}
        return "time", facts
    current = seconds(s, sol.tp, sol.pp, sol.dp, sol.recompute) * (1 - 1e-9)
    relaxes: list[Literal["pinned", "batch", "cap", "memory"]] = ["pinned"] if pins else []
    for relax in relaxes + ["batch", "cap", "memory"]:
        wider = min(cap * 10, MAX_GPUS_LIMIT)
        if relax == "cap":
            alt = what_if(None, "days", wider) if wider > cap else None
        else:
            alt = what_if(relax, "days")
        if alt:
            alt_seconds = seconds(s, alt.tp, alt.pp, alt.dp, alt.recompute, _sequences(s, cap, relax))
            if alt_seconds < current:
                name: Binding = ("gpus" if s.gpus is not None else "max_gpus") if relax == "cap" else relax
                return name, {"relaxed_gpus": alt.gpus, "relaxed_days": alt_seconds / SECONDS_PER_DAY,
                              "relaxed_cap": wider}
    return "time", {}


def _gpu_choice(s: Setup, sol: _solver.SolvedLayout, objective: _solver.Objective, cap: int,
                runs: list[_solver.LayoutSolution]) -> GpuChoice:
    """The types considered, and the best plan on any other type (solved again without the winner)."""
    from apsi.training.reference import program as _solver

    others = tuple(g for g in s.candidates if g.name != sol.gpu)
    if not others:
        return GpuChoice(objective=objective, considered=[g.name for g in s.candidates], skipped=list(s.skipped),
                         runner_up=None)
    alt = _solver.solve_layout(problem(s, objective=objective, cap=cap, gpus=others))
    runs.append(alt)
    if alt.status == "INFEASIBLE" and objective != "days":
        alt = _solver.solve_layout(problem(s, objective="days", cap=cap, gpus=others))
        runs.append(alt)
    runner_up = None
    if (best := alt.layout) is not None:
        g = next(x for x in others if x.name == best.gpu)
        m = money_of(s.on(g), best.gpus, seconds(s.on(g), best.tp, best.pp, best.dp, best.recompute))
        runner_up = Alternative(gpu=g.name, gpus=best.gpus, days=m["days"], target_met=m["days"] <= s.days,
                                cost_usd=m["cost_usd"], energy_mwh=m["energy_mwh"])
    return GpuChoice(objective=objective, considered=[g.name for g in s.candidates], skipped=list(s.skipped),
                     runner_up=runner_up)


def no_fit_message(s: Setup, cap: int) -> str:
    """Why nothing fits: the lightest memory any allowed layout could need, against the usable memory."""
    states = sum(ar.state_bytes(s.model.trained_params, s.optimizer))
    level = s.recompute or "full"
    act = ar.activation_bytes(s.layers, s.seq, s.micro_batch, s.width, s.heads, level)
    def need_gib(g: GPU) -> float:
        tp = s.tp or max(s.tp_choices(g))
        gpus = cap if s.dp is None else min(cap, s.dp * tp * (s.pp or s.layers))
        return (states / gpus + act / tp) / GIB

    # The type closest to fitting (smallest shortfall), in catalog order on ties.
    gpu = min(s.candidates, key=lambda g: need_gib(g) - ar.USABLE_FRACTION * g.memory_gib)
    need, usable = need_gib(gpu), ar.USABLE_FRACTION * gpu.memory_gib
    pins = ", ".join(f"{k} {getattr(s, k)}" for k in ("tp", "pp", "dp", "recompute") if getattr(s, k) is not None)
    words = "no" if level == "none" else level
    if need <= usable:
        return (f"no layout fits within {cap:,} GPUs: memory would allow {words} recomputation at the widest TP "
                f"({need:,.1f} of {usable:,.1f} GiB usable per {gpu.name}), but no tp x pp x dp within the cap "
                "and the pins builds it; allow more GPUs or change the pins")
    return (f"no layout fits: even at best ({words} recomputation, the widest TP, up to {cap:,} GPUs"
            f"{', with ' + pins if pins else ''}) each {gpu.name} needs {need:,.1f} GiB "
            f"({states / GIB:,.0f} GiB of model states over all GPUs plus activations) but has {usable:,.1f} GiB usable; "
            "try a larger-memory GPU, a smaller batch or seq, a lighter optimizer, or more GPUs")


def assemble(s: Setup, tp: int, pp: int, dp: int, recompute: str, report: SolverReport, binding: Binding,
             objective: str = "gpus", gpu_choice: GpuChoice | None = None) -> Plan:
    """The Plan for one layout on s.gpu under the reference arithmetic, every number from it."""
    gpus = tp * pp * dp
    w, g, o = (b / gpus / GIB for b in ar.state_bytes(s.model.trained_params, s.optimizer))
    act = ar.activation_bytes(s.layers, s.seq, s.micro_batch, s.width, s.heads, recompute) / tp / GIB
    usable = ar.USABLE_FRACTION * s.gpu.memory_gib
    total = w + g + o + act
    micro = s.batch_sequences / (dp * s.micro_batch)
    notes = []
    if s.batch_sequences % (dp * s.micro_batch):
        lo, hi = math.floor(micro), math.ceil(micro)
        notes.append(
            f"DP {dp:,} does not divide the batch of {s.batch_sequences:,} sequences: a framework runs "
            f"{hi:,} micro-batches per replica ({hi * dp * s.micro_batch:,} sequences per step)"
            + (f" or {lo:,} ({lo * dp * s.micro_batch:,})" if lo >= 1 else "")
            + "; the duration uses the exact ratio")
    # The reference divides every activation by TP, as sequence parallelism does.
    layout = Layout(tp=tp, pp=pp, dp=dp, recompute=_LEVELS[recompute], micro_batch_sequences=s.micro_batch,
                    micro_batches_per_replica=micro, sequence_parallel=tp > 1)
    memory = MemoryBreakdown(weights_gib=w, gradients_gib=g, optimizer_gib=o, model_states_gib=w + g + o,
                             activations_gib=act, total_gib=total, usable_gib=usable, gpu_memory_gib=s.gpu.memory_gib,
                             model_states_total_gib=sum(ar.state_bytes(s.model.trained_params, s.optimizer)) / GIB)
    return finish(s, layout, memory, gpus, seconds(s, tp, pp, dp, recompute), report, binding, objective=objective,
                  gpu_choice=gpu_choice, notes=notes)


