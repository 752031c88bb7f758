"""The closed-form window of a configuration's dps whose floors may meet a target.

Owns Windows, a MemoryFloors (apsi.training.frameworks.memory_floors) with floor_window(): the dps at
which a configuration's duration floors (apsi.training.frameworks.bounds.Search.dp_floor, and too_slow's
whole step) may meet a target lie between the roots of a quadratic in dp, so the walks
(apsi.training.frameworks.walk) look only there. Where the step's tail has a floor of its own from some dp
on (apsi.training.frameworks.timing.tail_least: the data-parallel traffic of groups whose ranks are an
NVLink domain apart rises with dp), the window narrows, round by round. And the walk's hook the
work budget charges (apsi.training.frameworks.budget.BudgetedSearch): queued().
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

from apsi.training.frameworks import timing
from apsi.training.frameworks.memory_floors import MemoryFloors
from apsi.training.frameworks.space import Config
from apsi.model import goodput

if TYPE_CHECKING:
    from apsi.training.frameworks.budget import Budget

REST_ROUNDS = 3
"""How many times floor_window narrows its window by the tail's floor at the window's own first dp."""

WINDOWS_KEPT = 16384
"""floor_window() answers kept per run (about 4 MB; a DeepSeek-V3 plan asks some 600), emptied at
once when full."""

WINDOW_SLACK = 1e-6
"""How far Search.floor_window widens the target and then its dp range, relatively: with the target
widened the quadratic's discriminant grows by at least b^2 WINDOW_SLACK / 2 (b = target / u - S q),
far above its float rounding (about 1e-16 b^2), so a dp whose floor meets the target is never left
out, even where the roots nearly meet."""


class Windows(MemoryFloors):
    """The legal layouts of one run on one GPU type, with the windows of dps their floors leave
    (module docstring)."""

    budget: "Budget | None" = None
    """The work budget a BudgetedSearch charges (apsi.training.frameworks.budget); None: uncharged.
    Search.too_slow charges each verdict that needs the tail floor, worked out or kept from an
    earlier question alike (so a question's charge does not depend on what the process asked
    before)."""

    def queued(self) -> None:
        """One entry of the frontier chain's queue taken up (apsi.training.frameworks.walk.faster):
        nothing here; a BudgetedSearch charges it."""

    def floor_window(self, c: Config, target: float) -> tuple[float, float]:
        """(lo, hi) such that every dp whose floors (dp_floor, and too_slow's whole step) meet the
        target lies in lo <= dp <= hi (lo > hi where none does). dp_floor >= u (T / dp + S q) / (1 -
        l dp) at every dp, u the slowest rank's micro-batch (_micro_of), T the run's micro-batches
        (tokens / (seq b)), S the fewest steps (the tokens over the widest batch, B_max, rounded up;
        steps x m >= T / dp), q = (p - 1) / v the bubble and l dp the share of the wall time
        interruptions take at t p c dp GPUs (goodput.lost_share, linear in the GPUs): the dps where
        that meets the target are those between the roots of (target / u) l dp^2 - (target / u - S
        q) dp + T <= 0 (from T / (target / u - S q) up without interruptions), widened by
        WINDOW_SLACK. Where each step's tail (PP fill and drain, exposed DP traffic, optimizer) has
        a floor R from some dp on (timing.tail_least), too_slow's floor is at least the same with q
        + R / u in place of q there: a narrower interval."""
        known = self._windows.get((c, target))
        if known is None:
            if len(self._windows) >= WINDOWS_KEPT:
                self._windows.clear()
            known = self._windows[c, target] = self._floor_window(c, target)
        return known

    def _floor_window(self, c: Config, target: float) -> tuple[float, float]:
        s = self.s
        micro = self._micro_of(c)
        if micro <= 0 or not math.isfinite(target):  # an infinite best (interruptions) prunes nothing
            return 0.0, math.inf
        if s.flat_mfu:
            return self._window(c, target, micro, 0.0)
        # Every dp that can meet the target lies in each window below: the first with the tail's
        # floor from dp 1 on, each next with its floor from the last window's first dp on (it rises
        # with dp: timing.tail_least), which narrows it further.
        lo, hi = 0.0, math.inf
        start = 1
        for _ in range(REST_ROUNDS):
            low, high = self._window(c, target, micro, self._rest_of(c, start))
            lo, hi = max(lo, low), min(hi, high)
            if lo > hi or math.ceil(lo) <= start:
                break
            start = math.ceil(lo)
        return lo, hi

    def _rest_of(self, c: Config, dp: int) -> float:
        """timing.tail_least for c from `dp` on, kept per setup."""
        known = self._rests.get((c, dp))
        if known is None:
            if c not in self._slowest:
                self._slowest[c] = timing.tail_parts(self.fw, self.s, self.layout(c, 1, 1), self._layers)
            n, compute_mb, parts = self._slowest[c]
            known = self._rests[c, dp] = timing.tail_least(self.s, parts, n, compute_mb, dp)
        return known

    @functools.cached_property
    def _runs_steps(self) -> tuple[float, int]:
        """_window's T (the run's micro-batches) and S (the fewest steps): fixed for the search."""
        s = self.s
        return s.tokens / (s.seq * self.mb), math.ceil(s.tokens / (self.b_max * s.seq) * (1 - 1e-9))

    def _window(self, c: Config, target: float, micro: float, rest: float) -> tuple[float, float]:
        """floor_window()'s interval for a floor of u (T / dp + S (q + rest / micro)) / (1 - l dp)."""
        s = self.s
        u = target * (1 + WINDOW_SLACK) / micro
        runs, steps = self._runs_steps
        bubble = steps * ((c.pp - 1) / c.vpp + rest / micro)
        b = u - bubble
        if b <= 0:
            return math.inf, 0.0
        lost = goodput.lost_share(c.tp * c.pp * c.cp, s.checkpoint_minutes) if s.failures else 0.0
        if lost <= 0:
            return runs / b * (1 - WINDOW_SLACK), math.inf
        a = u * lost
        disc = b * b - 4 * a * runs
        if disc < 0:
            return math.inf, 0.0
        root = math.sqrt(disc)
        return 2 * runs / (b + root) * (1 - WINDOW_SLACK), (b + root) / (2 * a) * (1 + WINDOW_SLACK)

    def _micro_of(self, c: Config) -> float:
        """timing.micro_batch_floor for c: its fastest split's slowest rank, one micro-batch (the
        same for every ZeRO stage: c[:7] leaves it out)."""
        key = c[:7]
        if key not in self._micro:
            self._micro[key] = timing.micro_batch_floor(self.fw, self.s, self.layout(c, 1, 1), self._layers)
        return self._micro[key]
