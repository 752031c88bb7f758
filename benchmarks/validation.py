"""Writes docs/validation.md: published training layouts judged by apsi's framework memory model.

Each row is a run that trained (a published benchmark or training report, with its source; keys
in docs/sources.md), evaluated with its own layout under the framework it ran on: the most loaded
pipeline stage's memory against what the GPU offers. Nothing here is fitted: the memory model has
no constant tuned to these runs (the reserve is derived from MLE's and UPB's published figures).
A row that does not fit is a miss of the model, and the table says what the model leaves out for
it.

    python benchmarks/validation.py          # rewrite docs/validation.md
    python benchmarks/validation.py --check  # exit 1 if docs/validation.md is stale
"""

from __future__ import annotations

import sys
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from apsi import ApsiError, evaluate  # noqa: E402
from apsi.model import steptime  # noqa: E402
from apsi.training.frameworks import deepspeed, torchtitan  # noqa: E402
import calibrate  # noqa: E402

DOC = ROOT / "docs" / "validation.md"

# name, preset, GPU, layout knobs, seq, global batch in sequences, precision, source, what it leaves out
# Megatron-Bridge's FP8 current-scaling recipes set fp8_param_gather=True
# (training/mixed_precision.py bf16_with_fp8_current_scaling_mixed); its DeepSeek-V3 recipes set the
# recompute modules and batches of recipes/deepseek/deepseek_v3_perf.py.
FP8CS = dict(fp8_param_gather=True)
# Every Megatron-Bridge performance recipe runs _benchmark_common (perf_recipes common.py), which
# sets ddp.grad_reduce_in_fp32 = False and mixed_precision.grad_reduce_in_fp32 = False: bf16
# gradient buffers, Megatron's --grad-reduce-in-bf16 (2 B per parameter instead of 4).
PERF = dict(grad_dtype="bf16")

RUNS: list[tuple[str, str, str, str, dict, int, int, str, str, str]] = [
    ("Megatron-Bridge Llama 3.1 405B, 1,024 H100", "megatron", "llama-3.1-405b", "H100",
     dict(**PERF, tp=8, pp=8, cp=2, vpp=8, dp=8, **FP8CS), 8192, 1536, "fp8",
     "MB-PERF 26.04.01 / MB-RECIPE llama31_405b_pretrain_1024gpu_h100 (no recompute; FP8 current scaling)", ""),
    ("Megatron-Bridge Llama 3 70B, 64 H100", "megatron", "llama-3.1-70b", "H100",
     dict(**PERF, tp=4, pp=8, vpp=5, dp=2, **FP8CS), 8192, 256, "fp8", "MB-PERF 26.02-26.04.01", ""),
    ("Megatron-Bridge Llama 3.1 405B, 256 GB200", "megatron", "llama-3.1-405b", "GB200",
     dict(**PERF, tp=4, pp=16, vpp=4, dp=4, **FP8CS), 8192, 1536, "fp8",
     "MB-PERF; perf_recipes llama31_405b_pretrain_256gpu_gb200_fp8cs_config (GBS 1,536, MBS 1; base recipe: no "
     "recompute, no offloading)", ""),
    ("Megatron-Bridge DeepSeek-V3, 1,024 H100", "megatron", "deepseek-v3", "H100",
     dict(**PERF, tp=2, pp=8, vpp=2, ep=64, etp=1, dp=64, recompute="selective", recompute_modules=["mla_up_proj", "mlp"]),
     4096, 16384, "fp8",
     "deepseek_v3_pretrain_v2_1024gpu_h100_fp8cs_config (blockwise FP8, fp8_param_gather off, GBS 16,384; "
     "ETP 1 as MLM-MOE recommends for fine-grained experts)", "FP8 dispatch is not modelled"),
    ("Megatron-Bridge DeepSeek-V3, 256 GB200", "megatron", "deepseek-v3", "GB200",
     dict(**PERF, tp=1, pp=4, vpp=4, ep=64, dp=64, recompute="selective", recompute_modules=["mla_up_proj"]), 4096, 2048,
     "fp8", "deepseek_v3_pretrain_256gpu_gb200_fp8mx_config (MXFP8, GBS 2,048)", ""),
    ("Megatron-Bridge Qwen3-235B-A22B, 256 H100", "megatron", "qwen3-235b-a22b", "H100",
     dict(**PERF, tp=2, pp=8, vpp=4, ep=32, etp=1, dp=16, **FP8CS), 4096, 8192, "fp8", "MB-PERF 26.04-26.04.01 (ETP 1)", ""),
    ("Llama 3 405B pre-training, 16,384 H100", "megatron", "llama-3.1-405b", "H100",
     dict(tp=8, pp=16, dp=128), 8192, 2048, "bf16", "L3 Table 4 and Sec. 3.3.2 (16M tokens per batch)",
     "Llama 3 sharded its gradients over DP as well (its own FSDP, L3 Sec. 3.3.2); Megatron keeps a whole fp32 "
     "gradient buffer per TP x PP shard (11.9 GiB here): 77.7 GiB of tensors, and the reserve's 5.5 GiB on top"),
    ("Llama 3 405B long context, 16,384 H100", "megatron", "llama-3.1-405b", "H100",
     dict(tp=8, pp=16, cp=16, dp=8), 131072, 128, "bf16", "L3 Table 4 (CP 16, DP 8; 16M tokens per batch)",
     "as the 8K row"),
    ("Nemotron-4 340B, 6,144 H100", "megatron", "nemotron-4-340b", "H100",
     dict(tp=8, pp=12, vpp=8, dp=64), 4096, 2304, "bf16", "Nemotron-4 340B report, arXiv 2406.11704 (batch 2,304); "
     "VPP 8 from NeMo's nemotron4_340b recipe", ""),
    # As H100: the catalog's H800 (the same GH100 and 80 GB of HBM3) has no driver reading of its memory
    # (visible_memory_gib). The time rows below run on the catalog's H800: its NVLink is not on their path.
    ("DeepSeek-V3, 2,048 H800 (as H100: 80 GB)", "megatron", "deepseek-v3", "H100",
     dict(tp=1, pp=16, ep=64, dp=128, recompute="selective", recompute_modules=["layernorm", "mla_up_proj"],
          moments_dtype="bf16"),
     4096, 15360, "fp8", "DSV3 Sec. 3.2, 4.2 (batch 15,360); Sec. 3.3.3: RMSNorm and MLA up-projections recomputed, "
     "BF16 AdamW moments",
     "DualPipe's schedule and FP8 caching of the MoE and attention inputs (DSV3 3.3.3) are not modelled"),
    ("Llama 3 405B pre-training, 16,384 H100", "torchtitan", "llama-3.1-405b", "H100",
     dict(tp=8, pp=16, dp=128, recompute="none"), 8192, 2048, "bf16",
     "L3 Table 4 and Sec. 3.3.2 (FSDP-style sharding without resharding after forward, as torchtitan under PP)",
     "torchtitan under PP accumulates each micro-batch's gradients unsharded in fp32 until the last (14.9 GiB here); L3 "
     "says its FSDP shards the gradients, which no framework apsi models does under PP: without them this stage "
     "would need 71.8 GiB"),
    ("Llama 3 405B long context, 16,384 H100", "torchtitan", "llama-3.1-405b", "H100",
     dict(tp=8, pp=16, cp=16, dp=8, recompute="none"), 131072, 128, "bf16", "L3 Table 4 (CP 16, DP 8)", "as the 8K row"),
    ("OLMo 2 32B, 1,280 H100", "torchtitan", "olmo-2-32b", "H100",
     dict(tp=1, dp=1280, dp_replicate=5, micro_batch=2, recompute="selective"), 4096, 2560, "bf16",
     "OLMo 2 report (HSDP); OLMo-core OLMo2-32B scripts: HSDP over shards of 256, rank micro-batch 2 x 4,096, feed-forward "
     "checkpointing (here torchtitan's per-op policy); 2 sequences per GPU (2,048 do not split over 1,280)", ""),
]


