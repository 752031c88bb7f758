"""The slurm export: an sbatch script for the plan's nodes and GPUs per node that runs the plan's
framework on every node with srun (Megatron-LM's pretrain_gpt.py or Megatron-DeepSpeed under
torchrun, or torchtitan's trainer with the plan's configuration module written beside it)."""

from __future__ import annotations

from apsi.export import common


def render(plan) -> str:
    per_node = common.gpus_per_node(plan)
    head = ("#!/bin/bash\n" + common.header(plan, "slurm")
            + f"#SBATCH --job-name=apsi-{plan.framework}\n"
            f"#SBATCH --nodes={plan.nodes}\n"
            "#SBATCH --ntasks-per-node=1\n"
            f"#SBATCH --gpus-per-node={per_node}\n"
            "#SBATCH --exclusive\n"
            "#SBATCH --time=48:00:00  # PLACEHOLDER: your partition's limit; checkpoint and resubmit\n\n"
            "set -euo pipefail\n"
            'export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"\n'
            "export MASTER_PORT=6000\n"
            "export CUDA_DEVICE_MAX_CONNECTIONS=1\n")
    if plan.framework == "torchtitan":
        from apsi.export import torchtitan

        return (head + "cat > apsi_plan.py <<'EOF'\n" + torchtitan.render(plan) + "EOF\n\n"
                f'srun --export=ALL,PYTHONPATH="$PWD:${{PYTHONPATH:-}}" torchrun --nproc-per-node {per_node} '
                f"--nnodes {plan.nodes} --node-rank \"$SLURM_NODEID\" "
                '--master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" \\\n'
                "  -m torchtitan.train --module apsi_plan --config apsi_plan\n")
    from apsi.export import megatron

    body = ': "${DATA_PATH:?set DATA_PATH to your preprocessed data prefix}"\n' \
           ': "${TOKENIZER:?set TOKENIZER to your Hugging Face tokenizer name or path}"\n'
    if plan.framework == "deepspeed":
        import json

        from apsi.export import deepspeed

        body += ("cat > ds_config.json <<'EOF'\n" + json.dumps(deepspeed.ds_config(plan), indent=2) + "\nEOF\n"
                 f"srun torchrun --nproc-per-node {per_node} --nnodes {plan.nodes} --node-rank \"$SLURM_NODEID\" "
                 '--master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" \\\n'
                 f"  pretrain_gpt.py \\\n{megatron.format_arguments(deepspeed.arguments(plan))}\n")
        return head + body
    return head + body + "srun " + megatron.launcher(plan, srun=True)
