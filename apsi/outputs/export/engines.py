"""The serving export: a ServePlan as the bash script that launches its engine, with the plan in
a header comment, one command per replica kind: vLLM's `vllm serve`, SGLang's
`python3 -m sglang.launch_server`, TensorRT-LLM's `trtllm-serve` with an LLM API options file.

What it writes is what the plan asked for and nothing else: the tensor- and pipeline-parallel
sizes, the launch's max batch (ReplicaGroup.batch_limit, the largest batch meeting the targets),
the max length (max_length: isl + osl at least, up to half the KV cache within the model's
context), the KV-cache dtype, the engine's memory fraction (the one the plan's
memory rule used), and the weights' precision where the engine needs to be told it; for a MoE
replica with expert parallelism or attention DP (apsi.serving.replica.Replica's ep and dp), the
engine's words for them: vLLM --data-parallel-size and --enable-expert-parallel (a switch: EP over
TP x DP), its --max-num-seqs per data-parallel rank; SGLang --tp-size over every GPU of the replica
with --dp-size and --enable-dp-attention, --ep-size, its --max-running-requests for the whole
server (each DP worker takes its share: tp_worker.py); TensorRT-LLM --tp_size over every GPU,
--ep_size, enable_attention_dp in the options file and --max_batch_size per rank.
Every value is one shell word (shlex.quote), a model name holding a character that is not
printable is refused, and the plan's words in comments are escaped (checks.comment_text).

The argument names are each engine's own, read from its source at the release the engine module
names (Engine.version; the same names as Engine.arguments):
- vLLM 0.11.0 (the PyPI wheel vllm-0.11.0): vllm/entrypoints/openai/cli_args.py make_arg_parser
  (the positional model_tag) and vllm/engine/arg_utils.py EngineArgs.add_cli_args
  (--tensor-parallel-size, --pipeline-parallel-size, --max-num-seqs, --max-model-len,
  --kv-cache-dtype with the CacheDType choices of vllm/config/cache.py, --gpu-memory-utilization,
  --quantization with the QuantizationMethods of model_executor/layers/quantization/__init__.py,
  --dtype with ModelDType of vllm/config/model.py).
- SGLang 0.5.2 (the PyPI wheel sglang-0.5.2): python/sglang/srt/server_args.py
  ServerArgs.add_cli_args (--model-path, --tp-size, --pp-size, --max-running-requests,
  --context-length, --kv-cache-dtype auto|fp8_e5m2|fp8_e4m3, --mem-fraction-static, --quantization
  with QUANTIZATION_CHOICES, --dtype, --nnodes, --node-rank, --dist-init-addr).
- TensorRT-LLM 1.0: tensorrt_llm/commands/serve.py, trtllm-serve's click options (MODEL,
  --tp_size, --pp_size, --max_batch_size, --max_seq_len, --kv_cache_free_gpu_memory_fraction,
  --extra_llm_api_options; read at commit 00209af1 of NVIDIA/TensorRT-LLM, where the last two
  are also spelled --free_gpu_memory_fraction and --config), and tensorrt_llm/llmapi/llm_args.py
  (KvCacheConfig.dtype, "auto" by default, for the PyTorch backend that trtllm-serve runs by
  default; KvCacheConfig.free_gpu_memory_fraction; the model's `dtype`). trtllm-serve 1.0 has no
  KV-dtype option, so the dtype goes in the options file; trtllm-serve merges that file over its
  options (llmapi/llm_utils.py update_llm_args_with_extra_dict), and the file's kv_cache_config
  replaces the whole KvCacheConfig built from the options, so the file carries the memory fraction
  too, the same value as the option.
"""

from __future__ import annotations

import shlex
from typing import Any, NamedTuple

from apsi.errors import InputError, brief, unknown
from apsi.outputs.export.checks import comment_text, unprintable
from apsi.outputs.export.common import heredoc

EXPORTS: tuple[str, ...] = ("vllm", "sglang", "trtllm")
"""The engines whose launch script apsi writes (each its own logic below); an engine of
apsi.serving.engines.ENGINES without one is refused in one line."""

