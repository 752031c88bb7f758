"""The pool counts of a disaggregated plan: how many prefill replicas of each kind and how many
decode replicas of which kind carry a rate at the fewest GPUs (or the least cost), within each GPU
type's inventory.

The choices couple. A prefill replica's capacity depends on the decode kind beside it (its first
step and its link take part of the TTFT target, apsi.serving.disagg.capacity); both pools draw on
the same inventory. The program: one decode kind d chosen (u_d, one-hot: every request's TTFT has
the same decode part), its replicas m_d carrying the rate; prefill replicas n_p of any kinds
carrying the rate at their capacity beside the chosen d; for each GPU type, the pools' GPUs within
its count. Minimise GPUs (or cost), then the other, in stages as apsi.serving.mix does; CP-SAT,
one worker, a fixed seed (the same question, the same pools).

Capacities are whole numbers on a scale of 2^k units per request/s, each rounded down and the rate
up, so the pools the program accepts carry the rate; k is as fine as 60-bit sums allow.
"""

from __future__ import annotations

import math
from typing import NamedTuple

TIME_LIMIT_S = 10.0
"""CP-SAT's time limit per stage, seconds."""
SUM_BITS = 60
"""The most bits a capacity sum may take (CP-SAT's coefficients and sums are 64-bit)."""
FINEST = 2**30
"""The finest scale, units per request/s (a capacity rounded down by under 1e-9 requests/s)."""
COEFFICIENT_BITS = 31
"""The most bits one coefficient (a replica's capacity in units) may take. OR-Tools
9.15's presolve answered OPTIMAL at 12 GPUs where pools of 9 carried the rate (Llama 3.1 405B fp8
on TensorRT-LLM, H100 and B200, 5 requests/s, TTFT 1 s, 18 prefill kinds), with coefficients of
about 2^33 under the decode kinds' enforcement literals; the same model without presolve, or at
2^29 units a request/s, answered 9 (tests/test_serving_disagg.py)."""


class Kind(NamedTuple):
    """A replica kind as the program sees it."""

    gpu: str
    gpus: int
    """GPUs per replica."""
    cost: int
    """Price of one replica per hour, in 10^-6 USD (0 without a price)."""


class Pools(NamedTuple):
    prefill: tuple[int, ...]
    """Replicas of each prefill kind, in the kinds' order."""
    decode: int
    """The decode kind chosen (its index)."""
    decode_replicas: int
    status: str
    """OPTIMAL or FEASIBLE."""
    gap: float


