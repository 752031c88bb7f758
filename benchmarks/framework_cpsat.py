"""Benchmark: the literal CP-SAT formulations of the framework layout search, against the walk.

Under a framework (Megatron by default) plan() chooses the layout by an exact bounded walk
(apsi.training.frameworks.bounds.Search, apsi.training.frameworks.walk.fewest); this script measures what CP-SAT takes for the same
fewest-GPU question written literally over a table of every (configuration, dp) pair, so that the
choice can be checked again when OR-Tools changes. One source of truth: the table is built from
apsi's own Search, so each pair's memory and duration come from the functions the walk uses.

The table. For one question on one GPU type (micro-batches of one sequence, no pins), the
configurations are those of the families whose closed-form bounds admit them: each group with a
row in Search.rows(target), refined by Search.gpu_bounds (a family is kept when one of its legal
dps has a duration floor within the target), families ranked by that bound (GPUs, then family
order), only the first --max-families of them when given. For every configuration c and every
legal dp (Search.legal(c): dps and micro-batches; all of them, also those below the bound): fits
is Search.fits(c, dp, m) is not None, and the duration Search.seconds(c, dp, m), in whole
milliseconds rounded up, the target rounded down (an entry over the target is stored as the
target + 1 ms: rejected all the same, and it keeps infinite durations out).

The models (--formulations):

  flat        one index k over every pair, add_element over the pairs' GPUs, fits (0/1) and
              durations; fits = 1, duration <= target
  per-config  per configuration a boolean (exactly one chosen) and a dp index j, add_element over
              its own table for fits, duration and dp; when chosen fits = 1 and duration <= target,
              and its dp is copied into a variable that is 0 otherwise, so that GPUs = the sum of
              per_replica x that copy is a linear expression

Objective: GPUs (with --tie-break, GPUs x (target + 2 ms) + the duration: the shortest among the
fewest, to the millisecond). Solved with seed 0, one worker and CP-SAT's default workers
(--workers), --repeats times each (median), --time-limit seconds at most per solve; presolve on
(CP-SAT's default) unless --no-presolve.

It checks that CP-SAT's optimum has the GPU count of apsi.plan(..., framework="megatron"), and
prints the table's size and restriction (and where the walk's configuration ranks), the table's
build time, the models' build times, the solve times and status, and the walk's warm plan() time
(median over --plan-calls calls after one warm-up call, taken before the table is built: the
table fills caches the walk would reuse). The solve times leave the table's build out; the walk's
time is a whole plan() call.

    python benchmarks/framework_cpsat.py [--case llama deepseek] [--formulations flat per-config]
        [--workers 1 0] [--repeats 3] [--max-families N] [--time-limit 120] [--tie-break] [--no-presolve] [--log]
    python benchmarks/framework_cpsat.py --params 8B --tokens 160B --batch 256K --max-families 20
        --repeats 1 --plan-calls 1      (one line: a smoke run, seconds)
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import header, median  # noqa: E402

CASES: dict[str, tuple[str, str, dict]] = {
    "llama": ("Llama 3.1 70B, H100", "llama-3.1-70b", dict(tokens="15T")),
    "deepseek": ("DeepSeek-V3 fp8, H100", "deepseek-v3", dict(tokens="14.8T", precision="fp8")),
}
"""The two questions of benchmarks/framework_latency.py on one GPU type."""


class Table:
    """The (configuration, dp) pairs of one question, from apsi.training.frameworks.bounds.Search."""

    def __init__(self, params: str, options: dict, max_families: int | None):
        from apsi.training.frameworks import framework_module
        from apsi.training.frameworks.evaluate import placeable
        from apsi.training.frameworks.batch import BATCH_TOLERANCE
        from apsi.training.frameworks.bounds import Search
        from apsi.inputs.question import resolve
        from apsi.units import SECONDS_PER_DAY

        # As apsi.api.plan.plan and apsi.training.frameworks.planner.plan set a Megatron search up (no pins).
        fw = framework_module("megatron")
        s = resolve(params, include_consumer=False, **options)
        s, _ = placeable(fw, s)
        if len(s.candidates) != 1 or s.gpus is not None or s.objective != "gpus":
            sys.exit("framework_cpsat.py: one GPU type, no gpus and the fewest-GPU objective only")
        self.gpu = s.candidates[0]
        self.search = search = Search(fw, s.on(self.gpu), self.gpu, s.max_gpus, {}, BATCH_TOLERANCE)
        self.target = s.days * SECONDS_PER_DAY
        started, process = time.perf_counter(), time.process_time()
        every = search.families
        # Each family's exact bound (gpu_bounds() gives some as a lower bound and a row to work it out).
        exact = ((search.family_bound(row[2], self.target) if len(row) == 3 else row[0], row[1])
                 for _, group in search.rows(self.target) for row in search.gpu_bounds(group, self.target))
        ranked = sorted(((bound, family.index, family) for bound, family in exact if bound), key=lambda x: x[:2])
        self.admitted = len(ranked)
        kept = ranked if max_families is None else ranked[:max_families]
        self.families, self.every_families = len(kept), len(every)
        self.every_configs = sum(1 for f in every for _ in f.within(search.capacity))
        self.every_pairs = sum(len(search.family_dps(f)) for f in every for _ in f.within(search.capacity))
        self.last_bound = kept[-1][0] if kept else None
        self.rank = {c: n for n, (_, _, family) in enumerate(ranked) for c in family.within(search.capacity)}
        """Each admitted configuration's family's place in the ranking (from 0)."""
        self.rows: list[tuple] = []  # (config, dps, fits 0/1, duration ms)
        self.near = 0  # pairs within a millisecond under the target (rounding could reject them)
        self.target_ms = math.floor(self.target * 1000)
        for _, _, family in kept:
            for c in family.within(search.capacity):
                dps, ms = search.legal(c)
                if not dps:
                    continue
                fits, durations = [], []
                for dp, m in zip(dps, ms):
                    fits.append(0 if search.fits(c, dp, m) is None else 1)
                    seconds = search.seconds(c, dp, m)
                    self.near += self.target - 1e-3 < seconds <= self.target
                    # Over the target (or infinite: a layout the step model cannot run) -> target + 1 ms.
                    durations.append(self.target_ms + 1 if seconds > self.target else
                                     min(math.ceil(seconds * 1000), self.target_ms + 1))
                self.rows.append((c, dps, fits, durations))
        self.seconds, self.cpu = time.perf_counter() - started, time.process_time() - process
        self.pairs = sum(len(row[1]) for row in self.rows)


def per_config(table: Table, tie_break: bool):
    """The per-configuration formulation: a boolean per configuration (exactly one), a dp index
    j and add_element over its table for fits, duration and dp; when chosen, fits = 1, duration <=
    target and dp copied into a variable that is 0 otherwise, so that GPUs is a linear sum.
    Returns the model, the GPUs expression, and a function from a solver to (row, dp index)."""
    from ortools.sat.python import cp_model

    model = cp_model.CpModel()
    limit = table.target_ms
    chosen, index, used, spent = [], [], [], []
    for i, (c, dps, fits, durations) in enumerate(table.rows):
        x = model.new_bool_var(f"x{i}")
        j = model.new_int_var(0, len(dps) - 1, f"j{i}")
        fit = model.new_int_var(0, 1, f"fit{i}")
        dur = model.new_int_var(min(durations), max(durations), f"dur{i}")
        dp = model.new_int_var_from_domain(cp_model.Domain.from_values(dps), f"dp{i}")
        model.add_element(j, fits, fit)
        model.add_element(j, durations, dur)
        model.add_element(j, dps, dp)
        model.add(fit == 1).only_enforce_if(x)
        model.add(dur <= limit).only_enforce_if(x)
        # GPUs = per_replica x dp of the chosen configuration: dp copied when chosen, else 0.
        dp_used = model.new_int_var(0, dps[-1], f"dp_used{i}")
        model.add(dp_used == dp).only_enforce_if(x)
        model.add(dp_used == 0).only_enforce_if(~x)
        if tie_break:
            dur_used = model.new_int_var(0, max(durations), f"dur_used{i}")
            model.add(dur_used == dur).only_enforce_if(x)
            model.add(dur_used == 0).only_enforce_if(~x)
            spent.append(dur_used)
        chosen.append(x)
        index.append(j)
        used.append(dp_used)
    model.add_exactly_one(chosen)
    gpus = sum(c.tp * c.pp * c.cp * d for (c, *_), d in zip(table.rows, used))
    model.minimize(gpus * (limit + 2) + sum(spent) if tie_break else gpus)

    def answer(solver) -> tuple[int, int]:
        i = next(k for k, x in enumerate(chosen) if solver.boolean_value(x))
        return i, int(solver.value(index[i]))

    return model, gpus, answer


def flat(table: Table, tie_break: bool):
    """The flat formulation: one index k over every (configuration, dp) pair and add_element
    over the pairs' GPUs, fits and durations; fits = 1 and duration <= target."""
    from ortools.sat.python import cp_model

    model = cp_model.CpModel()
    limit = table.target_ms
    where, gpus_of, fits_of, seconds_of = [], [], [], []
    for i, (c, dps, fits, durations) in enumerate(table.rows):
        where += [(i, j) for j in range(len(dps))]
        gpus_of += [c.tp * c.pp * c.cp * dp for dp in dps]
        fits_of += fits
        seconds_of += durations
    k = model.new_int_var(0, len(where) - 1, "k")
    gpus = model.new_int_var_from_domain(cp_model.Domain.from_values(sorted(set(gpus_of))), "gpus")
    fit = model.new_int_var(0, 1, "fit")
    dur = model.new_int_var(min(seconds_of), max(seconds_of), "dur")
    model.add_element(k, gpus_of, gpus)
    model.add_element(k, fits_of, fit)
    model.add_element(k, seconds_of, dur)
    model.add(fit == 1)
    model.add(dur <= limit)
    model.minimize(gpus * (limit + 2) + dur if tie_break else gpus)
    return model, gpus, lambda solver: where[int(solver.value(k))]


