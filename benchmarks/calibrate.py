"""Fits the step-time model's efficiency constants on published benchmark tables, and only there.

The calibration set is the published benchmark tables (MB-PERF, Megatron-Bridge's performance
tables; TT-BENCH, torchtitan's Llama 3.1 benchmarks, its long-context Tables 2 and 6 included;
MLM-SC21, Megatron-LM's A100 weak-scaling table, GPT 1.7B to 1T; MLM-DOCS, Megatron-Core's H100
strong scaling of GPT-3 175B at 96 GPUs; MDS-REBASE, Megatron-DeepSpeed's
published throughput after its 2023 sync; keys in docs/sources.md), each row a layout with its
published training throughput. apsi evaluates each with its own layout (`evaluate(preset,
framework=..., ...)`), and the fit chooses each constant of STEPS (the GEMM efficiencies
apsi.model.steptime.GEMM_EFFICIENCY["fp8"] and ["bf16"], Ampere's own bf16 one and Blackwell's own
fp8 one (ARCHITECTURE_GEMM_EFFICIENCY), torchtitan's KERNEL_EFFICIENCY in bf16 and in fp8 under
torch.compile and its eager share, DeepSpeed's, the EP
overlap's share and the attention core's efficiency) to minimise the median absolute error of the
throughput on the rows that decide it, one at a time on a grid of 0.005, three times over. The whole
training reports (L3, DSV3 and others) are not here: they are the validation set
(benchmarks/validation.py), never fitted.

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
from apsi.catalog import find_gpu  # noqa: E402

# Megatron-Bridge's performance recipes (perf_recipes common.py _benchmark_common) run bf16 gradient
# reduction and TP communication overlap (tp_comm_overlap), and its FP8 current-scaling recipes FP8
# param gather (training/mixed_precision.py).
BRIDGE = dict(grad_dtype="bf16", tp_overlap=True)
# GPT-3 2.7B (Brown et al. 2020 Table 2.1) as Megatron-DeepSpeed's GPT example builds it: GELU MLP
# 4 h wide, tied embeddings, GPT-2's vocabulary (MDS-REBASE's ds_pretrain_gpt_125M_flashattn.sh).
GPT3_2P7B = dict(layers=32, width=2560, heads=32, ffn=10240, mlp="gelu", vocab=50257, tied=True)
FP8CS = dict(fp8_param_gather=True)
SC21_VOCAB, SC21_SEQ = 51200, 2048
SC21 = dict(mlp="gelu", vocab=SC21_VOCAB, tied=True, recompute="full", zero=0, sequence_parallel=False)
"""Megatron-LM's 2021 A100 benchmarks (MLM-SC21): GPT with a GELU MLP 4 h wide, tied embeddings, a
vocabulary of 51,200, fp16, --checkpoint-activations (full recomputation), no distributed optimizer
(zero 0) and no sequence parallelism (neither existed yet)."""


def _sc21_tokens(layers: int, width: int, tflops: float) -> float:
    """Tokens/s per GPU of MLM-SC21's TFLOP/s: its FLOPs per iteration (Narayanan et al. 2021, eq. 3)
    are 96 B s l h^2 (1 + s / (6 h) + V / (16 l h)), the recomputed forward counted."""
    s = SC21_SEQ
    return tflops * 1e12 / (96 * layers * width**2 * (1 + s / (6 * width) + SC21_VOCAB / (16 * layers * width)))


# MLM-SC21's weak-scaling table: size, layers, width, heads, TP, PP, virtual stages, micro-batch, global
# batch, GPUs, TFLOP/s per GPU. The layouts are the repository's examples/sc21/run_table_1.sh
# (Megatron-LM commit de7dc40f88, August 2021): VPP = layers / PP / --num-layers-per-virtual-pipeline-stage.
SC21_ROWS = (("1.7B", 24, 2304, 24, 1, 1, 1, 16, 512, 32, 137), ("3.6B", 30, 3072, 32, 2, 1, 1, 16, 512, 64, 138),
             ("7.5B", 36, 4096, 32, 4, 1, 1, 16, 512, 128, 142), ("18B", 40, 6144, 48, 8, 1, 1, 8, 1024, 256, 135),
             ("39B", 48, 8192, 64, 8, 2, 1, 4, 1536, 512, 138), ("76B", 60, 10240, 80, 8, 4, 3, 2, 1792, 1024, 140),
             ("145B", 80, 12288, 96, 8, 8, 2, 2, 2304, 1536, 148), ("310B", 96, 16384, 128, 8, 16, 2, 1, 2160, 1920, 155),
             ("530B", 105, 20480, 128, 8, 35, 3, 1, 2520, 2520, 163), ("1T", 128, 25600, 160, 8, 64, 1, 1, 3072, 3072, 163))

# Megatron-Core's strong scaling of GPT-3 175B (MLM-DOCS README "Performance Benchmarking", r0.8.0):
# 47% MFU on 96 H100 at a batch of 1,152 sequences of 2,048, bf16. Its model table gives the layout
# of its 177B GPT-3 (vocabulary 131,072, untied): TP 8 x PP 6, DP, TP and PP overlap on. The schedule
# and micro-batch are not published; at 96 GPUs each replica runs 576 micro-batches, so they hardly
# move it: 48.4% to 48.9% MFU (causal count, at the fitted rates before this row) over VPP 1 to 16 and
# micro-batch 1 or 2. VPP 8 as NeMo's gpt3_175b recipe's 2-layer chunks. Its larger runs (up to 4,608
# GPUs, 12 micro-batches per replica) hang on the schedule and the exposed DP time: the 4,608-GPU one
# is a validation row (benchmarks/validation.py).
GPT3_MCORE = dict(vocab=131072, tied=False, tp=8, pp=6, vpp=8, tp_overlap=True)


def _mcore_tokens(layers: int, width: int, ffn: int, vocab: int, seq: int, mfu: float, peak: float) -> float:
    """Tokens/s per GPU of an MFU in Megatron's 2024 FLOPs count (MLM-FLOPS at 2bfe9beaae,
    num_floating_point_operations, before the causal halving of 2025): 12 l h^2 (1 + g / a + s / h
    + f / h) + 6 h V per token, for a model without GQA (g = a) or a gated MLP, against the bf16 peak."""
    return mfu * peak / (12 * layers * width**2 * (2 + seq / width + ffn / width) + 6 * width * vocab)


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
     dict(tp=1, dp=8, micro_batch=2, recompute="selective", compile=False), 8192, 16, "bf16", 5762.0,
     "TT-BENCH Table 1 (FSDP 8, selective AC, local batch 2, eager; 96 GB H100 at 500 W)"),
    ("torchtitan Llama 3.1 8B, 128 H100", "torchtitan", "llama-3.1-8b", "H100",
     dict(tp=1, dp=128, micro_batch=2, recompute="selective", compile=False), 8192, 256, "bf16", 5605.0,
     "TT-BENCH Table 3 (FSDP 128, eager)"),
    ("torchtitan Llama 3.1 8B, 8 H100, compile", "torchtitan", "llama-3.1-8b", "H100",
     dict(tp=1, dp=8, micro_batch=2, recompute="selective"), 8192, 16, "bf16", 6667.0, "TT-BENCH Table 1"),
    ("torchtitan Llama 3.1 8B, 128 H100, compile", "torchtitan", "llama-3.1-8b", "H100",
     dict(tp=1, dp=128, micro_batch=2, recompute="selective"), 8192, 256, "bf16", 6514.0, "TT-BENCH Table 3"),
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
    # MLM-SC21: Megatron-LM's A100 weak scaling (Narayanan et al. 2021 Table 1; the README's table until
    # May 2022), end-to-end throughput of benchmark runs on Selene (DGX A100 80 GB). They decide Ampere's
    # GEMM efficiency (apsi.model.steptime.ARCHITECTURE_GEMM_EFFICIENCY).
    *(("Megatron-LM GPT %s, %s A100" % (size, f"{gpus:,}"), "megatron", size, "A100",
       dict(SC21, layers=layers, width=width, heads=heads, ffn=4 * width, tp=tp, pp=pp, vpp=vpp,
            dp=gpus // (tp * pp), micro_batch=mbs), SC21_SEQ, gbs, "fp16", _sc21_tokens(layers, width, tflops),
       "MLM-SC21 Table 1: %d TFLOP/s per GPU (hardware FLOPs, eq. 3); TP %d PP %d%s, micro-batch %d (run_table_1.sh)"
       % (tflops, tp, pp, f" VPP {vpp}" if vpp > 1 else "", mbs))
      for size, layers, width, heads, tp, pp, vpp, mbs, gbs, gpus, tflops in SC21_ROWS),
    ("Megatron-Core GPT-3 175B, 96 H100", "megatron", "gpt-3-175b", "H100", dict(GPT3_MCORE, dp=2), 2048, 1152,
     "bf16", _mcore_tokens(96, 12288, 4 * 12288, 131072, 2048, 0.47, find_gpu("H100").bf16_tflops * 1e12),
     "MLM-DOCS README strong scaling: 47% MFU at 96 GPUs (Megatron's 2024 count, attention not halved); "
     "TP 8 PP 6 from its model table, VPP 8 assumed (NeMo gpt3_175b's 2 layers per chunk)"),
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
"""Left out: Bridge's GPT-OSS-120B (no preset), the Megatron-Core weak-scaling table and the strong
scaling's larger runs (their schedule, VPP, and micro-batch are not published, and move them: the
4,608-GPU run is a validation row, benchmarks/validation.py),
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
    elif name.startswith("torchtitan_"):
        torchtitan.KERNEL_EFFICIENCY[name.removeprefix("torchtitan_")] = value  # type: ignore[literal-required]
    elif name == "deepspeed":
        deepspeed.KERNEL_EFFICIENCY.update(bf16=value, fp8=value)
    elif name == "ep_overlap":
        steptime.EP_OVERLAP_EFFICIENCY = value
    elif name == "ampere":
        steptime.ARCHITECTURE_GEMM_EFFICIENCY["ampere"]["bf16"] = value
    elif name == "blackwell_fp8":
        steptime.ARCHITECTURE_GEMM_EFFICIENCY["blackwell"]["fp8"] = value
    else:
        steptime.GEMM_EFFICIENCY[name] = value


