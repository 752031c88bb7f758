"""Tests for apsi.model.counting: parameters by part against published totals, FLOPs per token
under each convention, and the KV cache per token.

Every expected total is a published figure with its source beside it; the tolerance is 0.5%
(published sizes are rounded). Where the exact integer is known (Llama 3.1 8B's safetensors
total) it is asserted exactly. The parts are checked two ways, as nanoGPT's
transformer_sizing.ipynb does: they sum to the total, and a hand count of one layer agrees.
"""

from __future__ import annotations

import pytest

from apsi.model.architecture import Architecture
from apsi.model.counting import (
    attention_flops_per_layer, count_parameters, kv_cache_elements_per_token, training_flops_per_token,
)
from apsi.inputs.presets import find_preset, preset_architecture, presets


def arch(key: str) -> Architecture:
    return preset_architecture(find_preset(key))


@pytest.mark.parametrize(("key", "total", "active", "source"), [
    # HFCFG (derived count) and the Llama 3.1 model card (meta-llama/Llama-3.1-405B): 405.85B counted.
    ("llama-3.1-405b", 405.85e9, None, "HFCFG count; Llama 3.1 model card"),
    # Mixtral 8x22B: "39B active parameters out of 141B" (mistral.ai/news/mixtral-8x22b);
    # counted (derived, HFCFG): 140.62B / 39.15B.
    ("mixtral-8x22b", 140.6e9, 39.2e9, "mistral.ai/news/mixtral-8x22b"),
    # DeepSeek-V3: "671B total parameters with 37B activated for each token" (arXiv 2412.19437,
    # abstract); counted without the MTP module: 671.03B / 37.55B (derived, HFCFG).
    ("deepseek-v3", 671.0e9, 37.6e9, "arXiv 2412.19437 abstract"),
    # Qwen3-235B-A22B model card: 235B total, 22B activated; counted (derived, HFCFG): 235.09B / 22.19B.
    ("qwen3-235b-a22b", 235.1e9, 22.2e9, "Qwen/Qwen3-235B-A22B model card"),
    # Llama 3.1 8B: 8,030,261,248 parameters in the safetensors index (8.03B).
    ("llama-3.1-8b", 8.03e9, None, "meta-llama/Llama-3.1-8B safetensors"),
    # Mistral 7B: 7.24B (mistralai/Mistral-7B-v0.1 safetensors, 7,241,732,096).
    ("mistral-7b", 7.24e9, None, "mistralai/Mistral-7B-v0.1 safetensors"),
    # Qwen3-8B model card: "Number of Parameters: 8.2B".
    ("qwen3-8b", 8.2e9, None, "Qwen/Qwen3-8B model card"),
    # Qwen3-30B-A3B model card: 30.5B total, 3.3B activated (two figures: counted 3.353B, which
    # the card truncates; the active count is held to 2% below).
    ("qwen3-30b-a3b", 30.5e9, 3.3e9, "Qwen/Qwen3-30B-A3B model card"),
    # Gemma 2 report (arXiv 2408.00118) Table 2: 27B, 26,047,480,320 non-embedding (its embedding
    # row counts 256,128 tokens, the config 256,000; test_gemma_2_non_embedding_is_exact).
    ("gemma-2-27b", 27.2e9, None, "arXiv 2408.00118 Table 2"),
    # Nemotron-4 340B report (arXiv 2406.11704) Table 1: 9.4B embedding + 331.6B non-embedding.
    ("nemotron-4-340b", 341.0e9, None, "arXiv 2406.11704 Table 1"),
    # Mixtral 8x7B: 46.7B total, 12.9B active (mistral.ai/news/mixtral-of-experts).
    ("mixtral-8x7b", 46.7e9, 12.9e9, "mistral.ai/news/mixtral-of-experts"),
    # Llama 3.2 model card: 1B (1.23B), 3B (3.21B).
    ("llama-3.2-1b", 1.23e9, None, "Llama 3.2 model card"),
    ("llama-3.2-3b", 3.21e9, None, "Llama 3.2 model card"),
    # GPT-3 paper (arXiv 2005.14165) Table 2.1: 175.0B.
    ("gpt-3-175b", 175.0e9, None, "arXiv 2005.14165 Table 2.1"),
])
def test_counts_match_published_totals(key: str, total: float, active: float | None, source: str) -> None:
    counts = count_parameters(arch(key))
    assert counts.total.total == pytest.approx(total, rel=5e-3), source
    two_figures = 2e-2 if key == "qwen3-30b-a3b" else 5e-3
    assert counts.active.total == pytest.approx(active or total, rel=two_figures), source


def test_llama_3_1_8b_is_exact() -> None:
    # The safetensors index of meta-llama/Llama-3.1-8B totals 8,030,261,248 parameters.
    assert count_parameters(arch("llama-3.1-8b")).total.total == 8_030_261_248


def test_gemma_2_non_embedding_is_exact() -> None:
    # Gemma 2 report (arXiv 2408.00118) Table 2: 26,047,480,320 non-embedding parameters for 27B.
    c = count_parameters(arch("gemma-2-27b")).total
    assert c.total - c.embedding == 26_047_480_320


