"""The torchtitan export: a configuration module for torchtitan's current config system (a Python
function returning Trainer.Config, selected with --module/--config; the TOML job files were
replaced in 2026, modelling.md 7.2), deriving from the shipped baseline of the model's flavour and
setting the ParallelismConfig degrees, the pipeline schedule and micro-batches, the tokens per
micro-batch and step, activation checkpointing and float8."""

from __future__ import annotations

from apsi.errors import InputError
from apsi.export import common

FLAVOURS: dict[str, tuple[str, str, str]] = {
    "llama-3.1-8b": ("llama3", "8B", "llama3_8b"),
    "llama-3.1-70b": ("llama3", "70B", "llama3_70b"),
    "llama-3.1-405b": ("llama3", "405B", "llama3_405b"),
    "deepseek-v3": ("deepseek_v3", "671B", "deepseek_v3_671b"),
}
"""apsi preset -> (torchtitan model package, model_registry flavour, its baseline config function)
(torchtitan/models/*/config_registry.py at b5bcd76c)."""


def _layers_per_stage(plan) -> int:
    """The pipeline_parallel_layers_per_stage that gives pp x vpp stages: torchtitan makes
    ceil((L + 2) / it) stages of its L layers and the two one-layer weights of the embedding and
    the output (pipeline_parallel.py); without it a multi-stage schedule has 2 per rank."""
    units = common.architecture(plan).layers + 2
    stages = plan.layout.pp * plan.layout.vpp
    for per in range(1, units + 1):
        if -(-units // per) == stages:
            return per
    raise InputError(f"torchtitan cannot make {stages} pipeline stages of {units - 2} layers with one "
                     "pipeline_parallel_layers_per_stage: plan another vpp")


def render(plan) -> str:
    key = common.preset_key(plan)
    if key not in FLAVOURS:
        have = ", ".join(sorted(FLAVOURS))
        raise InputError(f"torchtitan has no model flavour for {plan.model.name or plan.model.origin}: its llama3 and "
                         f"deepseek_v3 flavours cover the presets {have}")
    package, flavour, baseline = FLAVOURS[key]
    lay = plan.layout
    if lay.etp != 1 and common.architecture(plan).moe:
        raise InputError(f"torchtitan's ParallelismConfig has no expert tensor parallelism (expert_tensor_parallel_degree "
                         f"was removed); the plan has etp {lay.etp}: plan with etp=1")
    m = common.micro_batches(plan)
    schedule = "Interleaved1F1B" if lay.vpp > 1 else "1F1B"
    ac = {"none": "None", "selective": "SelectiveAC.Config()", "full": "FullAC.Config()"}[lay.recompute]
    lines = [
        f"config = {baseline}()",
    ]
    if plan.precision == "fp8":
        lines.append(f'config.model_spec = model_registry("{flavour}", converters=[Float8LinearConverter.Config('
                     'filter_fqns=["lm_head"])])')
    lines += [
        f"config.parallelism.data_parallel_replicate_degree = {lay.dp_replicate}",
        f"config.parallelism.data_parallel_shard_degree = {lay.dp // lay.dp_replicate}",
        f"config.parallelism.tensor_parallel_degree = {lay.tp}",
        f"config.parallelism.context_parallel_degree = {lay.cp}",
        f"config.parallelism.pipeline_parallel_degree = {lay.pp}",
        f"config.parallelism.expert_parallel_degree = {lay.ep}",
    ]
    if lay.pp > 1:
        lines += [f'config.parallelism.pipeline_parallel_schedule = "{schedule}"',
                  f"config.parallelism.num_pp_microbatches = {m}",
                  "config.parallelism.pipeline_parallel_first_stage_less_layers = 1",
                  "config.parallelism.pipeline_parallel_last_stage_less_layers = 1"]
        if lay.vpp > 2:
            lines.append(f"config.parallelism.pipeline_parallel_layers_per_stage = {_layers_per_stage(plan)}")
    lines += [
        f"config.training.num_tokens_per_microbatch_per_dp_rank = {lay.micro_batch_sequences * plan.seq}",
        f"config.training.num_tokens_per_train_step = {plan.batch_tokens}",
        f"config.training.max_context_length = {plan.seq}",
        f"config.training.steps = {plan.steps}",
        f"config.activation_checkpoint = {ac}",
        "return config",
    ]
    body = "\n".join("    " + line for line in lines)
    imports = [f"from torchtitan.models.{package} import model_registry",
               f"from torchtitan.models.{package}.config_registry import {baseline}",
               "from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC",
               "from torchtitan.trainer import Trainer"]
    if plan.precision == "fp8":
        imports.append("from torchtitan.components.quantization import Float8LinearConverter")
    per_node = common.gpus_per_node(plan)
    return (common.header(plan, "torchtitan")
            + "# Save as apsi_plan.py on the PYTHONPATH; on each node:\n"
            f"#   torchrun --nproc-per-node {per_node} --nnodes {plan.nodes} -m torchtitan.train "
            "--module apsi_plan --config apsi_plan\n"
            + "\n".join(imports) + "\n\n\n"
            "def apsi_plan() -> Trainer.Config:\n"
            f'    """The plan: {plan.gpus:,} x {plan.gpu}, {schedule if lay.pp > 1 else "no pipeline"}."""\n'
            f"{body}\n")