FORMULATIONS = {"flat": flat, "per-config": per_config}


def solve(table: Table, build, workers: int, time_limit: float, repeats: int, tie_break: bool,
          presolve: bool = True, log: bool = False) -> dict:
    """Median model build and solve seconds over `repeats`, with the last solve's answer."""
    from ortools.sat.python import cp_model

    builds, solves, cpu = [], [], []
    for _ in range(repeats):
        started = time.perf_counter()
        model, gpus, answer = build(table, tie_break)
        builds.append(time.perf_counter() - started)
        solver = cp_model.CpSolver()
        solver.parameters.random_seed = 0
        solver.parameters.num_workers = workers
        solver.parameters.max_time_in_seconds = time_limit
        solver.parameters.cp_model_presolve = presolve
        solver.parameters.log_search_progress = log
        started, process = time.perf_counter(), time.process_time()
        status = solver.solve(model)
        solves.append(time.perf_counter() - started)
        cpu.append(time.process_time() - process)
    out = dict(build=median(builds), solve=median(solves), cpu=median(cpu), status=solver.status_name(status),
               gpus=None, layout=None, seconds=None, det=solver.response_proto.deterministic_time)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        i, j = answer(solver)
        c, dps, fits, durations = table.rows[i]
        assert fits[j] == 1 and durations[j] <= table.target_ms, "CP-SAT chose a pair the table rules out"
        out.update(gpus=int(solver.value(gpus)), layout=(c, dps[j]), seconds=durations[j] / 1000)
    return out


