"""The torchtitan export: a configuration module for the config system of torchtitan 0.3, the
release on the package registry (a Python function returning Trainer.Config, selected with
--module/--config; the TOML job files were replaced in 2026, TT-CFG README), deriving from the
shipped baseline of the model's flavour and setting the ParallelismConfig degrees, the pipeline
schedule and micro-batch, the local and global batch and sequence length, activation
checkpointing, float8 and torch.compile. (Later commits rename the batch fields to token counts,
num_tokens_per_microbatch_per_dp_rank; 0.3.0 has local_batch_size.)"""

from __future__ import annotations

from apsi.errors import InputError
from apsi.inputs.knobs import flag_value
from apsi.outputs.export import common
from apsi.outputs.export.checks import comment_text, docstring_text

FLAVOURS: dict[str, tuple[str, str, str]] = {
    "llama-3.1-8b": ("llama3", "8B", "llama3_8b"),
    "llama-3.1-70b": ("llama3", "70B", "llama3_70b"),
    "llama-3.1-405b": ("llama3", "405B", "llama3_405b"),
    "deepseek-v3": ("deepseek_v3", "671B", "deepseek_v3_671b"),
    "qwen3-30b-a3b": ("qwen3", "30B-A3B", "qwen3_30b_a3b"),
    "qwen3-32b": ("qwen3", "32B", "qwen3_32b"),
}
"""apsi preset -> (torchtitan model package, model_registry flavour, its baseline config function)
(torchtitan/models/*/config_registry.py in torchtitan 0.3.0; its qwen3 8B and 235B-A22B flavours have
no pretraining baseline there, so they are not exported)."""


