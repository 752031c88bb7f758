"""Tests for apsi.outputs.export.engines: the serving plan's launch scripts for vLLM, SGLang and TensorRT-LLM.

For a dense preset (Llama 3.1 70B in fp8 on H100 at a TPOT target and a rate) and MoE presets
(Qwen3 30B-A3B; DeepSeek-V3 in fp8 on H200, and on H100 where it takes two nodes), each script
passes `bash -n`, and is then run with stand-ins for the engines' programs that record the
arguments bash hands them. Those arguments are the plan's: read back with a parser built here
with exactly the engine's argument names and types (cited per engine below), every value equals
the plan's tensor and pipeline sizes, max batch, max length, KV dtype, memory fraction and model;
and the command line's own shlex split gives the same words. The TensorRT-LLM options file
parses as YAML with the plan's KV dtype and fraction. A config folder whose path holds spaces,
quotes and command substitutions reaches the engine as one argument and runs nothing; a
newline is refused. Where an engine is installed, its own parser reads the command too
(skipped where it is not: each needs torch, and TensorRT-LLM a GPU build).
"""

from __future__ import annotations

import argparse
import math
import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from apsi import ApsiError
from apsi.errors import UnknownNameError
from apsi.outputs.export.engines import OPTIONS_FILE, launch
from apsi.serving.plan import serve
from apsi.serving.engines import engines

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="no bash to parse and run the scripts with")

ENGINES = ("vllm", "sglang", "trtllm")
CONFIGS = Path(__file__).parent / "configs"
MARK = "apsi_injected"

KV = {"vllm": {"fp8": "fp8", "bf16": "auto"}, "sglang": {"fp8": "fp8_e4m3", "bf16": "auto"},
      "trtllm": {"fp8": "fp8", "bf16": "auto"}}
"""The plan's KV precision in each engine's words: vLLM's CacheDType "fp8" (fp8_e4m3 on CUDA) and
SGLang's "fp8_e4m3" (server_args.py --kv-cache-dtype choices), TensorRT-LLM's KvCacheConfig.dtype
"fp8"; "auto" is the model's own dtype, bf16 for these checkpoints."""


def _vllm_parser() -> argparse.ArgumentParser:
    """`vllm serve`'s arguments that the export writes, as vLLM 0.11.0 defines them: the positional
    model_tag (vllm/entrypoints/openai/cli_args.py make_arg_parser) and, from
    vllm/engine/arg_utils.py EngineArgs.add_cli_args, int sizes, an int max length, the
    CacheDType choices of vllm/config/cache.py, a float utilisation, the QuantizationMethods of
    model_executor/layers/quantization/__init__.py and ModelDType of vllm/config/model.py."""
    p = argparse.ArgumentParser(prog="vllm serve", allow_abbrev=False)
    p.add_argument("model_tag", nargs="?")
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    p.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    p.add_argument("--data-parallel-size", "-dp", type=int, default=1)
    p.add_argument("--enable-expert-parallel", action="store_true")
    p.add_argument("--max-num-seqs", type=int)
    p.add_argument("--max-model-len", type=int)
    p.add_argument("--kv-cache-dtype", choices=["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"],
                   default="auto")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    p.add_argument("--quantization", "-q", choices=[
        "awq", "deepspeedfp", "tpu_int8", "fp8", "ptpc_fp8", "fbgemm_fp8", "modelopt", "modelopt_fp4", "bitblas",
        "gguf", "gptq_marlin_24", "gptq_marlin", "gptq_bitblas", "awq_marlin", "gptq", "compressed-tensors",
        "bitsandbytes", "hqq", "experts_int8", "ipex", "quark", "moe_wna16", "torchao", "auto-round", "rtn", "inc",
        "mxfp4", "petit_nvfp4"])
    p.add_argument("--dtype", choices=["auto", "half", "float16", "bfloat16", "float", "float32"], default="auto")
    return p


