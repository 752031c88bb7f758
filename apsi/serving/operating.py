"""A serving replica at a steady batch: its TTFT (mean and percentiles), TPOT and requests per
second (`operating_point`), and bounds on them over a range of batches (`operating_bounds`), from
the steps of apsi.serving.replica, the one source of truth for serving.

At a steady batch b (`operating_point`), every request prefills isl - prefix tokens once and
decodes osl tokens, so each step also carries b (isl - prefix) / osl prefill tokens. TPOT is a
step's time (PP stages in turn, each on b / pp sequences). TTFT is the engine's fixed latency of a
request outside the steps (Calibration.request_ms), half a step's wait for the next step (p99: a
whole one), the wait behind other requests' prefills (an M/D/1 queue: requests arriving at
random, each prompt's prefill the extra time it adds to a step; none under a concurrency, a
closed loop whose arrivals keep their prefills' spacing), and the step that runs the request's
own prefill. A request holds its place in the engine's batch from the step it waits for to its
last token, half a step + first + (osl - 1) TPOT, so a replica whose engine runs b requests
completes b / that many requests a second (Little's law).

Under a rate, the batch is the engine's: b / that many requests a second is the rate it carries,
and a request spends the front end's latency outside the batch besides. Under a concurrency (a
closed loop, Workload.closed), the batch is the requests in flight, as the benchmark client
counts them (vllm bench serve's --max-concurrency, aiperf's --concurrency): each client waits for
its whole request, front end included, so the loop completes C / E2EL requests a second, E2EL =
TTFT + (osl - 1) TPOT the latency the plan reports (../shared/reference/serving.md 6.1, 6.4 and
6.5: "closed-loop concurrency C gives lambda ~ C / E2EL (Little's law)"). Its steps are taken at
the C requests in flight, those in the front end (its HTTP, tokenizer and admission: request_ms,
and its queue) counted too: an upper bound on the engine's batch (serving.md 6.1: the server's own
TTFT is counted from scheduling). Taking them out (the engine's batch by Little's law on its own
time, C x P / E2EL) and refitting moved SGLang's validation TTFT from 16.2% to 23.0%, past its 20%
bar (docs/validation.md), so the steps stay at C.

Every part of a batch's figures grows with the batch but the queue's service time (an MoE's step
touches more experts at a larger batch, so a prompt adds fewer reads), so TTFT can fall as the
batch grows; `operating_bounds` holds over a range whatever its shape (apsi.serving.walk.within).
"""

from __future__ import annotations

from typing import NamedTuple

from apsi.serving.queues import REPORTED, front_end, front_end_quantiles, wait_quantiles
from apsi.serving.replica import Shape, Workload, step_seconds


class Point(NamedTuple):
    """A replica at a steady batch."""

    batch: int
    ttft_s: float
    ttft_p99_s: float
    ttft_p50_s: float
    """The median TTFT (the percentiles: each part's own, the queue's from its exponential tail)."""
    ttft_p90_s: float
    tpot_s: float
    requests_per_s: float
    """Under a closed loop, batch / (TTFT + (osl - 1) TPOT) exactly (Little's law: module docstring)."""


class Parts(NamedTuple):
    """operating_point's figures at one batch, each non-decreasing in the batch (step_seconds grows
    with the sequences and tokens a step carries), from which its Point is made (point_of)."""

    step: float
    own: float
    tpot: float
    first: float
    per_request: float
    """A request's time in the engine's batch: half a stage's step + first + (osl - 1) TPOT."""
    front: float
    """The front end's mean latency at that batch (queues.front_end)."""
    batch: float
    """The batch the parts are of."""


def parts(sh: Shape, w: Workload, batch: float) -> Parts:
    """The parts of a replica running `batch` requests at once (under a closed loop, the requests
    in flight: module docstring)."""
    pp = sh.pp
    # The pipeline runs pp micro-batches in turn; a micro-batch holds at least one sequence (with
    # fewer sequences than stages, some stages idle, and a token still crosses every stage).
    micro = max(1.0, batch / pp)
    fresh = w.isl - w.prefix
    context = w.isl + w.osl / 2
    prefill_context = w.prefix + fresh / 2
    arrivals = micro * fresh / w.osl
    step = step_seconds(sh, micro, context, arrivals, prefill_context, prompt=fresh)
    own = step_seconds(sh, micro, context, arrivals, prefill_context, own=fresh)
    tpot, first = step, own
    if pp > 1:
        tpot = pp * step + (pp - 1) * (sh.hop_latency_s + micro * sh.hop_s_per_token)
        first = pp * own + (pp - 1) * (sh.hop_latency_s + (micro + fresh) * sh.hop_s_per_token)
    # A new request waits for the next micro-batch to enter the pipeline: half a stage's step on
    # average, a whole one at worst (p99); without a pipeline, that is half a step, or a step.
    per_request = 0.5 * tpot / pp + first + (w.osl - 1) * tpot
    return Parts(step, own, tpot, first, per_request, front_end(sh.request_s, sh.stream_s, batch, tpot), batch)


