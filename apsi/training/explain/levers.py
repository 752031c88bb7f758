"""Levers: nearby changes to a run's inputs, each solved again, that would change its plan.

Owns choosing which changes are worth trying for a plan (from the rule that decided it) and
solving each one as a full plan, under the reference arithmetic (its own search, apsi.training.reference.planning)
and under every framework (apsi.api.plan.plan with the one change). Every figure is a real solve,
never an estimate.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable

from apsi.inputs import knobs
from apsi.catalog import GPU
from apsi.errors import ApsiError
from apsi.fmt import count, duration, mwh, usd
from apsi.inputs.question import MAX_GPUS_LIMIT, Setup
from apsi.model.schema import Lever, Plan

MAX_LEVERS = 4
"""Levers listed per plan under the reference arithmetic."""
MAX_TRIES = 6
"""Changes solved per plan at most: each is a full plan, so this bounds plan()'s time with levers."""
FRAMEWORK_MAX_LEVERS = 16
"""Levers listed per plan under a framework: every change tried (a framework plan takes tens to
hundreds of milliseconds warm, so all of them take a few seconds)."""
FRAMEWORK_MAX_TRIES = 20
"""Changes solved per plan under a framework at most (more than a run can have: 11 kinds of
change plus one per pin released)."""
BATCH_FACTOR = 4
"""Wider-batch levers multiply the batch by 4 and 16 (e.g. 4M -> 16M -> 64M tokens)."""
TARGET_FACTOR = 1.5
"""A longer-target lever allows 50% more days."""
SEQ_FACTOR = 2
"""A longer-sequence lever doubles the sequence (the batch keeps its tokens: half the sequences)."""
MICRO_BATCH = 2
"""The micro-batch lever: 2 sequences per micro-batch instead of the frameworks' default 1."""
PINS = tuple(k.name for k in knobs.KNOBS if not k.setting)
"""The layout knobs a framework plan may pin (apsi.inputs.knobs); a framework lever releases each given one."""

Change = tuple[str, dict[str, Any], str]
"""(name, changed plan() keywords, description) of one lever to try."""


def _larger_memory(s: Setup, catalog: dict[str, GPU], consumer: bool = True) -> GPU | None:
    more = [g for g in catalog.values() if g.memory_gib > s.gpu.memory_gib and s.precision in g.precisions()
            and (consumer or not g.consumer)]
    return min(more, key=lambda g: (g.memory_gib, g.name), default=None)


def _faster(s: Setup, catalog: dict[str, GPU], consumer: bool = True) -> GPU | None:
    peak = s.gpu.peak_tflops(s.precision)
    more = [g for g in catalog.values() if s.precision in g.precisions() and g.peak_tflops(s.precision) > peak
            and (consumer or not g.consumer)]
    return min(more, key=lambda g: (g.peak_tflops(s.precision), g.name), default=None)


def _gpu_changes(s: Setup, catalog: dict[str, GPU], consumer: bool = True) -> tuple[Change | None, Change | None]:
    """The next GPU type with more memory and the next faster one, each as a change (None where
    there is none, or where the plan already chose among several types)."""
    if len(s.candidates) != 1:
        return None, None
    bigger, faster = _larger_memory(s, catalog, consumer), _faster(s, catalog, consumer)
    return (None if bigger is None else ("gpu", {"gpu": bigger.name}, f"{bigger.name} ({bigger.memory_gib:g} GiB)"),
            None if faster is None else ("gpu", {"gpu": faster.name},
                                         f"{faster.name} ({faster.peak_tflops(s.precision):,.0f} dense TFLOPS)"))


def _fp8(s: Setup) -> Change | None:
    """fp8, where the plan is not fp8 already, its one GPU type has an fp8 peak."""
    if s.precision == "fp8" or s.gpu.fp8_tflops is None or len(s.candidates) != 1:
        return None
    return ("precision", {"precision": "fp8"}, f"fp8 ({s.gpu.fp8_tflops:,.0f} dense TFLOPS on {s.gpu.name})")


def _longer(s: Setup) -> Change:
    return ("days", {"days": s.days * TARGET_FACTOR}, f"a {s.days * TARGET_FACTOR:g}-day target")


