"""Benchmark: apsi commands as processes, against the bare OR-Tools import in the same run.

Runs each command below --runs times, interleaved (every round runs each command once, in a
shuffled order, so load drifts hit all of them alike), and prints per command the median and
p90 wall time, the median CPU time (user + system of the child) and the ratio of its median
wall time to that of the bare import:

  python -c pass                                          interpreter start, for scale
  python -c "from ortools.sat.python import cp_model"     the bare import: the yardstick
  apsi plan 1T --active 32B --tokens 15T --precision fp8  levers on, as the CLI defaults
  apsi plan ... --no-levers
  apsi --help
  apsi gpus
  the bare import and apsi plan --no-levers ended by os._exit: what interpreter teardown costs

Then, for `apsi --help`, `apsi gpus` and `apsi plan`, one run under `python -X importtime`
lists which top-level packages the process imported and their own import time, which shows
that --help and gpus never import OR-Tools (nor numpy or pandas, which it pulls in), and one
`apsi plan --no-levers` is taken apart in-process (imports, first plan, rendering) to show where
its time beyond the bare import goes. Targets (docs/benchmarks.md): `apsi plan` within
1.3x of the bare import; --help and gpus under 0.5 s and without OR-Tools.

    python benchmarks/process_time.py [--runs 20] [--seed 0]
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import header, median, p90  # noqa: E402

PLAN = ["plan", "1T", "--active", "32B", "--tokens", "15T", "--precision", "fp8"]
RATIO_TARGET = 1.3
HELP_TARGET_S = 0.5
WATCHED = ("ortools", "numpy", "pandas", "pydantic", "pydantic_core", "yaml", "typer", "apsi")


_NO_TEARDOWN = ("import os, sys, apsi.cli.app; code = apsi.cli.app.main(sys.argv[1:]); "
                "sys.stdout.flush(); sys.stderr.flush(); os._exit(code)")


def apsi_command() -> list[str]:
    """The `apsi` console script next to this interpreter, else `python -m apsi.cli.app`."""
    script = Path(sys.executable).parent / "apsi"
    return [str(script)] if script.exists() else [sys.executable, "-m", "apsi.cli.app"]


def commands() -> dict[str, list[str]]:
    apsi = apsi_command()
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        "bare OR-Tools import": [sys.executable, "-c", "from ortools.sat.python import cp_model"],
        "apsi plan (levers)": apsi + PLAN,
        "apsi plan --no-levers": apsi + PLAN + ["--no-levers"],
        "apsi --help": apsi + ["--help"],
        "apsi gpus": apsi + ["gpus"],
        # What interpreter teardown costs (OR-Tools, numpy and pandas unloading), for the report:
        # the same work, ended by os._exit after flushing the output.
        "bare import, os._exit": [sys.executable, "-c", "import os; from ortools.sat.python import cp_model; "
                                  "os._exit(0)"],
        "apsi plan --no-levers, os._exit": [sys.executable, "-c", _NO_TEARDOWN, *PLAN, "--no-levers"],
    }


def run_once(cmd: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system) of one run; exits if the command fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr.strip()}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def imports(args: list[str]) -> tuple[dict[str, float], float]:
    """Top-level package -> own import seconds, and the total, for `python -X importtime -m
    apsi.cli.app ARGS` (the console script runs the same module)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "apsi.cli.app", *args],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    own: collections.Counter = collections.Counter()
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _, name = (part.strip() for part in line[len("import time:"):].split("|"))
        own[name.split(".")[0]] += int(self_us) / 1e6
    return dict(own), sum(own.values())


