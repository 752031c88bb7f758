"""The megatron export: a shell script calling Megatron-LM's pretrain_gpt.py with every parallel,
model, batch, precision, recomputation and overlap argument the plan implies (MLM-ARGS
export names). The split goes over as Megatron spells it: nothing for an even split,
--account-for-embedding/loss-in-pipeline-split, --decoder-first/last-pipeline-num-layers, or, with
MTP blocks counted as a layer, --pipeline-model-parallel-layout."""

from __future__ import annotations

import shlex

from apsi.errors import InputError
from apsi.export import common


def split_arguments(plan) -> list[tuple[str, str | None]]:
    """The pipeline arguments that give Megatron the plan's split, and its virtual stages."""
    a = common.architecture(plan)
    lay = plan.layout
    pp, vpp, split = lay.pp, lay.vpp, list(lay.virtual_stage_layers)
    out: list[tuple[str, str | None]] = []
    if pp == 1:
        return out
    chunks = pp * vpp
    if len(split) != chunks or sum(split) != a.layers:
        raise InputError(f"the plan's split {split} is not {pp} x {vpp} virtual stages of its {a.layers} layers: "
                         "export a plan from this apsi version")
    mtp = a.mtp_layers
    if len(set(split)) == 1:
        pass  # even: Megatron's default
    else:
        accounted = None
        for embedding, loss in ((1, 1), (1, 0), (0, 1)):
            units = a.layers + embedding + loss + (mtp if loss else 0)
            if units % chunks == 0:
                sizes = [units // chunks] * chunks
                sizes[0] -= embedding
                sizes[-1] -= loss + (mtp if loss else 0)
                if sizes == split:
                    accounted = (embedding, loss)
                    break
        if accounted is not None and not (mtp and accounted[1]):
            if accounted[0]:
                out.append(("--account-for-embedding-in-pipeline-split", None))
            if accounted[1]:
                out.append(("--account-for-loss-in-pipeline-split", None))
        elif accounted is not None or mtp:
            # MTP blocks counted as a layer of the last stage: only the free-form layout says so.
            stages = []
            for j, n in enumerate(split):
                stages.append(("E" if j == 0 else "") + "t" * n + ("m" * mtp + "L" if j == chunks - 1 else ""))
            return [("--pipeline-model-parallel-layout", "|".join(stages))]
        else:
            ranks = lay.stage_layers
            middle = set(ranks[1:-1])
            if len(middle) > 1:
                raise InputError(f"Megatron cannot take the split {ranks}: only its first and last stages may differ "
                                 "(--decoder-first/last-pipeline-num-layers)")
            out += [("--decoder-first-pipeline-num-layers", str(ranks[0])),
                    ("--decoder-last-pipeline-num-layers", str(ranks[-1]))]
    if vpp > 1:
        out.append(("--num-virtual-stages-per-pipeline-rank", str(vpp)))
    return out


def model_arguments(plan) -> list[tuple[str, str | None]]:
    """The architecture as Megatron's model arguments (MLM-ARGS)."""
    a = common.architecture(plan)
    out: list[tuple[str, str | None]] = [
        ("--num-layers", str(a.layers)), ("--hidden-size", str(a.width)), ("--ffn-hidden-size", str(a.ffn)),
        ("--num-attention-heads", str(a.heads)), ("--kv-channels", str(a.head_dim)),
        ("--seq-length", str(plan.seq)), ("--max-position-embeddings", str(max(plan.seq, a.position_embeddings))),
        ("--normalization", "RMSNorm" if a.norm == "rmsnorm" else "LayerNorm"),
        ("--position-embedding-type", "rope" if a.position_embeddings == 0 else "learned_absolute"),
    ]
    if a.kv_heads != a.heads and not a.mla:
        out += [("--group-query-attention", None), ("--num-query-groups", str(a.kv_heads))]
    if a.mlp == "swiglu":
        out.append(("--swiglu", None))
    if not a.tied:
        out.append(("--untie-embeddings-and-output-weights", None))
    if a.attention_bias == "none" and not a.mlp_bias:
        out.append(("--disable-bias-linear", None))
    elif a.attention_bias == "qkv":
        out += [("--disable-bias-linear", None), ("--add-qkv-bias", None)]
    if a.qk_norm != "none":
        out.append(("--qk-layernorm", None))
    if a.moe:
        flex = common.flex_backend(plan)
        out += [("--num-experts", str(a.experts)), ("--moe-router-topk", str(a.top_k)),
                ("--moe-ffn-hidden-size", str(a.expert_ffn)), ("--moe-grouped-gemm", None),
                ("--moe-token-dispatcher-type", "flex" if flex else "alltoall"),
                ("--moe-layer-freq", common.moe_layer_pattern(a))]
        if flex:
            out.append(("--moe-flex-dispatcher-backend", flex))
        if a.shared_experts:
            out.append(("--moe-shared-expert-intermediate-size", str(a.shared_experts * a.shared_expert_ffn)))
    if a.mla:
        out += [("--multi-latent-attention", None), ("--kv-lora-rank", str(a.kv_lora_rank)),
                ("--qk-head-dim", str(a.qk_nope_dim)), ("--qk-pos-emb-head-dim", str(a.qk_rope_dim)),
                ("--v-head-dim", str(a.v_head_dim))]
        if a.q_lora_rank:
            out.append(("--q-lora-rank", str(a.q_lora_rank)))
    if a.mtp_layers:
        out.append(("--mtp-num-layers", str(a.mtp_layers)))
    return out


def parallel_arguments(plan) -> list[tuple[str, str | None]]:
    """Degrees, batch and recomputation."""
    lay = plan.layout
    out: list[tuple[str, str | None]] = [
        ("--tensor-model-parallel-size", str(lay.tp)), ("--pipeline-model-parallel-size", str(lay.pp)),
        ("--context-parallel-size", str(lay.cp)),
    ]
    if lay.tp > 1:
        out.append(("--sequence-parallel", None))
    if common.architecture(plan).moe:
        out += [("--expert-model-parallel-size", str(lay.ep)), ("--expert-tensor-parallel-size", str(lay.etp))]
    out += split_arguments(plan)
    out += [("--micro-batch-size", str(lay.micro_batch_sequences)), ("--global-batch-size", str(plan.batch_sequences)),
            ("--train-iters", str(plan.steps))]
    if lay.recompute == "selective":
        out += [("--recompute-granularity", "selective"), ("--recompute-modules", " ".join(lay.recompute_modules))]
    elif lay.recompute == "full":
        out += [("--recompute-granularity", "full"), ("--recompute-method", "uniform"), ("--recompute-num-layers", "1")]
    return out


def precision_arguments(plan) -> list[tuple[str, str | None]]:
    """Precision, the optimizer's dtypes, the distributed optimizer and the overlaps."""
    knobs = plan.framework_knobs
    out: list[tuple[str, str | None]] = [("--fp16", None)] if plan.precision == "fp16" else [("--bf16", None)]
    if plan.precision == "fp8":
        out += [("--fp8-format", "hybrid"), ("--fp8-recipe", "tensorwise")]
        if knobs.get("fp8_param_gather"):
            out.append(("--fp8-param-gather", None))
    if knobs.get("grad_dtype") == "bf16":
        out.append(("--grad-reduce-in-bf16", None))
    if knobs.get("moments_dtype") == "bf16":
        out += [("--use-precision-aware-optimizer", None), ("--exp-avg-dtype", "bf16"), ("--exp-avg-sq-dtype", "bf16")]
    if plan.optimizer != "adamw":
        raise InputError(f"Megatron-LM trains with Adam (and SGD), and apsi exports adamw only; the plan's optimizer is "
                         f"{plan.optimizer}")
    if plan.layout.zero >= 1:
        out += [("--use-distributed-optimizer", None), ("--overlap-grad-reduce", None), ("--overlap-param-gather", None)]
    else:
        out.append(("--overlap-grad-reduce", None))
    if knobs.get("tp_overlap") and plan.layout.tp > 1:
        out.append(("--tp-comm-overlap", None))
    if knobs.get("ep_overlap") and _ep_overlap(plan):
        out += [("--overlap-moe-expert-parallel-comm", None), ("--delay-wgrad-compute", None)]
    return out


def _ep_overlap(plan) -> bool:
    """Whether the plan's layout runs Megatron's EP A2A overlap (apsi.frameworks.megatron)."""
    from apsi.frameworks import megatron

    lay = plan.layout
    return megatron.ep_overlap_allowed(dict(ep=lay.ep, pp=lay.pp, vpp=lay.vpp, recompute=lay.recompute,
                                            recompute_modules=lay.recompute_modules))


def arguments(plan) -> list[tuple[str, str | None]]:
    """Every pretrain_gpt.py argument of the plan, data and tokenizer as placeholders."""
    return (parallel_arguments(plan) + model_arguments(plan) + precision_arguments(plan)
            + [("--data-path", "$DATA_PATH"), ("--tokenizer-type", "HuggingFaceTokenizer"),
               ("--tokenizer-model", "$TOKENIZER"), ("--lr", "${LR:-3.0e-4}"), ("--lr-decay-style", "cosine"),
               ("--log-interval", "10")])


def format_arguments(args: list[tuple[str, str | None]], indent: str = "    ") -> str:
    lines = []
    for flag, value in args:
        if value is None:
            lines.append(f"{indent}{flag}")
        elif value.startswith("$"):
            lines.append(f'{indent}{flag} "{value}"')
        else:
            lines.append(f"{indent}{flag} {shlex.quote(value)}")
    return " \\\n".join(lines)


def launcher(plan, srun: bool = False) -> str:
    """torchrun on every node (under srun, one task per node with Slurm's node rank)."""
    per_node = common.gpus_per_node(plan)
    rank = "$SLURM_NODEID" if srun else "${NODE_RANK:-0}"
    return (f"torchrun --nproc-per-node {per_node} --nnodes {plan.nodes} --node-rank {rank} "
            '--master-addr "${MASTER_ADDR:-localhost}" --master-port "${MASTER_PORT:-6000}" \\\n'
            f"  pretrain_gpt.py \\\n{format_arguments(arguments(plan))}\n")


def render(plan) -> str:
    return ("#!/bin/bash\n" + common.header(plan, "megatron")
            + "# Run from a Megatron-LM checkout on each of the plan's nodes (NODE_RANK 0 to "
            f"{plan.nodes - 1}, MASTER_ADDR the first node).\n"
            "set -euo pipefail\n"
            ': "${DATA_PATH:?set DATA_PATH to your preprocessed data prefix}"\n'
            ': "${TOKENIZER:?set TOKENIZER to your Hugging Face tokenizer name or path}"\n'
            "export CUDA_DEVICE_MAX_CONNECTIONS=1\n\n" + launcher(plan))
