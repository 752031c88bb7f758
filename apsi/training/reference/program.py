"""The layout program: choose the GPU type, tp, pp, dp and the recomputation level with CP-SAT.

One public function, `solve_layout`: a validated `LayoutProblem` of plain numbers in, a
`LayoutSolution` (GPU type, layout, status, time) out (both apsi.training.reference.problem, re-exported here). No I/O, no catalog, no formatting.
OR-Tools is imported inside it so that importing apsi (and `apsi --help`) stays fast.

Symbols: G = tp * pp * dp GPUs, q = pp * dp; one boolean use[g, r] per GPU type g and recompute
level r (exactly one is true); S model-state bytes, A_r activation bytes one GPU holds at TP 1,
cap_g usable bytes per GPU of type g, K_gr GPU-seconds of compute on type g at level r, B batch
sequences, b micro-batch sequences, T the target in seconds.

The rules, each linear once G and q are variables (and enforced by use[g, r]):

  memory  S / G + A_r / tp <= cap_g, times G:        S + A_r q <= cap_g G
  time    K_gr / G (1 + (pp - 1) / m) <= T, m = B / (dp b), times B G:
                                                 K_gr (B + b (q - dp)) <= T B G
  batch   dp b <= B (every replica gets a micro-batch); cap: G <= max_gpus
  shape   tp from type g's list (divides its NVLink domain and the heads); pp from the list
          (divides the layers)

Objectives. The duration is W / (B G) with W = K_gr (B + b (q - dp)), so G x days, and with it
GPU-hours, cost (x $/GPU-hour) and energy (x watts), is linear in q and dp:

  gpus    fewest GPUs meeting the target; then (at that G) shortest, then the tie-break
  cost    least G x days x price meeting the target; then fewest GPUs, then the tie-break
  energy  least G x days x watts meeting the target; then fewest GPUs, then the tie-break
  days    fastest within max_gpus; then fewest GPUs, then the tie-break
The tie-break is: GPU type in the caller's order, lighter recompute, smaller pp, smaller tp.
The first three use the product model below; when no layout meets the target, the caller asks
for `days`, which has its own model.

Product model. Variables tp, pp, dp with G = tp * q and q = pp * dp through
add_multiplication_equality. The other formulation the design allowed, one boolean per admissible
(tp, pp) pair with a dp copy each so that G is linear, was built and timed on the reference plans
(benchmarks/solver_formulations.py, docs/benchmarks.md (e)): it took 2 to 5 times longer per
stage-1 solve on the plans that have a solution, so the products are kept.

Days model. For fixed type, tp, pp and recompute a larger dp is strictly faster (days ~ 1/dp +
b (pp - 1) / B) and needs less memory (S / G shrinks), so the fastest layout takes dp as large
as the batch and the cap allow: dp = min(B / b, max_gpus / (tp pp)). That dominance makes each
(type, tp, pp, recompute) one row with its dp, G, q and exact duration; the rows are ranked by
(duration, G, tie-break) and the program picks the best-ranked row that passes the memory rule,
read through element constraints. (Minimising the ratio W / G directly, by Dinkelbach steps over
the product model, took 40-500 ms per plan.)

Integers: CP-SAT has no floats. `_Scale` turns each rule into integers of at most 2^52 with
outward rounding (left sides up, right sides down), so every layout the program admits also
passes the float check in apsi.api.plan.evaluate; rounding can only exclude a layout within about
1e-9 (relative) of a limit. Objectives are exact: W = (K_gr at one integer scale) x (B + b (q -
dp)), an exact integer, and durations in the days model are Fractions; layouts whose real
objectives tie at the same type and level tie in the program, and the tie-break decides.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import TYPE_CHECKING, Literal, NamedTuple

from apsi.inputs.question import MAX_BATCH_SEQUENCES
from apsi.training.reference.problem import (MAX_GPUS, Hardware, LayoutProblem, LayoutSolution, Objective,
                                 SolvedLayout, Status)
from apsi.model.arithmetic import RECOMPUTE_LEVELS

if TYPE_CHECKING:  # OR-Tools is imported for real only inside a solve (tests/test_lazy_import.py).
    from ortools.sat.python import cp_model

_TERM_BITS = 52
"""Largest scaled term in a rule: 2^52, so a rule's few terms stay far below CP-SAT's 2^63."""
_OBJECTIVE_BITS = 40
"""Objective terms stay below 2^40, so objective x tie-break span stays below 2^62."""

__all__ = ["solve_layout", "Hardware", "LayoutProblem", "LayoutSolution", "SolvedLayout", "MAX_GPUS",
           "MAX_BATCH_SEQUENCES", "Objective", "Status"]


class _Scale:
    """Integers for one rule `lhs <= rhs` whose largest term is `largest`: at most 2^52 each."""

    def __init__(self, largest: float) -> None:
        self.unit: float = max(largest, 1.0) / 2**_TERM_BITS

    def up(self, value: float) -> int:
        return math.ceil(value / self.unit)

    def down(self, value: float) -> int:
        return math.floor(value / self.unit)


@functools.cache
def _alias_free_model() -> type[cp_model.CpModel]:
    """OR-Tools' CpModel without the camelCase aliases it attaches to every new model (OR-Tools
    9.x spends about 3 ms per model on them; apsi uses only the snake_case API)."""
    from ortools.sat.python import cp_model

    class _ApsiModel(cp_model.CpModel):
        def _add_pre_pep8_methods(self) -> None:
            pass

    return _ApsiModel


class _Run:
    """Solves models one after another under one time budget; remembers whether all were proved."""

    def __init__(self, p: LayoutProblem) -> None:
        from ortools.sat.python import cp_model

        self.cp = cp_model
        self.new_model = _alias_free_model()
        self.p = p
        self.solves = 0
        self.proved = True
        self.work = 0.0

    def solve(self, model: cp_model.CpModel) -> tuple[cp_model.CpSolver, bool, cp_model.CpSolverStatus]:
        solver = self.cp.CpSolver()
        # One worker and a fixed seed make the search, and so the answer, reproducible.
        solver.parameters.num_workers = 1
        solver.parameters.random_seed = 0
        # These models are tiny (a dozen variables): probing, the LP relaxation and presolve cost
        # more than they save. Over the reference plans, whole plan() calls are 1.6x faster than
        # with probing and linearization at their defaults and 2.0x faster than with presolve on
        # (docs/benchmarks.md (e)); every answer is the same (tests/test_crosscheck.py compares
        # with an exhaustive enumeration).
        solver.parameters.cp_model_probing_level = 0
        solver.parameters.linearization_level = 0
        solver.parameters.cp_model_presolve = False
        # CP-SAT 9.15 wrongly proves infeasible some models with enforced equalities of large
        # coefficients (exactly_one(a, b), work == 2^31 q if a, work == 2^30 q if b); this
        # detection step is what goes wrong. The models here avoid the pattern too.
        solver.parameters.auto_detect_greater_than_at_least_one_of = False
        # The budget is CP-SAT's deterministic time, so a search cut short stops at the same point
        # on every run and machine; the wall-clock limit is only a backstop, well above it.
        solver.parameters.max_deterministic_time = max(1e-3, self.p.time_limit_seconds - self.work)
        solver.parameters.max_time_in_seconds = 6 * self.p.time_limit_seconds
        status = solver.solve(model)
        self.solves += 1
        self.work += solver.response_proto.deterministic_time
        if status == self.cp.FEASIBLE:
            self.proved = False
        return solver, status in (self.cp.OPTIMAL, self.cp.FEASIBLE), status

    def failed(self, status: cp_model.CpSolverStatus) -> LayoutSolution:
        names: dict[cp_model.CpSolverStatus, Status] = {self.cp.INFEASIBLE: "INFEASIBLE",
                                                          self.cp.MODEL_INVALID: "MODEL_INVALID"}
        return LayoutSolution(status=names.get(status, "UNKNOWN"), seconds=self.work, solves=self.solves)

    def found(self, gpu: str, tp: int, pp: int, dp: int, recompute: str) -> LayoutSolution:
        return LayoutSolution(status="OPTIMAL" if self.proved else "FEASIBLE", gpu=gpu, tp=tp, pp=pp,
                              dp=dp, recompute=recompute, seconds=self.work, solves=self.solves)


_Pair = tuple[Hardware, str]  # a (GPU type, recompute level) the program may choose
_Term = Literal["gpus", "work"]  # the product model's objective terms: G, and W scaled


class _Vars(NamedTuple):
    """The product model's variables (use[g, r] keyed by type name and level) and its tie-break."""

    tp: cp_model.IntVar
    pp: cp_model.IntVar
    dp: cp_model.IntVar
    gpus: cp_model.IntVar
    work: cp_model.IntVar
    use: dict[tuple[str, str], cp_model.IntVar]
    tie: cp_model.LinearExpr

    def term(self, name: _Term) -> cp_model.IntVar:
        return self.gpus if name == "gpus" else self.work