def _more_gpus(s: Setup) -> Change:
    more = min(2 * (s.gpus or s.max_gpus), MAX_GPUS_LIMIT)
    key = "gpus" if s.gpus is not None else "max_gpus"
    return ("gpus", {key: more, **({"max_gpus": more} if key == "gpus" and more > s.max_gpus else {})},
            f"{more:,} GPUs allowed")


def _unique(out: list[Change | None]) -> list[Change]:
    """The changes without None and without repeats (the same keywords), in order."""
    seen, unique = set(), []
    for x in out:
        if x is None:
            continue
        key = tuple(sorted(x[1].items(), key=str))
        if key not in seen:
            seen.add(key)
            unique.append(x)
    return unique


def candidates(p: Plan, s: Setup, catalog: dict[str, GPU]) -> list[Change]:
    """(name, changed keywords, description) for the changes worth trying on plan `p` under the
    reference arithmetic, most relevant first."""
    eight_bit: Change | None = ("optimizer", {"optimizer": "adam8bit"},
                                "8-bit Adam (10 bytes of model states per parameter)")
    wide, wider = (("batch", {"batch": s.batch_tokens * f}, f"a {f}x batch ({s.batch_tokens * f / 1e6:,.1f}M tokens)")
                   for f in (BATCH_FACTOR, BATCH_FACTOR**2))
    longer = _longer(s)
    pins = {k: None for k in knobs.REFERENCE_KNOBS if getattr(s, k) is not None}
    gpu_bigger, gpu_faster = _gpu_changes(s, catalog)
    fp8 = _fp8(s)
    eight_bit = eight_bit if s.optimizer == "adamw" else None
    more_gpus = _more_gpus(s)
    out: list[Change | None]
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
    return _unique(out)


def framework_candidates(p: Plan, s: Setup, asked: dict[str, Any], catalog: dict[str, GPU]) -> list[Change]:
    """The changes worth trying on plan `p` under a framework, most relevant first by the rule that
    decided it, then the rest: a longer target, the next GPU with more memory and the next faster
    one, fp8, each other framework, micro-batches of 2, each pin released, 8-bit Adam, more GPUs
    where the cap decides, a wider batch, longer sequences. `asked` holds plan()'s keywords as
    given."""
    from apsi.training.frameworks import FRAMEWORKS

    fastest = (s.gpus is not None and s.objective == "gpus") or s.objective == "days"  # the target does not choose the GPUs
    longer = None if fastest else _longer(s)
    seq = ("seq", {"seq": s.seq * SEQ_FACTOR}, f"sequences of {s.seq * SEQ_FACTOR:,} tokens")
    # GeForce parts only for a GeForce plan, as gpu="any" under a framework.
    gpu_bigger, gpu_faster = _gpu_changes(s, catalog, consumer=s.gpu.consumer)
    fp8 = _fp8(s)
    others = [("framework", {"framework": name}, f"framework {name}")
              for name in FRAMEWORKS if name not in ("reference", asked["framework"])]
    micro = (("micro_batch", {"micro_batch": MICRO_BATCH}, f"micro-batches of {MICRO_BATCH} sequences")
             if asked.get("micro_batch") is None else None)
    released = [(key, {key: None, **({"recompute_modules": None} if key == "recompute" and "recompute_modules" in asked
                                     else {})}, f"{key} released (pinned {asked[key]})")
                for key in PINS if asked.get(key) is not None]
    eight_bit = (("optimizer", {"optimizer": "adam8bit"}, "8-bit Adam (its moments in 8 bits)")
                 if s.optimizer == "adamw" else None)
    more_gpus = _more_gpus(s) if p.binding in ("max_gpus", "gpus") else None
    wide = ("batch", {"batch": s.batch_tokens * BATCH_FACTOR},
            f"a {BATCH_FACTOR}x batch ({s.batch_tokens * BATCH_FACTOR / 1e6:,.1f}M tokens)")
    first: list[Change | None]
    if p.binding == "memory":
        first = [eight_bit, gpu_bigger, *released, fp8]
    elif p.binding in ("max_gpus", "gpus"):
        first = [more_gpus, *released, fp8, gpu_faster, wide]
    else:  # time: the target alone decides the GPUs
        first = [longer, *released, fp8, gpu_faster]
    rest = [longer, gpu_bigger, gpu_faster, fp8, *others, micro, *released, eight_bit, more_gpus, wide, seq]
    return _unique(first + rest)


