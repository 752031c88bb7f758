"""Runs apsi's launch exports through the frameworks' own code and compares what they parse with
the plan (tests/test_export_frameworks.py and tests/frameworks/report.py use it).

Owns the cases (every preset under each format's framework, every run of examples/*.yaml), the
extraction of each launch (the exported shell script run by bash with stand-in launchers on PATH,
tests/frameworks/bin/), the hand-off to one checker process per framework (check_megatron.py,
check_mds.py, check_torchtitan.py; Megatron-LM and Megatron-DeepSpeed both install a top-level
`megatron` package, so each gets its own interpreter), the values each framework must arrive at
(from the plan's JSON: plan.layout.*, plan.model.architecture.*), and the known export bugs.
It never stands in for a framework: a checker whose framework is missing is reported missing.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
INSTALL = "bash tests/frameworks/install.sh && python -m pytest tests/test_export_frameworks.py"
"""The one-liner that installs the frameworks and runs these checks (README.md)."""
CACHE = Path(os.environ.get("APSI_FRAMEWORKS_DIR", Path.home() / ".cache" / "apsi-frameworks"))
"""Where tests/frameworks/install.sh puts the frameworks' sources that no registry serves."""

TAGS = {"megatron-lm": "core_v0.19.0", "megatron-deepspeed": "main", "megatron-bridge": "r0.6.0"}
"""The source trees checked: Megatron-LM's tag named in apsi/outputs/export/common.py VERSIONS (0.19),
Megatron-DeepSpeed's only branch (its last release tag, v2.4, is from 2021), and Megatron-Bridge's
0.6 release branch (its tags stop at v0.6.0; no 0.6.x wheel is on the package registry)."""

FORMS: tuple[tuple[str, str], ...] = (
    ("megatron", "megatron"), ("megatron-bridge", "megatron"), ("torchtitan", "torchtitan"),
    ("deepspeed", "deepspeed"), ("slurm", "megatron"), ("slurm", "torchtitan"), ("slurm", "deepspeed"))
"""(format, framework the preset is planned under) for the presets; slurm wraps each framework."""

PRESET_OPTIONS: dict[str, dict[str, Any]] = {
    "llama-3.1-70b": dict(tokens="1.4T"),
    "llama-3.1-405b": dict(tokens="15.6T", seq=8192, batch=2**24),
    "mixtral-8x22b": dict(tokens="2T"),
    "deepseek-v3": dict(tokens="14.8T", precision="fp8"),
}
"""The four presets of tests/test_export.py as planned there; every other preset trains on
DEFAULT_TOKENS."""
DEFAULT_TOKENS = "1T"

PINNED: dict[str, dict[str, Any]] = {
    "llama-3.1-70b+recompute=full": dict(recompute="full"),
    "llama-3.1-70b+recompute=selective": dict(recompute="selective"),
    "mixtral-8x22b+recompute=full": dict(recompute="full"),
    "llama-3.1-8b+optimizer=sgd": dict(optimizer="sgd"),
    "llama-3.1-8b+optimizer=sgd,zero=0": dict(optimizer="sgd", zero=0),
}
"""Presets planned with a knob pinned, for what no preset's or example's own plan chooses (full
recomputation, selective recomputation with the default modules, SGD with and without ZeRO or the
distributed optimizer): 'KEY+PIN/FORMAT' ids."""


def source_dir(name: str) -> Path | None:
    """A framework's source tree: $APSI_MEGATRON_LM / $APSI_MEGATRON_DEEPSPEED /
    $APSI_MEGATRON_BRIDGE, else the install script's copy, else None."""
    env = {"megatron-lm": "APSI_MEGATRON_LM", "megatron-deepspeed": "APSI_MEGATRON_DEEPSPEED",
           "megatron-bridge": "APSI_MEGATRON_BRIDGE"}[name]
    path = Path(os.environ[env]) if os.environ.get(env) else CACHE / name
    return path if path.is_dir() else None


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing(kind: str) -> str | None:
    """What a checker lacks, or None when it can run (no import of the frameworks here)."""
    needs: dict[str, tuple[list[str], list[str]]] = {
        "megatron": (["torch", "einops", "triton"], ["megatron-lm"]),
        "mds": (["torch", "deepspeed"], ["megatron-deepspeed"]),
        "torchtitan": (["torch", "torchtitan"], []),
        "bridge": ([], ["megatron-bridge", "megatron-lm"]),
    }
    modules, sources = needs[kind]
    lacking = [m for m in modules if not _has(m)] + [
        f"the {s} source ({TAGS[s]})" for s in sources if source_dir(s) is None]
    if sys.version_info < (3, 12) and kind == "megatron":
        lacking.append("Python 3.12 (Megatron-LM 0.19 requires it)")
    return ", ".join(lacking) or None


