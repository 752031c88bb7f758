"""Benchmark: warm plan() latency, and where the time goes.

Times `apsi.plan(...)` in one warm process (imports done, catalog loaded, one call thrown away)
for the reference plan and each row of the reference table, as given (levers off, the API's
default), with levers=True, and with gpu="any". Prints per case the median and p90 over --calls
calls, then a second, instrumented pass that splits a call into:

  cp-sat     inside CpSolver.solve (the search itself, as CP-SAT's own clock sees it)
  hand-over  the rest of CpSolver.solve: passing the model to C++ and reading the response back
  model      apsi.training.reference.program.solve_layout minus CpSolver.solve: building the CP-SAT models
  inputs     apsi.inputs.question.resolve and apsi.training.reference.planning.problem: validating and the solver's numbers
  assembly   apsi.training.reference.planning.assemble and apsi.training.explain.reference.why: the pydantic Plan and its sentence
  other      the rest: planning glue, lever bookkeeping, model_copy

The split is a mean per call over --breakdown-calls calls (its parts sum to that mean); the
timing pass runs without the instrumentation. It also times a trivial CP-SAT solve (one
variable), the floor any solve pays, and with --profile prints cProfile's top functions for the
reference plan; with --solves it lists every CP-SAT solve of each plan (what it is for, its
time, CP-SAT's deterministic time and branches). Target (docs/benchmarks.md): median under 10 ms.

    python benchmarks/plan_latency.py [--calls 100] [--variants plain,levers,any] [--solves] [--profile]
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import header, median, p90  # noqa: E402

TARGET_MS = 10.0
REFERENCE = "1T MoE fp8"
"""The reference plan, plan("1T", active="32B", tokens="15T", precision="fp8", framework="reference"), is this row."""
REF = dict(framework="reference")
"""Every row is a reference plan, solved by the CP-SAT program under the reference arithmetic (the
framework search under Megatron, the default, is timed by framework_latency.py)."""
ROWS: tuple[tuple[str, str, dict], ...] = (
    ("21B dense", "21B", dict(tokens="420B", **REF)),
    ("70B dense", "70B", dict(tokens="1.4T", **REF)),
    (REFERENCE, "1T", dict(active="32B", tokens="15T", precision="fp8", **REF)),
    ("2T MoE B200 fp8", "2T", dict(active="64B", tokens="1.28T", gpu="B200", precision="fp8", **REF)),
    ("2T dense B200 fp8", "2T", dict(tokens="40T", gpu="B200", precision="fp8", batch="16M", **REF)),
    ("2T dense H100", "2T", dict(tokens="40T", batch="16M", **REF)),
)
VARIANTS = {"plain": {}, "levers": {"levers": True}, "any": {"gpu": "any"}}
PARTS = ("cp-sat", "hand-over", "model", "inputs", "assembly", "other")


def time_calls(params: str, kw: dict, calls: int, max_seconds: float | None) -> list[float]:
    """Seconds of each of `calls` warm plan() calls (fewer, at least 10, if max_seconds runs out)."""
    import apsi

    apsi.plan(params, **kw)  # warm: imports, catalog, caches
    times: list[float] = []
    began = time.perf_counter()
    for _ in range(calls):
        started = time.perf_counter()
        apsi.plan(params, **kw)
        times.append(time.perf_counter() - started)
        if max_seconds and len(times) >= 10 and time.perf_counter() - began > max_seconds:
            break
    return times


class Instrumented:
    """Wraps the functions a plan() call passes through with timers while in a `with` block."""

    def __init__(self) -> None:
        self.spent: collections.Counter = collections.Counter()
        self.solves = 0
        self._undo: list = []

    def _wrap(self, owner, attr: str, part: str, after=None) -> None:
        original = getattr(owner, attr)
        spent = self.spent

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                result = original(*args, **kwargs)
            finally:
                spent[part] += time.perf_counter() - started
            if after:
                after(args, result)
            return result

        setattr(owner, attr, timed)
        self._undo.append((owner, attr, original))

    def __enter__(self) -> "Instrumented":
        from ortools.sat.python import cp_model

        import apsi.training.explain.reference
        import apsi.training.reference.planning
        import apsi.api.plan
        import apsi.training.reference.program

        def solved(args, _):
            self.solves += 1
            self.spent["cp-sat internal"] += args[0].wall_time

        self._wrap(cp_model.CpSolver, "solve", "solve call", solved)
        self._wrap(apsi.training.reference.program, "solve_layout", "solve_layout")
        self._wrap(apsi.api.plan, "resolve", "inputs")
        self._wrap(apsi.training.reference.planning, "problem", "inputs")
        self._wrap(apsi.training.reference.planning, "assemble", "assembly")
        self._wrap(apsi.training.explain.reference, "why", "assembly")
        return self

    def __exit__(self, *exc) -> None:
        for owner, attr, original in reversed(self._undo):
            setattr(owner, attr, original)

    def parts(self, total: float) -> dict[str, float]:
        s = self.spent
        out = {"cp-sat": s["cp-sat internal"], "hand-over": s["solve call"] - s["cp-sat internal"],
               "model": s["solve_layout"] - s["solve call"], "inputs": s["inputs"], "assembly": s["assembly"]}
        out["other"] = total - sum(out.values())
        return out


def breakdown(params: str, kw: dict, calls: int) -> tuple[dict[str, float], float]:
    """Mean seconds per call of each part, and solves per call."""
    import apsi

    apsi.plan(params, **kw)
    with Instrumented() as probe:
        started = time.perf_counter()
        for _ in range(calls):
            apsi.plan(params, **kw)
        total = time.perf_counter() - started
    return {k: v / calls for k, v in probe.parts(total).items()}, probe.solves / calls


def trivial_solve_ms(repeats: int = 200) -> float:
    """Median ms to build and solve a one-variable CP-SAT model with apsi's settings."""
    from ortools.sat.python import cp_model

    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        model = cp_model.CpModel()
        x = model.new_int_var(0, 10, "x")
        model.minimize(x)
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        solver.parameters.random_seed = 0
        solver.solve(model)
        times.append(time.perf_counter() - started)
    return median(times) * 1e3


