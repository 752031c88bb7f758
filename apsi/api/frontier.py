"""The GPU/day frontier: at every GPU count where the fastest achievable duration drops, that
layout and its days, from the smallest count that fits in memory to the count past which more
GPUs stop helping (or the cap). Exported as apsi.frontier; the module is not named frontier so
that the package attribute apsi.frontier stays the function once this module is imported.

Owns `frontier()` and `sample()` (a readable subset for tables). It does not call
the CP-SAT solver: a frontier can have thousands of points, and one solve per point would
take minutes. Instead it sweeps the layouts with the arithmetic apsi.evaluate() uses, under
the rules apsi.training.reference.program states, and each point equals plan(params, gpus=N, **options) for its N.

Why a sweep is exact and fast. Write G = tp pp dp, b the micro-batch and B the batch in sequences.
Memory per GPU is S / G + A_r / tp (model states sharded over all G, activations split by TP;
apsi.model.arithmetic): at a fixed G and tp it does not depend on pp. Duration is
K_r / G (1 + (pp - 1) b dp / B) = K_r (1 / G + (pp - 1) b / (B tp pp)) (Narayanan et al. 2021,
Sec. 2.2): at a fixed G and tp it grows with pp and with the recompute level (K_none < K_selective
< K_full, apsi.model.arithmetic.training_flops). So at each G and tp the fastest layout is the
lightest level that fits with the smallest pp that gives a whole dp within the batch; the sweep
visits each (G, tp) once, not each (tp, pp, dp, recompute). The last point is the fastest layout
within the cap, found by the solver's dominance rule (dp = min(B / b, cap / (tp pp))).

Which layout, and ties. f(N), the fastest duration on at most N GPUs, only drops at a count N
where the fastest layout uses exactly N GPUs, so a point's layout is the fastest with G = N; ties
in duration are decided exactly (rationals, as apsi.training.reference.program does), then by lighter recompute,
smaller pp, smaller tp, the solver's order. The solver rounds its memory rule outward at about
1e-9 relative, so a layout within that of the memory limit may be admitted here and not there.

Worked example (70B, 1.4T tokens, H100, defaults): the first point is 16 GPUs (TP 1 x DP 16, full
recomputation: 1,043 GiB of states / 16 + 5 GiB of activations fit in 72 GiB); the last is 8,192
GPUs (TP 8 x DP 1,024, the batch's 1,024 sequences), past which no layout is faster.
"""

from __future__ import annotations

import bisect
import math
from fractions import Fraction
from collections.abc import Iterator
from typing import Any, Callable, NamedTuple, get_args


from apsi.errors import InputError, LayoutError, brief
from apsi.inputs.question import Setup, given_options, resolve
from apsi.model import arithmetic as ar
from apsi.model.schema import FrontierPoint, Layout, Recompute
from apsi.units import GIB

__all__ = ["FrontierPoint", "frontier", "sample"]

_LEVELS: tuple[Recompute, ...] = get_args(Recompute)
"""The recomputation levels as the Layout model types them, in apsi.model.arithmetic's order."""
assert _LEVELS == ar.RECOMPUTE_LEVELS
_NEAR = 1e-9
"""Relative gap in float days under which two durations are compared exactly (float days carry
a few ulps of rounding, far below this)."""


class _Candidate(NamedTuple):
    seconds: float
    """K_r n / (B G) in floats: orders candidates whose durations are not near a tie."""
    rank: int
    """Recompute level's position in none < selective < full."""
    n: int
    """B + b (pp - 1) dp: duration = K_r n / (B G), exactly."""
    gpus: int
    pp: int
    tp: int
    dp: int


MAX_FRONTIER_GPUS = 250_000
"""The largest GPU count the reference frontier runs to: it lists a point for nearly every count,
and past this the list takes minutes and gigabytes (a 7B model at seq 1 on a million GPUs: 34 s,
426 MB of JSON). Above the default max_gpus (200,000), so no default question is refused."""