def skip_reason(kind: str) -> str | None:
    lack = missing(kind)
    return None if lack is None else f"needs {lack}: {INSTALL}"


# --- cases ------------------------------------------------------------------------------------


@dataclasses.dataclass
class Case:
    """One export of one plan: refused in one line, or a launch for a framework's code to read."""

    id: str
    format: str
    source: str
    """'preset NAME' or 'examples/FILE.yaml: RUN'."""
    plan: Any = None
    text: str | None = None
    refused: str | None = None
    launch: dict[str, Any] | None = None
    """What the checker reads: its kind ('megatron', 'mds', 'torchtitan', 'bridge') and inputs."""
    launch_error: str | None = None


def preset_ids() -> list[str]:
    from apsi.inputs.presets import presets

    keys = list(presets()) + list(PINNED)
    return [f"{key}/{fmt}" + ("" if fmt != "slurm" else f"-{fw}") for key in keys for fmt, fw in FORMS]


def example_files() -> list[Path]:
    """The scenario examples planned run by run (a file with a fleet: block is one fleet plan,
    tests/test_fleet.py)."""
    from apsi.fleets.spec import has_fleet

    return sorted(p for p in (ROOT / "examples").glob("*.yaml") if not has_fleet(p))


def example_ids() -> list[str]:
    """Every run of every example as 'FILE: RUN/FORMAT' (loaded, not solved)."""
    from apsi.api import scenarios
    from apsi.outputs.export import FORMATS

    out = []
    for path in example_files():
        for result in scenarios.load(path):
            out += [f"{path.name}: {result.name}/{fmt}" for fmt in FORMATS]
    return out


def kind_of(case_id: str) -> str:
    """The checker a case's export goes to, from its id alone (nothing solved): the format's, and
    for slurm the plan's framework's (a run's `framework`, default megatron)."""
    by_format = {"megatron": "megatron", "megatron-bridge": "bridge", "torchtitan": "torchtitan", "deepspeed": "mds"}
    by_framework = {"megatron": "megatron", "torchtitan": "torchtitan", "deepspeed": "mds"}
    if ".yaml: " in case_id:
        file, rest = case_id.split(": ", 1)
        run, fmt = rest.rsplit("/", 1)
        if fmt != "slurm":
            return by_format[fmt]
        return by_framework.get(str(_example_inputs(file).get(run, {}).get("framework", "megatron")), "megatron")
    key, form = case_id.split("/", 1)
    return by_framework[form.split("-", 1)[1]] if form.startswith("slurm-") else by_format[form]


@functools.cache
def _example_inputs(name: str) -> dict[str, dict[str, Any]]:
    from apsi.api import scenarios

    return {r.name: r.inputs for r in scenarios.load(ROOT / "examples" / name)}


def prepare(case_ids: list[str]) -> None:
    """Solve, export and check every case whose checker can run here, each checker once for all of
    them; nothing at all when none can (so a run without the frameworks solves nothing)."""
    runnable = [cid for cid in case_ids if missing(kind_of(cid)) is None]
    results(runnable)


