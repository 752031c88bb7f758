"""Benchmark: two CP-SAT formulations of the fewest-GPU problem, and two parameter sets.

Backs (or refutes) the measurements quoted in apsi/training/reference/program.py's docstring. For the reference
plans it takes the solver's numbers from apsi.training.reference.planning.problem() and builds, here, two models of
stage 1 (the fewest GPUs meeting memory, time and batch rules):

  product  tp, pp, dp integer variables with q = pp * dp and G = tp * q by
           add_multiplication_equality (the formulation apsi.training.reference.program uses)
  pairs    one boolean per admissible (tp, pp) pair with its own dp copy, so that
           dp = sum dp_i, q = sum pp_i dp_i and G = sum tp_i pp_i dp_i are linear sums

Both carry the same per-(GPU type, recompute level) rules, scaled to integers by
apsi.training.reference.program._Scale exactly as the solver does. Each is solved with CP-SAT's default parameters
and with the lighter ones apsi uses (cp_model_probing_level=0, linearization_level=0), one
worker and seed 0, --repeats times; the script checks that all four give the same GPU count
(and that it equals apsi.training.reference.program's own stage 1), and prints median build and solve times and
CP-SAT's deterministic time. Finally it times whole warm plan() calls with apsi's parameters,
with the two parameters reset to CP-SAT's defaults, and with presolve also off (a setting apsi
does not use, timed for the record), and checks the plans are identical.

    python benchmarks/solver_formulations.py [--repeats 20] [--plan-calls 20]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import header, median  # noqa: E402

from ortools.sat.python import cp_model  # noqa: E402

from apsi.training.reference import planning
from apsi.training.reference import program as apsi_solver  # noqa: E402
from apsi.inputs.question import resolve  # noqa: E402
from apsi.model.arithmetic import RECOMPUTE_LEVELS  # noqa: E402

CASES: tuple[tuple[str, str, dict], ...] = (
    ("21B dense", "21B", dict(tokens="420B")),
    ("70B dense", "70B", dict(tokens="1.4T")),
    ("1T MoE fp8 (reference plan)", "1T", dict(active="32B", tokens="15T", precision="fp8")),
    ("2T MoE B200 fp8", "2T", dict(active="64B", tokens="1.28T", gpu="B200", precision="fp8")),
    ("2T dense B200 fp8", "2T", dict(tokens="40T", gpu="B200", precision="fp8", batch="16M")),
    ("2T dense H100", "2T", dict(tokens="40T", batch="16M")),
    ("1T MoE fp8, gpu=any", "1T", dict(active="32B", tokens="15T", precision="fp8", gpu="any")),
)
PARAMS = {
    "lean": {"cp_model_probing_level": 0, "linearization_level": 0},
    "default": {},
}
Scale = apsi_solver._Scale


def admissible(p) -> list:
    """(GPU type, recompute level) pairs the solver admits for the fewest-GPU objective."""
    return [(g, r) for g in p.hardware for r in RECOMPUTE_LEVELS if r in p.recompute_choices
            and p.activation_bytes[r] / max(g.tp_choices) < g.usable_bytes]


def _rules(model, p, pairs, use, forbid, q, dp, gpus, q_top: int, g_top: int) -> None:
    """The per-(type, level) rules shared by both formulations; `forbid(bad, chosen)` rules out
    the tp values in `bad` when the literal `chosen` is true, in the formulation's own way."""
    tp_all = sorted({t for g, _ in pairs for t in g.tp_choices})
    big_b, b = p.batch_sequences, p.micro_batch
    for g, r in pairs:
        chosen = use[g.name, r]
        # tp must be one of this type's choices and wide enough for this level's activations.
        bad = [t for t in tp_all if t not in g.tp_choices or p.activation_bytes[r] / t >= g.usable_bytes]
        if bad:
            forbid(bad, chosen)
        # Memory: S + A_r q <= cap_g G.
        a = p.activation_bytes[r]
        s = Scale(max(p.state_bytes, a * q_top, g.usable_bytes * g_top))
        model.add(s.up(p.state_bytes) + s.up(a) * q <= s.down(g.usable_bytes) * gpus).only_enforce_if(chosen)
        if p.target_seconds is not None:
            # Time: K_gr (B + b (q - dp)) <= T B G.
            k = g.gpu_seconds[r]
            s = Scale(max(k * big_b, k * b * q_top, p.target_seconds * big_b * g_top))
            model.add(s.up(k * big_b) + s.up(k * b) * q - s.down(k * b) * dp
                      <= s.down(p.target_seconds * big_b) * gpus).only_enforce_if(chosen)


