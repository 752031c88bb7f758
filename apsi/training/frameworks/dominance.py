"""The recomputations' dominance in time: where a heavier recomputation cannot beat the lightest.

Owns Dominance, a Layouts (apsi.training.frameworks.layouts) with the facts the walks (apsi.training.frameworks.walk,
through apsi.training.frameworks.bounds.Search) use to pass heavier recomputations over without working out
their own floors or memory: where the lightest option re-runs no matrix work, every other option
adds work to it on every split (apsi.training.frameworks.recompute), so
- from the first dp at which the lightest fits under every split it is at least as fast as any
  heavier sibling, which may win only below that dp (undominated, _light_fit: a bisection of the
  lightest's memory, kept for every sibling);
- where the lightest's duration floors let no dp through for a target, no heavier sibling's do
  (_floored and _light_fails, per configuration; noted and noted_over, per family, so that a
  family's heavier siblings are passed over in one look).
Without context parallelism only (dominated()): the ring's exposed time falls by the attention
compute a recomputation adds.
"""

from __future__ import annotations

import math

from apsi.training.frameworks.layouts import Layouts, at_rank
from apsi.training.frameworks.space import Config, Family


class Dominance(Layouts):
    """The legal layouts of one run on one GPU type, with the lightest recomputation's verdicts
    that pass its heavier siblings over (module docstring)."""

    def _floored(self, c: Config, target: float, low: float, every: bool, most_gpus: int | None) -> None:
        """Notes that c's floors let no dp from `low` GPUs through (`every`), or none from there up to
        most_gpus, for the target (and so for any shorter one), where c has the lightest
        recomputation: first_meeting then passes the heavier ones over."""
        if c.recompute_rank == 0 and self._light and c.cp == 1:
            reach = math.inf if every or most_gpus is None else float(most_gpus)
            if low == 0.0:  # fewest()'s: one target, every dp from the first
                key = (target, c)
                self._reach[key] = max(self._reach.get(key, -1.0), reach)
                return
            verdicts = self._pruned.setdefault(c, [])
            if len(verdicts) < 8:
                verdicts.append((target, low, reach))

    def _light_fails(self, c: Config, target: float, low: float, most_gpus: int | None) -> bool:
        """Whether c's lightest-recomputation sibling's floors failed the target (or a longer one)
        on every dp from `low` GPUs up to most_gpus (every dp past `low` when None)."""
        if not self.dominated(c):
            return False
        most = math.inf if most_gpus is None else most_gpus
        light = at_rank(0, c[1:])
        if self._reach.get((target, light), -1.0) >= most:
            return True
        verdicts = self._pruned.get(light)
        return verdicts is not None and any(t >= target and lo <= low and reach >= most
                                            for t, lo, reach in verdicts)

    def _light_fit(self, c: Config, upto: int | None = None) -> int:
        """Index of the first legal dp at which c with the lightest recomputation fits under every
        one of the framework's splits (len(dps) where none does), or `upto` where that index is
        `upto` or more: memory falls with dp on each split, so by bisection, the dp before `upto`
        asked first (the walk's best so far: most looks find nothing fits below it). What is learnt
        is kept for c's other recomputations as the range the index lies in."""
        light = at_rank(0, c[1:])
        dps, ms = self.legal(light)
        upto = len(dps) if upto is None else min(upto, len(dps))
        known = self._light_fits.get(light)
        if known is None:
            known = self._light_fits[light] = [0, len(dps)]
        """[lo, hi]: the index is at least lo, and at most hi (it fits at hi, or hi is len(dps))."""
        if known[0] >= upto:
            return upto
        if known[0] == known[1]:
            return known[0]
        a = self.s.model.architecture
        # The split with the most layers on a rank first: the likeliest not to fit, so that a
        # dp where some split does not fit is told after one evaluation (the answer is the same
        # in any order).
        splits = sorted(self.fw.splits(a.layers, c.pp, c.vpp, a.mtp_layers),
                        key=lambda x: -max(self.fw.rank_layers(x, c.pp)))

        def fits(j: int) -> bool:
            layout = self.layout(light, dps[j], ms[j])
            return all(self.split_fits(light, dps[j], ms[j], split, layout) for split in splits)

        if known[1] > upto:
            if not fits(upto - 1):
                known[0] = upto
                return upto
            known[1] = upto - 1
        while known[0] < known[1]:
            mid = (known[0] + known[1]) // 2
            if fits(mid):
                known[1] = mid
            else:
                known[0] = mid + 1
        return known[0]

    def undominated(self, c: Config, upto: int | None = None) -> int:
        """How many of c's legal dps (the first ones) a heavier recomputation may win at: from the
        first dp at which the lightest fits under every split, the lightest takes the fastest of
        them all, and c (a heavier one) is no faster on any split (every recomputation adds work).
        Where that count is `upto` or more, `upto` (the caller looks no further)."""
        if not self.dominated(c):
            return len(self.legal(c)[0])
        return self._light_fit(c, upto)

    def passed_over(self, family: Family, target: float | None, most_gpus: int) -> bool:
        """Whether first_meeting passes every configuration of the family over within most_gpus
        GPUs for the target (fewest()'s, from no GPUs up), its lightest siblings' floors having
        failed: the lightest family's verdict where fewest() left one (noted()), else each
        configuration's."""
        if not self.dominated(family.first) or target is None or self.s.flat_mfu:
            return False
        return self.noted_over(family, target, most_gpus) or all(
            self._light_fails(c, target, 0.0, most_gpus) for c in self.members(family))

    def noted_over(self, family: Family, target: float | None, most_gpus: int) -> bool:
        """passed_over() from the lightest family's verdict alone (noted()), where there is one."""
        f = family.first
        return self._family_reach.get((target, f.pp, f.tp, f.cp, f.vpp, family.step), -1.0) >= most_gpus

    def noted(self, family: Family, target: float | None) -> None:
        """After fewest() looked at every configuration of a family with the lightest recomputation
        for the target: the GPUs up to which the floors of each failed it (first_meeting's
        verdicts), which passed_over() reads for its heavier siblings (the same members)."""
        f = family.first
        if f.recompute_rank != 0 or target is None or not self.dominated(at_rank(1, f[1:])):
            return
        reach = min((self._reach.get((target, c), -1.0) for c in self.members(family)), default=-1.0)
        self._family_reach[target, f.pp, f.tp, f.cp, f.vpp, family.step] = reach