@functools.cache
def _preset_plan(key: str, framework: str):
    from apsi.errors import ApsiError
    from apsi.api.plan import plan

    pinned = PINNED.get(key, {})
    key = key.partition("+")[0]
    options = dict(PRESET_OPTIONS.get(key, {"tokens": DEFAULT_TOKENS}), **pinned)
    if framework == "deepspeed" and options.get("precision") == "fp8":
        options["precision"] = "bf16"  # DeepSpeed trains no FP8 (as tests/test_export.py plans it)
    try:
        return plan(key, framework=framework, **options), None
    except ApsiError as err:
        return None, str(err)


@functools.cache
def _example_results(name: str) -> dict[str, Any]:
    from apsi.api import scenarios

    return {r.name: r for r in scenarios.run_scenarios(ROOT / "examples" / name, jobs=1)}


def _export(case: Case) -> Case:
    from apsi.errors import ApsiError
    from apsi.outputs.export import export_config

    try:
        case.text = export_config(case.plan, case.format)
    except ApsiError as err:
        case.refused = str(err)
        return case
    try:
        case.launch = extract(case.format, case.plan, case.text)
    except LaunchError as err:
        case.launch_error = str(err)
    return case


@functools.cache
def case(case_id: str) -> Case:
    """The case of a preset id (preset_ids) or an example id (example_ids), exported."""
    if ".yaml: " in case_id:
        file, rest = case_id.split(": ", 1)
        run, fmt = rest.rsplit("/", 1)
        result = _example_results(file)[run]
        c = Case(id=case_id, format=fmt, source=f"examples/{file}: {run}", plan=result.plan)
        if result.plan is None:
            c.refused = f"no plan: {result.error}"
            return c
        return _export(c)
    key, form = case_id.split("/", 1)
    fmt, _, fw = form.partition("-") if form.startswith("slurm-") else (form, "", "")
    framework = fw or dict(FORMS)[fmt]
    plan_, error = _preset_plan(key, framework)
    c = Case(id=case_id, format=fmt, source=f"preset {key.replace('+', ' with ')}", plan=plan_)
    if plan_ is None:
        c.refused = f"no plan under {framework}: {error}"
        return c
    return _export(c)


# --- extraction -------------------------------------------------------------------------------


MAX_HOSTS = 20_000
"""Hosts in the stand-in hostfile: more nodes than any plan checked here has."""


class LaunchError(Exception):
    """The exported launch did not run to its launcher."""


def _run_script(text: str, workdir: Path) -> list[dict[str, Any]]:
    """Run an exported shell script with bash, the launchers stood in for; their recorded calls."""
    script = workdir / "launch.sh"
    script.write_text(text)
    # The user's hostfile the deepspeed export reads its hosts from (one per line): more than any plan.
    (workdir / "hostfile").write_text("".join(f"node{i}\n" for i in range(MAX_HOSTS)))
    log = workdir / "launch.jsonl"
    env = {**os.environ, "PATH": f"{HERE / 'bin'}:{os.environ.get('PATH', '')}", "APSI_LAUNCH_LOG": str(log),
           "DATA_PATH": "/data/apsi_text_document", "TOKENIZER": "apsi/tokenizer", "SLURM_JOB_NODELIST": "node0",
           "SLURM_NODEID": "0", "SLURM_JOB_ID": "4242", "HOSTFILE": str(workdir / "hostfile")}
    run = subprocess.run(["bash", str(script)], cwd=workdir, env=env, capture_output=True, text=True, timeout=60)
    if run.returncode != 0:
        raise LaunchError(f"bash exited {run.returncode}: {(run.stderr.strip().splitlines() or [''])[-1]}")
    if not log.exists():
        raise LaunchError("the script ran no launcher")
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    for call in calls:  # what the script itself set for the framework (CUDA_DEVICE_MAX_CONNECTIONS...)
        call["exported"] = {k: v for k, v in call.pop("env").items()
                            if env.get(k) != v and k not in ("PWD", "OLDPWD", "SHLVL", "_", "PYTHONPATH")}
    return calls


def _after(argv: list[str], entry: str) -> tuple[list[str], list[str]]:
    """The launcher's own options and the training script's arguments."""
    if entry not in argv:
        raise LaunchError(f"the launcher does not start {entry}: {argv[:12]}")
    i = argv.index(entry)
    return argv[:i], argv[i + 1:]


