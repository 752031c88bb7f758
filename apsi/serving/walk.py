"""The exact walk over serving layouts: every GPU type's every replica layout, each at the
largest batch up to which every batch meets the targets, and the replicas a load needs.

For a layout, TPOT rises with the batch and requests per second rise with it too
(apsi.serving.replica: a step's time is a roofline of terms that grow at most linearly with the
batch, over a fixed part, so batch / time rises). TTFT rises too but for its queue under random
arrivals: an MoE's prompt adds fewer expert reads to a step whose sequences already touch more
experts, so at small batches its wait, and TTFT, can fall as the batch grows. A layout's batch is
therefore the largest up to which every batch meets the targets (a replica carrying less of the
load runs a smaller batch, and must meet them too): by bisection where TTFT cannot fall (no TTFT
target, or a closed loop), else by halving batch ranges on bounds that hold over each
(within()). It serves the most requests per replica, and the fewest replicas of that layout for
a rate (or a concurrency) are those at that batch; the replicas then run at the smallest batch
that still carries the load (bisection again), which is their operating point. Every layout is
weighed, so the fewest GPUs over the walk is proved: no layout is left out (tests/test_serving.py
checks the searches against every batch).
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple, Protocol

from apsi.catalog import GPU
from apsi.model.architecture import Architecture
from apsi.serving import admission
from apsi.serving import operating as op
from apsi.serving import replica as rp
from apsi.serving.engine import Engine
from apsi.model.serve_schema import Limit


class Targets(NamedTuple):
    ttft_s: float | None
    p99: bool
    tpot_s: float | None

    def meets(self, p: op.Point) -> bool:
        ttft = p.ttft_p99_s if self.p99 else p.ttft_s
        return (self.tpot_s is None or p.tpot_s <= self.tpot_s) and (self.ttft_s is None or ttft <= self.ttft_s)

    def ttft(self, p: op.Point) -> float:
        return p.ttft_p99_s if self.p99 else p.ttft_s


class Kind(NamedTuple):
    """One replica layout on one GPU type, at the largest batch that meets the targets."""

    gpu: GPU
    order: int
    """The GPU type's place in the candidates (ties go to the earlier)."""
    replica: rp.Replica
    shape: rp.Shape
    max_batch: int
    batch: int
    """The largest batch meeting the targets; 0 when even one request misses them."""
    point: op.Point
    """At `batch` (at batch 1 when batch is 0: the closest it comes)."""
    limit: Limit
    """What stops the batch: tpot, ttft, kv_cache or max_batch."""

    def at(self, batch: int, w: rp.Workload) -> op.Point:
        return op.operating_point(self.shape, w, batch)


class Layouts(NamedTuple):
    kinds: list[Kind]
    """Layouts that meet the targets at some batch."""
    missed: list[Kind]
    """Layouts that fit but miss the targets at batch 1 (for the closest-reachable message)."""
    weighed: int
    """Layouts weighed, fitting or not (those set aside by a bound among them)."""
    bounded: int = 0
    """Layouts set aside unweighed: one replica of each ranks past the second-best answer (Bound)."""


