"""The megatron export: a shell script calling Megatron-LM's pretrain_gpt.py with every parallel,
model, batch, precision, recomputation and overlap argument the plan implies (MLM-ARGS
export names). The split goes over as Megatron spells it: nothing for an even split,
--account-for-embedding/loss-in-pipeline-split, --decoder-first/last-pipeline-num-layers, or, with
MTP blocks counted as a layer, --pipeline-model-parallel-layout."""

from __future__ import annotations

import shlex

from apsi.errors import InputError, brief
from apsi.outputs.export import common
from apsi.outputs.export.checks import comment_text, unprintable

Args = list[tuple[str, str | tuple[str, ...] | None]]
"""(flag, value) pairs: a flag alone (None), one value, or a list flag's values (nargs='+'),
each value its own shell argument."""


def split_arguments(plan) -> Args:
    """The pipeline arguments that give Megatron the plan's split, and its virtual stages."""
    a = common.architecture(plan)
    lay = plan.layout
    pp, vpp, split = lay.pp, lay.vpp, list(lay.virtual_stage_layers)
    out: Args = []
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


DROPOUT = [("--hidden-dropout", "0"), ("--attention-dropout", "0")]
"""No dropout: apsi's activation memory keeps no dropout mask (apsi.model.memory's
attention_activation_bytes and mlp_activation_bytes list every tensor a layer keeps, and no mask
is among them), and Megatron's TransformerConfig drops 0.1 of both by default (MLM-TC
hidden_dropout, attention_dropout)."""

LLAMA3_FIXED = dict(low_freq_factor=1.0, high_freq_factor=4.0, original_context=8192)
"""What Megatron's Llama 3 RoPE scaling fixes: --use-rope-scaling takes only the factor
(core_v0.19.0 rotary_pos_embedding.py _apply_scaling: low 1, high 4, original 8192)."""
MLA_YARN_FIXED = dict(original_context=4096, beta_fast=32.0, beta_slow=1.0)
"""What Megatron's MLA YaRN takes from MLATransformerConfig's defaults, with no argument for them
at core_v0.19.0 (transformer_config.py: original_max_position_embeddings 4096, beta_fast 32,
beta_slow 1)."""


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def rope_arguments(a) -> tuple[Args, list[str]]:
    """The RoPE base and scaling as Megatron's arguments (MLM-ARGS at core_v0.19.0), and what they
    cannot say. Ordinary attention: --position-embedding-type rope, --rotary-base, and for Llama
    3's bands --use-rope-scaling --rope-scaling-factor; YaRN: --position-embedding-type yarn with
    its --yarn-* arguments. MLA builds its own rotary embedding from --rope-type (yarn by default)
    with --rotary-scaling-factor, --mscale and --mscale-all-dim."""
    if a.position_embeddings:
        return [("--position-embedding-type", "learned_absolute")], []
    notes: list[str] = []
    out: Args = []
    theta = a.rope_theta
    rs = a.rope_scaling
    if a.mla:
        out.append(("--position-embedding-type", "rope"))
    if theta is None:
        notes.append("the RoPE base (rope_theta) is not in the model's description: Megatron's --rotary-base "
                     "default 10000 applies")
    elif float(theta).is_integer():
        out.append(("--rotary-base", str(int(theta))))
    else:
        notes.append(f"rope_theta {theta} is not a whole number and Megatron's --rotary-base takes one; its default "
                     "10000 applies")
    if rs is None:
        if a.mla:  # MLA defaults to YaRN; plain RoPE needs the unfused kernel (MLATransformerConfig)
            out += [("--rope-type", "rope"), ("--no-rope-fusion", None)]
        else:
            out.insert(0, ("--position-embedding-type", "rope"))
        return out, notes
    if rs.type == "llama3" and not a.mla:
        out.insert(0, ("--position-embedding-type", "rope"))
        out += [("--use-rope-scaling", None), ("--rope-scaling-factor", _number(rs.factor))]
        fixed = {k: v for k, v in LLAMA3_FIXED.items() if getattr(rs, k) not in (None, v)}
        if fixed:
            notes.append(f"the Llama 3 RoPE scaling's {', '.join(f'{k} {getattr(rs, k)}' for k in fixed)}: Megatron "
                         f"fixes {', '.join(f'{k} {v}' for k, v in LLAMA3_FIXED.items() if k in fixed)}")
    elif rs.type == "yarn" and a.mla:
        out += [("--rope-type", "yarn"), ("--rotary-scaling-factor", _number(rs.factor))]
        out += [(flag, _number(v)) for flag, v in (("--mscale", rs.mscale), ("--mscale-all-dim", rs.mscale_all_dim))
                if v is not None]
        fixed = {k: v for k, v in MLA_YARN_FIXED.items() if getattr(rs, k) not in (None, v)}
        if fixed:
            notes.append(f"the YaRN {', '.join(f'{k} {getattr(rs, k)}' for k in fixed)}: Megatron's MLA takes "
                         f"{', '.join(f'{k} {v}' for k, v in MLA_YARN_FIXED.items() if k in fixed)}")
    elif rs.type == "yarn":
        out.insert(0, ("--position-embedding-type", "yarn"))
        out.append(("--rotary-scaling-factor", _number(rs.factor)))
        out += [(flag, _number(v)) for flag, v in (
            ("--yarn-original-max-position-embeddings", rs.original_context), ("--yarn-beta-fast", rs.beta_fast),
            ("--yarn-beta-slow", rs.beta_slow), ("--mscale", rs.mscale), ("--mscale-all-dim", rs.mscale_all_dim))
            if v is not None]
    else:
        out.insert(0, ("--position-embedding-type", "rope"))
        notes.append(f"the RoPE scaling {rs.type} (factor {rs.factor}): Megatron's arguments have Llama 3's and "
                     "YaRN's only; RoPE runs unscaled")
    return out, notes


