"""The queueing arithmetic of a serving replica: how long a request waits behind other requests'
prefills, and behind the front end's streaming (apsi.serving.operating.operating_point calls both;
apsi.serving.disagg the inverse of the first, busiest); pure functions of rates and service times,
no model or GPU."""

from __future__ import annotations

import math


def prefill_queue(rate: float, prefill_s: float) -> tuple[float, float]:
    """The mean and p99 wait of a request behind other requests' prefills: requests arriving at
    random (Poisson) at `rate` a second, each prompt's prefill taking `prefill_s` of the replica's
    time. The mean is M/D/1's (Pollaczek-Khinchine: rho s / (2 (1 - rho)), rho = rate s); the p99
    takes the wait as exponential past zero, P(W > t) = rho exp(-rho t / W) (Kingman's heavy-traffic
    approximation), so t99 = (W / rho) ln(100 rho), 0 when fewer than 1% of requests wait. rho < 1
    at every steady batch: each step carries the prefill its arrivals bring (operating_point)."""
    mean, p99 = wait_quantiles(rate, prefill_s, (0.99,))
    return mean, p99


def wait_quantiles(rate: float, prefill_s: float, quantiles: tuple[float, ...]) -> tuple[float, ...]:
    """prefill_queue's mean wait, then its wait at each quantile q (the same exponential tail:
    t_q = (W / rho) ln(rho / (1 - q)), 0 when fewer than 1 - q of the requests wait)."""
    rho = rate * max(prefill_s, 0.0)
    if rho <= 0:
        return (0.0,) * (1 + len(quantiles))
    if rho >= 1:
        return (math.inf,) * (1 + len(quantiles))
    mean = rho * prefill_s / (2 * (1 - rho))
    if quantiles == REPORTED:
        t50, t90, t99 = _tail(mean / rho, rho, quantiles)
        return mean, t50, t90, t99
    return (mean, *_tail(mean / rho, rho, quantiles))


def _tail(scale: float, share: float, quantiles: tuple[float, ...]) -> tuple[float, ...]:
    """scale x ln(share / (1 - q)) at each quantile q, 0 where share <= 1 - q: an exponential tail
    P(X > t) = share exp(-t / scale). One logarithm for the REPORTED ones: the walk asks it at
    every batch it weighs."""
    ln = math.log(share)
    if quantiles == REPORTED:  # straight-line: the common case
        return (scale * (ln + _LN2) if share > 0.5 else 0.0, scale * (ln + _LN10) if share > 0.1 else 0.0,
                scale * (ln + _LN100) if share > 0.01 else 0.0)
    return tuple(scale * (ln - math.log(1 - q)) if share > 1 - q else 0.0 for q in quantiles)


REPORTED = (0.5, 0.9, 0.99)
"""The percentiles the plans report (p50, p90, p99)."""
_LN2, _LN10, _LN100 = math.log(2), math.log(10), math.log(100)


FRONT_END_MOST_BUSY = 0.95
"""The front end's busy share past which the model stops growing its wait (20 times request_s):
beyond it the front end, not the GPUs, limits the replica, which the model does not state."""


def front_end_busy(stream_s: float, batch: float, tpot: float) -> float:
    """The front end's busy share: the output tokens it streams per second (batch / tpot) times its
    time per token, stream_s (unclamped: past FRONT_END_MOST_BUSY the model is out of its range)."""
    return batch / tpot * stream_s


def front_end(request_s: float, stream_s: float, batch: float, tpot: float) -> float:
    """A request's latency outside the GPU's steps: the engine's request_s, stretched as in a
    single-server queue (M/M/1 response time, request_s / (1 - u)) by the front end's busy share u
    (front_end_busy, at most FRONT_END_MOST_BUSY)."""
    busy = min(FRONT_END_MOST_BUSY, front_end_busy(stream_s, batch, tpot))
    return request_s / (1 - busy)


def front_end_quantiles(request_s: float, stream_s: float, batch: float, tpot: float,
                        quantiles: tuple[float, ...]) -> tuple[float, ...]:
    """front_end()'s mean, then its value at each quantile q: the fixed request_s plus the wait of
    a single-server queue of service time request_s at busy share u, whose mean is
    u request_s / (1 - u) (so the sum's is front_end's) and whose tail is M/M/1's,
    P(W > t) = u exp(-(1 - u) t / request_s): t_q = request_s / (1 - u) ln(u / (1 - q)), 0 when
    fewer than 1 - q of the requests wait (as wait_quantiles takes the prefill queue's)."""
    busy = min(FRONT_END_MOST_BUSY, batch / tpot * stream_s)
    mean = request_s / (1 - busy)
    if busy <= 0:
        return (mean, *[request_s] * len(quantiles))
    if quantiles == REPORTED:
        t50, t90, t99 = _tail(mean, busy, quantiles)
        return mean, request_s + t50, request_s + t90, request_s + t99
    return (mean, *[request_s + t for t in _tail(mean, busy, quantiles)])


def busiest(wait_s: float, prefill_s: float, p99: bool = False) -> float:
    """The largest busy share rho of a replica whose prefill_queue() wait (its mean, or its p99)
    stays within wait_s: the inverse of prefill_queue, in closed form for the mean (M/D/1:
    rho <= 2 W / (s + 2 W)) and by bisection for the p99 (which rises with rho); 0 when no load
    keeps it (a negative budget), just under 1 for an unbounded one."""
    if wait_s < 0 or prefill_s <= 0:
        return 0.0 if wait_s < 0 else 1.0
    if math.isinf(wait_s):
        return 1.0 - 1e-9
    if not p99:
        return 2 * wait_s / (prefill_s + 2 * wait_s)
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if prefill_queue(mid / prefill_s, prefill_s)[1] <= wait_s:
            lo = mid
        else:
            hi = mid
    return lo


def slot_wait(slots: int, load: float, service_s: float) -> tuple[float, float]:
    """The share of requests that find every slot held, and their mean wait for one, seconds:
    Erlang C (M/M/c) for `slots` requests a replica can hold at once, random arrivals that keep
    `load` of them busy on average (Little's law: the arrival rate times `service_s`, a request's
    time in a slot). Erlang B by its recursion B(k) = a B(k-1) / (k + a B(k-1)), stable at any c;
    C = c B / (c - a (1 - B)), the mean wait C service_s / (c - a). (1, inf) when load >= slots.
    The planner does not count this wait (a Note reports it where it is large: apsi.serving.explain)."""
    if load <= 0 or slots < 1:
        return 0.0, 0.0
    if load >= slots:
        return 1.0, math.inf
    if slots > 64 and slots - load > 6 * math.sqrt(load):
        # Past six standard deviations of the load below the slots (Halfin and Whitt's beta > 6),
        # fewer than 2e-7 of the requests wait at any c above 64 (the recursion's own answer, c to
        # 3,000): the O(c) recursion is skipped, a serve() being some milliseconds.
        return 0.0, 0.0
    b = 1.0
    for k in range(1, slots + 1):
        b = load * b / (k + load * b)
    c = slots * b / (slots - load * (1 - b))
    return c, c * service_s / (slots - load)