# One `apsi plan --no-levers` taken apart in a fresh interpreter: each phase's seconds, printed as
# one line of numbers (the phases run in the order a real `apsi plan` runs them).
_ANATOMY = """
import time
t = [time.perf_counter()]
from ortools.sat.python import cp_model
t.append(time.perf_counter())
import apsi.cli.app
t.append(time.perf_counter())
from apsi.api import plan as scale
from apsi.outputs import text as render
t.append(time.perf_counter())
p = scale.plan("1T", active="32B", tokens="15T", precision="fp8")
t.append(time.perf_counter())
render.plan_text(p)
t.append(time.perf_counter())
scale.plan("1T", active="32B", tokens="15T", precision="fp8")
t.append(time.perf_counter())
print(" ".join(str(b - a) for a, b in zip(t, t[1:])))
"""
PHASES = ("import OR-Tools (cp_model)", "import apsi.cli.app (typer)", "import apsi.api.plan, apsi.outputs.text (pydantic models, catalog)",
          "first plan() in the process", "render the plan text", "a second, warm plan(), for comparison")


def anatomy(runs: int) -> list[float]:
    """Median seconds of each phase over `runs` fresh interpreters."""
    rows = []
    for _ in range(runs):
        done = subprocess.run([sys.executable, "-c", _ANATOMY], capture_output=True, text=True, check=True)
        rows.append([float(x) for x in done.stdout.split()])
    return [median([row[i] for row in rows]) for i in range(len(PHASES))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs of each command (default 20)")
    parser.add_argument("--seed", type=int, default=0, help="seed for the order within each round")
    args = parser.parse_args()

    print(header())
    print(f"apsi         {' '.join(apsi_command())}")
    cmds = commands()
    for cmd in cmds.values():  # warm the file cache and .pyc files; not timed
        run_once(cmd)
    order = random.Random(args.seed)
    walls: dict[str, list[float]] = {name: [] for name in cmds}
    cpus: dict[str, list[float]] = {name: [] for name in cmds}
    for _ in range(args.runs):
        names = list(cmds)
        order.shuffle(names)
        for name in names:
            wall, cpu = run_once(cmds[name])
            walls[name].append(wall)
            cpus[name].append(cpu)
    bare_wall, bare_cpu = median(walls["bare OR-Tools import"]), median(cpus["bare OR-Tools import"])
    print(f"load average at end {'/'.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    print(f"{args.runs} runs each, interleaved; ratio = median / median of the bare OR-Tools import\n")
    print("| command | median s | p90 s | median CPU s | wall ratio | CPU ratio | target |")
    print("|---|---|---|---|---|---|---|")
    for name in cmds:
        med, cpu = median(walls[name]), median(cpus[name])
        if name.startswith("apsi plan") and "os._exit" not in name:
            verdict = f"<= {RATIO_TARGET}x: {'met' if med / bare_wall <= RATIO_TARGET else 'missed'}"
        elif name in ("apsi --help", "apsi gpus"):
            verdict = f"< {HELP_TARGET_S} s: {'met' if med < HELP_TARGET_S else 'missed'}"
        else:
            verdict = ""
        print(f"| `{name}` | {med:.3f} | {p90(walls[name]):.3f} | {cpu:.3f} | {med / bare_wall:.2f} | "
              f"{cpu / bare_cpu:.2f} | {verdict} |")

    phases = anatomy(args.runs)
    print(f"\n`apsi plan` (levers off) taken apart in-process, median of {args.runs} fresh interpreters "
          f"(interpreter start is `python -c pass` above):\n")
    print("| phase | median s |")
    print("|---|---|")
    for phase, seconds in zip(PHASES, phases):
        print(f"| {phase} | {seconds:.3f} |")
    print("\nImports per process (python -X importtime -m apsi.cli.app ..., one run each; own time, s):\n")
    print("| command | modules' own import time s | " + " | ".join(WATCHED) + " |")
    print("|---|---|" + "---|" * len(WATCHED))
    for label, argv in (("apsi --help", ["--help"]), ("apsi gpus", ["gpus"]), ("apsi plan --no-levers", PLAN + ["--no-levers"])):
        own, total = imports(argv)
        cells = [f"{own[p]:.3f}" if p in own else "not imported" for p in WATCHED]
        print(f"| `{label}` | {total:.3f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