def per_solve(params: str, kw: dict, calls: int) -> list[tuple[str, float, float, int]]:
    """Each CP-SAT solve of one plan() call, in order: what it is for (from the arguments of
    apsi.training.reference.planning.problem), median ms over `calls`, deterministic time and branches."""
    import apsi
    import apsi.training.reference.planning
    from ortools.sat.python import cp_model

    original_problem, original_solve = apsi.training.reference.planning.problem, cp_model.CpSolver.solve
    label, seen = [""], []

    def problem(s, **options):
        relax, objective = options.get("relax"), options.get("objective")
        what = f"what-if without {relax}" if relax else ("other GPU types" if options.get("gpus") else "the plan")
        label[0] = f"{what} ({objective})"
        seen.append(0)
        return original_problem(s, **options)

    def solve(self, model, *args, **kwargs):
        started = time.perf_counter()
        status = original_solve(self, model, *args, **kwargs)
        seen[-1] += 1
        stage = f", stage {seen[-1]}" if label[0].startswith("the plan") and "days" not in label[0] else ""
        log.append((label[0] + stage, time.perf_counter() - started, self.response_proto.deterministic_time,
                    self.num_branches))
        return status

    apsi.training.reference.planning.problem, cp_model.CpSolver.solve = problem, solve
    rounds = []
    try:
        for _ in range(calls):
            log: list = []
            seen.clear()
            apsi.plan(params, **kw)
            rounds.append(log)
    finally:
        apsi.training.reference.planning.problem, cp_model.CpSolver.solve = original_problem, original_solve
    return [(rounds[0][i][0], median([r[i][1] for r in rounds]) * 1e3, rounds[0][i][2], rounds[0][i][3])
            for i in range(len(rounds[0]))]


def profile_reference(calls: int, top: int) -> None:
    import apsi

    params, kw = next((p, k) for name, p, k in ROWS if name == REFERENCE)
    apsi.plan(params, **kw)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        apsi.plan(params, **kw)
    prof.disable()
    print(f"\ncProfile, {calls} calls of the reference plan (levers off), top {top} by cumulative time:")
    pstats.Stats(prof, stream=sys.stdout).strip_dirs().sort_stats("cumulative").print_stats(top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100, help="timed calls per case (default 100)")
    parser.add_argument("--breakdown-calls", type=int, default=20, help="instrumented calls per case (default 20)")
    parser.add_argument("--variants", default="plain,levers,any", help="comma-separated: plain, levers, any")
    parser.add_argument("--cases", default="", help="only rows whose name contains this text")
    parser.add_argument("--max-seconds", type=float, default=0.0,
                        help="stop a case after this many seconds once 10 calls are in (default: no limit)")
    parser.add_argument("--solves", action="store_true", help="list each CP-SAT solve of a plan and its time")
    parser.add_argument("--profile", action="store_true", help="print cProfile's top functions for the reference plan")
    args = parser.parse_args()

    print(header())
    started = time.perf_counter()
    import apsi  # noqa: F401  (imports are not part of a warm call)

    print(f"trivial CP-SAT build + solve (one variable, 1 worker): {trivial_solve_ms():.2f} ms median")
    print(f"target: warm plan() median under {TARGET_MS:g} ms\n")
    rows = [r for r in ROWS if args.cases.lower() in r[0].lower()]
    for variant in args.variants.split(","):
        extra = VARIANTS[variant]
        print(f"## {variant}: plan(..., {', '.join(f'{k}={v!r}' for k, v in extra.items()) or 'levers=False'})")
        print("| case | plan | calls | median ms | p90 ms | solves/call | "
              + " | ".join(f"{p} ms" for p in PARTS) + " | vs target |")
        print("|---" * (7 + len(PARTS)) + "|")
        for name, params, kw in rows:
            kw = {**kw, **extra}
            import apsi as _apsi

            result = _apsi.plan(params, **kw)
            times = time_calls(params, kw, args.calls, args.max_seconds or None)
            parts, solves = breakdown(params, kw, args.breakdown_calls)
            med = median(times) * 1e3
            what = f"{result.gpus:,} x {result.gpu}, {result.binding}"
            print(f"| {name} | {what} | {len(times)} | {med:.1f} | {p90(times) * 1e3:.1f} | {solves:.1f} | "
                  + " | ".join(f"{parts[p] * 1e3:.1f}" for p in PARTS)
                  + f" | {med / TARGET_MS:.1f}x |", flush=True)
        print()
    if args.solves:
        print("## Each CP-SAT solve of one plan() call (levers off), median of 20 calls\n")
        print("| case | solve | ms | det. time x 1e-3 | branches |")
        print("|---|---|---|---|---|")
        for name, params, kw in rows:
            for what, ms, det, branches in per_solve(params, kw, 20):
                print(f"| {name} | {what} | {ms:.1f} | {det * 1e3:.3f} | {branches:,} |")
        print()
    if args.profile:
        profile_reference(20, 25)
    print(f"total benchmark time {time.perf_counter() - started:.0f} s; load average at end "
          + "/".join(f"{x:.2f}" for x in __import__("os").getloadavg()))


if __name__ == "__main__":
    main()
