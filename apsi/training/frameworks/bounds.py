"""The bounds that make the framework walk exact: closed-form floors per configuration and dp.

Owns Search, a Layouts (apsi.training.frameworks.layouts: the legal layouts of one run on one GPU type
and their exact memory and duration) with the lower bounds the walks (apsi.training.frameworks.walk)
visit configurations by. The walk is exact by exhaustion, with these facts doing the work
(tests/test_search.py checks the answers against a plain enumeration of every layout, each
judged by evaluate()):

- for a fixed configuration (every knob but dp), memory on every stage falls as dp grows (state
  shards shrink, fewer micro-batches are in flight), so the layouts that fit are a suffix of the
  configuration's legal dps, found by bisection (Layouts._first_fit);
- the duration is at least K / (t p c) (1 / dp + (p - 1) / (v B_max)), B_max the largest batch
  the tolerance allows (at a flat MFU, K / (t p c dp) (1 + (p - 1) / (v m)) exactly; under the
  step-time model K counts the layers' compute and traffic on the most loaded rank,
  apsi.training.frameworks.timing.floor_k), which falls with dp: it bounds each configuration's fewest
  GPUs and its shortest duration from below in closed form (floor_seconds, _first_floor), so
  configurations are visited in order of that bound (rows, gpu_bounds, group_k <= family_k <= the
  K of each member) and the walk stops once the bound passes the best layout found;
- under the step-time model durations are not monotone in dp, and each configuration's dps are
  checked one by one from its bound, each first against floors of its whole step before any
  memory evaluation or step time: dp_floor (the fastest split's slowest rank times the
  micro-batches each step runs, steps rounded up, interruptions added; the dps where it, and the
  whole step's floor, can meet a target are found first in closed form: floor_window,
  apsi.training.frameworks.windows), too_slow (dp_floor plus
  the least fill, drain, exposed DP traffic and optimizer over the splits), block_floor (a floor
  common to a block of dps, for the fastest walk);
- each of the framework's splits is its own layout (its ranks hold different layers, so its
  slowest rank and bubble differ): a layout takes the fastest split that fits
  (evaluate.split_taken), every floor is the least over the splits, and each split's memory falls
  with dp, so "some split fits" holds on a suffix of the dps too.

Every floor is multiplied by (1 - 1e-9) where it is compared with a duration computed in floats,
so rounding never lets a bound pass a layout it should not.
"""

from __future__ import annotations

import bisect
import math

from apsi.training.frameworks import timing
from apsi.training.frameworks.windows import Windows
from apsi.training.frameworks.layouts import at_rank
from apsi.training.frameworks.space import Config, Family, Group, Shape
from apsi.model import goodput
from apsi.model import memory as mem


