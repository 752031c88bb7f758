"""The layout program: choose tp, pp, dp and the recomputation level with OR-Tools CP-SAT.

One public function, `solve_layout`: a validated `LayoutProblem` of plain numbers in, a
`LayoutSolution` (layout, status, time) out. No I/O, no catalog, no formatting. OR-Tools is
imported inside it so that importing apsi (and `apsi --help`) stays fast.

Variables: one boolean `use[i]` per admissible triple i = (tp, pp, recompute) and a copy
`dp[i]` of the data-parallel degree (0 unless use[i]). Exactly one triple is used. Because tp and
pp are constants inside a triple, G = sum tp*pp*dp[i] and q = pp*dp are linear, and so is every
rule (with S model-state bytes, A_r activation bytes at TP 1, cap usable bytes per GPU, K_r the
GPU-seconds of compute at level r, B batch sequences, b micro-batch sequences, T the target):

  memory  S / G + A_r / tp <= cap, times G:             S + A_r pp dp <= cap tp pp dp
  time    K_r / G (1 + (pp - 1) / m) <= T, m = B / (dp b), times B G:
                                                  K_r (B + b (pp - 1) dp) <= T B tp pp dp
  batch   dp b <= B; cap: G <= max_gpus; tp and pp from the caller's lists (NVLink domain, heads,
          layers)

Why triples rather than add_multiplication_equality (G = tp * q, q = pp * dp): both were built
and timed (benchmarks/solver_formulations.py). With products CP-SAT must branch through the
product domains; a fastest-layout search on GB200 (12 TP choices) took about 0.5 s and the
reference plan 10 ms. With triples the LP relaxation is exact per triple and presolve turns each
rule into a bound on dp[i]: the same searches take a few milliseconds.

Objectives. With a target: (1) fewest GPUs; (2) at that count, fewest days, then lighter
recompute, smaller pp, smaller tp. Without one, the fastest layout within max_gpus: days are
W / G with W = K_r (B + b (pp - 1) dp), a ratio, minimised by Dinkelbach's method (each step
minimises the linear W * G_k - W_k * G until no layout beats W_k / G_k); then the fewest GPUs at
that speed and the same tie-break.

Integers: CP-SAT has no floats. `_Scale` turns each row into integers of at most 2^52 with
outward rounding (left sides up, right sides down), so a layout the program admits also passes
the float check in apsi.scale.evaluate; rounding can exclude only layouts within about 1e-9
(relative) of a limit. W is K_r (an integer at `_K_BITS` resolution) times an exact integer, so
layouts at the same recompute level tie exactly when their real durations tie.
"""

from __future__ import annotations

import math
import time
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from apsi.model.arithmetic import RECOMPUTE_LEVELS

MAX_GPUS = 2**20
"""Largest GPU cap the integer scaling is sized for (W * G must stay below 2^61)."""
_TERM_BITS = 52
"""Largest scaled term in a row: 2^52, so a row's few terms stay far below CP-SAT's 2^63."""
_WORK_BITS = 40
"""Largest duration numerator W: 2^40, so W * G (G <= 2^20) stays below 2^61 in objectives."""


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