NAMES = {
    "vllm": "vLLM 0.11.0 (vllm/engine/arg_utils.py EngineArgs.add_cli_args; vllm serve's positional model_tag)",
    "sglang": "SGLang 0.5.2 (python/sglang/srt/server_args.py ServerArgs.add_cli_args)",
    "trtllm": "TensorRT-LLM 1.0 (tensorrt_llm/commands/serve.py trtllm-serve options; llmapi/llm_args.py "
              "KvCacheConfig for the options file)",
}
"""Where each export's argument names come from (the module docstring has the detail)."""

OPTIONS_FILE = "apsi_trtllm_options.yaml"
"""The LLM API options file the TensorRT-LLM script writes beside itself and passes to trtllm-serve."""

CHECKPOINTS = {"deepseek-ai/DeepSeek-V3": "fp8"}
"""Presets' checkpoints stored quantized, by the precision of their weights: DeepSeek-V3's
config.json carries quantization_config {quant_method: fp8, fmt: e4m3, weight_block_size:
[128, 128]} (huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json). Every other preset's
repository holds 16-bit weights (torch_dtype bfloat16 in its config.json)."""

KV_DTYPE = {"vllm": "fp8", "sglang": "fp8_e4m3", "trtllm": "fp8"}
"""Each engine's word for an FP8 (E4M3) KV cache: vLLM's "fp8" is fp8_e4m3 on CUDA (CacheConfig
cache_dtype), SGLang names it fp8_e4m3, TensorRT-LLM's KvCacheConfig.dtype takes "fp8". "auto"
is each one's KV cache in the model's own dtype."""

FP8_AT_LOAD = {"vllm": "fp8", "sglang": "fp8"}
"""The --quantization value with which an engine quantizes a 16-bit checkpoint's weights to FP8 as
it loads them (dynamic scales, no calibration): vLLM's `--quantization fp8` (docs
features/quantization/fp8.md, "online dynamic quantization"), SGLang's `--quantization fp8`
(docs advanced_features/quantization.md, "online quantization"). TensorRT-LLM's PyTorch backend
takes a precision only from the checkpoint's quantization config, and no engine quantizes to NVFP4
at load: those need a checkpoint already in that precision (NVIDIA ModelOpt's export)."""


def launch(plan, export: Any) -> str:
    """The launch script of `plan` (a ServePlan) for `export` (vllm, sglang, trtllm: the plan's own
    engine), as bash text; an ApsiError in one line when the plan cannot be launched as it is."""
    from apsi.model.serve_schema import ServePlan

    if not isinstance(plan, ServePlan):
        raise InputError(f"launch needs a ServePlan (from serve()), got {type(plan).__name__}")
    key = export.strip().lower() if isinstance(export, str) else export
    if key not in EXPORTS:
        raise unknown("serving export", export, EXPORTS)
    if plan.engine != key:
        raise InputError(f"the plan is {_title(plan.engine)}'s (its memory rule and max batch are that engine's): "
                         f"plan it with --engine {key} (engine='{key}') to export {key}")
    if plan.model_repo is None:
        raise InputError("an engine needs real weights, which a size or a config file not named config.json does "
                         "not name: give a preset (apsi models) or a Hugging Face model folder with its config.json")
    at = unprintable(plan.model_repo)
    if at is not None:
        raise InputError(f"the model {brief(plan.model_repo)} holds the character {repr(plan.model_repo[at])[1:-1]} "
                         f"at position {at + 1}, which is not printable: a launch command takes a printable model "
                         "name or folder")
    if plan.model_repo.startswith("-"):
        # A saved plan's model read as an option ("--trust-remote-code"): apsi writes folders as
        # ./FOLDER (apsi.serving.inputs.folder_word), and no Hugging Face repository starts so.
        raise InputError(f"the model {brief(plan.model_repo)} starts with '-', which an engine would read as an "
                         f"option: give the folder as ./{plan.model_repo} or an absolute path")
    if key == "trtllm" and len({g.attention_dp > 1 for g in plan.groups}) > 1:
        raise InputError("the plan mixes replicas with and without attention DP, and TensorRT-LLM takes "
                         "enable_attention_dp from one options file for every replica: plan one layout "
                         "(--tp and --pp pins) to export trtllm")
    stored = checkpoint_precision(plan.model_repo)
    weights = _weights(plan, key, stored)
    kv = _kv_dtype(plan, key)
    return _script(plan, key, weights, kv)


