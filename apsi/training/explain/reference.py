"""Why a plan came out as it did: one sentence from the binding rule and the what-if figures.

Owns the wording of the explanation; every number in it comes from the plan or from a solve that
dropped one rule (apsi.training.reference.planning._binding). No arithmetic beyond formatting.
"""

from __future__ import annotations

from typing import TypedDict

from apsi.fmt import count, duration, load, mwh, usd
from apsi.model.arithmetic import OPTIMIZER_BYTES
from apsi.model.schema import Plan


class Facts(TypedDict, total=False):
    """The what-if figures behind a binding rule; which keys are set depends on the rule."""

    without_pins_gpus: int
    time_alone_gpus: int | None
    memory_alone_gpus: int | None
    wider_batch_gpus: int
    relaxed_gpus: int
    relaxed_days: float
    relaxed_cap: int


def why(p: Plan, facts: Facts, cap: int) -> str:
    """The sentence for plan `p`: what decided it, with the numbers that show it."""
    gpu, per_param = p.gpu, sum(OPTIMIZER_BYTES[p.optimizer])
    states = f"{p.memory.model_states_total_gib:,.0f} GiB of model states ({per_param} bytes per parameter, {p.optimizer})"
    time_alone, memory_alone = facts.get("time_alone_gpus"), facts.get("memory_alone_gpus")
    target = f"{load(p.target_days)}-day target"
    if p.solver.mode == "min_gpus":
        if p.gpus == 1:
            return f"one GPU is enough: a single {gpu} finishes in {duration(p.days)}, within the {target}"
        if p.binding == "memory":
            # _binding names memory only when both what-ifs found a layout.
            assert memory_alone is not None and time_alone is not None, facts
            return (f"memory decides: {states} plus activations need at least {count(memory_alone)} x {gpu} at "
                    f"{p.memory.usable_gib:,.1f} GiB usable each; the {target} alone would need {count(time_alone)}")
        if p.binding == "batch":
            return (f"batch width decides: data parallelism cannot exceed the batch of {count(p.batch_sequences)} "
                    f"sequences; with a wider batch, {count(facts['wider_batch_gpus'])} GPUs would meet the {target}")
        if p.binding == "pinned":
            return f"the pinned values decide: without them, {count(facts['without_pins_gpus'])} GPUs would do"
        extra = f"; memory alone would need {count(memory_alone)}" if memory_alone else ""
        return (f"time decides: {count(p.gpus)} x {gpu} finish in {duration(p.days)}, and no layout on fewer "
                f"meets the {target}{extra}")
    if p.binding in ("cost", "energy"):
        what = usd(p.cost_usd) if p.binding == "cost" else mwh(p.energy_mwh)
        return (f"{p.binding} decides: of the layouts meeting the {target}, the one with the least {p.binding} "
                f"({what}) runs on {count(p.gpus)} x {gpu}")
    lead = "target not met" if not p.target_met else "target met"
    miss = f"{lead}: the fastest layout within {count(cap)} GPUs takes {duration(p.days)}"
    relaxed = (f"{duration(facts['relaxed_days'])} on {count(facts['relaxed_gpus'])} GPUs"
               if "relaxed_days" in facts else "")
    if p.binding == "batch":
        return (f"{miss}; batch width decides: data parallelism cannot exceed the batch of "
                f"{count(p.batch_sequences)} sequences (with a wider batch: {relaxed})")
    if p.binding in ("max_gpus", "gpus"):
        return f"{miss}; the GPU cap decides (with a cap of {count(facts['relaxed_cap'])}: {relaxed})"
    if p.binding == "pinned":
        return f"{miss}; the pinned values decide (without them: {relaxed})"
    if p.binding == "memory":
        return (f"{miss}; memory decides: it forces {p.layout.recompute} recomputation and TP {p.layout.tp} "
                f"(with unlimited memory: {relaxed})")
    return miss
