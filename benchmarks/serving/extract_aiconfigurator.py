"""Writes benchmarks/serving/aiconfigurator_sample.yaml: a named subset of aiconfigurator's measured serving sample.

The source is `aic-core/src/aiconfigurator_core/systems/silicon_sample.csv` in ai-dynamo/aiconfigurator
(Apache-2.0): end-to-end TTFT and TPOT measured on real GPUs ("silicon") for one serving layout at one
concurrency, per engine, engine version, model, GPU, precision and ISL/OSL. This script reads that file
(a path given on the command line, e.g. extracted with `git show <commit>:<path>`), keeps the subset named
in SUBSET below, maps names to apsi's (presets, gpus.yaml), derives the throughput figures the sample
does not carry (formulas below, marked `derived_`), assigns each row its calibration/validation split by
the fixed rule in load.py, and writes the rows. It owns the selection rule; it does no fitting.

    git --git-dir=<aiconfigurator.git> show <commit>:aic-core/src/aiconfigurator_core/systems/silicon_sample.csv > /tmp/s.csv
    python benchmarks/serving/extract_aiconfigurator.py /tmp/s.csv <commit>
"""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from load import split_of  # noqa: E402  (the one split rule)

OUT = HERE / "aiconfigurator_sample.yaml"
SOURCE_PATH = "aic-core/src/aiconfigurator_core/systems/silicon_sample.csv"

# Hugging Face name in the sample -> apsi preset (apsi/inputs/presets.json). DeepSeek-R1 has DeepSeek-V3's
# architecture (its config.json: DeepseekV3ForCausalLM), so it maps to deepseek-v3.
MODELS = {
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "llama-3.1-8b",
    "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
    "Qwen/Qwen3-235B-A22B-FP8": "qwen3-235b-a22b",
    "deepseek-ai/DeepSeek-R1": "deepseek-v3",
}
# aiconfigurator system name -> apsi/gpus.yaml name
GPUS = {"h100_sxm": "H100", "h200_sxm": "H200", "b200_sxm": "B200"}

# The named subset (README.md says why each part is there). Each entry: the sample's model, the GPUs,
# and an optional filter on the row. Rows also need mode "agg" (one engine serves prefill and decode;
# disaggregated serving is outside apsi's serving model), a concurrency recorded in the source, and at
# most one 8-GPU node (tp x pp x attention_dp <= 8).
SUBSET = [
    # dense 8B on all three engines: trtllm on H100 (ISL 1,024/4,096 x OSL 128/512 of its 3x3 grid),
    # sglang and vllm on H200 (all rows)
    ("meta-llama/Llama-3.1-8B-Instruct", ("h100_sxm",),
     lambda r: r["isl"] in ("1024", "4096") and r["osl"] in ("128", "512")),
    ("meta-llama/Llama-3.1-8B-Instruct", ("h200_sxm",), None),
    ("nvidia/Llama-3.1-8B-Instruct-FP8", ("h200_sxm",), None),
    # dense 70B FP8, TP 1-8, trtllm and vllm, on H100/H200/B200, ISL/OSL 1,024/1,024 and 8,192/1,024
    ("meta-llama/Llama-3.1-70B", ("h100_sxm", "h200_sxm", "b200_sxm"),
     lambda r: r["precision"] == "fp8" and (r["isl"], r["osl"]) in (("1024", "1024"), ("8192", "1024"))),
    # MoE 235B-A22B FP8 on all three engines: trtllm on H100 (ISL 1,024 rows), sglang and vllm on H200
    ("Qwen/Qwen3-235B-A22B-FP8", ("h100_sxm",),
     lambda r: r["isl"] == "1024" and r["backend_version"] == "1.0.0rc3"),
    ("Qwen/Qwen3-235B-A22B-FP8", ("h200_sxm",), None),
    # MoE with MLA (DeepSeek-R1 = V3 architecture) FP8 on H200, trtllm and sglang, TP/EP/attention-DP 8
    ("deepseek-ai/DeepSeek-R1", ("h200_sxm",), lambda r: r["precision"] == "fp8"),
]

def _int(text: str, default: int) -> int:
    return int(text) if text else default


def _concurrency(source: str) -> int | None:
    m = re.search(r"silicon_concurrency=(\d+)", source)
    return int(m.group(1)) if m else None


def _image(source: str) -> str | None:
    m = re.search(r"image=([^;]+)", source)
    return m.group(1).strip().replace("#", "/") if m else None


def _measured(source: str) -> str | None:
    m = re.search(r"measured=([0-9-]{10})", source)
    return m.group(1) if m else None


def _wanted(r: dict) -> bool:
    if r["mode"] != "agg" or r["system"] not in GPUS:
        return False
    for model, systems, test in SUBSET:
        if r["model_path"] == model and r["system"] in systems and (test is None or test(r)):
            return True
    return False