def checkpoint_precision(repo: str) -> str | None:
    """The precision a checkpoint stores its weights in when it is quantized (fp8, fp4), or None
    for 16-bit weights: a preset's from CHECKPOINTS, a folder's from its config.json's
    quantization_config (quant_method fp8; or modelopt with quant_algo FP8 or NVFP4, as NVIDIA
    ModelOpt's Hugging Face export writes it)."""
    from apsi.inputs.hf_config import config_path, read_config
    from apsi.inputs.presets import presets

    if repo in CHECKPOINTS or repo in {p.repo for p in presets().values()}:
        return CHECKPOINTS.get(repo)  # a preset's repository, never a folder of that name here

    path = config_path(repo)
    if path is None or not path.is_file():
        return None
    quant = read_config(path).get("quantization_config")
    if not isinstance(quant, dict):
        return None
    method = str(quant.get("quant_method", "")).lower()
    algo = str(quant.get("quant_algo", "")).upper()
    if method == "fp8" or (method == "modelopt" and algo == "FP8"):
        return "fp8"
    if method == "modelopt" and algo == "NVFP4":
        return "fp4"
    raise InputError(f"the checkpoint in {brief(repo)} is quantized as {brief(method or quant)}, which apsi does "
                     "not plan: give a 16-bit checkpoint, an FP8 one or an NVFP4 one (NVIDIA ModelOpt)")


class _Weights(NamedTuple):
    """How the script gets the plan's weights."""

    model: str
    """The model's shell word: the repository or folder quoted, or "$MODEL"."""
    args: list[tuple[str, str]]
    """The arguments that name the weights' precision."""
    note: str
    """The header's Weights line."""
    placeholder: str | None = None
    """The line requiring MODEL, when the plan's precision needs another checkpoint."""


def _weights(plan, key: str, stored: str | None) -> _Weights:
    repo, want = plan.model_repo, plan.precision
    quoted = shlex.quote(repo)
    if stored is not None and want in ("bf16", "fp16"):
        raise InputError(f"{brief(repo)} is an {stored.upper()} checkpoint, so the engine loads {stored} weights, "
                         f"not the plan's {want}: plan it with --precision {stored}")
    if want == stored:
        return _Weights(quoted, [], f"the checkpoint is {want.upper()} already; the engine reads its quantization "
                                    "config")
    if want in ("bf16", "fp16"):
        if want == "fp16":  # the presets' checkpoints are bf16: the engine must be told to cast
            flag = {"vllm": ("--dtype", "float16"), "sglang": ("--dtype", "float16")}.get(key)
            return _Weights(quoted, [flag] if flag else [], "16-bit weights, served in float16")
        return _Weights(quoted, [], "the checkpoint's 16-bit weights as they are")
    if want == "fp8" and stored is None and key in FP8_AT_LOAD:
        return _Weights(quoted, [("--quantization", FP8_AT_LOAD[key])],
                        f"--quantization fp8: {_title(key)} quantizes the checkpoint's 16-bit weights to FP8 as it "
                        "loads them (dynamic scales, no calibration)")
    kind = "an NVFP4" if want == "fp4" else "an FP8"
    why = ("no engine quantizes to NVFP4 as it loads" if want == "fp4" else
           "TensorRT-LLM takes FP8 weights only from a checkpoint's quantization config")
    return _Weights('"$MODEL"', [], f"the plan's {want} weights need {kind} checkpoint of {repo} ({why}): set MODEL "
                                     "to one, e.g. quantized with NVIDIA ModelOpt",
                    placeholder=f': "${{MODEL:?set MODEL to {kind} checkpoint of the model named in the Weights line}}"')


def _kv_dtype(plan, key: str) -> str:
    """The engine's KV-cache dtype for the plan's: fp8, or auto (the model's own dtype: bf16, or
    fp16 for fp16 weights; FP8 and NVFP4 weights compute in bf16)."""
    from apsi.serving.replica import kv_choices

    own, _ = kv_choices(plan.precision)
    if plan.kv_precision == "fp8":
        return KV_DTYPE[key]
    if plan.kv_precision == own:
        return "auto"
    raise InputError(f"{_title(key)} keeps the KV cache in the model's dtype ({own}) or fp8, not "
                     f"{brief(plan.kv_precision)}: plan it with --kv-precision {own} or fp8")


def _title(key: str) -> str:
    from apsi.serving.engines import engines

    return engines()[key].title


def _number(x: float) -> str:
    return f"{x:g}"