def frontier(params: Any, *, active: Any = None, tokens: Any = None, gpu: Any = None, gpus: Any = None,
             days: Any = None, precision: Any = None, optimizer: Any = None, seq: Any = None, batch: Any = None,
             mfu: Any = None, max_gpus: Any = None, catalog: Any = None, tp: Any = None, pp: Any = None,
             dp: Any = None, recompute: Any = None, objective: Any = None, price: Any = None, pue: Any = None,
             flops_convention: Any = None, framework: Any = None, batch_tolerance: Any = None,
             failures: Any = None, checkpoint_minutes: Any = None, node_granularity: Any = None,
             progress: Callable[[int, int], None] | None = None, **more: Any) -> list[FrontierPoint]:
    """Every GPU count at which the fastest achievable duration drops, with that layout.

    Takes plan()'s keywords (None: the default); pinned knobs are kept, `gpus` (or max_gpus) caps
    the counts, `days` only sets target_met, and objective, price and pue do not change the
    frontier. Points come sorted by GPUs, days strictly falling. Raises LayoutError when no layout
    fits, with plan()'s message, and InputError for a GPU list or "any" (one frontier per GPU type).
    `progress(points, gpus)`, where given, is told each point a framework's chain finds as it goes
    (the points so far and the last one's GPUs): a long frontier can take a minute.

    >>> points = frontier("70B", tokens="1.4T", framework="reference")
    >>> (points[0].gpus, points[-1].gpus, points[-1].layout.tp, points[-1].layout.dp)
    (16, 8192, 8, 1024)
    """
    options = given_options(locals(), "params", "progress")
    if progress is not None and not callable(progress):
        raise InputError(f"progress must be a function of (points, gpus), got {brief(progress)}")
    from apsi.api.plan import _framework

    framework = _framework(options)  # the reference refuses the frameworks' knobs and options
    if framework != "reference":
        return _framework_frontier(framework, params, options, progress)
    s = resolve(params, **options)
    if len(s.candidates) > 1:
        raise InputError("frontier() takes one GPU, not a list or any: give gpu one name")
    sweep = _Sweep(s)
    best = sweep.fastest()
    if best is None:
        from apsi.training.reference.planning import no_fit_message

        raise LayoutError(no_fit_message(s, sweep.cap))
    if best.gpus > MAX_FRONTIER_GPUS:
        raise LayoutError(f"the frontier would run to {best.gpus:,} GPUs, one point for each count at which the "
                          f"fastest layout gets faster; it is drawn up to {MAX_FRONTIER_GPUS:,}: give a smaller "
                          "max_gpus (or a longer seq: the batch of short sequences lets data parallelism grow "
                          "past it)")
    points: list[_Candidate] = []
    by_gpus = sweep.best_by_gpus(best.gpus)
    for g in sorted(by_gpus):
        c = by_gpus[g]
        if not points or sweep.compare(c, points[-1]) < 0:
            points.append(c)
    assert points[-1] == best, (points[-1], best)
    return [sweep.point(c) for c in points]


def _framework_frontier(framework: str, params: Any, options: dict[str, Any],
                        progress: Callable[[int, int], None] | None = None) -> list[FrontierPoint]:
    """frontier() under a framework (apsi.training.frameworks.frontier), with plan()'s knobs and pins."""
    from apsi.training.frameworks import frontier as framework_frontier
    from apsi.api.plan import framework_question

    fw, pins, tolerance = framework_question(framework, options)
    for key in ("objective", "price", "pue"):
        options.pop(key, None)
    s = resolve(params, **options)
    if len(s.candidates) > 1:
        raise InputError("frontier() takes one GPU, not a list or any: give gpu one name")
    return framework_frontier.frontier(fw, s, pins, tolerance, progress)


def sample(points: list[FrontierPoint], count: int, keep_gpus: tuple[int, ...] = ()) -> list[FrontierPoint]:
    """`count` points spread evenly in log(GPUs), always with the first, the last and any whose GPU
    count is in `keep_gpus`; all of them when there are at most `count`. Sorted by GPUs."""
    if len(points) <= count:
        return list(points)
    gpus = [p.gpus for p in points]
    chosen = {0, len(points) - 1} | {i for i, p in enumerate(points) if p.gpus in keep_gpus}
    lo, hi = math.log(gpus[0]), math.log(gpus[-1])
    slots = count - len(chosen)
    for j in range(1, slots + 1):
        want = lo + (hi - lo) * j / (slots + 1)
        # The unchosen point nearest `want` in log(GPUs): where points are sparse (few GPUs) two
        # targets can share a nearest point, so the next nearest is taken.
        right = bisect.bisect_left(gpus, math.exp(want))
        left = right - 1
        while True:
            near_left = left >= 0 and (right >= len(gpus)
                                       or want - math.log(gpus[left]) <= math.log(gpus[right]) - want)
            i = left if near_left else right
            if i not in chosen:
                chosen.add(i)
                break
            left, right = (left - 1, right) if near_left else (left, right + 1)
    return [points[i] for i in sorted(chosen)]


