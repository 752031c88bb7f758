"""The walks over the framework layout space, one per objective, sharing one engine.

Owns fewest() (the fewest GPUs meeting the target), cheapest() (the least cost or energy meeting
it) and fastest() (the fastest within the cap), each over several GPU types' searches at once, and
faster() (the fewest GPUs above a count that beat a duration: the frontier's next point).
They share _walk(): groups of families are visited in order of a cheap lower bound, refined into
their families' exact bounds (apsi.training.frameworks.bounds; fewest() works a family's out only
when its memory floors' lower bound comes first), and a family is visited only when its
bound comes first; the walk stops once the smallest bound left cannot beat the best found, so
the answer is optimal over every legal layout (tests/test_search.py checks it against a plain
enumeration). Ties follow the objective's key, then the types' order, then tie().
"""

from __future__ import annotations

import bisect
import heapq
import math
from typing import Any

from apsi.training.frameworks.bounds import Search
from apsi.training.frameworks.found import Found, Seconds
from apsi.training.frameworks.layouts import at_rank
from apsi.training.frameworks.space import Config, Family, Group, Shape, tie


_REFINE, _RESOLVE, _VISIT = 0, 1, 2
"""What a heap entry of _walk() waits for: refining (a shape or group), its exact bound (a family
put in with a lower one), its visit (a family at its exact bound)."""


def _walk(entries: list, refine, visit, done, again: bool = False, resolve=None) -> None:
    """Visit families in order of their bound, exactly: `entries` are (cheap bound, type index,
    key, shape or group of families); a shape is first refined into its groups and a group into
    its families, each with its own bound (`refine(i, item)`: (bound, child) for each that can
    still meet the target) and put back, and a family is visited (`visit(i, family)`) only when its
    exact bound comes first. The walk ends when `done(bound)` says the smallest bound left cannot
    beat the best found. A shape's bound is at most its groups' and a group's at most its
    families', so the visits come in the order of the exact bounds. With `again`, a visit may
    return a bound above its own at which the family is to be visited again (what it left).

    With `resolve`, refine() may give a family a lower bound only, as (bound, family, anything):
    it is put in at the later of that and its group's, and its exact bound (`resolve(i, family)`,
    None where it has none) is worked out when that comes first, so a family whose lower bound
    passes the best found never has it worked out. Its visit comes where its exact bound puts it
    in the same order (bound, type, key), so the visits are those of exact bounds throughout."""
    heap = [(bound, i, key, _REFINE, item) for bound, i, key, item in entries]
    heapq.heapify(heap)
    while heap:
        bound, i, key, kind, payload = heapq.heappop(heap)
        if done(bound):
            return
        if kind == _REFINE:
            for row in refine(i, payload):
                child = row[1]
                if len(row) == 3:  # a family's lower bound
                    heapq.heappush(heap, (max(row[0], bound), i, key + (child.index,), _RESOLVE, child))
                else:
                    heapq.heappush(heap, (row[0], i, key + (child.index,),
                                          _VISIT if isinstance(child, Family) else _REFINE, child))
            continue
        if kind == _RESOLVE:
            exact = resolve(i, payload)
            if exact is None:
                continue
            assert exact >= bound, "a family's exact bound is at least its lower one"
            if exact > bound:
                heapq.heappush(heap, (exact, i, key, _VISIT, payload))
                continue
        later = visit(i, payload)
        if again and later is not None:
            assert later > bound, "a family comes back only past the bound it was visited at"
            heapq.heappush(heap, (later, i, key, _VISIT, payload))


def ranked(searches: list[Search], target: float | None) -> list[tuple[int, int, tuple, Shape]]:
    """Every (GPU bound, type index, key, shape) that may meet the target: fewest()'s start."""
    return [(bound, i, (shape.index,), shape) for i, search in enumerate(searches)
            for bound, shape in search.shape_rows(target)]


