"""Levers: nearby changes to a run's inputs, each solved again, that would change its plan.

Owns choosing which changes are worth trying for a plan (from the rule that decided it) and
solving each one as a full plan. Every figure is a real solve, never an estimate.
"""

from __future__ import annotations

from typing import Any

from apsi.catalog import GPU
from apsi.errors import ApsiError
from apsi.fmt import count, duration, mwh, usd
from apsi.inputs import MAX_GPUS_LIMIT, Setup
from apsi.model.schema import Lever, Plan

MAX_LEVERS = 4
"""Levers listed per plan."""
MAX_TRIES = 6
"""Changes solved per plan at most: each is a full plan, so this bounds plan()'s time with levers."""
BATCH_FACTOR = 4
"""Wider-batch levers multiply the batch by 4 and 16 (e.g. 4M -> 16M -> 64M tokens)."""
TARGET_FACTOR = 1.5
"""A longer-target lever allows 50% more days."""


def _larger_memory(s: Setup, catalog: dict[str, GPU]) -> GPU | None:
    more = [g for g in catalog.values() if g.memory_gib > s.gpu.memory_gib and s.precision in g.precisions()]
    return min(more, key=lambda g: (g.memory_gib, g.name), default=None)


def _faster(s: Setup, catalog: dict[str, GPU]) -> GPU | None:
    peak = s.gpu.peak_tflops(s.precision)
    more = [g for g in catalog.values() if s.precision in g.precisions() and g.peak_tflops(s.precision) > peak]
    return min(more, key=lambda g: (g.peak_tflops(s.precision), g.name), default=None)


def candidates(p: Plan, s: Setup, catalog: dict[str, GPU]) -> list[tuple[str, dict[str, Any], str]]:
    """(name, changed keywords, description) for the changes worth trying on plan `p`, most relevant first."""
    eight_bit = ("optimizer", {"optimizer": "adam8bit"}, "8-bit Adam (10 bytes of model states per parameter)")
    fp8 = ("precision", {"precision": "fp8"}, f"fp8 ({s.gpu.fp8_tflops or 0:,.0f} dense TFLOPS on {s.gpu.name})")
    wide, wider = (("batch", {"batch": s.batch_tokens * f}, f"a {f}x batch ({s.batch_tokens * f / 1e6:,.1f}M tokens)")
                   for f in (BATCH_FACTOR, BATCH_FACTOR**2))
    longer = ("days", {"days": s.days * TARGET_FACTOR}, f"a {s.days * TARGET_FACTOR:g}-day target")
    pins = {k: None for k in ("tp", "pp", "dp", "recompute") if getattr(s, k) is not None}
    one_gpu = len(s.candidates) == 1
    bigger, faster = _larger_memory(s, catalog), _faster(s, catalog)
    gpu_bigger = ("gpu", {"gpu": bigger.name}, f"{bigger.name} ({bigger.memory_gib:g} GiB)") if bigger and one_gpu else None
    gpu_faster = (("gpu", {"gpu": faster.name}, f"{faster.name} ({faster.peak_tflops(s.precision):,.0f} dense TFLOPS)")
                  if faster and one_gpu else None)
    fp8 = fp8 if s.precision != "fp8" and s.gpu.fp8_tflops is not None and one_gpu else None
    eight_bit = eight_bit if s.optimizer == "adamw" else None
    more = min(2 * (s.gpus or s.max_gpus), MAX_GPUS_LIMIT)
    key = "gpus" if s.gpus is not None else "max_gpus"
    more_gpus = ("gpus", {key: more, **({"max_gpus": more} if key == "gpus" and more > s.max_gpus else {})},
                 f"{more:,} GPUs allowed")
    # Most relevant first, by the rule that decided the plan.
    if p.gpus == 1 and p.target_met:
        out = []  # one GPU meeting the target: nothing to relax
    elif p.binding == "pinned":
        out = [("pins", pins, "no pinned values")] if pins else []
        out += [eight_bit, fp8]
    elif p.binding == "memory":
        out = [eight_bit, gpu_bigger, fp8, longer]
    elif p.binding == "batch":
        out = [wide, wider, gpu_faster, fp8, eight_bit]
    elif p.binding in ("max_gpus", "gpus"):
        out = [more_gpus, fp8, gpu_faster, wide]
    elif p.target_met:
        out = [fp8, longer, gpu_faster, eight_bit]
    else:
        out = [fp8, gpu_faster, wide, eight_bit]
    out = [x for x in out if x is not None]
    seen, unique = set(), []
    for name, change, text in out:
        key = tuple(sorted(change.items(), key=str))
        if key not in seen:
            seen.add(key)
            unique.append((name, change, text))
    return unique


def solve_levers(p: Plan, s: Setup, options: dict[str, Any]) -> list[Lever]:
    """Each candidate change solved again: the same search as plan() with the change applied (the
    explanation's what-if solves are skipped; they do not change the layout)."""
    from apsi.catalog import catalog as load
    from apsi.inputs import resolve
    from apsi.planning import outcome

    levers, seen = [], set()
    for name, change, text in candidates(p, s, load(s.catalog))[:MAX_TRIES]:
        if len(levers) == MAX_LEVERS:
            break
        try:
            alt = outcome(resolve(**{**options, **change}))
        except ApsiError as err:
            levers.append(Lever(name=name, change=change, description=f"{text}: {err}",
                                gpus=None, days=None, target_met=None))
            continue
        result = (alt["gpu"], alt["gpus"], round(alt["days"], 9))
        if result == (p.gpu, p.gpus, round(p.days, 9)) or result in seen:
            continue  # changes nothing, or nothing an earlier lever did not: not a lever
        seen.add(result)
        met = "meets" if alt["target_met"] else "misses"
        target = change.get("days", s.days)
        figure = {"cost": f", {usd(alt['cost_usd'])}", "energy": f", {mwh(alt['energy_mwh'])}"}.get(s.objective, "")
        levers.append(Lever(
            name=name, change=change,
            description=(f"{text}: {count(alt['gpus'])} x {alt['gpu']} in {duration(alt['days'])}{figure} "
                         f"({met} the {target:g}-day target)"),
            gpus=alt["gpus"], days=alt["days"], target_met=alt["target_met"], cost_usd=alt["cost_usd"]))
    return levers
