"""Why a plan came out as it did: one sentence from the binding rule and the what-if figures.

Owns the wording of the explanation; every number in it comes from the plan or from a solve that
dropped one rule (apsi.planning._binding). No arithmetic beyond formatting.
"""

from __future__ import annotations

from apsi.model.arithmetic import OPTIMIZER_BYTES
from apsi.model.schema import Plan


def _n(x: float) -> str:
    return f"{x:,.0f}"


def why(p: Plan, facts: dict, cap: int) -> str:
    """The sentence for plan `p`: what decided it, with the numbers that show it."""
    gpu, per_param = p.gpu, sum(OPTIMIZER_BYTES[p.optimizer])
    states = f"{p.memory.model_states_total_gib:,.0f} GiB of model states ({per_param} bytes per parameter, {p.optimizer})"
    time_alone, memory_alone = facts.get("time_alone_gpus"), facts.get("memory_alone_gpus")
    if p.binding == "memory" and p.solver.mode == "min_gpus":
        return (f"memory decides: {states} plus activations need at least {_n(memory_alone)} x {gpu} at "
                f"{p.memory.usable_gib:,.1f} GiB usable each; the {p.target_days:g}-day target alone would need "
                f"{_n(time_alone)}")
    if p.binding == "time" and p.solver.mode == "min_gpus":
        extra = f"; memory alone would need {_n(memory_alone)}" if memory_alone else ""
        return (f"time decides: {_n(p.gpus)} x {gpu} finish in {p.days:,.1f} days, and no layout on fewer "
                f"meets the {p.target_days:g}-day target{extra}")
    if p.binding == "batch" and p.solver.mode == "min_gpus":
        return (f"batch width decides: data parallelism cannot exceed the batch of {_n(p.batch_sequences)} "
                f"sequences, so the target needs pipeline stages; with a wider batch, {_n(facts['wider_batch_gpus'])} "
                "GPUs would do")
    miss = (f"target not met: the fastest layout within {_n(cap)} GPUs takes {p.days:,.1f} days"
            if not p.target_met else f"the fastest layout within {_n(cap)} GPUs takes {p.days:,.1f} days")
    if p.binding == "batch":
        return (f"{miss}; batch width decides: data parallelism cannot exceed the batch of "
                f"{_n(p.batch_sequences)} sequences (a wider batch: {facts['relaxed_days']:,.1f} days on "
                f"{_n(facts['relaxed_gpus'])} GPUs)")
    if p.binding in ("max_gpus", "gpus"):
        return (f"{miss}; the GPU cap decides (ten times the cap: {facts['relaxed_days']:,.1f} days on "
                f"{_n(facts['relaxed_gpus'])} GPUs)")
    if p.binding == "memory" or (p.binding == "time" and p.solver.mode == "fastest"):
        return f"{miss}; memory forces {p.layout.recompute} recomputation and TP {p.layout.tp}"
    if p.binding == "pinned":
        free = facts.get("without_pins_gpus") or facts.get("relaxed_gpus")
        return f"the pinned values decide: without them, {_n(free)} GPUs" if free else "the pinned values decide"
    if p.binding in ("cost", "energy"):
        what = (f"${p.cost_usd:,.0f}" if p.binding == "cost" else f"{p.energy_mwh:,.0f} MWh")
        return (f"{p.binding} decides: the layout meeting the {p.target_days:g}-day target with the least "
                f"{p.binding} ({what}) on {_n(p.gpus)} x {gpu}")
    return miss
