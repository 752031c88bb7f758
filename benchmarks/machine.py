"""The header every benchmark in this folder prints: the date, the machine and the exact command.

Owns describing where and when a measurement ran (CPU model from /proc/cpuinfo, logical CPUs,
memory, load average, Python and OR-Tools versions) and the small statistics the scripts share
(median, p90). It measures nothing itself; the scripts import it as a sibling module.
"""

from __future__ import annotations

import datetime
import os
import platform
import shlex
import statistics
import sys
from importlib import metadata


def cpu_model() -> str:
    """The `model name` line of /proc/cpuinfo, or platform's guess where there is none."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def memory_gib() -> float | None:
    """Total memory from /proc/meminfo, GiB; None where there is none."""
    try:
        with open("/proc/meminfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


def load() -> str:
    try:
        return "/".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def header(argv: list[str] | None = None) -> str:
    """Date (UTC), machine, versions and the command line that produced what follows."""
    mem = memory_gib()
    try:
        ortools = metadata.version("ortools")
    except metadata.PackageNotFoundError:
        ortools = "not installed"
    command = shlex.join(["python", *(sys.argv if argv is None else argv)])
    return "\n".join([
        f"date (UTC)   {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M:%S}",
        f"machine      {cpu_model()}, {os.cpu_count()} logical CPUs, "
        + (f"{mem:.1f} GiB memory" if mem is not None else "memory unknown"),
        f"system       {platform.platform()}",
        f"python       {platform.python_version()} ({sys.executable}), ortools {ortools}",
        f"load average {load()} (1/5/15 min, at start)",
        f"command      {command}",
    ])


def median(values: list[float]) -> float:
    return statistics.median(values)


def p90(values: list[float]) -> float:
    """The 90th percentile (inclusive method: a value within the sample's range)."""
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=10, method="inclusive")[-1]