def scale(capacity: list[list[float]], decode_capacity: list[float], rate: float, most: dict[str, int],
          prefill: list[Kind], decode: list[Kind]) -> int:
    """Units per request/s: the largest power of two, at most FINEST, at which every replica the
    bounds allow, at its largest capacity, sums within SUM_BITS bits, and no capacity passes
    COEFFICIENT_BITS."""
    largest = max([*decode_capacity, *(c for row in capacity for c in row)], default=1.0)
    top = rate + 1
    for i, k in enumerate(prefill):
        top += max((row[i] for row in capacity), default=0.0) * (most.get(k.gpu, 0) // k.gpus)
    for j, k in enumerate(decode):
        top += decode_capacity[j] * (most.get(k.gpu, 0) // k.gpus)
    coefficient = 2 ** max(0, math.floor(math.log2(2**COEFFICIENT_BITS / max(largest, 1e-300))))
    return int(max(1, min(FINEST, coefficient, 2 ** max(0, math.floor(math.log2(2**SUM_BITS / top))))))


def choose(prefill: list[Kind], decode: list[Kind], capacity: list[list[float]], decode_capacity: list[float],
           rate: float, most: dict[str, int], objective: str = "gpus",
           time_limit_s: float = TIME_LIMIT_S, hint: Pools | None = None) -> Pools | None:
    """The pools carrying `rate` requests/s within `most` GPUs of each type at the fewest GPUs
    (objective gpus) or the least cost: capacity[d][p] is what a replica of prefill kind p carries
    beside decode kind d, decode_capacity[d] what a replica of decode kind d carries. `hint`, pools
    known to carry the rate within `most` (the best pair of one prefill and one decode kind), is
    where the search starts, and the answer (FEASIBLE, gap 1) if the time limit passes before
    CP-SAT finds any. None when no pools within `most` carry it, or none was found in time."""
    from ortools.sat.python import cp_model

    units = scale(capacity, decode_capacity, rate, most, prefill, decode)
    need = math.ceil(rate * units)
    model = cp_model.CpModel()
    n = [model.new_int_var(0, most.get(k.gpu, 0) // k.gpus, f"n{i}") for i, k in enumerate(prefill)]
    m = [model.new_int_var(0, most.get(k.gpu, 0) // k.gpus, f"m{j}") for j, k in enumerate(decode)]
    u = [model.new_bool_var(f"u{j}") for j in range(len(decode))]
    model.add_exactly_one(u)
    for j, k in enumerate(decode):
        model.add(m[j] <= (most.get(k.gpu, 0) // k.gpus) * u[j])
        model.add(math.floor(decode_capacity[j] * units) * m[j] >= need * u[j])
        # Beside decode kind j, the prefill replicas carry the rate (when j is the one chosen).
        model.add(sum(math.floor(capacity[j][i] * units) * n[i] for i in range(len(prefill))) >= need).only_enforce_if(u[j])
    # Redundant for the integers, tightening the relaxation (the one-hot's enforced rows are weak
    # there): whichever decode kind is chosen, the decode replicas and the prefill replicas at their
    # best capacity beside any kind carry the rate.
    model.add(sum(math.floor(decode_capacity[j] * units) * m[j] for j in range(len(decode))) >= need)
    model.add(sum(math.floor(max(row[i] for row in capacity) * units) * n[i] for i in range(len(prefill))) >= need)
    for gpu, count in most.items():
        terms = ([k.gpus * n[i] for i, k in enumerate(prefill) if k.gpu == gpu]
                 + [k.gpus * m[j] for j, k in enumerate(decode) if k.gpu == gpu])
        if terms:
            model.add(sum(terms) <= count)
    gpus = sum(k.gpus * n[i] for i, k in enumerate(prefill)) + sum(k.gpus * m[j] for j, k in enumerate(decode))
    cost = sum(k.cost * n[i] for i, k in enumerate(prefill)) + sum(k.cost * m[j] for j, k in enumerate(decode))
    stages = [gpus, cost] if objective == "gpus" else [cost, gpus]
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    solver.parameters.max_time_in_seconds = time_limit_s
    status, gap = "OPTIMAL", 0.0
    found: Pools | None = None
    everything = n + m + u
    values: list[int] = []
    if hint is not None:
        values = list(hint.prefill) + [hint.decode_replicas if j == hint.decode else 0 for j in range(len(decode))] \
            + [int(j == hint.decode) for j in range(len(decode))]
    for depth, expr in enumerate(stages):
        model.minimize(expr)
        if values:
            model.clear_hints()  # type: ignore[no-untyped-call]
            for var, value in zip(everything, values):
                model.add_hint(var, value)
        result = solver.solve(model)
        if result not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            if found is None and hint is not None and result != cp_model.INFEASIBLE:
                return hint._replace(status="FEASIBLE", gap=1.0)  # out of time before any: the hint stands
            break  # infeasible (none), or a later stage out of time: the earlier stage's pools stand
        values = [solver.value(x) for x in everything]
        chosen = next(j for j in range(len(decode)) if solver.value(u[j]))
        if depth == 0 and result != cp_model.OPTIMAL:
            best, bound = solver.objective_value, solver.best_objective_bound
            status, gap = "FEASIBLE", abs(best - bound) / max(abs(best), 1e-9)
        found = Pools(tuple(solver.value(x) for x in n), chosen, solver.value(m[chosen]), status, gap)
        model.add(expr <= int(round(solver.objective_value)))
        if result != cp_model.OPTIMAL:
            break
    return found
