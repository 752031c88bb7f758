"""The deepspeed export: a ds_config JSON (train_batch_size = micro-batch x accumulation x DP, the
ZeRO stage and its buckets, bf16, the fp32 gradient accumulation apsi counts) written by a shell
script that then launches Megatron-DeepSpeed's pretrain_gpt.py with its TP, PP, model, optimizer
and recomputation arguments (DS config-json.md), in Megatron-DeepSpeed's own names (its
megatron/arguments.py at f4157bea, common.VERSIONS), on a hostfile that gives each node its
share of the plan's ranks."""

from __future__ import annotations

import json

from apsi.errors import InputError
from apsi.outputs.export import common
from apsi.outputs.export.megatron import DROPOUT, Args, format_arguments, optimizer_name


def ds_config(plan) -> dict:
    lay = plan.layout
    m = common.micro_batches(plan)
    if plan.precision == "fp8":
        raise InputError("DeepSpeed's ds_config has no FP8 training: plan with precision bf16")
    # Megatron-DeepSpeed builds the optimizer itself from --optimizer, adam (its default) or sgd, in
    # Megatron's names (MDS-OPT: megatron/optimizer/__init__.py get_megatron_optimizer; SGD's
    # --sgd-momentum 0.9 the momentum apsi counts), and hands it to deepspeed.initialize as the
    # client optimizer, which DeepSpeed uses as it is: a ds_config "optimizer" block would be ignored
    # (DS-OPT, engine._configure_optimizer), so the ds_config has none.
    untested = optimizer_name(plan) == "sgd" and lay.zero >= 1
    # overlap_comm and the buckets are the ZeRO optimizer's: stage 0 has none, and gets neither
    # (apsi.training.frameworks.deepspeed.dp_traffic prices its all-reduce after the backward).
    zero: dict = {"stage": lay.zero} if lay.zero == 0 else {
        "stage": lay.zero, "overlap_comm": True, "contiguous_gradients": True,
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
        # fp32 accumulation under ZeRO (at stage 1 under bf16 DeepSpeed's BF16_Optimizer); without
        # ZeRO the engine refuses a gradient dtype other than the model's ("unsupported mix of
        # model_dtype and grad_accum_dtype": engine._do_optimizer_sanity_check), so the model's.
        "data_types": {"grad_accum_dtype": "fp32" if lay.zero else plan.precision},
        # SGD is not one of ZeRO's tested optimizers: DeepSpeed refuses it under ZeRO unless told
        # (DS-OPT: engine._do_optimizer_sanity_check asserts zero_allow_untested_optimizer for an
        # optimizer outside zero/utils.py ZERO_SUPPORTED_OPTIMIZERS, which has Adam and AdamW).
        **({"zero_allow_untested_optimizer": True} if untested else {}),
        "gradient_clipping": 1.0,
        "steps_per_print": 10,
        "wall_clock_breakdown": False,
    }