# TT-BENCH (pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md): Llama 3.1 on 96 GB H100
# (Grand Teton), each table's layout and its published peak memory ("memory readings are stable";
# the maximum over GPUs). In that torchtitan (9dec370, 2024-12-26) the pipeline ran as many
# micro-batches as stages (pipeline_parallel_microbatches None -> pp x stages per rank): the local
# batch of 32 is 8 micro-batches of 4 under 1F1B and 16 of 2 interleaved (2 stages per rank).
TT_BENCH: list[tuple[str, str, dict, int, int, str, float]] = [
    ("Table 1: 8B, FSDP 8, selective AC", "llama-3.1-8b",
     dict(tp=1, dp=8, micro_batch=2, recompute="selective"), 8192, 16, "bf16", 82.4),
    ("Table 2: 8B, FSDP 8, CP 1, s 32K, full AC, float8", "llama-3.1-8b",
     dict(tp=1, dp=8, recompute="full"), 32768, 8, "fp8", 83.9),
    ("Table 2: 8B, FSDP 4, CP 2, s 64K", "llama-3.1-8b", dict(tp=1, dp=4, cp=2, recompute="full"), 65536, 4, "fp8", 84.2),
    ("Table 2: 8B, FSDP 2, CP 4, s 128K", "llama-3.1-8b", dict(tp=1, dp=2, cp=4, recompute="full"), 131072, 2, "fp8", 84.0),
    ("Table 2: 8B, FSDP 1, CP 8, s 256K", "llama-3.1-8b", dict(tp=1, dp=1, cp=8, recompute="full"), 262144, 1, "fp8", 84.5),
    ("Table 3: 8B, FSDP 128, selective AC", "llama-3.1-8b",
     dict(tp=1, dp=128, micro_batch=2, recompute="selective"), 8192, 256, "bf16", 67.0),
    ("Table 4: 70B, FSDP 32, TP 8, full AC, float8", "llama-3.1-70b",
     dict(tp=8, dp=32, micro_batch=16, recompute="full"), 8192, 512, "fp8", 71.9),
    ("Table 5: 405B, FSDP 8, TP 8, PP 8, 1F1B", "llama-3.1-405b",
     dict(tp=8, pp=8, dp=8, micro_batch=4, recompute="full"), 8192, 256, "fp8", 82.5),
    ("Table 5: 405B, FSDP 8, TP 8, PP 8, interleaved 1F1B", "llama-3.1-405b",
     dict(tp=8, pp=8, vpp=2, dp=8, micro_batch=2, recompute="full"), 8192, 256, "fp8", 72.7),
    ("Table 6: 405B, FSDP 8, TP 8, PP 8, CP 1, s 32K", "llama-3.1-405b",
     dict(tp=8, pp=8, dp=8, recompute="full"), 32768, 64, "fp8", 75.3),
    ("Table 6: 405B, FSDP 4, CP 2, s 64K", "llama-3.1-405b", dict(tp=8, pp=8, dp=4, cp=2, recompute="full"),
     65536, 32, "fp8", 75.9),
    ("Table 6: 405B, FSDP 2, CP 4, s 128K", "llama-3.1-405b", dict(tp=8, pp=8, dp=2, cp=4, recompute="full"),
     131072, 16, "fp8", 77.1),
    ("Table 6: 405B, FSDP 1, CP 8, s 256K", "llama-3.1-405b", dict(tp=8, pp=8, dp=1, cp=8, recompute="full"),
     262144, 8, "fp8", 84.9),
]
TOLERANCE = 0.15
"""The issue's bar for a published peak memory: within 15%."""


def bench_row(name, preset, knobs, seq, batch, precision, published) -> tuple[str, float]:
    p = evaluate(preset, framework="torchtitan", gpu="H100", seq=seq, batch=batch * seq, tokens=batch * seq,
                 precision=precision, **knobs)
    m = p.memory
    error = (m.total_gib - published) / published
    parts = (f"states {m.model_states_gib:.1f} + activations {m.activations_gib:.1f} + logits {m.logits_gib:.1f} "
             f"+ reserve {m.reserve_gib:.1f}")
    verdict = "within 15%" if abs(error) <= TOLERANCE else "**off by more than 15%**"
    return (f"| {name} | {published:.1f} | {m.total_gib:.1f} (stage {m.peak_stage}) | {error:+.1%} | {verdict} | "
            f"{parts} |"), error


def row(name, framework, preset, gpu, knobs, seq, batch, precision, source, leaves_out) -> str:
    try:
        p = evaluate(preset, framework=framework, gpu=gpu, seq=seq, batch=batch * seq, tokens=batch * seq,
                     precision=precision, **knobs)
    except ApsiError as err:
        return f"| {name} | {framework} | {_layout(knobs)} | error: {err} | | | | {source} |"
    m = p.memory
    verdict = "fits" if p.fits else f"**does not fit** ({leaves_out or 'see the notes'})"
    stages = f"stage {m.peak_stage} of {len(m.stages_gib)}" if len(m.stages_gib) > 1 else "one stage"
    parts = (f"states {m.model_states_gib:.1f} + activations {m.activations_gib:.1f} + logits {m.logits_gib:.1f} "
             f"+ reserve {m.reserve_gib:.1f}")
    return (f"| {name} | {framework} | {_layout(knobs)}, s {seq:,}, {precision} | {m.total_gib:.1f} GiB ({stages}) | "
            f"{m.usable_gib:.1f} GiB | {verdict} | {parts} | {source} |")


def _layout(knobs: dict) -> str:
    words = []
    for key, value in knobs.items():
        if key == "recompute_modules":
            words.append(f"recompute {'+'.join(value)}")
        elif key == "fp8_param_gather":
            words.append("FP8 param gather" if value else "")
        elif key == "recompute":
            words.append(f"recompute {value}" if value != "none" and "recompute_modules" not in knobs else "")
        elif key == "grad_dtype":
            words.append(f"{value} gradients")
        elif key == "moments_dtype":
            words.append(f"{value} moments")
        elif key in ("tp_overlap", "ep_overlap"):
            words.append(f"{key[:2].upper()} overlap" if value else "")
        elif key == "dispatcher":
            words.append(f"{value} dispatcher")
        elif key == "cp_comm_type":
            words.append(f"CP {value}")
        elif key in ("batch_tolerance", "flops_convention") or key in BLOOM:
            words.append("")
        else:
            words.append(f"{key.upper()} {value}")
    return " ".join(w for w in words if w)