def solve_layout(problem: LayoutProblem) -> LayoutSolution:
    """The optimal layout for `problem` (the module docstring states the program)."""
    p = problem
    run = _Run(p)
    dp_max = min(p.dp_max, p.max_gpus)
    # The admissible (type, level) pairs. A level whose activations alone overflow a GPU of this
    # type at its widest TP can never fit: leaving it out is exact and keeps huge terms out.
    pairs = [(g, r) for g in p.hardware for r in RECOMPUTE_LEVELS if r in p.recompute_choices
             and p.activation_bytes[r] / max(g.tp_choices) < g.usable_bytes
             and _weight(p, g, r) is not None]
    smallest = min(min(g.tp_choices) for g in p.hardware) * min(p.pp_choices) * p.dp_min
    if not pairs or p.dp_min > dp_max or smallest > p.max_gpus:
        return LayoutSolution(status="INFEASIBLE", seconds=0.0, solves=0)
    if p.objective == "days":
        return _fastest(p, run, pairs, dp_max)
    return _product_by_weight(p, run, pairs, dp_max)


PRECISE_RANGE = 2**12
"""The widest ratio of objective weights (cost or energy per GPU-second) solved in one program:
the weights share one integer scale set by the largest, so pairs much cheaper than it would lose
their precision (a $10,000,000/h type beside $1/h and $2/h ones rounds the two cheap ones to one
integer)."""


