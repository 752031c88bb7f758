"""vLLM as a serving engine: its memory rule, defaults and launch arguments (`vllm serve`).

Defaults are vLLM's (V1 engine): --gpu-memory-utilization 0.9 of the GPU's total memory holds
weights, activations and the KV cache (vllm/config/cache.py, gpu_memory_utilization); a KV page
of 16 tokens (block_size); on a GPU of 70 GiB or more that is not an A100, --max-num-seqs 1024
and --max-num-batched-tokens 8192 for the OpenAI server, on any other 256 and 2048
(vllm/engine/arg_utils.py, _set_default_args: default_max_num_seqs,
default_max_num_batched_tokens, keyed on current_platform.get_device_total_memory() >= 70 GiB
and "a100" not in the device name; tests/engine/test_arg_utils.py test_defaults_with_usage_context
states both). The catalog's visible memory stands for the device's total.
"""

from apsi.serving.calibrated import CALIBRATION
from apsi.serving.engine import Engine

ENGINE = Engine(
    name="vllm", title="vLLM", version="0.11",
    memory_rule="total", memory_fraction=0.9,
    # CUDA graphs and NCCL outside the profiled peak: vLLM's log "Graph capturing finished ...
    # took 0.5-1.5 GiB" on H100 for 7B-70B models; 1 GiB is the middle.
    overhead_gib=1.0,
    max_sequences=1024, chunk_tokens=8192, block_tokens=16,
    small_gpu_defaults=(256, 2048), large_gpu_gib=70.0, small_gpu_names=("a100",),
    # --kv-cache-dtype auto: the model's dtype (vllm/config/cache.py, cache_dtype).
    fp8_kv_cache=False,
    # V1 allocates the pages of the tokens scheduled in a step, not of prompt + max_tokens, and
    # preempts the latest admitted request when a running one's pages run out (vllm/v1/core/sched/
    # scheduler.py, kv_cache_manager.allocate_slots; ../shared/reference/serving.md 1.1).
    admission="paged",
    calibration=CALIBRATION["vllm"],
    arguments={"tp": "--tensor-parallel-size", "pp": "--pipeline-parallel-size", "ep": "--enable-expert-parallel",
               "max_batch": "--max-num-seqs", "max_len": "--max-model-len", "kv_dtype": "--kv-cache-dtype",
               "memory_fraction": "--gpu-memory-utilization", "chunk": "--max-num-batched-tokens"},
)
