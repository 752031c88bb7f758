"""Benchmark: time `apsi run` on a scenario file of 1,000 runs, with --jobs 1 and --jobs 2.

Writes the grid (10 dense model sizes x 5 GPUs x 5 deadlines x 2 optimizers x 2 MFUs, every run
written out as its own entry, Chinchilla tokens), runs `apsi run GRID --format csv --jobs N` for
each N in a fresh process, checks that every N gives byte-identical CSV, and prints the machine,
the command and the wall time of each. The figures are recorded in docs/benchmarks.md.

    python benchmarks/scenario_grid.py [--jobs 1,2] [--dir DIR]
"""

from __future__ import annotations

import argparse
import collections
import csv
import datetime
import io
import itertools
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIZES = ("1B", "3B", "7B", "13B", "34B", "70B", "180B", "405B", "1T", "2T")
GPUS = ("A100", "H100", "H200", "B200", "MI300X")
DAYS = (15, 30, 60, 90, 180)
OPTIMIZERS = ("adamw", "adam8bit")
MFUS = (0.35, 0.45)


def write_grid(path: Path) -> int:
    """The grid as a scenario file, one `runs:` entry per combination; returns the run count."""
    lines = ["# 1,000-run benchmark grid written by benchmarks/scenario_grid.py", "runs:"]
    grid = itertools.product(SIZES, GPUS, DAYS, OPTIMIZERS, MFUS)
    for size, gpu, days, opt, mfu in grid:
        lines.append(f"  - {{name: {size} {gpu} {days}d {opt} mfu {mfu}, params: {size}, gpu: {gpu}, "
                     f"days: {days}, optimizer: {opt}, mfu: {mfu}}}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines) - 2


def time_run(grid: Path, jobs: int, out: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one `apsi run` in a new process (imports included, as a user sees
    it); CPU is user + system time of the process and its workers."""
    cmd = [sys.executable, "-m", "apsi.cli.app", "run", str(grid), "--format", "csv", "--jobs", str(jobs),
           "--output", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        sys.exit(f"apsi run --jobs {jobs} exited {done.returncode}: {done.stderr.strip()}")
    return seconds, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="1,2", help="comma-separated --jobs values to time")
    parser.add_argument("--dir", default=None, help="folder for the grid and outputs (default: a temporary one)")
    args = parser.parse_args()
    folder = Path(args.dir or tempfile.mkdtemp(prefix="apsi-grid-"))
    folder.mkdir(parents=True, exist_ok=True)
    grid = folder / "grid.yaml"
    runs = write_grid(grid)

    print(f"date (UTC)  {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M}")
    print(f"machine     {platform.machine()}, {os.cpu_count()} logical CPUs, {platform.platform()}")
    print(f"python      {platform.python_version()}, ortools {metadata.version('ortools')}")
    print(f"grid        {grid} ({runs:,} runs)")
    outputs = {}
    for jobs in (int(j) for j in args.jobs.split(",")):
        out = folder / f"jobs{jobs}.csv"
        load = os.getloadavg()[0]
        seconds, cpu = time_run(grid, jobs, out)
        outputs[jobs] = out.read_bytes()
        print(f"apsi run {grid.name} --format csv --jobs {jobs}: {seconds:.1f} s wall, {cpu:.1f} s CPU "
              f"({cpu / runs * 1000:.0f} ms CPU per run; load average before: {load:.2f})")
    same = len(set(outputs.values())) == 1
    print(f"identical CSV for every --jobs: {'yes' if same else 'NO'}")
    rows = list(csv.DictReader(io.StringIO(next(iter(outputs.values())).decode())))
    met = collections.Counter(r["target_met"] for r in rows)
    binding = collections.Counter(r["binding"] for r in rows)
    print(f"target met  {met.get('true', 0):,} of {len(rows):,}; binding: "
          + ", ".join(f"{k} {v:,}" for k, v in sorted(binding.items())))
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