def fewest(searches: list[Search], target: float | None, rows: list | None = None,
           skip: frozenset[int] = frozenset()) -> tuple[int, Found] | None:
    """The fewest GPUs meeting the target over several GPU types (index into `searches`, layout).

    Families are visited in order of their bound (the GPUs at the first legal dp whose duration
    floor meets the target and at which their memory floors may fit) and the walk ends once the bound passes the best layout found. For
    each configuration of a family, the answer is its first dp that both fits (a suffix, from
    bisection) and meets the target (checked one by one from there). Ties: shorter, then the
    types' order, then the configuration order. `rows` is ranked()'s list when the caller has it;
    `skip` leaves those searches out (the runner-up's: every search of the winner's type)."""
    best: list[tuple[tuple[Any, ...], int, Found]] = []
    heavier: dict[tuple[int, int], Shape] = {}
    """By (type index, shape index): the shapes whose heavier recomputations' groups are held back
    until the group of the lightest is refined (refine())."""

    def refine(i: int, item: Shape | Group) -> list:
        search = searches[i]
        if isinstance(item, Shape):
            if len(item.groups) > 1 and search.dominated(at_rank(1, item.first[1:])):
                # Each heavier recomputation's family is no faster than the lightest's of the same
                # members and dp step (apsi.training.frameworks.dominance), so its bound is no lower: the
                # heavier groups wait for the lightest's family bounds (and their own bounds are
                # worked out only then). Where the lightest has no bound, neither has any of them.
                bounds: list = search.group_rows(item, target, item.groups[:1])
                if bounds:
                    heavier[i, item.index] = item
            else:
                bounds = search.group_rows(item, target)
        else:
            bounds = search.gpu_bounds(item, target, best[0][0][0] if best else None)
            shape = heavier.pop((i, item.shape.index), None) if item is item.shape.groups[0] else None
            if shape is None:
                for row in bounds:
                    if len(row) == 3:  # a lower bound: its row, for resolve()
                        pending[i, row[1].index] = row[2]
            else:
                # No heavier family's bound is below the least of the lightest's exact ones (those
                # the lightest has none for, past the cap or the best, have none either).
                bounds = [(search.family_bound(row[2], target), row[1]) if len(row) == 3 else row for row in bounds]
                bounds = [row for row in bounds if row[0]]
                least = min((row[0] for row in bounds), default=math.inf)
                if least != math.inf and (not best or least <= best[0][0][0]):
                    bounds = bounds + [(max(bound, least), group)
                                       for bound, group in search.group_rows(shape, target, shape.groups[1:])]
        # A group or family whose bound passes the best found is never visited (done()): not kept.
        return [x for x in bounds if x[0] <= best[0][0][0]] if best else bounds

    pending: dict[tuple[int, int], list] = {}
    """By (type index, family index), the gpu_bounds() row of a family put in with a lower bound."""

    def resolve(i: int, family: Family) -> int | None:
        return searches[i].family_bound(pending.pop((i, family.index)), target) or None

    early: dict[tuple[int, int], list[int]] = {}
    """By (type index, family index), for a family first visited before any layout was found: each
    member's first legal dp not yet ruled out."""

    def visit(i: int, family: Family) -> int | None:
        search = searches[i]
        most = best[0][0][0] if best else None
        if most is not None and search.passed_over(family, target, most):
            return None  # a heavier recomputation where the lightest's floors already fail
        modelled = not search.s.flat_mfu
        state = early.get((i, family.index))
        floored = False
        """Whether every member starts at the family's first dp whose floor meets the target."""
        if state is None and most is None:  # its first visit, before any layout was found
            start = search.start(family, target)
            at = max(start, search.fit_start(family))  # where its bound is (gpu_bounds)
            state = early[i, family.index] = [at] * len(search.members(family))
            floored = at == start
        if state is None:
            start = search.start(family, target)
            for c in family.within(search.capacity):
                j = search.first_meeting(c, start, target, most, tie=tied(modelled))
                if j is not None:
                    take(i, search, c, j)
                    most = best[0][0][0]
            search.noted(family, target)
            return None
        # Before any layout is found, a family looks only up to LOOKAHEAD times its own bound (a
        # first best found far past the answer prunes little) and comes back at its first dp left;
        # once one is found, up to it, each member from where it stopped.
        dps = search.family_dps(family)
        per = family.per_replica
        limit = most if most is not None else LOOKAHEAD * per * dps[min(state)]
        low = len(dps)
        for n, c in enumerate(search.members(family)):
            if state[n] >= len(dps) or per * dps[state[n]] > limit:
                low = min(low, state[n])
                continue
            j, resume = search.meeting(c, state[n], target, limit, floored_before=floored, tie=tied(modelled))
            state[n] = len(dps) if j is not None else resume  # its first layout found: no later one is better
            low = min(low, state[n])
            if j is not None:
                take(i, search, c, j)
                limit = best[0][0][0]
        search.noted(family, target)
        return per * dps[low] if low < len(dps) and (not best or per * dps[low] <= best[0][0][0]) else None

    def tied(modelled: bool) -> float | None:
        """Search.meeting's `tie`: a layout on the best's GPUs wins only by its duration (Seconds
        ties within a billionth), so one whose step's floor is past the best's needs no step time."""
        return best[0][0][1].value * (1 + TIE) if best and modelled else None

    def take(i: int, search: Search, c: Config, j: int) -> None:
        """c at its j-th legal dp, which fits and meets the target: the best if it beats it."""
        dps, ms = search.legal(c)
        key = (c.tp * c.pp * c.cp * dps[j], search.exact(c, dps[j], ms[j]), i, tie(c))
        if not best or key < best[0][0]:
            best[:] = [(key, i, search.found(c, j))]

    entries = [row for row in (ranked(searches, target) if rows is None else rows) if row[1] not in skip]
    _walk(entries, refine, visit, lambda bound: bool(best) and bound > best[0][0][0], again=True, resolve=resolve)
    return (best[0][1], best[0][2]) if best else None


