"""What a running request holds in KV cache under each engine's admission (apsi.serving.admission
held_tokens, max_batch), and the note a plan carries on a GPU maker its engine was not fitted on
(apsi.serving.engine.calibrated_on)."""

from __future__ import annotations

import math

import pytest

from apsi import serve
from apsi.catalog import find_gpu
from apsi.inputs.modelspec import resolve_model
from apsi.serving import admission
from apsi.serving import replica as rp
from apsi.serving.engine import calibrated_on, maker
from apsi.serving.engines import engines

W = rp.Workload(1000, 1000)


def test_each_engine_holds_what_its_admission_reserves() -> None:
    # ../shared/reference/serving.md 7 (B_max): vLLM's allocation grows with the tokens generated,
    # ISL + OSL/2 on average; SGLang's adds new_token_ratio (0.7 decaying to 0.098, 1.2) of the
    # remaining output, at most 4,096 tokens; TensorRT-LLM's GUARANTEED_NO_EVICT reserves the whole
    # ISL + OSL (1.3). Paged engines also hold their last page half empty on average.
    e = engines()
    assert e["vllm"].admission == "paged" and e["sglang"].admission == "estimated"
    assert e["trtllm"].admission == "reserve"
    assert admission.held_tokens(e["vllm"], W) == pytest.approx(1000 + 500 + 16 / 2, abs=1e-9)
    assert admission.held_tokens(e["sglang"], W) == pytest.approx(1000 + 500 + 1 / 2 + 0.098 * 500, abs=1e-9)
    assert admission.held_tokens(e["trtllm"], W) == 2016  # 2,000 tokens in 63 pages of 32
    # The estimate counts at most 4,096 of the remaining output (SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION).
    long = rp.Workload(1000, 20000)
    assert admission.held_tokens(e["sglang"], long) == pytest.approx(1000 + 10000 + 0.5 + 0.098 * 4096, abs=1e-9)


def test_paged_admission_holds_a_third_more_requests_than_reserving_them_whole() -> None:
    # The same shape's KV cache under vLLM's paged admission and under a reserving copy of vLLM:
    # 1,000 in / 1,000 out holds 2,000 / 1,508 = 1.33 times the requests (an H100 vLLM row of
    # ../shared/reference/serving.md held 573 requests in flight where reserving whole allowed 386).
    a = resolve_model("llama-3.1-70b").architecture
    paged = engines()["vllm"]
    reserving = paged.model_copy(update={"admission": "reserve"})
    sh = rp.shape(a, find_gpu("H100"), paged, "fp8", "bf16", rp.Replica(4, 1))
    per = sh.kv_bytes_per_token
    assert admission.max_batch(sh, paged, W) == min(paged.max_sequences, int(sh.kv_bytes // (per * 1508)))
    assert admission.max_batch(sh, reserving, W) == min(paged.max_sequences, int(sh.kv_bytes // (per * 2000)))
    assert admission.max_batch(sh, paged, W) / admission.max_batch(sh, reserving, W) == pytest.approx(2000 / 1508, rel=0.01)


def test_a_cache_that_cannot_hold_one_whole_request_holds_none() -> None:
    # A request's last token needs every page of its ISL + OSL, so a cache of fewer tokens than that
    # admits nothing, though it holds more than the average a request holds.
    a = resolve_model("llama-3.1-70b").architecture
    e = engines()["vllm"]
    sh = rp.shape(a, find_gpu("H100"), e, "fp8", "bf16", rp.Replica(4, 1))
    tokens = int(sh.kv_bytes // sh.kv_bytes_per_token)
    too_long = rp.Workload(tokens - 300, 400)  # 100 tokens more than the cache, which holds its average
    assert admission.held_tokens(e, too_long) < tokens < admission.tokens_per_sequence(e, too_long)
    assert admission.max_batch(sh, e, too_long) == 0


def test_the_calibrations_name_the_makers_they_were_fitted_on() -> None:
    # Every calibration row of benchmarks/serving was measured on NVIDIA GPUs; MI300X is AMD's.
    h100, mi300x = find_gpu("H100"), find_gpu("MI300X")
    assert (maker(h100), maker(mi300x)) == ("nvidia", "amd")
    for e in engines().values():
        assert e.calibration.makers == ("nvidia",)
        assert calibrated_on(e.calibration, h100) and not calibrated_on(e.calibration, mi300x)


def test_a_plan_on_a_gpu_its_engine_was_not_fitted_on_says_so() -> None:
    amd = serve("llama-3.1-70b", precision="fp8", gpu="MI300X", rate=2, engine="vllm")
    first = amd.notes[0]
    assert first.startswith("uncalibrated on MI300X") and "NVIDIA GPUs only" in first and "AMD" in first
    nvidia = serve("llama-3.1-70b", precision="fp8", gpu="H100", rate=2, engine="vllm")
    assert not any("uncalibrated" in n for n in nvidia.notes)
    assert math.isfinite(amd.gpus) and amd.gpus > 0


def test_the_uncalibrated_note_says_how_far_amds_own_vllm_rows_read() -> None:
    # The Note had said only that NVIDIA-fitted constants were applied; AMD's published vLLM runs on
    # 8 x MI300X (benchmarks/serving/amd_vllm_perf.yaml, validation rows only) say in which direction
    # and how far: apsi's figures read a median of AMD_VLLM_OVERESTIMATE above them. A plan under
    # cost with --gpu any picks such GPUs, so the user is told.
    import statistics
    import sys
    from pathlib import Path

    from apsi.serving.explain import AMD_VLLM_OVERESTIMATE

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import serving_validation

    rows = serving_validation.amd_check()
    median = statistics.median(r["predicted"] / r["throughput"] - 1 for r in rows)
    assert len(rows) == 16 and AMD_VLLM_OVERESTIMATE == pytest.approx(median, abs=0.005)
    note = serve("llama-3.1-70b", precision="fp8", gpu="MI300X", rate=2, engine="vllm").notes[0]
    assert note.endswith(f"read a median {AMD_VLLM_OVERESTIMATE:.0%} above the throughput measured, so expect fewer "
                         "tokens/s per GPU")
    sglang = serve("llama-3.1-70b", precision="fp8", gpu="MI300X", rate=2, engine="sglang").notes[0]
    assert sglang.startswith("uncalibrated on MI300X") and "AMD's own published vLLM runs" not in sglang