def _sglang_parser() -> argparse.ArgumentParser:
    """sglang.launch_server's arguments that the export writes, as SGLang 0.5.2 defines them
    (python/sglang/srt/server_args.py ServerArgs.add_cli_args, with QUANTIZATION_CHOICES)."""
    p = argparse.ArgumentParser(prog="sglang.launch_server", allow_abbrev=False)
    p.add_argument("--model-path", "--model", type=str, required=True)
    p.add_argument("--tensor-parallel-size", "--tp-size", type=int, default=1)
    p.add_argument("--pipeline-parallel-size", "--pp-size", type=int, default=1)
    p.add_argument("--data-parallel-size", "--dp-size", type=int, default=1)
    p.add_argument("--enable-dp-attention", action="store_true")
    p.add_argument("--expert-parallel-size", "--ep-size", "--ep", type=int, default=1)
    p.add_argument("--max-running-requests", type=int)
    p.add_argument("--context-length", type=int)
    p.add_argument("--kv-cache-dtype", choices=["auto", "fp8_e5m2", "fp8_e4m3"], default="auto")
    p.add_argument("--mem-fraction-static", type=float)
    p.add_argument("--quantization", choices=[
        "awq", "fp8", "gptq", "marlin", "gptq_marlin", "awq_marlin", "bitsandbytes", "gguf", "modelopt",
        "modelopt_fp4", "petit_nvfp4", "w8a8_int8", "w8a8_fp8", "moe_wna16", "qoq", "w4afp8", "mxfp4"])
    p.add_argument("--dtype", choices=["auto", "half", "float16", "bfloat16", "float", "float32"], default="auto")
    p.add_argument("--dist-init-addr", "--nccl-init-addr", type=str)
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
    return p


def _trtllm_parser() -> argparse.ArgumentParser:
    """trtllm-serve's options that the export writes (tensorrt_llm/commands/serve.py, its click
    command: MODEL, int sizes and lengths, the float KV fraction, the options file's path)."""
    p = argparse.ArgumentParser(prog="trtllm-serve", allow_abbrev=False)
    p.add_argument("model")
    p.add_argument("--tensor_parallel_size", "--tp_size", dest="tp_size", type=int, default=1)
    p.add_argument("--pipeline_parallel_size", "--pp_size", dest="pp_size", type=int, default=1)
    p.add_argument("--moe_expert_parallel_size", "--ep_size", dest="ep_size", type=int)
    p.add_argument("--max_batch_size", type=int)
    p.add_argument("--max_seq_len", type=int)
    p.add_argument("--kv_cache_free_gpu_memory_fraction", "--free_gpu_memory_fraction", dest="fraction", type=float,
                   default=0.9)
    p.add_argument("--extra_llm_api_options", "--config", dest="options", type=str)
    return p


PROGRAMS = {"vllm": "vllm", "sglang": "python3", "trtllm": "trtllm-serve"}


def _run(script: str, tmp: Path, *args: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess,
                                                                                         list[str] | None]:
    """Run `script` in `tmp` with stand-ins for the engines' programs (and for MARK) on PATH:
    the process and the arguments the engine's program was given (None if it was not run)."""
    stubs = tmp / "bin"
    stubs.mkdir(exist_ok=True)
    for name in (*PROGRAMS.values(), MARK):
        stub = stubs / name
        record = tmp / ("injected" if name == MARK else "argv")
        stub.write_text(f"#!/bin/bash\nprintf '%s\\0' \"$0\" \"$@\" > {shlex.quote(str(record))}\n")
        stub.chmod(0o755)
    (tmp / "argv").unlink(missing_ok=True)
    path = tmp / "launch.sh"
    path.write_text(script)
    full = {"PATH": f"{stubs}:{os.environ['PATH']}", "HOME": str(tmp), **(env or {})}
    done = subprocess.run(["bash", str(path), *args], cwd=tmp, env=full, capture_output=True, text=True, timeout=30)
    assert not (tmp / "injected").exists(), f"the script ran the injected command: {done.stdout}{done.stderr}"
    if not (tmp / "argv").exists():
        return done, None
    called, *argv = (tmp / "argv").read_text().split("\0")[:-1]
    assert Path(called).name in PROGRAMS.values()
    return done, argv


def _syntax(script: str) -> None:
    check = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stderr


def _exec_words(script: str, indent: str = "") -> list[list[str]]:
    """Each exec line of `script`, continuations joined, split as the shell would (shlex)."""
    joined = script.replace("\\\n", " ")
    return [shlex.split(line.strip())[1:] for line in joined.splitlines() if line.strip().startswith("exec ")]