def solve_layout(problem: LayoutProblem) -> LayoutSolution:
    """The optimal layout for `problem` (the module docstring states the program)."""
    from ortools.sat.python import cp_model

    started = time.perf_counter()
    p = problem
    big_b, b = p.batch_sequences, p.micro_batch
    dp_max = min(p.dp_max, p.max_gpus)
    # Admissible triples, lightest tie-break first. A level whose activations alone overflow a
    # GPU at this TP can never fit: leaving it out is exact and keeps huge terms out of the rows.
    triples = [(t, k, r) for r in RECOMPUTE_LEVELS if r in p.recompute_choices
               for k in sorted(p.pp_choices) for t in sorted(p.tp_choices)
               if t * k * p.dp_min <= p.max_gpus and p.dp_min <= dp_max
               and p.activation_bytes[r] / t < p.usable_bytes]
    if not triples:
        return LayoutSolution(status="INFEASIBLE", seconds=time.perf_counter() - started, solves=0)
    levels = [r for r in RECOMPUTE_LEVELS if any(r == x for _, _, x in triples)]
    tp_values = sorted({t for t, _, _ in triples})
    tp_min, tp_max = tp_values[0], tp_values[-1]
    pp_max = max(k for _, k, _ in triples)
    g_max = min(p.max_gpus, max(t * k * dp_max for t, k, _ in triples))
    # K_r as integers sharing one unit, so that W fits in _WORK_BITS.
    n_max = big_b + b * max(k for _, k, _ in triples) * dp_max
    k_bits = max(8, _WORK_BITS - n_max.bit_length())
    k_top = max(p.gpu_seconds[r] for _, _, r in triples)
    k_int = {r: max(1, round(p.gpu_seconds[r] / k_top * 2**k_bits)) for r in p.gpu_seconds}

    def build(g_fixed: int | None = None):
        model = cp_model.CpModel()
        g_top = g_fixed or g_max
        tp = model.new_int_var_from_domain(cp_model.Domain.from_values(sorted({t for t, _, _ in triples})), "tp")
        pp = model.new_int_var_from_domain(cp_model.Domain.from_values(sorted({k for _, k, _ in triples})), "pp")
        dp = model.new_int_var(p.dp_min, dp_max, "dp")
        q_top = max(1, min(g_top // tp_min, pp_max * dp_max))
        q = model.new_int_var(1, q_top, "q")
        gpus = model.new_int_var(1, g_top, "gpus")
        # G = tp * q and q = pp * dp: two products CP-SAT reasons about natively.
        model.add_multiplication_equality(q, [pp, dp])
        model.add_multiplication_equality(gpus, [tp, q])
        if g_fixed is not None:
            model.add(gpus == g_fixed)
        if p.target_seconds is None:
            # Dominance, fastest mode only: for fixed tp, pp and recompute, a larger dp is strictly
            # faster (days ~ 1/dp + b (pp - 1) / B) and needs less memory (S / G shrinks), so the
            # fastest layout takes dp as large as the batch and the GPU cap allow:
            # dp = dp_max, or one more replica would pass the cap (G + tp pp > max_gpus).
            stage = model.new_int_var(1, tp_max * pp_max, "tp_pp")
            model.add_multiplication_equality(stage, [tp, pp])
            full_batch = model.new_bool_var("dp_at_batch_limit")
            model.add(dp == dp_max).only_enforce_if(full_batch)
            model.add(gpus + stage >= g_top + 1).only_enforce_if(~full_batch)
        recompute = {r: model.new_bool_var(f"recompute[{r}]") for r in levels}
        model.add_exactly_one(recompute.values())
        for r, chosen in recompute.items():
            # A level is usable only with a TP wide enough for its activations (exact: A_r / tp < cap).
            narrow = [t for t in tp_values if p.activation_bytes[r] / t >= p.usable_bytes]
            if narrow:
                model.add_forbidden_assignments([tp], [(t,) for t in narrow]).only_enforce_if(chosen)
            # Memory: model states sharded over all G GPUs plus activations split by TP fit in the
            # usable bytes: S / G + A_r / tp <= cap, times G: S + A_r q <= cap G.
            a = p.activation_bytes[r]
            s = _Scale(max(p.state_bytes, a * q_top, p.usable_bytes * g_top))
            model.add(s.up(p.state_bytes) + s.up(a) * q <= s.down(p.usable_bytes) * gpus).only_enforce_if(chosen)
            if p.target_seconds is not None:
                # Time: the 1F1B duration meets the target: K_r (B + b (q - dp)) <= T B G.
                kr = p.gpu_seconds[r]
                s = _Scale(max(kr * big_b, kr * b * q_top, p.target_seconds * big_b * g_top))
                model.add(s.up(kr * big_b) + s.up(kr * b) * q - s.down(kr * b) * dp
                          <= s.down(p.target_seconds * big_b) * gpus).only_enforce_if(chosen)
        # W, the duration numerator: days = W / (B G) in units of K's scale; exact per level.
        work = model.new_int_var(0, 2**_WORK_BITS, "work")
        for r, chosen in recompute.items():
            model.add(work == k_int[r] * (big_b + b * q - b * dp)).only_enforce_if(chosen)
        # Tie-break after the objective: lighter recompute, then smaller pp, then smaller tp.
        rank = sum(i * recompute[r] for i, r in enumerate(levels))
        tie = (rank * (pp_max + 1) + pp) * (tp_max + 1) + tp
        tie_span = len(levels) * (pp_max + 1) * (tp_max + 1)
        return model, dict(tp=tp, pp=pp, dp=dp, gpus=gpus, work=work, recompute=recompute, tie=tie,
                           tie_span=tie_span)

    solves = 0
    proved = True

    def run(model):
        nonlocal solves, proved
        solver = cp_model.CpSolver()
        # One worker and a fixed seed make the search, and so the answer, reproducible.
        solver.parameters.num_workers = 1
        solver.parameters.random_seed = 0
        solver.parameters.max_time_in_seconds = max(0.01, p.time_limit_seconds - (time.perf_counter() - started))
        status = solver.solve(model)
        solves += 1
        if status == cp_model.FEASIBLE:
            proved = False
        return solver, status

    def done(status_name: str, solver=None, v=None) -> LayoutSolution:
        elapsed = time.perf_counter() - started
        if solver is None:
            return LayoutSolution(status=status_name, seconds=elapsed, solves=solves)
        r = next(r for r, x in v["recompute"].items() if solver.boolean_value(x))
        return LayoutSolution(status="OPTIMAL" if proved else "FEASIBLE", tp=int(solver.value(v["tp"])),
                              pp=int(solver.value(v["pp"])), dp=int(solver.value(v["dp"])), recompute=r,
                              seconds=elapsed, solves=solves)

    def failed(status) -> str:
        return {cp_model.INFEASIBLE: "INFEASIBLE", cp_model.MODEL_INVALID: "MODEL_INVALID"}.get(status, "UNKNOWN")

    ok = (cp_model.OPTIMAL, cp_model.FEASIBLE)
    model, v = build()
    if p.target_seconds is not None:
        # Stage 1: the fewest GPUs meeting the target.
        model.minimize(v["gpus"])
        solver, status = run(model)
        if status not in ok:
            return done(failed(status))
        first = (solver, v)
        if not p.tie_break:
            return done("", *first)
        # Stage 2: at that count, the fastest layout, then the tie-break order of `triples`.
        model, v2 = build(g_fixed=solver.value(v["gpus"]))
        model.minimize(v2["work"] * v2["tie_span"] + v2["tie"])
        solver, status = run(model)
        return done("", solver, v2) if status in ok else done("", *first)

    # Fastest within max_gpus: from the widest layout that fits, Dinkelbach steps on W / G.
    model.maximize(v["gpus"])
    solver, status = run(model)
    if status not in ok:
        return done(failed(status))
    w_k, g_k = solver.value(v["work"]), solver.value(v["gpus"])
    while True:
        model, v = build()
        model.minimize(v["work"] * g_k - v["gpus"] * w_k)
        solver, status = run(model)
        if status not in ok:
            return done(failed(status))
        w, g = solver.value(v["work"]), solver.value(v["gpus"])
        if w * g_k - g * w_k >= 0:
            break
        w_k, g_k = w, g
    if not p.tie_break:
        return done("", solver, v)
    # Among layouts exactly as fast as W_k / G_k: the fewest GPUs, then the tie-break.
    model, v = build()
    model.add(v["work"] * g_k - v["gpus"] * w_k <= 0)
    model.minimize(v["gpus"] * v["tie_span"] + v["tie"])
    solver, status = run(model)
    return done("", solver, v) if status in ok else done(failed(status))
