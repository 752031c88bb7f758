"""Why a framework plan came out as it did: the binding rule's words, the runner-up type, the Note.

Owns the explanation of a plan from the framework walk: what the target alone would need
(time_alone, from the configurations the walk visited), which cost dominates a step after its
compute (cost_words), the best plan on another GPU type (runner_up, a second walk without the
winner's type), and the Note's words on the micro-batch sizes walked. Computed above the walk:
nothing here changes which layout is chosen.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from apsi.catalog import GPU
from apsi.frameworks.batch import MICRO_BATCHES
from apsi.frameworks.bounds import Search
from apsi.frameworks.space import Config
from apsi.frameworks.layouts import Found
from apsi.frameworks.objectives import Objective, decide
from apsi.inputs import Setup

if TYPE_CHECKING:
    from apsi.frameworks.interface import Framework
    from apsi.model.schema import GpuChoice, Plan


def time_alone(search: Search, visited: list[tuple[Config, int]], target: float, below: int) -> int | None:
    """The fewest GPUs under `below` (the answer's) at which the target alone is met on this GPU
    type, memory ignored, or None: every family that could hold such a layout has a bound under
    `below`, so fewest() visited it, and `visited` holds its configurations with their family's
    start. Each is checked from there (and from its own floor) while the GPUs stay under the best
    so far, under each of the framework's splits (memory aside, any may be used): the Why line's
    "the target alone would need"."""
    a = search.s.model.architecture
    flat = search.s.flat_mfu
    best = below
    for c, start in visited:
        if c.recompute_rank and search._light:
            # Every recomputation adds work to the lightest (apsi.frameworks.recompute), on every
            # split: the same configuration with the lightest, visited before it (its bound is
            # no more), meets the target on no more GPUs.
            continue
        dps, ms = search.legal(c)
        splits = search.fw.splits(a.layers, c.pp, c.vpp, a.mtp_layers)
        own = start if flat else max(start, search._first_floor(c, dps, target, search.split_k(c)))
        per = c.tp * c.pp * c.cp
        for j in range(own, len(dps)):
            gpus = per * dps[j]
            if gpus >= best:
                break
            if not flat and search.too_slow(c, dps[j], ms[j], target):
                continue
            # At a flat MFU the split does not change the duration: the first answers for all.
            if any(search.exact(c, dps[j], ms[j], split).value <= target for split in (splits[:1] if flat else splits)):
                best = gpus
                break
    return best if best < below else None


def _sizes_words(given, sizes: list[int]) -> str:
    """The Note's words on the micro-batch sizes walked: none for a pinned size; the sizes under
    "any"; else the default size, and how to ask for the others."""
    if given not in (None, "any"):
        return ""
    if len(sizes) > 1:
        return f" over micro-batches of {', '.join(map(str, sizes[:-1]))} and {sizes[-1]} sequences"
    others = MICRO_BATCHES[1:]
    return (f" at micro-batches of {sizes[0]} sequence (micro_batch any also tries "
            f"{', '.join(map(str, others[:-1]))} and {others[-1]})")


def cost_words(p: "Plan") -> str:
    """What costs the step the most after its compute, in words with its share: the bubble of the
    schedule, or a kind of traffic over its link."""
    t = p.time
    assert t is not None, "cost_words() takes a plan priced by the step-time model"
    lay = p.layout
    link = {"nvlink": "NVLink", "scale-out": "the scale-out network"}

    def over(*kinds: str) -> str:
        """The link the first of `kinds` that has one runs over, in words (NVLink by default)."""
        name = next((t.links[k] for k in kinds if t.links.get(k)), None)
        return link.get(name or "", "NVLink")

    parts = {
        "bubble": (t.bubble_seconds, f"the bubble of PP {lay.pp}" + (f" x VPP {lay.vpp}" if lay.vpp > 1 else "")
                   + f" with {lay.micro_batches_per_replica:,.0f} micro-batches"),
        "tp": (t.tp_seconds, f"TP traffic over {over('tp', 'etp')}"),
        "ep": (t.ep_seconds, f"the EP all-to-all over {over('ep')}"),
        "cp": (t.cp_seconds, f"CP traffic over {over('cp')}"),
        "dp": (t.dp_seconds, f"DP gradient traffic over {over('dp')}"),
        "pp": (t.pp_seconds, f"PP messages over {over('pp')}"),
    }
    seconds, words = max(parts.values(), key=lambda x: x[0])
    if seconds <= 0:
        return f"compute is the whole step ({t.step_seconds:,.3g} s)"
    return f"after compute, {words} takes the most of each step ({seconds / t.step_seconds:.0%})"


def reasons(fw: Framework, s: Setup, result: "Plan", objective: Objective, searches: list[Search], types: list[GPU],
            index: int, found: Found, visited: list[tuple[int, Config, int]], pins: dict, cap: int) -> tuple[str, str]:
    """The plan's binding rule and Why line: what decided it under `objective`, with the figures
    that show it (for the fewest GPUs, what the target alone would need on the winner's type, from
    the configurations fewest() visited), then what costs each step the most after compute."""
    from apsi.fmt import count, duration
    from apsi.units import SECONDS_PER_DAY

    title, gpu = fw.TITLE, types[index]
    days = found.seconds / SECONDS_PER_DAY
    if objective.weight is not None:
        binding = "time"
        what = (f"${result.cost_usd:,.0f}" if objective.key == "cost" else f"{result.energy_mwh:,.0f} MWh")
        why = (f"{s.objective} decides: {count(found.gpus)} x {gpu.name} meet the {s.days:g}-day target for {what}, "
               f"the least of every {title} layout that meets it" + (
                   " (at a flat MFU a layout's GPU-hours are its FLOPs over the peak, stretched only by its pipeline "
                   "bubble)" if s.flat_mfu else ""))
    elif objective.mode == "min_gpus":
        # The target alone on this type, at any micro-batch: each of its searches from what it visited.
        target = s.days * SECONDS_PER_DAY
        alone = [time_alone(searches[j], [(c, start) for i, c, start in visited if i == j], target, found.gpus)
                 for j in range(len(searches)) if types[j] is gpu]
        fewer = min((x for x in alone if x is not None), default=None)
        binding = "memory" if fewer is not None and found.gpus > fewer else "time"
        stage = result.memory.peak_stage
        why = (f"memory on pipeline stage {stage} decides: the {s.days:g}-day target alone would need "
               f"{count(fewer)} x {gpu.name}, but the fewest that fit {title}'s memory are {count(found.gpus)}"
               if fewer is not None and binding == "memory" else
               f"time decides: {count(found.gpus)} x {gpu.name} finish in {duration(days)}, and no layout on fewer "
               f"meets the {s.days:g}-day target")
    else:
        binding = "gpus" if s.gpus is not None else "max_gpus"
        # A pinned dp with one tp x pp x cp left leaves the GPU count to the pins, not to the cap.
        fixed = "dp" in pins and len({c.tp * c.pp * c.cp for x in searches for c in x.configs}) == 1
        scope = f"on the {count(found.gpus)} GPUs the pins fix" if fixed else f"within {count(cap)} GPUs"
        why = (f"{'target met' if days <= s.days else 'target not met'}: the fastest {title} layout {scope} "
               f"takes {duration(days)}")
    if result.time is not None:
        why += "; " + cost_words(result)
    return binding, why


def gpu_choice(s: Setup, searches: list[Search], types: list[GPU], weights: list[float | None] | None, index: int,
               objective: Objective, target: float, rows: list | None, explain: bool) -> "GpuChoice":
    """The types considered and, with `explain`, the best plan on any other type (walked again by
    the same objective without the winner's searches; `types` and `weights` are each search's GPU
    type and cost)."""
    from apsi.model.schema import Alternative, GpuChoice
    from apsi.units import SECONDS_PER_DAY

    if not explain:
        return GpuChoice(objective=objective.key, considered=[g.name for g in s.candidates], skipped=list(s.skipped),
                         runner_up=None)
    skip = frozenset(i for i in range(len(searches)) if types[i] is types[index])
    alt, _ = decide(objective, searches, target, weights, rows, skip=skip)
    runner_up = None
    if alt is not None:
        i, f = alt
        gpu = types[i]
        days = f.seconds / SECONDS_PER_DAY
        hours = f.gpus * f.seconds / 3600
        price = s.price_per_hour(gpu)
        runner_up = Alternative(gpu=gpu.name, gpus=f.gpus, days=days, target_met=days <= s.days,
                                cost_usd=None if price is None else hours * price,
                                energy_mwh=None if gpu.tdp_w is None else hours * gpu.tdp_w * s.pue / 1e6)
    return GpuChoice(objective=objective.key, considered=[g.name for g in s.candidates],
                     skipped=list(s.skipped), runner_up=runner_up)