def largest(lo: int, hi: int, ok: Callable[[int], bool]) -> int:
    """The largest n in [lo, hi] with ok(n), ok falling from true to false; lo - 1 when none."""
    if hi < lo or not ok(lo):
        return lo - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def within(lo: int, hi: int, ok: Callable[[int], bool], every: Callable[[int, int], bool],
           none: Callable[[int, int], bool]) -> int:
    """The largest n in [lo, hi] with ok at every batch from lo to n; lo - 1 when ok(lo) fails.
    `every(a, b)`: the batches a..b's upper bounds meet the targets, so every batch there does;
    `none(a, b)`: their lower bounds miss them, so none does (operating.operating_bounds). A
    bisection as if ok fell with the batch gives a candidate; the ranges between the batches it
    found meeting the targets are then proved to meet them whole, any range the bounds leave open
    halved down to single batches weighed exactly. Where that fails, the ranges from lo are
    searched so for the first batch that misses. No batch is left unweighed, whatever the shape of
    TTFT in the batch."""
    if hi < lo:
        return lo - 1
    seen: dict[int, bool] = {}

    def probe(n: int) -> bool:
        if n not in seen:
            seen[n] = ok(n)
        return seen[n]

    def first_miss(a: int, b: int) -> int:
        """The first batch in a..b that misses; b + 1 when none does."""
        if a == b:
            return b + 1 if probe(a) else a
        if every(a, b):
            return b + 1
        if none(a, b):
            return a
        mid = (a + b) // 2
        miss = first_miss(a, mid)
        return miss if miss <= mid else first_miss(mid + 1, b)

    best = largest(lo, hi, probe)
    if best < lo:
        return best
    # The batches the bisection found meeting the targets, up to its candidate, split lo..best.
    marks = sorted(n for n, good in seen.items() if good and n <= best)
    start = lo
    for mark in marks:
        if mark > start and first_miss(start, mark) <= mark:
            return first_miss(lo, hi) - 1
        start = mark
    return best


def smallest(lo: int, hi: int, ok: Callable[[int], bool]) -> int:
    """The smallest n in [lo, hi] with ok(n), ok rising from false to true; hi when none."""
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


class Bound(NamedTuple):
    """What lets the walk set a pipelined layout aside without weighing it in full (plan.walked).
    `key`: a kind's rank with a load, smaller first (plan._primary: its replicas' GPUs, or their
    cost); `least(gpu, replica, most)`: the least first part of that key any kind of the layout can
    have, its replicas each carrying at most `most` (None: unknown, so one replica); `capacity`:
    what one replica of a kind carries in a mix (plan._offers: requests/s, or requests in flight);
    `rate`: a replica is measured by its requests/s (else, under a concurrency, by its batch);
    `mixes`: the answer may mix layouts (with a load; plan._cover), which a layout set aside must
    not be in."""

    key: Callable[[Kind], tuple]
    least: Callable[[GPU, rp.Replica, float | None], float]
    capacity: Callable[[Kind], float]
    rate: bool
    mixes: bool


class Aside(Protocol):
    """Another bound of the walk (apsi.serving.frontier.Staircase, the frontier's): told each kind
    weighed that meets the targets at some batch, it says whether a pipelined layout of shape `sh`,
    on `gpus` GPUs, whose KV cache and engine hold `top` requests (top >= 1), can be set aside."""

    def weighed(self, k: Kind) -> None: ...

    def sets_aside(self, sh: rp.Shape, top: int, gpus: int) -> bool: ...


