"""Tests for apsi.outputs.export: every format of the four presets issue 11 names is read back, degree by
degree, and must equal the plan's JSON; what a framework cannot express is one line; a plan read
back from --json exports the same text."""

from __future__ import annotations

import ast
import functools
import json
import re
import shlex

import pytest

from apsi import ApsiError, evaluate, export_config, plan
from apsi.catalog import find_gpu
from apsi.outputs.export import FORMATS, read_plan

PRESETS = {
    "llama-3.1-70b": dict(tokens="1.4T"),
    "llama-3.1-405b": dict(tokens="15.6T", seq=8192, batch=2**24),
    "mixtral-8x22b": dict(tokens="2T"),
    "deepseek-v3": dict(tokens="14.8T", precision="fp8"),
}
FRAMEWORK = {"megatron": "megatron", "megatron-bridge": "megatron", "slurm": "megatron", "torchtitan": "torchtitan",
             "deepspeed": "deepspeed"}
CANNOT = {("torchtitan", "mixtral-8x22b"): "torchtitan has no model flavour for Mixtral 8x22B",
          ("deepspeed", "deepseek-v3"): "Megatron-DeepSpeed has no multi-latent attention"}
"""Plans a format cannot express, with the start of the one line that says so."""

_PLANS: dict = {}


def _plan(preset: str, framework: str):
    key = (preset, framework)
    if key not in _PLANS:
        options = dict(PRESETS[preset])
        if framework == "deepspeed" and options.get("precision") == "fp8":
            options["precision"] = "bf16"  # DeepSpeed trains no FP8
        _PLANS[key] = plan(preset, framework=framework, **options)
    return _PLANS[key]