def _read_back(engine: str, argv: list[str]) -> dict:
    """The values of a command's arguments, parsed with the engine's names and types."""
    if engine == "vllm":
        assert argv[0] == "serve", argv
        a = _vllm_parser().parse_args(argv[1:])
        return dict(model=a.model_tag, tp=a.tensor_parallel_size, pp=a.pipeline_parallel_size, batch=a.max_num_seqs,
                    length=a.max_model_len, kv=a.kv_cache_dtype, fraction=a.gpu_memory_utilization,
                    quantization=a.quantization, dp=a.data_parallel_size,
                    # vLLM's EP is over TP x DP when switched on (vllm/config/parallel.py)
                    ep=a.tensor_parallel_size * a.data_parallel_size if a.enable_expert_parallel else 1)
    if engine == "sglang":
        assert argv[:2] == ["-m", "sglang.launch_server"], argv
        a = _sglang_parser().parse_args(argv[2:])
        return dict(model=a.model_path, tp=a.tensor_parallel_size, pp=a.pipeline_parallel_size,
                    batch=a.max_running_requests,
                    length=a.context_length, kv=a.kv_cache_dtype, fraction=a.mem_fraction_static,
                    quantization=a.quantization, nnodes=a.nnodes, node_rank=a.node_rank, dist=a.dist_init_addr,
                    dp=a.data_parallel_size if a.enable_dp_attention else 1, ep=a.expert_parallel_size)
    a = _trtllm_parser().parse_args(argv)
    return dict(model=a.model, tp=a.tp_size, pp=a.pp_size, batch=a.max_batch_size, length=a.max_seq_len,
                fraction=a.fraction, options=a.options, quantization=None, ep=a.ep_size or 1)


CASES = {
    # Dense: the example (Llama 3.1 70B fp8 on H100, TPOT 30 ms, 10 requests/s), with an
    # FP8 KV cache asked for (vLLM's and SGLang's default is the model's 16-bit dtype) and TP pinned
    # at 4, so the answer is replicas of one layout (a mix is test_a_mix_has_one_command_per_kind's).
    "dense": ("llama-3.1-70b", dict(precision="fp8", kv_precision="fp8", gpu="H100", tpot=30, rate=10, tp=4)),
    # MoE in bf16 at a rate.
    "moe": ("qwen3-30b-a3b", dict(gpu="H100", rate=5)),
    # MoE on an FP8 checkpoint: one H200 node, and on H100 several nodes (PP over them).
    "moe-fp8": ("deepseek-v3", dict(precision="fp8", gpu="H200", pp=1)),
    "moe-nodes": ("deepseek-v3", dict(precision="fp8", gpu="H100")),
}


@pytest.fixture(scope="module")
def plans() -> dict:
    return {(name, e): serve(model, engine=e, **kw) for name, (model, kw) in CASES.items() for e in ENGINES}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case", list(CASES))