def cheapest(searches: list[Search], target: float, weights: list[float | None],
             skip: frozenset[int] = frozenset()) -> tuple[int, Found] | None:
    """The cheapest layout meeting the target over several GPU types, cost being weight x GPUs x
    seconds (weight: $ per GPU-second, or watts, for each type; None leaves a type out).

    GPUs x seconds = K_r (1 + (p - 1) / (v m)) grows with dp (m falls), so a configuration's
    cheapest layout is its fewest-GPU one, and its cost at the first dp whose duration floor meets
    the target bounds it from below: families are visited in order of that bound and the walk
    ends once it passes the best found. Ties: fewer GPUs, shorter, the types' order, the
    configuration order."""
    best: list[tuple[tuple[Any, ...], int, Found]] = []
    entries = []
    weight = {i: w for i, w in enumerate(weights) if w is not None and i not in skip}
    """Each type's weight, for the types weighed (the others are left out)."""
    for i, search in enumerate(searches):
        if i not in weight:
            continue
        for low, group in search.rows(target):
            c = group.first
            # At dp >= low / (t p c) a replica runs at most B_max / (b dp) micro-batches.
            most = search.b_max / (search.mb * (low // (c.tp * c.pp * c.cp)))
            entries.append((weight[i] * search.group_k(group) * (1 + (c.pp - 1) / (c.vpp * most)),
                            i, (group.index,), group))

    def refine(i: int, group: Group) -> list[tuple[float, Family]]:
        search = searches[i]
        out = []
        for family in group.families(search.capacity):
            dps, ms = search.legal(family.first)
            # No member fits below its memory floors' first dp (Search.fit_start), and the cost
            # floor rises with dp (m falls): from the later of the two.
            start = max(search.start(family, target), search.fit_start(family))
            if start < len(dps):
                out.append((_cost_floor(search, weight[i], family.first, ms[start], search.family_k(family)), family))
        return out

    def visit(i: int, family: Family) -> None:
        search = searches[i]
        start = search.start(family, target)
        for c in family.within(search.capacity):
            j = search.first_meeting(c, start, target)
            if j is None:
                continue
            dps, ms = search.legal(c)
            # At a flat MFU the first dp meeting the target is the cheapest (GPU-seconds grow with
            # dp); under the step-time model the steps round up and the exposed traffic moves, so
            # the later dps are checked until their cost floor passes the best found.
            for k in (range(j, j + 1) if search.s.flat_mfu else range(j, len(dps))):
                if k > j and best and _cost_floor(search, weight[i], c, ms[k]) > best[0][0][0].value * (1 + 1e-9):
                    break
                if k > j and (search.fits(c, dps[k], ms[k]) is None or search.seconds(c, dps[k], ms[k]) > target):
                    continue
                key = (_cost(search, weight[i], c, dps[k], ms[k]), c.tp * c.pp * c.cp * dps[k],
                       search.exact(c, dps[k], ms[k]), i, tie(c))
                if not best or key < best[0][0]:
                    best[:] = [(key, i, search.found(c, k))]

    _walk(entries, refine, visit, lambda bound: bool(best) and bound > best[0][0][0].value * (1 + 1e-9))
    return (best[0][1], best[0][2]) if best else None


def _cost_floor(search: Search, weight: float, c: Config, m: int, k: float | None = None) -> float:
    """A lower bound on weight x GPUs x seconds at m micro-batches per replica or fewer (at more
    dp): weight K (1 + (p - 1) / (v m)) (timing.floor_k; K is c's, or `k`, a family's least)."""
    return weight * (search.k(c) if k is None else k) * (1 + (c.pp - 1) / (c.vpp * m))


def _cost(search: Search, weight: float, c: Config, dp: int, m: int) -> Seconds:
    """weight x GPUs x seconds, exactly ordered: at a flat MFU weight K_r (v m + p - 1) / (v m)."""
    if search.s.flat_mfu:
        return Seconds(weight * search.k(c), c.vpp * m + c.pp - 1, c.vpp * m)
    return Seconds.modelled(weight * c.tp * c.pp * c.cp * dp * search.seconds(c, dp, m))


def fastest(searches: list[Search]) -> tuple[int, Found] | None:
    """The fastest layout within the cap over several GPU types: families visited by the floor
    of their duration at their widest legal dp; for each configuration, the fastest of the dps at
    which it fits; the walk ends once the floor passes the best found. Ties: fewer GPUs, then the
    types' order, then the configuration order."""
    best: list[tuple[tuple[Any, ...], int, Found]] = []
    entries = []
    for i, search in enumerate(searches):
        for shape in search.shapes:
            c = shape.first
            widest = min(search.cap // shape.per_replica, int(search.b_max // search.mb))
            if widest >= search.least_dp(shape):  # else no dp within the cap fits (memory floors)
                # The least K of its groups (shape_k): its groups' bounds are no lower.
                entries.append((search.floor_seconds(c, widest, search.shape_k(shape)), i, (shape.index,), shape))

    def refine(i: int, item: Shape | Group) -> list[tuple[float, Group | Family]]:
        out: list[tuple[float, Group | Family]] = []
        if isinstance(item, Shape):
            widest = min(searches[i].cap // item.per_replica, int(searches[i].b_max // searches[i].mb))
            return [(searches[i].floor_seconds(group.first, widest, searches[i].group_k(group)), group)
                    for group in item.groups]
        for family in item.families(searches[i].capacity):
            dps = searches[i].family_dps(family)
            if searches[i].fit_start(family) < len(dps):  # some dp its memory floors may fit
                out.append((searches[i].floor_seconds(family.first, dps[-1], searches[i].family_k(family)), family))
        return out

    def visit(i: int, family: Family) -> None:
        search = searches[i]
        # Its configurations by their own K (split_k, c's fastest split's slowest rank: tighter than
        # the family's), least first: the best found falls soonest, and once one's floor at the
        # widest dp passes it, so does every later one's (floor_seconds rises with K).
        members = sorted(search.members(family), key=lambda c: (search.split_k(c), tie(c)))
        dps, _ = search.legal(family.first)
        fit = search.fit_start(family)  # no member fits below it (its memory floors)
        for c in members:
            own = search.split_k(c)
            if best and search.floor_seconds(c, dps[-1], own) > best[0][0][0].value * (1 + 1e-9):
                break
            dps, ms = search.legal(c)
            # From the widest dp down: the floors rise as dp falls, and memory does too, so the
            # first dp that does not fit ends c (the fitting dps are a suffix of the legal ones).
            # A block of BLOCK dps whose common floor is above the best is passed over whole.
            j = len(dps) - 1
            while j >= 0:
                floor = fit
                if best and not search.s.flat_mfu:
                    # Only the dps in the closed-form window of the best so far can have a dp_floor
                    # within it (Search.floor_window): above it each is too slow, below it every one.
                    lo, hi = search.floor_window(c, best[0][0][0].value)
                    j = min(j, bisect.bisect_right(dps, hi) - 1)
                    floor = max(fit, bisect.bisect_left(dps, lo))
                if j < floor:
                    break
                low = max(j - BLOCK + 1, floor)
                if best and not search.s.flat_mfu and search.block_floor(c, dps[low], dps[j]) > best[0][0][0].value:
                    if search.floor_seconds(c, dps[low], own) > best[0][0][0].value * (1 + 1e-9):
                        break
                    j = low - 1
                    continue
                if not _fastest_dps(search, c, dps, ms, own, range(j, low - 1, -1), i, best) or low == floor > 0:
                    break
                j = low - 1

    _walk(entries, refine, visit, lambda bound: bool(best) and bound > best[0][0][0].value * (1 + 1e-9))
    return (best[0][1], best[0][2]) if best else None


LOOKAHEAD = 2
"""How far past its own bound fewest() looks in a family before any layout is found (as a factor of
its GPUs); the family comes back for the rest."""

BLOCK = 32
"""dps fastest() passes over at once when their common floor (Search.block_floor) cannot beat the
best found: a wide batch has thousands of legal dps per configuration."""


def _fastest_dps(search: "Search", c: Config, dps: list[int], ms: list[int], own: float, order: range, i: int,
                 best: list) -> bool:
    """fastest()'s look at c's dps in `order` (falling): each that its floors let through, fits
    and beats the best replaces it. False once no smaller dp can: its floor is above the best, or
    it does not fit (memory rises as dp falls)."""
    scale, bubble = search.floor_factors(c, own)  # floor_seconds(c, dp, own) = scale (1 / dp + bubble)
    modelled = not search.s.flat_mfu
    floors = search.floors_of(c) if modelled else None
    for j in order:
        if best:
            limit = best[0][0][0].value
            if scale * (1 / dps[j] + bubble) > limit * (1 + 1e-9):
                return False
            # The whole step's floor at this dp (the tail included), before any memory evaluation:
            # a dp it puts above the best cannot beat or tie it (too_slow is strict).
            if modelled and search.too_slow(c, dps[j], ms[j], limit, floors):
                continue
        if search.fits(c, dps[j], ms[j]) is None:
            return False
        key = (search.exact(c, dps[j], ms[j]), c.tp * c.pp * c.cp * dps[j], i, tie(c))
        if not best or key < best[0][0]:
            best[:] = [(key, i, search.found(c, j))]
    return True


TIE = 2e-9
"""How far above `below` faster()'s target sits: every duration Seconds orders strictly below it
(floats within a billionth tie) is then within the target, whose bounds the walk uses."""


def faster(searches: list[Search], below: Seconds | None, after: int, queue: list,
           memo: dict) -> tuple[int, Found] | None:
    """The fewest GPUs, more than `after`, at which a layout runs strictly faster than `below`
    (Seconds' order; any layout that fits when None), and of those the shortest (ties: the types'
    order, then the configuration order), over several searches: the frontier's next point
    (apsi.training.frameworks.frontier).

    fewest()'s walk with the target below's value (1 + TIE), each family's and configuration's dps
    starting past `after` GPUs, and a configuration's answer its first dp that fits, meets the
    target and beats `below` (a tie within the target is passed over). It keeps two things for the
    next call of a chain, whose `below` is shorter and `after` larger, so that every bound only
    rises from one call to the next:
    - `queue`, a heap of (bound, type index, key, group_k or None, group or family) for the groups
      and families still in play: a bound from an earlier call is a lower bound now, so one is
      looked at again only when its old bound comes first; its bound is then worked out anew
      (Search.row_past for a group, its first dp past `after` whose floor meets the target for a
      family) and it is put back if that rose, dropped if it has none (no later call can meet
      it); else a group is replaced by its families and a family is visited, and put back at the
      end;
    - `memo`, (type index, configuration) to the first of its legal dps not yet ruled out and
      whether it was that configuration's answer (if it still beats `below`, it is again). A dp
      first_meeting() passes over does not fit or is too slow for the target, and so for every
      later one; when it finds none within the best found so far, every dp up to that best is
      passed over, so a configuration's dps are each ruled out once over the whole chain."""
    target = None if below is None else below.value * (1 + TIE)
    best: list = []

    def begin(i: int, family: Family, bound: int) -> tuple[list[int], int]:
        """The family's legal dps and the first that may still answer: past `after`, past what
        its members' memo rules out, and (where those leave it within `bound`, the bound it was
        queued with) at least its floor's start for the target."""
        search = searches[i]
        dps = search.family_dps(family)
        state = memo.get((i, family.index))
        first = max(bisect.bisect_right(dps, after // family.per_replica), 0 if state is None else state[2],
                    search.fit_start(family))
        if first < len(dps) and family.per_replica * dps[first] <= bound:
            first = max(first, search.start(family, target))
        return dps, first

    def visit(i: int, family: Family, start: int) -> int:
        """Looks at each configuration of the family from `start`; the first index from which one
        may still answer a later call (len(dps) when none can)."""
        search = searches[i]
        members = search.members(family)
        dps, ms = search.legal(family.first)  # the family's members share their legal dps
        per = family.per_replica
        state = memo.get((i, family.index))
        if state is None:
            state = memo[i, family.index] = [[0] * len(members), [False] * len(members), 0]
        known, hit = state[0], state[1]
        low = len(dps)
        for n, c in enumerate(members):
            most = best[0][0][0] if best else None
            first = max(start, known[n])
            if first >= len(dps):
                continue  # nothing left for this target, nor for a shorter one
            if most is not None and per * dps[first] > most:
                low = min(low, first)
                continue  # nothing within the best found: first_meeting would say None
            j: int | None = first
            resume = first
            if not (hit[n] and first == known[n] and (below is None or search.exact(c, dps[first], ms[first]) < below)):
                # Not the last call's answer for c (which fits, meets this target and beats `below`).
                # Its dps before `first` are past `after` or ruled out earlier, not floor-pruned.
                j, resume = search.meeting(c, first, target, most, floored_before=False)
                while j is not None and below is not None and not search.exact(c, dps[j], ms[j]) < below:
                    # No faster than `below`, nor than any shorter one: passed over from here on.
                    j, resume = search.meeting(c, j + 1, target, most, floored_before=False)
            known[n], hit[n] = resume, j is not None
            low = min(low, resume)
            if j is None:
                continue
            key = (per * dps[j], search.exact(c, dps[j], ms[j]), i, tie(c))
            if not best or key < best[0][0]:
                best[:] = [(key, i, search.found(c, j))]
        state[2] = low
        return low

    visited = []
    while queue:
        bound, i, key, k, item = queue[0]
        if best and bound > best[0][0][0]:
            break
        heapq.heappop(queue)
        search = searches[i]
        search.queued()
        if k is not None:  # a group: its bound, and when that still comes first, its families instead
            fresh = search.row_past(target, after, k, item)
            if fresh is not None and fresh > bound:
                heapq.heappush(queue, (fresh, i, key, k, item))
            elif fresh is not None:
                for family in item.families(search.capacity):
                    dps, start = begin(i, family, fresh)
                    if start < len(dps):
                        heapq.heappush(queue, (family.per_replica * dps[start], i, key + (family.index,), None, family))
            continue
        dps, start = begin(i, item, bound)
        if start >= len(dps):
            continue  # no dp left for this target, nor for a shorter one
        fresh = item.per_replica * dps[start]
        if fresh > bound:
            heapq.heappush(queue, (fresh, i, key, None, item))
            continue
        low = visit(i, item, start)
        if low < len(dps):  # else no configuration of it can answer a later call
            visited.append((item.per_replica * dps[low], i, key, None, item))
    for entry in visited:
        heapq.heappush(queue, entry)
    return (best[0][1], best[0][2]) if best else None