def _argv(text: str, program: str = "pretrain_gpt.py") -> list[str]:
    """The launcher's command line as the shell splits it: from the line that is `program` to the
    first line that does not continue (no trailing backslash), each backslash-newline removed as
    the shell removes it, then split by shlex (POSIX rules)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split(" \\")[0].strip() == program)
    command = []
    for line in lines[start:]:
        command.append(line)
        if not line.endswith("\\"):
            break
    return shlex.split("\n".join(command).replace("\\\n", ""))


def _flags(text: str) -> dict[str, list[str]]:
    """Every `--flag [value ...]` of the launcher's arguments, each value one shell word as
    argparse receives it (the last of a repeated flag)."""
    out: dict[str, list[str]] = {}
    flag = None
    for word in _argv(text)[1:]:
        if word.startswith("--"):
            flag = word
            out[flag] = []
        elif flag is not None:
            out[flag].append(word)
    return out


def _one(flags: dict[str, list[str]], flag: str) -> str:
    """The single value of `flag`."""
    values = flags[flag]
    assert len(values) == 1, f"{flag} takes one value, got {values}"
    return values[0]


def _assignments(text: str, root: str) -> dict[str, object]:
    """`root.a.b = literal` lines as {"a.b": value} (a literal, or the expression's text)."""
    out: dict[str, object] = {}
    for line in text.splitlines():
        m = re.match(rf"\s*{root}\.([\w.]+) = (.+?)(\s+#.*)?$", line)
        if m:
            try:
                out[m.group(1)] = ast.literal_eval(m.group(2))
            except (ValueError, SyntaxError):
                out[m.group(1)] = m.group(2)
    return out


def _megatron_stages(flags: dict, p) -> list[int]:
    """The virtual stages' layers Megatron will build from the exported split arguments."""
    a = p.model.architecture
    pp = int(_one(flags, "--pipeline-model-parallel-size"))
    if "--pipeline-model-parallel-layout" in flags:
        return [stage.count("t") for stage in _one(flags, "--pipeline-model-parallel-layout").split("|")]
    vpp = int(_one(flags, "--num-virtual-stages-per-pipeline-rank")) if "--num-virtual-stages-per-pipeline-rank" in flags \
        else 1
    chunks = pp * vpp
    if "--decoder-first-pipeline-num-layers" in flags:
        first = int(_one(flags, "--decoder-first-pipeline-num-layers"))
        last = int(_one(flags, "--decoder-last-pipeline-num-layers"))
        middle = (a.layers - first - last) // (pp - 2) if pp > 2 else 0
        ranks = [first] + [middle] * (pp - 2) + [last]
        return [ranks[j % pp] // vpp for j in range(chunks)]
    embedding = "--account-for-embedding-in-pipeline-split" in flags
    loss = "--account-for-loss-in-pipeline-split" in flags
    units = a.layers + embedding + loss
    sizes = [units // chunks] * chunks
    sizes[0] -= embedding
    sizes[-1] -= loss
    return sizes


def _check_megatron_flags(flags: dict, p) -> None:
    lay = p.layout
    one = functools.partial(_one, flags)
    assert int(one("--tensor-model-parallel-size")) == lay.tp
    assert int(one("--pipeline-model-parallel-size")) == lay.pp
    assert int(one("--context-parallel-size")) == lay.cp
    assert int(one("--micro-batch-size")) == lay.micro_batch_sequences
    assert int(one("--global-batch-size")) == p.batch_sequences
    assert int(one("--seq-length")) == p.seq
    assert int(one("--train-iters")) == p.steps
    if p.model.architecture.moe:
        assert int(one("--expert-model-parallel-size")) == lay.ep
        assert int(one("--expert-tensor-parallel-size")) == lay.etp
    assert ("--sequence-parallel" in flags) == (lay.tp > 1)
    granularity = one("--recompute-granularity") if "--recompute-granularity" in flags else "none"
    assert granularity == lay.recompute
    if lay.recompute == "selective":
        # Megatron's --recompute-modules is nargs='+': one shell word per module (MLM-TC).
        assert flags["--recompute-modules"] == lay.recompute_modules
    if lay.pp > 1:
        assert _megatron_stages(flags, p) == lay.virtual_stage_layers
    # dp is what is left of the GPUs: Megatron derives it from the world size.
    assert p.gpus // (lay.tp * lay.pp * lay.cp) == lay.dp


@pytest.mark.parametrize("preset", list(PRESETS))
@pytest.mark.parametrize("fmt", FORMATS)
def test_exported_degrees_equal_the_plan(preset: str, fmt: str) -> None:
    p = _plan(preset, FRAMEWORK[fmt])
    if (fmt, preset) in CANNOT:
        with pytest.raises(ApsiError, match="^" + re.escape(CANNOT[fmt, preset])):
            export_config(p, fmt)
        return
    text = export_config(p, fmt)
    lay = p.layout
    # Every file opens with apsi's version, the plan, its memory and step time, the names' version.
    head = text.split("\n", 6)
    assert any("Generated by apsi 0.1.0" in line for line in head[:3])
    assert f"{p.memory_per_gpu_gib:,.1f} GiB per GPU" in text and "per step" in text and "Names:" in text
    if fmt in ("megatron", "slurm"):
        _check_megatron_flags(_flags(text), p)
    if fmt == "slurm":
        assert re.search(rf"^#SBATCH --nodes={p.nodes}$", text, re.M)
        assert re.search(rf"^#SBATCH --gpus-per-node={find_gpu(p.gpu).gpus_per_node}$", text, re.M)
    if fmt == "megatron-bridge":
        cfg = _assignments(text, "cfg")
        assert cfg["model.tensor_model_parallel_size"] == lay.tp
        assert cfg["model.pipeline_model_parallel_size"] == lay.pp
        assert cfg["model.virtual_pipeline_model_parallel_size"] == (lay.vpp if lay.vpp > 1 else None)
        assert cfg["model.context_parallel_size"] == lay.cp
        assert cfg["model.sequence_parallel"] == (lay.tp > 1)
        if p.model.architecture.moe:
            assert (cfg["model.expert_model_parallel_size"], cfg["model.expert_tensor_parallel_size"]) == (lay.ep, lay.etp)
        assert (cfg["train.global_batch_size"], cfg["train.micro_batch_size"]) == (p.batch_sequences,
                                                                                   lay.micro_batch_sequences)
        assert cfg["model.seq_length"] == cfg["dataset.seq_length"] == p.seq
        assert cfg["train.train_iters"] == p.steps
        assert (cfg["model.recompute_granularity"] or "none") == lay.recompute
    if fmt == "torchtitan":
        cfg = _assignments(text, "config")
        assert cfg["parallelism.data_parallel_replicate_degree"] * cfg["parallelism.data_parallel_shard_degree"] == lay.dp
        assert cfg["parallelism.data_parallel_replicate_degree"] == lay.dp_replicate
        assert cfg["parallelism.tensor_parallel_degree"] == lay.tp
        assert cfg["parallelism.context_parallel_degree"] == lay.cp
        assert cfg["parallelism.pipeline_parallel_degree"] == lay.pp
        assert cfg["parallelism.expert_parallel_degree"] == lay.ep
        m = p.batch_sequences // (lay.micro_batch_sequences * lay.dp)
        if lay.pp > 1:
            # torchtitan 0.3: local_batch_size split into micro-batches of pipeline_parallel_microbatch_size.
            assert cfg["parallelism.pipeline_parallel_microbatch_size"] == lay.micro_batch_sequences
            assert cfg["training.local_batch_size"] == m * lay.micro_batch_sequences
            assert cfg["parallelism.pipeline_parallel_schedule"] == ("Interleaved1F1B" if lay.vpp > 1 else "1F1B")
            parts = cfg["parallelism.module_fqns_per_model_part"]
            assert [sum(m.startswith("layers.") for m in part) for part in parts] == lay.virtual_stage_layers
        else:
            assert cfg["training.local_batch_size"] == lay.micro_batch_sequences
        assert cfg["training.global_batch_size"] == p.batch_sequences
        assert cfg["training.seq_len"] == p.seq
        assert cfg["training.steps"] == p.steps
        assert cfg["activation_checkpoint"] == {"none": None, "selective": "SelectiveAC.Config()",
                                                "full": "FullAC.Config()"}[lay.recompute]
    if fmt == "deepspeed":
        config = json.loads(text.split("cat > ds_config.json <<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0])
        m = p.batch_sequences // (lay.micro_batch_sequences * lay.dp)
        # DeepSpeed's rule: train_batch_size = micro-batch x accumulation x data-parallel GPUs.
        assert config["train_batch_size"] == config["train_micro_batch_size_per_gpu"] * config[
            "gradient_accumulation_steps"] * lay.dp == p.batch_sequences
        assert (config["train_micro_batch_size_per_gpu"], config["gradient_accumulation_steps"]) == (
            lay.micro_batch_sequences, m)
        assert config["zero_optimization"]["stage"] == lay.zero
        flags = _flags(text)
        assert (int(_one(flags, "--tensor-model-parallel-size")), int(_one(flags, "--pipeline-model-parallel-size"))) == (
            lay.tp, lay.pp)
        assert int(_one(flags, "--seq-length")) == p.seq and int(_one(flags, "--train-iters")) == p.steps
        assert ("--checkpoint-activations" in flags) == (lay.recompute == "full")


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_plan_read_back_from_json_exports_the_same(fmt: str) -> None:
    p = _plan("llama-3.1-405b", FRAMEWORK[fmt])
    assert export_config(read_plan(p.model_dump_json()), fmt) == export_config(p, fmt)


@pytest.mark.parametrize("preset", list(PRESETS))
@pytest.mark.parametrize("framework", ["megatron", "torchtitan", "deepspeed"])
def test_every_fresh_plan_keeps_the_saved_plan_rules(preset: str, framework: str) -> None:
    # read_plan refuses a saved plan that breaks a fresh plan's rules (apsi.outputs.export.checks): every
    # fresh plan, MoE, MLA, FP8 and uneven splits among them, reads back equal.
    p = _plan(preset, framework)
    assert read_plan(p.model_dump_json()) == p


def test_partial_plans_keep_the_saved_plan_rules(partial_plans) -> None:
    for p in partial_plans:
        assert read_plan(p.model_dump_json()) == p


def test_what_cannot_be_exported_is_one_line() -> None:
    p = _plan("llama-3.1-70b", "megatron")
    with pytest.raises(ApsiError, match=r"^the plan is a megatron plan.*framework='torchtitan'"):
        export_config(p, "torchtitan")
    with pytest.raises(ApsiError, match=r"^unknown export format 'megtron': did you mean megatron\?"):
        export_config(p, "megtron")
    ref = plan("70B", tokens="1.4T", framework="reference")
    with pytest.raises(ApsiError, match="^a reference-arithmetic plan has no framework to launch"):
        export_config(ref, "megatron")
    with pytest.raises(ApsiError, match="^megatron-bridge builds the model from its Hugging Face config"):
        export_config(plan("70B", tokens="1.4T"), "megatron-bridge")
    with pytest.raises(ApsiError, match="^not an apsi plan"):
        read_plan('{"gpus": 3}')


def test_a_changed_preset_is_not_exported_as_the_shipped_one() -> None:
    # Bridge's AutoBridge and torchtitan's flavours build a preset as shipped: a plan that changes
    # its fields (kv_heads, layers) is refused there, and Megatron's arguments carry the change.
    mha = evaluate("llama-3.1-70b", kv_heads=64, tp=8, pp=4, dp=4, tokens="1T")
    with pytest.raises(ApsiError, match=r"^megatron-bridge builds .* the plan changes it \(kv_heads 8 -> 64\)"):
        export_config(mha, "megatron-bridge")
    deep = evaluate("llama-3.1-8b", layers=40, framework="torchtitan", tp=1, dp=8, tokens="1T")
    with pytest.raises(ApsiError, match=r"^torchtitan's model flavours .* \(layers 32 -> 40\)"):
        export_config(deep, "torchtitan")
    script = export_config(mha, "megatron")  # MHA: no --group-query-attention (MLM-ARGS)
    assert "--num-attention-heads 64" in script and "--group-query-attention" not in script
    # A field given at the preset's own value changes nothing.
    same = evaluate("llama-3.1-70b", kv_heads=8, tp=8, pp=4, dp=4, tokens="1T")
    assert 'AutoBridge.from_hf_pretrained("meta-llama/Llama-3.1-70B")' in export_config(same, "megatron-bridge")


def test_cli_export_and_export_command(apsi, tmp_path) -> None:
    run = apsi("plan", "llama-3.1-70b", "--tokens", "1.4T", "--export", "torchtitan")
    assert run.code == 0, run.why()
    assert "config.parallelism.tensor_parallel_degree" in run.out
    saved = apsi("plan", "llama-3.1-70b", "--tokens", "1.4T", "--framework", "torchtitan", "--json")
    path = tmp_path / "plan.json"
    path.write_text(saved.out)
    out = tmp_path / "apsi_plan.py"
    again = apsi("export", str(path), "--to", "torchtitan", "--output", str(out))
    assert again.code == 0, again.why()
    assert out.read_text() == run.out
    bad = apsi("export", str(path), "--to", "megatron")
    assert bad.code == 2 and bad.err.startswith("error: the plan is a torchtitan plan")


@pytest.mark.parametrize("fmt", FORMATS)
def test_exports_parse_as_their_language(fmt: str, tmp_path) -> None:
    # What runs without the frameworks installed: the shell scripts pass `bash -n`, the Python ones
    # compile, the ds_config is JSON (above). The frameworks' own parsers: test_framework_parsers.
    import shutil
    import subprocess

    p = _plan("llama-3.1-405b", FRAMEWORK[fmt])
    text = export_config(p, fmt)
    if fmt in ("megatron-bridge", "torchtitan"):
        ast.parse(text)
    else:
        if shutil.which("bash") is None:
            pytest.skip("no bash to check the script with")
        path = tmp_path / "launch.sh"
        path.write_text(text)
        assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0


def _deepspeed_parses(deepspeed_config, config: dict, p, monkeypatch):
    """DeepSpeed's own DeepSpeedConfig of an exported ds_config, an mpu standing in for the plan's
    process groups and rank 0 for torch.distributed."""

    class Groups:
        def get_data_parallel_world_size(self) -> int:
            return p.layout.dp

        def get_model_parallel_world_size(self) -> int:
            return p.layout.tp * p.layout.pp

        def get_data_parallel_rank(self) -> int:
            return 0

    monkeypatch.setattr(deepspeed_config.dist, "get_rank", lambda *args, **kwargs: 0)
    return deepspeed_config.DeepSpeedConfig(config, mpu=Groups())


@pytest.mark.parametrize("preset", ["llama-3.1-70b", "llama-3.1-405b", "mixtral-8x22b"])
def test_framework_parsers_accept_the_exports(preset: str, monkeypatch) -> None:
    # Optional (pip install '.[frameworks]': DeepSpeed, which brings torch): DeepSpeed's own config
    # class reads the exported ds_config, its batch rule checked against the plan's data-parallel
    # degree (an mpu stands in for the process groups, and rank 0 for torch.distributed).
    # Skipped where DeepSpeed is not installed (CI).
    deepspeed_config = pytest.importorskip("deepspeed.runtime.config")
    p = _plan(preset, "deepspeed")
    text = export_config(p, "deepspeed")
    config = json.loads(text.split("cat > ds_config.json <<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0])
    parsed = _deepspeed_parses(deepspeed_config, config, p, monkeypatch)
    assert (parsed.train_batch_size, parsed.train_micro_batch_size_per_gpu, parsed.gradient_accumulation_steps) == (
        p.batch_sequences, p.layout.micro_batch_sequences, p.batch_sequences // (p.layout.micro_batch_sequences
                                                                                * p.layout.dp))
    assert parsed.zero_optimization_stage == p.layout.zero and parsed.bfloat16_config.enabled


def test_deepspeeds_parser_reads_the_sgd_export(monkeypatch) -> None:
    # Optional (DeepSpeed installed, as above): DeepSpeed's own config class reads the SGD plan's
    # ds_config, zero_allow_untested_optimizer among its settings (DS-OPT). Skipped without it (CI).
    deepspeed_config = pytest.importorskip("deepspeed.runtime.config")
    p = evaluate("llama-3.1-8b", framework="deepspeed", optimizer="sgd", tokens="100B", gpus=16, tp=1, zero=1)
    parsed = _deepspeed_parses(deepspeed_config, _ds(export_config(p, "deepspeed")), p, monkeypatch)
    assert parsed.zero_allow_untested_optimizer is True and parsed.optimizer_name is None
    assert parsed.zero_optimization_stage == 1


def test_the_flex_dispatcher_is_exported() -> None:
    # dispatcher="flex" is Megatron's --moe-token-dispatcher-type flex with DeepEP, or HybridEP on
    # GB200 NVL72, where DeepEP does not run (Megatron-Bridge apply_flex_dispatcher_backend); Bridge
    # turns the shared-expert overlap off with it.
    layout = dict(framework="megatron", tokens="1T", tp=1, pp=1, dp=16, ep=16, seq=4096)
    lm = export_config(evaluate("qwen3-30b-a3b", dispatcher="flex", **layout), "megatron")
    assert "--moe-token-dispatcher-type flex" in lm and "--moe-flex-dispatcher-backend deepep" in lm
    plain = export_config(evaluate("qwen3-30b-a3b", **layout), "megatron")
    assert "--moe-token-dispatcher-type alltoall" in plain and "--moe-flex-dispatcher-backend" not in plain
    bridge = export_config(evaluate("qwen3-30b-a3b", dispatcher="flex", gpu="GB200", **layout), "megatron-bridge")
    assert 'cfg.model.moe_token_dispatcher_type = "flex"' in bridge
    assert 'cfg.model.moe_flex_dispatcher_backend = "hybridep"' in bridge


def test_export_doc_is_current() -> None:
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    run = subprocess.run([sys.executable, str(root / "docs" / "make_export.py"), "--check"], capture_output=True)
    assert run.returncode == 0, "docs/export.md is stale: run python docs/make_export.py"


@pytest.mark.parametrize("preset", ["llama-3.1-70b", "llama-3.1-405b", "deepseek-v3"])
def test_torchtitan_builds_the_exported_config(preset: str, tmp_path, monkeypatch) -> None:
    # Optional (torchtitan 0.3.0 and torch installed): the exported module is imported and its
    # function run, so torchtitan's own Trainer.Config and its baselines accept every field it sets;
    # the degrees are read back from the object. Skipped where torchtitan is not installed (CI).
    pytest.importorskip("torchtitan.trainer")
    import importlib
    import sys

    import torch

    if preset == "llama-3.1-405b" and not torch.cuda.is_available():
        pytest.skip("torchtitan's 405B baseline builds float8 linears, which need a GPU that has them (SM89+)")
    p = plan(preset, framework="torchtitan", **{**PRESETS[preset], "precision": "bf16"})
    (tmp_path / "apsi_plan.py").write_text(export_config(p, "torchtitan"))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("apsi_plan", None)
    config = importlib.import_module("apsi_plan").apsi_plan()
    lay = p.layout
    par = config.parallelism
    assert (par.tensor_parallel_degree, par.pipeline_parallel_degree, par.context_parallel_degree,
            par.expert_parallel_degree) == (lay.tp, lay.pp, lay.cp, lay.ep)
    assert par.data_parallel_shard_degree * par.data_parallel_replicate_degree == lay.dp
    assert (config.training.global_batch_size, config.training.seq_len, config.training.steps) == (
        p.batch_sequences, p.seq, p.steps)


# Partial nodes: a plan with node granularity 1 may end in a node running fewer ranks. Every
# launcher must start exactly plan.gpus ranks, each node its own share under its own node rank.
# The scripts are run with bash, torchrun and deepspeed replaced by stubs that record their
# arguments, and Slurm's srun and scontrol faked.

def _partial_plans() -> list:
    """Plans whose GPU counts are and are not multiples of a node's 8 GPUs (evaluate's layouts:
    gpus = tp x pp x dp), and the layout of the issue's plan: Llama 3.1 70B on 15T tokens at node
    granularity 1 under torchtitan, TP 4 x PP 9 x DP 81 (2,916 GPUs, 365 nodes). The plan itself
    moved to DP 78 (2,808 GPUs, whole nodes) when the step model's constants were refitted with
    the data-parallel model's NCCL latency, so its layout is evaluated, not planned."""
    return [
        evaluate("llama-3.1-8b", framework="megatron", tokens="10B", tp=2, pp=1, dp=5),  # 10 GPUs: 8 + 2
        evaluate("llama-3.1-8b", framework="megatron", tokens="10B", tp=2, pp=2, dp=5),  # 20 GPUs: 8 + 8 + 4
        evaluate("llama-3.1-8b", framework="megatron", tokens="10B", tp=2, pp=2, dp=4),  # 16 GPUs: whole nodes
        evaluate("llama-3.1-8b", framework="megatron", tokens="10B", tp=1, pp=3, dp=1),  # 3 GPUs: one partial node
        evaluate("llama-3.1-8b", framework="deepspeed", tokens="10B", tp=1, dp=13, zero=3),  # 13 GPUs: 8 + 5
        evaluate("llama-3.1-8b", framework="torchtitan", tokens="10B", tp=1, pp=1, dp=13),
        evaluate("llama-3.1-70b", framework="torchtitan", tokens="15T", tp=4, pp=9, vpp=8, dp=81),
    ]


def _stub(folder, name: str) -> None:
    """An executable `name` on PATH that appends its arguments, one per line, to
    $RECORD/<node>.args (the node from SLURM_NODEID or NODE_RANK)."""
    path = folder / name
    path.write_text('#!/bin/bash\nnode="${SLURM_NODEID:-${NODE_RANK:-0}}"\n'
                    'printf "%s\\n" "$@" > "$RECORD/$node.args"\n')
    path.chmod(0o755)


def _fake_slurm(folder, nodes: int) -> None:
    """srun running its command once per node with that node's SLURM_NODEID (as Slurm does, one
    task per node), its own options dropped; scontrol listing the job's hosts."""
    srun = folder / "srun"
    srun.write_text('#!/bin/bash\nwhile [[ "$1" == -* ]]; do shift; done\n'
                    f'for ((i = 0; i < {nodes}; i++)); do SLURM_NODEID=$i "$@" || exit 1; done\n')
    scontrol = folder / "scontrol"
    scontrol.write_text(f'#!/bin/bash\nfor ((i = 0; i < {nodes}; i++)); do echo "node$i"; done\n')
    for path in (srun, scontrol):
        path.chmod(0o755)


def _run_script(text: str, tmp_path, env: dict[str, str]):
    import os
    import subprocess

    bin_dir = tmp_path / "bin"
    record = tmp_path / "record"
    bin_dir.mkdir(exist_ok=True)
    record.mkdir(exist_ok=True)
    for name in ("torchrun", "deepspeed"):
        _stub(bin_dir, name)
    script = tmp_path / "launch.sh"
    script.write_text(text)
    full = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "RECORD": str(record), "DATA_PATH": "/data/x",
            "TOKENIZER": "tok", **env}
    run = subprocess.run(["bash", str(script)], cwd=tmp_path, env=full, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return record


def _torchrun_ranks(record, nodes: int) -> list[tuple[int, int, int]]:
    """(node rank, nproc per node, nnodes) each node's torchrun was given, node by node."""
    out = []
    for node in range(nodes):
        argv = (record / f"{node}.args").read_text().splitlines()
        value = {flag: argv[argv.index(flag) + 1] for flag in ("--node-rank", "--nproc-per-node", "--nnodes")}
        out.append((int(value["--node-rank"]), int(value["--nproc-per-node"]), int(value["--nnodes"])))
    return out


@pytest.fixture(scope="module")
def partial_plans() -> list:
    return _partial_plans()


def _bash() -> None:
    import shutil

    if shutil.which("bash") is None:
        pytest.skip("no bash to run the script with")


def test_the_partial_plans_are_partial(partial_plans) -> None:
    # The cases below must include plans that do not fill their last node.
    assert any(p.gpus % p.nodes for p in partial_plans) and any(p.gpus % 8 for p in partial_plans)
    assert partial_plans[-1].gpus % 8 and partial_plans[-1].nodes == -(-partial_plans[-1].gpus // 8)


def test_slurm_gives_each_node_its_own_rank_and_share(partial_plans, tmp_path) -> None:
    # srun runs one launcher per node; each must read its own SLURM_NODEID there (the batch shell
    # runs on node 0, where SLURM_NODEID is 0), and the ranks started must sum to plan.gpus.
    _bash()
    for i, p in enumerate(partial_plans):
        if p.nodes > 40 and i != len(partial_plans) - 1:
            continue
        folder = tmp_path / f"plan{i}"
        folder.mkdir()
        bin_dir = folder / "bin"
        bin_dir.mkdir()
        _fake_slurm(bin_dir, p.nodes)
        text = export_config(p, "slurm")
        record = _run_script(text, folder, {"SLURM_NODEID": "0", "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": f"node[0-{p.nodes - 1}]",
                                            "SLURM_NNODES": str(p.nodes)})
        ranks = _torchrun_ranks(record, p.nodes)
        assert [r for r, _, _ in ranks] == list(range(p.nodes)), p.gpus
        assert {n for _, _, n in ranks} == {p.nodes}
        # Full nodes run the GPU's gpus_per_node (the catalog's 8 for H100), the last the rest.
        per = find_gpu(p.gpu).gpus_per_node
        assert [c for _, c, _ in ranks[:-1]] == [per] * (p.nodes - 1)
        assert sum(c for _, c, _ in ranks) == p.gpus


def test_the_megatron_script_starts_the_plans_ranks(partial_plans, tmp_path) -> None:
    # The megatron script runs on every node with its NODE_RANK; summed over the nodes, its
    # torchrun starts plan.gpus ranks.
    _bash()
    for i, p in enumerate(partial_plans):
        if p.framework != "megatron":
            continue
        text = export_config(p, "megatron")
        folder = tmp_path / f"plan{i}"
        folder.mkdir()
        for node in range(p.nodes):
            record = _run_script(text, folder, {"NODE_RANK": str(node)})
        ranks = _torchrun_ranks(record, p.nodes)
        assert [r for r, _, _ in ranks] == list(range(p.nodes))
        assert sum(c for _, c, _ in ranks) == p.gpus


def test_the_deepspeed_hostfile_holds_the_plans_ranks(partial_plans, tmp_path) -> None:
    # DeepSpeed's runner starts each host's slots (--num_gpus would give every node the same):
    # the hostfile the script writes must hold plan.gpus slots over the plan's nodes.
    _bash()
    p = next(p for p in partial_plans if p.framework == "deepspeed")
    assert p.gpus % 8
    (tmp_path / "hostfile").write_text("# the cluster\n" + "".join(f"host{i} slots=8\n" for i in range(p.nodes + 2)))
    text = export_config(p, "deepspeed")
    record = _run_script(text, tmp_path, {})
    argv = (record / "0.args").read_text().splitlines()
    assert "--num_gpus" not in argv and argv[argv.index("--hostfile") + 1] == "apsi_hostfile"
    hosts = (tmp_path / "apsi_hostfile").read_text().split("\n")[:-1]
    slots = [int(line.split("slots=")[1]) for line in hosts]
    assert [line.split()[0] for line in hosts] == [f"host{i}" for i in range(p.nodes)]
    assert sum(slots) == p.gpus and slots[:-1] == [8] * (p.nodes - 1)
    # Its comment gives the slots run by run (a plan on 486 hosts listed 486 eights).
    last = p.gpus - 8 * (p.nodes - 1)
    assert (f"with their slots: 8 on {p.nodes - 1:,} host{'s' if p.nodes != 2 else ''}, then {last} on 1 host "
            f"({p.gpus:,} ranks)") in text
    short = tmp_path / "short"
    short.mkdir()
    (short / "hostfile").write_text("host0 slots=8\n")
    import os
    import subprocess

    (short / "launch.sh").write_text(text)
    run = subprocess.run(["bash", "launch.sh"], cwd=short, capture_output=True, text=True,
                         env={**os.environ, "DATA_PATH": "x", "TOKENIZER": "y"})
    assert run.returncode == 1 and f"the plan needs {p.nodes}" in run.stderr


@pytest.mark.parametrize("fmt", ["torchtitan", "megatron-bridge"])
def test_the_python_exports_say_each_nodes_share(fmt: str, partial_plans) -> None:
    # The Python exports carry the launch as comment lines: one torchrun for the full nodes and
    # one for the last; their ranks must sum to plan.gpus.
    for p in partial_plans:
        if fmt == "megatron-bridge":
            if p.framework != "megatron":
                continue
        elif p.framework != "torchtitan":
            continue
        text = export_config(p, fmt)
        total = 0
        for m in re.finditer(r"^#   torchrun --nproc-per-node (\d+) --nnodes (\d+) --node-rank (\w+) .*\((.*)\)$",
                             text, re.M):
            nproc, nnodes, rank, which = int(m[1]), int(m[2]), m[3], m[4]
            assert nnodes == p.nodes
            if which == "the last node":
                assert rank == str(p.nodes - 1)
                total += nproc
            else:
                first, last = (int(x) for x in re.fullmatch(r"R = (\d+) to (\d+)", which).groups())
                total += nproc * (last - first + 1)
        assert total == p.gpus


# The model the exports launch must be the planned model: its RoPE, its router, its norms, and
# no dropout (apsi's activation memory keeps no dropout masks: apsi.model.memory).

def test_megatron_carries_llama_rope_and_no_dropout() -> None:
    # Llama 3.1: rope_theta 500000 and the llama3 RoPE scaling of factor 8 (meta-llama/Llama-3.1-70B
    # config.json, presets.json); Megatron core_v0.19.0: --rotary-base, --use-rope-scaling,
    # --rope-scaling-factor; TransformerConfig's dropouts default to 0.1 (MLM-TC).
    p = _plan("llama-3.1-70b", "megatron")
    flags = _flags(export_config(p, "megatron"))
    assert _one(flags, "--rotary-base") == "500000"
    assert flags["--use-rope-scaling"] == [] and float(_one(flags, "--rope-scaling-factor")) == pytest.approx(8.0)
    assert _one(flags, "--position-embedding-type") == "rope"
    assert float(_one(flags, "--hidden-dropout")) == 0 and float(_one(flags, "--attention-dropout")) == 0


def test_megatron_carries_deepseek_v3s_router_and_yarn() -> None:
    # DeepSeek-V3 (its config.json: n_group 8, topk_group 4, scoring_func sigmoid, noaux_tc with
    # e_score_correction_bias, routed_scaling_factor 2.5, rope_scaling yarn factor 40, mscale 1 and
    # mscale_all_dim 1; DSV3 Sec. 2.1.2): Megatron's group-limited routing, sigmoid scores, expert
    # bias and scaling factor (MLM-TC moe_router_*), MLA's YaRN and its latent norms.
    p = _plan("deepseek-v3", "megatron")
    a = p.model.architecture
    flags = _flags(export_config(p, "megatron"))
    assert (int(_one(flags, "--moe-router-num-groups")), int(_one(flags, "--moe-router-group-topk"))) == (
        a.expert_groups, a.expert_group_topk) == (8, 4)
    assert _one(flags, "--moe-router-score-function") == "sigmoid"
    assert flags["--moe-router-enable-expert-bias"] == []
    assert float(_one(flags, "--moe-router-topk-scaling-factor")) == pytest.approx(2.5)
    assert flags["--qk-layernorm"] == [] and flags["--multi-latent-attention"] == []
    assert _one(flags, "--rope-type") == "yarn" and float(_one(flags, "--rotary-scaling-factor")) == pytest.approx(40)
    assert float(_one(flags, "--mscale")) == float(_one(flags, "--mscale-all-dim")) == pytest.approx(1.0)
    assert _one(flags, "--rotary-base") == "10000"
    assert float(_one(flags, "--hidden-dropout")) == 0 and float(_one(flags, "--attention-dropout")) == 0


def test_list_flags_are_separate_arguments() -> None:
    # Megatron's --recompute-modules is nargs='+' (MLM-TC): `--recompute-modules layernorm mlp`,
    # never one quoted 'layernorm mlp'.
    p = evaluate("llama-3.1-8b", framework="megatron", tokens="10B", tp=2, pp=2, dp=5, recompute="selective",
                 recompute_modules=["layernorm", "mlp"])
    for fmt in ("megatron", "slurm"):
        flags = _flags(export_config(p, fmt))
        assert flags["--recompute-modules"] == ["layernorm", "mlp"]
        _check_megatron_flags(flags, p)


def test_deepspeed_uses_megatron_deepspeeds_names() -> None:
    # Megatron-DeepSpeed's megatron/arguments.py (f4157bea): --normalization choices are lower case,
    # GQA is --num-key-value-heads, RoPE --use-rotary-position-embeddings with
    # --rotary-position-embeddings-theta; it has no --position-embedding-type,
    # --group-query-attention or --num-query-groups. Llama 3.1 70B: 8 KV heads, rope_theta 500000.
    p = _plan("llama-3.1-70b", "deepspeed")
    text = export_config(p, "deepspeed")
    flags = _flags(text)
    assert _one(flags, "--normalization") == "rmsnorm"
    assert int(_one(flags, "--num-key-value-heads")) == p.model.architecture.kv_heads == 8
    assert flags["--use-rotary-position-embeddings"] == [] and _one(flags, "--rotary-position-embeddings-theta") == "500000"
    for absent in ("--position-embedding-type", "--group-query-attention", "--num-query-groups", "--rotary-base"):
        assert absent not in flags
    assert {"--swiglu", "--untie-embeddings-and-output-weights", "--disable-bias-linear"} <= set(flags)
    assert float(_one(flags, "--hidden-dropout")) == 0 and float(_one(flags, "--attention-dropout")) == 0
    # What it cannot carry is said in the header: Megatron-DeepSpeed has no RoPE scaling.
    assert re.search(r"^# Not carried: the RoPE scaling llama3", text, re.M)
    assert "f4157bea" in text.split("\nset -euo", 1)[0]
    with pytest.raises(ApsiError, match="^Megatron-DeepSpeed has no QK layernorm"):
        export_config(evaluate("qwen3-8b", framework="deepspeed", tokens="10B", tp=1, dp=8, zero=1), "deepspeed")


def test_bridge_uses_the_released_api() -> None:
    # Megatron-Bridge 0.6.2's AutoBridge has to_megatron_provider(load_weights=False), not
    # get_model_config (megatron_bridge-0.6.2 wheel, models/conversion/auto_bridge.py).
    text = export_config(_plan("llama-3.1-70b", "megatron"), "megatron-bridge")
    assert "get_model_config" not in text
    assert 'AutoBridge.from_hf_pretrained("meta-llama/Llama-3.1-70B").to_megatron_provider(load_weights=False)' in text
    assert "Megatron-Bridge 0.6.2" in text.split("\nimport", 1)[0]
    cfg = _assignments(text, "cfg")
    assert cfg["model.hidden_dropout"] == cfg["model.attention_dropout"] == 0.0


def test_hf_config_reads_rope_and_router_fields() -> None:
    # rope_theta, rope_scaling and scoring_func / routed_scaling_factor are read from config.json
    # as given; absent, they are None (a Llama config without them) or the family's default.
    from apsi.inputs.hf_config import architecture_from_config

    base = dict(model_type="llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                num_attention_heads=32, num_key_value_heads=8, vocab_size=128256)
    a = architecture_from_config({**base, "rope_theta": 500000.0, "rope_scaling": {
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192}})
    assert a.rope_theta == 500000.0 and a.rope_scaling is not None
    assert (a.rope_scaling.type, a.rope_scaling.factor, a.rope_scaling.original_context) == ("llama3", 8.0, 8192)
    plain = architecture_from_config(base)
    assert plain.rope_theta is None and plain.rope_scaling is None and plain.router_score is None
    # No scaling and no base: Megatron's defaults, said in the header.
    from apsi.outputs.export import megatron

    assert megatron.rope_arguments(plain) == ([("--position-embedding-type", "rope")],
                                              ["the RoPE base (rope_theta) is not in the model's description: "
                                               "Megatron's --rotary-base default 10000 applies"])
    from apsi.errors import ApsiError as Error

    with pytest.raises(Error, match="rope_scaling has no rope_type"):
        architecture_from_config({**base, "rope_scaling": {"factor": 2.0}})


def test_a_partial_node_of_unknown_size_is_refused() -> None:
    # A GPU outside the shipped catalog does not say its node's GPUs: 13 GPUs on 2 nodes could be
    # 8 + 5 or 7 + 6, and tensor-parallel groups must not straddle nodes. An even split is its
    # own answer; an uneven one is refused in one line.
    p = evaluate("llama-3.1-8b", framework="megatron", tokens="10B", tp=1, pp=1, dp=13)
    assert (p.gpus, p.nodes) == (13, 2)
    odd = p.model_copy(update={"gpu": "my-gpu", "gpus_per_node": None})  # saved before plans recorded it
    with pytest.raises(ApsiError, match=r"^the plan's 13 GPUs on 2 nodes do not say a node's GPUs .*--node-granularity"):
        export_config(odd, "megatron")
    even = evaluate("llama-3.1-8b", framework="megatron", tokens="10B", tp=2, pp=1, dp=8).model_copy(
        update={"gpu": "my-gpu"})
    assert _one(_flags(export_config(even, "slurm")), "--tensor-model-parallel-size") == "2"
    assert "#SBATCH --gpus-per-node=8" in export_config(even, "slurm")


def test_a_catalogs_gpus_per_node_is_the_exports(tmp_path, partial_plans) -> None:
    # A catalog giving H100 6 GPUs a node: 12 GPUs are 2 nodes of 6, but the exports looked the
    # node up in the shipped catalog (8) and launched 8 + 4 (#SBATCH --gpus-per-node=8). The plan
    # records its node (gpus_per_node), and a saved plan exports it without the catalog file.
    _bash()
    catalog = tmp_path / "cat6.yaml"
    catalog.write_text("gpus:\n  H100:\n    gpus_per_node: 6\n")
    p = plan("llama-3.1-8b", tokens="100B", catalog=str(catalog), gpus=12)
    assert (p.gpus, p.nodes) == (12, 2)
    saved = read_plan(p.model_dump_json())
    for each in (p, saved):
        text = export_config(each, "slurm")
        assert re.search(r"^#SBATCH --gpus-per-node=6$", text, re.M) and "NPROC=6\n" in text and "NPROC=4" not in text
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir(exist_ok=True)
        _fake_slurm(bin_dir, 2)
        record = _run_script(text, tmp_path, {"SLURM_NODEID": "0", "SLURM_JOB_ID": "4242",
                                              "SLURM_JOB_NODELIST": "node[0-1]"})
        assert _torchrun_ranks(record, 2) == [(0, 6, 2), (1, 6, 2)]
        assert "NPROC=6\n" in export_config(each, "megatron")  # the launcher on each node
    assert p.gpus_per_node == saved.gpus_per_node == 6
    # A plan saved before the field: the shipped catalog's node where it makes the plan's nodes, as before.
    old = json.loads(p.model_dump_json())
    del old["gpus_per_node"]
    assert "#SBATCH --gpus-per-node=8" in export_config(read_plan(json.dumps(old)), "slurm")
    # Hand-edited so the nodes are not the GPUs over it: one line, not a launch of the wrong ranks.
    with pytest.raises(ApsiError, match=r"^the plan's 12 GPUs on 2 nodes do not match its gpus_per_node 4 "):
        export_config(read_plan(json.dumps({**old, "gpus_per_node": 4})), "slurm")
    with pytest.raises(ApsiError, match=r"^not an apsi plan .*gpus_per_node"):
        read_plan(json.dumps({**old, "gpus_per_node": 0}))
    # Every plan made here records its GPU's node.
    assert all(q.gpus_per_node == 8 for q in partial_plans)


def test_sequence_parallelism_is_exported_as_planned() -> None:
    # Megatron-DeepSpeed trains without sequence parallelism unless --sequence-parallel is given
    # (MDS-ARGS), apsi's DeepSpeed default; Megatron's is on at TP > 1. The exports carry the
    # plan's choice, not "TP > 1".
    deepspeed = evaluate("llama-3.1-8b", framework="deepspeed", tokens="100B", gpus=16, tp=2, zero=1)
    assert deepspeed.layout.sequence_parallel is False
    assert "--sequence-parallel" not in export_config(deepspeed, "deepspeed")
    on = evaluate("llama-3.1-8b", framework="megatron", tokens="100B", gpus=16, tp=2)
    off = evaluate("llama-3.1-8b", framework="megatron", tokens="100B", gpus=16, tp=2, sequence_parallel=False)
    assert on.layout.sequence_parallel and not off.layout.sequence_parallel
    assert "--sequence-parallel" in _flags(export_config(on, "megatron"))
    assert "--sequence-parallel" not in _flags(export_config(off, "megatron"))
    assert "cfg.model.sequence_parallel = False" in export_config(
        evaluate("llama-3.1-70b", framework="megatron", tokens="1T", gpus=16, tp=2, sequence_parallel=False),
        "megatron-bridge")


def test_deepspeed_stage_0_writes_no_zero_optimizer_settings() -> None:
    # overlap_comm and the buckets belong to DeepSpeed's ZeRO optimizers (DS config-json.md);
    # stage 0 has none, so the plan asks for none.
    p = evaluate("llama-3.1-8b", framework="deepspeed", tokens="100B", gpus=16, tp=1, zero=0)
    from apsi.outputs.export.deepspeed import ds_config

    assert ds_config(p)["zero_optimization"] == {"stage": 0}
    # Without ZeRO DeepSpeed takes no gradient dtype but the model's (engine._do_optimizer_sanity_check:
    # "unsupported mix of model_dtype and grad_accum_dtype"); under ZeRO, fp32 accumulation.
    assert ds_config(p)["data_types"] == {"grad_accum_dtype": "bf16"}
    fp16 = evaluate("llama-3.1-8b", framework="deepspeed", tokens="100B", gpus=16, tp=1, zero=0, precision="fp16")
    assert ds_config(fp16)["data_types"] == {"grad_accum_dtype": "fp16"}
    one = evaluate("llama-3.1-8b", framework="deepspeed", tokens="100B", gpus=16, tp=1, zero=1)
    assert ds_config(one)["data_types"] == {"grad_accum_dtype": "fp32"}


def _ds(text: str) -> dict:
    """The ds_config.json the deepspeed export writes."""
    return json.loads(text.split("cat > ds_config.json <<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0])


def test_the_optimizer_the_plan_priced_is_exported_or_refused() -> None:
    # AdamW: every framework's default, written by none (Megatron's --optimizer adam with
    # decoupled_weight_decay True, MLM-OPT; Megatron-DeepSpeed's adam, MDS-OPT; torchtitan's
    # baselines' default_adamw, TT-OPT).
    layout = dict(tokens="100B", gpus=16, tp=2)
    adamw = evaluate("llama-3.1-8b", **layout)
    assert "--optimizer" not in _flags(export_config(adamw, "megatron"))
    bridge = _assignments(export_config(adamw, "megatron-bridge"), "cfg")
    assert "optimizer.optimizer" not in bridge
    assert bridge["optimizer.use_distributed_optimizer"] is bridge["ddp.use_distributed_optimizer"] is True
    # SGD without the distributed optimizer: Megatron-LM's --optimizer sgd, Bridge's
    # cfg.optimizer.optimizer, both configs' distributed optimizer off (MB-CFG: Bridge turns it on in
    # both when either has it, and _pretrain_common's OptimizerConfig has it).
    sgd = evaluate("llama-3.1-8b", optimizer="sgd", zero=0, **layout)
    flags = _flags(export_config(sgd, "megatron"))
    assert flags["--optimizer"] == ["sgd"] and "--use-distributed-optimizer" not in flags
    assert _flags(export_config(sgd, "slurm"))["--optimizer"] == ["sgd"]
    bridge = _assignments(export_config(sgd, "megatron-bridge"), "cfg")
    assert bridge["optimizer.optimizer"] == "sgd"
    assert bridge["optimizer.use_distributed_optimizer"] is bridge["ddp.use_distributed_optimizer"] is False
    # With it, Megatron-Core's DistributedOptimizer takes Adam only (MLM-OPT): an SGD plan runs
    # zero 0 unless told otherwise, a pinned zero 1 is refused, and so is a plan edited to it.
    assert evaluate("llama-3.1-8b", optimizer="sgd", **layout).layout.zero == 0
    assert plan("llama-3.1-8b", tokens="100B", optimizer="sgd", max_gpus=64).layout.zero == 0
    with pytest.raises(ApsiError, match=r"^optimizer sgd runs under Megatron only without the distributed optimizer "
                                        r"\(zero 0; MLM-OPT: DistributedOptimizer takes Adam only\); valid: zero 0, "
                                        r"or optimizer adamw$"):
        evaluate("llama-3.1-8b", optimizer="sgd", zero=1, **layout)
    edited = adamw.model_copy(update={"optimizer": "sgd"})
    for fmt in ("megatron", "megatron-bridge", "slurm"):
        with pytest.raises(ApsiError, match=r"^not a valid apsi plan: .*optimizer sgd runs under Megatron only without"):
            export_config(edited, fmt)
    # Adam with 8-bit moments (adam8bit: 1 byte each beside the fp32 master, megatron.SHARDED_BYTES)
    # is Megatron-Core's precision-aware optimizer with fp8 moments, torch.uint8 in Bridge's config
    # (MLM-ARGS map_dtype); it runs only under the distributed optimizer (MLM-OPT: OptimizerConfig).
    eight = evaluate("llama-3.1-8b", optimizer="adam8bit", **layout)
    flags = _flags(export_config(eight, "megatron"))
    assert "--optimizer" not in flags and "--use-precision-aware-optimizer" in flags
    assert flags["--exp-avg-dtype"] == flags["--exp-avg-sq-dtype"] == ["fp8"] and "--use-distributed-optimizer" in flags
    bridge = _assignments(export_config(eight, "megatron-bridge"), "cfg")
    assert bridge["optimizer.use_precision_aware_optimizer"] is True and "optimizer.optimizer" not in bridge
    assert "cfg.optimizer.exp_avg_dtype = torch.uint8" in export_config(eight, "megatron-bridge")
    assert "--exp-avg-dtype" not in _flags(export_config(adamw, "megatron"))
    with pytest.raises(ApsiError, match=r"^optimizer adam8bit runs under Megatron only with the distributed "
                                        r"optimizer \(zero 1; .*valid: zero 1, or optimizer adamw$"):
        evaluate("llama-3.1-8b", optimizer="adam8bit", zero=0, **layout)


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_deepspeed_exports_sgd_as_megatron_deepspeeds_optimizer(zero: int) -> None:
    # Megatron-DeepSpeed builds the optimizer from --optimizer (adam or sgd, MDS-OPT) and hands it to
    # deepspeed.initialize, whose client optimizer replaces any ds_config "optimizer" block (DS-OPT,
    # engine._configure_optimizer): the ds_config has none. Under ZeRO, DeepSpeed refuses an
    # optimizer outside ZERO_SUPPORTED_OPTIMIZERS (SGD is not one) unless
    # zero_allow_untested_optimizer is true (DS-OPT, engine._do_optimizer_sanity_check).
    layout = dict(framework="deepspeed", tokens="100B", gpus=16, tp=1, zero=zero)
    text = export_config(evaluate("llama-3.1-8b", optimizer="sgd", **layout), "deepspeed")
    assert _flags(text)["--optimizer"] == ["sgd"] and _one(_flags(text), "--zero-stage") == str(zero)
    config = _ds(text)
    assert "optimizer" not in config
    assert config.get("zero_allow_untested_optimizer", False) is (zero >= 1)
    adamw = export_config(evaluate("llama-3.1-8b", **layout), "deepspeed")
    assert "--optimizer" not in _flags(adamw) and "zero_allow_untested_optimizer" not in _ds(adamw)
    # 8-bit Adam is refused when planned (deepspeed.check_training), and a plan edited to it when
    # exported.
    with pytest.raises(ApsiError, match=r"^optimizer adam8bit is not one Megatron-DeepSpeed builds"):
        evaluate("llama-3.1-8b", optimizer="adam8bit", **layout)
    edited = evaluate("llama-3.1-8b", **layout).model_copy(update={"optimizer": "adam8bit"})
    with pytest.raises(ApsiError, match=r"^not a valid apsi plan: .*optimizer adam8bit is not one Megatron-DeepSpeed "
                                        r"builds \(its --optimizer takes adam or sgd, MDS-OPT\); valid: adamw, sgd$"):
        export_config(edited, "deepspeed")


def test_torchtitan_refuses_an_optimizer_it_does_not_build() -> None:
    # torchtitan 0.3's OptimizersContainer builds Adam, AdamW and DistMuon (TT-OPT); its baselines'
    # optimizer is AdamW, the plan's adamw, so adamw writes nothing and sgd is refused in one line.
    layout = dict(framework="torchtitan", tokens="100B", gpus=16, tp=2)
    assert "optimizer" not in export_config(evaluate("llama-3.1-8b", **layout), "torchtitan").split("def apsi_plan", 1)[1]
    with pytest.raises(ApsiError, match=r"^optimizer sgd is not one torchtitan builds; valid: adamw$"):
        evaluate("llama-3.1-8b", optimizer="sgd", **layout)
    edited = evaluate("llama-3.1-8b", **layout).model_copy(update={"optimizer": "sgd"})
    for fmt in ("torchtitan", "slurm"):
        with pytest.raises(ApsiError, match=r"^not a valid apsi plan: .*optimizer sgd is not one torchtitan builds; "
                                            r"valid: adamw$"):
            export_config(edited, fmt)


@pytest.mark.parametrize("fmt", ["megatron", "megatron-bridge", "slurm"])
def test_a_saved_plan_without_its_step_seconds_exports(fmt: str) -> None:
    # A saved plan whose step_seconds is null (a plan file edited or written by another version)
    # once raised TypeError formatting None in the header (apsi.outputs.export.common.header).
    data = json.loads(plan("llama-3.1-70b", tokens="15T").model_dump_json())
    data["step_seconds"] = None
    text = export_config(read_plan(json.dumps(data)), fmt)
    assert "step time not given" in text


def test_the_cp_all_gather_is_exported() -> None:
    # cp_comm_type="all_gather" is Megatron's --cp-comm-type all_gather (MLM-ARGS; its default p2p is
    # left unwritten) and Megatron-Bridge's cfg.model.cp_comm_type; at CP 1 it changes nothing and
    # neither writes it.
    layout = dict(framework="megatron", tokens="100B", tp=8, pp=1, dp=2, seq=32768)
    lm = export_config(evaluate("llama-3.1-8b", cp=4, cp_comm_type="all_gather", **layout), "megatron")
    assert _flags(lm)["--cp-comm-type"] == ["all_gather"]
    assert "--cp-comm-type" not in export_config(evaluate("llama-3.1-8b", cp=4, **layout), "megatron")
    assert "--cp-comm-type" not in export_config(evaluate("llama-3.1-8b", cp=1, cp_comm_type="all_gather", **layout),
                                                 "megatron")
    bridge = export_config(evaluate("llama-3.1-8b", cp=4, cp_comm_type="all_gather", **layout), "megatron-bridge")
    assert 'cfg.model.cp_comm_type = "all_gather"' in bridge


def test_the_activation_is_exported_or_said_not_carried() -> None:
    # The exports wrote --swiglu for every gated MLP and nothing else: Gemma 2's GeGLU ran as SwiGLU
    # without a word, Nemotron-4's squared ReLU as Megatron's default GELU. Megatron has
    # --squared-relu (MLM-ARGS; its fused bias-GELU kernel off), not a gated GELU; Megatron-DeepSpeed
    # has neither.
    nemotron = plan("nemotron-4-340b", tokens="1T", framework="megatron")
    lm = export_config(nemotron, "megatron")
    assert "--squared-relu" in _flags(lm) and "--no-bias-gelu-fusion" in _flags(lm) and "--swiglu" not in _flags(lm)
    assert "Not carried: the MLP's relu2 activation (squared ReLU): Megatron-DeepSpeed has none" in export_config(
        plan("nemotron-4-340b", tokens="1T", framework="deepspeed"), "deepspeed")
    gemma = export_config(plan("gemma-2-27b", tokens="1T", framework="megatron"), "megatron")
    assert "--swiglu" in _flags(gemma)
    assert ("Not carried: the gated MLP's gelu_pytorch_tanh activation: --swiglu gates with SiLU, the same matrices "
            "and FLOPs.") in gemma
    llama = export_config(plan("llama-3.1-8b", tokens="1T", framework="megatron"), "megatron")
    assert "--swiglu" in _flags(llama) and "activation" not in llama


def test_megatron_says_what_it_adds_to_a_model_without_norm_weights_or_vocabulary(tmp_path) -> None:
    # A bare size has no vocabulary and no norm weights; OLMo 1's norms have no weights. The script
    # wrote --normalization LayerNorm (learned weights) and, for the size, untied an embedding the
    # plan never sized, with no word of either. Megatron has no weightless norm: now said.
    bare = export_config(evaluate("7B", framework="megatron", tp=1, pp=1, dp=8, recompute="none", tokens="100B"),
                         "megatron")
    flags = _flags(bare)
    assert _one(flags, "--normalization") == "LayerNorm" and "--untie-embeddings-and-output-weights" not in flags
    assert "# Not carried: the model has no norms in the plan (a size: the reference shape rule): Megatron's " \
           "--normalization LayerNorm learns a scale and a bias, 2 x 4,096 parameters a norm" in bare
    assert "# Not carried: the model has no vocabulary in the plan" in bare
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "olmo", "hidden_size": 2048, "num_hidden_layers": 16,
                                  "num_attention_heads": 16, "intermediate_size": 8192, "vocab_size": 50304,
                                  "max_position_embeddings": 2048}))
    olmo = export_config(evaluate(str(config), framework="megatron", tp=1, pp=1, dp=8, recompute="none",
                                  tokens="100B", seq=2048), "megatron")
    assert "# Not carried: the model's norms have no weights (the plan counts none)" in olmo
    assert "no vocabulary" not in olmo and "--untie-embeddings-and-output-weights" in _flags(olmo)


def test_a_saved_plan_edited_out_of_one_piece_is_refused() -> None:
    # Edited by hand, a saved plan went into a launch script as it was: an FFN of 100,000 under a
    # plan sized for Llama 3.1 70B's 28,672, days of -1, a plan that fits said not to.
    saved = json.loads(_plan("llama-3.1-70b", "megatron").model_dump_json())
    edits = [
        (("model", "architecture", "ffn"), 100_000, r"model.params 70,553,706,496 is not the count of model.architecture"),
        (("days",), -1, r"days -1.0 is negative"),
        (("fits",), False, r"fits False but memory_per_gpu_gib [\d.]+ is within memory.usable_gib 79.7"),
    ]
    for path, value, message in edits:
        edited = json.loads(json.dumps(saved))
        where = edited
        for key in path[:-1]:
            where = where[key]
        where[path[-1]] = value
        with pytest.raises(ApsiError, match=r"^not a valid apsi plan: " + message):
            read_plan(json.dumps(edited))


def test_a_layout_that_does_not_fit_is_exported_with_a_warning() -> None:
    # evaluate() judges the layout given, fitting or not; its script said nothing of the 161.8 GiB.
    p = evaluate("llama-3.1-70b", framework="megatron", tp=8, pp=1, dp=1, recompute="none", tokens="1T")
    assert not p.fits
    text = export_config(p, "megatron")
    assert (f"# Warning: this layout does not fit: {p.memory_per_gpu_gib:,.1f} GiB per GPU (GiB = 2^30 bytes) of the "
            f"{p.memory.usable_gib:,.1f} usable: the run would stop out of memory") in text
    assert "Warning" not in export_config(_plan("llama-3.1-70b", "megatron"), "megatron")