def test_script_reads_back_as_the_plan(plans, case: str, engine: str, tmp_path: Path) -> None:
    plan = plans[(case, engine)]
    (group,) = plan.groups
    script = launch(plan, engine)
    _syntax(script)
    placeholder = engine == "trtllm" and case == "dense"  # trtllm reads FP8 only from an FP8 checkpoint
    hosts = _hosts(group)
    nodes = engine == "sglang" and hosts > 1
    env = {"MODEL": "/models/llama-3.1-70b-fp8"} if placeholder else {}
    if nodes:
        env |= {"NODE_RANK": "1", "DIST_INIT_ADDR": "node0:5000"}
    done, argv = _run(script, tmp_path, env=env)
    assert done.returncode == 0 and argv is not None, done.stderr
    if not (placeholder or nodes):
        assert _exec_words(script) == [[PROGRAMS[engine], *argv]]  # the shell's words are the split's
    got = _read_back(engine, argv)
    eng = engines()[engine]
    w = plan.workload
    assert got["model"] == (env["MODEL"] if placeholder else plan.model_repo)
    # vLLM's TP is attention TP beside its DP ranks, SGLang's and TensorRT-LLM's every GPU of a stage;
    # vLLM and TensorRT-LLM take the max batch per DP rank, SGLang for the server (apsi.outputs.export.engines).
    dp = group.attention_dp
    tp = group.tp if engine == "vllm" else group.tp * dp
    batch = group.batch_limit if engine == "sglang" else -(-group.batch_limit // dp)
    # The max length: the requests planned at least, up to half the replica's KV-cache tokens, and
    # never past the model's context (the preset's config.json max_position_embeddings).
    longest = max(w.isl_tokens + w.osl_tokens, min(plan.context_tokens, group.memory.kv_cache_tokens // 2))
    assert (got["tp"], got["pp"], got["batch"], got["length"]) == (tp, group.pp, batch, longest)
    assert w.isl_tokens + w.osl_tokens <= got["length"] <= plan.context_tokens
    assert got["ep"] == group.ep
    if engine != "trtllm":
        assert got["dp"] == dp
    # The plan's fraction on this GPU and layout (SGLang chooses its own: apsi.serving.sglang.static_fraction).
    assert got["fraction"] == group.memory.memory_fraction
    assert eng.auto_fraction or group.memory.memory_fraction == eng.memory_fraction
    # fp8 weights on a 16-bit checkpoint: vLLM and SGLang quantize at load; DeepSeek-V3 is FP8 already.
    assert got["quantization"] == ("fp8" if case == "dense" and engine != "trtllm" else None)
    if engine == "trtllm":
        options = yaml.safe_load((tmp_path / got["options"]).read_text())
        assert options == {"kv_cache_config": {"dtype": KV[engine][plan.kv_precision],
                                               "free_gpu_memory_fraction": group.memory.memory_fraction},
                           **({"enable_attention_dp": True} if dp > 1 else {}),
                           # Chunked context, as the plan's steps are timed (and a prompt past
                           # max_num_tokens is refused without it: serving.md T-IFB, T-SCHEDCFG).
                           "enable_chunked_prefill": True}
    else:
        assert got["kv"] == KV[engine][plan.kv_precision]
    if engine == "sglang":
        assert (got["nnodes"], got["node_rank"], got["dist"]) == ((hosts, 1, "node0:5000") if nodes else (1, 0, None))
    if hosts > 1:
        assert f"# Nodes (replica): {hosts} nodes of {group.gpus_per_node} GPUs" in script
    else:
        assert "# Nodes" not in script


def _hosts(group) -> int:
    """Nodes a replica spans: its GPUs over the node's, as the plan recorded them (docs/method.md, Nodes)."""
    return math.ceil(group.gpus_per_replica / group.gpus_per_node)


def test_the_cases_cover_what_they_claim(plans) -> None:
    # The MoE presets are MoE, one case spans nodes and the dense one is KV fp8 at TP > 1: else the
    # read-back above would not test the multi-node command or the dtype words.
    assert _hosts(plans[("moe-nodes", "sglang")].groups[0]) > 1
    assert plans[("moe-fp8", "sglang")].groups[0].pp == 1
    # DeepSeek-V3 on one H200 node is served with its experts over the node (expert parallelism),
    # so the read-back checks the engines' EP and attention-DP words too.
    assert any(plans[("moe-fp8", e)].groups[0].ep > 1 for e in ENGINES)
    assert plans[("dense", "vllm")].kv_precision == "fp8" and plans[("moe", "vllm")].kv_precision == "bf16"


def test_placeholder_model_must_be_set(plans, tmp_path: Path) -> None:
    script = launch(plans[("dense", "trtllm")], "trtllm")
    done, argv = _run(script, tmp_path)
    assert done.returncode != 0 and argv is None and "set MODEL to an FP8 checkpoint" in done.stderr
    assert "need an FP8 checkpoint of meta-llama/Llama-3.1-70B" in script


def test_sglang_nodes_need_their_rank(plans, tmp_path: Path) -> None:
    done, argv = _run(launch(plans[("moe-nodes", "sglang")], "sglang"), tmp_path, env={"DIST_INIT_ADDR": "n0:1"})
    assert done.returncode != 0 and argv is None and "set NODE_RANK" in done.stderr


def _most(inventory: str) -> float:
    """The most requests/s an inventory serves at TPOT 30 ms, as the refusal of a far larger rate states it."""
    import re

    with pytest.raises(ApsiError) as err:
        serve("llama-3.1-70b", precision="fp8", tpot=30, inventory=inventory, rate=1e6)
    return float(re.search(r"serves at most ([\d,.]+)", str(err.value)).group(1).replace(",", ""))  # type: ignore[union-attr]


def test_a_mix_has_one_command_per_kind(tmp_path: Path) -> None:
    # A rate more than either type alone carries needs both (tests/test_serving.py does the same).
    rate = round(1.1 * max(_most("H100=8"), _most("H200=8")), 2)
    plan = serve("llama-3.1-70b", precision="fp8", gpu="H100,H200", tpot=30, rate=rate, inventory="H100=8,H200=8")
    assert len(plan.groups) >= 2
    script = launch(plan, "vllm")
    _syntax(script)
    assert len(_exec_words(script)) == len(plan.groups)
    for i, g in enumerate(plan.groups):
        assert f"# Kind {i + 1}: {g.replicas:,} replica{'s' if g.replicas != 1 else ''} of TP {g.tp}" in script
        assert f"on {g.gpu} (" in script
        done, argv = _run(script, tmp_path, str(i + 1))
        assert done.returncode == 0 and argv is not None, done.stderr
        got = _read_back("vllm", argv)
        assert (got["tp"], got["pp"], got["batch"]) == (g.tp, g.pp, g.batch_limit)
    done, argv = _run(script, tmp_path, "9")
    assert done.returncode == 2 and argv is None and "unknown replica kind 9" in done.stderr
    done, argv = _run(script, tmp_path)
    assert done.returncode != 0 and argv is None


def test_refusals() -> None:
    plan = serve("llama-3.1-70b", precision="fp8", gpu="H100")
    with pytest.raises(ApsiError, match=r"^an engine needs real weights, which a size or a config file not named "
                                        r"config\.json does not name: give a preset"):
        launch(serve("70B", precision="fp8", gpu="H100"), "vllm")
    with pytest.raises(ApsiError, match=r"^the plan is vLLM's .*: plan it with --engine sglang "):
        launch(plan, "sglang")
    with pytest.raises(UnknownNameError, match=r"did you mean sglang\? valid: vllm, sglang, trtllm$"):
        launch(plan, "sglng")
    with pytest.raises(ApsiError, match=r"is an FP8 checkpoint, so the engine loads fp8 weights, not the plan's bf16: "
                                        r"plan it with --precision fp8$"):
        launch(serve("deepseek-v3", gpu="H200"), "vllm")
    with pytest.raises(ApsiError, match=r"^the model 'a\\nb' holds the character \\n at position 2, which is not "):
        launch(plan.model_copy(update={"model_repo": "a\nb"}), "vllm")


def test_a_config_file_not_named_config_json_names_no_weights(tmp_path: Path) -> None:
    # serve mixtral.json --export vllm wrote `vllm serve FOLDER`, whose config.json is not there:
    # the engine would not load it. Planned, yes; launched, refused in one line.
    lone = tmp_path / "llama.json"
    lone.write_text((CONFIGS / "llama-3.1-70b.json").read_text())
    plan = serve(str(lone), precision="fp8", gpu="H100")
    assert plan.model_repo is None
    with pytest.raises(ApsiError, match=r"^an engine needs real weights, which a size or a config file not named "):
        launch(plan, "vllm")
    assert serve(str(_folder(tmp_path, "m") / "config.json"), precision="fp8", gpu="H100").model_repo == str(tmp_path / "m")


def _folder(tmp_path: Path, name: str, quantization: dict | None = None) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    config = json.loads((CONFIGS / "llama-3.1-70b.json").read_text())
    if quantization is not None:
        config["quantization_config"] = quantization
    (folder / "config.json").write_text(json.dumps(config))
    return folder


HOSTILE = f"my model's \"$({MARK})\" `{MARK}` ; {MARK} $HOME"


@pytest.mark.parametrize("engine", ENGINES)
def test_hostile_folder_is_one_argument(engine: str, tmp_path: Path) -> None:
    folder = _folder(tmp_path, HOSTILE)
    plan = serve(str(folder), engine=engine, gpu="H100")
    assert plan.model_repo == str(folder)
    script = launch(plan, engine)
    _syntax(script)
    done, argv = _run(script, tmp_path)
    assert done.returncode == 0 and argv is not None, done.stderr
    assert _read_back(engine, argv)["model"] == str(folder)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_folder_named_like_an_option_is_passed_as_a_path(engine: str, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # A model folder named "--trust-remote-code" in the working directory: the plan names it
    # ./--trust-remote-code (apsi.serving.inputs.folder_word), and the engine (a stand-in that
    # records its arguments) is given that path, never the bare option.
    _folder(tmp_path, "--trust-remote-code")
    monkeypatch.chdir(tmp_path)
    plan = serve("--trust-remote-code", engine=engine, gpu="H100")
    assert plan.model_repo == "./--trust-remote-code"
    done, argv = _run(launch(plan, engine), tmp_path)
    assert done.returncode == 0 and argv is not None, done.stderr
    assert "--trust-remote-code" not in argv and "./--trust-remote-code" in argv, argv
    # A saved plan whose model was written bare is refused, not launched.
    with pytest.raises(ApsiError, match=r"^the model '--trust-remote-code' starts with '-', which an engine would "
                                        r"read as an option: give the folder as ./--trust-remote-code"):
        launch(plan.model_copy(update={"model_repo": "--trust-remote-code"}), engine)


def test_newline_in_folder_is_refused(tmp_path: Path) -> None:
    folder = _folder(tmp_path, f"x\n{MARK}")
    with pytest.raises(ApsiError, match="not printable"):
        launch(serve(str(folder), gpu="H100"), "vllm")


def test_checkpoint_precision_from_config(tmp_path: Path) -> None:
    fp8 = _folder(tmp_path, "fp8", {"quant_method": "fp8", "fmt": "e4m3"})
    got = _read_back("vllm", _exec_words(launch(serve(str(fp8), precision="fp8", gpu="H100"), "vllm"))[0][1:])
    assert (got["model"], got["quantization"]) == (str(fp8), None)  # vLLM reads the checkpoint's own
    nvfp4 = _folder(tmp_path, "nvfp4", {"quant_method": "modelopt", "quant_algo": "NVFP4"})
    got = _read_back("sglang", _exec_words(launch(serve(str(nvfp4), precision="fp4", gpu="B200", engine="sglang"),
                                                  "sglang"))[0][1:])
    assert (got["model"], got["quantization"]) == (str(nvfp4), None)
    awq = _folder(tmp_path, "awq", {"quant_method": "awq"})
    with pytest.raises(ApsiError, match=r"is quantized as 'awq', which apsi does not plan"):
        launch(serve(str(awq), gpu="H100"), "vllm")


def test_fp4_on_a_16_bit_checkpoint_asks_for_one() -> None:
    script = launch(serve("llama-3.1-8b", precision="fp4", gpu="B200"), "vllm")
    assert ': "${MODEL:?set MODEL to an NVFP4 checkpoint' in script
    assert _read_back("vllm", _exec_words(script)[0][1:])["model"] == "$MODEL"


# The engines' own parsers, where they install (each needs torch; TensorRT-LLM a GPU build).

def test_vllm_own_parser(plans, monkeypatch: pytest.MonkeyPatch) -> None:
    cli_args = pytest.importorskip("vllm.entrypoints.openai.cli_args")
    import vllm.platforms
    from vllm.platforms.cpu import CpuPlatform
    from vllm.utils import FlexibleArgumentParser

    # Building the parser fills each config's defaults, DeviceConfig's from the platform, and
    # without a GPU vLLM finds none (vllm/config/device.py): the CPU platform stands in. The
    # arguments' names and types do not depend on it.
    monkeypatch.setattr(vllm.platforms, "_current_platform", CpuPlatform())
    parser = cli_args.make_arg_parser(FlexibleArgumentParser())
    for case in CASES:
        plan = plans[(case, "vllm")]
        a = parser.parse_args(_exec_words(launch(plan, "vllm"))[0][2:])
        g, w = plan.groups[0], plan.workload
        assert (a.model_tag, a.tensor_parallel_size, a.pipeline_parallel_size, a.max_num_seqs, a.max_model_len,
                a.kv_cache_dtype, a.gpu_memory_utilization, a.quantization) == (
            plan.model_repo, g.tp, g.pp, g.batch_limit, w.isl_tokens + w.osl_tokens, KV["vllm"][plan.kv_precision],
            g.memory.memory_fraction, "fp8" if case == "dense" else None)


def test_sglang_own_parser(plans) -> None:
    server_args = pytest.importorskip("sglang.srt.server_args")
    for case in ("moe-fp8", "moe-nodes"):
        plan = plans[(case, "sglang")]
        parser = argparse.ArgumentParser()
        server_args.ServerArgs.add_cli_args(parser)
        script = launch(plan, "sglang").replace('"$NODE_RANK"', "1").replace('"$DIST_INIT_ADDR"', "node0:5000")
        a = parser.parse_args(_exec_words(script)[0][3:])
        g, w = plan.groups[0], plan.workload
        assert (a.model_path, a.tensor_parallel_size, a.pipeline_parallel_size, a.max_running_requests,
                a.context_length, a.kv_cache_dtype, a.mem_fraction_static, a.quantization) == (
            plan.model_repo, g.tp, g.pp, g.batch_limit, w.isl_tokens + w.osl_tokens, "fp8_e4m3",
            g.memory.memory_fraction, None)
        assert (a.nnodes, a.node_rank) == ((_hosts(g), 1) if _hosts(g) > 1 else (1, 0))


def test_trtllm_own_parser(plans) -> None:
    serve_cmd = pytest.importorskip("tensorrt_llm.commands.serve")
    plan = plans[("moe", "trtllm")]
    ctx = serve_cmd.serve.make_context("trtllm-serve", _exec_words(launch(plan, "trtllm"))[0][1:])
    g = plan.groups[0]
    assert (ctx.params["model"], ctx.params["tensor_parallel_size"], ctx.params["max_batch_size"]) == (
        plan.model_repo, g.tp, g.batch_limit)
    assert ctx.params["extra_llm_api_options"] == OPTIONS_FILE


def test_fp16_weights_are_cast(tmp_path: Path) -> None:
    # The presets' checkpoints are bf16 (torch_dtype in their config.json): fp16 is asked for by name,
    # --dtype float16 for vLLM and SGLang (their ModelDType / --dtype choices), `dtype` in TensorRT-LLM's file.
    for engine in ("vllm", "sglang"):
        argv = _exec_words(launch(serve("llama-3.1-8b", precision="fp16", gpu="H100", engine=engine), engine))[0]
        assert argv[argv.index("--dtype") + 1] == "float16" and argv[argv.index("--kv-cache-dtype") + 1] == "auto"
    done, argv = _run(launch(serve("llama-3.1-8b", precision="fp16", gpu="H100", engine="trtllm"), "trtllm"), tmp_path)
    assert done.returncode == 0 and argv is not None, done.stderr
    assert yaml.safe_load((tmp_path / OPTIONS_FILE).read_text())["dtype"] == "float16"


# -- the max length ---------------------------------------------------------------------------------


def test_the_max_length_reaches_past_the_planned_requests_within_the_context(tmp_path: Path) -> None:
    # A launch capped at exactly isl + osl refused any request a token longer than the planned mean.
    # Llama 3.1 70B's config.json gives max_position_embeddings 131,072 (tests/configs, from the
    # model's Hugging Face config): the max length is half the replica's KV cache, within that.
    from apsi.outputs.export.engines import max_length

    plan = serve(str(_folder(tmp_path, "llama")), engine="vllm", gpu="H100", isl=1000, osl=1000)
    assert plan.context_tokens == 131_072
    g = plan.groups[0]
    assert max_length(plan, g) == max(2000, min(131_072, g.memory.kv_cache_tokens // 2))
    assert 2000 < max_length(plan, g) <= 131_072
    assert f"--max-model-len {max_length(plan, g)}" in launch(plan, "vllm")
    # A config without max_position_embeddings: the context is not known, and the launch admits the
    # requests planned only (a longer max could be one the engine refuses).
    config = json.loads((CONFIGS / "llama-3.1-70b.json").read_text())
    del config["max_position_embeddings"]
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "config.json").write_text(json.dumps(config))
    bare = serve(str(tmp_path / "bare"), engine="vllm", gpu="H100", isl=1000, osl=1000)
    assert bare.context_tokens is None and max_length(bare, bare.groups[0]) == 2000
    assert "the model's context is not known" in launch(bare, "vllm")


def test_a_request_longer_than_the_context_is_refused() -> None:
    # OLMo 2 7B's config.json gives max_position_embeddings 4,096 (apsi/inputs/presets.json, from its
    # Hugging Face config): 4,000 + 1,000 tokens cannot be served, and no engine would launch it.
    with pytest.raises(ApsiError, match=r"^a request of 4,000 input \+ 1,000 output tokens is longer than the "
                                        r"4,096-token context of OLMo 2 7B .*give isl \+ osl of at most 4,096$"):
        serve("olmo-2-7b", isl=4000, osl=1000)
    assert serve("olmo-2-7b", isl=3000, osl=1096).context_tokens == 4096


def test_nodes_are_the_replicas_gpus_over_a_nodes(tmp_path: Path) -> None:
    # GB200 holds 4 GPUs a node in a 72-GPU NVLink domain (gpus.yaml): TP 16 spans four hosts by TP
    # alone and got no --nnodes; TP 8 x PP 2 said "2 nodes of 8 GPUs" where its 16 GPUs are 4 nodes
    # of 4. A pipelined replica within one node (TP 2 x PP 2 on 8 H100) is one node, and no more.
    from apsi import serve

    question = dict(gpu="GB200", engine="sglang", rate=5, tpot=40)
    for pins in ({"tp": 16, "pp": 1}, {"tp": 8, "pp": 2}):
        plan = serve("llama-3.1-405b", **question, **pins)
        (g,) = plan.groups
        assert g.gpus_per_node == 4 and _hosts(g) == 4
        script = launch(plan, "sglang")
        assert "# Nodes (replica): 4 nodes of 4 GPUs" in script
        done, argv = _run(script, tmp_path, env={"NODE_RANK": "3", "DIST_INIT_ADDR": "node0:5000"})
        assert done.returncode == 0 and argv is not None, done.stderr
        got = _read_back("sglang", argv)
        assert (got["nnodes"], got["node_rank"], got["dist"]) == (4, 3, "node0:5000")
        assert "-N 4 --ntasks 16 --ntasks-per-node 4" in launch(serve("llama-3.1-405b", **{**question, "engine": "trtllm"},
                                                                         **pins), "trtllm")
        assert "4 nodes of 4 GPUs: vLLM runs them as one Ray cluster" in launch(
            serve("llama-3.1-405b", **{**question, "engine": "vllm"}, **pins), "vllm")
    one = serve("llama-3.1-8b", engine="sglang", gpu="H100", tp=2, pp=2, rate=1)
    assert one.groups[0].gpus_per_replica == 4 and _hosts(one.groups[0]) == 1
    script = launch(one, "sglang")
    assert "--nnodes" not in script and "# Nodes" not in script


def test_a_saved_plan_without_its_node_size_takes_the_catalogs_or_is_refused() -> None:
    # A plan saved before ReplicaGroup.gpus_per_node was recorded: the shipped catalog's figure for a
    # GPU it knows; for one only a catalog of one's own knew, one line saying to plan it again.
    from apsi import ApsiError, serve

    plan = serve("llama-3.1-405b", gpu="GB200", engine="sglang", rate=5, tpot=40, tp=8, pp=2)
    old = plan.model_copy(update={"groups": [g.model_copy(update={"gpus_per_node": None}) for g in plan.groups]})
    assert launch(old, "sglang") == launch(plan, "sglang")
    mine = old.model_copy(update={"groups": [g.model_copy(update={"gpu": "MyGPU"}) for g in old.groups]})
    with pytest.raises(ApsiError, match="^the plan does not say how many GPUs a node of 'MyGPU' holds"):
        launch(mine, "sglang")


def _sglang_ranks(nnodes: int, pp: int, tp: int) -> list[list[tuple[int, int]]]:
    """(pp rank, tp rank) of the processes each node starts: SGLang's engine.py
    _calculate_rank_ranges, as written there (pp_size // nnodes stages a node, at least one; a stage
    over nnodes // pp_size nodes, tp_size // that TP ranks on each)."""
    pp_per_node = max(pp // nnodes, 1)
    nodes_per_pp = max(nnodes // pp, 1)
    tp_per_node = tp // nodes_per_pp
    out = []
    for node in range(nnodes):
        pps = range(pp_per_node * (node // nodes_per_pp), pp_per_node * (node // nodes_per_pp + 1))
        tps = range(tp_per_node * (node % nodes_per_pp), tp_per_node * (node % nodes_per_pp + 1))
        out.append([(p, t) for p in pps for t in tps])
    return out


def test_sglang_starts_every_stage_on_nodes_that_share_them_evenly() -> None:
    # TP 4 x PP 3 on 8-GPU H100 nodes (the serving walk's answer for Llama 3.1 405B fp8 on SGLang at
    # 10 requests/s): --nnodes 2 started stages 0 and 1 only (3 // 2 a node), and the replica waited
    # for a world of 12 forever. SGLang gives every node the same share: three nodes of 4 GPUs.
    from apsi import serve

    plan = serve("llama-3.1-405b", engine="sglang", precision="fp8", rate=10, tp=4, pp=3)
    (g,) = plan.groups
    script = launch(plan, "sglang")
    assert "--nnodes 3" in script and "# Nodes (replica): 3 nodes of 8 GPUs, 4 of them on each" in script
    ranks = _sglang_ranks(3, 3, 4)
    assert sorted(r for node in ranks for r in node) == [(p, t) for p in range(3) for t in range(4)]
    assert all(len(node) <= g.gpus_per_node for node in ranks)
    # vLLM and TensorRT-LLM place ranks node by node: 8 + 4.
    assert "-N 2 --ntasks 12 --ntasks-per-node 8" in launch(
        serve("llama-3.1-405b", engine="trtllm", precision="fp8", rate=10, tp=4, pp=3), "trtllm")


def test_no_pipelined_replica_splits_a_tp_group_over_two_hosts() -> None:
    # OLMo 2 13B on RTX 4090 (8 a node, no NVLink) took TP 5 x PP 2, ranks 5 to 9 over two hosts;
    # under PP a stage's TP divides a node or is whole nodes (apsi.serving.replica.replicas), and a
    # pinned one that does not is refused in one line.
    from apsi import serve
    from apsi.catalog import find_gpu
    from apsi.inputs.modelspec import resolve_model
    from apsi.serving.replica import replicas

    gpu = find_gpu("RTX4090")
    for r in replicas(resolve_model("olmo-2-13b").architecture, gpu):
        if r.pp > 1:
            assert gpu.gpus_per_node % r.tp == 0 or r.tp % gpu.gpus_per_node == 0, r
    with pytest.raises(ApsiError, match="a stage's TP must divide a node's GPUs"):
        serve("olmo-2-13b", gpu="RTX4090", rate=5, engine="trtllm", tp=5, pp=2)
