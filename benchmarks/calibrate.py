"""Fits the step-time model's efficiency constants on published benchmark tables, and only there.

The calibration set is the published benchmark tables (MB-PERF, Megatron-Bridge's performance
tables; TT-BENCH, torchtitan's Llama 3.1 benchmarks, its long-context Tables 2 and 6 included;
MDS-REBASE, Megatron-DeepSpeed's published throughput after its 2023 sync; keys in docs/sources.md), each row a layout with its published training throughput. apsi evaluates each with its own layout
(`evaluate(preset, framework=..., ...)`), and the fit chooses each constant of STEPS (the GEMM
efficiencies apsi.model.steptime.GEMM_EFFICIENCY["fp8"] and ["bf16"], torchtitan's and DeepSpeed's
KERNEL_EFFICIENCY, the EP overlap's share and the attention core's efficiency) to minimise the
median absolute error of the throughput on the rows that decide it, one at a time on a grid of
0.005, three times over. The whole training reports (L3, DSV3 and others) are not here: they are
the validation set (benchmarks/validation.py), never fitted.

    python benchmarks/calibrate.py        # print the fit, the rows and the residual spread
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from apsi import evaluate  # noqa: E402
from apsi.training.frameworks import deepspeed, torchtitan  # noqa: E402
from apsi.model import steptime  # noqa: E402

# Megatron-Bridge's performance recipes (perf_recipes common.py _benchmark_common) run bf16 gradient
# reduction and TP communication overlap (tp_comm_overlap), and its FP8 current-scaling recipes FP8
# param gather (training/mixed_precision.py).
BRIDGE = dict(grad_dtype="bf16", tp_overlap=True)
# GPT-3 2.7B (Brown et al. 2020 Table 2.1) as Megatron-DeepSpeed's GPT example builds it: GELU MLP
# 4 h wide, tied embeddings, GPT-2's vocabulary (MDS-REBASE's ds_pretrain_gpt_125M_flashattn.sh).
GPT3_2P7B = dict(layers=32, width=2560, heads=32, ffn=10240, mlp="gelu", vocab=50257, tied=True)
FP8CS = dict(fp8_param_gather=True)

# name, framework, preset, GPU, knobs, seq, global batch (sequences), precision, published tokens/s per
# GPU (the middle of a published range), source
CALIBRATION: list[tuple[str, str, str, str, dict, int, int, str, float, str]] = [
    ("Megatron-Bridge Llama 3.1 405B, 1,024 H100", "megatron", "llama-3.1-405b", "H100",
     dict(**BRIDGE, **FP8CS, tp=8, pp=8, cp=2, vpp=8, dp=8), 8192, 1536, "fp8", 327.0,
     "MB-PERF 26.04.01 / 26.06: 326-328"),
    ("Megatron-Bridge Llama 3 70B, 64 H100", "megatron", "llama-3.1-70b", "H100",
     dict(**BRIDGE, **FP8CS, tp=4, pp=8, vpp=5, dp=2), 8192, 256, "fp8", 1642.5, "MB-PERF 26.02-26.04.01: 1,621-1,664"),
    ("Megatron-Bridge Llama 3.1 405B, 256 GB200", "megatron", "llama-3.1-405b", "GB200",
     dict(**BRIDGE, **FP8CS, tp=4, pp=16, vpp=4, dp=4), 8192, 1536, "fp8", 853.5, "MB-PERF: 843-864"),
    ("Megatron-Bridge DeepSeek-V3, 1,024 H100", "megatron", "deepseek-v3", "H100",
     dict(**BRIDGE, tp=2, pp=8, vpp=4, ep=64, etp=1, dp=64, recompute="selective",
          recompute_modules=["mla_up_proj", "mlp"], dispatcher="flex"), 4096, 8192, "fp8", 1297.0,
     "MB-PERF archive 25.09 (blockwise FP8; recompute as its DeepSeek-V3 recipe; flex dispatcher: the recipe's "
     "HybridEP, recipes/deepseek/h100/deepseek_v3.py)"),
    ("Megatron-Bridge DeepSeek-V3, 256 GB200", "megatron", "deepseek-v3", "GB200",
     dict(**BRIDGE, tp=1, pp=4, vpp=4, ep=64, dp=64, recompute="selective", recompute_modules=["mla_up_proj"],
          ep_overlap=True, dispatcher="flex"),
     4096, 2048, "fp8", 4940.5, "MB-PERF 26.06-26.08: 4,912-4,969 (MXFP8; EP A2A overlap on: Bridge's "
     "DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V1 sets moe_a2a_overlap=True; flex dispatcher, HybridEP)"),
    ("Megatron-Bridge Qwen3-235B-A22B, 256 H100", "megatron", "qwen3-235b-a22b", "H100",
     dict(**BRIDGE, **FP8CS, tp=2, pp=8, vpp=4, ep=32, etp=1, dp=16, ep_overlap=True), 4096, 8192, "fp8", 1699.0,
     "MB-PERF 26.04-26.04.01: 1,686-1,712 (EP A2A overlap on: QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_FP8_CS_V2 sets "
     "moe_a2a_overlap=True; NCCL all-to-all: moe_flex_dispatcher_backend None)"),
    ("torchtitan Llama 3.1 8B, 8 H100", "torchtitan", "llama-3.1-8b", "H100",
     dict(tp=1, dp=8, micro_batch=2, recompute="selective"), 8192, 16, "bf16", 5762.0,
     "TT-BENCH Table 1 (FSDP 8, selective AC, local batch 2; 96 GB H100 at 500 W)"),
    ("torchtitan Llama 3.1 8B, 128 H100", "torchtitan", "llama-3.1-8b", "H100",
     dict(tp=1, dp=128, micro_batch=2, recompute="selective"), 8192, 256, "bf16", 5605.0, "TT-BENCH Table 3 (FSDP 128)"),
    ("torchtitan Llama 3.1 8B, 8 H100, compile + float8", "torchtitan", "llama-3.1-8b", "H100",
     dict(tp=1, dp=8, micro_batch=2, recompute="selective"), 8192, 16, "fp8", 8532.0, "TT-BENCH Table 1"),
    ("torchtitan Llama 3.1 8B, 128 H100, compile + float8", "torchtitan", "llama-3.1-8b", "H100",
     dict(tp=1, dp=128, micro_batch=2, recompute="selective"), 8192, 256, "fp8", 8380.0, "TT-BENCH Table 3"),
    ("torchtitan Llama 3.1 70B, 256 H100", "torchtitan", "llama-3.1-70b", "H100",
     dict(tp=8, dp=32, micro_batch=16, recompute="full"), 8192, 512, "fp8", 829.0,
     "TT-BENCH Table 4 (FSDP 32, TP 8, full AC, float8, compile)"),
    ("torchtitan Llama 3.1 405B, 512 H100, 1F1B", "torchtitan", "llama-3.1-405b", "H100",
     dict(tp=8, pp=8, dp=8, micro_batch=4, recompute="full"), 8192, 256, "fp8", 100.0,
     "TT-BENCH Table 5 (FSDP 8, TP 8, PP 8, full AC, float8)"),
    ("torchtitan Llama 3.1 405B, 512 H100, interleaved", "torchtitan", "llama-3.1-405b", "H100",
     dict(tp=8, pp=8, vpp=2, dp=8, micro_batch=2, recompute="full"), 8192, 256, "fp8", 128.0,
     "TT-BENCH Table 5 (interleaved 1F1B)"),
    # TT-BENCH's long-context rows: local batch 1 (Table 2) and 8 (Table 6; 1F1B over 8 micro-batches of 1,
    # as many as stages), full AC, compile + float8; FSDP x CP = 8.
    *(("torchtitan Llama 3.1 8B, 8 H100, CP %d, s %dK" % (cp, seq // 1024), "torchtitan", "llama-3.1-8b", "H100",
       dict(tp=1, dp=8 // cp, cp=cp, micro_batch=1, recompute="full"), seq, 8 // cp, "fp8", tps,
       "TT-BENCH Table 2 (FSDP %d, CP %d, full AC, compile + float8)" % (8 // cp, cp))
      for cp, seq, tps in ((1, 32768, 3890.0), (2, 65536, 2540.0), (4, 131072, 1071.0), (8, 262144, 548.0))),
    *(("torchtitan Llama 3.1 405B, 512 H100, CP %d, s %dK" % (cp, seq // 1024), "torchtitan", "llama-3.1-405b", "H100",
       dict(tp=8, pp=8, dp=8 // cp, cp=cp, micro_batch=1, recompute="full"), seq, 8 * (8 // cp), "fp8", tps,
       "TT-BENCH Table 6 (FSDP %d, CP %d, TP 8, PP 8, 1F1B, full AC, compile + float8 + async TP)" % (8 // cp, cp))
      for cp, seq, tps in ((1, 32768, 76.0), (2, 65536, 47.0), (4, 131072, 31.0), (8, 262144, 16.0))),
    # MDS-REBASE: Megatron-DeepSpeed's July 2023 sync notes (examples_deepspeed/rebase/README.md,
    # commit d4a1532c): GPT-3 2.7B "using the same script" as ds_pretrain_gpt_125M_flashattn.sh on
    # 8 A100, FlashAttention-2, 132 TFLOPs per GPU. That script: TP 2 (mp_size), PP 2, ZeRO-1,
    # micro-batch 2, fp16, --checkpoint-activations; its 2.7B block: 32 layers x 2,560, 32 heads,
    # global batch 512, sequence 2,048, GPT-2's vocabulary. The TFLOPs are its throughput_calculator's
    # (megatron/utils.py at that commit): 24 x 4 (the recomputed forward counted) x B s L h^2 x
    # (1 + s / (6 h) + V / (16 L h)), V the vocabulary padded to 128 x TP = 50,432: so many FLOPs
    # per token, and 132 TFLOP/s is 132e12 / that tokens/s per GPU.
    ("Megatron-DeepSpeed GPT-3 2.7B, 8 A100, FlashAttention-2", "deepspeed", "2.7B", "A100",
     dict(GPT3_2P7B, tp=2, pp=2, dp=2, zero=1, micro_batch=2, recompute="full"), 2048, 512, "fp16",
     132e12 / (96 * 32 * 2560**2 * (1 + 2048 / (6 * 2560) + 50432 / (16 * 32 * 2560))),
     "MDS-REBASE: 132 TFLOPs (hardware FLOPs, the recomputed forward counted), TP 2 PP 2 ZeRO-1, micro-batch 2"),
]
"""Left out: Bridge's GPT-OSS-120B (no preset), the Megatron-Core scaling tables (their schedule, VPP,
is not published with them; its GPT-3 strong scaling is a validation row, benchmarks/validation.py),
the Ultra-Scale Playbook's sweep (layouts not published), and MDS-REBASE's other row, GPT-3 13B at
55.6 TFLOPs on 128 V100 (3D parallelism, TP 4 PP 8 ZeRO-1): the catalog has no V100."""


def predicted(row) -> float:
    name, framework, preset, gpu, knobs, seq, batch, precision, _, _ = row
    # Steady-state throughput, as the benchmarks measure it: interruptions left out.
    p = evaluate(preset, framework=framework, gpu=gpu, seq=seq, batch=batch * seq, tokens=batch * seq * 100,
                 precision=precision, failures=False, **knobs)
    return p.tokens_per_gpu_second


def errors(rows) -> list[float]:
    """Relative error of the predicted throughput on each row."""
    return [predicted(r) / r[8] - 1 for r in rows]


def _median_abs(rows) -> float:
    return statistics.median(abs(e) for e in errors(rows))


LONG_CONTEXT = 8192
"""Rows longer than this decide the attention core's efficiency; the rest the GEMMs'."""


def _set(name: str, value: float) -> None:
    if name == "attention":
        steptime.ATTENTION_EFFICIENCY = value
    elif name == "torchtitan":
        torchtitan.KERNEL_EFFICIENCY = value
    elif name == "deepspeed":
        deepspeed.KERNEL_EFFICIENCY = value
    elif name == "ep_overlap":
        steptime.EP_OVERLAP_EFFICIENCY = value
    else:
        steptime.GEMM_EFFICIENCY[name] = value


def _get(name: str) -> float:
    if name == "attention":
        return steptime.ATTENTION_EFFICIENCY
    if name == "ep_overlap":
        return steptime.EP_OVERLAP_EFFICIENCY
    if name == "deepspeed":
        return deepspeed.KERNEL_EFFICIENCY
    return torchtitan.KERNEL_EFFICIENCY if name == "torchtitan" else steptime.GEMM_EFFICIENCY[name]


# Each constant and the rows that decide it: the FP8 GEMM efficiency on Megatron-Bridge's FP8 rows,
# torchtitan's kernel efficiency on its FP8 rows up to 8K tokens (relative to Megatron's), the BF16
# GEMM efficiency on torchtitan's BF16 rows (the only BF16 rows with a published layout), the EP
# overlap's share on the rows that ran it, the attention core's efficiency on the long-context rows.
STEPS = (("fp8", lambda r: r[1] == "megatron"),
         ("torchtitan", lambda r: r[1] == "torchtitan" and r[7] == "fp8" and r[5] <= LONG_CONTEXT),
         ("bf16", lambda r: r[1] == "torchtitan" and r[7] == "bf16"),
         ("ep_overlap", lambda r: bool(r[4].get("ep_overlap"))),
         ("attention", lambda r: r[5] > LONG_CONTEXT),
         ("deepspeed", lambda r: r[1] == "deepspeed"))
"""Each constant and the rows that decide it, fitted in this order, three rounds (the shipped
constants are a fixed point: fitting again from them returns them)."""
GRID = {"ep_overlap": range(0, 201), "deepspeed": range(40, 301)}
"""Grid points (x 0.005) per constant: the efficiencies from 0.2 to 1, the EP overlap's share from 0,
DeepSpeed's rate relative to Megatron's from 0.2 to 1.5 (its one row, on A100, may run faster than
the H100-fitted GEMM efficiency says: nothing bounds it at Megatron's)."""


def fit() -> dict[str, float]:
    """The constants minimising the median absolute error of their rows (STEPS), one at a time on
    a grid of 0.005, three times over (each moves the others' rows a little), or until a round
    moves none of them."""
    saved = {name: _get(name) for name, _ in STEPS}
    try:
        for _ in range(3):
            start = {name: _get(name) for name, _ in STEPS}
            for name, chooses in STEPS:
                rows = [r for r in CALIBRATION if chooses(r)]
                best = None
                for i in GRID.get(name, range(40, 201)):
                    _set(name, i * 0.005)
                    score = _median_abs(rows)
                    if best is None or score < best[0] - 1e-12:
                        best = (score, i * 0.005)
                _set(name, best[1])
            if {name: _get(name) for name, _ in STEPS} == start:
                break  # a round that moves nothing: the next ones would repeat it
        return {name: _get(name) for name, _ in STEPS}
    finally:
        for name, value in saved.items():
            _set(name, value)


def spread() -> tuple[float, float]:
    """The smallest and largest relative error of the predicted step time (the inverse of the
    throughput's) over the calibration set, at the shipped efficiencies."""
    times = [1 / (1 + e) - 1 for e in errors(CALIBRATION)]
    return min(times), max(times)


if __name__ == "__main__":
    print("fitted:", {k: round(v, 3) for k, v in fit().items()})
    print("shipped:", {name: _get(name) for name, _ in STEPS})
    for r, e in zip(CALIBRATION, errors(CALIBRATION)):
        print(f"{r[0]:55s} {r[8]:8.1f} {(1 + e) * r[8]:8.1f} {e:+.1%}")
    low, high = spread()
    print(f"median |error| {_median_abs(CALIBRATION):.1%}; step-time spread {low:+.1%} .. {high:+.1%}")
