"""Why a framework plan came out as it did: the binding rule's words, the runner-up type, the Note.

Owns the explanation of a plan from the framework walk: for a fewest-GPU plan, the rule that
decided it, each claim one a re-plan on fewer GPUs confirms (the fastest layout that fits on
fewer, fewer_fitting, a walk capped under the answer; what the target alone would need,
time_alone, a walk by the duration floors alone), which cost dominates a step after its
compute (cost_words), the best plan on another GPU type (runner_up, a second walk without the
winner's type), and the Note's words on the micro-batch sizes walked. Computed above the walk:
nothing here changes which layout is chosen.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from apsi.catalog import GPU
from apsi.training.frameworks.batch import MICRO_BATCHES
from apsi.training.frameworks.bounds import Search
from apsi.training.frameworks.evaluate import capacity_gib
from apsi.training.frameworks.space import Config
from apsi.training.frameworks.found import Found
from apsi.training.frameworks.objectives import Objective, decide
from apsi.inputs.question import Setup

if TYPE_CHECKING:
    from apsi.training.frameworks.interface import Framework
    from apsi.model.schema import GpuChoice, Plan


def time_alone(search: Search, target: float, below: int, memory_aside: bool = True) -> int | None:
    """The fewest GPUs under `below` (the answer's) at which the target alone is met on this GPU
    type, memory aside, or None: fewest()'s walk by the duration floors alone, over every legal
    layout of `search`'s run under `below` GPUs, fitting or not (aside(): the plan's own search
    keeps only the configurations that may fit, and a split too big for the GPU at any dp may be
    the fastest). Groups are taken by their closed-form bound (Search.time_dp) and families by
    their first dp whose floor meets the target (Search.start) while under the best so far; each
    configuration is checked from there (and from its own floor) under each of the framework's
    splits (memory aside, any may be used): the Why line's "the target alone would need".
    Without `memory_aside`, over the plan's own search's configurations (each one's memory at
    its dp aside): None there proves that no layout that fits on fewer GPUs meets the target, a
    walk without the whole space's making (the Why line's time gate: on the README's 1T the
    memory-aside walk took the process from 0.35 to 0.52 s)."""
    if below <= 1:
        return None
    if memory_aside:
        search = aside(search, below)
    a = search.s.model.architecture
    flat = search.s.flat_mfu
    best = below
    rows = []
    for shape in search.shapes:
        # A shape's bound (the least K of its groups, Search.shape_k) first: most pass `below`.
        low = search.floor_dp(shape.per_replica, shape.bubble, search.shape_k(shape), target)
        if low is None or shape.per_replica * low >= below:
            continue
        for group in shape.groups:
            if search.dominated(group.first):
                # Every recomputation adds work to the lightest (apsi.training.frameworks.recompute), on
                # every split: the same configurations with the lightest meet the target on no
                # more GPUs.
                continue
            low = search.time_dp(group, target)
            if low is not None and group.per_replica * low < below:
                rows.append((group.per_replica * low, group.index, group))
    rows.sort(key=lambda x: x[:2])
    for bound, _, group in rows:
        if bound >= best:
            break
        least = search.group_k(group)  # below each family's own K (Search.group_k)
        for family in group.families(search.capacity):
            dps = search.family_dps(family)
            # The group's K first: a family's start is no earlier than the dp it gives, and most
            # families end here without their own K worked out.
            low = search._first_floor(family.first, dps, target, least)
            if low >= len(dps) or family.per_replica * dps[low] >= best:
                continue
            start = search.start(family, target)
            if start >= len(dps) or family.per_replica * dps[start] >= best:
                continue
            for c in search.members(family):
                if flat and c != family.first:
                    continue  # at a flat MFU a family's members share their durations
                best = min(best, _alone(search, c, start, target, best, a, flat))
    return best if best < below else None


def aside(search: Search, below: int) -> Search:
    """`search`'s run on its GPU type with memory aside, under `below` GPUs: every legal layout
    there, fitting or not (Search's memory_aside)."""
    return Search(search.fw, search.s, search.gpu, below - 1, search.pins, search.tolerance, memory_aside=True)


def _alone(search: Search, c: Config, start: int, target: float, best: int, a, flat: bool) -> int:
    """The fewest GPUs under `best` at which c meets the target under some split, memory aside, or
    `best`."""
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
            return gpus
    return best


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
    share = seconds / t.step_seconds
    return f"after compute, {words} takes the most of each step ({share:.0%})" if share >= 0.005 else \
        f"after compute, {words} takes the most of each step, under 1% of it"


def fewer_fitting(searches: list[Search], types: list[GPU], gpu: GPU, below: int) -> tuple[Found | None, bool]:
    """The fastest layout on fewer than `below` (the answer's) GPUs of type `gpu` that fits its
    memory, or None, and whether any layout the rules allow runs on fewer at all: the what-if
    plan(max_gpus=below - 1, objective="days") on this type, walked by fastest() over the
    winner's searches capped there. Under the fewest-GPU objective no such layout meets the
    target (the walk is exact), so its duration says by how much the target missed it."""
    from apsi.training.frameworks.walk import fastest

    mine = [x for x, t in zip(searches, types) if t is gpu]
    if below <= 1:
        return None, False
    capped = [x.capped(below - 1) for x in mine]
    got = fastest(capped)
    if got is not None:
        return got[1], True
    return None, runs_on_fewer(mine, below)


def runs_on_fewer(mine: list[Search], below: int) -> bool:
    """Whether any layout the rules allow (memory aside) runs on fewer than `below` GPUs: some
    configuration whose memory floor may fit has a legal dp under it (Layouts.runs_below)."""
    return below > 1 and any(x.runs_below(below) for x in mine)


def _fewest_words(fw: Framework, s: Setup, searches: list[Search], types: list[GPU], gpu: GPU,
                  found: Found) -> tuple[str, str]:
    """The binding rule and Why line of a fewest-GPU plan, each claim one that re-planning on
    fewer GPUs confirms (tests/test_why.py): time when some layout on fewer GPUs fits but misses
    the target (by how much the fastest of them misses it); memory when layouts run on fewer but
    none fits; the layout rules (dp, batch, whole nodes) when none runs on fewer at all."""
    from apsi.fmt import count, duration, load
    from apsi.units import SECONDS_PER_DAY

    title, n = fw.TITLE, found.gpus
    target = s.days * SECONDS_PER_DAY
    mine = [j for j in range(len(searches)) if types[j] is gpu]
    days = found.seconds / SECONDS_PER_DAY
    if (all(time_alone(searches[j], target, n, memory_aside=False) is None for j in mine)
            and runs_on_fewer([searches[j] for j in mine], n)):
        # No layout that fits on fewer GPUs meets the target (time_alone over the plan's own
        # configurations), and some run there: time decided, without walking them for the fastest.
        return "time", (f"time decides: {count(n)} x {gpu.name} finish in {duration(days)}, and no {title} layout "
                        f"on fewer meets the {load(s.days)}-day target")
    # The target alone on this type (memory aside), at any micro-batch.
    fewer = min((x for x in (time_alone(searches[j], target, n) for j in mine) if x is not None), default=None)
    best, legal = fewer_fitting(searches, types, gpu, n)
    if best is not None:
        late = best.seconds / SECONDS_PER_DAY
        aside = ("" if fewer is None else
                 f" (memory aside, {count(fewer)} x {gpu.name} would meet it, but no such layout fits)")
        return "time", (f"time decides: {count(n)} x {gpu.name} finish in {duration(days)}; the fastest {title} "
                        f"layout that fits on fewer, {count(best.gpus)} x {gpu.name}, takes {duration(late)}, "
                        f"{duration(late - s.days)} over the {load(s.days)}-day target{aside}")
    if legal:
        usable = capacity_gib(s.on(gpu))
        then = (f"; the {load(s.days)}-day target alone would need {count(fewer)} x {gpu.name}" if fewer is not None else
                f", nor would any meet the {load(s.days)}-day target with memory aside")
        return "memory", (f"memory decides: no {title} layout on fewer than {count(n)} x {gpu.name} fits in "
                          f"{usable:,.1f} GiB per GPU{then}")
    whole = min(x.granularity for x, t in zip(searches, types) if t is gpu)
    pins = next(x.pins for x, t in zip(searches, types) if t is gpu)
    pinned = ", ".join(f"{k} {pins[k]:,}" for k in ("tp", "pp", "cp", "dp") if k in pins)
    rules = (f"its GPUs come in whole nodes of {whole:,} (node_granularity 1 allows any count)" if n - 1 < whole else
             f"the pins ({pinned}) fix the count" if pinned and "dp" in pins else
             f"the batch of {s.batch_sequences:,} sequences, {fw.DP_RULES}" + (f" and the pins ({pinned})" if pinned
                                                                                else "") + " leave no dp on fewer")
    return "batch", (f"the layout rules decide: no {title} layout runs on fewer than {count(n)} x {gpu.name}: "
                     f"{rules}; {count(n)} finish in {duration(days)}")


def reasons(fw: Framework, s: Setup, result: "Plan", objective: Objective, searches: list[Search], types: list[GPU],
            index: int, found: Found, pins: dict, cap: int) -> tuple[str, str]:
    """The plan's binding rule and Why line: what decided it under `objective`, with the figures
    that show it (for the fewest GPUs, _fewest_words), then what costs each step the most after
    compute."""
    from apsi.fmt import count, duration, load, mwh, usd
    from apsi.units import SECONDS_PER_DAY

    title, gpu = fw.TITLE, types[index]
    days = found.seconds / SECONDS_PER_DAY
    if objective.weight is not None:
        # The least cost or energy among the layouts meeting the target decided it, as the reference
        # arithmetic's binding says (apsi.training.reference.planning._binding).
        binding = "cost" if objective.key == "cost" else "energy"
        what = usd(result.cost_usd) if objective.key == "cost" else mwh(result.energy_mwh)
        why = (f"{s.objective} decides: {count(found.gpus)} x {gpu.name} meet the {load(s.days)}-day target for {what}, "
               f"the least of every {title} layout that meets it" + (
                   " (at a flat MFU a layout's GPU-hours are its FLOPs over the peak, stretched only by its pipeline "
                   "bubble)" if s.flat_mfu else ""))
    elif objective.mode == "min_gpus":
        binding, why = _fewest_words(fw, s, searches, types, gpu, found)
    else:
        binding = "gpus" if s.gpus is not None else "max_gpus"
        # A pinned dp with one tp x pp x cp left leaves the GPU count to the pins, not to the cap.
        fixed = "dp" in pins and len({c.tp * c.pp * c.cp for x in searches for c in x.configs}) == 1
        scope = f"on the {count(found.gpus)} GPUs the pins fix" if fixed else f"within {count(cap)} GPUs"
        why = (f"{'target met' if days <= s.days else 'target not met'}: the fastest {title} layout {scope} "
               f"takes {duration(days)}")
        lay = result.layout
        from apsi.training.frameworks.space import Config

        step = fw.dp_step(Config(0, lay.pp, lay.tp, lay.cp, lay.vpp, lay.ep, lay.etp or 1, lay.zero), pins)
        if not fixed and found.gpus + lay.tp * lay.pp * lay.cp * step <= cap:
            # Its layout's next dp was within the cap and is not faster: the batch and the layout
            # rules bound the count, not the cap (the reference arithmetic's binding says batch
            # there too).
            binding = "batch"
            why += (f" on {count(found.gpus)}: its next dp would fit within the cap and is not faster (the batch of "
                    f"{s.batch_sequences:,} sequences, {fw.DP_RULES}, bounds dp)")
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