def _product_by_weight(p: LayoutProblem, run: _Run, pairs: list[_Pair], dp_max: int) -> LayoutSolution:
    """_product over the (type, level) pairs in bands of weights within PRECISE_RANGE of each
    other, cheapest band first: a band's optimum W = w (B + b (q - dp)) is the optimum of all when
    every dearer pair's least possible W, w B, is above it; else the dearer bands are solved too
    and the best answer is FEASIBLE (each band proved, their comparison in floats)."""
    if p.objective not in ("cost", "energy"):
        return _product(p, run, pairs, dp_max)
    weight = {(g.name, r): _known_weight(p, g, r) for g, r in pairs}
    least = min(weight.values())
    band = [x for x in pairs if weight[x[0].name, x[1]] <= least * PRECISE_RANGE]  # in the pairs' own order
    rest = [x for x in pairs if weight[x[0].name, x[1]] > least * PRECISE_RANGE]
    found = _product(p, run, band, dp_max)
    if not rest:
        return found
    mine = found.layout
    if found.status in ("OPTIMAL", "FEASIBLE") and mine is not None:
        cost = weight[mine.gpu, mine.recompute] * (p.batch_sequences + p.micro_batch * (mine.pp - 1) * mine.dp)
        if min(weight[x[0].name, x[1]] for x in rest) * p.batch_sequences > cost * (1 + 1e-9):
            return found
        other = _product_by_weight(p, run, rest, dp_max)
        theirs = other.layout
        if theirs is None:
            return found.model_copy(update={"status": "FEASIBLE"})
        cost_other = weight[theirs.gpu, theirs.recompute] * (p.batch_sequences
                                                             + p.micro_batch * (theirs.pp - 1) * theirs.dp)
        best = found if cost <= cost_other else other
        return best.model_copy(update={"status": "FEASIBLE"})
    return _product_by_weight(p, run, rest, dp_max)


