"""Warm serve() latency (apsi.serving.plan.serve) against issue targets: one process, imports done
and one call thrown away per case, then the median and p90 of `--calls` calls of the same question.

Cases: Llama 3.1 70B FP8 with every knob free on H100 (target: median under 20 ms), the same with
gpu="any" (under 100 ms), and an inventory of three GPU types with a rate to cover, which CP-SAT
mixes (under 200 ms); and the same for Qwen3-30B-A3B and DeepSeek-V3 (MoE), without targets; and a
TTFT target on the 70B and on Qwen3-30B-A3B, where the walk proves every batch up to a layout's
meets it (apsi.serving.walk.within).

    python benchmarks/serving_latency.py --calls 30
"""

from __future__ import annotations

import argparse
import time

import machine

CASES = {
    "Llama 3.1 70B fp8, H100, TPOT 30 ms, 10 req/s": ("llama-3.1-70b", dict(precision="fp8", tpot=30, rate=10), 20),
    "Llama 3.1 70B fp8, any GPU, TPOT 30 ms, 10 req/s": ("llama-3.1-70b", dict(precision="fp8", gpu="any", tpot=30,
                                                                               rate=10), 100),
    "Llama 3.1 70B fp8, inventory H100=64,H200=32,B200=16, 60 req/s": (
        "llama-3.1-70b", dict(precision="fp8", inventory="H100=64,H200=32,B200=16", tpot=30, rate=60), 200),
    "Llama 3.1 70B fp8, H100, TPOT 30 ms, TTFT 500 ms, 10 req/s": (
        "llama-3.1-70b", dict(precision="fp8", tpot=30, ttft=500, rate=10), 20),
    "Qwen3-30B-A3B fp8, H100": ("qwen3-30b-a3b", dict(precision="fp8", rate=10), None),
    "Qwen3-30B-A3B fp8, H100, p99 TTFT 300 ms, 10 req/s": (
        "qwen3-30b-a3b", dict(precision="fp8", ttft="p99:300", rate=10), None),
    "DeepSeek-V3 fp8, H200": ("deepseek-v3", dict(precision="fp8", gpu="H200", rate=10), None),
    "DeepSeek-V3 fp8, any GPU": ("deepseek-v3", dict(precision="fp8", gpu="any", rate=10), None),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args()
    from apsi.serving.plan import serve
    from apsi.serving.replica import layout_words

    print(machine.header())
    print()
    print("| case | median ms | p90 ms | target | plan |")
    print("|---|---|---|---|---|")
    for name, (model, options, target) in CASES.items():
        plan = serve(model, **options)  # warm: imports, presets, catalog
        times = []
        for _ in range(args.calls):
            start = time.perf_counter()
            serve(model, **options)
            times.append((time.perf_counter() - start) * 1e3)
        med = machine.median(times)
        verdict = "-" if target is None else f"{target} ms: {'met' if med <= target else 'MISSED'}"
        kinds = " + ".join(f"{g.replicas} x {layout_words(g.tp, g.pp, g.ep, g.attention_dp)} on {g.gpu}"
                           for g in plan.groups)
        print(f"| {name} | {med:.1f} | {machine.p90(times):.1f} | {verdict} | {kinds} ({plan.gpus} GPUs) |")


if __name__ == "__main__":
    main()
