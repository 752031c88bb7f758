"""The layout program: choose tp, pp, dp and the recomputation level with OR-Tools CP-SAT.

One public function, `solve_layout`: a validated `LayoutProblem` of plain numbers in, a
`LayoutSolution` (layout, status, time) out. No I/O, no catalog, no formatting. OR-Tools is
imported inside it so that importing apsi (and `apsi --help`) stays fast.

Symbols: G = tp * pp * dp GPUs, q = pp * dp, one boolean recompute[r] per level r; S model-state
bytes, A_r activation bytes one GPU holds at TP 1, cap usable bytes per GPU, K_r GPU-seconds of
compute at level r, B batch sequences, b micro-batch sequences, T the target in seconds.

The rules, each linear once G and q are variables:

  memory  S / G + A_r / tp <= cap, times G:            S + A_r q <= cap G           (if recompute[r])
  time    K_r / G (1 + (pp - 1) / m) <= T with m = B / (dp b), times B G:
                                                 K_r (B + b (q - dp)) <= T B G      (if recompute[r])
  batch   dp b <= B (every replica gets a micro-batch); cap: G <= max_gpus
  shape   tp from the caller's list (divides the NVLink domain and the heads), pp from its list
          (divides the layers)

Fewest GPUs (a target is given). Variables tp, pp, dp with G = tp * q and q = pp * dp posted
through add_multiplication_equality. Stage 1 minimises G; stage 2 fixes G and minimises the
duration, then lighter recompute, smaller pp, smaller tp. The other formulation the design
allowed, one boolean per admissible (tp, pp) pair with a dp copy each so that G is linear, was
built and timed on the reference plans: CP-SAT spends about 0.5 ms per copy, so 64 pairs cost
about 25 ms per solve against about 5 ms with the two products (benchmarks/solver_formulations.py).

Fastest layout within max_gpus (no target, or none met). For fixed tp, pp and recompute a larger
dp is strictly faster (days ~ 1/dp + b (pp - 1) / B) and needs less memory (S / G shrinks), so
the fastest layout takes dp as large as the batch and the cap allow: dp = min(B / b, max_gpus /
(tp pp)). That dominance makes each (tp, pp, recompute) one row of a table constraint holding
its dp, G, q and exact duration; the memory rule stays a constraint. Stage 1 minimises the
duration; stage 2 fixes it and minimises G, then the same tie-break. (Minimising the ratio
W / G directly, by Dinkelbach steps over the product model, took 40-500 ms per plan.)

Integers: CP-SAT has no floats. `_Scale` turns each row into integers of at most 2^52 with
outward rounding (left sides up, right sides down), so every layout the program admits also passes
the float check in apsi.scale.evaluate; rounding can only exclude a layout within about 1e-9
(relative) of a limit. Durations used as objectives are exact rationals rounded once at a common
scale, so layouts whose real durations tie also tie in the program and the tie-break decides.
"""

from __future__ import annotations

import math
import time
from fractions import Fraction
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from apsi.model.arithmetic import RECOMPUTE_LEVELS

MAX_GPUS = 2**20
"""Largest GPU cap the integer scaling is sized for."""
_TERM_BITS = 52
"""Largest scaled term in a row: 2^52, so a row's few terms stay far below CP-SAT's 2^63."""
_DAYS_BITS = 40
"""Duration objectives are integers below 2^40 (relative resolution 1e-12 at the largest)."""