def _weight(p: LayoutProblem, g: Hardware, r: str) -> float | None:
    """The objective's factor on W / B = G x seconds: 1 for gpus/days, $/GPU-s, or watts."""
    if p.objective == "cost":
        return None if g.price_per_gpu_second is None else g.price_per_gpu_second * g.gpu_seconds[r]
    if p.objective == "energy":
        return None if g.watts is None else g.watts * g.gpu_seconds[r]
    return g.gpu_seconds[r]


def _known_weight(p: LayoutProblem, g: Hardware, r: str) -> float:
    """_weight of an admissible pair: solve_layout admits only pairs whose weight is known."""
    weight = _weight(p, g, r)
    assert weight is not None, f"{g.name} at {r} recomputation has no {p.objective} weight"
    return weight


def _memory_rule(model: cp_model.CpModel, p: LayoutProblem, g: Hardware, r: str, q: cp_model.IntVar,
                 gpus: cp_model.IntVar, q_top: int, g_top: int, chosen: cp_model.IntVar) -> None:
    # Memory: model states sharded over all G GPUs plus activations split by TP fit in the
    # usable bytes: S / G + A_r / tp <= cap_g, times G: S + A_r q <= cap_g G.
    a = p.activation_bytes[r]
    s = _Scale(max(p.state_bytes, a * q_top, g.usable_bytes * g_top))
    model.add(s.up(p.state_bytes) + s.up(a) * q <= s.down(g.usable_bytes) * gpus).only_enforce_if(chosen)


