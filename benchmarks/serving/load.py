"""Reads the published serving measurements kept in benchmarks/serving/ and says which rows calibrate and which validate.

Two files, each a YAML mapping with its sources and a list of rows (columns and units: README.md):
`trtllm_perf_overview.yaml` (TensorRT-LLM's performance-overview tables) and `aiconfigurator_sample.yaml`
(a named subset of aiconfigurator's measured serving sample). `rows(name)` returns a file's rows after
checking that each has the keys its kind requires and that its `split` is the one the fixed rule gives.

The split rule (decided before any fitting, README.md): rows are grouped into series, one series being
every measurement of one layout on one workload table (the concurrencies, rates or ISL/OSL points of that
layout); a series is calibration when the first 32 bits of the sha256 of its key are even, validation
otherwise. A whole series goes one way, so no validation row has its neighbours in the fit.

    python benchmarks/serving/load.py     # counts per engine, model, GPU and split
"""

from __future__ import annotations

import hashlib
import sys
from collections import Counter
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
FILES = {
    "trtllm_perf_overview": HERE / "trtllm_perf_overview.yaml",
    "aiconfigurator_sample": HERE / "aiconfigurator_sample.yaml",
}
SPLITS = ("calibration", "validation")

COMMON = ("engine", "engine_version", "model", "gpu", "weights_precision", "kv_precision", "tp", "pp", "gpus",
          "isl", "osl", "split")
# keys each kind of row must carry (values may be null where the source does not state them, README.md)
REQUIRED = {
    "throughput": COMMON + ("table", "published_model", "published_gpu", "ep", "num_requests",
                            "output_tokens_per_s_total", "derived_output_tokens_per_s_per_gpu"),
    "online": COMMON + ("table", "published_model", "published_gpu", "num_requests", "offered_rate_req_per_s",
                        "request_throughput_req_per_s", "mean_ttft_ms", "mean_itl_ms",
                        "total_tokens_per_s_total", "output_tokens_per_s_total"),
    "silicon": COMMON + ("id", "hf_model", "attention_dp", "moe_tp", "moe_ep", "concurrency", "batch_size_per_rank",
                         "ttft_ms", "tpot_ms", "derived_request_latency_ms",
                         "derived_output_tokens_per_s_per_user", "derived_output_tokens_per_s_per_gpu"),
}
# keys that must be positive integers where present
INTEGERS = ("tp", "pp", "gpus", "isl", "osl", "attention_dp", "concurrency", "batch_size_per_rank")

# The key naming a series, per kind: the layout (and, for rate/concurrency sweeps, the workload).
SERIES = {
    "throughput": ("table", "model", "gpu", "weights_precision", "tp", "pp"),
    "online": ("table", "model", "gpu", "weights_precision", "tp", "isl", "osl"),
    "silicon": ("engine", "engine_version", "model", "gpu", "weights_precision", "tp", "pp", "attention_dp",
                "moe_tp", "moe_ep", "isl", "osl"),
}


def kind_of(name: str, row: dict) -> str:
    """throughput, online or silicon: which columns a row of file `name` carries."""
    if name == "aiconfigurator_sample":
        return "silicon"
    return "online" if row.get("table") == "v0.14.0-online-serving" else "throughput"


def split_of(kind: str, row: dict) -> str:
    """calibration or validation for a row of this kind, from the stable hash of its series key."""
    key = "|".join(str(row[k]) for k in SERIES[kind])
    return "calibration" if int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % 2 == 0 else "validation"


def document(name: str) -> dict:
    """The whole YAML mapping of file `name` (sources, tables, rows)."""
    if name not in FILES:
        raise ValueError(f"unknown serving data {name!r}; valid: {', '.join(sorted(FILES))}")
    data = yaml.safe_load(FILES[name].read_text())
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise ValueError(f"{FILES[name].name}: expected a mapping with a list under 'rows'")
    return data


def rows(name: str) -> list[dict]:
    """The rows of file `name` (trtllm_perf_overview or aiconfigurator_sample), each checked."""
    out = document(name)["rows"]
    for i, row in enumerate(out):
        kind = kind_of(name, row)
        missing = [k for k in REQUIRED[kind] if k not in row]
        if missing:
            raise ValueError(f"{FILES[name].name} row {i}: missing {', '.join(missing)}")
        bad = [k for k in INTEGERS if k in row and row[k] is not None and not (isinstance(row[k], int) and row[k] > 0)]
        if bad:
            raise ValueError(f"{FILES[name].name} row {i}: {', '.join(bad)} must be positive integers")
        if row["split"] not in SPLITS or row["split"] != split_of(kind, row):
            raise ValueError(f"{FILES[name].name} row {i}: split {row['split']!r} is not the rule's "
                             f"{split_of(kind, row)!r} (load.py split_of)")
    return out


def summary() -> str:
    """Counts per file: rows per engine and split, and per engine, model and GPU."""
    lines = []
    for name in FILES:
        rs = rows(name)
        lines.append(f"{name}: {len(rs)} rows")
        for (engine, split), n in sorted(Counter((r["engine"], r["split"]) for r in rs).items()):
            lines.append(f"  {engine:7s} {split:12s} {n:4d}")
        for (engine, model, gpu), n in sorted(Counter((r["engine"], r["model"], r["gpu"]) for r in rs).items()):
            lines.append(f"  {engine:7s} {model:45s} {gpu:40s} {n:4d}")
    return "\n".join(lines)


if __name__ == "__main__":
    try:
        print(summary())
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
