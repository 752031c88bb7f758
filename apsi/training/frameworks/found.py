"""What the framework walks find and compare: a layout found, and its duration exactly ordered.

Owns Seconds (a duration at a flat MFU as the rational k (v m + p - 1) / (t p c dp v m), or the
step-time model's float, ordered so that rounding never splits a tie) and Found (the layout a walk
found on one search: its GPUs, seconds, configuration, dp, split and micro-batches per replica).
"""

from __future__ import annotations

import functools
from fractions import Fraction
from typing import NamedTuple

from apsi.training.frameworks.space import Config


@functools.total_ordering
class Seconds:
    """A layout's duration k (v m + p - 1) / (t p c dp v m), ordered exactly: in floats where two
    differ by more than a billionth, else as rationals (layouts that trade GPUs for bubble, pp 13 at
    one micro-batch against pp 1, tie exactly and must not be split by rounding)."""

    __slots__ = ("value", "k", "n", "d")

    def __init__(self, k: float, n: int, d: int):
        self.value, self.k, self.n, self.d = k * n / d, k, n, d

    def _cmp(self, other: "Seconds") -> int:
        a, b = self.value, other.value
        if abs(a - b) > 1e-9 * max(a, b):
            return (a > b) - (a < b)
        if self.d == 0 or other.d == 0 or self.k != other.k:
            # A modelled duration (modelled()), or two whose K differ (recomputation levels: full's
            # K is 4/3 of none's in exact arithmetic, not in floats): equal to a billionth.
            return 0
        x, y = Fraction(self.k) * self.n * other.d, Fraction(other.k) * other.n * self.d
        return (x > y) - (x < y)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Seconds) and self._cmp(other) == 0

    def __lt__(self, other: "Seconds") -> bool:
        return self._cmp(other) < 0

    def __hash__(self) -> int:
        return hash(self.value) if self.d == 0 else hash(Fraction(self.k) * self.n / self.d)

    @classmethod
    def modelled(cls, value: float) -> "Seconds":
        """A duration from the step-time model: a float, equal to another within a billionth."""
        out = cls(value, 1, 1)
        out.d = 0
        return out


class Found(NamedTuple):
    gpus: int
    seconds: float
    config: Config
    dp: int
    split: tuple[int, ...]
    """Layers of each virtual stage: the fastest of the framework's splits that fits at this dp."""
    micro_batches: int
    """Micro-batches per replica: the batch trained is micro_batches x micro-batch x dp."""
