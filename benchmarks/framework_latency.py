"""Warm plan() latency under framework="megatron" (every knob free), against issue targets.

One process, imports done and one call thrown away per case; the median and p90 of `--calls`
calls of the same question, and the median of `--calls` calls each with another days target
(90.1, 90.2, ... days: the bounds kept per setup are reused, the target's walk is new). Cases: a dense 70B and DeepSeek-V3 on H100 (target: median under 50 ms), the same with
gpu="any" (under 250 ms), and Llama 3.1 405B on 16,384 H100 (the fastest layout within a cap).

    python benchmarks/framework_latency.py --calls 30

Then, without a target: the same two with micro_batch="any" (three micro-batch sizes searched),
and two fastest-layout questions (objective="days"), DeepSeek-V3 and Qwen3-235B at a 64M batch.
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args()
    import apsi

    print(machine.header())
    print()
    print("| case | plan | median ms | p90 ms | median ms, another target each call | target ms |")
    print("|---|---|---|---|---|---|")
    for name, (params, options, target) in CASES.items():
        p = apsi.plan(params, framework="megatron", **options)
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
