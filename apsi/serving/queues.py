"""The queueing arithmetic of a serving replica: how long a request waits behind other requests'
prefills, and behind the front end's streaming (apsi.serving.replica.operating_point calls both;
pure functions of rates and service times, no model or GPU)."""

from __future__ import annotations

import math


def prefill_queue(rate: float, prefill_s: float) -> tuple[float, float]:
    """The mean and p99 wait of a request behind other requests' prefills: requests arriving at
    random (Poisson) at `rate` a second, each prompt's prefill taking `prefill_s` of the replica's
    time. The mean is M/D/1's (Pollaczek-Khinchine: rho s / (2 (1 - rho)), rho = rate s); the p99
    takes the wait as exponential past zero, P(W > t) = rho exp(-rho t / W) (Kingman's heavy-traffic
    approximation), so t99 = (W / rho) ln(100 rho), 0 when fewer than 1% of requests wait. rho < 1
    at every steady batch: each step carries the prefill its arrivals bring (operating_point)."""
    rho = rate * max(prefill_s, 0.0)
    if rho <= 0:
        return 0.0, 0.0
    if rho >= 1:
        return math.inf, math.inf
    mean = rho * prefill_s / (2 * (1 - rho))
    return mean, max(0.0, mean / rho * math.log(100 * rho))


FRONT_END_MOST_BUSY = 0.95
"""The front end's busy share past which the model stops growing its wait (20 times request_s):
beyond it the front end, not the GPUs, limits the replica, which the model does not state."""


def front_end(request_s: float, stream_s: float, batch: float, tpot: float) -> float:
    """A request's latency outside the GPU's steps: the engine's request_s, stretched as in a
    single-server queue (M/M/1 response time, request_s / (1 - u)) by the front end's busy share u,
    the output tokens it streams per second (batch / tpot) times its time per token, stream_s."""
    busy = min(FRONT_END_MOST_BUSY, batch / tpot * stream_s)
    return request_s / (1 - busy)
