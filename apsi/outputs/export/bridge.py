"""The megatron-bridge export: a Python recipe for Megatron-Bridge (NeMo's Megatron training
library), the form its 0.6.2 release documents: a function that builds a ConfigContainer from
recipes.common._pretrain_common and the model's Hugging Face config
(AutoBridge.from_hf_pretrained(repo).to_megatron_provider(load_weights=False), whose bridge
carries the model's RoPE, router and norms over from that config), overrides the fields the
plan sets (MB-RECIPE, MB-GUIDE: cfg.model.*, cfg.train.*, cfg.ddp.*, cfg.comm_overlap), and runs
training.pretrain with the GPT forward step when executed."""

from __future__ import annotations

from apsi.errors import InputError
from apsi.outputs.export import common, megatron
from apsi.outputs.export.checks import docstring_text, py_string


def _split_fields(plan) -> list[str]:
    """The pipeline split as ConfigContainer fields, from the megatron export's arguments."""
    from apsi.outputs.export.megatron import split_arguments

    out = []
    for flag, value in split_arguments(plan):
        if flag == "--account-for-embedding-in-pipeline-split":
            out.append("cfg.model.account_for_embedding_in_pipeline_split = True")
        elif flag == "--account-for-loss-in-pipeline-split":
            out.append("cfg.model.account_for_loss_in_pipeline_split = True")
        elif flag == "--decoder-first-pipeline-num-layers":
            out.append(f"cfg.model.num_layers_in_first_pipeline_stage = {value}")
        elif flag == "--decoder-last-pipeline-num-layers":
            out.append(f"cfg.model.num_layers_in_last_pipeline_stage = {value}")
        elif flag == "--pipeline-model-parallel-layout":
            out.append(f"cfg.model.pipeline_model_parallel_layout = {value!r}")
    return out


