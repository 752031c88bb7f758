"""Tests for apsi.modelspec: which model a run plans, from a size, a preset or a config, and options.

Owns the four cases of the module docstring: a bare size keeps the reference shape rule (the
reference's own numbers, checked against the reference arithmetic's default shapes), a size with fields says
which were derived, a size with a full architecture uses the architecture's count and says when
the size disagrees, and a preset takes overrides field by field. Also the `active` check and
the plan's Model line.
"""

from __future__ import annotations

import pytest

from apsi import ApsiError, inference, models, plan
from apsi.modelspec import resolve_model


def test_bare_size_is_the_reference_shape_rule() -> None:
    # The reference arithmetic's default shapes: 70B -> 72 layers x 9,216 (d = 128 L), 72 heads, FFN 4 d, no
    # vocabulary; the size itself is the count and the 6 N of the FLOPs.
    m = resolve_model("70B")
    a = m.architecture
    assert (a.layers, a.width, a.heads, a.kv_heads, a.ffn, a.vocab) == (72, 9216, 72, 72, 4 * 9216, 0)
    assert (m.source, m.params, m.active, m.matmul_active, m.flops_convention) == ("size", 70e9, 70e9, 70e9, "full")
    assert m.derived == ("layers", "width", "heads") and m.notes == () and m.parts is None


def test_size_with_fields_keeps_the_size_and_says_what_was_derived() -> None:
    m = resolve_model("70B", kv_heads=8)
    assert (m.source, m.params, m.architecture.kv_heads, m.architecture.layers) == ("shape", 70e9, 8, 72)
    assert m.derived == ("layers", "width", "heads", "head_dim", "ffn")
    assert m.notes == ("derived from 70B by the reference shape rule: 72 layers, width 9,216, 72 heads, head_dim 128, "
                       "FFN 36,864; the size is the parameter count",)


def test_size_with_a_full_architecture_uses_its_count_and_says_so() -> None:
    # Llama 2 70B's shape (80 x 8,192, FFN 28,672 SwiGLU, 8 KV heads, vocab 32,000) counts
    # 80 x (2*8192*8192 + 2*8192*1024 + 3*8192*28672 + 2*8192) + 2*32000*8192 + 8192 = 68,976,648,192.
    shape = dict(layers=80, width=8192, ffn=28672, mlp="swiglu", kv_heads=8, vocab=32000)
    near = resolve_model("70B", **shape)
    assert near.params == 68_976_648_192 - 80 * 2 * 8192 - 8192  # the rule's norms: none
    # Within 2% of the size: only the derived fields are said.
    assert near.notes == ("derived by the reference shape rule: 64 heads, head_dim 128",)
    far = resolve_model("80B", **shape)
    assert far.params == near.params
    assert far.notes[-1] == "80B parameters were given but the architecture counts 68.98B: the plan uses the architecture's count"


def test_preset_overrides_field_by_field() -> None:
    base = resolve_model("llama-3.1-70b")
    half = resolve_model("llama-3.1-70b", layers=40)
    # Half the layers: the embedding (2 x 128,256 x 8,192) and final norm stay.
    emb = 2 * 128_256 * 8192 + 8192
    assert half.params - emb == (base.params - emb) // 2
    mha = resolve_model("llama-3.1-70b", kv_heads=64)
    assert mha.params - base.params == 80 * 2 * 8192 * (64 - 8) * 128


def test_active_must_match_an_moe_architecture() -> None:
    # Mixtral 8x22B counts 39.15B active (mistral.ai: 39B): 39B is within 2%, 20B is not.
    assert resolve_model("mixtral-8x22b", active="39B").active == 39_152_031_744
    with pytest.raises(ApsiError, match=r"^active 20,000,000,000 does not match the preset's architecture, "
                                        r"which uses 39,152,031,744 parameters per token"):
        resolve_model("mixtral-8x22b", active="20B")


def test_expert_width_is_solved_from_a_size() -> None:
    # 1T total, 32B active, 64 experts of which 4 are routed: the 60 skipped experts in each of the
    # 56 layers hold 968B, so each expert's SwiGLU is 968e9 / (60 * 56 * 3 * 7168) = 13,398 wide.
    m = resolve_model("1T", active="32B", experts=64, top_k=4, mlp="swiglu")
    assert m.architecture.expert_ffn == round(968e9 / (60 * 56 * 3 * 7168))
    assert "expert_ffn" in m.derived and m.params == 10**12


