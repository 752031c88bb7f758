"""Writes docs/validation.md: published training layouts judged by apsi's framework memory model.

Each row is a run that trained (modelling.md 5.7 and 5.8, with sources), evaluated with its own
layout under the framework it ran on: the most loaded pipeline stage's memory against what the
GPU offers. Nothing here is fitted: the memory model has no constant tuned to these runs (the
reserve is modelling.md 2.5's figure). A row that does not fit is a miss of the model, and the
table says what the model leaves out for it.

    python benchmarks/validation.py          # rewrite docs/validation.md
    python benchmarks/validation.py --check  # exit 1 if docs/validation.md is stale
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from apsi import ApsiError, evaluate  # noqa: E402

DOC = ROOT / "docs" / "validation.md"

# name, preset, GPU, layout knobs, seq, global batch in sequences, precision, source, what it leaves out
# Megatron-Bridge's FP8 current-scaling recipes set fp8_param_gather=True
# (training/mixed_precision.py bf16_with_fp8_current_scaling_mixed); its DeepSeek-V3 recipes set the
# recompute modules and batches of recipes/deepseek/deepseek_v3_perf.py.
FP8CS = dict(fp8_param_gather=True)

RUNS: list[tuple[str, str, str, dict, int, int, str, str, str]] = [
    ("Megatron-Bridge Llama 3.1 405B, 1,024 H100", "llama-3.1-405b", "H100",
     dict(tp=8, pp=8, cp=2, vpp=8, dp=8, **FP8CS), 8192, 1536, "fp8",
     "MB-PERF 26.04.01 / MB-RECIPE llama31_405b_pretrain_1024gpu_h100 (no recompute; FP8 current scaling)", ""),
    ("Megatron-Bridge Llama 3 70B, 64 H100", "llama-3.1-70b", "H100",
     dict(tp=4, pp=8, vpp=5, dp=2, **FP8CS), 8192, 256, "fp8", "MB-PERF 26.02-26.04.01", ""),
    ("Megatron-Bridge Llama 3.1 405B, 256 GB200", "llama-3.1-405b", "GB200",
     dict(tp=4, pp=16, vpp=4, dp=4, **FP8CS), 8192, 1536, "fp8",
     "MB-PERF; perf_recipes llama31_405b_pretrain_256gpu_gb200_fp8cs_config (GBS 1,536, MBS 1)",
     "its base recipe's recompute and offload settings are not known here"),
    ("Megatron-Bridge DeepSeek-V3, 1,024 H100", "deepseek-v3", "H100",
     dict(tp=2, pp=8, vpp=2, ep=64, etp=1, dp=64, recompute="selective", recompute_modules=["mla_up_proj", "mlp"]),
     4096, 16384, "fp8",
     "deepseek_v3_pretrain_v2_1024gpu_h100_fp8cs_config (blockwise FP8, fp8_param_gather off, GBS 16,384; "
     "ETP 1 as MLM-MOE recommends for fine-grained experts)", "FP8 dispatch is not modelled"),
    ("Megatron-Bridge DeepSeek-V3, 256 GB200", "deepseek-v3", "GB200",
     dict(tp=1, pp=4, vpp=4, ep=64, dp=64, recompute="selective", recompute_modules=["mla_up_proj"]), 4096, 2048,
     "fp8", "deepseek_v3_pretrain_256gpu_gb200_fp8mx_config (MXFP8, GBS 2,048)", ""),
    ("Megatron-Bridge Qwen3-235B-A22B, 256 H100", "qwen3-235b-a22b", "H100",
     dict(tp=2, pp=8, vpp=4, ep=32, etp=1, dp=16, **FP8CS), 4096, 8192, "fp8", "MB-PERF 26.04-26.04.01 (ETP 1)", ""),
    ("Llama 3 405B pre-training, 16,384 H100", "llama-3.1-405b", "H100",
     dict(tp=8, pp=16, dp=128), 8192, 2048, "bf16", "L3 Table 4 and Sec. 3.3.2 (16M tokens per batch)",
     "Llama 3 sharded gradients over DP as well (its own FSDP); Megatron keeps an fp32 gradient buffer per replica"),
    ("Llama 3 405B long context, 16,384 H100", "llama-3.1-405b", "H100",
     dict(tp=8, pp=16, cp=16, dp=8), 131072, 128, "bf16", "L3 Table 4 (CP 16, DP 8; 16M tokens per batch)",
     "as the 8K row"),
    ("Nemotron-4 340B, 6,144 H100", "nemotron-4-340b", "H100",
     dict(tp=8, pp=12, dp=64), 4096, 2304, "bf16", "Nemotron-4 340B report, arXiv 2406.11704 (batch 2,304)", ""),
    ("DeepSeek-V3, 2,048 H800 (as H100: 80 GB)", "deepseek-v3", "H100",
     dict(tp=1, pp=16, ep=64, dp=128, recompute="selective", recompute_modules=["layernorm", "mla_up_proj"]),
     4096, 15360, "fp8", "DSV3 Sec. 3.2, 4.2 (batch 15,360); Sec. 3.3.3: RMSNorm and MLA up-projections recomputed",
     "DualPipe's schedule and FP8 caching of the MoE and attention inputs (DSV3 3.3.3) are not modelled"),
]


def row(name, preset, gpu, knobs, seq, batch, precision, source, leaves_out) -> str:
    try:
        p = evaluate(preset, framework="megatron", gpu=gpu, seq=seq, batch=batch * seq, tokens=batch * seq,
                     precision=precision, **knobs)
    except ApsiError as err:
        return f"| {name} | {_layout(knobs)} | error: {err} | | | | {source} |"
    m = p.memory
    verdict = "fits" if p.fits else f"**does not fit** ({leaves_out or 'see the notes'})"
    stages = f"stage {m.peak_stage} of {len(m.stages_gib)}" if len(m.stages_gib) > 1 else "one stage"
    parts = (f"states {m.model_states_gib:.1f} + activations {m.activations_gib:.1f} + logits {m.logits_gib:.1f} "
             f"+ reserve {m.reserve_gib:.1f}")
    return (f"| {name} | {_layout(knobs)}, s {seq:,}, {precision} | {m.total_gib:.1f} GiB ({stages}) | "
            f"{m.usable_gib:.1f} GiB | {verdict} | {parts} | {source} |")


def _layout(knobs: dict) -> str:
    words = []
    for key, value in knobs.items():
        if key == "recompute_modules":
            words.append(f"recompute {'+'.join(value)}")
        elif key == "fp8_param_gather":
            words.append("FP8 param gather" if value else "")
        elif key != "recompute":
            words.append(f"{key.upper()} {value}")
    return " ".join(w for w in words if w)


def render() -> str:
    lines = [
        "# Validation",
        "",
        "Regenerated by `python benchmarks/validation.py`; `tests/test_megatron.py` fails when this file is stale.",
        "Nothing in apsi is fitted to these runs.",
        "",
        "## Memory: published layouts under their framework",
        "",
        "Each run trained, so its layout fits its GPUs. apsi evaluates it with `evaluate(preset, framework=\"megatron\", ...)`",
        "and its own layout. The figure is the most loaded pipeline stage's memory per GPU, and the capacity is the memory the",
        "driver reports (catalog `visible_memory_gib`). \"Does not fit\" is a miss of apsi's model, and the row says what the",
        "model leaves out. States are bf16 weights, fp32 gradients, and the optimizer sharded over DP x CP. The reserve is",
        "2.5 GiB plus 5% of the activations (docs/method.md, \"Frameworks\").",
        "",
        "| Run | Layout | apsi, peak stage | Capacity | Verdict | Parts, GiB | Source |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [row(*r) for r in RUNS]
    lines += [
        "",
        "Not yet evaluated: the torchtitan Llama 3.1 405B benchmark, whose published peaks are 82.5 and 72.7 GiB (TT-BENCH),",
        "and OLMo 2 32B, which trained with FSDP/HSDP. Both need the torchtitan framework, which apsi does not have yet.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    text = render()
    if "--check" in sys.argv:
        sys.exit(0 if DOC.read_text(encoding="utf-8") == text else 1)
    DOC.write_text(text, encoding="utf-8")
    print(f"wrote {DOC}", file=sys.stderr)
