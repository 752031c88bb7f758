"""The slurm export: an sbatch script for the plan's nodes and GPUs per node that runs the plan's
framework on every node with srun (Megatron-LM's pretrain_gpt.py or Megatron-DeepSpeed under
torchrun, or torchtitan's trainer with the plan's configuration module written beside it).

srun runs one task per node, and each task must learn its own node: the batch script writes
the per-node launcher apsi_node.sh with a quoted here-document (nothing in it is expanded on
the first node), and srun runs it on every node, where $SLURM_NODEID is that node's index (0 to
nodes - 1) and sets torchrun's --node-rank and this node's share of the plan's ranks
(common.nproc_shell: the last node of a plan with node granularity 1 may run fewer). Like
apsi_plan.py, the file goes in the submission directory, which the nodes share."""

from __future__ import annotations

from apsi.outputs.export import common

NODE_SCRIPT = "apsi_node.sh"


def _node_script(plan, command: str) -> str:
    """The per-node launcher: this node's rank and process count, then `command` (torchrun ...)."""
    return common.heredoc(NODE_SCRIPT, "#!/bin/bash\n"
                          "# One node's launcher, run by srun on every node: its rank is this node's SLURM_NODEID.\n"
                          "set -euo pipefail\n"
                          'NODE_RANK="$SLURM_NODEID"\n'
                          + common.nproc_shell(plan, "$NODE_RANK")
                          + "exec " + command) + "\n"


def render(plan) -> str:
    from apsi.outputs.export import megatron

    per_node = common.node_ranks(plan)[0]  # a full node's GPUs; all of them on a single node
    notes = () if plan.framework == "torchtitan" else megatron.not_carried(plan)
    if plan.framework == "deepspeed":
        from apsi.outputs.export import deepspeed

        notes = deepspeed.not_carried(plan)
    head = ("#!/bin/bash\n" + common.header(plan, "slurm", notes=notes)
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
    run = f"srun --ntasks-per-node=1 bash {NODE_SCRIPT}\n"

    def torchrun(script: str) -> str:
        return megatron.torchrun(plan, "$NODE_RANK", script, master='"$MASTER_ADDR"', port='"$MASTER_PORT"')

    if plan.framework == "torchtitan":
        from apsi.outputs.export import torchtitan

        return (head + common.heredoc("apsi_plan.py", torchtitan.render(plan))
                + 'export PYTHONPATH="$PWD:${PYTHONPATH:-}"\n'
                + _node_script(plan, torchrun("-m torchtitan.train --module apsi_plan --config apsi_plan")
                               + "\n") + run)
    body = (': "${DATA_PATH:?set DATA_PATH to your preprocessed data prefix}"\n'
            ': "${TOKENIZER:?set TOKENIZER to your Hugging Face tokenizer name or path}"\n'
            "export DATA_PATH TOKENIZER\n")
    if plan.framework == "deepspeed":
        import json

        from apsi.outputs.export import deepspeed

        body += common.heredoc("ds_config.json", json.dumps(deepspeed.ds_config(plan), indent=2) + "\n")
        args = deepspeed.arguments(plan)
    else:
        args = megatron.arguments(plan)
    command = torchrun("pretrain_gpt.py") + f" \\\n{megatron.format_arguments(args)}\n"
    return head + body + _node_script(plan, command) + run
