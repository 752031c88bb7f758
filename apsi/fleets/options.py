"""Each fleet run's options: its own GPU/day frontier on each GPU type it may use, in whole nodes and days.

Owns `run_options()`: for a run and a GPU type, the points of apsi.frontier (the function `apsi
frontier` prints: the fastest layout on at most N GPUs at every N where it gets faster, each the
layout plan() chooses for its N) become options of the fleet program (apsi.fleets.tables.Option).
No formula is derived here: durations and layouts are the frontier's; the cost is the plan's rule,
GPU-hours x $/GPU-hour (apsi.training.assembly.money_of).

- Whole nodes. A run holds whole nodes of its type (the catalog's gpus_per_node): on n nodes the
  fastest layout is the last frontier point with at most n x gpus_per_node GPUs, so each point
  stands for ceil(GPUs / gpus_per_node) nodes and, of the points on one node count, the fastest
  is kept. Under a framework the frontier's counts are whole nodes already (its node_granularity).
- Whole days. A run holds its GPUs for its duration rounded up to whole days (the program's grid).
- The Pareto set: more nodes are kept only where they end sooner in whole days.
- Within the horizon: an option longer than the horizon cannot be scheduled and is dropped.
- Thinned: past `max_options` options (apsi.fleets.spec.DEFAULT_MAX_OPTIONS) the set keeps the one
  nearest each of `max_options` GPU counts spread evenly in log GPUs from its fewest to its most,
  both ends included (the frontier is a curve in log-log axes: README, The GPU/day frontier), and
  for a run with a deadline the fewest GPUs that meet it from the run's earliest start.
- Under --buy, thinned as each purchase's inventory would thin them: with k nodes bought the set
  runs up to the most GPUs the type then has, thinned as a fleet owning them thins it, and an
  option may be chosen only with the k's whose set keeps it (Option.bought_nodes). So the options
  with nothing bought are the fleet's without --buy (a purchase is never chosen where the GPUs
  owned would do), and the fleet that owns what --buy bought has the options --buy chose: its
  least purchase, once owned, meets every deadline, and a node less does not (where one thinning
  served every k, the fleet owning the purchase missed a deadline on 2 of the 4 fleets of
  examples/fleet-buy.yaml's runs that bought at 128 to 1,024 H100 owned: tests/test_fleet_buy.py).

The cost of an option is its GPUs held x its exact days x 24 h x $/GPU-hour: the GPUs the run
occupies, for as long as it runs; the program counts it in whole US dollars.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from apsi.fleets.tables import Option
from apsi.model.schema import FrontierPoint, Layout
from apsi.model.steptime import CALIBRATION_SPREAD
from apsi.model.documented import Documented

HOURS_PER_DAY = 24
STRETCH = 1 + CALIBRATION_SPREAD[1]
"""A run's days at the slow end of its calibrated range (a fleet's `confidence: high`): the largest
relative error of the predicted step time on the calibration set, as a plan's days_high applies it."""
_EPSILON_DAYS = 1e-9
"""A duration within this of a whole number of days is that many days (float days carry a few ulps)."""