class _Sweep:
    """The layout rules of apsi.training.reference.program for one Setup, and the arithmetic of apsi.training.reference.planning.assemble."""

    def __init__(self, s: Setup):
        self.s = s
        self.cap = s.gpus if s.gpus is not None else s.max_gpus
        self.tps = (s.tp,) if s.tp is not None else s.tp_choices()
        self.pps = (s.pp,) if s.pp is not None else s.pp_choices()
        self.levels = (s.recompute,) if s.recompute is not None else ar.RECOMPUTE_LEVELS
        self.big_b, self.b = s.batch_sequences, s.micro_batch
        self.dp_lo, self.dp_hi = (s.dp, s.dp) if s.dp is not None else (1, s.batch_sequences // s.micro_batch)
        self.states = ar.state_bytes(s.model.trained_params, s.optimizer)
        self.usable = ar.USABLE_FRACTION * s.gpu.memory_gib
        ranks = [ar.RECOMPUTE_LEVELS.index(r) for r in self.levels]
        self.flops = {k: ar.training_flops(s.model, s.tokens, s.seq, ar.RECOMPUTE_LEVELS[k])
                      for k in ranks}
        # K_r: GPU-seconds at level r, the same float apsi.training.reference.planning.hardware hands the solver.
        self.k = {k: f / (s.peak_flops * s.mfu) for k, f in self.flops.items()}
        self.exact = {k: Fraction(x) for k, x in self.k.items()}
        self.act = {(tp, k): ar.activation_bytes(s.layers, s.seq, self.b, s.width, s.heads,
                                                 ar.RECOMPUTE_LEVELS[k]) / tp / GIB
                    for tp in self.tps for k in ranks}
        # Smallest G at which each (tp, level) fits: memory only falls as G grows.
        self.first_fit = {key: self._first_fit(key) for key in self.act}

    def _memory_gib(self, gpus: int, tp: int, rank: int) -> float:
        # Same expression and float order as apsi.training.reference.planning.assemble: w + g + o + activations.
        w, g, o = (b / gpus / GIB for b in self.states)
        return w + g + o + self.act[(tp, rank)]

    def _first_fit(self, key: tuple[int, int]) -> int | None:
        room = self.usable - self.act[key]
        if room <= 0:
            return None
        # S / G <= room, so G >= S / room; step to the exact float boundary from the estimate.
        g = max(1, math.ceil(sum(self.states) / GIB / room))
        if g > self.cap:
            return None
        while g > 1 and self._memory_gib(g - 1, *key) <= self.usable:
            g -= 1
        while self._memory_gib(g, *key) > self.usable:
            g += 1
            if g > self.cap:
                return None
        return g

    def _candidate(self, tp: int, pp: int, dp: int, rank: int) -> _Candidate:
        # Duration K_r / G (1 + (pp - 1) b dp / B) = K_r n / (B G), n = B + b (pp - 1) dp
        # (apsi.model.arithmetic.duration_seconds with m = B / (b dp) micro-batches).
        gpus, n = tp * pp * dp, self.big_b + self.b * (pp - 1) * dp
        return _Candidate(self.k[rank] * n / (self.big_b * gpus), rank, n, gpus, pp, tp, dp)

    def days(self, c: _Candidate) -> float:
        """Days as apsi.training.reference.planning.assemble computes them: the same functions, the same float order."""
        micro = self.big_b / (c.dp * self.b)
        return ar.days(ar.duration_seconds(self.flops[c.rank], c.gpus, self.s.peak_flops, self.s.mfu, c.pp, micro))

    def compare(self, x: _Candidate, y: _Candidate) -> int:
        """-1 if x is strictly faster than y, 1 if slower, 0 on an exact tie in duration."""
        lhs: float | Fraction
        rhs: float | Fraction
        if x.rank == y.rank:  # same K_r: compare n / G exactly in integers
            lhs, rhs = x.n * y.gpus, y.n * x.gpus
        elif abs(x.seconds - y.seconds) > _NEAR * max(x.seconds, y.seconds):
            lhs, rhs = x.seconds, y.seconds
        else:
            lhs, rhs = self.exact[x.rank] * x.n * y.gpus, self.exact[y.rank] * y.n * x.gpus
        return (lhs > rhs) - (lhs < rhs)

    def _better(self, x: _Candidate, y: _Candidate) -> bool:
        """The solver's order: duration, then GPUs, lighter recompute, smaller pp, smaller tp."""
        c = self.compare(x, y)
        return c < 0 or (c == 0 and (x.gpus, x.rank, x.pp, x.tp) < (y.gpus, y.rank, y.pp, y.tp))

    def fastest(self) -> _Candidate | None:
        """The fastest layout within the cap, by the dominance rule dp = min(B / b, cap / (tp pp))."""
        best = None
        for tp in self.tps:
            for pp in self.pps:
                dp = min(self.dp_hi, self.cap // (tp * pp))
                if dp < self.dp_lo:
                    continue
                for rank in self.exact:
                    fit = self.first_fit[(tp, rank)]
                    if fit is not None and tp * pp * dp >= fit:
                        c = self._candidate(tp, pp, dp, rank)
                        if best is None or self._better(c, best):
                            best = c
        return best

    def _groups(self, lo: int, hi: int) -> Iterator[tuple[int, int]]:
        """(k, pp) for k = pp x dp GPUs per TP group in lo..hi, with the smallest pp that gives a
        dp within its range (a smaller pp is faster at the same G and tp)."""
        if self.dp_lo == self.dp_hi:  # dp pinned: one k per pp
            yield from ((pp * self.dp_lo, pp) for pp in self.pps if lo <= pp * self.dp_lo <= hi)
        elif len(self.pps) == 1:  # pp pinned: k runs over its multiples
            pp = self.pps[0]
            for dp in range(max(self.dp_lo, -(-lo // pp)), min(self.dp_hi, hi // pp) + 1):
                yield pp * dp, pp
        else:  # pps are the divisors of the layers, so pp divides gcd(k, layers)
            divisors = {d: [p for p in self.pps if d % p == 0] for d in self.pps}
            for k in range(lo, hi + 1):
                if k <= self.dp_hi:
                    yield k, 1
                    continue
                options = divisors[math.gcd(k, self.s.layers)]
                i = bisect.bisect_left(options, -(-k // self.dp_hi))
                if i < len(options):
                    yield k, options[i]

    def _stop(self, tp: int, rank: int, anchors: list[_Candidate], top: int) -> int:
        """A G past which no layout with this tp (lightest level `rank`) can be a frontier point.

        With dp <= B / b, any layout at tp takes K_r (1 / (tp pp dp) + (pp - 1) b / (B tp pp))
        >= K_r b / (B tp): at most the speed of TP tp x DP B / b. Once some layout on G GPUs
        (an anchor) is that fast, f(G) is, and every layout at tp on more GPUs is no faster.
        """
        bound = _Candidate(self.k[rank] * self.b / (self.big_b * tp), rank, self.b, tp, 0, tp, 0)
        return next((a.gpus for a in anchors if self.compare(a, bound) <= 0), top)

    def best_by_gpus(self, top: int) -> dict[int, _Candidate]:
        """For each G up to `top` at which something fits, the fastest layout on exactly G GPUs
        (skipping, per tp, the counts past `_stop`, where it cannot make a frontier point)."""
        ranks = sorted(self.exact)
        # Anchors: for each (tp, pp), the fastest layout, dp at the batch's limit, if it fits.
        anchors = []
        for tp in self.tps:
            for pp in self.pps:
                g = tp * pp * self.dp_hi
                rank = next((r for r in ranks if g <= top and g >= (self.first_fit[(tp, r)] or g + 1)), None)
                if rank is not None:
                    anchors.append(self._candidate(tp, pp, self.dp_hi, rank))
        anchors.sort(key=lambda c: c.gpus)
        best: dict[int, _Candidate] = {}
        for tp in self.tps:
            fits = [(fit, r) for r in ranks for fit in (self.first_fit[(tp, r)],) if fit is not None]
            if not fits:
                continue
            start = min(f for f, _ in fits)
            stop = self._stop(tp, fits[0][1], anchors, top)
            for k, pp in self._groups(-(-start // tp), stop // tp):
                g = tp * k
                for fit, level in fits:  # the lightest level that fits
                    if g >= fit:
                        break
                c = self._candidate(tp, pp, k // pp, level)
                old = best.get(g)
                if old is None or self._better(c, old):
                    best[g] = c
        return best

    def point(self, c: _Candidate) -> FrontierPoint:
        s = self.s
        days = self.days(c)
        return FrontierPoint(
            gpus=c.gpus, nodes=math.ceil(c.gpus / s.gpu.gpus_per_node), days=days,
            layout=Layout(tp=c.tp, pp=c.pp, dp=c.dp, recompute=_LEVELS[c.rank],
                          micro_batch_sequences=self.b, micro_batches_per_replica=self.big_b / (c.dp * self.b),
                          sequence_parallel=c.tp > 1),
            memory_per_gpu_gib=self._memory_gib(c.gpus, c.tp, c.rank), target_met=days <= s.days)