def _get(name: str) -> float:
    if name == "attention":
        return steptime.ATTENTION_EFFICIENCY
    if name == "ep_overlap":
        return steptime.EP_OVERLAP_EFFICIENCY
    if name == "deepspeed":
        return deepspeed.KERNEL_EFFICIENCY["bf16"]
    if name == "ampere":
        return steptime.ARCHITECTURE_GEMM_EFFICIENCY["ampere"]["bf16"]
    if name == "blackwell_fp8":
        return steptime.ARCHITECTURE_GEMM_EFFICIENCY["blackwell"]["fp8"]
    if name.startswith("torchtitan_"):
        return torchtitan.KERNEL_EFFICIENCY[name.removeprefix("torchtitan_")]  # type: ignore[literal-required]
    return steptime.GEMM_EFFICIENCY[name]


# Each constant and the rows that decide it: the FP8 GEMM efficiency on Megatron-Bridge's FP8 H100
# rows and Blackwell's own on its GB200 rows (each GPU generation on its own),
# the BF16 one on Megatron's own BF16 rows on Hopper (MLM-DOCS's GPT-3 175B on 96 H100), Ampere's
# bf16 GEMM efficiency on Megatron-LM's A100 rows (MLM-SC21), DeepSpeed's kernel efficiency
# (relative to the GEMM efficiency of its row's GPU, Ampere's) on its A100 row after it,
# torchtitan's kernel efficiency in each precision on its compiled rows of that precision up to 8K
# tokens (relative to Megatron's) and its eager share on its eager rows, the EP overlap's share on
# the rows that ran it, the attention core's efficiency on the long-context rows.
def _architecture(r) -> str | None:
    """The catalog architecture of a row's GPU."""
    return find_gpu(r[3]).architecture


