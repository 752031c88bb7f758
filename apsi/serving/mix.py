"""The replica mix under an inventory: how many replicas of each kind (a GPU type, a layout, its
batch) serve a load at the fewest GPUs or the least cost when GPUs of each type are limited.

The walk (apsi.serving.walk) gives each kind its GPUs per replica and its capacity (requests per
second, or requests in flight, at its largest batch meeting the targets). Choosing the counts is
an integer covering program, coupled by the inventory: one integer n_k per kind, for each GPU
type sum n_k g_k <= its count, sum n_k r_k >= the load, minimise sum n_k g_k (or sum n_k c_k).
CP-SAT solves it (one worker, a fixed seed: the same question, the same mix), proved optimal or
with its gap; a second stage keeps that optimum and, among the mixes reaching it, minimises the
other measure (cost after GPUs, GPUs after cost), then a third takes the most capacity.

Capacities are whole numbers in CAPACITY_SCALE units (a thousandth of a request per second),
each kind's rounded down and the load up, so a mix the program accepts carries the load.
Kinds another kind of the same GPU type dominates (no more GPUs, no less capacity, no more cost)
are dropped first: a mix using one can swap it for its dominator, so the optimum is unchanged.

Without an inventory (the question of whether a mix beats the best single layout, bounded by that
layout's GPUs or cost) nothing couples the kinds: cover_free() settles it exactly by enumerating
every total GPU count up to the bound (an unbounded knapsack, each count keeping its mixes that no
other beats on both cost and capacity), with no CP-SAT solve; past FREE_STATES it hands the
question to cover() with the bound as each type's inventory.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Literal, NamedTuple

CAPACITY_SCALE = 1000
"""Capacity units per request per second (or per request in flight)."""
TIME_LIMIT_S = 10.0
"""CP-SAT's time limit per stage, seconds."""


class Offer(NamedTuple):
    """One replica kind as the program sees it."""

    gpu: str
    gpus: int
    """GPUs per replica."""
    capacity: int
    """Load one replica carries, CAPACITY_SCALE units, rounded down."""
    cost: int
    """Price of one replica per hour, in 10^-6 USD (0 without a price)."""
    exact: float | None = None
    """The load one replica carries, requests/s (or in flight), as the walk computed it: what a mix
    is judged by exactly (capacity is its CAPACITY_SCALE units rounded down, for CP-SAT); None: the
    units are exact."""

    @property
    def load(self) -> Fraction:
        """The load one replica carries, exactly (a float is a rational)."""
        return Fraction(self.exact) if self.exact is not None else Fraction(self.capacity, CAPACITY_SCALE)


class Mix(NamedTuple):
    counts: tuple[int, ...]
    """Replicas of each offer, in the offers' order."""
    status: str
    """OPTIMAL or FEASIBLE."""
    gap: float
    method: Literal["cp-sat", "enumeration"] = "cp-sat"
    """How the counts were chosen: CP-SAT (cover) or the exact enumeration (cover_free)."""


def scaled(load: float) -> int:
    """A load in CAPACITY_SCALE units, rounded up, at least one for any load above zero (a load of
    1e-12 requests/s rounded to none, and an empty mix "carried" it)."""
    return max(1, math.ceil(load * CAPACITY_SCALE - 1e-9)) if load > 0 else 0


def undominated(offers: list[Offer]) -> list[int]:
    """Indices of the offers no other offer of its GPU type dominates (module docstring); of
    equal offers, the first."""
    keep = []
    loads = [o.load for o in offers]  # each a Fraction, made once
    for i, a in enumerate(offers):
        beaten = False
        for j, b in enumerate(offers):
            if i == j or a.gpu != b.gpu:
                continue
            if b.gpus <= a.gpus and loads[j] >= loads[i] and b.cost <= a.cost and (b != a or j < i):
                beaten = True
                break
        if not beaten:
            keep.append(i)
    return keep


FREE_STATES = 200_000
"""The most (GPU count x kind) steps cover_free() enumerates before it hands the question to CP-SAT."""
FREE_WORK = 400_000
"""The most mixes cover_free() extends (the fronts' sizes summed over GPU counts and kinds, about
a second) before it hands the question to CP-SAT: a 1T model at 944 requests/s over H100 and H200
at pp 4 extended millions, 14 s."""