def _model_arguments(plan) -> tuple[Args, list[str]]:
    """The architecture in Megatron-DeepSpeed's own names (MDS megatron/arguments.py at f4157bea:
    --num-key-value-heads for GQA, --use-rotary-position-embeddings with
    --rotary-position-embeddings-theta, --normalization rmsnorm in lower case, --swiglu,
    --untie-embeddings-and-output-weights, --disable-bias-linear), and what they cannot say."""
    a = common.architecture(plan)
    if a.qk_norm != "none":
        raise InputError("Megatron-DeepSpeed has no QK layernorm: export this model under megatron")
    if a.attention_bias == "qkv" or (a.attention_bias == "all") != a.mlp_bias:
        raise InputError("Megatron-DeepSpeed puts a bias on every linear layer or on none (--disable-bias-linear); the "
                         "model has biases on some only: export this model under megatron")
    if a.norm == "nonparametric":
        raise InputError("Megatron-DeepSpeed has no norm without weights (--normalization layernorm or rmsnorm): "
                         "export this model under megatron")
    notes: list[str] = []
    out: Args = [
        ("--num-layers", str(a.layers)), ("--hidden-size", str(a.width)), ("--ffn-hidden-size", str(a.ffn)),
        ("--num-attention-heads", str(a.heads)), ("--kv-channels", str(a.head_dim)),
        ("--seq-length", str(plan.seq)), ("--max-position-embeddings", str(max(plan.seq, a.position_embeddings))),
        ("--normalization", a.norm),
    ]
    if a.kv_heads != a.heads:
        out.append(("--num-key-value-heads", str(a.kv_heads)))
    if not a.position_embeddings:
        out.append(("--use-rotary-position-embeddings", None))
        theta = a.rope_theta
        if theta is not None and float(theta).is_integer():
            out.append(("--rotary-position-embeddings-theta", str(int(theta))))
        else:
            notes.append(f"the RoPE base (rope_theta {theta}): --rotary-position-embeddings-theta takes a whole "
                         "number; its default 10000 applies")
        if a.rope_scaling is not None:
            notes.append(f"the RoPE scaling {a.rope_scaling.type} (factor {a.rope_scaling.factor}): Megatron-DeepSpeed "
                         "has no RoPE scaling; RoPE runs unscaled")
    activation, unsaid = common.activation_arguments(a, squared_relu=False)
    out += activation
    notes += unsaid
    if not a.tied:
        out.append(("--untie-embeddings-and-output-weights", None))
    if a.attention_bias == "none":
        out.append(("--disable-bias-linear", None))
    out += DROPOUT
    return out, notes


def not_carried(plan) -> tuple[str, ...]:
    """What of the model Megatron-DeepSpeed's arguments cannot say, for the header."""
    return tuple(_model_arguments(plan)[1])


def arguments(plan) -> Args:
    """Megatron-DeepSpeed's arguments: degrees, batch, recomputation, model, data placeholders."""
    lay = plan.layout
    a = common.architecture(plan)
    if a.mla:
        raise InputError("Megatron-DeepSpeed has no multi-latent attention: export this model under megatron")
    if a.moe and (a.shared_experts or a.dense_layers or a.expert_ffn != a.ffn or a.moe_every != 1):
        raise InputError("Megatron-DeepSpeed's MoE (DeepSpeed-MoE) copies the MLP into every layer's experts: it "
                         "cannot express shared experts, leading dense layers or experts narrower than the MLP; export "
                         "this model under megatron")
    if a.moe and (a.expert_groups or a.router_bias or a.router_score == "sigmoid"):
        raise InputError("DeepSpeed-MoE's gate is a softmax top-k: it has no group-limited routing, expert bias or "
                         "sigmoid scores; export this model under megatron")
    # A DeepSpeed plan's selective recomputation names no modules (it has no recompute_modules knob):
    # Megatron-DeepSpeed's own, the attention core.
    if lay.recompute == "selective" and list(lay.recompute_modules) not in ([], ["core_attn"]):
        raise InputError(f"Megatron-DeepSpeed's selective recomputation recomputes the attention core only, and the "
                         f"plan recomputes {' '.join(lay.recompute_modules)}: plan with --recompute full or selective "
                         "core_attn")
    out: Args = [
        ("--tensor-model-parallel-size", str(lay.tp)), ("--pipeline-model-parallel-size", str(lay.pp)),
        ("--micro-batch-size", str(lay.micro_batch_sequences)), ("--global-batch-size", str(plan.batch_sequences)),
        ("--train-iters", str(plan.steps)),
    ]
    if lay.tp > 1 and lay.sequence_parallel:  # the plan's; Megatron-DeepSpeed's default is off (MDS-ARGS)
        out.append(("--sequence-parallel", None))
    if lay.pp == 1:
        out.append(("--no-pipeline-parallel", None))
    if lay.recompute == "full":
        out += [("--checkpoint-activations", None), ("--checkpoint-num-layers", "1")]
    elif lay.recompute == "selective":
        out += [("--recompute-granularity", "selective")]
    out += _model_arguments(plan)[0]
    if a.moe:  # DeepSpeed-MoE, every expert the MLP's width, replicated (no expert parallelism)
        out += [("--num-experts", (str(a.experts),)), ("--topk", str(a.top_k)), ("--moe-expert-parallel-size", "1"),
                ("--mlp-type", "standard")]
    if optimizer_name(plan) == "sgd":  # adam is Megatron-DeepSpeed's default (MDS-OPT)
        out.append(("--optimizer", "sgd"))
    out += [("--bf16", None) if plan.precision == "bf16" else ("--fp16", None),
            ("--zero-stage", str(lay.zero)),
            ("--data-path", ("$DATA_PATH",)), ("--tokenizer-type", "HFTokenizer"), ("--tokenizer-model", "$TOKENIZER"),
            ("--lr", "${LR:-3.0e-4}"),
            ("--deepspeed", None), ("--deepspeed_config", "ds_config.json")]
    return out


