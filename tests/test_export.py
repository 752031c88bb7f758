"""Tests for apsi.export: every format of the four presets issue 11 names is read back, degree by
degree, and must equal the plan's JSON; what a framework cannot express is one line; a plan read
back from --json exports the same text."""

from __future__ import annotations

import ast
import json
import re

import pytest

from apsi import ApsiError, evaluate, export_config, plan
from apsi.export import FORMATS, read_plan

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


def _flags(text: str) -> dict[str, str | None]:
    """Every `--flag value` line of a launcher's argument list (the last of a repeated flag)."""
    out: dict[str, str | None] = {}
    for line in text.splitlines():
        line = line.strip().rstrip("\\").strip()
        if not line.startswith("--"):
            continue
        flag, _, value = line.partition(" ")
        out[flag] = value.strip().strip("'\"") or None
    return out


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
    pp = int(flags["--pipeline-model-parallel-size"])
    if "--pipeline-model-parallel-layout" in flags:
        return [stage.count("t") for stage in flags["--pipeline-model-parallel-layout"].split("|")]
    vpp = int(flags.get("--num-virtual-stages-per-pipeline-rank") or 1)
    chunks = pp * vpp
    if "--decoder-first-pipeline-num-layers" in flags:
        first, last = int(flags["--decoder-first-pipeline-num-layers"]), int(flags["--decoder-last-pipeline-num-layers"])
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
    assert int(flags["--tensor-model-parallel-size"]) == lay.tp
    assert int(flags["--pipeline-model-parallel-size"]) == lay.pp
    assert int(flags["--context-parallel-size"]) == lay.cp
    assert int(flags["--micro-batch-size"]) == lay.micro_batch_sequences
    assert int(flags["--global-batch-size"]) == p.batch_sequences
    assert int(flags["--seq-length"]) == p.seq
    assert int(flags["--train-iters"]) == p.steps
    if p.model.architecture.moe:
        assert int(flags["--expert-model-parallel-size"]) == lay.ep
        assert int(flags["--expert-tensor-parallel-size"]) == lay.etp
    assert ("--sequence-parallel" in flags) == (lay.tp > 1)
    granularity = flags.get("--recompute-granularity")
    assert (granularity or "none") == lay.recompute
    if lay.recompute == "selective":
        assert flags["--recompute-modules"].split() == lay.recompute_modules
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
        assert re.search(rf"^#SBATCH --gpus-per-node={-(-p.gpus // p.nodes)}$", text, re.M)
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
        assert (int(flags["--tensor-model-parallel-size"]), int(flags["--pipeline-model-parallel-size"])) == (lay.tp,
                                                                                                             lay.pp)
        assert int(flags["--seq-length"]) == p.seq and int(flags["--train-iters"]) == p.steps
        assert ("--checkpoint-activations" in flags) == (lay.recompute == "full")


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_plan_read_back_from_json_exports_the_same(fmt: str) -> None:
    p = _plan("llama-3.1-405b", FRAMEWORK[fmt])
    assert export_config(read_plan(p.model_dump_json()), fmt) == export_config(p, fmt)


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

    class Groups:
        def get_data_parallel_world_size(self) -> int:
            return p.layout.dp

        def get_model_parallel_world_size(self) -> int:
            return p.layout.tp * p.layout.pp

        def get_data_parallel_rank(self) -> int:
            return 0

    monkeypatch.setattr(deepspeed_config.dist, "get_rank", lambda *args, **kwargs: 0)
    parsed = deepspeed_config.DeepSpeedConfig(config, mpu=Groups())
    assert (parsed.train_batch_size, parsed.train_micro_batch_size_per_gpu, parsed.gradient_accumulation_steps) == (
        p.batch_sequences, p.layout.micro_batch_sequences, p.batch_sequences // (p.layout.micro_batch_sequences
                                                                                * p.layout.dp))
    assert parsed.zero_optimization_stage == p.layout.zero and parsed.bfloat16_config.enabled


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