def _arguments(plan, key: str, group, weights: _Weights, kv: str) -> list[tuple[str, str | None]]:
    """(flag, value) pairs for one replica kind, in Engine.arguments' names."""
    from apsi.serving.engines import engines

    eng = engines()[key]
    names = eng.arguments
    w = plan.workload
    dp, ep = group.attention_dp, group.ep
    # vLLM's --tensor-parallel-size is attention TP, its DP ranks apart; SGLang's and TensorRT-LLM's
    # TP size counts every GPU of a stage, attention DP splitting it. vLLM and TensorRT-LLM schedule
    # a batch per DP rank, SGLang one for the server.
    tp = group.tp if key == "vllm" else group.tp * dp
    batch = group.batch_limit if key == "sglang" else -(-group.batch_limit // dp)
    out: list[tuple[str, str | None]] = [(names["tp"], str(tp)), (names["pp"], str(group.pp)),
           (names["max_batch"], str(batch)), (names["max_len"], str(max_length(plan, group)))]
    if dp > 1 and key == "vllm":
        out.append(("--data-parallel-size", str(dp)))
    if dp > 1 and key == "sglang":
        out += [("--dp-size", str(dp)), ("--enable-dp-attention", None)]
    if ep > 1:
        out.append((names["ep"], None) if key == "vllm" else (names["ep"], str(ep)))
    if key != "trtllm":  # TensorRT-LLM's KV dtype is in its options file (the module docstring)
        out.append((names["kv_dtype"], kv))
    out.append((names["memory_fraction"], _number(group.memory.memory_fraction)))
    out += weights.args
    if key == "trtllm":
        out.append(("--extra_llm_api_options", OPTIONS_FILE))
    nodes = replica_nodes(group, key)
    if key == "sglang" and nodes > 1:
        # One process per node, each told the nodes, its rank and node 0's address
        # (server_args.py --nnodes, --node-rank, --dist-init-addr), however its TP and PP ranks
        # fall over them (a TP group over an NVLink domain of several hosts, as on GB200, too).
        out += [("--nnodes", str(nodes)), ("--node-rank", '"$NODE_RANK"'), ("--dist-init-addr", '"$DIST_INIT_ADDR"')]
    return out


def node_gpus(group) -> int:
    """GPUs of one node of the group's type: the figure the plan recorded (ReplicaGroup.gpus_per_node,
    from the catalog it was made with), else the shipped catalog's; a one-GPU replica needs none."""
    from apsi.catalog import find_gpu
    from apsi.errors import UnknownNameError

    if group.gpus_per_node is not None:
        return max(group.gpus_per_node, 1)
    if group.gpus_per_replica == 1:
        return 1
    try:
        return max(find_gpu(group.gpu).gpus_per_node, 1)
    except UnknownNameError:
        raise InputError(f"the plan does not say how many GPUs a node of {brief(group.gpu)} holds (a plan saved "
                         "before apsi recorded it, on a GPU not in the shipped catalog): plan it again to export it") from None


def replica_nodes(group, key: str = "") -> int:
    """Nodes one replica spans: ceil(tp x attention DP x pp / GPUs per node), its ranks packed node
    by node (a TP 2 x PP 2 replica is one node of 8 GPUs; TP 16 on GB200, 4 GPUs a node, is four):
    a stage's TP group divides a node or is whole nodes (apsi.serving.replica.replicas), so none
    straddles two. SGLang (`key`) gives every node the same share instead, pp / nnodes stages each
    or a stage over nnodes / pp nodes (engine.py _calculate_rank_ranges: pp_size // nnodes stages,
    tp_size // (nnodes // pp_size) TP ranks a node): the fewest nodes that divide the stages so
    within a node's GPUs (TP 4 x PP 3 on 8-GPU nodes: three nodes of 4, where 8 + 4 left a stage
    unlaunched)."""
    per, gpus, pp = node_gpus(group), group.gpus_per_replica, max(group.pp, 1)
    if key != "sglang" or pp == 1 or gpus // pp > per:
        return -(-gpus // per)
    return next(d for d in range(1, pp + 1) if pp % d == 0 and gpus // d <= per)


POOL_SHARE = 2
"""The longest request a launch admits takes at most 1 / POOL_SHARE of the replica's KV cache
(max_length): room for the batch beside it, and an engine whose own pool comes out a little
smaller than the plan's still starts (vLLM refuses a max_model_len its KV cache cannot hold)."""


def max_length(plan, group) -> int:
    """The launch's max length in tokens (--max-model-len, --context-length, --max_seq_len): the
    requests planned (isl + osl) at least, and up to 1 / POOL_SHARE of the replica's KV-cache
    tokens, never past the model's context (its config's max_position_embeddings, which each
    engine refuses to exceed). A model whose context is not known (a bare size) gets isl + osl:
    a longer max could be one the engine refuses."""
    w = plan.workload
    planned = w.isl_tokens + w.osl_tokens
    if plan.context_tokens is None:
        return planned
    return max(planned, min(plan.context_tokens, group.memory.kv_cache_tokens // POOL_SHARE))


SHELL_WORDS = ('"$NODE_RANK"', '"$DIST_INIT_ADDR"', '"$MODEL"')
"""The words apsi writes as they are: its own variables, double-quoted (one word each, expanded
once, never re-parsed). Every other value is shlex-quoted."""

PROGRAM = {"vllm": "vllm serve", "sglang": "python3 -m sglang.launch_server", "trtllm": "trtllm-serve"}


def _command(key: str, model: str, args: list[tuple[str, str | None]], indent: str) -> str:
    """The exec line; a None value is a switch (the flag alone)."""
    head = f"exec {PROGRAM[key]} " + (f"--model-path {model}" if key == "sglang" else model)
    words = [head] + [flag if value is None else f"{flag} {value if value in SHELL_WORDS else shlex.quote(value)}"
                      for flag, value in args]
    return indent + f" \\\n{indent}    ".join(words) + "\n"


def _options_file(plan, kv: str) -> str:
    from apsi.serving.engines import engines

    lines = ["# TensorRT-LLM LLM API options (tensorrt_llm/llmapi/llm_args.py), merged over trtllm-serve's.",
             "kv_cache_config:", f"  dtype: {kv}",
             f"  free_gpu_memory_fraction: {_number(plan.groups[0].memory.memory_fraction)}"]
    if plan.precision == "fp16":
        lines.append("dtype: float16")
    if plan.groups[0].attention_dp > 1:
        lines.append("enable_attention_dp: true")
    # The plan's steps carry prompt chunks of up to --max_num_tokens beside the decodes, as every
    # engine's are timed (apsi.serving.replica.step_seconds); TensorRT-LLM's PyTorch backend does so
    # only with chunked context on (TorchLlmArgs.enable_chunked_prefill, False by default), and
    # without it refuses a prompt past max_num_tokens (8,192 by default).
    lines += ["# Prompts chunked into the decode steps, as the plan times them.", "enable_chunked_prefill: true"]
    return "\n".join(lines) + "\n"


def _kind_words(g) -> str:
    from apsi.serving.replica import layout_words

    return (f"{g.replicas:,} replica{'s' if g.replicas != 1 else ''} of {layout_words(g.tp, g.pp, g.ep, g.attention_dp)}"
            + f" on {g.gpu} ({g.gpus_per_replica:,} GPU{'s' if g.gpus_per_replica != 1 else ''} each)")


def _nodes_note(key: str, g) -> str:
    """What a replica spanning several nodes needs (replica_nodes: its GPUs over the node's)."""
    nodes, per = replica_nodes(g, key), node_gpus(g)
    if key == "sglang":  # the same share on each (replica_nodes)
        span = f"{nodes} nodes of {per} GPUs, {g.gpus_per_replica // nodes} of them on each"
    else:
        span = f"{nodes} nodes of {per} GPUs" + (f" ({g.gpus_per_replica} GPUs: the last holds "
                                                f"{g.gpus_per_replica - (nodes - 1) * per})" if g.gpus_per_replica % per else "")
    if key == "vllm":
        return (f"{span}: vLLM runs them as one Ray cluster (`ray start --head` on the first "
                "node, `ray start --address=FIRST:6379` on the others) and this command once, on the first; it picks "
                "Ray by itself when the GPUs span nodes (vllm/config/parallel.py)")
    if key == "sglang":
        return (f"{span}: run this command on every node with NODE_RANK set to its index "
                "(0 on the first) and DIST_INIT_ADDR to the first node's HOST:PORT")
    # srun's --ntasks-per-node with --ntasks is a most per node (Slurm's srun manual).
    return (f"{span}, one MPI rank per GPU: run this script on all of them through "
            f"TensorRT-LLM's launcher, `srun --mpi=pmix -N {nodes} --ntasks {g.gpus_per_replica} --ntasks-per-node "
            f"{per} trtllm-llmapi-launch bash SCRIPT` (or under `mpirun -np {g.gpus_per_replica}`): rank 0 runs the "
            "command and the others its MPI workers (tensorrt_llm/llmapi/trtllm-llmapi-launch)")


def _header(plan, key: str, weights: _Weights) -> list[str]:
    from apsi import __version__

    w = plan.workload
    what = f"{plan.model_name} ({plan.model_repo})" if plan.model_name else plan.model_repo
    lines = [f"Generated by apsi {__version__} ({key} export).",
             f"Plan: {what} on {_title(plan.engine)} {plan.engine_version}, {plan.precision} weights, "
             f"{plan.kv_precision} KV cache, {w.isl_tokens:,} in + {w.osl_tokens:,} out tokens per request: "
             f"{plan.gpus:,} GPUs in {plan.replicas:,} replica{'s' if plan.replicas != 1 else ''}.",
             f"Why: {plan.why}."]
    for i, g in enumerate(plan.groups):
        label = "Replica" if len(plan.groups) == 1 else f"Kind {i + 1}"
        longest = max_length(plan, g)
        planned = plan.workload.isl_tokens + plan.workload.osl_tokens
        reach = ("the requests planned: the model's context is not known" if plan.context_tokens is None else
                 "the requests planned, more than half the KV cache" if longest == planned else
                 f"half the KV cache, within the model's {plan.context_tokens:,}-token context")
        lines.append(f"{label}: {_kind_words(g)}; max batch {g.batch_limit:,} (runs {g.batch:,}); max length "
                     f"{longest:,} tokens ({reach}); predicted TTFT "
                     f"{g.ttft_ms:,.1f} ms, TPOT {g.tpot_ms:,.1f} ms, {g.requests_per_s_per_replica:,.2f} requests/s "
                     f"per replica; {g.memory.kv_cache_gib:,.1f} GiB of KV cache per GPU.")
        if replica_nodes(g, key) > 1:
            lines.append(f"Nodes ({label.lower()}): {_nodes_note(key, g)}.")
    lines += [f"Weights: {weights.note}.",
              "Replicas: each is its own server on its own GPUs; start one per replica and balance the requests "
              "over them (apsi plans no load balancer).",
              f"Names: {NAMES[key]}."]
    return lines


def _script(plan, key: str, weights: _Weights, kv: str) -> str:
    head = "#!/bin/bash\n" + "".join(f"# {comment_text(line)}\n" for line in _header(plan, key, weights))
    body = "\nset -euo pipefail\n"
    if weights.placeholder:
        body += weights.placeholder + "\n"
    if key == "trtllm":
        body += heredoc(OPTIONS_FILE, _options_file(plan, kv))
    kinds = plan.groups

    def branch(g, indent: str) -> str:
        text = ""
        if key == "sglang" and replica_nodes(g, key) > 1:
            text += (f'{indent}: "${{NODE_RANK:?set NODE_RANK to this node\'s index, 0 to {replica_nodes(g, key) - 1}}}"\n'
                     f'{indent}: "${{DIST_INIT_ADDR:?set DIST_INIT_ADDR to the first node\'s HOST:PORT}}"\n')
        return text + _command(key, weights.model, _arguments(plan, key, g, weights, kv), indent)

    if len(kinds) == 1:
        return head + body + branch(kinds[0], "")
    choices = ", ".join(f"{i + 1} ({g.gpu})" for i, g in enumerate(kinds))
    body += (f"# One command per replica kind: run this script with the kind of the GPUs it runs on "
             f"({comment_text(choices)}).\n"
             f'KIND="${{1:?give the replica kind to launch here, 1 to {len(kinds)} (the Kind lines above)}}"\n'
             'case "$KIND" in\n')
    for i, g in enumerate(kinds):
        body += f"  {i + 1})\n    # Kind {i + 1}: {comment_text(_kind_words(g))}.\n" + branch(g, "    ") + "    ;;\n"
    body += f'  *)\n    echo "unknown replica kind $KIND: give one of 1 to {len(kinds)}" >&2\n    exit 2\n    ;;\nesac\n'
    return head + body