def _product(p: LayoutProblem, run: _Run, pairs: list[_Pair], dp_max: int) -> LayoutSolution:
    cp = run.cp
    big_b, b = p.batch_sequences, p.micro_batch
    tp_all = sorted({t for g, _ in pairs for t in g.tp_choices})
    tp_max, pp_max = tp_all[-1], max(p.pp_choices)
    g_max = min(p.max_gpus, tp_max * pp_max * dp_max)
    # W / B scaled: weight_gr x n with n = B + b (q - dp) an exact integer and the weights at one
    # integer scale sized so the product stays below 2^40.
    # n <= B + b q with q = G / tp <= g_max / min tp; B is at most MAX_BATCH_SEQUENCES, so the
    # weights keep at least 40 - 25 = 15 bits (about 3e-5 between different pairs; exact within one).
    n_top = big_b + b * max(1, g_max // tp_all[0])
    w_top = max(_known_weight(p, g, r) for g, r in pairs)
    w_int = {(g.name, r): max(1, round(_known_weight(p, g, r) / w_top * (2**_OBJECTIVE_BITS // n_top)))
             for g, r in pairs}
    tie_span = len(pairs) * (pp_max + 1) * (tp_max + 1)

    def build(fixed: dict[_Term, int] | None = None) -> tuple[cp_model.CpModel, _Vars]:
        model = run.new_model()
        g_top = (fixed or {}).get("gpus") or g_max
        q_top = max(1, min(g_top // tp_all[0], pp_max * dp_max))
        tp = model.new_int_var_from_domain(cp.Domain.from_values(tp_all), "tp")
        pp = model.new_int_var_from_domain(cp.Domain.from_values(sorted(p.pp_choices)), "pp")
        dp = model.new_int_var(p.dp_min, dp_max, "dp")
        q = model.new_int_var(1, q_top, "q")
        gpus = model.new_int_var(1, g_top, "gpus")
        # G = tp * pp * dp, as q = pp * dp and G = tp * q.
        model.add_multiplication_equality(q, [pp, dp])
        model.add_multiplication_equality(gpus, [tp, q])
        use = {(g.name, r): model.new_bool_var(f"use[{g.name},{r}]") for g, r in pairs}
        model.add_exactly_one(use.values())
        # n = B + b (q - dp), exact; work = sum over pairs of weight_gr x (n if the pair is used).
        # The per-pair copies keep big coefficients out of enforced equalities, which CP-SAT
        # (9.15) wrongly proved infeasible in some models with several pairs (e.g. a pinned dp).
        n = model.new_int_var(big_b, n_top, "n")
        model.add(n == big_b + b * q - b * dp)
        work = model.new_int_var(0, 2**_OBJECTIVE_BITS, "work")
        shares = []
        for (g, r), chosen in zip(pairs, use.values()):
            share = model.new_int_var(0, n_top, f"n[{g.name},{r}]")
            model.add(share == n).only_enforce_if(chosen)
            model.add(share == 0).only_enforce_if(~chosen)
            shares.append(w_int[g.name, r] * share)
        model.add(work == sum(shares))
        for (g, r), chosen in zip(pairs, use.values()):
            # tp must be one of this type's choices (inside its NVLink domain, dividing the heads)
            # and wide enough for this level's activations (A_r / tp < cap_g).
            bad = [t for t in tp_all if t not in g.tp_choices or p.activation_bytes[r] / t >= g.usable_bytes]
            if bad:
                model.add_forbidden_assignments([tp], [(t,) for t in bad]).only_enforce_if(chosen)
            _memory_rule(model, p, g, r, q, gpus, q_top, g_top, chosen)
            if p.target_seconds is not None:
                # Time: the 1F1B duration meets the target: K_gr (B + b (q - dp)) <= T B G.
                k = g.gpu_seconds[r]
                s = _Scale(max(k * big_b, k * b * q_top, p.target_seconds * big_b * g_top))
                model.add(s.up(k * big_b) + s.up(k * b) * q - s.down(k * b) * dp
                          <= s.down(p.target_seconds * big_b) * gpus).only_enforce_if(chosen)
        if fixed:
            for name, value in fixed.items():
                model.add({"gpus": gpus, "work": work}[name] == value)
        pair_rank = sum(i * x for i, x in enumerate(use.values()))
        tie = (pair_rank * (pp_max + 1) + pp) * (tp_max + 1) + tp
        return model, _Vars(tp=tp, pp=pp, dp=dp, gpus=gpus, work=work, use=use, tie=tie)

    def read(solver: cp_model.CpSolver, v: _Vars) -> LayoutSolution:
        name, r = next(key for key, x in v.use.items() if solver.boolean_value(x))
        return run.found(name, int(solver.value(v.tp)), int(solver.value(v.pp)), int(solver.value(v.dp)), r)

    # Stage 1: the objective alone. A layout found by arithmetic bounds the objective from above
    # and is given as a hint, so CP-SAT only has to prove nothing beats it; without the bound a
    # proof over wide dp domains took seconds. If outward rounding makes the bound exclude
    # everything, the unbounded program decides.
    first_term: _Term = "gpus" if p.objective == "gpus" else "work"
    incumbent, possible = _incumbent(p, pairs, dp_max, w_int, big_b, b)
    if not possible:
        return run.failed(cp.INFEASIBLE)
    model, v = build()
    if incumbent is not None:
        model.add(v.term(first_term) <= incumbent[first_term])
        for var, name in ((v.tp, "tp"), (v.pp, "pp"), (v.dp, "dp")):
            model.add_hint(var, incumbent[name])
    model.minimize(v.term(first_term))
    solver, ok, status = run.solve(model)
    if not ok and incumbent is not None and status == cp.INFEASIBLE:
        model, v = build()
        model.minimize(v.term(first_term))
        solver, ok, status = run.solve(model)
    if not ok:
        return run.failed(status)
    first = read(solver, v)
    if not p.tie_break:
        return first
    # Stage 2: at that objective value, the secondary goal (shortest for gpus; fewest GPUs for
    # cost and energy), then the tie-break.
    second_term: _Term = "work" if p.objective == "gpus" else "gpus"
    model, v = build(fixed={first_term: int(solver.value(v.term(first_term)))})
    model.minimize(v.term(second_term) * tie_span + v.tie)
    solver, ok, status = run.solve(model)
    if ok:
        return read(solver, v)
    # The count is proved but the order among layouts of that count is not.
    return first.model_copy(update={"status": "FEASIBLE"})


def _incumbent(p: LayoutProblem, pairs: list[_Pair], dp_max: int, w_int: dict[tuple[str, str], int], big_b: int,
               b: int) -> tuple[dict[str, int] | None, bool]:
    """A good layout by arithmetic alone, to bound stage 1, and whether any layout can exist.

    Both rules get easier as dp grows (S / G and the bubble's share shrink), so for each (type,
    tp, pp, level) the smallest admissible dp is the larger of the two rules solved for dp:
    S / (tp pp (cap - A_r / tp)) and K B / (T B tp pp - K b (pp - 1)). If that exceeds the batch
    and cap limit for every row, no layout exists: that is a proof, and the program is not run.
    Otherwise the best row (by the objective) bounds stage 1 and is given as a hint; the program
    still proves the optimum. Returns (bound or None, possible)."""
    best: tuple[tuple[int, int], dict[str, int]] | None = None
    possible = False
    for g, r in pairs:
        a, k = p.activation_bytes[r], g.gpu_seconds[r]
        for tp in g.tp_choices:
            room = g.usable_bytes - a / tp
            if room <= 0:
                continue
            for pp in p.pp_choices:
                hi = min(dp_max, p.max_gpus // (tp * pp))
                need = p.state_bytes / (tp * pp * room)
                if p.target_seconds is not None:
                    slack = p.target_seconds * big_b * tp * pp - k * b * (pp - 1)
                    if slack <= 0:
                        continue
                    need = max(need, k * big_b / slack)
                # Rounding guards: a hair below the bound for the existence test, a hair above it
                # for the hint (the program re-checks the hint with its own integers).
                if max(p.dp_min, math.ceil(need * (1 - 1e-9))) > hi:
                    continue
                possible = True
                dp = max(p.dp_min, math.ceil(need * (1 + 1e-9)))
                if dp > hi:
                    continue
                gpus = tp * pp * dp
                work = w_int[g.name, r] * (big_b + b * (pp - 1) * dp)
                key = (gpus, work) if p.objective == "gpus" else (work, gpus)
                if best is None or key < best[0]:
                    best = (key, dict(gpus=gpus, work=work, tp=tp, pp=pp, dp=dp))
    return (None if best is None else best[1]), possible


def _fastest(p: LayoutProblem, run: _Run, pairs: list[_Pair], dp_max: int) -> LayoutSolution:
    cp = run.cp
    big_b, b = p.batch_sequences, p.micro_batch
    # One row per (type, tp, pp, recompute): dp at its dominant value, G, q, the pair's index and
    # the exact duration K_gr (B + b (pp - 1) dp) / (B G), a Fraction so real ties stay ties.
    rows: list[tuple[Fraction, int, int, int, int, int]] = []
    for index, (g, r) in enumerate(pairs):
        k = Fraction(g.gpu_seconds[r])
        for pp in sorted(p.pp_choices):
            for tp in sorted(g.tp_choices):
                dp = min(dp_max, p.max_gpus // (tp * pp))
                if dp < p.dp_min or p.activation_bytes[r] / tp >= g.usable_bytes:
                    continue
                row_gpus = tp * pp * dp
                rows.append((k * Fraction(big_b + b * (pp - 1) * dp, big_b * row_gpus), row_gpus, index, pp, tp, dp))
    if not rows:
        return run.failed(cp.INFEASIBLE)
    # Ranked by the objective: duration, then GPUs, then the tie-break (type, level, pp, tp).
    rows.sort()
    g_top = max(row[1] for row in rows)
    q_top = max(row[3] * row[5] for row in rows)
    model = run.new_model()
    rank = model.new_int_var(0, len(rows) - 1, "rank")
    gpus = model.new_int_var(1, g_top, "gpus")
    q = model.new_int_var(1, q_top, "q")
    pair = model.new_int_var(0, len(pairs) - 1, "pair")
    # The chosen row's columns, read through element constraints.
    model.add_element(rank, [row[1] for row in rows], gpus)
    model.add_element(rank, [row[3] * row[5] for row in rows], q)
    model.add_element(rank, [row[2] for row in rows], pair)
    for index, (g, r) in enumerate(pairs):
        chosen = model.new_bool_var(f"use[{g.name},{r}]")
        model.add(pair == index).only_enforce_if(chosen)
        model.add(pair != index).only_enforce_if(~chosen)
        _memory_rule(model, p, g, r, q, gpus, q_top, g_top, chosen)
    model.minimize(rank)
    solver, ok, status = run.solve(model)
    if not ok:
        return run.failed(status)
    _, _, index, pp, tp, dp = rows[int(solver.value(rank))]
    g, r = pairs[index]
    return run.found(g.name, tp, pp, dp, r)