def _figures(text: str, alt: Mapping[str, Any], target: float, figure: str) -> str:
    met = "meets" if alt["target_met"] else "misses"
    return (f"{text}: {count(alt['gpus'])} x {alt['gpu']} in {duration(alt['days'])}{figure} "
            f"({met} the {target:g}-day target)")


def _solve(p: Plan, s: Setup, tries: list[Change], limit: int, solve: Callable[[dict[str, Any]], Mapping[str, Any]],
           figure: Callable[[Mapping[str, Any]], str]) -> list[Lever]:
    """Each change in `tries` solved by `solve` (its outcome: gpu, gpus, days, target_met, cost_usd,
    energy_mwh), at most `limit` listed; one that gives the plan itself or an earlier lever's
    answer is left out, one refused is listed with its error."""
    levers: list[Lever] = []
    seen = set()
    for name, change, text in tries:
        if len(levers) == limit:
            break
        try:
            alt = solve(change)
        except ApsiError as err:
            levers.append(Lever(name=name, change=change, description=f"{text}: {err}",
                                gpus=None, days=None, target_met=None))
            continue
        result = (alt["gpu"], alt["gpus"], round(alt["days"], 9))
        if result == (p.gpu, p.gpus, round(p.days, 9)) or result in seen:
            continue  # changes nothing, or nothing an earlier lever did not: not a lever
        seen.add(result)
        levers.append(Lever(
            name=name, change=change, description=_figures(text, alt, change.get("days", s.days), figure(alt)),
            gpu=alt["gpu"], gpus=alt["gpus"], days=alt["days"], target_met=alt["target_met"],
            cost_usd=alt["cost_usd"], energy_mwh=alt["energy_mwh"]))
    return levers


def solve_levers(p: Plan, s: Setup, options: dict[str, Any]) -> list[Lever]:
    """Each candidate change solved again under the reference arithmetic: the same search as
    plan() with the change applied (the explanation's what-if solves are skipped; they do not
    change the layout)."""
    from apsi.catalog import catalog as load
    from apsi.inputs.question import resolve
    from apsi.training.reference.planning import outcome

    def figure(alt: Mapping[str, Any]) -> str:
        return {"cost": f", {usd(alt['cost_usd'])}", "energy": f", {mwh(alt['energy_mwh'])}"}.get(s.objective, "")

    return _solve(p, s, candidates(p, s, load(s.catalog))[:MAX_TRIES], MAX_LEVERS,
                  lambda change: outcome(resolve(**{**options, **change})), figure)


def solve_framework_levers(p: Plan, s: Setup, asked: dict[str, Any], plan: Callable[..., Plan]) -> list[Lever]:
    """Each candidate change solved again under a framework: `plan` (apsi.api.plan.plan, which
    calls this) with plan()'s keywords as asked (`asked`, with params and framework) and the one
    change, its levers and the runner-up GPU type left off. Every lever shows its GPUs, type,
    days, cost and energy; one the framework refuses is listed last with its error."""
    from apsi.catalog import catalog as load

    def solve(change: dict[str, Any]) -> dict[str, Any]:
        alt = plan(**{**asked, **change})
        return {"gpu": alt.gpu, "gpus": alt.gpus, "days": alt.days, "target_met": alt.target_met,
                "cost_usd": alt.cost_usd, "energy_mwh": alt.energy_mwh}

    def figure(alt: Mapping[str, Any]) -> str:
        money = [usd(alt["cost_usd"])] if alt["cost_usd"] is not None else []
        energy = [mwh(alt["energy_mwh"])] if alt["energy_mwh"] is not None else []
        return "".join(f", {x}" for x in money + energy)

    tries = framework_candidates(p, s, asked, load(s.catalog))[:FRAMEWORK_MAX_TRIES]
    levers = _solve(p, s, tries, FRAMEWORK_MAX_LEVERS, solve, figure)
    # The changes the framework refuses (another framework without fp8, an optimizer it does not
    # build) after every solved one, each with its one-line reason.
    return sorted(levers, key=lambda lever: lever.gpus is None)
