"""Warm plan() latency under framework="megatron" (every knob free), against issue targets.

One process, imports done and one call thrown away per case; the median and p90 of `--calls`
calls of the same question, and the median of `--calls` calls each with another days target
(90.1, 90.2, ... days: the bounds kept per setup are reused, the target's walk is new). Cases: a dense 70B and DeepSeek-V3 on H100 (target: median under 50 ms), the same with
gpu="any" (under 250 ms), and Llama 3.1 405B on 16,384 H100 (the fastest layout within a cap).

    python benchmarks/framework_latency.py --calls 30

Then, without a target: the same two with micro_batch="any" (three micro-batch sizes searched),
and two fastest-layout questions (objective="days"), DeepSeek-V3 and Qwen3-235B at a 64M batch.

With `--frontier`, the GPU/day frontier instead (apsi.frontier under Megatron, the default): for
each of FRONTIERS, a fresh process times its first call (cold: imports done, nothing kept) and
then `--calls` more (warm), wall and process time, against the targets (warm under 1 s for the 70B,
under 3 s for DeepSeek-V3):

    python benchmarks/framework_latency.py --frontier --calls 3
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import machine

CASES = {
    "Llama 3.1 70B, H100": ("llama-3.1-70b", dict(tokens="15T"), 50),
    "DeepSeek-V3 fp8, H100": ("deepseek-v3", dict(tokens="14.8T", precision="fp8"), 50),
    "Llama 3.1 70B, any GPU": ("llama-3.1-70b", dict(tokens="15T", gpu="any"), 250),
    "DeepSeek-V3 fp8, any GPU": ("deepseek-v3", dict(tokens="14.8T", precision="fp8", gpu="any"), 250),
    "Llama 3.1 405B on 16,384 H100": ("llama-3.1-405b", dict(tokens="15.6T", seq=8192, batch=2048 * 8192,
                                                               gpus=16384), None),
    "Llama 3.1 70B, H100, micro_batch any": ("llama-3.1-70b", dict(tokens="15T", micro_batch="any"), None),
    "DeepSeek-V3 fp8, H100, micro_batch any": ("deepseek-v3", dict(tokens="14.8T", precision="fp8",
                                                                   micro_batch="any"), None),
    "DeepSeek-V3, fastest within 200,000 H100": ("deepseek-v3", dict(objective="days"), None),
    "Qwen3-235B-A22B, fastest at a 64M-token batch": ("qwen3-235b-a22b", dict(objective="days", batch=67108864), None),
}

FRONTIERS = {
    "Llama 3.1 70B, 15T, H100": ("llama-3.1-70b", dict(tokens="15T"), 1.0),
    "DeepSeek-V3 fp8, 14.8T, H100": ("deepseek-v3", dict(tokens="14.8T", precision="fp8"), 3.0),
    "Qwen3-235B-A22B fp8, 36T, H100": ("qwen3-235b-a22b", dict(tokens="36T", precision="fp8"), None),
}

_TIMED = """
import json, sys, time
import apsi
params, options, calls = json.loads(sys.argv[1])
out = []
for _ in range(1 + calls):
    wall, cpu = time.perf_counter(), time.process_time()
    points = apsi.frontier(params, **options)
    out.append((time.perf_counter() - wall, time.process_time() - cpu))
print(json.dumps(dict(times=out, points=len(points), first=points[0].gpus, last=points[-1].gpus)))
"""


def frontiers(calls: int) -> None:
    """The frontier table: each case in a process of its own, so its first call is cold."""
    print("| case | points | GPUs | cold s (process s) | warm median s (process s) | target s |")
    print("|---|---|---|---|---|---|")
    for name, (params, options, target) in FRONTIERS.items():
        done = subprocess.run([sys.executable, "-c", _TIMED, json.dumps([params, options, calls])],
                              capture_output=True, text=True, check=True)
        got = json.loads(done.stdout)
        (cold, cold_cpu), warm = got["times"][0], got["times"][1:]
        wall, cpu = machine.median([w for w, _ in warm]), machine.median([c for _, c in warm])
        verdict = "-" if target is None else f"{target:g}: {'met' if wall < target else 'not met'}"
        print(f"| {name} | {got['points']:,} | {got['first']:,} to {got['last']:,} | {cold:.2f} ({cold_cpu:.2f}) | "
              f"{wall:.2f} ({cpu:.2f}) | {verdict} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--frontier", action="store_true", help="time apsi.frontier() instead of plan()")
    args = parser.parse_args()
    if args.frontier:
        print(machine.header())
        print()
        frontiers(args.calls)
        return
    import apsi

    print(machine.header())
    print()
    print("| case | plan | median ms | p90 ms | median ms, another target each call | target ms |")
    print("|---|---|---|---|---|---|")
    for name, (params, options, target) in CASES.items():
        try:
            p = apsi.plan(params, framework="megatron", **options)
        except apsi.ApsiError as refused:  # a question the work budget refuses is a row, not a crash
            print(f"| {name} | refused: {str(refused).splitlines()[0][:90]} | - | - | - | "
                  f"{target if target is not None else '-'} |")
            continue
        times, moved = [], []
        for i in range(args.calls):
            start = time.perf_counter()
            apsi.plan(params, framework="megatron", **options)
            times.append((time.perf_counter() - start) * 1000)
        for i in range(args.calls):
            start = time.perf_counter()
            apsi.plan(params, framework="megatron", **{**options, "days": 90 + 0.1 * (i + 1)})
            moved.append((time.perf_counter() - start) * 1000)
        lay = p.layout
        layout = (f"{p.gpus:,} x {p.gpu}, TP {lay.tp} PP {lay.pp} CP {lay.cp} VPP {lay.vpp} EP {lay.ep} DP {lay.dp} "
                  f"MB {lay.micro_batch}")
        print(f"| {name} | {layout} | {machine.median(times):.1f} | {machine.p90(times):.1f} | "
              f"{machine.median(moved):.1f} | {target if target is not None else '-'} |")


if __name__ == "__main__":
    main()