def convert(r: dict) -> dict | None:
    """One sample row as an apsi row, or None when it lacks what the serving model needs."""
    concurrency = _concurrency(r["silicon_data_source"])
    tp, pp = int(r["tp_size"]), _int(r["pp_size"], 1)
    adp = _int(r["attention_dp_size"], 1) or 1
    gpus = tp * pp * adp  # aiconfigurator: tokens/s/gpu = output_throughput / pp / tp / dp (base_backend.py)
    if concurrency is None or gpus > 8:
        return None
    isl, osl = int(r["isl"]), int(r["osl"])
    ttft_ms, tpot_ms = float(r["silicon_ttft_ms"]), float(r["silicon_tpot_ms"])
    # request latency = TTFT + TPOT x (OSL - 1), aiconfigurator base_backend.py; a closed loop of
    # `concurrency` users then completes concurrency / latency requests per second (Little's law).
    latency_ms = ttft_ms + tpot_ms * max(osl - 1, 0)
    out_tok_s = concurrency * osl / (latency_ms / 1000.0)
    row = {
        "id": r["id"],
        "engine": r["backend"],
        "engine_version": r["backend_version"] or None,
        "image": _image(r["silicon_data_source"]),
        "measured_date": _measured(r["silicon_data_source"]),
        "model": MODELS[r["model_path"]],
        "hf_model": r["model_path"],
        "gpu": GPUS[r["system"]],
        "weights_precision": r["precision"] or None,
        "gemm_quant_mode": r["gemm_quant_mode"] or None,
        "moe_quant_mode": r["moe_quant_mode"] or None,
        "kv_precision": None,  # the sample does not record the KV-cache dtype
        "tp": tp,
        "pp": pp,
        "attention_dp": adp,
        "moe_tp": _int(r["moe_tp_size"], 1),
        "moe_ep": _int(r["moe_ep_size"], 1),
        "gpus": gpus,
        "isl": isl,
        "osl": osl,
        "concurrency": concurrency,
        "batch_size_per_rank": int(r["batch_size"]),
        "ttft_ms": round(ttft_ms, 4),
        "tpot_ms": round(tpot_ms, 4),
        "derived_request_latency_ms": round(latency_ms, 2),
        "derived_output_tokens_per_s_per_user": round(1000.0 / tpot_ms, 3),
        "derived_output_tokens_per_s_per_gpu": round(out_tok_s / gpus, 2),
    }
    row["split"] = split_of("silicon", row)
    return row


def rows_from(csv_path: Path) -> list[dict]:
    with csv_path.open(newline="") as f:
        sample = [r for r in csv.DictReader(f) if _wanted(r)]
    out: list[dict] = []
    seen: set[tuple] = set()
    # The sample holds some measurements twice (two database dumps); the same engine, layout, workload,
    # concurrency and identical TTFT and TPOT is one measurement, kept once (the first by id).
    for r in sorted(sample, key=lambda r: r["id"]):
        row = convert(r)
        if row is None:
            continue
        dup = (row["engine"], row["model"], row["gpu"], row["weights_precision"], row["isl"], row["osl"],
               row["concurrency"], row["ttft_ms"], row["tpot_ms"])
        if dup in seen:
            continue
        seen.add(dup)
        out.append(row)
    out.sort(key=lambda w: (w["engine"], w["model"], w["gpu"], str(w["engine_version"]), str(w["weights_precision"]),
                            w["tp"], w["attention_dp"], w["moe_ep"], w["isl"], w["osl"], w["concurrency"], w["id"]))
    return out


def dump(rows: list[dict], commit: str) -> str:
    head = {
        "source": {
            "repository": "https://github.com/ai-dynamo/aiconfigurator",
            "path": SOURCE_PATH,
            "commit": commit,
            "licence": "Apache-2.0",
            "what": "measured end-to-end TTFT and TPOT per serving layout and concurrency (aggregated serving); "
                    "a named subset, see benchmarks/serving/README.md",
            "rows_in_source": None,
        },
    }
    lines = ["# Generated by benchmarks/serving/extract_aiconfigurator.py; do not edit by hand.",
             "# Columns and units: benchmarks/serving/README.md.",
             yaml.safe_dump(head, sort_keys=False, width=120).rstrip(), "rows:"]
    for row in rows:
        lines.append("- " + yaml.safe_dump(row, default_flow_style=True, sort_keys=False, width=10_000).strip())
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not re.fullmatch(r"[0-9a-f]{40}", argv[1]):
        print("usage: extract_aiconfigurator.py SILICON_SAMPLE.csv COMMIT(40 hex digits)", file=sys.stderr)
        return 2
    path = Path(argv[0])
    rows = rows_from(path)
    with path.open(newline="") as f:
        total = sum(1 for _ in csv.DictReader(f))
    text = dump(rows, argv[1]).replace("rows_in_source: null", f"rows_in_source: {total}")
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(HERE.parents[1])}: {len(rows)} rows of {total}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
