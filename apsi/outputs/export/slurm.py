"""The slurm export: an sbatch script for the plan's nodes and GPUs per node that runs the plan's
framework on every node with srun (Megatron-LM's pretrain_gpt.py or Megatron-DeepSpeed under
torchrun, or torchtitan's trainer with the plan's configuration module written beside it).

srun runs one task per node, and each task must learn its own node: the batch script writes
the per-node launcher apsi_node_<job ID>.sh with a quoted here-document (nothing in it is expanded
on the first node), and srun runs it on every node, where $SLURM_NODEID is that node's index (0 to
nodes - 1) and sets torchrun's --node-rank and this node's share of the plan's ranks
(common.nproc_shell: the last node of a plan with node granularity 1 may run fewer). Like the
torchtitan module apsi_plan_<job ID>.py and the deepspeed ds_config_<job ID>.json, the file goes in
the submission directory, which the nodes share, named by the job's $SLURM_JOB_ID (unique on the
cluster, set by sbatch in the batch shell and by srun on every node): jobs submitted from one
directory (a fleet's runs, apsi.fleets.export, two of which may start the same day) each launch
their own files, where fixed names let the job written last replace the others' before their
nodes read them."""

from __future__ import annotations

import datetime as dt
import math
from typing import NamedTuple

from apsi.outputs.export import common

JOB_ID = "${SLURM_JOB_ID}"
"""The job's ID in a file name, expanded where the script runs (the batch shell, or srun's task)."""
NODE_SCRIPT = f'"apsi_node_{JOB_ID}.sh"'
"""The per-node launcher, as a shell word (double quotes: the ID is expanded, nothing else is)."""
TORCHTITAN_MODULE = f'"apsi_plan_{JOB_ID}"'
"""The torchtitan configuration module (its file that name and .py): a Python name, job IDs being digits."""
DS_CONFIG = f'"ds_config_{JOB_ID}.json"'
"""The deepspeed configuration, as a shell word."""


class Job(NamedTuple):
    """A run's place in a schedule (apsi.fleets.export): what its sbatch header says instead of the
    plan's defaults."""

    name: str
    """Its job name: letters, digits, dot, dash and underscore only (the caller's file stem)."""
    begin: dt.date
    """The day it may start (sbatch --begin)."""
    days: float
    """The wall-clock limit, days (sbatch --time): the plan's slow end (Plan.days_high)."""


def _time(days: float) -> str:
    """sbatch --time as days-hours:minutes:seconds, rounded up to the hour."""
    hours = max(1, math.ceil(days * 24 - 1e-9))
    return f"{hours // 24}-{hours % 24:02d}:00:00"


def _node_script(plan, command: str) -> str:
    """The per-node launcher: this node's rank and process count, then `command` (torchrun ...)."""
    return common.heredoc(NODE_SCRIPT, "#!/bin/bash\n"
                          "# One node's launcher, run by srun on every node: its rank is this node's SLURM_NODEID.\n"
                          "set -euo pipefail\n"
                          'NODE_RANK="$SLURM_NODEID"\n'
                          + common.nproc_shell(plan, "$NODE_RANK")
                          + "exec " + command) + "\n"


def render(plan, job: Job | None = None) -> str:
    """The sbatch script of `plan`; with `job` (a fleet's run), its name, begin day and time limit."""
    from apsi.outputs.export import megatron

    per_node = common.node_ranks(plan)[0]  # a full node's GPUs; all of them on a single node
    notes = () if plan.framework == "torchtitan" else megatron.not_carried(plan)
    if plan.framework == "deepspeed":
        from apsi.outputs.export import deepspeed

        notes = deepspeed.not_carried(plan)
    if job is None:
        name = f"#SBATCH --job-name=apsi-{plan.framework}\n"
        when = "#SBATCH --time=48:00:00  # PLACEHOLDER: your partition's limit; checkpoint and resubmit\n\n"
    else:
        name = f"#SBATCH --job-name={job.name}\n#SBATCH --begin={job.begin.isoformat()}T00:00:00\n"
        when = (f"#SBATCH --time={_time(job.days)}  # the plan's {job.days:,.1f} days at the slow end of its calibrated "
                "range; a partition with a lower limit needs checkpoints and resubmission\n\n")
    head = ("#!/bin/bash\n" + common.header(plan, "slurm", notes=notes)
            + name
            + f"#SBATCH --nodes={plan.nodes}\n"
            "#SBATCH --ntasks-per-node=1\n"
            f"#SBATCH --gpus-per-node={per_node}\n"
            "#SBATCH --exclusive\n"
            + when
            + "set -euo pipefail\n"
            '# This job\'s launch files carry its job ID: jobs submitted from one directory never share them.\n'
            ': "${SLURM_JOB_ID:?submit this script with sbatch, which sets SLURM_JOB_ID}"\n'
            'export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"\n'
            "export MASTER_PORT=6000\n"
            "export CUDA_DEVICE_MAX_CONNECTIONS=1\n")
    run = f"srun --ntasks-per-node=1 bash {NODE_SCRIPT}\n"

    def torchrun(script: str) -> str:
        return megatron.torchrun(plan, "$NODE_RANK", script, master='"$MASTER_ADDR"', port='"$MASTER_PORT"')

    if plan.framework == "torchtitan":
        from apsi.outputs.export import torchtitan

        module = TORCHTITAN_MODULE[:-1] + '.py"'
        return (head + common.heredoc(module, torchtitan.render(plan, usage=False))
                + 'export PYTHONPATH="$PWD:${PYTHONPATH:-}"\n'
                + _node_script(plan, torchrun(f"-m torchtitan.train --module {TORCHTITAN_MODULE} --config apsi_plan")
                               + "\n") + run)
    body = (': "${DATA_PATH:?set DATA_PATH to your preprocessed data prefix}"\n'
            ': "${TOKENIZER:?set TOKENIZER to your Hugging Face tokenizer name or path}"\n'
            "export DATA_PATH TOKENIZER\n")
    if plan.framework == "deepspeed":
        import json

        from apsi.outputs.export import deepspeed

        body += common.heredoc(DS_CONFIG, json.dumps(deepspeed.ds_config(plan), indent=2) + "\n")
        # The job's own config, its name expanded on each node (format_arguments quotes every value
        # as it is): in place of the deepspeed export's ds_config.json.
        args = [(flag, value) for flag, value in deepspeed.arguments(plan) if flag != "--deepspeed_config"]
        config = f" \\\n    --deepspeed_config {DS_CONFIG}"
    else:
        args, config = megatron.arguments(plan), ""
    command = torchrun("pretrain_gpt.py") + f" \\\n{megatron.format_arguments(args)}{config}\n"
    return head + body + _node_script(plan, command) + run
