"""Reads pretrain_gpt.py argument lists through Megatron-LM's own code: parse_args, validate_args
with the launch's world size, core_transformer_config_from_args, and Megatron-Core's
get_num_layers_to_build for every pipeline rank and virtual stage.

Run by tests/frameworks/harness.py in its own interpreter with the Megatron-LM source tree in
$APSI_MEGATRON_LM: stdin is {case id: {"argv": [...], "world_size": N}}, the last stdout line
{case id: {"values": {...}, "errors": [{"where", "message"}]}}. Only what needs a GPU is stood in
for (gpu_stubs.py); an argument the parser rejects is reported, then the list is read again with
that argument taken out (argv_tools.py) so that every other value is still compared.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys

sys.path.insert(0, os.environ["APSI_MEGATRON_LM"])
sys.path.insert(1, os.path.dirname(os.path.abspath(__file__)))

import argv_tools  # noqa: E402
import gpu_stubs  # noqa: E402

gpu_stubs.install()

from megatron.training.arguments import core_transformer_config_from_args, parse_args, validate_args  # noqa: E402

gpu_stubs.install_transformer_engine()

DEFAULTS = {"tokenizer_type": "GPT2BPETokenizer"}
"""pretrain_gpt.py's args_defaults (core_v0.19.0 pretrain_gpt.py __main__)."""




def _moe_layers(freq, layers: int):
    if isinstance(freq, int):
        return [1 if i % freq == 0 else 0 for i in range(layers)]
    return list(freq)


def _split(config) -> tuple[list[int], list[int]]:
    """Layers of each virtual stage (schedule order: virtual stage v of rank r is v * pp + r) and
    of each rank, as Megatron-Core builds them."""
    from megatron.core.transformer.enums import LayerType
    from megatron.core.transformer.transformer_block import get_num_layers_to_build

    pp = config.pipeline_model_parallel_size
    vpp = config.virtual_pipeline_model_parallel_size or 1
    virtual = [0] * (pp * vpp)
    layout = config.pipeline_model_parallel_layout
    for r in range(pp):
        for v in range(vpp):
            if layout is not None:
                n = layout.layout[r][v].count(LayerType.decoder)
            else:
                n = get_num_layers_to_build(config, vp_stage=v if vpp > 1 else None, pp_rank=r)
            virtual[v * pp + r] = n
    ranks = [sum(virtual[v * pp + r] for v in range(vpp)) for r in range(pp)]
    return virtual, ranks


def check(launch: dict) -> dict:
    errors: list = []
    values: dict = {}
    args = argv_tools.megatron_args(parse_args, validate_args, DEFAULTS, launch, errors)
    if args is None:
        return {"values": values, "errors": errors}
    values.update(
        world_size=args.world_size, dp=getattr(args, "data_parallel_size", None), micro_batch=args.micro_batch_size,
        global_batch=args.global_batch_size, train_iters=args.train_iters, seq_length=args.seq_length,
        rotary_base=float(args.rotary_base), use_distributed_optimizer=args.use_distributed_optimizer,
        optimizer=args.optimizer)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            config = core_transformer_config_from_args(args)
    except BaseException as exc:  # noqa: BLE001 - TransformerConfig.__post_init__ asserts
        argv_tools.record(errors, "core_transformer_config_from_args", exc)
        return {"values": values, "errors": errors}
    values.update(
        tp=config.tensor_model_parallel_size, pp=config.pipeline_model_parallel_size,
        vpp=config.virtual_pipeline_model_parallel_size, cp=config.context_parallel_size,
        sequence_parallel=config.sequence_parallel, num_layers=config.num_layers, hidden=config.hidden_size,
        ffn=config.ffn_hidden_size, heads=config.num_attention_heads, kv_channels=config.kv_channels,
        num_query_groups=config.num_query_groups, bf16=config.bf16, fp16=config.fp16, fp8=config.fp8,
        recompute_granularity=config.recompute_granularity,
        recompute_modules=sorted(config.recompute_modules or []) if config.recompute_granularity == "selective"
        else None, recompute_method=config.recompute_method, recompute_num_layers=config.recompute_num_layers,
        hidden_dropout=config.hidden_dropout, attention_dropout=config.attention_dropout,
        mtp_layers=config.mtp_num_layers, normalization=config.normalization,
        gated_linear_unit=config.gated_linear_unit, add_bias_linear=config.add_bias_linear,
        add_qkv_bias=config.add_qkv_bias, qk_layernorm=config.qk_layernorm,
        untied=args.untie_embeddings_and_output_weights, position_embedding_type=args.position_embedding_type)
    if config.num_moe_experts:
        values.update(
            ep=config.expert_model_parallel_size, etp=config.expert_tensor_parallel_size,
            experts=config.num_moe_experts, topk=config.moe_router_topk, expert_ffn=config.moe_ffn_hidden_size,
            shared_expert_ffn=config.moe_shared_expert_intermediate_size,
            moe_layers=_moe_layers(config.moe_layer_freq, config.num_layers),
            router_groups=config.moe_router_num_groups, router_group_topk=config.moe_router_group_topk)
    if getattr(config, "multi_latent_attention", False):
        values.update(q_lora_rank=config.q_lora_rank, kv_lora_rank=config.kv_lora_rank,
                      qk_head_dim=config.qk_head_dim, qk_pos_emb_head_dim=config.qk_pos_emb_head_dim,
                      v_head_dim=config.v_head_dim)
    if config.pipeline_model_parallel_size > 1:
        try:
            values["virtual_stage_layers"], values["stage_layers"] = _split(config)
        except BaseException as exc:  # noqa: BLE001
            argv_tools.record(errors, "get_num_layers_to_build", exc)
    return {"values": values, "errors": errors}


def main() -> None:
    launches = json.load(sys.stdin)
    out = {cid: check(launch) for cid, launch in launches.items()}
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main()