class Levels(NamedTuple):
    """What --buy may add to one GPU type, as the thinning needs it (apsi.fleets.buy.Purchasable)."""

    before: int
    """The most GPUs owned on a day before the bought nodes are there."""
    after: int
    """The most GPUs owned on a day from then on."""
    node_gpus: int
    max_nodes: int

    def most(self, nodes: int) -> int:
        """The most GPUs of the type on any day with `nodes` nodes bought."""
        return max(self.before, self.after + nodes * self.node_gpus)

    def nodes_for(self, gpus: int) -> int:
        """The fewest nodes bought with which the type has `gpus` GPUs on a day (past max_nodes
        where no purchase gives them)."""
        return 0 if max(self.before, self.after) >= gpus else -(-(gpus - self.after) // self.node_gpus)


class Choice(Documented):
    """One option with what the fleet's output shows of it."""

    option: Option
    """The program's view: type, GPUs held, whole days, cost in whole dollars."""
    nodes: int
    run_days: float
    """The frontier's duration, days."""
    frontier_gpus: int
    """GPUs of the frontier's layout (at most the GPUs held: the rest of the last node idles)."""
    layout: Layout
    cost_usd: float | None
    """GPUs held x run_days x 24 x price; None without a price."""
    gpu_hours: float

    @property
    def price(self) -> float | None:
        """$ per GPU-hour the option is priced at (cost_usd over gpu_hours); None without a price."""
        return None if self.cost_usd is None else self.cost_usd / self.gpu_hours


def choices(points: list[FrontierPoint], gpu_type: str, gpus_per_node: int, price: float | None,
            horizon_days: int, most_gpus: int, max_options: int, stretch: float = 1.0,
            held: int | None = None, purchase: Levels | None = None, meets: int | None = None,
            elastic: bool = False) -> list[Choice]:
    """The run's options on one type from its frontier `points` (sorted by GPUs, days falling),
    within the horizon and the `most_gpus` the type ever has; each point's days times `stretch`
    (STRETCH under `confidence: high`). `held`: the GPUs a run already running holds on this type
    (apsi.fleets.started), whose option (the fastest point on at most its nodes) is kept whatever
    the thinning and the whole days say, as the one it runs on. `purchase` (under --buy): thinned
    as each purchase's inventory would thin them (by_purchase). `meets`: the most whole days in which
    the run meets its deadline from its earliest start; the fewest-GPU option within them is kept
    whatever the thinning (thin). `elastic`: more nodes are kept where they end sooner at all, not
    only in whole days (a segment on them does more of the work in the days it holds)."""
    points = [p.model_copy(update={"days": p.days * stretch}) for p in points] if stretch != 1.0 else points
    by_nodes: dict[int, FrontierPoint] = {}
    for p in points:
        by_nodes[math.ceil(p.gpus / gpus_per_node)] = p  # the last, fastest, point on each node count
    out: list[Choice] = []
    for nodes in sorted(by_nodes):
        p = by_nodes[nodes]
        days = max(1, math.ceil(p.days - _EPSILON_DAYS))
        sooner = (not out or days < out[-1].option.days
                  or elastic and _minutes(p.days) < out[-1].option.work_minutes)
        if days > horizon_days or nodes * gpus_per_node > most_gpus or not sooner:
            continue  # past the horizon or the inventory, or no sooner (in whole days) than fewer nodes
        out.append(_choice(p, gpu_type, nodes, gpus_per_node, price, days))
    out = thin(out, max_options, meets) if purchase is None else by_purchase(out, max_options, purchase, meets)
    if held is not None and held % gpus_per_node == 0:
        # A run already running: its own count's option (pinned by apsi.fleets.started).
        under = [(n, p) for n, p in by_nodes.items() if n <= held // gpus_per_node]
        if under:
            p = max(under)[1]  # the most nodes within: the fastest point there
            days = max(1, math.ceil(p.days - _EPSILON_DAYS))
            if days <= horizon_days:
                mine = _choice(p, gpu_type, held // gpus_per_node, gpus_per_node, price, days)
                out = sorted([c for c in out if c.option.gpus != held] + [mine], key=lambda c: c.option.gpus)
    return out


def _choice(p: FrontierPoint, gpu_type: str, nodes: int, gpus_per_node: int, price: float | None,
            days: int) -> Choice:
    """Frontier point `p` held on `nodes` nodes for `days` whole days: its GPU-hours and cost."""
    held = nodes * gpus_per_node
    hours = held * p.days * HOURS_PER_DAY
    cost = None if price is None else hours * price
    return Choice(option=Option(gpu_type=gpu_type, gpus=held, days=days, cost=round(cost or 0),
                                minutes=min(days * 24 * 60, _minutes(p.days))),
                  nodes=nodes, run_days=p.days, frontier_gpus=p.gpus, layout=p.layout,
                  cost_usd=cost, gpu_hours=hours)


def _minutes(days: float) -> int:
    """A duration of `days` in whole minutes, rounded up (a few ulps of a whole count are that count)."""
    return max(1, math.ceil(days * 24 * 60 - _EPSILON_DAYS))


def by_purchase(options: list[Choice], most: int, levels: Levels, meets: int | None = None) -> list[Choice]:
    """The `options` (sorted by GPUs) that an inventory a purchase makes would keep: with k nodes
    bought (0 to levels.max_nodes), those within the type's most GPUs then (Levels.most), thinned to
    `most` as a fleet owning them thins them; each with the k's that keep it (Option.bought_nodes,
    None where every k does). The set changes only where the most GPUs pass an option's count."""
    ranges: dict[int, list[list[int]]] = {}
    k = 0
    while k <= levels.max_nodes:
        within = sum(c.option.gpus <= levels.most(k) for c in options)
        # The next k whose most GPUs reach the option after them (none: the last k).
        after = levels.max_nodes + 1 if within == len(options) else \
            min(levels.max_nodes + 1, levels.nodes_for(options[within].option.gpus))
        for c in thin(options[:within], most, meets):
            kept = ranges.setdefault(c.option.gpus, [])
            if kept and kept[-1][1] == k - 1:
                kept[-1][1] = after - 1
            else:
                kept.append([k, after - 1])
        k = after
    out = []
    for c in options:
        nodes = tuple((a, b) for a, b in ranges.get(c.option.gpus, []))
        if nodes == ((0, levels.max_nodes),):
            out.append(c)
        elif nodes:
            out.append(c.model_copy(update={"option": c.option.model_copy(update={"bought_nodes": nodes})}))
    return out


def thin(options: list[Choice], most: int, meets: int | None = None) -> list[Choice]:
    """At most `most` of `options` (0: all), one more with `meets`: the nearest to each of `most`
    counts spread evenly in log GPUs from the fewest to the most, both kept; and, with `meets` (a run's whole days to its
    deadline from its earliest start), the fewest-GPU option within them. That one is the least a
    run needs to meet its deadline alone: thinned away, two runs due together could miss their
    deadlines on GPUs that hold both (240 and 264 of 512 H100, kept as 240 and 288)."""
    if most == 0 or len(options) <= most:
        return options
    due = next((i for i, c in enumerate(options) if c.option.days <= meets), None) if meets is not None else None
    if most == 1:
        return options[:1] if due in (None, 0) else [options[0], options[due]]
    low, high = math.log(options[0].option.gpus), math.log(options[-1].option.gpus)
    keep: list[int] = [] if due is None else [due]
    for k in range(most):
        target = low + (high - low) * k / (most - 1)
        nearest = min(range(len(options)), key=lambda i: (abs(math.log(options[i].option.gpus) - target), i))
        if nearest not in keep:
            keep.append(nearest)
    return [options[i] for i in sorted(keep)]


def frontier_points(inputs: dict[str, Any], gpu_type: str, cap: int, catalog: str | None) -> list[FrontierPoint]:
    """The run's frontier on `gpu_type` up to `cap` GPUs (the run's own gpus or max_gpus when it
    gives one; choices() drops what the inventory cannot hold): apsi.frontier with the run's plan
    keywords."""
    from apsi.api.frontier import frontier

    options: dict[str, Any] = dict(inputs, gpu=gpu_type)
    if "gpus" not in options:
        options.setdefault("max_gpus", cap)
    if catalog:
        options["catalog"] = catalog
    return frontier(**options)