def layouts(a: Architecture, gpus: tuple[GPU, ...], engine: Engine, weights: str, kv: str,
            w: rp.Workload, targets: Targets, tp: int | None = None, pp: int | None = None,
            unshaped_experts: int = 0, bound: Bound | None = None, aside: Aside | None = None) -> Layouts:
    """Every replica layout of every GPU type (apsi.serving.replica.replicas; with tp or pp
    pinned, those with it), each with the largest batch meeting the targets.

    With a `bound`, every GPU type's one-stage layouts are weighed first, then
    the pipelined ones (PP 2 to 16 at every TP: the many, and seldom the best) by their GPUs, fewest
    first; once two kinds are known, a pipelined layout is set aside (Layouts.bounded) when its
    least key's first part is strictly above the second-best kind's key's:
      - at one replica (Bound.least with no capacity): it can be neither the answer nor the
        runner-up its Why names (the two best kinds: keys only fall as more layouts are weighed, and
        the plan ranks by the key first), and one replica of it needs more GPUs (or cost) than the
        best single layout, which a mix that beats that layout may not spend (plan._caps,
        mix.cover_free);
      - at the replicas its largest batch would need (its requests/s there: they rise with the
        batch, as the module docstring says, so no batch within the targets carries more; under a
        concurrency, that batch), when a kind already weighed on the same GPU type has no more GPUs
        and carries strictly more: it is again neither of the two best kinds, and that kind dominates
        it, so no mix holds it (mix.undominated drops it: the same or fewer GPUs, as much cost or
        less, more load). Without a load there is no mix, and the key is minus the requests/s per
        GPU (the most economical replica): the key alone sets it aside.
    Either way serve()'s answer is the one the whole walk gives. With an `aside` (and no bound), the
    layouts are weighed in the same order, and a pipelined one is set aside where it says so, its
    KV cache holding a request. The kinds come back in the order of the layouts, bound or not."""
    todo = [(order, gpu, i, rep) for order, gpu in enumerate(gpus)
            for i, rep in enumerate(rp.replicas(a, gpu, tp, pp))]
    if bound is not None or aside is not None:
        todo.sort(key=lambda x: (x[3].pp > 1, x[3].gpus if x[3].pp > 1 else 0, x[0], x[2]))
    kinds: list[tuple[int, int, Kind]] = []
    missed: list[tuple[int, int, Kind]] = []
    levels: list[tuple] = []  # the two best keys of the kinds weighed so far (the same key twice, where two tie)
    carried: dict[int, list[tuple[int, float]]] = {}  # by GPU type: each kind's (GPUs, capacity)
    bounded = 0
    ons = {order: engine.on(gpu) for order, gpu in enumerate(gpus)}  # the engine's defaults on each GPU
    for order, gpu, i, rep in todo:
        on = ons[order]
        sh = rp.shape(a, gpu, on, weights, kv, rep, unshaped_experts) if bound is None or rep.pp == 1 else None
        if bound is not None and rep.pp > 1 and len(levels) == 2:
            if bound.least(gpu, rep, None) > levels[1][0]:
                bounded += 1
                continue
            sh = rp.shape(a, gpu, on, weights, kv, rep, unshaped_experts)
            top = admission.max_batch(sh, on, w)
            if top >= 1:
                most = op.operating_point(sh, w, top).requests_per_s if bound.rate else float(top)
                if (bound.least(gpu, rep, most) > levels[1][0]
                        and (not bound.mixes or any(g <= rep.gpus and c > most for g, c in carried.get(order, ())))):
                    bounded += 1
                    continue
        if sh is None:
            sh = rp.shape(a, gpu, on, weights, kv, rep, unshaped_experts)
        if aside is not None and rep.pp > 1:
            top = admission.max_batch(sh, on, w)
            if top >= 1 and aside.sets_aside(sh, top, rep.gpus):
                bounded += 1
                continue
        k = _weigh(gpu, order, on, w, targets, rep, sh)
        if k is None:
            continue
        if k.batch < 1:
            missed.append((order, i, k))
            continue
        kinds.append((order, i, k))
        if aside is not None:
            aside.weighed(k)
        if bound is not None:
            levels = sorted(levels + [bound.key(k)])[:2]
            carried.setdefault(order, []).append((rep.gpus, bound.capacity(k)))
    return Layouts([k for _, _, k in sorted(kinds, key=lambda x: x[:2])],
                   [k for _, _, k in sorted(missed, key=lambda x: x[:2])], len(todo), bounded)