def hostfile_shell(plan) -> str:
    """Shell lines writing apsi_hostfile from the first plan.nodes hosts of $HOSTFILE, each with
    its share of the plan's ranks as slots (the last node of a partial plan fewer): DeepSpeed's
    runner starts a host's slots (deepspeed/launcher/runner.py: active_resources from the
    hostfile's slots=; --num_gpus would give every node the same count, so it is not passed)."""
    counts = common.node_ranks(plan)
    slots = " ".join(str(c) for c in counts)
    # In words, run by run ("8 on each"; "8 on 2 hosts, then 4 on 1 host"), not one number a host.
    from apsi.fmt import runs

    slot_runs = runs(counts)
    words = (f"{slot_runs[0][0]} on each" if len(slot_runs) == 1 else
             ", then ".join(f"{c} on {n:,} host{'s' if n != 1 else ''}" for c, n in slot_runs))
    return (f"# The plan's {plan.nodes} hosts from the hostfile, with their slots: {words} ({plan.gpus:,} ranks).\n"
            'HOSTFILE="${HOSTFILE:-hostfile}"\n'
            f"SLOTS=({slots})\n"
            "mapfile -t HOSTS < <(awk 'NF && $1 !~ /^#/ {print $1}' \"$HOSTFILE\")\n"
            f'if [ "${{#HOSTS[@]}}" -lt {plan.nodes} ]; then echo "$HOSTFILE lists ${{#HOSTS[@]}} hosts; '
            f'the plan needs {plan.nodes}" >&2; exit 1; fi\n'
            ": > apsi_hostfile\n"
            f'for i in "${{!SLOTS[@]}}"; do echo "${{HOSTS[$i]}} slots=${{SLOTS[$i]}}" >> apsi_hostfile; done\n')


def render(plan) -> str:
    config = json.dumps(ds_config(plan), indent=2)
    args = arguments(plan)
    return ("#!/bin/bash\n" + common.header(plan, "deepspeed", notes=not_carried(plan))
            + "# Writes ds_config.json and apsi_hostfile (the plan's hosts from HOSTFILE, one per line) and launches\n"
            "# Megatron-DeepSpeed's pretrain_gpt.py from its checkout.\n"
            "set -euo pipefail\n"
            ': "${DATA_PATH:?set DATA_PATH to your preprocessed data prefix}"\n'
            ': "${TOKENIZER:?set TOKENIZER to your Hugging Face tokenizer name or path}"\n'
            + common.heredoc("ds_config.json", config + "\n") + "\n"
            + hostfile_shell(plan)
            + f"deepspeed --hostfile apsi_hostfile --num_nodes {plan.nodes} \\\n"
            f"  pretrain_gpt.py \\\n{format_arguments(args)}\n")