def router_arguments(a) -> Args:
    """The router as the model has it (MLM-TC at core_v0.19.0): its score function, the expert bias
    of aux-loss-free balancing (sigmoid only), group-limited routing (moe_router_num_groups of
    which each token uses moe_router_group_topk; DeepSeek-V3: 8 and 4, DSV3 Sec. 2.1.2) and the
    routed weights' scaling factor."""
    out: Args = []
    if a.router_score is not None:
        out.append(("--moe-router-score-function", a.router_score))
    if a.router_bias:
        out.append(("--moe-router-enable-expert-bias", None))
    if a.expert_groups:
        out += [("--moe-router-num-groups", str(a.expert_groups)),
                ("--moe-router-group-topk", str(a.expert_group_topk))]
    if a.router_scale is not None:
        out.append(("--moe-router-topk-scaling-factor", _number(a.router_scale)))
    return out


def not_carried(plan) -> tuple[str, ...]:
    """What of the model the megatron arguments cannot say, for the header."""
    a = common.architecture(plan)
    notes = rope_arguments(a)[1] + common.activation_arguments(a, squared_relu=True)[1]
    if a.norm == "nonparametric":
        # Megatron's --normalization is LayerNorm or RMSNorm, each with learned weights.
        held = ("the model's norms have no weights (the plan counts none)" if a.norms_per_layer
                else "the model has no norms in the plan (a size: the reference shape rule)")
        notes.append(f"{held}: Megatron's --normalization LayerNorm learns a scale and a bias, 2 x {a.width:,} "
                     "parameters a norm, which the plan does not count")
    if a.vocab == 0:
        notes.append("the model has no vocabulary in the plan (a size: the reference shape rule): the TOKENIZER's "
                     f"vocabulary V adds an embedding of V x {a.width:,} parameters (the output layer shares it, "
                     "Megatron's default), which the plan does not count")
    return tuple(notes)


def model_arguments(plan) -> Args:
    """The architecture as Megatron's model arguments (MLM-ARGS at core_v0.19.0)."""
    a = common.architecture(plan)
    out: Args = [
        ("--num-layers", str(a.layers)), ("--hidden-size", str(a.width)), ("--ffn-hidden-size", str(a.ffn)),
        ("--num-attention-heads", str(a.heads)), ("--kv-channels", str(a.head_dim)),
        ("--seq-length", str(plan.seq)), ("--max-position-embeddings", str(max(plan.seq, a.position_embeddings))),
        ("--normalization", "RMSNorm" if a.norm == "rmsnorm" else "LayerNorm"),
    ]
    out += rope_arguments(a)[0]
    if a.kv_heads != a.heads and not a.mla:
        out += [("--group-query-attention", None), ("--num-query-groups", str(a.kv_heads))]
    out += common.activation_arguments(a, squared_relu=True)[0]
    if not a.tied and a.vocab:  # no vocabulary planned: Megatron's own default, nothing asked
        out.append(("--untie-embeddings-and-output-weights", None))
    if a.attention_bias == "none" and not a.mlp_bias:
        out.append(("--disable-bias-linear", None))
    elif a.attention_bias == "qkv":
        out += [("--disable-bias-linear", None), ("--add-qkv-bias", None)]
    # Megatron's qk_layernorm: the per-head q/k norms, or under MLA the norms on the query and
    # key-value latents (DeepSeek-V3's q_a_layernorm and kv_a_layernorm, which apsi counts;
    # Megatron-Bridge deepseek_v3_bridge.py sets qk_layernorm for them).
    if a.qk_norm != "none" or a.mla:
        out.append(("--qk-layernorm", None))
    out += DROPOUT
    if a.moe:
        flex = common.flex_backend(plan)
        out += [("--num-experts", str(a.experts)), ("--moe-router-topk", str(a.top_k)),
                ("--moe-ffn-hidden-size", str(a.expert_ffn)), ("--moe-grouped-gemm", None),
                ("--moe-token-dispatcher-type", "flex" if flex else "alltoall"),
                ("--moe-layer-freq", common.moe_layer_pattern(a))]
        if flex:
            out.append(("--moe-flex-dispatcher-backend", flex))
        out += router_arguments(a)
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


