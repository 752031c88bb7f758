"""Reads the deepspeed export through its frameworks' own code: Megatron-DeepSpeed's parse_args
(which adds DeepSpeed's own arguments) and validate_args with the launch's world size, and
DeepSpeed's DeepSpeedConfig on the ds_config JSON the script wrote, given the data-parallel size
Megatron-DeepSpeed arrived at (the mpu it hands DeepSpeed answers only that).

Run by tests/frameworks/harness.py in its own interpreter with the Megatron-DeepSpeed source tree
in $APSI_MEGATRON_DEEPSPEED: stdin is {case id: {"argv", "world_size", "ds_config"}}, the last
stdout line {case id: {"values": {...}, "errors": [...]}}. An argument the parser rejects is
reported and taken out (argv_tools.py) so that every other value is still compared. No GPU query
is stood in for: DeepSpeed picks its CPU accelerator here by itself, and Megatron-DeepSpeed's
argument code asks nothing of the device (with a CUDA accelerator it would import apex).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys

sys.path.insert(0, os.environ["APSI_MEGATRON_DEEPSPEED"])
sys.path.insert(1, os.path.dirname(os.path.abspath(__file__)))

import argv_tools  # noqa: E402

from deepspeed.runtime.config import DeepSpeedConfig  # noqa: E402
from megatron.arguments import parse_args, validate_args  # noqa: E402

DEFAULTS = {"tokenizer_type": "GPT2BPETokenizer"}
"""pretrain_gpt.py's args_defaults (Megatron-DeepSpeed pretrain_gpt.py __main__)."""


class _DataParallel:
    """The part of Megatron-DeepSpeed's mpu that DeepSpeedConfig asks: the data-parallel size."""

    def __init__(self, dp: int) -> None:
        self.dp = dp

    def get_data_parallel_world_size(self) -> int:
        return self.dp

    def get_sequence_parallel_world_size(self) -> int:
        return 1

    def get_sequence_data_parallel_world_size(self) -> int:
        return self.dp


@contextlib.contextmanager
def _rank_zero():
    """DeepSpeedConfig asks deepspeed.comm for this process's rank before it asks the mpu for the
    data-parallel size, and without a process group falls back to a world of 1; rank 0 of the
    launch answers here (no process group is started)."""
    from deepspeed.runtime import config as ds_config

    saved = ds_config.dist.get_rank
    ds_config.dist.get_rank = lambda *a, **k: 0
    try:
        yield
    finally:
        ds_config.dist.get_rank = saved




def check(launch: dict) -> dict:
    errors: list = []
    values: dict = {}
    args = argv_tools.megatron_args(parse_args, validate_args, DEFAULTS, launch, errors)
    if args is None:
        return {"values": values, "errors": errors}
    recompute = ("full" if args.checkpoint_activations or args.recompute_granularity == "full"
                 else "selective" if args.recompute_granularity == "selective" else "none")
    values.update(
        world_size=args.world_size, tp=args.tensor_model_parallel_size, pp=args.pipeline_model_parallel_size,
        dp=getattr(args, "data_parallel_size", None), micro_batch=args.micro_batch_size,
        global_batch=args.global_batch_size, train_iters=args.train_iters, num_layers=args.num_layers,
        hidden=args.hidden_size, ffn=args.ffn_hidden_size, heads=args.num_attention_heads,
        num_query_groups=args.num_key_value_heads or args.num_attention_heads, seq_length=args.seq_length,
        bf16=args.bf16, fp16=args.fp16, recompute=recompute, hidden_dropout=args.hidden_dropout,
        attention_dropout=args.attention_dropout, normalization=args.normalization, swiglu=args.swiglu,
        untied=args.untie_embeddings_and_output_weights, rotary=args.use_rotary_position_embeddings,
        rotary_base=float(args.rope_theta) if args.use_rotary_position_embeddings else None,
        experts=args.num_experts[0] if args.num_experts != [1] else None, topk=args.topk if args.num_experts != [1]
        else None, deepspeed=args.deepspeed, optimizer=args.optimizer)
    try:
        dp = values["dp"] or 1
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), _rank_zero():
            config = DeepSpeedConfig(launch["ds_config"], mpu=_DataParallel(dp))
        values.update(ds_train_batch_size=config.train_batch_size, ds_micro_batch=config.train_micro_batch_size_per_gpu,
                      ds_accumulation=config.gradient_accumulation_steps, ds_zero_stage=config.zero_optimization_stage,
                      ds_bf16=config.bfloat16_config.enabled if hasattr(config, "bfloat16_config")
                      else config.bfloat16_enabled,
                      ds_fp16=config.float16_config.enabled if hasattr(config, "float16_config")
                      else config.fp16_enabled,
                      ds_allow_untested_optimizer=config.zero_allow_untested_optimizer)
    except BaseException as exc:  # noqa: BLE001 - DeepSpeedConfig asserts its batch arithmetic
        argv_tools.record(errors, "DeepSpeedConfig", exc)
    return {"values": values, "errors": errors}


def main() -> None:
    launches = json.load(sys.stdin)
    out = {cid: check(launch) for cid, launch in launches.items()}
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main()