def walk(params: str, options: dict, calls: int) -> tuple[float, float, Any]:
    """Median wall and CPU seconds of warm apsi.plan(framework="megatron") calls, and the plan."""
    import apsi

    plan: Any = apsi.plan  # apsi's lazy attribute (apsi/__init__.py)
    result = plan(params, framework="megatron", **options)  # warm-up
    times, cpu = [], []
    for _ in range(calls):
        started, process = time.perf_counter(), time.process_time()
        plan(params, framework="megatron", **options)
        times.append(time.perf_counter() - started)
        cpu.append(time.process_time() - process)
    return median(times), median(cpu), result


def words(c, dp: int) -> str:
    from apsi.model.arithmetic import RECOMPUTE_LEVELS

    return (f"TP {c.tp} PP {c.pp} CP {c.cp} VPP {c.vpp} EP {c.ep} ETP {c.etp} ZeRO {c.zero} DP {dp}, "
            f"recompute {RECOMPUTE_LEVELS[c.recompute_rank]}")


def times(a: float, b: float) -> str:
    x = a / b if b > 0 else math.inf
    return f"{x:,.0f}x" if x >= 10 else f"{x:.1f}x"


def walk_config(result):
    """The walk's layout as a search Config."""
    from apsi.training.frameworks.space import Config
    from apsi.model.arithmetic import RECOMPUTE_LEVELS

    lay = result.layout
    return Config(RECOMPUTE_LEVELS.index(lay.recompute), lay.pp, lay.tp, lay.cp, lay.vpp, lay.ep, lay.etp, lay.zero)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", nargs="+", choices=sorted(CASES), default=["llama", "deepseek"],
                        help="questions to measure (default both; ignored with --params)")
    parser.add_argument("--params", help="another question: a size or preset (then --tokens, --precision, ...)")
    parser.add_argument("--tokens", help="with --params: training tokens")
    parser.add_argument("--precision", help="with --params: bf16 or fp8")
    parser.add_argument("--gpu", help="with --params: one GPU type (default H100)")
    parser.add_argument("--days", type=float, help="with --params: the target in days (default 90)")
    parser.add_argument("--batch", help="with --params: the batch in tokens (default 2^22)")
    parser.add_argument("--max-families", type=int, default=None,
                        help="keep only the first N families ranked by their bound (default: every admitted one)")
    parser.add_argument("--formulations", nargs="+", choices=sorted(FORMULATIONS), default=["flat", "per-config"],
                        help="CP-SAT models to solve (default both)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 0],
                        help="CP-SAT num_workers settings, 0 = CP-SAT's default (default: 1 0)")
    parser.add_argument("--tie-break", action="store_true",
                        help="minimise GPUs x (target + 2 ms) + duration ms instead of GPUs alone")
    parser.add_argument("--no-presolve", action="store_true",
                        help="turn CP-SAT's presolve off (as apsi.training.reference.program does for the reference program)")
    parser.add_argument("--log", action="store_true", help="print CP-SAT's search log (presolve included)")
    parser.add_argument("--repeats", type=int, default=3, help="model builds and solves per setting (default 3)")
    parser.add_argument("--plan-calls", type=int, default=10, help="warm plan() calls for the walk (default 10)")
    parser.add_argument("--time-limit", type=float, default=120.0, help="CP-SAT's limit per solve, s (default 120)")
    args = parser.parse_args()
    if args.params:
        options = {k: v for k, v in dict(tokens=args.tokens, precision=args.precision, gpu=args.gpu,
                                         days=args.days, batch=args.batch).items() if v is not None}
        cases = [(f"{args.params} {' '.join(f'{k}={v}' for k, v in options.items())}".strip(), args.params, options)]
    else:
        cases = [CASES[name] for name in args.case]

    print(header())
    print(f"\nThe literal CP-SAT formulations ({', '.join(args.formulations)}) against the walk; seed 0; objective "
          f"{'GPUs, then duration' if args.tie_break else 'GPUs'}; presolve {'off' if args.no_presolve else 'on'}; "
          f"time limit {args.time_limit:g} s; median of "
          f"{args.repeats} model builds and solves per setting; walk: median of {args.plan_calls} warm plan() calls "
          "after one warm-up call.")
    agree = True
    for name, params, options in cases:
        began = time.perf_counter()
        walk_s, walk_cpu, result = walk(params, options, args.plan_calls)
        table = Table(params, options, args.max_families)
        lay = result.layout
        print(f"\n### {name}\n")
        print(f"walk (apsi.plan, framework megatron): {result.gpus:,} x {result.gpu}, TP {lay.tp} PP {lay.pp} "
              f"CP {lay.cp} VPP {lay.vpp} EP {lay.ep} ETP {lay.etp} ZeRO {lay.zero} DP {lay.dp}, recompute "
              f"{lay.recompute}, {result.days:.3f} days; warm plan() {walk_s * 1e3:.1f} ms wall, "
              f"{walk_cpu * 1e3:.1f} ms CPU")
        capped = (f", capped at the first {table.families:,} by bound (the last at {table.last_bound:,} GPUs)"
                  if table.families < table.admitted else "")
        print(f"table: {len(table.rows):,} configurations, {table.pairs:,} (configuration, dp) pairs, from "
              f"{table.families:,} families ({table.admitted:,} admitted by Search.rows and gpu_bounds{capped}); "
              f"every family on {table.gpu.name}: {table.every_families:,} families, {table.every_configs:,} "
              f"configurations, {table.every_pairs:,} pairs; built in {table.seconds:.1f} s wall, "
              f"{table.cpu:.1f} s CPU; {table.near} pairs within 1 ms under the target")
        rank = table.rank.get(walk_config(result))
        print("the walk's configuration: " + ("not among the admitted families" if rank is None else
              f"in family {rank + 1:,} of {table.admitted:,} by bound, "
              + ("in the table" if rank < table.families else "left out by the cap")))
        print("\n| formulation | CP-SAT workers | status | GPUs (walk) | same | model build s | solve s | "
              "solve CPU s | solve / warm walk (wall) | (CPU) | det. time | layout |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for form in args.formulations:
            for workers in args.workers:
                r = solve(table, FORMULATIONS[form], workers, args.time_limit, args.repeats, args.tie_break,
                          not args.no_presolve, args.log)
                same = r["gpus"] == result.gpus
                agree &= same
                layout = "-" if r["layout"] is None else f"{words(*r['layout'])}, {r['seconds'] / 86400:.3f} days"
                shown = "none" if r["gpus"] is None else f"{r['gpus']:,}"
                print(f"| {form} | {workers if workers else 'default'} | {r['status']} | {shown} ({result.gpus:,}) | "
                      f"{'yes' if same else 'NO'} | {r['build']:.2f} | {r['solve']:.2f} | {r['cpu']:.2f} | "
                      f"{times(r['solve'], walk_s)} | {times(r['cpu'], walk_cpu)} | {r['det']:.2f} | {layout} |",
                      flush=True)
        print(f"\n({time.perf_counter() - began:.0f} s for this case)")
    print(f"\nCP-SAT's optimum has the walk's GPU count in every case: {'yes' if agree else 'NO'}")
    if not agree:
        sys.exit(1)


if __name__ == "__main__":
    main()