def product_model(p):
    pairs = admissible(p)
    tp_all = sorted({t for g, _ in pairs for t in g.tp_choices})
    dp_max = min(p.dp_max, p.max_gpus)
    pp_max = max(p.pp_choices)
    g_top = min(p.max_gpus, tp_all[-1] * pp_max * dp_max)
    q_top = max(1, min(g_top // tp_all[0], pp_max * dp_max))
    model = cp_model.CpModel()
    tp = model.new_int_var_from_domain(cp_model.Domain.from_values(tp_all), "tp")
    pp = model.new_int_var_from_domain(cp_model.Domain.from_values(sorted(p.pp_choices)), "pp")
    dp = model.new_int_var(p.dp_min, dp_max, "dp")
    q = model.new_int_var(1, q_top, "q")
    gpus = model.new_int_var(1, g_top, "gpus")
    model.add_multiplication_equality(q, [pp, dp])
    model.add_multiplication_equality(gpus, [tp, q])
    use = {(g.name, r): model.new_bool_var(f"use[{g.name},{r}]") for g, r in pairs}
    model.add_exactly_one(use.values())

    def forbid(bad, chosen):  # as apsi.training.reference.program does it
        model.add_forbidden_assignments([tp], [(t,) for t in bad]).only_enforce_if(chosen)

    _rules(model, p, pairs, use, forbid, q, dp, gpus, q_top, g_top)
    model.minimize(gpus)
    return model, gpus, 0


def pairs_model(p):
    pairs = admissible(p)
    tp_all = sorted({t for g, _ in pairs for t in g.tp_choices})
    dp_max = min(p.dp_max, p.max_gpus)
    pp_max = max(p.pp_choices)
    g_top = min(p.max_gpus, tp_all[-1] * pp_max * dp_max)
    q_top = max(1, min(g_top // tp_all[0], pp_max * dp_max))
    model = cp_model.CpModel()
    shapes = [(t, pp) for t in tp_all for pp in sorted(p.pp_choices) if t * pp * p.dp_min <= p.max_gpus]
    pick, copy = {}, {}
    for t, pp in shapes:
        # One boolean per (tp, pp) and its own dp: dp_i >= dp_min when picked, 0 otherwise.
        pick[t, pp] = model.new_bool_var(f"pick[{t},{pp}]")
        copy[t, pp] = model.new_int_var(0, min(dp_max, p.max_gpus // (t * pp)), f"dp[{t},{pp}]")
        model.add(copy[t, pp] >= p.dp_min).only_enforce_if(pick[t, pp])
        model.add(copy[t, pp] == 0).only_enforce_if(~pick[t, pp])
    model.add_exactly_one(pick.values())
    dp = model.new_int_var(p.dp_min, dp_max, "dp")
    q = model.new_int_var(1, q_top, "q")
    gpus = model.new_int_var(1, g_top, "gpus")
    model.add(dp == sum(copy.values()))
    model.add(q == sum(pp * copy[t, pp] for t, pp in shapes))
    model.add(gpus == sum(t * pp * copy[t, pp] for t, pp in shapes))
    use = {(g.name, r): model.new_bool_var(f"use[{g.name},{r}]") for g, r in pairs}
    model.add_exactly_one(use.values())

    def forbid(bad, chosen):  # a forbidden tp rules out every pair with that tp
        for shape in shapes:
            if shape[0] in bad:
                model.add_implication(chosen, ~pick[shape])

    _rules(model, p, pairs, use, forbid, q, dp, gpus, q_top, g_top)
    model.minimize(gpus)
    return model, gpus, len(shapes)


def solve(model, settings: dict):
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    solver.parameters.max_time_in_seconds = 60.0
    for name, value in settings.items():
        setattr(solver.parameters, name, value)
    started = time.perf_counter()
    status = solver.solve(model)
    return time.perf_counter() - started, solver, status


def measure(build, p, settings: dict, repeats: int) -> dict:
    """Median build and solve seconds, deterministic time, status and optimum over `repeats`."""
    builds, solves = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        model, gpus, shapes = build(p)
        builds.append(time.perf_counter() - started)
        seconds, solver, status = solve(model, settings)
        solves.append(seconds)
    ok = status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    return dict(build=median(builds), solve=median(solves), det=solver.response_proto.deterministic_time,
                status=solver.status_name(status), gpus=int(solver.value(gpus)) if ok else None,
                shapes=shapes, branches=solver.num_branches)


DEFAULTS = {"cp_model_probing_level": 2, "linearization_level": 1}
"""CP-SAT's own values of the two parameters apsi lowers (sat_parameters.proto)."""
PRESOLVE_ON = {"cp_model_presolve": True}
"""apsi turns CP-SAT's presolve off; this puts it back, to time what that choice saves."""


def plan_times(params: str, kw: dict, calls: int, settings: dict) -> tuple[float, float, bool]:
    """Median warm plan() seconds with apsi's CP-SAT parameters and with `settings` overriding
    them in every solve, calls alternating between the two so that load drifts hit both alike;
    and whether the two plans (less their solver reports) are identical."""
    import apsi

    original = cp_model.CpSolver.solve

    def overridden(self, model, *args, **kwargs):
        for name, value in settings.items():
            setattr(self.parameters, name, value)
        return original(self, model, *args, **kwargs)

    def timed(solve) -> tuple[float, dict]:
        cp_model.CpSolver.solve = solve
        try:
            started = time.perf_counter()
            result = apsi.plan(params, **kw)
            return time.perf_counter() - started, result.model_dump(exclude={"solver"})
        finally:
            cp_model.CpSolver.solve = original

    timed(original), timed(overridden)  # warm both
    ours, theirs, same = [], [], True
    for _ in range(calls):
        (a, plan_a), (b, plan_b) = timed(original), timed(overridden)
        ours.append(a)
        theirs.append(b)
        same &= plan_a == plan_b
    return median(ours), median(theirs), same


def compare_plans(calls: int, other: dict, label: str, what: str) -> None:
    """Print whole warm plan() times, apsi's parameters against `other`, alternating call by call."""
    print(f"\nWhole warm plan() (levers off), median of {calls} calls each, alternating: apsi's parameters "
          f"vs {what}\n")
    print(f"| case | lean ms | {label} ms | {label} / lean | same plan |")
    print("|---|---|---|---|---|")
    lean_all, other_all = [], []
    for name, params, kw in CASES:
        lean, slow, same = plan_times(params, kw, calls, other)
        lean_all.append(lean)
        other_all.append(slow)
        print(f"| {name} | {lean * 1e3:.1f} | {slow * 1e3:.1f} | {slow / lean:.2f}x | "
              f"{'yes' if same else 'NO'} |", flush=True)
    print(f"| all cases (sum of medians) | {sum(lean_all) * 1e3:.1f} | {sum(other_all) * 1e3:.1f} | "
          f"{sum(other_all) / sum(lean_all):.2f}x | |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20, help="solves of each model (default 20)")
    parser.add_argument("--plan-calls", type=int, default=20, help="warm plan() calls per case and parameter set")
    args = parser.parse_args()
    print(header())
    print(f"\nStage 1 (fewest GPUs), median of {args.repeats} builds and solves; 1 worker, seed 0; "
          "lean = cp_model_probing_level 0 and linearization_level 0 (apsi's), default = CP-SAT's.\n")
    print("| case | (tp, pp) pairs | GPUs: product / pairs / apsi stage 1 | product lean ms | pairs lean ms | "
          "pairs / product (lean) | product default ms | pairs default ms | default / lean (product) |")
    print("|---|---|---|---|---|---|---|---|---|")
    agree, detail = True, []
    for name, params, kw in CASES:
        s = resolve(params, **kw)
        p = planning.problem(s, objective="gpus", cap=s.max_gpus)
        runs = {(f, k): measure(build, p, PARAMS[k], args.repeats)
                for f, build in (("product", product_model), ("pairs", pairs_model)) for k in ("lean", "default")}
        first = apsi_solver.solve_layout(p.model_copy(update={"tie_break": False}))
        first_gpus = first.gpus if first.tp is not None else None
        agree &= len({r["gpus"] for r in runs.values()} | {first_gpus}) == 1
        pl, ql, pd, qd = (runs[k] for k in (("product", "lean"), ("pairs", "lean"),
                                             ("product", "default"), ("pairs", "default")))
        shown = " / ".join("none" if x is None else f"{x:,}" for x in (pl["gpus"], ql["gpus"], first_gpus))
        print(f"| {name} | {ql['shapes']} | {shown} ({pl['status']}) | {pl['solve'] * 1e3:.1f} | "
              f"{ql['solve'] * 1e3:.1f} | {ql['solve'] / pl['solve']:.1f}x | {pd['solve'] * 1e3:.1f} | "
              f"{qd['solve'] * 1e3:.1f} | {pd['solve'] / pl['solve']:.2f}x |", flush=True)
        detail.append((name, pl, ql, pd, qd))
    print(f"\nsame GPU count from every formulation, parameter set and apsi's stage 1: {'yes' if agree else 'NO'}")
    print("\nThe same solves in CP-SAT's deterministic time (machine-independent, x 1e-3) and branches, "
          "and median model build ms:\n")
    print("| case | det. product lean / pairs lean / product default / pairs default | "
          "branches (same order) | build ms product / pairs |")
    print("|---|---|---|---|")
    for name, *four in detail:
        det = " / ".join(f"{r['det'] * 1e3:.3f}" for r in four)
        branches = " / ".join(str(r["branches"]) for r in four)
        print(f"| {name} | {det} | {branches} | {four[0]['build'] * 1e3:.1f} / {four[1]['build'] * 1e3:.1f} |")

    compare_plans(args.plan_calls, DEFAULTS, "default",
                  "probing_level and linearization_level at CP-SAT's defaults (2 and 1)")
    compare_plans(args.plan_calls, PRESOLVE_ON, "presolve on",
                  "the same with CP-SAT's presolve on (apsi turns it off: cp_model_presolve=False)")
    if not agree:
        sys.exit(1)


if __name__ == "__main__":
    main()
