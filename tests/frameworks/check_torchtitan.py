"""Reads the torchtitan export through torchtitan's own code: loads it as torchtitan.train does
(ConfigManager().parse_args(["--module", M, "--config", F]): the module's function, then
Trainer.Config rebuilt through tyro, so its __post_init__ checks the fields as set), builds ParallelDims(world_size=the launch's) (its
_validate), asks _get_pipeline_metadata how many virtual stages the schedule makes and
_get_pp_rank_to_stage_indices_mapping which stages each pipeline rank runs, and reads the model
flavour's configuration (layers, width, heads, RoPE base, float8 linears).

Run by tests/frameworks/harness.py in its own interpreter: stdin is {case id: {"dir", "module",
"function", "world_size"}}, the last stdout line {case id: {"values": {...}, "errors": [...]}}.
Nothing here needs a GPU: no process group, device mesh or model is built; the float8 converter's
device-capability query is answered for the plan's GPU (gpu_stubs.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import argv_tools  # noqa: E402
import gpu_stubs  # noqa: E402

gpu_stubs.install()
gpu_stubs.install_torchtitan()

from torchtitan.config import ConfigManager  # noqa: E402
from torchtitan.distributed import pipeline_parallel  # noqa: E402
from torchtitan.distributed.parallel_dims import ParallelDims  # noqa: E402


def _find(obj, name: str, depth: int = 0):
    """The first field called `name` in a nest of config dataclasses (breadth first)."""
    level = [obj]
    for _ in range(6):
        nxt = []
        for o in level:
            if dataclasses.is_dataclass(o):
                for f in dataclasses.fields(o):
                    v = getattr(o, f.name)
                    if f.name == name and v is not None:
                        return v
                    nxt.append(v)
            elif isinstance(o, (list, tuple)) and o:
                nxt.append(o[0])
        level = nxt
    return None


def _types(obj, seen=None) -> set[str]:
    """Names of every config class in the nest (to spot float8 linears)."""
    seen = set() if seen is None else seen
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        seen.add(type(obj).__qualname__)
        for f in dataclasses.fields(obj):
            _types(getattr(obj, f.name), seen)
    elif isinstance(obj, (list, tuple)):
        for o in obj[:2]:
            _types(o, seen)
    return seen


def _ac(value) -> str:
    if value is None:
        return "none"
    name = type(value).__qualname__
    return "full" if name.startswith("FullAC") else "selective" if name.startswith("SelectiveAC") else name


def check(cid: str, launch: dict) -> dict:
    os.environ["APSI_GPU"] = launch["gpu"]
    errors: list = []
    values: dict = {}
    module = launch["module"]
    for name in [n for n in sys.modules if n == module or n.startswith(module + ".")]:
        del sys.modules[name]  # every case's module is apsi_plan
    sys.path.insert(0, launch["dir"])  # the launch's PYTHONPATH
    err = io.StringIO()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            config = ConfigManager().parse_args(["--module", module, "--config", launch["function"]])
    except SystemExit:  # tyro prints why in a box on stderr
        said = [line.strip(" │╭╮╰╯─") for line in err.getvalue().splitlines()]
        said = ["" if set(line) <= {"-"} else line for line in said]
        start = next((i for i, line in enumerate(said) if line.startswith("Error")), max(len(said) - 1, 0))
        end = next((i for i in range(start + 1, len(said)) if not said[i] or said[i].startswith("For full")),
                   len(said))
        errors.append({"where": "ConfigManager.parse_args", "message": " ".join(said[start:end])[:500]})
        return {"values": values, "errors": errors}
    except BaseException as exc:  # noqa: BLE001 - the module's own failure is the finding
        argv_tools.record(errors, "ConfigManager.parse_args", exc)
        return {"values": values, "errors": errors}
    finally:
        sys.path.remove(launch["dir"])
    par, training, model = config.parallelism, config.training, config.model_spec.model
    layers = model.layers
    values.update(
        dp_replicate=par.data_parallel_replicate_degree, dp_shard=par.data_parallel_shard_degree,
        tp=par.tensor_parallel_degree, cp=par.context_parallel_degree, pp=par.pipeline_parallel_degree,
        ep=par.expert_parallel_degree, global_batch=training.global_batch_size, seq_len=training.seq_len,
        steps=training.steps, activation_checkpoint=_ac(config.activation_checkpoint),
        float8=any("Float8" in t for t in _types(model)), n_layers=len(layers), dim=_find(model, "dim"),
        n_heads=_find(layers[0], "n_heads"), rotary_base=float(_find(layers[0], "theta") or 0) or None)
    values["local_batch"] = training.local_batch_size
    if par.pipeline_parallel_degree > 1:
        values.update(microbatch=par.pipeline_parallel_microbatch_size, schedule=par.pipeline_parallel_schedule)
    try:
        dims = ParallelDims.from_config(par, launch["world_size"])
        values["parallel_dims_ok"] = True
        values["world_size"] = dims.world_size
    except BaseException as exc:  # noqa: BLE001 - ParallelDims._validate asserts
        argv_tools.record(errors, "ParallelDims", exc)
        values["parallel_dims_ok"] = False
        return {"values": values, "errors": errors}
    batch_degree = dims.dp_replicate * dims.dp_shard  # the "batch" mesh (parallel_dims.py)
    if training.global_batch_size % (training.local_batch_size * batch_degree):
        errors.append({"where": "Trainer.__init__ batch check (trainer.py)",
                       "message": f"global batch size must be multiple of local batch size times data-parallel degree "
                                  f"({training.global_batch_size} % ({training.local_batch_size} * {batch_degree}) != 0)"})
    if par.pipeline_parallel_degree > 1:
        try:
            stages, n_layers, first, last = pipeline_parallel._get_pipeline_metadata(dims, par, model)
            parts = par.module_fqns_per_model_part or pipeline_parallel._generate_llm_fqn_per_model_part(
                stages, n_layers, first, last)
            if par.module_fqns_per_model_part is not None:
                # pipeline_llm then builds one stage per listed part (_pipeline_module_split:
                # num_stages = len(module_names_per_stage)); _get_pipeline_metadata's count is
                # only its default's.
                stages = len(parts)
            if len(parts) != stages or stages % dims.pp:
                errors.append({"where": "_get_pipeline_metadata",
                               "message": f"the schedule {par.pipeline_parallel_schedule} makes {stages} virtual stages, "
                                          f"module_fqns_per_model_part lists {len(parts)} over pp {dims.pp}"})
            values["virtual_stage_layers"] = [sum(m.startswith("layers.") for m in p) for p in parts]
            names = [m for p in parts for m in p]
            known = {"tok_embeddings", "norm", "lm_head", "output"} | {f"layers.{i}" for i in range(len(layers))}
            tops = {f.name for f in dataclasses.fields(model)}
            unknown = sorted({m for m in names if m not in known or m.split(".")[0] not in tops})
            if unknown or len(names) != len(set(names)) or len(names) != len(layers) + 3:
                errors.append({"where": "module_fqns_per_model_part",
                               "message": f"modules not once each: unknown {unknown[:5]}, {len(names)} listed"})
            ranks = []
            for r in range(dims.pp):
                idx = pipeline_parallel._get_pp_rank_to_stage_indices_mapping(r, dims.pp, par.pipeline_parallel_schedule,
                                                                               len(parts))
                ranks.append(sum(values["virtual_stage_layers"][i] for i in idx))
            values["stage_layers"] = ranks
        except BaseException as exc:  # noqa: BLE001
            argv_tools.record(errors, "pipeline stages", exc)
    return {"values": values, "errors": errors}


def main() -> None:
    launches = json.load(sys.stdin)
    out = {cid: check(cid, launch) for cid, launch in launches.items()}
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main()