def _weigh(gpu: GPU, order: int, on: Engine, w: rp.Workload, targets: Targets, rep: rp.Replica,
           sh: rp.Shape) -> Kind | None:
    """Layout `rep` (of shape `sh`) at the largest batch meeting the targets (batch 0: it misses
    them at batch 1); None when its KV cache holds no request."""
    top = admission.max_batch(sh, on, w)
    if top < 1:
        return None

    def point(b: int) -> op.Point:
        return op.operating_point(sh, w, b)

    if targets.ttft_s is None or w.closed:
        # TPOT, and TTFT without a queue, grow with the batch: a bisection is exact.
        best = largest(1, top, lambda b: targets.meets(point(b)))
    else:
        known: dict[int, op.Parts] = {}  # each batch's parts, shared by the ranges ending there

        def at(b: int) -> op.Parts:
            if b not in known:
                known[b] = op.parts(sh, w, b)
            return known[b]

        def meets(b: int) -> bool:
            return targets.meets(op.point_of(sh, w, b, at(b)))

        def every(lo: int, hi: int) -> bool:
            return targets.meets(op.highest(sh, w, hi, at(lo), at(hi)))

        def none(lo: int, hi: int) -> bool:
            return not targets.meets(op.lowest(sh, w, lo, at(lo), at(hi)))

        best = within(1, top, meets, every, none)
    if best < 1:
        return Kind(gpu, order, rep, sh, top, 0, point(1), _failing(targets, point(1)))
    if best < top:
        limit = _failing(targets, point(best + 1))
    else:
        limit = "max_batch" if top == on.max_sequences * rep.dp else "kv_cache"
    return Kind(gpu, order, rep, sh, top, best, point(best), limit)


def _failing(targets: Targets, p: op.Point) -> Limit:
    """The target a point misses (TPOT first when both)."""
    if targets.tpot_s is not None and p.tpot_s > targets.tpot_s:
        return "tpot"
    return "ttft"


class Sized(NamedTuple):
    """A kind with the replicas a load needs, at their operating batch."""

    kind: Kind
    replicas: int
    batch: int
    point: op.Point
    limit: Limit
    lighter: int = 0
    """Under a concurrency the replicas do not share evenly, those running batch - 1 requests."""
    light: op.Point | None = None
    """Their operating point (batch - 1), with `lighter`."""

    @property
    def gpus(self) -> int:
        return self.replicas * self.kind.replica.gpus

    @property
    def requests_per_s(self) -> float:
        """Requests the replicas complete a second together, each at its own batch."""
        light = 0.0 if self.light is None else self.lighter * self.light.requests_per_s
        return (self.replicas - self.lighter) * self.point.requests_per_s + light


def held(k: Kind, w: rp.Workload, replicas: int, requests: int, limit: Limit) -> Sized:
    """`replicas` of `k` holding `requests` in flight (a concurrency's share) as evenly as whole
    requests go: each ceil(requests / replicas), or one fewer on those the division leaves over (none
    on a replica of batch 1 that gets none: it completes nothing)."""
    batch = max(1, math.ceil(requests / replicas))
    lighter = replicas * batch - requests
    return Sized(k, replicas, batch, k.at(batch, w), limit, lighter,
                 k.at(batch - 1, w) if lighter and batch > 1 else None)


def replicas_for(k: Kind, rate: float | None, concurrency: int | None) -> int:
    """The fewest replicas of `k` (at its largest batch within the targets) carrying the load; 1 without one."""
    if rate is not None:
        return max(1, math.ceil(rate / k.point.requests_per_s - 1e-12))
    if concurrency is not None:
        return max(1, math.ceil(concurrency / k.batch))
    return 1


def size(k: Kind, w: rp.Workload, rate: float | None, concurrency: int | None) -> Sized:
    """The fewest replicas of `k` for the load, each at the smallest batch that carries its share
    (its operating point); without a load, one replica at k's batch."""
    replicas = replicas_for(k, rate, concurrency)
    if rate is not None:
        share = rate / replicas
        batch = smallest(1, k.batch, lambda b: k.at(b, w).requests_per_s >= share * (1 - 1e-12))
    elif concurrency is not None:
        batch = math.ceil(concurrency / replicas)
        return held(k, w, replicas, concurrency, k.limit if batch == k.batch else "load")
    else:
        return Sized(k, 1, k.batch, k.point, k.limit)
    limit = k.limit if batch == k.batch else "load"
    return Sized(k, replicas, batch, k.at(batch, w), limit)