STEPS = (("fp8", lambda r: r[1] == "megatron" and r[7] == "fp8" and _architecture(r) != "blackwell"),
         ("blackwell_fp8", lambda r: r[1] == "megatron" and r[7] == "fp8" and _architecture(r) == "blackwell"),
         ("bf16", lambda r: r[1] == "megatron" and r[7] == "bf16" and _architecture(r) != "ampere"),
         ("torchtitan_fp8", lambda r: r[1] == "torchtitan" and r[7] == "fp8" and r[5] <= LONG_CONTEXT),
         ("torchtitan_bf16", lambda r: r[1] == "torchtitan" and r[7] == "bf16" and r[5] <= LONG_CONTEXT
          and r[4].get("compile", True)),
         ("torchtitan_eager", lambda r: r[1] == "torchtitan" and r[4].get("compile") is False),
         ("ep_overlap", lambda r: bool(r[4].get("ep_overlap"))),
         ("attention", lambda r: r[5] > LONG_CONTEXT),
         ("ampere", lambda r: r[1] == "megatron" and _architecture(r) == "ampere"),
         ("deepspeed", lambda r: r[1] == "deepspeed"))
"""Each constant and the rows that decide it, fitted in this order, three rounds (the shipped
constants are a fixed point: fitting again from them returns them)."""
GRID = {"ep_overlap": range(0, 201), "deepspeed": range(40, 301)}
"""Grid points (x 0.005) per constant: the efficiencies from 0.2 to 1, the EP overlap's share from 0,
DeepSpeed's rate relative to Megatron's from 0.2 to 1.5 (nothing bounds it at Megatron's)."""


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