def rate_of(w: Workload, batch: float, x: Parts) -> float:
    """Requests a second at `batch` with parts `x`, Little's law over the time each request spends
    where `batch` counts it: under a rate, the engine's batch over its time in the engine; under a
    closed loop, the requests in flight over their whole latency, front end + engine time
    (= TTFT + (osl - 1) TPOT as _point reports them; module docstring)."""
    return batch / (x.front + x.per_request) if w.closed else batch / x.per_request


def operating_point(sh: Shape, w: Workload, batch: int) -> Point:
    """TTFT, TPOT and requests/s of a replica of shape `sh` running `batch` requests at once
    (module docstring)."""
    return point_of(sh, w, batch, parts(sh, w, batch))


def point_of(sh: Shape, w: Workload, batch: int, x: Parts) -> Point:
    """operating_point from the batch's parts (parts())."""
    # The prefill's service time is what a prompt adds to a stage's step (stages overlap, so one
    # stage's share bounds the replica's prefill rate); attention-DP groups each take their share
    # of the arrivals.
    return _point(sh, w, batch, x.tpot, x.first, rate_of(w, batch, x), x.own - x.step, batch / x.tpot)


def operating_bounds(sh: Shape, w: Workload, lo: int, hi: int, a: Parts | None = None,
                     z: Parts | None = None) -> tuple[Point, Point]:
    """Bounds on operating_point's every figure over the batches lo..hi (`a`, `z`: their parts,
    where known): no batch there has a TTFT (mean or any percentile), TPOT or rate below the first
    Point's or above the second's. Each part grows with the batch but the queue's service time,
    what a prompt adds to a step (an MoE's step touches more experts at a larger batch, so a prompt
    adds fewer reads), which lies between the prompt's step at lo less the step at hi and the other
    way round; the queue's wait grows with its rate and its service time alike
    (apsi.serving.queues). How the serving walk proves a batch range meets the targets where TTFT
    can fall with the batch (apsi.serving.walk.within)."""
    a = parts(sh, w, lo) if a is None else a
    z = parts(sh, w, hi) if z is None else z
    return lowest(sh, w, lo, a, z), highest(sh, w, hi, a, z)


def lowest(sh: Shape, w: Workload, lo: int, a: Parts, z: Parts) -> Point:
    """operating_bounds' lower Point, from the parts at the range's ends."""
    return _point(sh, w, lo, a.tpot, a.first, _slowest(sh, w, lo, a, z), max(0.0, a.own - z.step),
                  lo / z.tpot)


def highest(sh: Shape, w: Workload, hi: int, a: Parts, z: Parts) -> Point:
    """operating_bounds' upper Point, from the parts at the range's ends."""
    return _point(sh, w, hi, z.tpot, z.first, _fastest(sh, w, hi, a, z), z.own - a.step, hi / a.tpot)


def _slowest(sh: Shape, w: Workload, lo: int, a: Parts, z: Parts) -> float:
    """The lowest rate over a range lo..hi (rate_of): lo requests over the longest time, the last
    batch's in the engine and, under a closed loop, the front end at the most it streams, hi
    sequences at the first batch's TPOT (front_end grows with batch / TPOT)."""
    if not w.closed:
        return lo / z.per_request
    return lo / (front_end(sh.request_s, sh.stream_s, z.batch, a.tpot) + z.per_request)


def _fastest(sh: Shape, w: Workload, hi: int, a: Parts, z: Parts) -> float:
    """The highest rate over a range lo..hi: hi requests over the shortest time, the first batch's
    in the engine and, under a closed loop, the front end at the least it streams, lo sequences at
    the last batch's TPOT."""
    if not w.closed:
        return hi / a.per_request
    return hi / (front_end(sh.request_s, sh.stream_s, a.batch, z.tpot) + a.per_request)


def _point(sh: Shape, w: Workload, batch: int, tpot: float, first: float, rate: float, service: float,
           streamed: float) -> Point:
    """A Point from its parts: `rate` requests/s, each prompt's prefill `service` seconds of a
    stage's step, `streamed` sequences per second of TPOT the front end streams (batch / TPOT)."""
    pp = sh.pp
    wait = tpot / pp
    # A closed loop of requests of one length: each arrives as an earlier one ends, a lifetime after
    # it arrived, so the arrivals keep their prefills' spacing and none waits behind another's in
    # the steady state. Random arrivals at the same rate queue as M/D/1 (apsi.serving.queues).
    queue, p50, p90, p99 = ((0.0,) * 4 if w.closed else wait_quantiles(rate / sh.dp, service, REPORTED))
    front, front50, front90, front99 = front_end_quantiles(sh.request_s, sh.stream_s, streamed, 1.0, REPORTED)
    ttft = front + 0.5 * wait + queue + first
    # Each percentile adds its parts' own (an upper bound on the sum's): the front end's and the
    # queue's from their tails, the wait to join at that share of a stage's step (p99: a whole one).
    return Point(batch=batch, ttft_s=ttft, ttft_p99_s=front99 + wait + p99 + first,
                 ttft_p50_s=front50 + 0.5 * wait + p50 + first, ttft_p90_s=front90 + 0.9 * wait + p90 + first,
                 tpot_s=tpot, requests_per_s=rate)
