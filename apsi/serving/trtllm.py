"""TensorRT-LLM as a serving engine: its memory rule, defaults and launch arguments (`trtllm-serve`).

TensorRT-LLM gives the KV cache a fraction of the memory free after the weights and the
activations are placed: KvCacheConfig.free_gpu_memory_fraction, 0.9 by default
(tensorrt_llm/llmapi/llm_args.py; trtllm-serve --kv_cache_free_gpu_memory_fraction); pages of 32
tokens (tokens_per_block); --max_batch_size 2048 and --max_num_tokens 8192 (trtllm-serve's defaults).
"""

from apsi.serving.calibrated import CALIBRATION
from apsi.serving.engine import Engine

ENGINE = Engine(
    name="trtllm", title="TensorRT-LLM", version="1.0",
    memory_rule="free", memory_fraction=0.9,
    # The runtime's workspace, CUDA graphs and NCCL, outside the activations it profiles.
    overhead_gib=1.0,
    max_sequences=2048, chunk_tokens=8192, block_tokens=32,
    # an FP8 checkpoint's kv_cache_quant_algo sets an FP8 cache (perf-overview.md: "If you specify FP8 quantization, the KV cache will automatically be set to FP8 as well").
    fp8_kv_cache=True,
    # The default capacity scheduler policy GUARANTEED_NO_EVICT starts a request only when the
    # cache holds its whole sequence (docs: "Scheduler", capacity_scheduler_policy).
    admission="reserve",
    # TensorRT-LLM builds CUDA kernels for NVIDIA GPUs only (its support matrix lists no other maker).
    vendors=("nvidia",),
    calibration=CALIBRATION["trtllm"],
    arguments={"tp": "--tp_size", "pp": "--pp_size", "ep": "--ep_size", "max_batch": "--max_batch_size",
               "max_len": "--max_seq_len", "kv_dtype": "kv_cache_config.dtype",
               "memory_fraction": "--kv_cache_free_gpu_memory_fraction", "chunk": "--max_num_tokens"},
)
