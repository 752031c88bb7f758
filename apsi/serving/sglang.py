"""SGLang as a serving engine: its memory rule, defaults and launch arguments
(`python -m sglang.launch_server`).

SGLang sizes a static pool, --mem-fraction-static of the GPU's memory, for the weights and the KV
cache; activations and CUDA graphs live in the rest. Unset, the fraction is chosen from the GPU's
memory and the layout (static_fraction; python/sglang/srt/server_args.py,
ServerArgs._handle_gpu_memory_settings, as benchmarks/serving/README.md transcribes it). Its radix
cache pages one token at a time (page_size 1); --chunked-prefill-size 8192 below 160 GiB.
"""

from apsi.serving.calibrated import CALIBRATION
from apsi.serving.engine import Engine

ENGINE = Engine(
    name="sglang", title="SGLang", version="0.5",
    # 0.88 is server_args.py's fraction when the GPU's memory is unknown; known, static_fraction.
    memory_rule="static", memory_fraction=0.88, auto_fraction=True,
    # CUDA graphs, NCCL and the CUDA context, outside the static pool.
    overhead_gib=1.0,
    # --max-running-requests is derived from the pool when unset; the CUDA graph batch sizes stop
    # at 512 on large GPUs (server_args.py, cuda_graph_max_bs), and larger batches run eagerly.
    max_sequences=1024, chunk_tokens=8192, block_tokens=1,
    # --kv-cache-dtype auto: the model's dtype (server_args.py, kv_cache_dtype).
    fp8_kv_cache=False,
    # Admission against each running request's tokens plus new_token_ratio x min(remaining output,
    # 4096); the ratio starts at 0.7 x schedule_conservativeness and decays linearly over 600 steps
    # to 0.14 of that, 0.098, where it stays while nothing is retracted (python/sglang/srt/managers/
    # schedule_policy.py, PrefillAdder; global_config.py; ../shared/reference/serving.md 1.2).
    admission="estimated", new_token_ratio=0.098,
    calibration=CALIBRATION["sglang"],
    arguments={"tp": "--tp-size", "pp": "--pp-size", "ep": "--ep-size", "max_batch": "--max-running-requests",
               "max_len": "--context-length", "kv_dtype": "--kv-cache-dtype",
               "memory_fraction": "--mem-fraction-static", "chunk": "--chunked-prefill-size"},
)


def static_fraction(memory_bytes: float, tp: int, pp: int, dp: int = 1) -> float:
    """SGLang's automatic --mem-fraction-static (server_args.py, _handle_gpu_memory_settings):
    with the GPU's memory in MiB, reserved = 512 + 1.5 x max(chunked_prefill_size, 2048)
    + 2 x cuda_graph_max_bs + 1024 x tp x pp / 8 MiB (+ 3 x cuda_graph_max_bs x dp under DP
    attention), at least 10,240 MiB on GPUs over 60 GiB; the fraction is (memory - reserved) /
    memory, rounded to 3 places. `tp` is SGLang's --tp-size, every GPU of a stage (under DP
    attention, dp groups of tp / dp). chunked_prefill_size and cuda_graph_max_bs by memory: under
    160 GiB 8,192 and 256 (TP < 4) or 512; above, 16,384 and 512."""
    mib = memory_bytes / 2**20
    chunk, graphs = (8192, 256 if tp < 4 else 512) if mib < 160 * 1024 else (16384, 512)
    reserved = 512 + 1.5 * max(chunk, 2048) + 2 * graphs + 1024 * tp * pp / 8
    if dp > 1:
        reserved += 3 * graphs * dp
    if mib > 60 * 1024:
        reserved = max(reserved, 10240)
    return round((mib - reserved) / mib, 3)