def _option(opts: list[str], *names: str) -> str | None:
    for i, word in enumerate(opts):
        for name in names:
            if word == name and i + 1 < len(opts):
                return opts[i + 1]
            if word.startswith(name + "="):
                return word.split("=", 1)[1]
    return None


def _world(opts: list[str], nproc: tuple[str, ...], nnodes: tuple[str, ...]) -> int:
    per, nodes = _option(opts, *nproc), _option(opts, *nnodes)
    if per is None or nodes is None:
        raise LaunchError(f"the launcher names no GPUs per node and node count: {opts}")
    return int(per) * int(nodes)


def _hostfile_world(workdir: Path, opts: list[str]) -> int:
    """The ranks DeepSpeed's launcher starts from --hostfile: the slots of its first --num_nodes
    hosts (deepspeed/launcher/runner.py fetch_hostfile and parse_inclusion_exclusion)."""
    name, nodes = _option(opts, "--hostfile"), _option(opts, "--num_nodes")
    if name is None or nodes is None:
        raise LaunchError(f"the deepspeed launcher names no --num_gpus, or no --hostfile and --num_nodes: {opts}")
    slots = []
    for line in (workdir / name).read_text().splitlines():
        words = line.split()
        if words and not words[0].startswith("#"):
            slot = next((w.split("=", 1)[1] for w in words[1:] if w.startswith("slots=")), None)
            if slot is None:
                raise LaunchError(f"hostfile line without slots: {line!r}")
            slots.append(int(slot))
    return sum(slots[:int(nodes)])


_WORKDIRS: list[tempfile.TemporaryDirectory] = []


def _workdir() -> Path:
    tmp = tempfile.TemporaryDirectory(prefix="apsi-fw-")
    _WORKDIRS.append(tmp)
    return Path(tmp.name)


def extract(fmt: str, plan, text: str) -> dict[str, Any]:
    """What the framework's code reads from an export: kind plus its inputs, and the GPU (for
    the device queries gpu_stubs.py answers)."""
    from apsi.outputs.export import common

    launch = _extract(fmt, plan, text)
    launch.update(gpu=plan.gpu, per_node=common.gpus_per_node(plan))
    return launch


def _extract(fmt: str, plan, text: str) -> dict[str, Any]:
    if fmt == "megatron-bridge":
        return {"kind": "bridge", "text": text}
    workdir = _workdir()
    if fmt == "torchtitan":
        (workdir / "apsi_plan.py").write_text(text)
        return {"kind": "torchtitan", "dir": str(workdir), "module": "apsi_plan", "function": "apsi_plan",
                "world_size": plan.gpus}
    calls = _run_script(text, workdir)
    if len(calls) != 1:
        raise LaunchError(f"the script ran {len(calls)} launchers, not one")
    call = calls[0]
    argv = call["argv"]
    exported = call["exported"]
    if "-m" in argv and "torchtitan.train" in argv:
        opts, rest = _after(argv, "torchtitan.train")
        module, function = _option(rest, "--module"), _option(rest, "--config")
        where = [p for p in call["pythonpath"].split(":") if p and (Path(p) / f"{module}.py").exists()]
        if not where:
            raise LaunchError(f"--module {module} is not on the launch's PYTHONPATH")
        return {"kind": "torchtitan", "dir": where[0], "module": module, "function": function,
                "world_size": _world(opts[:-1], ("--nproc-per-node", "--nproc_per_node"), ("--nnodes",))}
    opts, args = _after(argv, "pretrain_gpt.py")
    if call["launcher"] == "deepspeed" and _option(opts, "--num_gpus") is None:
        world = _hostfile_world(workdir, opts)
    elif call["launcher"] == "deepspeed":
        world = _world(opts, ("--num_gpus",), ("--num_nodes",))
    else:
        world = _world(opts, ("--nproc-per-node", "--nproc_per_node"), ("--nnodes",))
    if plan.framework == "deepspeed":
        path = _option(args, "--deepspeed_config", "--deepspeed-config")
        if path is None:
            raise LaunchError("no --deepspeed_config")
        config_path = Path(call["cwd"]) / path
        if not config_path.exists():
            raise LaunchError(f"the script wrote no {path}")
        return {"kind": "mds", "argv": args, "world_size": world, "ds_config": json.loads(config_path.read_text()),
                "env": exported}
    return {"kind": "megatron", "argv": args, "world_size": world, "env": exported}


