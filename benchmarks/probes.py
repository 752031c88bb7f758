"""Resource probes: command lines a demanding or hostile user might try, each run as a process
with a wall-clock timeout and a memory cap, timed and measured.

Owns the list of probes (PROBES: the largest MoE frontiers, every objective at very large caps,
every GPU type, every framework, huge and tiny batches and sequences, --explain, the scenario
files in examples/, --largest) and running them: each is `python -m apsi ARGS` in its own
process, under RLIMIT_AS (the memory cap, --memory-gib) and killed at --timeout seconds. For each
it records the wall and CPU seconds, the peak resident memory (os.wait4's rusage of that process) and
the outcome: "answer" (exit 0, 1 or 3), "refused" (exit 2, with its one line), "timeout",
"MemoryError" or "traceback". It prints the machine header and a table; with --check it exits 1
when any probe ran over --limit seconds (10 by default), ran out of memory or printed a
traceback, so that every path answers within the limit or refuses with a reason (with --cpu
the limit holds CPU seconds, for a machine shared with other work).

    python benchmarks/probes.py                      # every probe, 60 s each
    python benchmarks/probes.py --check --timeout 20 # the gate: each within 10 s
    python benchmarks/probes.py --only frontier      # the probes whose name holds "frontier"
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import header  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BIG = ["--max-gpus", "1000000"]

PROBES: list[tuple[str, list[str]]] = [
    # The largest MoE frontiers, under every framework.
    ("frontier deepseek-v3", ["frontier", "deepseek-v3"]),
    ("frontier deepseek-v3 fp8", ["frontier", "deepseek-v3", "--precision", "fp8"]),
    ("frontier deepseek-v3 cap 250k", ["frontier", "deepseek-v3", "--max-gpus", "250000"]),
    ("frontier deepseek-v3 micro-batch any", ["frontier", "deepseek-v3", "--micro-batch", "any"]),
    ("frontier deepseek-v3 torchtitan", ["frontier", "deepseek-v3", "--framework", "torchtitan"]),
    ("frontier deepseek-v3 deepspeed", ["frontier", "deepseek-v3", "--framework", "deepspeed"]),
    ("frontier deepseek-v3 reference", ["frontier", "deepseek-v3", "--framework", "reference"]),
    ("frontier qwen3-235b-a22b", ["frontier", "qwen3-235b-a22b"]),
    ("frontier qwen3-235b-a22b 64M batch", ["frontier", "qwen3-235b-a22b", "--batch", "64M"]),
    ("frontier mixtral-8x22b", ["frontier", "mixtral-8x22b"]),
    ("frontier qwen3-30b-a3b", ["frontier", "qwen3-30b-a3b"]),
    ("frontier llama-3.1-405b", ["frontier", "llama-3.1-405b"]),
    ("frontier 1T MoE", ["frontier", "1T", "--active", "32B", "--tokens", "15T", "--precision", "fp8"]),
    ("frontier llama-3.2-1b seq 128", ["frontier", "llama-3.2-1b", "--seq", "128"]),
    ("plan deepseek-v3 --gpus 250000", ["plan", "deepseek-v3", "--gpus", "250000", *BIG]),
    # Every objective at very large caps.
    ("plan deepseek-v3 days 1M", ["plan", "deepseek-v3", "--objective", "days", *BIG]),
    ("plan deepseek-v3 cost 1M", ["plan", "deepseek-v3", "--objective", "cost", *BIG]),
    ("plan deepseek-v3 energy 1M", ["plan", "deepseek-v3", "--objective", "energy", *BIG]),
    ("plan deepseek-v3 gpus 1M", ["plan", "deepseek-v3", "--objective", "gpus", *BIG]),
    ("plan deepseek-v3 --gpus 1M", ["plan", "deepseek-v3", "--gpus", "1000000", *BIG]),
    ("plan qwen3-235b days 1M", ["plan", "qwen3-235b-a22b", "--objective", "days", *BIG]),
    ("plan llama-3.1-405b days 1M", ["plan", "llama-3.1-405b", "--objective", "days", *BIG]),
    ("plan llama-3.2-1b --gpus 1M", ["plan", "llama-3.2-1b", "--gpus", "1000000", *BIG]),
    ("plan 1T MoE days 1M", ["plan", "1T", "--active", "32B", "--tokens", "15T", "--objective", "days", *BIG]),
    # Every GPU in the catalog.
    ("plan deepseek-v3 gpu any", ["plan", "deepseek-v3", "--gpu", "any"]),
    ("plan deepseek-v3 gpu any consumer", ["plan", "deepseek-v3", "--gpu", "any", "--include-consumer"]),
    ("plan deepseek-v3 gpu any days 1M", ["plan", "deepseek-v3", "--gpu", "any", "--objective", "days", *BIG]),
    ("plan llama-3.1-405b gpu any cost", ["plan", "llama-3.1-405b", "--gpu", "any", "--objective", "cost"]),
    # Every framework.
    ("plan deepseek-v3 torchtitan days 1M", ["plan", "deepseek-v3", "--framework", "torchtitan",
                                             "--objective", "days", *BIG]),
    ("plan deepseek-v3 deepspeed days 1M", ["plan", "deepseek-v3", "--framework", "deepspeed",
                                            "--objective", "days", *BIG]),
    ("plan deepseek-v3 reference days 1M", ["plan", "deepseek-v3", "--framework", "reference",
                                            "--objective", "days", *BIG]),
    ("plan 1T torchtitan gpu any", ["plan", "1T", "--framework", "torchtitan", "--gpu", "any"]),
    # Batches: huge, and a tiny tolerance.
    ("plan deepseek-v3 batch 1B days 1M", ["plan", "deepseek-v3", "--batch", "1B", "--objective", "days", *BIG]),
    ("plan 1T batch 1T", ["plan", "1T", "--batch", "1T"]),
    ("plan llama-3.1-70b tolerance 1e-6", ["plan", "llama-3.1-70b", "--batch-tolerance", "0.000001"]),
    ("plan deepseek-v3 micro-batch any days 1M", ["plan", "deepseek-v3", "--micro-batch", "any",
                                                  "--objective", "days", *BIG]),
    # Sequences: tiny and a million tokens.
    ("plan llama-3.1-8b seq 1", ["plan", "llama-3.1-8b", "--seq", "1"]),
    ("plan llama-3.1-8b seq 1 days 1M", ["plan", "llama-3.1-8b", "--seq", "1", "--objective", "days", *BIG]),
    ("plan llama-3.1-8b seq 1M", ["plan", "llama-3.1-8b", "--seq", "1M"]),
    ("plan deepseek-v3 seq 1M", ["plan", "deepseek-v3", "--seq", "1M", "--batch", "64M"]),
    # The explanation.
    ("plan deepseek-v3 explain", ["plan", "deepseek-v3", "--explain"]),
    ("plan deepseek-v3 gpu any explain", ["plan", "deepseek-v3", "--gpu", "any", "--explain"]),
    ("plan qwen3-235b days 1M explain", ["plan", "qwen3-235b-a22b", "--objective", "days", "--explain", *BIG]),
    # The largest model, and serving.
    ("plan --largest 1M GPUs", ["plan", "--largest", "--gpus", "1000000", "--days", "90", "--tokens", "15T", *BIG]),
    ("plan --largest qwen3", ["plan", "--largest", "qwen3", "--gpus", "100000", "--days", "30", "--tokens", "36T"]),
    ("serve deepseek-v3 seq 1M batch 1k", ["serve", "deepseek-v3", "--seq", "1M", "--batch", "1000"]),
    # Every scenario file shipped.
    *[(f"run examples/{p.name}", ["run", f"examples/{p.name}"]) for p in sorted((ROOT / "examples").glob("*.yaml"))],
]


class Result(NamedTuple):
    name: str
    argv: list[str]
    seconds: float
    cpu_seconds: float
    """User plus system CPU seconds of the process: on a shared machine, less noisy than the wall."""
    peak_mib: float
    outcome: str
    """answer, refused, timeout, MemoryError or traceback."""
    line: str
    """The refusal's line, or the last line of the traceback."""
    code: int | None