def parallel_arguments(plan) -> Args:
    """Degrees, batch and recomputation."""
    lay = plan.layout
    out: Args = [
        ("--tensor-model-parallel-size", str(lay.tp)), ("--pipeline-model-parallel-size", str(lay.pp)),
        ("--context-parallel-size", str(lay.cp)),
    ]
    if lay.cp > 1 and plan.framework_knobs.get("cp_comm_type") == "all_gather":  # Megatron's default is p2p
        out.append(("--cp-comm-type", "all_gather"))
    if lay.tp > 1 and lay.sequence_parallel:  # the plan's (Megatron turns it off itself at TP 1)
        out.append(("--sequence-parallel", None))
    if common.architecture(plan).moe:
        out += [("--expert-model-parallel-size", str(lay.ep)), ("--expert-tensor-parallel-size", str(lay.etp))]
    out += split_arguments(plan)
    out += [("--micro-batch-size", str(lay.micro_batch_sequences)), ("--global-batch-size", str(plan.batch_sequences)),
            ("--train-iters", str(plan.steps))]
    if lay.recompute == "selective":
        out += [("--recompute-granularity", "selective"), ("--recompute-modules", tuple(lay.recompute_modules))]
    elif lay.recompute == "full":
        out += [("--recompute-granularity", "full"), ("--recompute-method", "uniform"), ("--recompute-num-layers", "1")]
    return out


def optimizer_name(plan) -> str:
    """Megatron-Core's name for the plan's optimizer (OptimizerConfig.optimizer, --optimizer; MLM-OPT
    at core_v0.19.0): adamw is its default "adam" (decoupled_weight_decay True: AdamW), and so is
    adam8bit, its moments in 8 bits (eight_bit_moments); sgd is "sgd", whose --sgd-momentum 0.9 keeps
    the fp32 momentum apsi counts. Which ZeRO stage each runs under is the plan's rule
    (megatron.zero_ok: SGD without the distributed optimizer, 8-bit moments with it), which the
    export's plan check holds."""
    return {"adamw": "adam", "adam8bit": "adam", "sgd": "sgd"}[plan.optimizer]


def eight_bit_moments(plan) -> bool:
    """Whether the plan's Adam keeps its moments in 8 bits (adam8bit, as apsi counts them: 1 byte
    each beside the fp32 master, megatron.SHARDED_BYTES): Megatron-Core's precision-aware optimizer
    (Transformer Engine's FusedAdam) with --exp-avg-dtype fp8 and --exp-avg-sq-dtype fp8, stored as
    torch.uint8 (MLM-ARGS: arguments.py map_dtype; MLM-OPT)."""
    return plan.optimizer == "adam8bit"