class Search(Windows):
    """The legal layouts of one run on one GPU type under one framework, and the arithmetic that
    ranks them: the floors of their duration (and so of their GPUs and cost) the walk visits them by."""

    def capped(self, cap: int) -> "Search":
        """The same run on this GPU type under a lower cap (the explanation's what-if walks), sharing
        its configurations (those within the cap) and the memory answers kept so far: whether a
        layout fits, and under which split, does not depend on the cap (nor do its legal dps'
        micro-batches). A plain Search: its memory evaluations are charged where this one's are,
        through its framework (apsi.training.frameworks.budget.counted)."""
        out = Search(self.fw, self.s, self.gpu, cap, self.pins, self.tolerance, self.shapes)
        out._split_known, out._some, out._first_ok, out._fits = self._split_known, self._some, self._first_ok, self._fits
        return out

    def most_layers(self, pp: int, vpp: int) -> int:
        """The fewest layers the most loaded rank holds over the framework's splits (MTP blocks on
        the last rank): the slowest rank runs at least that many layers' micro-batches."""
        key = ("most", pp, vpp)
        if key not in self._k:
            a = self.s.model.architecture
            self._k[key] = min((max(self.fw.rank_layers(x, pp)[:-1] + (self.fw.rank_layers(x, pp)[-1] + a.mtp_layers,))
                                for x in self.fw.splits(a.layers, pp, vpp, a.mtp_layers)), default=0)
        return self._k[key]

    def dp_floor(self, c: Config, dp: int, m: int) -> float:
        """A lower bound on seconds at exactly this dp and m (the legal one for dp): at a flat MFU
        the duration itself, else the tokens' batches x (m + (p - 1) / v) micro-batches of the
        fastest split's slowest rank (timing.micro_batch_floor), tighter than floor_seconds where
        the split is uneven; the steps rounded up and the interruptions' share of this GPU count
        added, as timing.seconds does."""
        s = self.s
        if s.flat_mfu:
            return self.exact(c, dp, m).value
        floors = self.floors_of(c)
        known = floors.get(dp)
        if known is not None:
            return known[0]
        ideal = timing.step_count(s.tokens, m, self.mb, dp, s.seq) * (m + (c.pp - 1) / c.vpp) * self._micro_of(c)
        if s.failures:
            ideal = goodput.wall_seconds(ideal, c.tp * c.pp * c.cp * dp, s.checkpoint_minutes)
        floors[dp] = (ideal * (1 - 1e-9), None)
        return ideal * (1 - 1e-9)

    def floors_of(self, c: Config) -> dict[int, tuple[float, float | None]]:
        """c's kept floors by dp: (dp_floor, too_slow's whole floor or None until asked). A walk
        that asks about many dps of one configuration takes them once (too_slow's `floors`)."""
        known = self._floors.get(c)
        if known is None:
            known = self._floors[c] = {}
        return known

    def block_floor(self, c: Config, low: int, high: int) -> float:
        """A lower bound on dp_floor at every dp from `low` to `high`: steps x m >= the tokens'
        sequences over b dp (at most at `high`), steps >= the tokens over the widest batch
        (B_max), and the interruptions stretch the least at the fewest GPUs (`low`)."""
        s = self.s
        steps = math.ceil(s.tokens / (self.b_max * s.seq))
        ideal = (s.tokens / (self.mb * high * s.seq) + steps * (c.pp - 1) / c.vpp) * self._micro_of(c)
        if s.failures:
            ideal = goodput.wall_seconds(ideal, c.tp * c.pp * c.cp * low, s.checkpoint_minutes)
        return ideal * (1 - 1e-9)

    def too_slow(self, c: Config, dp: int, m: int, target: float,
                 floors: dict[int, tuple[float, float | None]] | None = None) -> bool:
        """Whether no split of c at this dp meets the target: dp_floor exceeds it, or, where it
        does not, dp_floor with the rest of the step added (the PP fill and drain, the exposed DP
        traffic and the optimizer at this dp, each at its least over the framework's splits:
        timing.tail_parts, timing.tail_floor), dearer to work out. `floors`: floors_of(c), where
        the caller holds it."""
        s = self.s
        if s.flat_mfu:
            return self.dp_floor(c, dp, m) > target
        if floors is None:
            floors = self.floors_of(c)
        known = floors.get(dp)  # dp_floor's kept answer, looked up here (the walks' hottest call)
        if known is None:
            self.dp_floor(c, dp, m)
            known = floors[dp]
        cheap, whole = known
        if cheap > target:
            return True
        if (budget := self.budget) is not None:  # a BudgetedSearch's: the tail floor charged, inline
            budget.used += budget.tail_units
            if budget.used > budget.limit:
                budget.charge(0)  # the refusal
        if whole is not None:
            return whole > target
        if c not in self._slowest:
            self._slowest[c] = timing.tail_parts(self.fw, s, self.layout(c, 1, 1), self._layers)
        n, compute_mb, parts = self._slowest[c]
        rest = timing.tail_floor(s, parts, dp, m, n, compute_mb)
        ideal = timing.step_count(s.tokens, m, self.mb, dp, s.seq) * (
            (m + (c.pp - 1) / c.vpp) * self._micro_of(c) + rest)
        if s.failures:
            ideal = goodput.wall_seconds(ideal, c.tp * c.pp * c.cp * dp, s.checkpoint_minutes)
        floors[dp] = (cheap, ideal * (1 - 1e-9))
        return ideal * (1 - 1e-9) > target

    def split_k(self, c: Config) -> float:
        """A K for c tighter than k(c): the fastest split's slowest rank instead of the average
        rank (timing.micro_batch_floor); the flat K at a flat MFU."""
        if self.s.flat_mfu:
            return self.k(c)
        return self.s.tokens / (self.s.seq * self.mb) * self._micro_of(c) * c.tp * c.pp * c.cp * (1 - 1e-9)

    def shape_k(self, shape: Shape) -> float:
        """A K below every group_k of the shape: the least over its recomputation levels (kept
        per setup, with the groups' own)."""
        f = shape.first
        key = ("shape bound", f.tp, f.cp, f.pp, f.vpp, shape.levels)
        known = self._k.get(key)
        if known is None:
            # Where every heavier recomputation is dominated by the lightest (dominated(): it adds
            # work on every split, and its floors are no lower), the lightest's is the least.
            levels = 1 if self.dominated(at_rank(1, f[1:])) else shape.levels
            known = self._k[key] = min(self._group_base(r, f.tp, f.cp, f.pp, f.vpp) for r in range(levels))
        return known

    def group_k(self, group: Group, warm: bool = True) -> float:
        """A K below every family_k of the group (its families share recomputation, pp, tp, cp
        and vpp): the family bound with the least K and layer over every expert grid the framework
        offers for that tp; with `warm`, the least of the families' own once each is known."""
        f = group.first
        if self.s.flat_mfu:
            return self.k(f)
        bound = self._group_base(f.recompute_rank, f.tp, f.cp, f.pp, f.vpp)
        if not warm:
            return bound
        least = group.bounds.get((self._signature, self.capacity))
        if least is None:
            known = group.least_k(self._signature, self.capacity)
            if known is not None:  # each family's own, tighter
                if len(group.bounds) >= 16:
                    group.bounds.clear()
                least = group.bounds[self._signature, self.capacity] = known
        if least is not None:
            bound = max(bound, least)
        return bound

    def _group_base(self, r: int, tp: int, cp: int, pp: int, vpp: int) -> float:
        """group_k before the families' own (a pure function of the setup and these degrees: kept
        with the setup's other parts)."""
        shape = ("group bound", r, tp, cp, pp, vpp)
        bound = self._k.get(shape)
        if bound is None:
            if self.s.flat_mfu:
                return self._parts(r, tp, cp, 1, 1)[0]
            key = ("group", r, tp, cp)
            if key not in self._k:
                a = self.s.model.architecture
                eps = [self.pins["ep"]] if "ep" in self.pins else list(self.fw.ep_choices(a)) if a.moe else [1]
                etps = [self.pins["etp"]] if "etp" in self.pins else list(self.fw.etp_choices(a, tp)) if a.moe else [1]
                option = self.options[r]
                self._k[key] = timing.least_floor_k(self.fw, self.s, option.level, option.modules or mem.DEFAULT_MODULES,
                                                    tp, cp, eps, etps, self.mb, self.pins)
            least, layer = self._k[key]
            per = self._per_sequence * tp * cp * pp
            bound = self._k[shape] = max(least, per * self.most_layers(pp, vpp) * layer * (1 - 1e-9))
        return bound

    def family_k(self, family: "Family") -> float:
        """The least K of the family's configurations that may fit (a bound for all of them), kept
        on the family for later calls with this setup and GPU."""
        if self.s.flat_mfu:
            return self.k(family.first)
        cached = family.bounds.get(self._signature)
        if cached is None:
            # At least the average rank (K) and at least the most loaded rank's layers, each layer's
            # micro-batch at the family's fastest: K / (L + mtp + head) x p x most layers, as seconds.
            f = family.first
            # The members (and their floors) are one list shared by the families of every vpp of
            # a (tp, cp, pp, dp step): their least parts are worked out once per recomputation level.
            shared = (f.recompute_rank, id(family.members))
            parts = self._member_parts.get(shared)
            if parts is None:
                least, layer = math.inf, math.inf
                for (ep, etp, _), floor in zip(family.members, family.floors):
                    if floor <= self.capacity:
                        k, one = self._parts(f.recompute_rank, f.tp, f.cp, ep, etp)
                        least, layer = min(least, k), min(layer, one)
                parts = self._member_parts[shared] = (least, layer)
            least, layer = parts
            per = self._per_sequence * f.tp * f.cp * f.pp
            cached = max(least, per * self.most_layers(f.pp, f.vpp) * layer * (1 - 1e-9))
            if len(family.bounds) >= 8:
                family.bounds.clear()
            family.bounds[self._signature] = cached
            family.shape.groups[f.recompute_rank].note_k(self._signature, family.index, cached)
        return cached

    def floor_seconds(self, c: Config, dp: int, k: float | None = None) -> float:
        """A lower bound on seconds at dp and above: K / (t p c) (1 / dp + (p - 1) b / (v B_max)), the
        bubble at the most micro-batches the tolerance allows, m <= B_max / (b dp); K is c's, or
        `k` (a family's least)."""
        scale, bubble = self.floor_factors(c, k)
        return scale * (1 / dp + bubble)

    def floor_factors(self, c: Config, k: float | None = None) -> tuple[float, float]:
        """floor_seconds()'s K / (t p c) and bubble, for a walk that asks it at many dps of c."""
        k = self.k(c) if k is None else k
        return k / (c.tp * c.pp * c.cp), (c.pp - 1) * self.mb / (c.vpp * self.b_max)

    def _first_floor(self, c: Config, dps: list[int], target: float, k: float | None = None) -> int:
        """Index of the first dp whose floor_seconds meets the target (len(dps) when none): the
        floor is K / (t p c) (1 / dp + bubble), so dp >= 1 / (target t p c / K - bubble), found by
        bisection and checked against floor_seconds itself either side (float rounding)."""
        per = c.tp * c.pp * c.cp
        k = self.k(c) if k is None else k
        room = target * per / k - (c.pp - 1) * self.mb / (c.vpp * self.b_max)
        if room <= 0:
            return len(dps)
        i = bisect.bisect_left(dps, 1 / room)
        while i > 0 and self.floor_seconds(c, dps[i - 1], k) <= target:
            i -= 1
        while i < len(dps) and self.floor_seconds(c, dps[i], k) > target:
            i += 1
        return i

    def shape_rows(self, target: float | None) -> list[tuple[int, Shape]]:
        """(bound, shape) for every shape whose groups may meet the target and fit: rows()'s bound
        with the least K of its groups (shape_k), so that a walk makes a shape's group bounds only
        when it comes first (group_rows)."""
        out = []
        cap = self.cap
        for shape in self.shapes:
            low = self.least_dp(shape)
            if target is not None:
                time = self.floor_dp(shape.per_replica, shape.bubble, self.shape_k(shape), target)
                if time is None:
                    continue
                low = max(low, time)
            if shape.per_replica * low <= cap:
                out.append((shape.per_replica * low, shape))
        return out

    def group_rows(self, shape: Shape, target: float | None, groups: list[Group] | None = None
                   ) -> list[tuple[int, Group]]:
        """rows()'s (bound, group) for the groups of one shape (those of `groups` only, if given)."""
        out = []
        memory = self.least_dp(shape)
        per = shape.per_replica
        for group in shape.groups if groups is None else groups:
            low: int | None = memory
            if target is not None:
                time = self.floor_dp(per, shape.bubble, self.group_k(group), target)
                low = None if time is None else max(memory, time)
            if low is not None and per * low <= self.cap:
                out.append((per * low, group))
        return out

    def rows(self, target: float | None) -> list[tuple[int, Group]]:
        """(bound, group) for every group of families that may meet the target and fit: the bound is
        the GPUs at the smallest dp whose duration floor meets it, 1 / (target t p c / K - bubble),
        in closed form and rounded down, and at which its memory floors may fit (least_dp; the
        families' legal dps are listed only when visited)."""
        if target not in self._rows:
            out = []
            cap = self.cap
            if target is None:
                for group in self.groups:
                    low = self.least_dp(group)
                    if group.per_replica * low <= cap:
                        out.append((group.per_replica * low, group))
            else:
                for group in self.groups:
                    time = self.time_dp(group, target)
                    if time is not None:
                        low = max(time, self.least_dp(group))
                        if group.per_replica * low <= cap:
                            out.append((group.per_replica * low, group))
            self._rows[target] = out
        return self._rows[target]

    def time_dp(self, group: Group, target: float) -> int | None:
        """The least dp (rounded down) whose duration floor meets the target for some configuration
        of the group, 1 / (target t p c / K - bubble), memory aside; None where none does."""
        return self.floor_dp(group.per_replica, group.bubble, self.group_k(group), target)

    def floor_dp(self, per: int, bubble: float, k: float, target: float) -> int | None:
        """time_dp() for t p c = `per`, (p - 1) / v = `bubble` and a K of `k`."""
        # m <= B_max / (b dp): bubble >= (p - 1) b dp / (v B_max)
        room = target / k * per - bubble * self.mb / self.b_max
        return max(1, int(1 / room * (1 - 1e-9))) if room > 0 else None

    def row_past(self, target: float | None, after: int, k: float, group: Group) -> int | None:
        """rows()'s bound of one group for the layouts on more than `after` GPUs (k: its group_k,
        worked out once by the caller, as a chain of targets shares it), at least the group's first
        multiple of t p c above `after`; None when none within the cap can meet the target."""
        per = group.per_replica
        low = max(after // per + 1, self.least_dp(group))
        if target is not None:
            # m <= B_max / (b dp): bubble >= (p - 1) b dp / (v B_max), as in rows().
            room = target / k * per - group.bubble * self.mb / self.b_max
            if room <= 0:
                return None
            low = max(low, int(1 / room * (1 - 1e-9)))
        return per * low if per * low <= self.cap else None

    def gpu_bounds(self, group: Group, target: float | None, most_gpus: int | None = None) -> list[tuple]:
        """For each family of the group that may have one, (its family_bound(), family) where known,
        else (the GPUs where its memory floors may fit, a lower bound, family, its row for
        family_bound()). With most_gpus (fewest()'s best so far), the families whose memory floors
        or lightest sibling's verdict (noted_over()) put them past it are left out."""
        dominated = most_gpus is not None and self.dominated(group.first)
        out: list[tuple] = []
        listed = False
        for row in self.family_rows(group, target):
            fit, family, bound = row
            # A bound known past the best (or none): left out before noted_over(), once `listed`.
            if most_gpus is not None and (fit > most_gpus or listed and bound is not None and not 0 < bound <= most_gpus
                                          or dominated and self.noted_over(family, target, most_gpus)):
                continue
            if not listed:  # its dps listed (and charged) as where the bound is worked out, kept or not
                self._batch_dps(group.micro)
                listed = True
            if bound is None:
                if fit != math.inf:
                    out.append((fit, family, row))
            elif bound:
                out.append((bound, family))
        return out

    def family_rows(self, group: Group, target: float | None) -> list[list]:
        """For each family of the group, [the GPUs at the first dp its memory floors may fit, the
        family, its family_bound() or None until asked]: pure functions of the setup, the run, the
        cap and the target, kept on the group for later questions (levers, a sweep, a plan again)."""
        key = (self._starts_token, target)
        known = group.rows.get(key)
        if known is None:
            fits = self.fits_of(group.shape)
            known = [[fits[family.position][1], family, None] for family in group.families(self.capacity)]
            if len(group.rows) >= 16:
                group.rows.clear()
            group.rows[key] = known
        return known

    def family_bound(self, row: list, target: float | None) -> int:
        """A gpu_bounds() row's exact bound, kept on it: the family's GPUs at its first legal dp
        whose duration floor meets the target and at which its memory floors may fit (the row's
        GPUs, math.inf where they fit none), 0 where none."""
        if row[2] is None:
            fit, family = row[0], row[1]
            dps = [] if fit == math.inf else self.family_dps(family)
            start = max(self.start(family, target), self.fit_start(family)) if dps else 0
            row[2] = family.per_replica * dps[start] if start < len(dps) else 0
        return row[2]

    def start(self, family: Family, target: float | None) -> int:
        """Index of the family's first legal dp whose duration floor meets the target."""
        if target is None:
            return 0
        key = (target, family.index)
        known = self._starts.get(key)
        if known is None:
            # A pure function of the setup, the run, the cap and the target: kept on the family too,
            # for a later question on the same ones (levers, a sweep, a repeated plan).
            kept = (self._starts_token, target)
            known = family.starts.get(kept)
            if known is None:
                known = self._first_floor(family.first, self.family_dps(family), target, self.family_k(family))
                if len(family.starts) >= 16:
                    family.starts.clear()
                family.starts[kept] = known
            self._starts[key] = known
        return known

    def first_meeting(self, c: Config, start: int, target: float | None, most_gpus: int | None = None,
                      floored_before: bool = True, tie: float | None = None) -> int | None:
        """Index of c's smallest legal dp that fits and meets the target (from `start`, the first
        whose duration floor does, or where `floored_before` is false one the caller starts from
        for its own reasons), or None; the walk gives up past `most_gpus` GPUs."""
        return self.meeting(c, start, target, most_gpus, floored_before, tie)[0]

    def meeting(self, c: Config, start: int, target: float | None, most_gpus: int | None = None,
                floored_before: bool = True, tie: float | None = None) -> tuple[int | None, int]:
        """first_meeting's answer, and the index from which a later look at c for this target or a
        shorter one need start (walk.faster's memo): every dp before it does not fit, or its
        floors, or its duration, pass the target (and so any shorter one), or it is dominated
        (undominated), or the caller ruled it out (those before `start`). It is the answer itself
        where there is one; where there is none, at least the first dp past `most_gpus` (every dp
        where most_gpus is None). With `tie` (fewest()'s best duration), a layout on exactly
        most_gpus GPUs whose step's floor passes `tie` is passed over too (it cannot win the tie)."""
        dps, ms = self.legal(c)
        per = c.tp * c.pp * c.cp
        modelled = None if target is None or self.s.flat_mfu else target
        """The target, where durations come from the step-time model (their floors then prune)."""
        past = len(dps) if most_gpus is None else bisect.bisect_right(dps, most_gpus // per)
        """The first dp past most_gpus: where the walk gives up."""
        if modelled is not None:
            # Every recomputation adds work to the lightest (options[0]), so each floor of c is at
            # least that configuration's: where its floors let no dp through up to most_gpus, c's
            # let none through either, and c is passed over without working its own out.
            given = float(per * dps[start]) if start < len(dps) else math.inf
            if self._light_fails(c, modelled, given, most_gpus):
                return None, max(start, past)
            low = 0.0 if floored_before else given
            """The GPUs from which a floor verdict on c holds: every dp, or those from the start."""
            if floored_before and most_gpus is not None and (
                    most_gpus < per or self.floor_seconds(c, most_gpus // per, self.split_k(c)) > modelled):
                # c's own closed-form floor (its fastest split's K) at the widest dp within most_gpus,
                # where every floor of fewer dps is higher: none of its dps there can meet the target
                # (most of a family's members, whose bound is its best member's, end here).
                self._floored(c, modelled, low, False, most_gpus)
                return None, max(start, past)
            # c's own floors, with its fastest split's slowest rank: the first dp whose exact-bubble
            # floor meets the target, before any memory evaluation (outside floor_window none does).
            lo, hi = self.floor_window(c, modelled)
            end = len(dps) if hi == math.inf else bisect.bisect_right(dps, hi)
            start = max(start, bisect.bisect_left(dps, lo))
            while start < end and self.dp_floor(c, dps[start], ms[start]) > modelled:
                start += 1
            if start >= end:
                start = len(dps)  # every dp from here on: its floor passes the target
            if start >= len(dps) or (most_gpus is not None and per * dps[start] > most_gpus):
                self._floored(c, modelled, low, start >= len(dps), most_gpus)
                return None, start
            if most_gpus is not None:
                # Within the best found so far, the first dp the whole step's floor lets through,
                # before any memory evaluation (the scan is bounded by that best).
                floors = self.floors_of(c)
                while start < len(dps) and self.too_slow(c, dps[start], ms[start], modelled, floors):
                    start += 1
                    if start >= len(dps) or per * dps[start] > most_gpus:
                        self._floored(c, modelled, low, start >= len(dps), most_gpus)
                        return None, start
        # From the first dp at which the lightest recomputation fits under every split, it takes
        # the fastest of them, and c is no faster on any: c can win below there only.
        # Past most_gpus the walk gives up: the dominance need not be told there (`beyond`: the
        # count is exact below `past`, and only known to reach it at `past`).
        dominated = self.undominated(c, past)
        beyond = dominated < past or dominated == len(dps)
        """Whether every dp from `dominated` on is dominated (else they are past most_gpus)."""
        if dominated <= start:
            return None, len(dps) if beyond else max(start, past)
        # Past most_gpus the walk gives up: the bisection need not look there.
        stop = min(past, dominated) - 1
        fit = self._first_fit(c, start, stop, last_first=most_gpus is not None)
        if fit is None:
            # No dp from the start to the stop fits: past it, each is past most_gpus or dominated.
            return None, max(start, len(dps) if beyond and stop == dominated - 1 else stop + 1)
        for j in range(fit, len(dps)):
            if j >= dominated:
                return None, len(dps) if beyond else j
            if j >= past:
                return None, j
            if modelled is not None and self.too_slow(c, dps[j], ms[j], modelled):
                continue  # no split makes it in time at this dp (no memory evaluation needed)
            if tie is not None and j == past - 1 and per * dps[j] == most_gpus and self.too_slow(c, dps[j], ms[j], tie):
                return None, j + 1  # a tie on GPUs whose floor is past the best's duration: never better
            if target is None or self.seconds(c, dps[j], ms[j]) <= target:
                return j, j
        return None, len(dps)