class LayoutProblem(BaseModel):
    """Plain numbers for one layout search; built by apsi.scale from the user's inputs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tp_choices: tuple[int, ...] = Field(min_length=1)
    pp_choices: tuple[int, ...] = Field(min_length=1)
    recompute_choices: tuple[str, ...] = Field(min_length=1)
    dp_min: int = Field(default=1, ge=1)
    dp_max: int = Field(ge=1)
    max_gpus: int = Field(ge=1, le=MAX_GPUS)
    state_bytes: int = Field(ge=0)
    """S: weights + gradients + optimizer states of the whole model, bytes."""
    activation_bytes: dict[str, int]
    """A_r: activation bytes one GPU holds at TP 1, per recompute level."""
    usable_bytes: float = Field(gt=0)
    """cap: bytes a GPU may fill."""
    gpu_seconds: dict[str, float]
    """K_r: training FLOPs at level r over (peak x MFU): seconds on one GPU without bubbles."""
    batch_sequences: int = Field(ge=1)
    micro_batch: int = Field(ge=1)
    target_seconds: float | None = Field(default=None, gt=0)
    """None: the fastest layout within max_gpus."""
    time_limit_seconds: float = Field(default=10.0, gt=0)
    tie_break: bool = True
    """False: stop at the optimal count (or duration) without ordering ties; for what-if solves."""


class LayoutSolution(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    status: Literal["OPTIMAL", "FEASIBLE", "INFEASIBLE", "UNKNOWN", "MODEL_INVALID"]
    """OPTIMAL only when every solve proved its optimum; FEASIBLE when a time limit cut one short."""
    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    recompute: str | None = None
    seconds: float
    solves: int


class _Scale:
    """Integers for one row `lhs <= rhs` whose largest term is `largest`: at most 2^52 each."""

    def __init__(self, largest: float):
        self.unit = max(largest, 1.0) / 2**_TERM_BITS

    def up(self, value: float) -> int:
        return math.ceil(value / self.unit)

    def down(self, value: float) -> int:
        return math.floor(value / self.unit)


class _Run:
    """Solves models one after another under one time budget; remembers whether all were proved."""

    def __init__(self, p: LayoutProblem):
        from ortools.sat.python import cp_model

        self.cp = cp_model
        self.p = p
        self.started = time.perf_counter()
        self.solves = 0
        self.proved = True

    def solve(self, model):
        solver = self.cp.CpSolver()
        # One worker and a fixed seed make the search, and so the answer, reproducible.
        solver.parameters.num_workers = 1
        solver.parameters.random_seed = 0
        # These models are tiny (a dozen variables); probing and the LP relaxation cost more than
        # they prune. Turning them off halved the reference plans' solve time
        # (benchmarks/solver_params.py) and leaves every answer unchanged (tests/test_crosscheck.py).
        solver.parameters.cp_model_probing_level = 0
        solver.parameters.linearization_level = 0
        left = self.p.time_limit_seconds - (time.perf_counter() - self.started)
        solver.parameters.max_time_in_seconds = max(0.01, left)
        status = solver.solve(model)
        self.solves += 1
        if status == self.cp.FEASIBLE:
            self.proved = False
        return solver, status in (self.cp.OPTIMAL, self.cp.FEASIBLE), status

    def failed(self, status) -> LayoutSolution:
        name = {self.cp.INFEASIBLE: "INFEASIBLE", self.cp.MODEL_INVALID: "MODEL_INVALID"}.get(status, "UNKNOWN")
        return LayoutSolution(status=name, seconds=time.perf_counter() - self.started, solves=self.solves)

    def found(self, tp: int, pp: int, dp: int, recompute: str) -> LayoutSolution:
        return LayoutSolution(status="OPTIMAL" if self.proved else "FEASIBLE", tp=tp, pp=pp, dp=dp,
                              recompute=recompute, seconds=time.perf_counter() - self.started,
                              solves=self.solves)


def solve_layout(problem: LayoutProblem) -> LayoutSolution:
    """The optimal layout for `problem` (the module docstring states the program)."""
    p = problem
    run = _Run(p)
    dp_max = min(p.dp_max, p.max_gpus)
    # A level whose activations alone overflow a GPU at the widest TP can never fit: leaving it
    # out is exact and keeps its huge terms out of the rows.
    levels = [r for r in RECOMPUTE_LEVELS if r in p.recompute_choices
              and p.activation_bytes[r] / max(p.tp_choices) < p.usable_bytes]
    if not levels or p.dp_min > dp_max or min(p.tp_choices) * min(p.pp_choices) * p.dp_min > p.max_gpus:
        return LayoutSolution(status="INFEASIBLE", seconds=time.perf_counter() - run.started, solves=0)
    if p.target_seconds is None:
        return _fastest(p, run, levels, dp_max)
    return _fewest_gpus(p, run, levels, dp_max)


def _memory_row(model, p: LayoutProblem, r: str, q, gpus, q_top: int, g_top: int, chosen) -> None:
    # Memory: model states sharded over all G GPUs plus activations split by TP fit in the
    # usable bytes: S / G + A_r / tp <= cap, times G: S + A_r q <= cap G.
    a = p.activation_bytes[r]
    s = _Scale(max(p.state_bytes, a * q_top, p.usable_bytes * g_top))
    model.add(s.up(p.state_bytes) + s.up(a) * q <= s.down(p.usable_bytes) * gpus).only_enforce_if(chosen)


def _fewest_gpus(p: LayoutProblem, run: _Run, levels: list[str], dp_max: int) -> LayoutSolution:
    cp = run.cp
    big_b, b = p.batch_sequences, p.micro_batch
    tp_max, pp_max = max(p.tp_choices), max(p.pp_choices)
    g_max = min(p.max_gpus, tp_max * pp_max * dp_max)
    # Stage 2 compares durations at a fixed G through work = K_r (B + b (q - dp)): the integer
    # n = B + b (q - dp) is exact, and K_r shares one integer scale sized so work < 2^40; layouts
    # at the same level whose real durations tie have equal work.
    n_top = big_b + b * (pp_max - 1) * dp_max
    k_top = max(p.gpu_seconds[r] for r in levels)
    k_int = {r: max(1, round(p.gpu_seconds[r] / k_top * (2**_DAYS_BITS // n_top))) for r in levels}

    def build(g_fixed: int | None = None):
        model = cp.CpModel()
        g_top = g_fixed or g_max
        q_top = max(1, min(g_top // min(p.tp_choices), pp_max * dp_max))
        tp = model.new_int_var_from_domain(cp.Domain.from_values(sorted(p.tp_choices)), "tp")
        pp = model.new_int_var_from_domain(cp.Domain.from_values(sorted(p.pp_choices)), "pp")
        dp = model.new_int_var(p.dp_min, dp_max, "dp")
        q = model.new_int_var(1, q_top, "q")
        gpus = model.new_int_var(1, g_top, "gpus")
        # G = tp * pp * dp, as q = pp * dp and G = tp * q.
        model.add_multiplication_equality(q, [pp, dp])
        model.add_multiplication_equality(gpus, [tp, q])
        if g_fixed is not None:
            model.add(gpus == g_fixed)
        recompute = {r: model.new_bool_var(f"recompute[{r}]") for r in levels}
        model.add_exactly_one(recompute.values())
        work = model.new_int_var(0, 2**_DAYS_BITS, "work")
        for r, chosen in recompute.items():
            # A level is usable only with a TP wide enough for its activations (A_r / tp < cap).
            narrow = [t for t in p.tp_choices if p.activation_bytes[r] / t >= p.usable_bytes]
            if narrow:
                model.add_forbidden_assignments([tp], [(t,) for t in narrow]).only_enforce_if(chosen)
            _memory_row(model, p, r, q, gpus, q_top, g_top, chosen)
            # Time: the 1F1B duration meets the target: K_r (B + b (q - dp)) <= T B G.
            k = p.gpu_seconds[r]
            s = _Scale(max(k * big_b, k * b * q_top, p.target_seconds * big_b * g_top))
            model.add(s.up(k * big_b) + s.up(k * b) * q - s.down(k * b) * dp
                      <= s.down(p.target_seconds * big_b) * gpus).only_enforce_if(chosen)
            # work = K_r (B + b (q - dp)): days x G x B, the stage-2 objective at fixed G.
            model.add(work == k_int[r] * (big_b + b * q - b * dp)).only_enforce_if(chosen)
        rank = sum(i * recompute[r] for i, r in enumerate(levels))
        tie = (rank * (pp_max + 1) + pp) * (tp_max + 1) + tp
        return model, dict(tp=tp, pp=pp, dp=dp, gpus=gpus, work=work, recompute=recompute, tie=tie,
                           tie_span=len(levels) * (pp_max + 1) * (tp_max + 1))

    def read(solver, v) -> LayoutSolution:
        r = next(r for r, x in v["recompute"].items() if solver.boolean_value(x))
        return run.found(int(solver.value(v["tp"])), int(solver.value(v["pp"])), int(solver.value(v["dp"])), r)

    # Stage 1: the fewest GPUs meeting the target.
    model, v = build()
    model.minimize(v["gpus"])
    solver, ok, status = run.solve(model)
    if not ok:
        return run.failed(status)
    first = read(solver, v)
    if not p.tie_break:
        return first
    # Stage 2: at that count, the shortest duration, then the tie-break.
    model, v = build(g_fixed=int(solver.value(v["gpus"])))
    model.minimize(v["work"] * v["tie_span"] + v["tie"])
    solver, ok, status = run.solve(model)
    return read(solver, v) if ok else first


def _fastest(p: LayoutProblem, run: _Run, levels: list[str], dp_max: int) -> LayoutSolution:
    cp = run.cp
    big_b, b = p.batch_sequences, p.micro_batch
    tp_max, pp_max = max(p.tp_choices), max(p.pp_choices)
    # One row per (tp, pp, recompute): dp at its dominant value, G, q and the exact duration
    # K_r (B + b (pp - 1) dp) / (B G) in seconds, as a Fraction so that real ties stay ties.
    rows = []
    for r in levels:
        k = Fraction(p.gpu_seconds[r])
        for pp in sorted(p.pp_choices):
            for tp in sorted(p.tp_choices):
                dp = min(dp_max, p.max_gpus // (tp * pp))
                if dp < p.dp_min or p.activation_bytes[r] / tp >= p.usable_bytes:
                    continue
                g = tp * pp * dp
                rows.append((tp, pp, dp, g, pp * dp, levels.index(r),
                             k * Fraction(big_b + b * (pp - 1) * dp, big_b * g)))
    if not rows:
        return run.failed(cp.INFEASIBLE)
    # Rank the rows by the objective: duration, then GPUs, then lighter recompute, smaller pp,
    # smaller tp. The best layout is the best-ranked row that passes the memory rule.
    rows.sort(key=lambda row: (row[6], row[3], row[5], row[1], row[0]))
    g_top = max(row[3] for row in rows)
    q_top = max(row[4] for row in rows)
    model = cp.CpModel()
    rank = model.new_int_var(0, len(rows) - 1, "rank")
    # Each column of the chosen row, read through an element constraint.
    gpus = model.new_int_var(1, g_top, "gpus")
    q = model.new_int_var(1, q_top, "q")
    level = model.new_int_var(0, len(levels) - 1, "recompute_level")
    model.add_element(rank, [row[3] for row in rows], gpus)
    model.add_element(rank, [row[4] for row in rows], q)
    model.add_element(rank, [row[5] for row in rows], level)
    for i, r in enumerate(levels):
        chosen = model.new_bool_var(f"recompute[{r}]")
        model.add(level == i).only_enforce_if(chosen)
        model.add(level != i).only_enforce_if(~chosen)
        _memory_row(model, p, r, q, gpus, q_top, g_top, chosen)
    model.minimize(rank)
    solver, ok, status = run.solve(model)
    if not ok:
        return run.failed(status)
    tp, pp, dp, _, _, i, _ = rows[int(solver.value(rank))]
    return run.found(tp, pp, dp, levels[i])