def render() -> str:
    lines = [
        "# Validation",
        "",
        "Regenerated by `python benchmarks/validation.py`; `tests/test_megatron.py` fails when this file is stale.",
        "Nothing in apsi is fitted to these runs or tables, except the six time constants fitted on the",
        "calibration set below.",
        "",
        "## Memory: published layouts under their framework",
        "",
        "Each run trained, so its layout fits its GPUs. apsi evaluates it with `evaluate(preset, framework=..., ...)` and",
        "its own layout. The figure is the most loaded pipeline stage's memory per GPU, and the capacity is the memory the",
        "driver reports (catalog `visible_memory_gib`). \"Does not fit\" is a miss of apsi's model, and the row says what",
        "the model leaves out. Under megatron the states are bf16 weights, fp32 gradients and the optimizer sharded over",
        "DP x CP; under torchtitan fp32 shards over dp_shard x cp plus the gathered bf16 copies (docs/method.md,",
        "\"Frameworks\"). The reserve is 2.5 GiB plus 5% of the activations.",
        "",
        "| Run | Framework | Layout | apsi, peak stage | Capacity | Verdict | Parts, GiB | Source |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [row(*r) for r in RUNS]
    bench = [bench_row(*r) for r in TT_BENCH]
    errors = sorted(abs(e) for _, e in bench)
    within = sum(1 for e in errors if e <= TOLERANCE)
    lines += [
        "",
        "## Peak memory against published readings: torchtitan's Llama 3.1 benchmarks",
        "",
        "TT-BENCH (pytorch/torchtitan `benchmarks/llama3_h100_202412_torchtitan.md`, torchtitan 9dec370, December 2024)",
        "publishes the peak memory of each layout on 96 GB H100s. apsi evaluates each under `framework=\"torchtitan\"` with",
        "that table's layout, local batch and checkpointing (the pipeline ran as many micro-batches as stages then: the",
        "local batch of 32 is 8 micro-batches of 4 under 1F1B, 16 of 2 interleaved). torch.compile, which the published",
        "rows mostly use, is not modelled. The readings are the allocator's reserved memory, which includes its",
        "fragmentation; apsi's figure is what the tensors need plus its reserve.",
        "",
        "| Benchmark | Published, GiB | apsi, GiB | Error | Verdict | Parts, GiB |",
        "|---|---|---|---|---|---|",
    ]
    lines += [text for text, _ in bench]
    lines += [
        "",
        f"{within} of {len(bench)} within 15%; median absolute error {errors[len(errors) // 2]:.1%}, largest "
        f"{errors[-1]:.1%}. apsi is below every reading: the allocator's caching beyond apsi's 5% and "
        "torch.compile's buffers are not modelled, and no constant is fitted to close the gap.",
        "",
    ]
    return "\n".join(lines + time_section())


# The validation set of the time model: whole training reports (L3, DSV3 and others), never fitted.
# name, framework, preset, GPU, knobs, seq, batch (sequences), precision, tokens, metric, published,
# tolerance, source. Metrics: "tflops" (model TFLOP/s per GPU in the report's convention, given in
# the knobs), "mfu", "tokens" (tokens/s per GPU), "gpu_hours" (the whole run, failures counted),
# "hw_tflops" (hardware TFLOP/s per GPU: recomputation counted, Megatron-DeepSpeed's convention) and
# "step" (seconds per step). Every metric but "gpu_hours" is a steady state (STEADY).
# Llama 3 ran the interleaved schedule with one-layer chunks (L3 3.3.2: "the first model chunk on the
# first stage has only the embedding"): 8 virtual stages per rank at PP 16.
L3 = dict(tp=8, pp=16, vpp=8, flops_convention="full")
GPT3_MCORE = dict(calibrate.GPT3_MCORE, flops_convention="full")
"""Megatron-Core's GPT-3 175B strong scaling (MLM-DOCS): the layout of its 96-GPU run, a calibration
row (benchmarks/calibrate.py), with its MFU counted as Megatron counted it in 2024 (MLM-FLOPS at
2bfe9beaae: the attention core's s x s not halved, PaLM's convention)."""
BLOOM = dict(layers=70, width=14336, heads=112, ffn=57344, mlp="gelu", vocab=250880, tied=True)
"""BLOOM (BigScience's model page): 70 layers x 14,336, 112 heads, GELU MLP 4 h, 250,880 tokens, tied
embeddings (ALiBi positions: no parameters)."""
MTNLG = dict(layers=105, width=20480, heads=128, ffn=81920, mlp="gelu", vocab=50272, tied=True)
"""MT-NLG 530B (arXiv 2201.11990 Sec. 2.4): 105 layers x 20,480, 128 heads, GPT-2's vocabulary."""
NEMOTRON_MFU = 0.415
"""Nemotron-4 340B's published MFU (report Table 2: 41-42%), its row's second comparison."""
VALIDATION: list[tuple] = [
    ("Llama 3 405B, 8,192 H100", "megatron", "llama-3.1-405b", "H100", dict(L3, dp=64), 8192, 2048, "bf16",
     "15.6T", "tflops", 430.0, 0.15, "L3 Table 4: 430 TFLOP/s, 43% BF16 MFU (PaLM convention)"),
    ("Llama 3 405B, 16,384 H100", "megatron", "llama-3.1-405b", "H100", dict(L3, dp=128), 8192, 2048, "bf16",
     "15.6T", "tflops", 400.0, 0.15, "L3 Table 4: 400 TFLOP/s, 41%"),
    # Llama 3 all-gathers K and V for context parallelism, exposed (L3 3.3.2): Megatron's
    # --cp-comm-type all_gather, Transformer Engine's AttnFuncWithCPAndKVAllGather, "after Llama 3".
    ("Llama 3 405B long context, 16,384 H100", "megatron", "llama-3.1-405b", "H100",
     dict(L3, cp=16, dp=8, cp_comm_type="all_gather"), 131072, 128, "bf16", "800B", "tflops", 380.0, 0.15,
     "L3 Table 4: 380 TFLOP/s, 38% (CP 16, DP 8). K and V all-gathered, exposed but small with GQA (L3 3.3.2): "
     "{cp:.2f} s of the {step:.1f} s step, where Megatron's default ring hides under the attention core (before the "
     "cp_comm_type knob, priced so: +19.8%). The step the published figure implies is {implied:.1f} s; the attention "
     "core runs at the efficiency fitted on TT-BENCH's long-context rows (torchtitan's December 2024 runs)"),
    ("Llama 3.1 405B whole pre-training, 16,384 H100", "megatron", "llama-3.1-405b", "H100", dict(L3, dp=128), 8192,
     2048, "bf16", "14.8T", "gpu_hours", 30.84e6, 0.25,
     "Llama 3.1 model card: 30.84M GPU-hours for 15.6T tokens (with downtime and the annealing stage). Its "
     "long-context stage (L3 3.4.2: about 800B tokens, up to 128K) is priced as the 128K row's layout: "
     "{stages:.2f}M GPU-hours of the total; the first 14.8T at 8K (the first 2.87T ran at smaller batches, "
     "L3 3.4.1, priced at 16M tokens)"),
    ("DeepSeek-V3 pre-training, 2,048 H800", "megatron", "deepseek-v3", "H800",
     dict(tp=1, pp=16, ep=64, dp=128, recompute="selective", recompute_modules=["layernorm", "mla_up_proj"],
          moments_dtype="bf16", dispatcher="flex"), 4096, 15360, "fp8", "14.8T", "gpu_hours", 2.664e6, 0.25,
     "DSV3 Table 1: 2.664M H800 GPU-hours for 14.8T tokens. Its dispatch crosses IB once per node, to at most 4 "
     "(DSV3 3.2.2; here Megatron's flex dispatcher); DualPipe hides the all-to-all (DSV3 3.2.1), which Megatron cannot "
     "for this layout (VPP 1 under PP), so apsi exposes it: {ep:.1f} of the {step:.1f} s step"),
    ("DeepSeek-V3 pre-training, 2,048 H800, Megatron's EP overlap", "megatron", "deepseek-v3", "H800",
     dict(tp=1, pp=16, vpp=2, ep=64, dp=128, recompute="selective", recompute_modules=["layernorm", "mla_up_proj"],
          moments_dtype="bf16", ep_overlap=True, dispatcher="flex", batch_tolerance=0.07), 4096, 15360, "fp8", "14.8T",
     "gpu_hours",
     2.664e6, 0.25,
     "the row above with Megatron's nearest to DualPipe's overlap: EP A2A overlap (ep_overlap), which Megatron runs "
     "only with VPP under PP, here 2 chunks per rank as DualPipe's, and VPP 2 needs a multiple of 16 micro-batches: "
     "128 per replica, the batch 6.7% larger. The benchmark rows that ran Megatron's overlap fit a hidden share of "
     "{share:g} of the all-to-alls (apsi.model.steptime.EP_OVERLAP_EFFICIENCY): {ep:.1f} s of the {step:.1f} s step stay "
     "exposed, and VPP 2's bubble is smaller. Under Megatron's memory "
     "this layout needs 100 GiB of the 79.7 (DualPipe's own schedule and DSV3's FP8 activation caching are not "
     "modelled)"),
    # Nemotron-4's report gives TP 8 x PP 12 but not the schedule: NeMo's nemotron4_340b recipe, the
    # framework's own configuration of this model (NeMo llm/recipes/nemotron4_340b.py), interleaves
    # 8 virtual stages and overlaps TP (MegatronCommOverlapCallback tp_comm_overlap=True).
    # Its Table 2 gives each stage's iteration time and MFU; the time is the measurement, the MFU a
    # FLOPs count the report does not state (at 8.0 s apsi's causal count gives 40.0%, PaLM's 40.8%):
    # NEMOTRON_MFU is compared in the row's source text only.
    ("Nemotron-4 340B, 6,144 H100", "megatron", "nemotron-4-340b", "H100",
     dict(tp=8, pp=12, vpp=8, dp=64, tp_overlap=True), 4096, 2304,
     "bf16", "9T", "step", 8.0, 0.15, "Nemotron-4 340B report Table 2: 8.0 s per iteration at DP 64 (6,144 GPUs, batch "
     "2,304: the 7.6T-token stage), 41-42% MFU in a FLOPs count it does not state; VPP 8 and TP overlap from NeMo's "
     "nemotron4_340b recipe (the report gives neither). Compared in MFU ({mfu:.1%}, apsi's causal count) the row read -2.1% "
     "at 1761aae and reads {mfu_error:+.1%} now"),
    # Megatron-Core's strong scaling of GPT-3 (MLM-DOCS README "Performance Benchmarking", r0.8.0):
    # 96 to 4,608 H100 at a batch of 1,152 sequences, MFU 47% to 42%, "communication becomes more
    # exposed at larger scale". Its 96-GPU run is a calibration row (benchmarks/calibrate.py: there
    # 576 micro-batches per replica leave the unpublished schedule no weight); at 4,608 GPUs each
    # replica runs 12, so the schedule (VPP 8 assumed, NeMo gpt3_175b's 2-layer chunks) and the
    # exposed DP time weigh, and the run validates them.
    ("Megatron-Core GPT-3 175B strong scaling, 4,608 H100", "megatron", "gpt-3-175b", "H100",
     dict(GPT3_MCORE, dp=96), 2048, 1152, "bf16", "1T", "mfu", 0.42, 0.15,
     "MLM-DOCS README strong scaling: 42% MFU at 4,608 GPUs (Megatron's 2024 count, attention not halved); TP 8 PP 6 "
     "from its model table, VPP 8 assumed (NeMo gpt3_175b's 2 layers per chunk). Before the DP model's NCCL latency, "
     "grown buckets and VPP chunks: 30.8% (-26.7%), 0.64 s of exposed DP in a 1.82 s step; now {dp:.2f} s in "
     "{step:.2f} s"),
    # DeepSpeed: Megatron-DeepSpeed runs, whose TFLOP/s are its throughput_calculator's (hardware
    # FLOPs: the recomputed forward counted, attention not halved, MDS-REBASE), on A100 80 GB.
    ("BLOOM 176B, 384 A100", "deepspeed", "176B", "A100",
     dict(BLOOM, tp=4, pp=12, dp=8, zero=1, micro_batch=2, recompute="full", flops_convention="full"),
     2048, 2048, "bf16", "366B", "hw_tflops", 150.0, 0.15,
     "BigScience's BLOOM page: about 150 TFLOPs on 384 A100 80 GB, one replica on 48 GPUs; HF's BLOOM training blog: "
     "TP 4 x PP 12 x DP 8, DeepSpeed's BF16 optimizer (ZeRO-1 sharding), batch 2,048 of 2,048 tokens; micro-batch 2 and "
     "full checkpointing as its tr11 script. Before DeepSpeed's own efficiency (at torchtitan's): 106 TFLOP/s (-29.3%)"),
    *(("Megatron-Turing NLG 530B, %s A100" % f"{8 * nodes:,}", "deepspeed", "530B", "A100",
       dict(MTNLG, tp=8, pp=35, dp=nodes // 35, zero=1, micro_batch=1, recompute="full"), 2048, 1920,
       "fp16", "270B", "step", step, 0.15,
       "MT-NLG paper (arXiv 2201.11990) Sec. 2.4: %.1f s per iteration of 1,920 x 2,048 on %d DGX A100 (%d TFLOP/s "
       "per GPU); TP 8 x PP 35; micro-batch 1 and ZeRO-1 assumed. Before DeepSpeed's own efficiency: %s"
       % (step, nodes, tflops, before))
      for nodes, step, tflops, before in ((280, 60.1, 126, "79.5 s (+32.2%)"), (350, 50.2, 121, "65.6 s (+30.7%)"),
                                          (420, 44.4, 113, "56.4 s (+27.1%)"))),
    ("OLMo 2 32B, 1,280 H100", "torchtitan", "olmo-2-32b", "H100",
     dict(tp=1, dp=1280, dp_replicate=5, micro_batch=2, recompute="selective", compile=True), 4096, 2560, "bf16", "6T",
     "tokens", 1800.0, 0.15, "OLMo 2 32B card: over 1,800 tokens/s per GPU, ~38% MFU. OLMo-core ran it compiled; "
     "torchtitan's compiled bf16 rate (TT-BENCH's compiled rows) stands in. Before the compile knob, at the rate of "
     "torchtitan's eager bf16 rows: -12.6%"),
]


STAGES: dict[str, list[tuple[dict, int, int, str]]] = {
    "Llama 3.1 405B whole pre-training, 16,384 H100": [
        (dict(L3, cp=16, dp=8, cp_comm_type="all_gather"), 131072, 128, "800B")],
}
"""A whole run's later stages (knobs, seq, batch in sequences, tokens), each evaluated as its own
plan and its GPU-hours added to the row's: Llama 3's long-context stage (L3 3.4.2: about 800B tokens
of its 15.6T, the context grown in six steps to 128K) at its 128K layout (L3 Table 4), which the
128K row above validates."""

STEADY = ("tflops", "mfu", "tokens", "hw_tflops", "step")
"""The metrics a run measures over its training steps, evaluated without interruptions
(failures=False), as the calibration rows are (benchmarks/calibrate.py): Llama 3's Table 4 gives each
stage's MFU and reports its downtime apart (L3 3.3.2, 3.3.4: "higher than 90% effective training
time"), Nemotron-4's Table 2 each stage's MFU, OLMo 2's card its tokens/s per GPU, Megatron's and
Megatron-DeepSpeed's tables their iterations. Only a whole run's GPU-hours ("gpu_hours") count the
interruptions (apsi.model.goodput), as its published figure counts the downtime, unless the report
derives that figure from its steady rate (RATE_TIMES_TOKENS)."""


RATE_TIMES_TOKENS = ("DeepSeek-V3 pre-training, 2,048 H800",
                     "DeepSeek-V3 pre-training, 2,048 H800, Megatron's EP overlap")
"""Whole-run rows whose published GPU-hours are a steady rate times the tokens, no downtime in them:
DSV3 Sec. 1, "training DeepSeek-V3 on each trillion tokens requires only 180K H800 GPU hours ...
Consequently, our pre-training stage ... costs 2664K GPU hours" (14.8 x 180K = 2,664K exactly).
They are evaluated as steady states (steady())."""


def steady(metric: str, name: str = "") -> dict:
    """The knobs a row of `metric` (named `name`) is evaluated under besides its own: failures off for
    a steady state (STEADY, RATE_TIMES_TOKENS)."""
    return {"failures": False} if metric in STEADY or name in RATE_TIMES_TOKENS else {}


def _metric(p, metric: str) -> float:
    if metric == "hw_tflops":
        return p.model_tflops_per_gpu * p.hfu / p.mfu
    return {"tflops": p.model_tflops_per_gpu, "mfu": p.mfu, "tokens": p.tokens_per_gpu_second,
            "gpu_hours": p.gpu_hours, "step": p.step_seconds}[metric]


def _figure(value: float, metric: str) -> str:
    return {"tflops": f"{value:,.0f} TFLOP/s", "mfu": f"{value:.1%} MFU", "tokens": f"{value:,.0f} tokens/s",
            "gpu_hours": f"{value / 1e6:,.2f}M GPU-hours", "hw_tflops": f"{value:,.0f} hardware TFLOP/s",
            "step": f"{value:,.1f} s per step"}[metric]


def time_section() -> list[str]:
    lines = [
        "## Time: the calibration set",
        "",
        "The step-time model (docs/method.md, \"Step time\") has ten fitted constants: the GEMM efficiency under bf16",
        f"(apsi.model.steptime.GEMM_EFFICIENCY, {steptime.GEMM_EFFICIENCY['bf16']:g}, on Megatron-Core's GPT-3 175B on 96 H100, "
        "MLM-DOCS) and under fp8",
        f"({steptime.GEMM_EFFICIENCY['fp8']:g}, on Megatron-Bridge's H100 rows), Ampere's own bf16 one",
        f"(apsi.model.steptime.ARCHITECTURE_GEMM_EFFICIENCY, {steptime.ARCHITECTURE_GEMM_EFFICIENCY['ampere']['bf16']:g}, "
        "on Megatron-LM's A100 weak-scaling table, MLM-SC21) and Blackwell's own fp8 one",
        f"({steptime.ARCHITECTURE_GEMM_EFFICIENCY['blackwell']['fp8']:g}, on Megatron-Bridge's GB200 rows),",
        "torchtitan's kernel efficiency relative to Megatron's in each precision under torch.compile and its eager share",
        f"(apsi.training.frameworks.torchtitan.KERNEL_EFFICIENCY, {torchtitan.KERNEL_EFFICIENCY['bf16']:g} in bf16 and "
        f"{torchtitan.KERNEL_EFFICIENCY['fp8']:g} in fp8, each on its compiled rows of that precision up to 8K tokens, "
        f"and {torchtitan.KERNEL_EFFICIENCY['eager']:g} of that without compile, on its eager rows), DeepSpeed's",
        f"(apsi.training.frameworks.deepspeed.KERNEL_EFFICIENCY, {deepspeed.KERNEL_EFFICIENCY['bf16']:g}, on "
        "Megatron-DeepSpeed's published",
        "row), the share of a MoE layer's all-to-alls",
        "that the other micro-batch's compute hides under Megatron's EP overlap (apsi.model.steptime.EP_OVERLAP_EFFICIENCY, on the two",
        f"rows that ran it: {steptime.EP_OVERLAP_EFFICIENCY:g}) and the attention core's efficiency",
        f"(apsi.model.steptime.ATTENTION_EFFICIENCY, {steptime.ATTENTION_EFFICIENCY:.2f} of the bf16 peak, on TT-BENCH's",
        "long-context rows, 32K to 256K tokens). `python benchmarks/calibrate.py` fits them on these benchmark",
        "rows (MB-PERF, TT-BENCH, MLM-SC21, MLM-DOCS, MDS-REBASE) and nothing else; `tests/test_steptime.py` fails when "
        "the shipped values drift from",
        "the fit. Throughput is tokens/s per GPU, each run evaluated with its own layout.",
        "",
        "| Benchmark | Framework | Published | apsi | Error | Source |",
        "|---|---|---|---|---|---|",
    ]
    errors = calibrate.errors(calibrate.CALIBRATION)
    for r, e in zip(calibrate.CALIBRATION, errors):
        lines.append(f"| {r[0]} | {r[1]} | {r[8]:,.0f} | {(1 + e) * r[8]:,.0f} | {e:+.1%} | {r[9]} |")
    low, high = calibrate.spread()
    ordered = sorted(abs(e) for e in errors)
    sc21 = [e for r, e in zip(calibrate.CALIBRATION, errors) if r[9].startswith("MLM-SC21")]
    lines += [
        "",
        f"Median absolute error {ordered[len(ordered) // 2]:.1%} over {len(errors)} rows, largest {ordered[-1]:.1%}. "
        f"The step time's residual spread is {low:+.1%} to {high:+.1%} (apsi.model.steptime.CALIBRATION_SPREAD): a",
        "plan's days_low and days_high are its days stretched by each.",
        "",
        "Megatron-LM's A100 rows (MLM-SC21) decide Ampere's GEMM efficiency; priced at the H100 rows' "
        f"{steptime.GEMM_EFFICIENCY['bf16']:g} they had a median error of 4.2%, at Ampere's own "
        f"{statistics.median(abs(e) for e in sc21):.1%}. Their residual",
        f"runs with the width: {sc21[0]:+.1%} at 1.7B (h 2,304) to {sc21[-1]:+.1%} at 1T (h 25,600). The likely cause: they ran 2021's",
        "unfused attention (softmax over the s x s scores in HBM, no FlashAttention), which weighs most where the heads",
        "are narrow and few GEMM FLOPs stand behind each score; apsi prices the attention core as FlashAttention.",
        "",
        "## Time: the validation set",
        "",
        "Whole training reports (source keys: docs/sources.md), never fitted. Steady-state rows are held to 15%, whole-run",
        "GPU-hours to 25% (they include downtime, restarts and extra stages; apsi counts the interruptions",
        "(apsi.model.goodput) and prices a later stage the report gives as its own plan (benchmarks/validation.py",
        "STAGES), not the annealing). DeepSeek-V3's 2.664M GPU-hours are its steady rate times its tokens (DSV3 Sec. 1:",
        "180K H800 GPU-hours per trillion tokens, \"consequently\" 2,664K for 14.8T), so its rows are steady states",
        "(benchmarks/validation.py RATE_TIMES_TOKENS).",
        "",
        "| Run | Framework | Layout | Published | apsi | Error | Verdict | Source |",
        "|---|---|---|---|---|---|---|---|",
    ]
    met, got, counted = 0, {}, {}
    for (name, framework, preset, gpu, knobs, seq, batch, precision, tokens, metric, published, tolerance,
         source) in VALIDATION:
        p = evaluate(preset, framework=framework, gpu=gpu, seq=seq, batch=batch * seq, tokens=tokens,
                     precision=precision, **steady(metric, name), **knobs)
        stages = sum(evaluate(preset, framework=framework, gpu=gpu, seq=q, batch=b * q, tokens=t, precision=precision,
                              **steady(metric, name), **k).gpu_hours for k, q, b, t in STAGES.get(name, []))
        value = _metric(p, metric) + stages
        got[name] = (p, value, published)
        if name in RATE_TIMES_TOKENS:
            # For the text: the row as it read counting the interruptions.
            counted[name] = evaluate(preset, framework=framework, gpu=gpu, seq=seq, batch=batch * seq,
                                     tokens=tokens, precision=precision, **knobs).gpu_hours / published - 1
        error = value / published - 1
        # `implied`: the step the published figure implies, where it is a rate (apsi's step x apsi / published).
        source = source.format(ep=p.time.ep_seconds, step=p.step_seconds, share=steptime.EP_OVERLAP_EFFICIENCY,
                               dp=p.time.dp_seconds, cp=p.time.cp_seconds, implied=p.step_seconds * value / published,
                               stages=stages / 1e6, mfu=NEMOTRON_MFU, mfu_error=p.mfu / NEMOTRON_MFU - 1)
        met += abs(error) <= tolerance
        verdict = f"within {tolerance:.0%}" if abs(error) <= tolerance else f"**off by more than {tolerance:.0%}**"
        layout = _layout({k: v for k, v in knobs.items() if k != "flops_convention"})
        if metric == "tflops" and knobs.get("flops_convention") == "full":
            # The report says PaLM's convention; the causal count, for comparison, changes only the
            # FLOPs credited, not the time.
            causal = evaluate(preset, framework=framework, gpu=gpu, seq=seq, batch=batch * seq, tokens=tokens,
                              precision=precision, **steady(metric), **{**knobs, "flops_convention": "causal"})
            source += (f" (counted causally, apsi's figure is {causal.model_tflops_per_gpu:,.0f} TFLOP/s, "
                       f"{causal.model_tflops_per_gpu / published - 1:+.1%})")
        lines.append(f"| {name} | {framework} | {layout}, s {seq:,}, {precision} | {_figure(published, metric)} | "
                     f"{_figure(value, metric)} | {error:+.1%} | {verdict} | {source} |")
    lines += [
        "",
        f"{met} of {len(VALIDATION)} rows are within their bar"
        + (". Each miss names its cause in its Source column; none is" if met < len(VALIDATION) else "; none is"),
        "closed by a constant, and a row's knobs are what the run (or its framework's own recipe for the model) set.",
        "",
        *_scale_words(got, counted),
        "",
        *dp_section(),
        "",
        "## Frameworks without rows",
        "",
        "DeepSpeed has timing rows above (BLOOM and MT-NLG, Megatron-DeepSpeed runs on A100) but none in the memory",
        "tables: no published DeepSpeed peak memory in the reference's benchmark tables or training reports. Its kernel",
        "efficiency is its own (apsi.training.frameworks.deepspeed.KERNEL_EFFICIENCY), fitted on Megatron-DeepSpeed's",
        "published throughput (MDS-REBASE, the calibration row above), its ZeRO overlap is modelled from DeepSpeed's code,",
        "and every DeepSpeed plan says its memory is unvalidated in `caveats` (apsi.training.frameworks.timing.caveats):",
        "on its Caveat lines, in its JSON and against each figure in `apsi compare`.",
        "",
    ]
    return lines


DP_BEFORE = "1761aae"
"""The commit before the data-parallel model's NCCL latency per bucket, Megatron's DP-sized buckets,
the interleaved schedule's per-chunk overlap and each framework's own overlap (docs/method.md,
"Step time"); the figures below marked "before" are apsi's at it, evaluated as here."""

GPT3_SCALE: dict[int, tuple[float, float, float]] = {
    2: (0.093, 53.97, 0.4982), 4: (0.327, 27.29, 0.4925), 8: (0.479, 13.99, 0.4804), 16: (0.564, 7.35, 0.4572),
    32: (0.608, 4.03, 0.4168), 48: (0.623, 2.93, 0.3829), 96: (0.639, 1.82, 0.3078)}
"""By DP, Megatron-Core's GPT-3 175B strong scaling (GPT3_MCORE) at DP_BEFORE: exposed DP seconds,
step seconds, MFU (Megatron's 2024 count, as GPT3_MCORE)."""
GPT3_PUBLISHED = {2: 0.47, 96: 0.42}
"""MLM-DOCS README strong scaling: the MFU at 96 GPUs (a calibration row) and 4,608 (a validation row)."""

AUDIT = dict(gpu="H100", tp=2, pp=1, dp=973, seq=4096, batch=973 * 4096, tokens="15T", recompute="none",
             failures=False)
"""Llama 3.1 70B at TP 2 x DP 973, one sequence of 4,096 per replica, bf16 on H100: one layout under
each framework's data-parallel traffic (tests/test_honest.py's audit)."""
AUDIT_ROWS: tuple[tuple[str, str, dict, str, tuple[float, float]], ...] = (
    ("DeepSpeed ZeRO-1", "deepspeed", dict(zero=1), "bf16 reduce-scatter and gather, once a step, 5e8-element buckets; "
     "the reduction under the backward, the gather inside the optimizer step", (0.512, 3.05)),
    ("DeepSpeed ZeRO-3", "deepspeed", dict(zero=3), "1.5x ZeRO-1's bytes, per layer: gathered in the forward and again "
     "in the backward, reduced in the backward, each prefetched under the layer before", (0.013, 2.56)),
    ("Megatron, distributed optimizer", "megatron", {}, "fp32 gradients reduce-scattered under the last backward, bf16 "
     "weights gathered under the first forward, in buckets of max(40M, 1M x DP) elements", (2.183, 3.85)),
    ("torchtitan, FSDP2", "torchtitan", {}, "as ZeRO-3, its gradients reduce-scattered in fp32", (0.017, 2.53)),
)
"""Name, framework, knobs, what it moves, and (exposed DP, step seconds) at DP_BEFORE."""


def dp_section() -> list[str]:
    """Exposed data-parallel time before and after the DP model's NCCL latency, buckets and overlaps:
    Megatron-Core's GPT-3 strong scaling over DP, and one layout under each framework's traffic."""
    lines = [
        "## Time: exposed data-parallel time, before and after",
        "",
        "What the data-parallel traffic adds to a step beyond what the framework's overlap hides",
        "(`StepTime.dp`, docs/method.md \"Step time\"): NCCL's latency on every bucket, Megatron's DP-sized",
        "buckets, the interleaved schedule's per-chunk overlap, and each framework's own overlap. \"Before\" is apsi",
        f"at {DP_BEFORE}, before those terms, evaluated the same way (steady state); \"now\" is this run's.",
        "",
        "Megatron-Core's GPT-3 175B strong scaling (the calibration and validation rows above: TP 8 PP 6 VPP 8, TP",
        "overlap, batch 1,152 of 2,048 tokens, bf16 H100, MFU in Megatron's 2024 count; MLM-DOCS publishes the MFU",
        "at 96 and 4,608 GPUs only; \"before\" ran at that commit's fitted rates, bf16 0.615):",
        "",
        "| GPUs | DP | Exposed DP, s | Step, s | MFU | Published MFU |",
        "|---|---|---|---|---|---|",
    ]
    now = {}
    for dp, (dp_before, step_before, mfu_before) in GPT3_SCALE.items():
        p = now[dp] = evaluate("gpt-3-175b", framework="megatron", gpu="H100", seq=2048, batch=1152 * 2048,
                               tokens="1T", precision="bf16", failures=False, **{**GPT3_MCORE, "dp": dp})
        published = GPT3_PUBLISHED.get(dp)
        lines.append(f"| {48 * dp:,} | {dp} | {dp_before:.3f} -> {p.time.dp_seconds:.3f} | {step_before:.2f} -> "
                     f"{p.step_seconds:.2f} | {mfu_before:.1%} -> {p.mfu:.1%} | "
                     + (f"{published:.0%}" if published else "-") + " |")
    lines += [
        "",
        "Before, the reduction and the gather were each one message hidden only under one micro-batch's backward",
        "(or forward), and what passed it grew with the ring's (DP - 1) / DP share of the bytes: 0.09 s at 96 GPUs,",
        f"0.64 s at 4,608, where the MFU fell to {GPT3_SCALE[96][2]:.1%}. Now each of the interleaved schedule's eight "
        "chunks is reduced",
        "when its last backward ends, under the later chunks' compute, and NCCL's latency is paid per bucket;",
        "Megatron's buckets grow with DP (1M x DP elements), so past 1,536 GPUs fewer of them pay it: the exposed",
        f"time peaks there and is {now[96].time.dp_seconds:.2f} s at 4,608. The MFU falls from {now[2].mfu:.1%} to "
        f"{now[96].mfu:.1%} over the sweep, as the published",
        "47% to 42%.",
        "",
        "One layout under each framework's traffic: Llama 3.1 70B at TP 2 x DP 973, one sequence of 4,096 per",
        "replica, bf16 on H100 (the rank's 35.3B parameters; NCCL's ring latency over 973 ranks, four per node):",
        "",
        "| Framework | What it moves, and when | Exposed DP, s | Step, s |",
        "|---|---|---|---|",
    ]
    for name, framework, knobs, moves, (dp_before, step_before) in AUDIT_ROWS:
        p = evaluate("llama-3.1-70b", framework=framework, **AUDIT, **knobs)
        lines.append(f"| {name} | {moves} | {dp_before:.3f} -> {p.time.dp_seconds:.3f} | {step_before:.2f} -> "
                     f"{p.step_seconds:.2f} |")
    lines += [
        "",
        "Before, the order ran against the traffic: ZeRO-3, which moves 1.5 times ZeRO-1's bytes in 80 per-layer",
        "collectives on every micro-batch, exposed 0.013 s, and Megatron, which hides its reduction and gather under the",
        "backward and forward, 2.18 s. Now each exposes what its overlap leaves: Megatron least (its reduction and",
        "gather hide under the backward and forward, in 37 buckets of 973M elements), ZeRO-1 its gather inside the",
        "optimizer step, ZeRO-3 and FSDP2 the gathers and reductions past the forward's and backward's compute, with",
        "NCCL's latency on each layer's collectives.",
    ]
    return lines


BEFORE: dict[str, float] = {
    "Llama 3 405B, 8,192 H100": 0.076, "Llama 3 405B, 16,384 H100": 0.064,
    "Llama 3 405B long context, 16,384 H100": 0.202, "Llama 3.1 405B whole pre-training, 16,384 H100": -0.037,
    "DeepSeek-V3 pre-training, 2,048 H800": 0.173,
    "DeepSeek-V3 pre-training, 2,048 H800, Megatron's EP overlap": 0.078,
    "Nemotron-4 340B, 6,144 H100": -0.015, "Megatron-Core GPT-3 175B strong scaling, 4,608 H100": -0.267,
    "OLMo 2 32B, 1,280 H100": -0.124}
"""Each Megatron and torchtitan validation row's error at DP_BEFORE, evaluated as here (steady
states without interruptions; the GPT-3 row in Megatron's 2024 count; Nemotron-4's in its iteration
time, 7.88 s against 8.0 then; DeepSeek-V3's steady too, RATE_TIMES_TOKENS: +18.8% and +9.2% with
the interruptions counted, as its rows read when the issue was filed): before the DP model's NCCL
latency, Megatron's DP-sized buckets and the interleaved schedule's chunked overlap, Ampere's and
DeepSpeed's own efficiencies, Megatron's own bf16 row, torchtitan's compile knob and the whole run's
long-context stage."""


def _row_errors(names: tuple[str, ...]) -> str:
    """Each named calibration row's error (benchmarks/calibrate.py), in the order named."""
    rows = [next(r for r in calibrate.CALIBRATION if name in r[0]) for name in names]
    return " and ".join(f"{e:+.1%}" for e in calibrate.errors(rows))


def _scale_words(got: dict, counted: dict[str, float]) -> list[str]:
    """What the validation rows say of the data-parallel model at scale, from this run's figures
    (`got`: name -> (plan, apsi's figure, the published one); `counted`: RATE_TIMES_TOKENS rows'
    errors with the interruptions counted), and the rows before it."""
    (p8, v8, pub8), (p16, v16, pub16) = got["Llama 3 405B, 8,192 H100"], got["Llama 3 405B, 16,384 H100"]
    lines = [
        "The steady-state rows (every metric but GPU-hours) are evaluated without interruptions, as their runs measured",
        "them and as the calibration rows are (benchmarks/validation.py STEADY); whole-run GPU-hours count them, but",
        "DeepSeek-V3's, a rate times its tokens (RATE_TIMES_TOKENS: with them its rows read "
        f"{' and '.join(f'{e:+.1%}' for e in counted.values())}). Until",
        "the steady-state rows were so evaluated, Llama 3's, Nemotron-4's and OLMo 2's counted apsi's expected",
        "interruptions, which took 1 to 10% off apsi's figures and hid as much of their error (Llama 3's 128K row read",
        "+7.9%, +19.8% so evaluated, before its K and V all-gather was priced).",
        "",
        f"The Megatron and torchtitan rows against apsi at {DP_BEFORE} (benchmarks/validation.py BEFORE), before the DP",
        "model's NCCL latency, Megatron's DP-sized buckets and the interleaved schedule's chunked overlap, Ampere's and",
        "DeepSpeed's own efficiencies, Megatron's own bf16 row, torchtitan's compile knob and the whole run's",
        "long-context stage:",
        "",
        "| Run | Before | Now | |",
        "|---|---|---|---|",
    ]
    further = []
    for name, before in BEFORE.items():
        now = got[name][1] / got[name][2] - 1
        if round(abs(now), 3) > round(abs(before), 3):
            further.append(name)
        verdict = ("further" if round(abs(now), 3) > round(abs(before), 3) else
                   "as near" if round(abs(now), 3) == round(abs(before), 3) else "nearer")
        lines.append(f"| {name} | {before:+.1%} | {now:+.1%} | {verdict} |")
    lines += [
        "",
        f"{len(BEFORE) - len(further)} of {len(BEFORE)} are as near their published figure as before or nearer; "
        + (f"{'; '.join(further)} {'is' if len(further) == 1 else 'are'} further." if further else "none is further."),
        "",
        "The EP overlap hides a share of the all-to-alls, at most the other micro-batch's compute",
        "(apsi.model.steptime.EP_OVERLAP_EFFICIENCY; before, a share of that compute, at most the all-to-alls):",
        f"its two calibration rows read {_row_errors(('Qwen3-235B', 'DeepSeek-V3, 256 GB200'))} (-9.7% and -0.0% before),",
        f"the calibration median {calibrate._median_abs(calibrate.CALIBRATION):.1%} (3.6%). Hopper's FP8 GEMM efficiency, whose four rows include Qwen3's, refits from",
        f"0.585 to {steptime.GEMM_EFFICIENCY['fp8']:g}, and through torchtitan's FP8 ratio and the attention core Megatron's bf16",
        f"from 0.575 to {steptime.GEMM_EFFICIENCY['bf16']:g}, which moves the other rows above. The form was chosen on the",
        "calibration rows alone (the cap binds on none of them).",
        "",
        f"Llama 3's throughput falls {pub16 / pub8 - 1:+.1%} from 8,192 GPUs to 16,384 at one batch (half the",
        f"micro-batches per replica); apsi's falls {v16 / v8 - 1:+.1%}, the bubble {p8.time.bubble_seconds:.2f} s in "
        f"{p8.step_seconds:.1f} and {p16.time.bubble_seconds:.2f} s in {p16.step_seconds:.1f}, the exposed DP time "
        f"{p8.time.dp_seconds:.2f} s and {p16.time.dp_seconds:.2f} s (the published 430 and 400 TFLOP/s, rounded to",
        "10, allow a fall of -5% to -9%). Before, the DP model exposed 0.35 s at both scales, which made the fall -8.0%",
        "and offset part of a level about 10% fast.",
        "",
        *_bf16_words(got),
    ]
    return lines


def _bf16_words(got: dict) -> list[str]:
    """Where the level of the Megatron bf16 H100 rows comes from: the constant behind it and what
    these rows read, from this run's figures (`got` as _scale_words's)."""
    errors = sorted(got[r[0]][1] / got[r[0]][2] - 1 for r in VALIDATION
                    if r[1] == "megatron" and r[3] == "H100" and r[7] == "bf16" and r[9] in STEADY)
    return [
        "Where that level comes from: Megatron's bf16 GEMM efficiency on Hopper "
        f"({steptime.GEMM_EFFICIENCY['bf16']:g}) is fitted on Megatron-Core's",
        "GPT-3 175B on 96 H100 (MLM-DOCS, a calibration row above: its 576 micro-batches per replica leave the",
        "unpublished schedule no weight). Before that row it was inferred from torchtitan's bf16 rows through",
        "torchtitan's FP8 ratio to Megatron (0.61), as if torchtitan's kernels stood to Megatron's alike in bf16 and FP8,",
        "and the steady Megatron bf16 H100 rows read -4.5% to +13.6%, median +6.8%; torchtitan now has a ratio in each",
        "precision under torch.compile, and a share for eager runs (TT-BENCH's bf16 rows ran both; OLMo 2 ran compiled,",
        f"and read -12.6% at the eager rate). The {len(errors)} steady Megatron bf16 H100 rows above read "
        f"{errors[0]:+.1%} to {errors[-1]:+.1%}, median {statistics.median(errors):+.1%}.",
    ]


def _with_serving(text: str) -> str:
    """The training tables, then the serving model's (benchmarks/serving_report.py)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import serving_report

    return text.rstrip("\n") + "\n\n" + "\n".join(serving_report.render())


if __name__ == "__main__":
    text = _with_serving(render())
    if "--check" in sys.argv:
        sys.exit(0 if DOC.read_text(encoding="utf-8") == text else 1)
    DOC.write_text(text, encoding="utf-8")
    print(f"wrote {DOC}", file=sys.stderr)