def _limits(memory_bytes: int):
    """A preexec_fn: the memory cap (address space), and a process group of its own for the kill."""
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        os.setsid()
    return apply


def run(name: str, argv: list[str], timeout: float, memory_gib: float) -> Result:
    """One probe as a process: its wall seconds, peak RSS and outcome."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "apsi", *argv], stdout=out, stderr=err, cwd=ROOT,
                                preexec_fn=_limits(int(memory_gib * 2**30)))
        timed_out = False
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - start > timeout:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    peak = usage.ru_maxrss / 1024  # KiB on Linux
    lines = [x for x in stderr.splitlines() if x.strip()]
    last = lines[-1] if lines else ""
    code = proc.returncode
    if timed_out:
        outcome = "timeout"
    elif "MemoryError" in stderr:
        outcome = "MemoryError"
    elif "Traceback (most recent call last)" in stderr:
        outcome = "traceback"
    elif code == 2:
        outcome = "refused"
    elif code in (0, 1, 3):
        outcome = "answer"
    else:
        outcome = f"exit {code}"
    cpu = usage.ru_utime + usage.ru_stime
    return Result(name, argv, seconds, cpu, peak, outcome, last if outcome != "answer" else "", code)


def table(results: list[Result], limit: float, by_cpu: bool = False) -> str:
    """The results as a markdown table, the over-limit rows marked."""
    rows = ["| probe | command | wall s | CPU s | peak RSS MiB | outcome |", "|---|---|---|---|---|---|"]
    for r in results:
        mark = " **over**" if _time(r, by_cpu) > limit else ""
        said = f": {r.line}" if r.outcome in ("refused", "traceback", "MemoryError") and r.line else ""
        said = said.replace("|", "\\|")
        rows.append(f"| {r.name} | `apsi {shlex.join(r.argv)}` | {r.seconds:.1f} | {r.cpu_seconds:.1f} | "
                    f"{r.peak_mib:,.0f} | "
                    f"{r.outcome}{said}{mark} |")
    return "\n".join(rows)


def _time(r: Result, by_cpu: bool) -> float:
    return r.cpu_seconds if by_cpu else r.seconds


def failures(results: list[Result], limit: float, by_cpu: bool = False) -> list[Result]:
    """The probes --check fails on: over the limit, out of memory, a traceback or a timeout."""
    return [r for r in results if _time(r, by_cpu) > limit or r.outcome in ("timeout", "MemoryError", "traceback")
            or r.outcome.startswith("exit")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds before a probe is killed (60)")
    parser.add_argument("--memory-gib", type=float, default=6.0, help="address-space cap per probe, GiB (6)")
    parser.add_argument("--limit", type=float, default=10.0, help="seconds a probe may take under --check (10)")
    parser.add_argument("--only", default=None, help="run only the probes whose name contains this")
    parser.add_argument("--check", action="store_true", help="exit 1 if any probe fails the limit")
    parser.add_argument("--cpu", action="store_true",
                        help="hold CPU seconds, not wall seconds, to --limit (a shared machine's wall is noisy)")
    parser.add_argument("--jobs", type=int, default=1, help="probes run at once (1; more makes timings noisier)")
    args = parser.parse_args(argv)
    print(header(None if argv is None else ["benchmarks/probes.py", *argv]))
    print(f"probes       timeout {args.timeout:g} s, memory cap {args.memory_gib:g} GiB, limit {args.limit:g} s")
    print()
    chosen = [(name, probe) for name, probe in PROBES if not args.only or args.only in name]

    def one(item: tuple[str, list[str]]) -> Result:
        r = run(*item, args.timeout, args.memory_gib)
        print(f"{r.seconds:7.1f} s {r.cpu_seconds:7.1f} cpu s {r.peak_mib:7,.0f} MiB  {r.outcome:<11} {r.name}"
              + (f"  [{r.line[:140]}]" if r.line else ""), flush=True)
        return r

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(one, chosen))  # the table keeps PROBES' order
    print()
    print(table(results, args.limit, args.cpu))
    bad = failures(results, args.limit, args.cpu)
    print(f"\n{len(results)} probes; {len(bad)} over {args.limit:g} {'CPU ' if args.cpu else ''}s or failed; "
          f"{sum(r.outcome == 'refused' for r in results)} refused; slowest "
          f"{max((r.seconds for r in results), default=0):.1f} s wall, "
          f"{max((r.cpu_seconds for r in results), default=0):.1f} s CPU")
    return 1 if args.check and bad else 0


if __name__ == "__main__":
    sys.exit(main())
