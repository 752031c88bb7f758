"""The deepspeed export: a ds_config JSON (train_batch_size = micro-batch x accumulation x DP, the
ZeRO stage and its buckets, bf16, the fp32 gradient accumulation apsi counts) written by a shell
script that then launches Megatron-DeepSpeed's pretrain_gpt.py with its TP, PP, model and
recomputation arguments (DS config-json.md)."""

from __future__ import annotations

import json

from apsi.errors import InputError
from apsi.export import common
from apsi.export.megatron import format_arguments, model_arguments


def ds_config(plan) -> dict:
    lay = plan.layout
    m = common.micro_batches(plan)
    if plan.precision == "fp8":
        raise InputError("DeepSpeed's ds_config has no FP8 training: plan with precision bf16")
    zero: dict = {"stage": lay.zero, "overlap_comm": True, "contiguous_gradients": True,
                  "reduce_bucket_size": 500_000_000, "allgather_bucket_size": 500_000_000}
    if lay.zero in (1, 2):
        zero["reduce_scatter"] = True
    if lay.zero == 3:
        zero.update({"stage3_prefetch_bucket_size": 500_000_000, "stage3_param_persistence_threshold": 1_000_000})
    return {
        "train_batch_size": plan.batch_sequences,
        "train_micro_batch_size_per_gpu": lay.micro_batch_sequences,
        "gradient_accumulation_steps": m,
        "zero_optimization": zero,
        "bf16": {"enabled": plan.precision == "bf16"},
        "fp16": {"enabled": plan.precision == "fp16"},
        "data_types": {"grad_accum_dtype": "fp32"},
        "gradient_clipping": 1.0,
        "steps_per_print": 10,
        "wall_clock_breakdown": False,
    }


def arguments(plan) -> list[tuple[str, str | None]]:
    """Megatron-DeepSpeed's arguments: degrees, batch, recomputation, model, data placeholders."""
    lay = plan.layout
    a = common.architecture(plan)
    if a.mla:
        raise InputError("Megatron-DeepSpeed has no multi-latent attention: export this model under megatron")
    if a.moe and (a.shared_experts or a.dense_layers or a.expert_ffn != a.ffn or a.moe_every != 1):
        raise InputError("Megatron-DeepSpeed's MoE (DeepSpeed-MoE) copies the MLP into every layer's experts: it "
                         "cannot express shared experts, leading dense layers or experts narrower than the MLP; export "
                         "this model under megatron")
    out: list[tuple[str, str | None]] = [
        ("--tensor-model-parallel-size", str(lay.tp)), ("--pipeline-model-parallel-size", str(lay.pp)),
        ("--micro-batch-size", str(lay.micro_batch_sequences)), ("--global-batch-size", str(plan.batch_sequences)),
        ("--train-iters", str(plan.steps)),
    ]
    if lay.tp > 1:
        out.append(("--sequence-parallel", None))
    if lay.pp == 1:
        out.append(("--no-pipeline-parallel", None))
    if lay.recompute == "full":
        out += [("--checkpoint-activations", None), ("--checkpoint-num-layers", "1")]
    elif lay.recompute == "selective":
        out += [("--recompute-granularity", "selective")]
    out += [x for x in model_arguments(plan) if x[0] not in ("--moe-grouped-gemm", "--moe-token-dispatcher-type",
                                                              "--moe-layer-freq", "--num-experts", "--moe-router-topk",
                                                              "--moe-ffn-hidden-size")]
    if a.moe:  # DeepSpeed-MoE, every expert the MLP's width, replicated (no expert parallelism)
        out += [("--num-experts", str(a.experts)), ("--topk", str(a.top_k)), ("--moe-expert-parallel-size", "1"),
                ("--mlp-type", "standard")]
    out += [("--bf16", None) if plan.precision == "bf16" else ("--fp16", None),
            ("--zero-stage", str(lay.zero)),
            ("--data-path", "$DATA_PATH"), ("--tokenizer-type", "HFTokenizer"), ("--tokenizer-model", "$TOKENIZER"),
            ("--lr", "${LR:-3.0e-4}"),
            ("--deepspeed", None), ("--deepspeed_config", "ds_config.json")]
    return out


def render(plan) -> str:
    config = json.dumps(ds_config(plan), indent=2)
    per_node = common.gpus_per_node(plan)
    return ("#!/bin/bash\n" + common.header(plan, "deepspeed")
            + "# Writes ds_config.json and launches Megatron-DeepSpeed's pretrain_gpt.py from its checkout; the\n"
            "# hostfile lists the plan's nodes with slots=" + str(per_node) + ".\n"
            "set -euo pipefail\n"
            ': "${DATA_PATH:?set DATA_PATH to your preprocessed data prefix}"\n'
            ': "${TOKENIZER:?set TOKENIZER to your Hugging Face tokenizer name or path}"\n'
            "cat > ds_config.json <<'EOF'\n" + config + "\nEOF\n\n"
            f"deepspeed --hostfile \"${{HOSTFILE:-hostfile}}\" --num_nodes {plan.nodes} --num_gpus {per_node} \\\n"
            f"  pretrain_gpt.py \\\n{format_arguments(arguments(plan))}\n")