def _layers_per_stage(plan) -> int | None:
    """The pipeline_parallel_layers_per_stage that gives pp x vpp stages, or None where none does:
    torchtitan makes ceil((L + 2) / it) stages of its L layers and the embedding's and output's
    one-layer weights (pipeline_parallel.py); without it a multi-stage schedule has 2 per rank.
    The stages themselves are given by module_fqns_per_model_part either way."""
    units = common.architecture(plan).layers + 2
    stages = plan.layout.pp * plan.layout.vpp
    return next((per for per in range(1, units + 1) if -(-units // per) == stages), None)


def _stage_modules(plan) -> list[list[str]]:
    """Each virtual stage's modules in schedule order: the embedding first, the norm and the head
    last, the decoder layers in between as the plan's split lays them."""
    split = plan.layout.virtual_stage_layers
    out, start = [], 0
    for j, n in enumerate(split):
        stage = (["tok_embeddings"] if j == 0 else []) + [f"layers.{i}" for i in range(start, start + n)]
        start += n
        out.append(stage + (["norm", "lm_head"] if j == len(split) - 1 else []))
    return out


def render(plan, usage: bool = True) -> str:
    """The configuration module; `usage` False leaves out how to save and launch it (the slurm
    export writes and launches it under a name of its own, apsi.outputs.export.slurm)."""
    key = common.preset_key(plan)
    if key is None and common.changed(plan):
        raise InputError(f"torchtitan's model flavours are the presets as shipped, and the plan changes "
                         f"{comment_text(plan.model.name or plan.model.origin)} ({common.changed(plan)}): plan the "
                         "preset as it is to export it")
    if key not in FLAVOURS:
        have = ", ".join(sorted(FLAVOURS))
        name = comment_text(plan.model.name or plan.model.origin)
        raise InputError(f"torchtitan has no model flavour for {name} with a "
                         f"pretraining baseline: its llama3, deepseek_v3 and qwen3 ones cover the presets {have}")
    package, flavour, baseline = FLAVOURS[key]
    lay = plan.layout
    # The baselines' optimizer is AdamW (default_adamw, torchtitan/models/*/config_registry.py), a
    # torchtitan plan's only one (torchtitan.MOMENT_BYTES, TT-OPT; the export's plan check refuses
    # any other).
    if lay.etp != 1 and common.architecture(plan).moe:
        raise InputError(f"torchtitan's ParallelismConfig has no expert tensor parallelism (expert_tensor_parallel_degree "
                         f"was removed); the plan has etp {lay.etp}: plan with etp=1")
    m = common.micro_batches(plan)
    schedule = "Interleaved1F1B" if lay.vpp > 1 else "1F1B"
    ac = {"none": "None", "selective": "SelectiveAC.Config()", "full": "FullAC.Config()"}[lay.recompute]
    lines = [
        f"config = {baseline}()",
    ]
    # The model as the plan trains it: float8 linears under fp8 and none otherwise (the 405B
    # baseline turns float8 on by itself).
    if plan.precision == "fp8":
        lines.append(f'config.model_spec = model_registry("{flavour}", converters=[Float8LinearConverter.Config('
                     'filter_fqns=["lm_head"])])')
    else:
        lines.append(f'config.model_spec = model_registry("{flavour}")')
    # torch.compile as the plan ran it (the compile knob, on unless the plan says false: apsi prices
    # torchtitan at its compiled benchmark rows' rate). Async TP needs compile (CompileConfig's
    # __post_init__), so a plan without it turns off the async TP the 405B baseline sets.
    compiled = flag_value("compile", "torchtitan", plan.framework_knobs)
    lines.append(f"config.compile.enable = {compiled}")
    if not compiled:
        lines.append("config.compile.enable_async_tensor_parallel = False")
    # CUDA graphs off: apsi's reserve leaves their memory out (apsi.model.memory.RESERVE_FIXED_GIB),
    # and torchtitan 0.3.0's Trainer.Config refuses them under PP and with its NCCL all-to-all EP
    # dispatcher (trainer.py _validate_cuda_graphs).
    lines += [
        "config.training.disable_cuda_graphs = True",
        f"config.parallelism.data_parallel_replicate_degree = {lay.dp_replicate}",
        f"config.parallelism.data_parallel_shard_degree = {lay.dp // lay.dp_replicate}",
        f"config.parallelism.tensor_parallel_degree = {lay.tp}",
        *([f"config.parallelism.enable_sequence_parallel = False"] if lay.tp > 1 and not lay.sequence_parallel else []),
        f"config.parallelism.context_parallel_degree = {lay.cp}",
        f"config.parallelism.pipeline_parallel_degree = {lay.pp}",
        f"config.parallelism.expert_parallel_degree = {lay.ep}",
    ]
    if lay.pp > 1:
        lines += [f'config.parallelism.pipeline_parallel_schedule = "{schedule}"',
                  f"config.parallelism.pipeline_parallel_microbatch_size = {lay.micro_batch_sequences}",
                  "config.parallelism.pipeline_parallel_first_stage_less_layers = 1",
                  "config.parallelism.pipeline_parallel_last_stage_less_layers = 1"]
        per = _layers_per_stage(plan) if lay.vpp > 2 else None
        if per is not None:
            lines.append(f"config.parallelism.pipeline_parallel_layers_per_stage = {per}")
        # The plan's split, stage by stage (torchtitan's module names: tok_embeddings, layers.N,
        # norm, lm_head), so that torchtitan builds exactly the stages apsi weighed.
        lines.append(f"config.parallelism.module_fqns_per_model_part = {_stage_modules(plan)!r}")
    # torchtitan 0.3's batch: local_batch_size sequences per data-parallel rank and accumulation
    # step, split under PP into pipeline micro-batches; the global batch sets the accumulation.
    local = m * lay.micro_batch_sequences if lay.pp > 1 else lay.micro_batch_sequences
    lines += [
        f"config.training.local_batch_size = {local}",
        f"config.training.global_batch_size = {plan.batch_sequences}",
        f"config.training.seq_len = {plan.seq}",
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
    usage_lines = ("# Save as apsi_plan.py on the PYTHONPATH; on each node:\n"
                   + common.launch_comment(plan, "torchrun --nproc-per-node {nproc} --nnodes " + str(plan.nodes)
                                           + " --node-rank {rank} -m torchtitan.train --module apsi_plan "
                                           "--config apsi_plan")) if usage else ""
    return (common.header(plan, "torchtitan") + usage_lines
            + "\n".join(imports) + "\n\n\n"
            "def apsi_plan() -> Trainer.Config:\n"
            f'    """The plan: {plan.gpus:,} x {docstring_text(plan.gpu)}, '
            f'{schedule if lay.pp > 1 else "no pipeline"}."""\n'
            f"{body}\n")