def test_unknown_keyword_and_bad_values() -> None:
    with pytest.raises(ApsiError, match=r"^unknown keyword 'kv_head': did you mean kv_heads\?"):
        plan("70B", kv_head=8)
    with pytest.raises(ApsiError, match=r"^unknown mlp kind 'relu'"):
        plan("70B", mlp="relu")
    with pytest.raises(ApsiError, match=r"^tied must be true or false"):
        plan("llama-3.1-8b", tied="maybe")
    with pytest.raises(ApsiError, match=r"^unknown flops_convention 'half'"):
        plan("70B", flops_convention="half")


def test_serving_uses_gqa_and_mla() -> None:
    # Llama 3.1 70B in fp8: 8 KV heads x 128 x 2 x 80 layers = 163,840 bytes per token, an eighth
    # of the 64-head (MHA) figure; DeepSeek-V3 keeps the 576-wide latent in each of 61 layers.
    gqa = inference("llama-3.1-70b", precision="fp8")
    mha = inference("llama-3.1-70b", precision="fp8", kv_heads=64)
    assert gqa.kv_cache_bytes_per_token == 163_840 and mha.kv_cache_bytes_per_token == 8 * 163_840
    assert gqa.kv_cache_gib * 8 == pytest.approx(mha.kv_cache_gib)
    assert inference("deepseek-v3", precision="fp8").kv_cache_bytes_per_token == 61 * (512 + 64)


def test_plan_model_line_names_the_source(apsi) -> None:
    run = apsi("plan", "llama-3.1-405b", "--no-levers")
    assert run.code == 0, run.why()
    assert ("  Model       Llama 3.1 405B (preset): 126 layers x 16,384, FFN 53,248 SwiGLU, 128 heads / 8 KV, "
            "vocab 128,256; 405.85B parameters\n") in run.out
    run = apsi("plan", "70B", "--kv-heads", "8", "--no-levers")
    assert "  Model       70B (size; layers, width, heads, head_dim, ffn derived): 72 layers x 9,216, FFN 36,864 GELU, " \
           "72 heads / 8 KV, no vocabulary; 70.00B parameters\n" in run.out, run.why()


def test_models_lists_every_preset(apsi) -> None:
    rows = {r.key: r for r in models()}
    assert len(rows) >= 19 and rows["deepseek-v3"].mtp_params > 0
    run = apsi("models")
    assert run.code == 0 and "deepseek-v3      DeepSeek-V3" in run.out, run.why()
    assert apsi("models", "--json").out.startswith("[")


def test_flops_convention_default_and_option() -> None:
    # Presets default to causal (Megatron); --flops-convention full switches to PaLM's full s x s.
    causal = plan("llama-3.1-8b", tokens="100B", seq=8192)
    full = plan("llama-3.1-8b", tokens="100B", seq=8192, flops_convention="full")
    assert causal.model.flops_convention == "causal" and full.model.flops_convention == "full"
    # 32 layers x 3 s a d_h more: 32 * 3 * 8192 * 32 * 256.
    assert full.model_flops_per_token - causal.model_flops_per_token == 32 * 3 * 8192 * 32 * 256


def test_fields_at_the_rules_own_values_change_nothing() -> None:
    # --kv-heads equal to the heads, --mlp gelu, --vocab 0, --experts 0: the reference rule's own
    # values, so the size stays the count (the reference arithmetic's 70B: 72 x 9,216).
    for extra in (dict(kv_heads=72), dict(mlp="gelu", vocab=0, experts=0, tied=False)):
        m = resolve_model("70B", **extra)
        assert (m.source, m.params, m.notes) == ("size", 70e9, ())


def test_a_width_past_the_old_ffn_bound_still_plans() -> None:
    # Widths up to 10^7 were accepted before architectures; the rule's FFN is 4 x width.
    assert resolve_model("1T", width=3_000_000, heads=1).architecture.ffn == 12_000_000


def test_mtp_needs_a_full_architecture() -> None:
    with pytest.raises(ApsiError, match="^mtp_layers needs the architecture in full"):
        resolve_model("70B", mtp_layers=1)


def test_preset_names_ignore_punctuation() -> None:
    from apsi.presets import find_preset

    for name in ("llama-3.1-8b", "Llama 3.1 8B", "llama3.1-8b", "meta-llama/Llama-3.1-8B"):
        assert find_preset(name).key == "llama-3.1-8b"
