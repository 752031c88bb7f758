"""The serving frontier's points (apsi.serving.plan.serve_frontier) and the bound that lets its walk
set pipelined layouts aside (Staircase, a walk.Aside).

Each kind's points are its operating points at the powers of two up to its largest batch within
the targets, and that batch; the frontier takes them by output tokens/s per user falling (ties: per
GPU falling, the GPU type's order, the layout, the batch) and keeps each whose tokens/s per GPU
passes every kept one's by more than a relative 1e-9 (frontier()).

The bound. A point P is not kept when some point Q sorting before it has at least its tokens/s per
GPU: the running best of the kept points only rises, and every point passed over was within 1e-9 of
it, so Q's per GPU is within that of the best when P comes, and P's is no more than Q's. Q sorts
before P when its tokens/s per user is strictly higher. So a layout none of whose points can pass
such a Q gives the frontier nothing, and leaving it out changes no kept point (the points it would
add are passed over, and a point passed over moves no best). Over a range lo..hi of a layout's
batches, TPOT rises with the batch and so do requests/s (apsi.serving.walk's module docstring: a
step's time is a roofline of terms that grow at most linearly with the batch, over a fixed part):
each point there has per user at most 1 / TPOT(lo) and per GPU at most requests/s(hi) x OSL / GPUs.
Those two from one point of the Pareto staircase of the points already found (Staircase.beats),
with per user strictly above (by 1e-9, and per GPU at or above by 1e-9: a margin for the floats'
last bits), rule the range out; the layout's batches, 1 to its largest the KV cache and the
engine hold (admission.max_batch, at least its batch within the targets), are split in two a few
times where one range is not ruled out (SPLITS). A layout with a batch no range rules out is
weighed in full.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from apsi.serving import operating as op
from apsi.serving import replica as rp
from apsi.serving.walk import Kind

SPLITS = 4
"""How many times a layout's batch range is halved (in its logarithm) before the layout is weighed
in full: each level costs up to twice the operating points of the one before."""
MARGIN = 1e-9
"""The relative margin the bound keeps over the floats' last bits (module docstring)."""


class Point(NamedTuple):
    per_gpu: float
    """Output tokens/s per GPU."""
    per_user: float
    """Output tokens/s per user (1 / TPOT)."""
    kind: Kind
    batch: int
    point: op.Point


def batches(k: Kind) -> list[int]:
    """The batches of k's points: the powers of two up to its batch within the targets, and that batch."""
    return sorted({b for b in (2 ** i for i in range(0, 32)) if b <= k.batch} | {k.batch})


class Staircase:
    """The points of the kinds weighed (walk.Aside: the walk tells it each kind) and the Pareto
    staircase of them, tokens/s per user against per GPU, which bounds the layouts still to weigh."""

    def __init__(self, w: rp.Workload) -> None:
        self.w = w
        self.known: dict[int, list[Point]] = {}  # by id(kind): its points
        self.stairs: list[tuple[float, float]] = []  # (per user, per GPU), no one beaten on both by another

    def points(self, k: Kind) -> list[Point]:
        """k's points (module docstring), worked out once."""
        if id(k) not in self.known:
            out = []
            for b in batches(k):
                p = k.at(b, self.w)
                out.append(Point(p.requests_per_s * self.w.osl / k.replica.gpus, 1 / p.tpot_s, k, b, p))
            self.known[id(k)] = out
        return self.known[id(k)]

    def weighed(self, k: Kind) -> None:
        for p in self.points(k):
            if any(u >= p.per_user and g >= p.per_gpu for u, g in self.stairs):
                continue
            self.stairs = [(u, g) for u, g in self.stairs if not (p.per_user >= u and p.per_gpu >= g)]
            self.stairs.append((p.per_user, p.per_gpu))

    def beats(self, per_user: float, per_gpu: float) -> bool:
        """A point found has tokens/s per user strictly above `per_user` and per GPU at least
        `per_gpu`, each past the margin (every point found is matched on both by a stair)."""
        return any(u > per_user * (1 + MARGIN) and g >= per_gpu * (1 + MARGIN) for u, g in self.stairs)

    def sets_aside(self, sh: rp.Shape, top: int, gpus: int) -> bool:
        """No batch 1..top of a layout of shape `sh` on `gpus` GPUs gives a point the frontier keeps
        (module docstring): every range of them is ruled out by a point already found."""
        if not self.stairs:
            return False
        seen: dict[int, op.Point] = {}

        def at(b: int) -> op.Point:
            if b not in seen:
                seen[b] = op.operating_point(sh, self.w, b)
            return seen[b]

        def out(lo: int, hi: int, depth: int) -> bool:
            if self.beats(1 / at(lo).tpot_s, at(hi).requests_per_s * self.w.osl / gpus):
                return True
            if depth == 0 or lo == hi:
                return False
            mid = min(hi - 1, max(lo, math.isqrt(lo * hi)))
            return out(lo, mid, depth - 1) and out(mid + 1, hi, depth - 1)

        return out(1, top, SPLITS)


def frontier(stair: Staircase, kinds: list[Kind]) -> list[Point]:
    """The kept points of `kinds` (module docstring), by tokens/s per user falling."""
    points = [p for k in kinds for p in stair.points(k)]
    points.sort(key=lambda x: (-x.per_user, -x.per_gpu, x.kind.order, tuple(x.kind.replica), x.batch))
    out, best = [], -1.0
    for p in points:
        if p.per_gpu > best * (1 + 1e-9):
            best = p.per_gpu
            out.append(p)
    return out