def precision_arguments(plan) -> Args:
    """Precision, the optimizer's dtypes, the distributed optimizer and the overlaps."""
    knobs = plan.framework_knobs
    out: Args = [("--fp16", None)] if plan.precision == "fp16" else [("--bf16", None)]
    if plan.precision == "fp8":
        out += [("--fp8-format", "hybrid"), ("--fp8-recipe", "tensorwise")]
        if knobs.get("fp8_param_gather"):
            out.append(("--fp8-param-gather", None))
    if knobs.get("grad_dtype") == "bf16":
        out.append(("--grad-reduce-in-bf16", None))
    if knobs.get("moments_dtype") == "bf16":
        out += [("--use-precision-aware-optimizer", None), ("--exp-avg-dtype", "bf16"), ("--exp-avg-sq-dtype", "bf16")]
    if eight_bit_moments(plan):
        out += [("--use-precision-aware-optimizer", None), ("--exp-avg-dtype", "fp8"), ("--exp-avg-sq-dtype", "fp8")]
    if optimizer_name(plan) == "sgd":
        out += [("--optimizer", "sgd")]  # --sgd-momentum's default 0.9 keeps the momentum apsi counts
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
    """Whether the plan's layout runs Megatron's EP A2A overlap (apsi.training.frameworks.megatron)."""
    from apsi.training.frameworks import megatron

    lay = plan.layout
    return megatron.ep_overlap_allowed(dict(ep=lay.ep, pp=lay.pp, vpp=lay.vpp, recompute=lay.recompute,
                                            recompute_modules=lay.recompute_modules))


def arguments(plan) -> Args:
    """Every pretrain_gpt.py argument of the plan, data and tokenizer as placeholders."""
    return (parallel_arguments(plan) + model_arguments(plan) + precision_arguments(plan)
            + [("--data-path", "$DATA_PATH"), ("--tokenizer-type", "HuggingFaceTokenizer"),
               ("--tokenizer-model", "$TOKENIZER"), ("--lr", "${LR:-3.0e-4}"), ("--lr-decay-style", "cosine"),
               ("--log-interval", "10")])


PLACEHOLDERS = ("$DATA_PATH", "$TOKENIZER", "${LR:-3.0e-4}")
"""The shell variables the exports leave to the user (common.PLACEHOLDERS): the only values
written unquoted for the shell to expand, each inside double quotes."""


def _word(value: str) -> str:
    """One shell word: one of apsi's placeholders (PLACEHOLDERS) in double quotes, expanded where
    the script runs; anything else quoted with shlex.quote, so that the shell takes it as it is
    (a value from the plan that starts with $ is not expanded). A value with a character that is
    not printable is refused: quoted, a newline is still a new line of the file, and inside the
    slurm export's here-documents a line of its own could end one."""
    if value in PLACEHOLDERS:
        return f'"{value}"'
    if unprintable(value) is not None:
        raise InputError(f"the argument value {comment_text(brief(value))} holds a character that is not printable; a "
                         "launch script takes printable values only")
    return shlex.quote(value)


def format_arguments(args: Args, indent: str = "    ") -> str:
    """One argument per line, a list flag's values each its own shell word (Megatron's list
    arguments are nargs='+': `--recompute-modules core_attn mlp`, never one quoted string)."""
    lines = []
    for flag, value in args:
        if value is None:
            lines.append(f"{indent}{flag}")
        elif isinstance(value, tuple):
            lines.append(" ".join([f"{indent}{flag}", *(_word(v) for v in value)]))
        else:
            lines.append(f"{indent}{flag} {_word(value)}")
    return " \\\n".join(lines)


def torchrun(plan, rank: str, script: str = "pretrain_gpt.py", master: str = '"${MASTER_ADDR:-localhost}"',
             port: str = '"${MASTER_PORT:-6000}"') -> str:
    """The torchrun line of one node: NPROC ranks (nproc_shell sets it) as node `rank` of the
    plan's nodes."""
    return (f'torchrun --nproc-per-node "$NPROC" --nnodes {plan.nodes} --node-rank "{rank}" '
            f"--master-addr {master} --master-port {port} \\\n  {script}")


def launcher(plan) -> str:
    """torchrun on this node (NODE_RANK), with this node's share of the plan's ranks."""
    return ('NODE_RANK="${NODE_RANK:-0}"\n' + common.nproc_shell(plan, "$NODE_RANK")
            + torchrun(plan, "$NODE_RANK") + f" \\\n{format_arguments(arguments(plan))}\n")


def render(plan) -> str:
    return ("#!/bin/bash\n" + common.header(plan, "megatron", notes=not_carried(plan))
            + "# Run from a Megatron-LM checkout on each of the plan's nodes (NODE_RANK 0 to "
            f"{plan.nodes - 1}, MASTER_ADDR the first node).\n"
            "set -euo pipefail\n"
            ': "${DATA_PATH:?set DATA_PATH to your preprocessed data prefix}"\n'
            ': "${TOKENIZER:?set TOKENIZER to your Hugging Face tokenizer name or path}"\n'
            "export CUDA_DEVICE_MAX_CONNECTIONS=1\n\n" + launcher(plan))