def cover_free(offers: list[Offer], need: int, objective: str, most_gpus: dict[str, int],
               load: float | None = None) -> Mix | None:
    """cover() without an inventory: the counts meeting `need` capacity units at the fewest GPUs
    (then the least cost, then the most capacity) or the least cost (then the fewest GPUs, then
    the most capacity), on at most max(most_gpus) GPUs in all; None when no mix within it carries
    the load. most_gpus is plan._caps' bound for each type (what a mix may use and still beat the
    best single layout: fewer GPUs, or less cost over the type's price), which no mix that beats
    that layout exceeds, so it needs no count of its own here: the caller keeps the answer only
    when it beats the layout.

    Exact by enumeration: for every total G of GPUs from 1 up, the mixes of exactly G GPUs that
    no other mix of G GPUs beats on both cost and capacity (the others lose every later stage),
    each extended by one replica of each kind; for the fewest GPUs the first G with a mix carrying
    the load ends it. Of mixes equal on all three, the first in the kinds' order."""
    kept = [i for i in undominated(offers) if offers[i].load > 0
            and most_gpus.get(offers[i].gpu, 0) >= offers[i].gpus]
    wanted = Fraction(need, CAPACITY_SCALE) if load is None else Fraction(load)
    """The load, exactly: each mix is judged by its replicas' exact loads (Offer.load), not units."""
    if not kept:
        return None
    top = max(most_gpus.get(offers[i].gpu, 0) for i in kept)
    if objective == "gpus":
        # A mix holding a replica of kind k carries the rest of the load on GPUs that each carry at
        # most the best load per GPU of any kind, e: it needs g_k + (load - l_k) / e GPUs at least
        # (more replicas of k only add g_k - l_k / e >= 0 each). A kind whose bound passes `top`
        # is in no mix within it: left out, exactly.
        e = max(offers[i].load / offers[i].gpus for i in kept)
        kept = [i for i in kept if offers[i].gpus + (wanted - offers[i].load) / e <= top]
        if not kept:
            return None
    usable = set(kept)
    # For CP-SAT, the kinds left out carry no load (_kept then leaves them out too).
    reduced = [o if i in usable else o._replace(capacity=0, exact=0.0) for i, o in enumerate(offers)]
    if top * len(kept) > FREE_STATES:
        return cover(reduced, dict(most_gpus), need, objective, load=load)
    # The loads and the target as whole numbers over one common denominator: the same order and
    # sums as the Fractions (a float is a dyadic rational), at integer speed.
    fractions = [offers[i].load for i in kept]  # each a Fraction, made once for the whole enumeration
    scale = math.lcm(wanted.denominator, *(f.denominator for f in fractions))
    loads = [f.numerator * (scale // f.denominator) for f in fractions]
    exact = wanted.numerator * (scale // wanted.denominator)
    # states[G]: (cost, capacity, counts of each kept kind), none beaten on both by another of G GPUs.
    zero = (0, 0, (0,) * len(kept))
    states: list[list[tuple[int, int, tuple[int, ...]]]] = [[zero]] + [[] for _ in range(top)]
    best: tuple[tuple[int, int, int], tuple[int, ...]] | None = None
    work = 0
    for g in range(1, top + 1):
        grown: dict[tuple[int, int], tuple[int, ...]] = {}
        for j, i in enumerate(kept):
            o = offers[i]
            if o.gpus > g:
                continue
            work += len(states[g - o.gpus])
            for cost, capacity, counts in states[g - o.gpus]:
                n = counts[:j] + (counts[j] + 1,) + counts[j + 1:]
                pair = (cost + o.cost, capacity + loads[j])
                if pair not in grown or n > grown[pair]:
                    grown[pair] = n  # the most replicas of the earlier kinds
        if work > FREE_WORK:
            # Fronts this wide (two GPU types at different prices, thousands of GPUs) are CP-SAT's
            # to settle, exactly too (cover with the exact load), in a fraction of the time.
            return cover(reduced, dict(most_gpus), need, objective, load=load)
        front: list[tuple[int, int, tuple[int, ...]]] = []
        for (cost, capacity), n in sorted(grown.items(), key=lambda x: (x[0][0], -x[0][1])):
            if not front or capacity > front[-1][1]:
                front.append((cost, capacity, n))
        states[g] = front
        for cost, capacity, n in front:
            if capacity >= exact:
                key = (g, cost, -capacity) if objective == "gpus" else (cost, g, -capacity)
                if best is None or key < best[0]:
                    best = (key, n)
        if best is not None and objective == "gpus":
            break
    if best is None:
        return None
    chosen = [0] * len(offers)
    for j, i in enumerate(kept):
        chosen[i] = best[1][j]
    return Mix(tuple(chosen), "OPTIMAL", 0.0, "enumeration")


def most(offers: list[Offer], inventory: dict[str, int], time_limit_s: float = TIME_LIMIT_S) -> int:
    """The most capacity units any mix within `inventory` carries (the load an inventory can serve
    at the targets), proved by CP-SAT; within the time limit, the best found."""
    kept = _kept(offers, inventory)
    if not kept:
        return 0
    model, n = _counts(offers, inventory, kept)
    model.maximize(sum(offers[i].capacity * n[i] for i in kept))
    solver = _solver(time_limit_s)
    solver.solve(model)
    return int(round(solver.objective_value))


def _kept(offers: list[Offer], inventory: dict[str, int]) -> list[int]:
    """The offers worth a count: undominated, carrying some load, and fitting the inventory."""
    return [i for i in undominated(offers)
            if offers[i].load > 0 and inventory.get(offers[i].gpu, 0) >= offers[i].gpus]


def _counts(offers: list[Offer], inventory: dict[str, int], kept: list[int]):
    """A CP-SAT model with one count per kept offer and each GPU type's inventory as a limit."""
    from ortools.sat.python import cp_model

    model = cp_model.CpModel()
    n = {i: model.new_int_var(0, inventory[offers[i].gpu] // offers[i].gpus, f"n{i}") for i in kept}
    for gpu, count in inventory.items():
        terms = [offers[i].gpus * n[i] for i in kept if offers[i].gpu == gpu]
        if terms:
            model.add(sum(terms) <= count)
    return model, n


def _solver(time_limit_s: float):
    from ortools.sat.python import cp_model

    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    solver.parameters.max_time_in_seconds = time_limit_s
    return solver


def cover(offers: list[Offer], inventory: dict[str, int], need: int, objective: str = "gpus",
          time_limit_s: float = TIME_LIMIT_S, load: float | None = None) -> Mix | None:
    """The counts of each offer meeting `need` capacity units within `inventory` GPUs per type,
    at the fewest GPUs (objective "gpus") or the least cost ("cost"); None when no mix can.

    With `load` (the requests/s or in flight that `need` rounds up) the answer is exact: CP-SAT
    first solves with each replica's capacity rounded down (a mix it accepts carries the load),
    then exact() looks for a mix strictly better that carries the load exactly (Offer.load), which
    the rounding may have turned away (a 16-GPU answer became 18 under an inventory that does not
    bind)."""
    kept = _kept(offers, inventory)
    if load is not None:
        if sum(offers[i].load * (inventory[offers[i].gpu] // offers[i].gpus) for i in kept) < Fraction(load):
            return None
        # Rounded from the exact loads (a float product or scaled()'s tolerance could round the
        # wrong way): capacities down, the load up, so that a mix the program accepts carries it.
        down = [o._replace(capacity=math.floor(o.load * CAPACITY_SCALE)) for o in offers]
        rounded = _cover(down, inventory, math.ceil(Fraction(load) * CAPACITY_SCALE), objective, time_limit_s, kept)
        return exact(offers, inventory, kept, load, objective, rounded, time_limit_s)
    if sum(offers[i].capacity * (inventory[offers[i].gpu] // offers[i].gpus) for i in kept) < need:
        return None
    return _cover(offers, inventory, need, objective, time_limit_s, kept)


MAX_EXACT_TRIES = 200
"""Mixes exact() checks before it keeps the best it has (FEASIBLE): each is the optimum of the
load rounded in its favour, and only those within the rounding of the load are checked."""


EXACT_SUM_BITS = 60
"""The most bits exact()'s capacity sum may take (CP-SAT's coefficients and sums are 64-bit)."""


def exact_scale(offers: list[Offer], inventory: dict[str, int], kept: list[int], load: float) -> int:
    """Units per request/s for exact()'s optimistic program: the largest power of two at which every
    replica the inventory allows, each at its load rounded up, sums within EXACT_SUM_BITS bits;
    CAPACITY_SCALE where that is coarser."""
    most = sum(offers[i].load * (inventory[offers[i].gpu] // offers[i].gpus) for i in kept) + Fraction(load) + 1
    room = Fraction(2 ** EXACT_SUM_BITS) / most
    return max(CAPACITY_SCALE, 2 ** max(0, math.floor(math.log2(room))))


def exact(offers: list[Offer], inventory: dict[str, int], kept: list[int], load: float, objective: str,
          rounded: Mix | None, time_limit_s: float = TIME_LIMIT_S) -> Mix | None:
    """The best mix judged exactly: `rounded` (the answer with capacities rounded down, which
    carries the load) unless a mix strictly better (fewer GPUs, or less cost) carries the load
    exactly. CP-SAT solves the rounding the other way (capacities up, the load down: every mix that
    carries the load exactly passes it) for a mix better than the best so far; one that carries
    the load exactly is the new best, one that does not is forbidden, until none is left (the
    best is then proved) or MAX_EXACT_TRIES. A mix found so keeps its own cost and capacity (the
    later stages, which choose among equal mixes, ran on the rounded program)."""
    from ortools.sat.python import cp_model

    model, n = _counts(offers, inventory, kept)
    # The optimistic rounding on a scale as fine as 64-bit sums allow: its slack (a replica's load
    # rounded up by at most one unit each) lets through fewer mixes that fail the exact check (at
    # CAPACITY_SCALE, 11,228 replicas let through 11 requests/s of slack, and exact() solved and
    # forbade for 30 s).
    scale = exact_scale(offers, inventory, kept, load)
    up = {i: math.ceil(offers[i].load * scale) for i in kept}
    model.add(sum(up[i] * n[i] for i in kept) >= math.floor(Fraction(load) * scale))
    measure = {i: offers[i].gpus if objective == "gpus" else offers[i].cost for i in kept}
    primary = sum(measure[i] * n[i] for i in kept)
    best = rounded
    value = None if rounded is None else sum(measure[i] * rounded.counts[i] for i in kept)
    solver = _solver(time_limit_s)
    model.minimize(primary)
    for _ in range(MAX_EXACT_TRIES):
        if value is not None:
            model.add(primary <= value - 1)
        result = solver.solve(model)
        if result == cp_model.INFEASIBLE:
            return best  # nothing strictly better carries the load, exactly: proved
        if result not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            break
        counts = {i: solver.value(n[i]) for i in kept}
        if sum(offers[i].load * counts[i] for i in kept) >= Fraction(load):
            value = sum(measure[i] * counts[i] for i in kept)
            best = Mix(tuple(counts.get(i, 0) for i in range(len(offers))), "OPTIMAL", 0.0)
        else:
            model.add_forbidden_assignments([n[i] for i in kept], [tuple(counts[i] for i in kept)])
    if best is None:
        # No mix found, and none proved not to exist (the solver stopped on its time limit, or the
        # tries ran out): said so, for the caller not to call its own answer proved.
        return UNPROVED
    return best._replace(status="FEASIBLE")  # the tries ran out: the best found, not proved


UNPROVED = Mix((), "UNKNOWN", 1.0)
"""exact()'s answer when it found no mix and proved none: the caller's answer stands, unproved."""


def _cover(offers: list[Offer], inventory: dict[str, int], need: int, objective: str, time_limit_s: float,
           kept: list[int]) -> Mix | None:
    """cover()'s program on the capacities rounded down (CP-SAT, in stages)."""
    from ortools.sat.python import cp_model

    model, n = _counts(offers, inventory, kept)
    model.add(sum(offers[i].capacity * n[i] for i in kept) >= need)
    gpus = sum(offers[i].gpus * n[i] for i in kept)
    cost = sum(offers[i].cost * n[i] for i in kept)
    capacity = sum(offers[i].capacity * n[i] for i in kept)
    stages = [(gpus, 1), (cost, 1)] if objective == "gpus" else [(cost, 1), (gpus, 1)]
    stages.append((capacity, -1))
    solver = _solver(time_limit_s)
    status, gap = "OPTIMAL", 0.0
    values: dict[int, int] = {}
    for depth, (expr, sign) in enumerate(stages):
        if sign > 0:
            model.minimize(expr)
        else:
            model.maximize(expr)
        if values:
            model.clear_hints()
            for i, v in values.items():
                model.add_hint(n[i], v)
        result = solver.solve(model)
        if result not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            if values:
                break  # a later stage ran out of time: the earlier stage's mix stands
            return None
        values = {i: solver.value(n[i]) for i in kept}
        if depth == 0:
            best, bound = solver.objective_value, solver.best_objective_bound
            if result != cp_model.OPTIMAL:
                status = "FEASIBLE"
                gap = abs(best - bound) / max(abs(best), 1e-9)
        # Keep this stage's optimum (or the value found) while the next stage chooses among them.
        value = int(round(solver.objective_value))
        model.add(expr <= value if sign > 0 else expr >= value)
        if result != cp_model.OPTIMAL:
            break
    return Mix(tuple(values.get(i, 0) for i in range(len(offers))), status, gap)