def test_llama_405b_by_hand() -> None:
    # Per layer: attention 2 h (a d_h) + 2 h (g d_h) = 2*16384*16384 + 2*16384*1024 = 570,425,344;
    # SwiGLU 3 h f = 3 * 16384 * 53248 = 2,617,245,696; two RMSNorms 32,768. Embedding and the
    # untied head 128,256 x 16,384 = 2,101,346,304 each; final norm 16,384.
    c = count_parameters(arch("llama-3.1-405b")).total
    assert c.attention == 126 * 570_425_344
    assert c.mlp == 126 * 2_617_245_696
    assert c.norms == 126 * 32_768 + 16_384
    assert c.embedding == c.head == 2_101_346_304
    assert c.total == 405_853_388_800


def test_deepseek_v3_parts_and_mtp() -> None:
    # MLA per layer 187,105,280 matrix weights (derived, MLM-TMU), 61 layers; 58 MoE layers of 256
    # experts of 3 * 7168 * 2048 = 44,040,192 each; the MTP block adds ~11.6B (derived
    # from HFCFG and DSV3), the DeepSeek-V3 card's 685B total less 671B and the duplicated 1.85B
    # embedding and head, i.e. about 12.1B; counted here without the duplicates.
    counts = count_parameters(arch("deepseek-v3"))
    c = counts.total
    assert c.attention == 61 * 187_105_280
    assert c.experts == 58 * 256 * 44_040_192
    assert counts.active.experts == 58 * 8 * 44_040_192
    assert c.shared_experts == 58 * 44_040_192
    assert c.router == 58 * (256 * 7168 + 256)
    assert counts.mtp == pytest.approx(11.6e9, rel=1e-2)
    assert c.total + counts.mtp + 2 * 129_280 * 7168 == pytest.approx(685e9, rel=5e-3)


@pytest.mark.parametrize("key", sorted(presets()))
def test_parts_sum_to_the_total(key: str) -> None:
    c = count_parameters(arch(key))
    parts = c.total.model_dump()
    assert sum(parts.values()) == c.total.total
    assert c.active.total <= c.total.total
    assert c.matmul_active <= c.active.total + c.active.embedding  # the head's matmul is counted once even if tied


@pytest.mark.parametrize(("convention", "expected"), [("causal", 2.52e12), ("full", 2.63e12)])
def test_llama_405b_flops_per_token(convention: str, expected: float) -> None:
    # Derived from MLM-FLOPS and TT-FLOPS: at s = 8,192 the conventions give 2.52 vs 2.63 TFLOPs
    # per token (822 TFLOP/s / 326 tokens/s/GPU, MB-PERF's Bridge row, is 2.52e12 FLOPs per
    # token). 6 x 403.75B matrix weights + 126 x 6 s a d_h x (1 or 2).
    c = count_parameters(arch("llama-3.1-405b"))
    per_layer = attention_flops_per_layer(128, 128, 128, 8192, convention)
    assert training_flops_per_token(c.matmul_active, 126, per_layer, "none") == pytest.approx(expected, rel=1e-2)


def test_attention_flops_conventions() -> None:
    # Full: 6 s a (d_qk + d_v) = 6 * 4096 * 32 * 256; causal is half. MLA (DeepSeek-V3): Megatron's
    # 3 a (d_qk + d_v) s causal with d_qk = 128 + 64, d_v = 128 (MLM-FLOPS).
    assert attention_flops_per_layer(32, 128, 128, 4096, "full") == 6 * 4096 * 32 * 256
    assert attention_flops_per_layer(32, 128, 128, 4096, "causal") == 3 * 4096 * 32 * 256
    assert attention_flops_per_layer(128, 192, 128, 4096, "causal") == 3 * 128 * 320 * 4096


def test_recomputation_flops() -> None:
    # Selective re-runs the attention core forward (a third of its training FLOPs); full re-runs
    # the whole forward, 2 N plus that third (Korthikanti et al. 2022 Sec. 5).
    assert training_flops_per_token(100, 2, 30, "none") == 660
    assert training_flops_per_token(100, 2, 30, "selective") == 680
    assert training_flops_per_token(100, 2, 30, "full") == 880


def test_kv_cache_gqa_and_mla() -> None:
    # Llama 3.1 70B: 80 layers x 2 x 8 KV heads x 128 = 163,840 elements per token, an eighth of
    # multi-head attention's 80 x 2 x 64 x 128. DeepSeek-V3 keeps the MLA latent: 61 x (512 + 64)
    # = 35,136 (DeepSeek-V2 paper, Sec. 2.1.2: (d_c + d_h^R) l elements per token).
    llama = arch("llama-3.1-70b")
    assert kv_cache_elements_per_token(llama) == 163_840
    assert kv_cache_elements_per_token(llama.model_copy(update={"kv_heads": 64})) == 8 * 163_840
    assert kv_cache_elements_per_token(arch("deepseek-v3")) == 35_136


def test_architecture_rejects_what_cannot_be_built() -> None:
    base = arch("llama-3.1-8b").model_dump()
    with pytest.raises(ValueError, match="kv_heads 5 must divide heads 32"):
        Architecture(**{**base, "kv_heads": 5})
    with pytest.raises(ValueError, match="top_k 9 must be from 1 to the 8 experts"):
        Architecture(**{**base, "experts": 8, "top_k": 9, "expert_ffn": 1024})
    with pytest.raises(ValueError, match="describe experts: give experts"):
        Architecture(**{**base, "top_k": 2})
