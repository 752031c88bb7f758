"""Where the walks may first find a layout that fits: the memory floors as bounds on dp.

Owns MemoryFloors, a Dominance (apsi.training.frameworks.dominance, on apsi.training.frameworks.layouts.Layouts)
with the bounds memory puts on the GPUs: each member of a family holds at least floor + shard / dp
on its most loaded stage (apsi.training.frameworks.space: the state no dp removes, and the state dp
divides, of the average stage), memory falls with dp on every stage, so no layout of a shape,
group or family fits below the least dp its members' floors allow (space.least_dp), rounded up to
the family's dp step and whole nodes. The walks (apsi.training.frameworks.walk, through
apsi.training.frameworks.bounds.Search) rank shapes, groups and families by the later of this and their
duration floors' dp, so a question that memory decides visits few families.
"""

from __future__ import annotations

import bisect
import functools
import math

from apsi.training.frameworks.dominance import Dominance
from apsi.training.frameworks.space import Family, Group, Shape


class MemoryFloors(Dominance):
    """The legal layouts of one run on one GPU type, with the dps below which their memory floors
    rule every layout out (module docstring)."""

    @functools.cached_property
    def _fits_key(self) -> tuple:
        """fits_of()'s key on the shape: what its answers depend on beyond the shape (fixed for the
        search)."""
        return ("fits", self.capacity, self.cap, self.granularity, self.big_b, self.mb, self.tolerance,
                self.pins.get("dp"))

    def least_dp(self, group: Group | Shape) -> int:
        """The least dp at which some configuration of the group (or shape: they share their
        members) may fit this GPU's memory: over its families, the first multiple of the family's
        dp step (with whole nodes: Layouts._legal_of) at or above its members' memory floors' least
        dp (space.least_dp); past the cap where none. Kept on the shape."""
        shape = group if isinstance(group, Shape) else group.shape
        key = (self.capacity, self.cap, self.granularity)
        known = shape.fits.get(key)
        if known is None:
            whole = self.granularity // math.gcd(self.granularity, shape.per_replica)
            known = self.cap + 1
            for kept in shape.steps:
                if kept.least > self.capacity:
                    continue
                most = kept.least_dp(self.capacity)
                if most <= self.cap:
                    both = kept.step * whole // math.gcd(kept.step, whole)
                    known = min(known, both * max(1, math.ceil(most / both)))
            if len(shape.fits) >= 16:
                shape.fits.clear()
            shape.fits[key] = known
        return known

    def fit_start(self, family: Family) -> int:
        """Index of the family's first legal dp at which its members' memory floors may fit this GPU
        (space.least_dp): no configuration of it fits at a smaller one."""
        return self.fits_of(family.shape)[family.position][0]

    def fits_of(self, shape: Shape) -> list[tuple[int, float]]:
        """(fit_start, its GPUs, math.inf where its memory floors fit no legal dp) for each dp step
        of the shape (its families' position; Search.gpu_bounds reads the GPUs): pure
        functions of the shape, this GPU's memory and node size, the cap and the batch's legal dps,
        kept on the shape for later questions on the same ones (its siblings of every
        recomputation level share them)."""
        key = self._fits_key
        known = shape.fits.get(key)
        if known is None:
            known = []
            for kept in shape.steps:
                dps = self._legal_of(shape.micro, kept.step, shape.per_replica)[0]
                start = bisect.bisect_left(dps, kept.least_dp(self.capacity)) if kept.least <= self.capacity \
                    else len(dps)
                known.append((start, shape.per_replica * dps[start] if start < len(dps) else math.inf))
            if len(shape.fits) >= 16:
                shape.fits.clear()
            shape.fits[key] = known
        return known
