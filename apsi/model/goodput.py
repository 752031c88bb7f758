"""Failures cost time at scale: the wall-clock time of a run that restarts after each interruption.

Owns the expected-goodput term of a plan's duration. Interruptions arrive at a rate per GPU-hour
(Llama 3: 419 unexpected interruptions in 54 days of pre-training on 16,384 H100, L3 Sec. 3.3.4);
each costs the restart and, on average, half a checkpoint interval of lost work. Over a wall time
T on N GPUs that is lambda N T (restart + interval / 2), so T = ideal / (1 - lambda N cost). Pure
functions: seconds in, seconds out.
"""

from __future__ import annotations

import math

INTERRUPTIONS_PER_GPU_HOUR = 419 / (54 * 24 * 16_384)
"""Unexpected interruptions per GPU-hour: Llama 3's 419 in a 54-day snapshot on 16,384 H100 (L3
Sec. 3.3.4), about 2.0e-5 (one every 3.1 minutes across the cluster)."""

CHECKPOINT_MINUTES = 30.0
"""Default interval between checkpoints, minutes (an option: checkpoint_minutes)."""

RESTART_MINUTES = 0.1 * 54 * 24 * 60 / 419 - CHECKPOINT_MINUTES / 2
"""Minutes to detect an interruption, restart and reload: Llama 3 kept "higher than 90% effective
training time" through its 419 interruptions (L3 Sec. 3.3.4), so each cost at most 10% of 54 days /
419 = 18.6 minutes; less the half interval of lost work at the default 30-minute interval, 3.6."""


def failure_rate(gpus: float) -> float:
    """Interruptions per second of wall time on `gpus` GPUs."""
    return INTERRUPTIONS_PER_GPU_HOUR * gpus / 3600


def lost_share(gpus: float, checkpoint_minutes: float = CHECKPOINT_MINUTES) -> float:
    """The share of wall time interruptions take on `gpus` GPUs: rate x cost, cost = restart + half
    a checkpoint interval (linear in the GPUs)."""
    return failure_rate(gpus) * (RESTART_MINUTES + checkpoint_minutes / 2) * 60


def wall_seconds(ideal: float, gpus: int, checkpoint_minutes: float = CHECKPOINT_MINUTES) -> float:
    """The run's wall time with interruptions: ideal / (1 - lost_share); infinite where
    interruptions come faster than the run recovers."""
    lost = lost_share(gpus, checkpoint_minutes)
    return ideal / (1 - lost) if lost < 1 else math.inf
