"""SGLang as a serving engine: its memory rule, defaults and launch arguments
(`python -m sglang.launch_server`).

SGLang sizes a static pool, --mem-fraction-static of the GPU's memory, for the weights and the KV
cache; activations and CUDA graphs live in the rest (python/sglang/srt/server_args.py,
mem_fraction_static; on an 80 GiB GPU at TP 1 its automatic choice is 0.88 before 0.4.9 and about
that after). Its radix cache pages one token at a time (page_size 1); --chunked-prefill-size 8192
on GPUs of 80 GiB and more.
"""

from apsi.serving.calibrated import CALIBRATION
from apsi.serving.engine import Engine

ENGINE = Engine(
    name="sglang", title="SGLang", version="0.5",
    memory_rule="static", memory_fraction=0.88,
    # CUDA graphs, NCCL and the CUDA context, outside the static pool.
    overhead_gib=1.0,
    # --max-running-requests is derived from the pool when unset; the CUDA graph batch sizes stop
    # at 512 on large GPUs (server_args.py, cuda_graph_max_bs), and larger batches run eagerly.
    max_sequences=1024, chunk_tokens=8192, block_tokens=1,
    # --kv-cache-dtype auto: the model's dtype (server_args.py, kv_cache_dtype).
    fp8_kv_cache=False,
    expert_parallel=True,
    calibration=CALIBRATION["sglang"],
    arguments={"tp": "--tp-size", "pp": "--pp-size", "ep": "--ep-size", "max_batch": "--max-running-requests",
               "max_len": "--context-length", "kv_dtype": "--kv-cache-dtype",
               "memory_fraction": "--mem-fraction-static", "chunk": "--chunked-prefill-size"},
)