# --- running the checkers ---------------------------------------------------------------------

CHECKERS = {"megatron": "check_megatron.py", "mds": "check_mds.py", "torchtitan": "check_torchtitan.py",
            "bridge": "check_bridge.py"}


def run_checker(kind: str, launches: dict[str, dict[str, Any]], timeout: float = 1800) -> dict[str, Any]:
    """{case id: {"values": ..., "errors": [...]}} from one checker process for every launch."""
    if not launches:
        return {}
    env = dict(os.environ)
    env["APSI_MEGATRON_LM"] = str(source_dir("megatron-lm") or "")
    env["APSI_MEGATRON_DEEPSPEED"] = str(source_dir("megatron-deepspeed") or "")
    env["APSI_MEGATRON_BRIDGE"] = str(source_dir("megatron-bridge") or "")
    env.pop("PYTHONPATH", None)
    run = subprocess.run([sys.executable, str(HERE / CHECKERS[kind])], input=json.dumps(launches), env=env,
                         capture_output=True, text=True, timeout=timeout, cwd=tempfile.gettempdir())
    if run.returncode != 0:
        raise RuntimeError(f"{CHECKERS[kind]} exited {run.returncode}:\n{run.stderr[-4000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


_RESULTS: dict[str, Any] = {}


def results(case_ids: list[str]) -> dict[str, Any]:
    """Each case's checker result; every case of a kind goes to its checker in one batch."""
    todo: dict[str, dict[str, dict[str, Any]]] = {}
    for cid in case_ids:
        c = case(cid)
        if cid in _RESULTS or c.launch is None:
            continue
        todo.setdefault(c.launch["kind"], {})[cid] = c.launch
    for kind, launches in todo.items():
        if missing(kind) is None:
            _RESULTS.update(run_checker(kind, launches))
    return {cid: _RESULTS.get(cid) for cid in case_ids}


# --- what the framework must arrive at --------------------------------------------------------

ROPE_BASE = {
    "llama-3.1-8b": 500000.0, "llama-3.1-70b": 500000.0, "llama-3.1-405b": 500000.0,
    "llama-3.2-1b": 500000.0, "llama-3.2-3b": 500000.0,
    "mistral-7b": 10000.0, "mixtral-8x7b": 1e6, "mixtral-8x22b": 1e6,
    "qwen3-8b": 1e6, "qwen3-32b": 1e6, "qwen3-30b-a3b": 1e6, "qwen3-235b-a22b": 1e6,
    "deepseek-v3": 10000.0, "gemma-2-27b": 10000.0,
    "olmo-2-7b": 500000.0, "olmo-2-13b": 500000.0, "olmo-2-32b": 500000.0,
}
"""rope_theta of each preset's Hugging Face config.json (the repository in apsi/inputs/presets.json; the
Llama 3 paper, Dubey et al. 2024 sec. 3.2.2: "we increase the RoPE base frequency hyperparameter
to 500,000"). Used only while the plan's architecture has no RoPE base of its own; presets left
out (Nemotron-4, GPT-3's learned positions) are not checked."""


def rope_base(plan) -> float | None:
    a = plan.model.architecture
    for name in ("rope_theta", "rope_base", "rotary_base"):
        if getattr(a, name, None):
            return float(getattr(a, name))
    if a.position_embeddings:
        return None
    return ROPE_BASE.get(plan.model.origin) if plan.model.source == "preset" else None


def dropout(plan) -> float:
    """The models train without dropout: every preset's config.json has attention_dropout 0.0 or
    none (and Hugging Face's default for these families is 0.0); apsi plans no dropout."""
    a = plan.model.architecture
    return float(getattr(a, "dropout", 0.0) or 0.0)


def megatron_expected(plan, world: int) -> dict[str, Any]:
    """What Megatron-LM's parse_args / validate_args / TransformerConfig must hold for the plan."""
    lay, a = plan.layout, plan.model.architecture
    exp: dict[str, Any] = {
        "world_size": plan.gpus, "tp": lay.tp, "pp": lay.pp, "vpp": lay.vpp if lay.vpp > 1 else None,
        "cp": lay.cp, "dp": lay.dp, "micro_batch": lay.micro_batch_sequences,
        "global_batch": plan.batch_sequences, "train_iters": plan.steps,
        "sequence_parallel": lay.tp > 1,
        "num_layers": a.layers, "hidden": a.width, "heads": a.heads, "seq_length": plan.seq,
        "bf16": plan.precision in ("bf16", "fp8"), "fp16": plan.precision == "fp16",
        "fp8": "hybrid" if plan.precision == "fp8" else None,
        "recompute_granularity": None if lay.recompute == "none" else lay.recompute,
        "hidden_dropout": dropout(plan), "attention_dropout": dropout(plan),
        "use_distributed_optimizer": lay.zero >= 1,
        # Megatron's "adam" is AdamW (decoupled_weight_decay); sgd runs only without the
        # distributed optimizer (apsi.training.frameworks.megatron.ZERO_OF).
        "optimizer": {"adamw": "adam", "sgd": "sgd"}[plan.optimizer],
        "normalization": "RMSNorm" if a.norm == "rmsnorm" else "LayerNorm",
        "gated_linear_unit": a.mlp == "swiglu", "add_bias_linear": a.attention_bias == "all" or a.mlp_bias,
        "add_qkv_bias": a.attention_bias != "none", "qk_layernorm": a.qk_norm != "none" or a.mla,
        # (MLA's latent norms are Megatron's qk_layernorm: multi_latent_attention.py q_layernorm, kv_layernorm.)
        "untied": not a.tied, "position_embedding_type": "rope" if a.position_embeddings == 0 else "learned_absolute",
    }
    if lay.pp > 1:
        exp["virtual_stage_layers"] = list(lay.virtual_stage_layers)
        exp["stage_layers"] = list(lay.stage_layers)
    if lay.recompute == "selective":
        exp["recompute_modules"] = sorted(lay.recompute_modules)
    if lay.recompute == "full":
        exp["recompute_method"] = "uniform"
        exp["recompute_num_layers"] = 1
    if not a.mla:
        exp.update(kv_channels=a.head_dim, num_query_groups=a.kv_heads, ffn=a.ffn)
    else:
        exp.update(q_lora_rank=a.q_lora_rank, kv_lora_rank=a.kv_lora_rank, qk_head_dim=a.qk_nope_dim,
                   qk_pos_emb_head_dim=a.qk_rope_dim, v_head_dim=a.v_head_dim)
    if a.dense_layers:
        exp["ffn"] = a.ffn
    if a.moe:
        exp.update(ep=lay.ep, etp=lay.etp, experts=a.experts, topk=a.top_k, expert_ffn=a.expert_ffn,
                   shared_expert_ffn=(a.shared_experts * a.shared_expert_ffn) or None,
                   moe_layers=[0] * a.dense_layers + [1] * (a.layers - a.dense_layers))
        if a.expert_groups:
            exp.update(router_groups=a.expert_groups, router_group_topk=a.expert_group_topk)
    if a.mtp_layers:
        exp["mtp_layers"] = a.mtp_layers
    base = rope_base(plan)
    if base is not None:
        exp["rotary_base"] = base
    if world != plan.gpus:
        exp["launch_world_size"] = plan.gpus
    return exp


def mds_expected(plan, world: int) -> dict[str, Any]:
    """What Megatron-DeepSpeed's arguments and DeepSpeedConfig must hold for the plan."""
    from apsi.outputs.export import common

    lay, a = plan.layout, plan.model.architecture
    exp: dict[str, Any] = {
        "world_size": plan.gpus, "tp": lay.tp, "pp": lay.pp, "dp": lay.dp, "micro_batch": lay.micro_batch_sequences,
        "global_batch": plan.batch_sequences, "train_iters": plan.steps, "num_layers": a.layers, "hidden": a.width,
        "ffn": a.ffn, "heads": a.heads, "num_query_groups": a.kv_heads, "seq_length": plan.seq,
        "bf16": plan.precision == "bf16", "fp16": plan.precision == "fp16", "deepspeed": True,
        "recompute": lay.recompute, "hidden_dropout": dropout(plan), "attention_dropout": dropout(plan),
        "normalization": a.norm if a.norm in ("rmsnorm", "layernorm") else "layernorm",
        "swiglu": a.mlp == "swiglu", "untied": not a.tied, "rotary": a.position_embeddings == 0,
        "ds_train_batch_size": plan.batch_sequences, "ds_micro_batch": lay.micro_batch_sequences,
        "ds_accumulation": common.micro_batches(plan), "ds_zero_stage": lay.zero,
        "ds_bf16": plan.precision == "bf16", "ds_fp16": plan.precision == "fp16",
        # Megatron-DeepSpeed's own optimizer (--optimizer), which ZeRO takes untested when it is SGD.
        "optimizer": {"adamw": "adam", "sgd": "sgd"}[plan.optimizer],
        "ds_allow_untested_optimizer": plan.optimizer == "sgd" and lay.zero >= 1,
    }
    if a.moe:
        exp.update(experts=a.experts, topk=a.top_k)
    base = rope_base(plan)
    if base is not None:
        exp["rotary_base"] = base
    return exp


def torchtitan_expected(plan, world: int) -> dict[str, Any]:
    """What torchtitan's Trainer.Config and ParallelDims must hold for the plan."""
    from apsi.outputs.export import common

    lay, a = plan.layout, plan.model.architecture
    exp: dict[str, Any] = {
        "world_size": plan.gpus, "dp_replicate": lay.dp_replicate, "dp_shard": lay.dp // lay.dp_replicate,
        "tp": lay.tp, "cp": lay.cp, "pp": lay.pp, "ep": lay.ep if a.moe else 1,
        "global_batch": plan.batch_sequences, "seq_len": plan.seq, "steps": plan.steps,
        "activation_checkpoint": lay.recompute, "float8": plan.precision == "fp8",
        "parallel_dims_ok": True, "n_layers": a.layers, "dim": a.width, "n_heads": a.heads,
    }
    # torchtitan's local batch is per data-parallel rank and accumulation step; under PP it is
    # split into pipeline micro-batches, so it holds all of the plan's micro-batches at once.
    exp["local_batch"] = lay.micro_batch_sequences * (common.micro_batches(plan) if lay.pp > 1 else 1)
    if lay.pp > 1:
        exp["microbatch"] = lay.micro_batch_sequences
        exp["virtual_stage_layers"] = list(lay.virtual_stage_layers)
        exp["stage_layers"] = list(lay.stage_layers)
        exp["schedule"] = "Interleaved1F1B" if lay.vpp > 1 else "1F1B"
    base = rope_base(plan)
    if base is not None:
        exp["rotary_base"] = base
    return exp


EXPECTED: dict[str, Callable[[Any, int], dict[str, Any]]] = {
    "megatron": megatron_expected, "mds": mds_expected, "torchtitan": torchtitan_expected}


def _same(want: Any, got: Any) -> bool:
    if isinstance(want, float) or isinstance(got, float):
        try:
            return abs(float(want) - float(got)) <= 1e-9 * max(1.0, abs(float(want)))
        except (TypeError, ValueError):
            return False
    return want == got


@dataclasses.dataclass
class Outcome:
    """A case's verdict: refused (one line), a list of problems (field, wanted, got), or passed."""

    case: Case
    problems: list[tuple[str, Any, Any]]
    skipped: str | None = None

    @property
    def status(self) -> str:
        if self.skipped:
            return "skipped"
        if self.case.refused is not None:
            return "refused"
        return "mismatch" if self.problems else "passed"


def outcome(case_id: str) -> Outcome:
    """The case compared: every value the framework parsed against the plan."""
    c = case(case_id)
    if c.refused is not None:
        return Outcome(c, [])
    if c.launch is None:
        return Outcome(c, [("launch", "a launcher call", c.launch_error)])
    kind = c.launch["kind"]
    reason = skip_reason(kind)
    if reason:
        return Outcome(c, [], skipped=reason)
    return _compare(c, results([case_id])[case_id])


def altered(case_id: str, old: str, new: str) -> Outcome:
    """The case with `old` replaced by `new` in its export, read by its framework's code: the
    check that a changed value is seen (its own checker process, seconds)."""
    base = case(case_id)
    assert base.text is not None and old in base.text, f"{old!r} is not in {case_id}'s export"
    text = base.text.replace(old, new)
    launch = extract(base.format, base.plan, text)
    c = Case(id=f"{case_id} (altered)", format=base.format, source=base.source, plan=base.plan, text=text,
             launch=launch)
    return _compare(c, run_checker(launch["kind"], {c.id: launch})[c.id])


def _compare(c: Case, got: dict[str, Any] | None) -> Outcome:
    assert c.launch is not None
    kind = c.launch["kind"]
    if got is None:
        return Outcome(c, [("checker", "a result", "none")])
    problems = [(f"error:{e['where']}", None, e["message"]) for e in got.get("errors", [])]
    if kind == "bridge":
        return Outcome(c, problems)
    values = got.get("values", {})
    want = EXPECTED[kind](c.plan, c.launch.get("world_size", c.plan.gpus))
    if "launch_world_size" in want:
        problems.append(("launch_world_size", want.pop("launch_world_size"), c.launch["world_size"]))
    for field, value in want.items():
        if field not in values:
            if values:  # an error stopped the checker before this value: the error says why
                problems.append((field, value, "<not reached>"))
            continue
        if not _same(value, values[field]):
            problems.append((field, value, values[field]))
    return Outcome(c, problems)


# --- known export bugs ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class KnownBug:
    """A known export bug: which cases show it and which problems it explains."""

    name: str
    reason: str
    applies: Callable[[Case], bool]
    explains: Callable[[tuple[str, Any, Any]], bool]
    elsewhere: bool = True
    """Known before these checks ran (False: found by them)."""


def _fields(*names: str) -> Callable[[tuple[str, Any, Any]], bool]:
    return lambda p: p[0] in names


def _error(pattern: str) -> Callable[[tuple[str, Any, Any]], bool]:
    return lambda p: p[0].startswith("error:") and re.search(pattern, str(p[2])) is not None


def _kind(c: Case) -> str | None:
    return None if c.launch is None else c.launch["kind"]


def _rope_differs(c: Case) -> bool:
    base = rope_base(c.plan) if c.plan is not None else None
    return base is not None and base != 10000.0  # Megatron's --rotary-base default (MLM-ARGS)


KNOWN_BUGS: tuple[KnownBug, ...] = ()
"""Export bugs known on main, each KnownBug(name, why, applies, explains): test_export_frameworks.py
marks the cases that exercise one xfail(strict=True), so a fix flips them to XPASS. None is open."""


def known_bugs(c: Case) -> list[KnownBug]:
    return [b for b in KNOWN_BUGS if c.refused is None and c.plan is not None and b.applies(c)]


def split(o: Outcome) -> tuple[list[tuple[str, Any, Any]], dict[str, list[tuple[str, Any, Any]]]]:
    """The problems no known bug explains, and each applicable known bug's problems."""
    bugs = known_bugs(o.case)
    explained: dict[str, list[tuple[str, Any, Any]]] = {b.name: [] for b in bugs}
    unexplained = []
    # Values an error kept the framework from reaching belong to whatever explains the error.
    stopper = next((b for p in o.problems if p[0].startswith("error:") for b in bugs if b.explains(p)), None)
    for p in o.problems:
        owner = stopper if p[2] == "<not reached>" else next((b for b in bugs if b.explains(p)), None)
        if owner is None:
            unexplained.append(p)
        else:
            explained[owner.name].append(p)
    return unexplained, explained