def render(plan) -> str:
    repo = common.hf_repo(plan)
    if repo is None and common.changed(plan):
        raise InputError(f"megatron-bridge builds the model from the preset's Hugging Face config (AutoBridge), and "
                         f"the plan changes it ({common.changed(plan)}): export megatron, whose arguments give every "
                         "dimension")
    if repo is None:
        raise InputError("megatron-bridge builds the model from its Hugging Face config (AutoBridge): export a "
                         "preset's plan (apsi models lists them); a size or a local config.json has no repository")
    lay, knobs = plan.layout, plan.framework_knobs
    a = common.architecture(plan)
    recompute = {"none": ["cfg.model.recompute_granularity = None"],
                 "selective": ['cfg.model.recompute_granularity = "selective"',
                               f"cfg.model.recompute_modules = {list(lay.recompute_modules)!r}"],
                 "full": ['cfg.model.recompute_granularity = "full"', 'cfg.model.recompute_method = "uniform"',
                          "cfg.model.recompute_num_layers = 1"]}[lay.recompute]
    precision = {"bf16": "bf16_mixed", "fp16": "fp16_mixed", "fp8": "bf16_with_fp8_current_scaling_mixed"}[plan.precision]
    lines = [
        "cfg = _pretrain_common()",
        # The model provider from the Hugging Face config, random weights (Megatron-Bridge 0.6.2
        # AutoBridge.to_megatron_provider(load_weights=False), as its recipes build cfg.model).
        f"cfg.model = AutoBridge.from_hf_pretrained({py_string(repo)}).to_megatron_provider(load_weights=False)",
        # No dropout, as apsi's activation memory has no dropout masks (megatron.DROPOUT); the
        # provider takes attention_dropout from the config, and hidden_dropout only for some families.
        "cfg.model.hidden_dropout = 0.0",
        "cfg.model.attention_dropout = 0.0",
        f"cfg.model.tensor_model_parallel_size = {lay.tp}",
        f"cfg.model.pipeline_model_parallel_size = {lay.pp}",
        f"cfg.model.virtual_pipeline_model_parallel_size = {lay.vpp if lay.vpp > 1 else None}",
        f"cfg.model.context_parallel_size = {lay.cp}",
        *([f"cfg.model.cp_comm_type = {py_string('all_gather')}"]
          if lay.cp > 1 and plan.framework_knobs.get("cp_comm_type") == "all_gather" else []),
        f"cfg.model.sequence_parallel = {lay.tp > 1 and lay.sequence_parallel}",
    ]
    if a.moe:
        lines += [f"cfg.model.expert_model_parallel_size = {lay.ep}",
                  f"cfg.model.expert_tensor_parallel_size = {lay.etp}"]
        flex = common.flex_backend(plan)
        if flex:
            lines += ['cfg.model.moe_token_dispatcher_type = "flex"',
                      f"cfg.model.moe_flex_dispatcher_backend = {py_string(flex)}",
                      "cfg.model.moe_shared_expert_overlap = False"]
    lines += _split_fields(plan) + [
        f"cfg.model.seq_length = {plan.seq}",
        f"cfg.dataset.seq_length = {plan.seq}",
        "cfg.dataset.blend = None  # PLACEHOLDER: your data, e.g. ([\"/path/to/data_text_document\"], None)",
        f"cfg.train.global_batch_size = {plan.batch_sequences}",
        f"cfg.train.micro_batch_size = {lay.micro_batch_sequences}",
        f"cfg.train.train_iters = {plan.steps}",
        *recompute,
        f"cfg.mixed_precision = get_mixed_precision_config({py_string(precision)})",
    ]
    if plan.precision == "fp8":
        lines.append(f"cfg.mixed_precision.fp8_param_gather = {bool(knobs.get('fp8_param_gather'))}")
    # The optimizer as the plan priced it, in Megatron-Core's names (the megatron export's rule):
    # _pretrain_common's is Adam (MB-CFG: distributed_fused_adam_with_cosine_annealing, optimizer="adam").
    if megatron.optimizer_name(plan) == "sgd":
        lines.append('cfg.optimizer.optimizer = "sgd"')
    # The distributed optimizer in both configs: Bridge turns it on in both when either has it on
    # (MB-CFG: config.py _validate_and_sync_distributed_optimizer_settings), and _pretrain_common's
    # OptimizerConfig has it on, so zero 0 needs it off in both.
    lines += [
        f"cfg.optimizer.use_distributed_optimizer = {lay.zero >= 1}",
        f"cfg.ddp.use_distributed_optimizer = {lay.zero >= 1}",
        "cfg.ddp.overlap_grad_reduce = True",
        f"cfg.ddp.overlap_param_gather = {lay.zero >= 1}",
        f"cfg.ddp.grad_reduce_in_fp32 = {knobs.get('grad_dtype') != 'bf16' and plan.precision != 'fp16'}",
    ]
    if knobs.get("moments_dtype") == "bf16":
        lines += ["cfg.optimizer.use_precision_aware_optimizer = True",
                  "cfg.optimizer.exp_avg_dtype = torch.bfloat16", "cfg.optimizer.exp_avg_sq_dtype = torch.bfloat16"]
    if megatron.eight_bit_moments(plan):  # Megatron's --exp-avg-dtype fp8 is torch.uint8 (map_dtype)
        lines += ["cfg.optimizer.use_precision_aware_optimizer = True",
                  "cfg.optimizer.exp_avg_dtype = torch.uint8", "cfg.optimizer.exp_avg_sq_dtype = torch.uint8"]
    lines += [f"cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap={bool(knobs.get('tp_overlap')) and lay.tp > 1})"]
    if knobs.get("ep_overlap") and megatron._ep_overlap(plan):
        lines += ["cfg.comm_overlap.overlap_moe_expert_parallel_comm = True",
                  "cfg.comm_overlap.delay_wgrad_compute = True", "cfg.model.moe_shared_expert_overlap = False"]
    lines.append("return cfg")
    body = "\n".join("    " + line for line in lines)
    return (common.header(plan, "megatron-bridge")
            + "# Launch on each node:\n"
            + common.launch_comment(plan, "torchrun --nproc-per-node {nproc} --nnodes " + str(plan.nodes)
                                    + " --node-rank {rank} ... this_file.py")
            + "import torch\n\n"
            "from megatron.bridge import AutoBridge\n"
            "from megatron.bridge.recipes.common import _pretrain_common\n"
            "from megatron.bridge.training.comm_overlap import CommOverlapConfig\n"
            "from megatron.bridge.training.config import ConfigContainer\n"
            "from megatron.bridge.training.gpt_step import forward_step\n"
            "from megatron.bridge.training.mixed_precision import get_mixed_precision_config\n"
            "from megatron.bridge.training.pretrain import pretrain\n\n\n"
            "def apsi_pretrain_config() -> ConfigContainer:\n"
            f'    """The plan: {plan.gpus:,} x {docstring_text(plan.gpu)}."""\n'
            f"{body}\n\n\n"
            'if __name__ == "__main__":\n'
            "    pretrain(apsi_pretrain_config(), forward_step)\n")
