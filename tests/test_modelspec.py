"""Tests for apsi.inputs.modelspec: which model a run plans, from a size, a preset or a config, and options.

Owns the four cases of the module docstring: a bare size keeps the reference shape rule (the
reference's own numbers, checked against the reference arithmetic's default shapes), a size with fields says
which were derived, a size with a full architecture uses the architecture's count and says when
the size disagrees, and a preset takes overrides field by field. Also the `active` check and
the plan's Model line.
"""

from __future__ import annotations

import pytest

from apsi import ApsiError, evaluate, inference, models, plan
from apsi.inputs.modelspec import resolve_model
from apsi.model.counting import count_parameters


def test_bare_size_is_the_reference_shape_rule() -> None:
    # The reference arithmetic's default shapes: 70B -> 72 layers x 9,216 (d = 128 L), 72 heads, FFN 4 d, no
    # vocabulary; the size itself is the count and the 6 N of the FLOPs.
    m = resolve_model("70B")
    a = m.architecture
    assert (a.layers, a.width, a.heads, a.kv_heads, a.ffn, a.vocab) == (72, 9216, 72, 72, 4 * 9216, 0)
    assert (m.source, m.params, m.active, m.matmul_active, m.flops_convention) == ("size", 70e9, 70e9, 70e9, "full")
    assert m.derived == ("layers", "width", "heads") and m.notes == () and m.parts is None


def test_size_with_fields_keeps_the_size_and_says_what_was_derived() -> None:
    # 8 KV heads take 72 x 2 x 9,216 x (9,216 - 1,024) parameters off the rule's 73.38B: past 5%
    # from the size (RULE_ROUNDING), so the FFN is sized to count it: 72 x (2 d^2 + 2 d x 1,024 +
    # 2 d f) = 70e9 at d = 9,216 gives f = 42,506.4, a multiple of 128 (counting.FFN_MULTIPLE: TP
    # splits it) nearest: 42,496.
    m = resolve_model("70B", kv_heads=8)
    d = 9216
    assert (m.source, m.params, m.architecture.kv_heads, m.architecture.layers) == ("shape", 70e9, 8, 72)
    assert m.architecture.ffn == 128 * round((70e9 / 72 - 2 * d * d - 2 * d * 1024) / (2 * d) / 128) == 42_496
    assert m.derived == ("layers", "width", "heads", "head_dim", "ffn")
    assert m.notes == ("derived from 70B by the reference shape rule: 72 layers, width 9,216, 72 heads, head_dim 128, "
                       "FFN 42,496 (the FFN sized so the architecture counts 70B)",)
    # A field that moves the count less than the rule's own rounding keeps the rule's FFN of 4 d.
    assert resolve_model("70B", tied=True).architecture.ffn == 4 * d


def test_a_size_with_fields_is_one_model_under_a_framework() -> None:
    # The plan counted the size (70B) for FLOPs, days and cost while its memory and export placed the
    # architecture the fields made: 97.84B under SwiGLU at FFN 4 d. Now the FFN is sized to the
    # size, and a framework plans the architecture's own count for both.
    p = evaluate("70B", framework="megatron", tp=8, pp=2, dp=8, tokens="1T", mlp="swiglu")
    counted = count_parameters(p.model.architecture).total.total
    assert p.model.params == counted == pytest.approx(70e9, rel=2e-3)  # FFN a multiple of 128: 80 x 3 x 8,192 x 64 at most off
    # Top-4 of 64 experts: the 968B the skipped experts hold make each expert 13,398 wide, and a
    # token's 4 of them 76B active, not 32B.
    with pytest.raises(ApsiError, match=r"^1T \(32B active\) with mlp swiglu, experts 64, top_k 4: the architecture "
                                        r"the shape rule derives counts 1,044.05B \(76.07B active\), more than 10% "
                                        r"from the size"):
        evaluate("1T", active="32B", experts=64, top_k=4, mlp="swiglu", framework="megatron", tokens="1T")
    with pytest.raises(ApsiError, match=r"^70B \(69B active\) as a bare MoE size: top-8 routing over 16 experts, the "
                                        r"fewest that hold its active size, counts 122.32B \(73.39B active\), more than 10% from it"):
        evaluate("70B", active="69B", framework="megatron", tokens="1T", tp=8, pp=2, dp=8)


def test_a_bare_size_is_planned_at_its_size_under_a_framework() -> None:
    # The reference shape rule's steps (whole layers, a width of whole heads) count 9B as
    # 32 x 4,096 at FFN 4 d: 12 x 32 x 4,096^2 = 6.44B, which Megatron planned while the reference
    # arithmetic planned 9B. The FFN is sized so the architecture counts the size: 32 layers of
    # 4 d^2 + 2 d f = 9B give f = (9e9 / 32 - 4 x 4,096^2) / (2 x 4,096) = 26,140, a multiple of 128
    # (counting.FFN_MULTIPLE, so that TP splits it) nearest: 26,112.
    p = plan("9B", tokens="1T")
    a = p.model.architecture
    assert (a.layers, a.width, a.ffn) == (32, 4096, 26112)
    assert p.model.params == count_parameters(a).total.total == pytest.approx(9e9, rel=1e-3)
    assert any("FFN sized to 26,112 wide, not the rule's 4 d of 16,384" in n for n in p.notes)
    # Within the rule's own rounding (5%) the rule's architecture stays: 70B counts 73.38B.
    assert plan("70B", tokens="1T").model.params == 73_383_542_784
    # A bare MoE size: its active part sized, then the experts placed (top-8 routing): 17B of 400B
    # was 21.8B active (+28%) from the rule's 40 x 6,144.
    m = plan("400B", active="17B", tokens="1T").model
    assert m.active_params == pytest.approx(17e9, rel=0.01) and m.params == pytest.approx(400e9, rel=0.01)
    # Below some 100M the width is solved first, the heads kept (given or the rule's): 20M is the
    # rule's 8 layers x 1,024 (8 heads), whose attention alone holds 33.6M; at 512 wide with 8 heads
    # of 64 its FFN counts the size (--heads 8 and --kv-heads 8 were once made 4).
    for fields in ({}, {"heads": 8}, {"kv_heads": 8}):
        a = plan("20M", tokens="1B", **fields).model.architecture
        assert (a.layers, a.width, a.heads, a.kv_heads, a.head_dim) == (8, 512, 8, 8, 64), fields
    # A size no FFN width brings within 10% (1 parameter: one layer 128 wide counts 0.1M with no
    # FFN), and a sparsity whose router alone passes it, are refused.
    with pytest.raises(ApsiError, match=r"^1 as a bare size: the shape rule's architecture, 1 layer x 128 wide, counts "
                                        r"0.1M at any FFN width, more than 10% from 1; give layers and width"):
        plan("1", tokens="1T")
    with pytest.raises(ApsiError, match=r"^1T \(1B active\) as a bare MoE size: top-8 routing over 10,960 experts"):
        plan("1T", active="1B", tokens="1T")


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
    # 1T total, 32B active, 384 experts of which 8 are routed: the 376 skipped experts in each of the
    # 56 layers hold 968B, so each expert's SwiGLU is 968e9 / (376 * 56 * 3 * 7168) = 2,138 wide,
    # and a token's 8 of them with the attention (4 d^2) use 56 x (4 x 7168^2 + 8 x 3 x 7168 x 2,138)
    # = 32.1B. (Top-4 of 64 experts cannot be 32B active of 1T: a sixteenth of 968B is past it.)
    m = resolve_model("1T", active="32B", experts=384, top_k=8, mlp="swiglu")
    assert m.architecture.expert_ffn == round(968e9 / (376 * 56 * 3 * 7168)) == 2138
    assert "expert_ffn" in m.derived and m.params == 10**12
    assert count_parameters(m.architecture).active.total == pytest.approx(32e9, rel=0.01)


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
    assert "  Model       70B (size; layers, width, heads, head_dim, ffn derived): 72 layers x 9,216, FFN 42,496 GELU, " \
           "72 heads / 8 KV, no vocabulary; 69.99B parameters\n" in run.out, run.why()


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
    from apsi.inputs.presets import find_preset

    for name in ("llama-3.1-8b", "Llama 3.1 8B", "llama3.1-8b", "meta-llama/Llama-3.1-8B"):
        assert find_preset(name).key == "llama-3.1-8b"


def _attention_flops(p) -> float:
    """The attention core's FLOPs of a run under the full convention a size keeps: 12 s d per
    layer and token, forward and backward (PaLM App. B's 12 L H Q T; the reference's 12 L d s)."""
    a = p.model.architecture
    return 12 * a.layers * p.seq * a.heads * a.head_dim * p.tokens


def test_a_bare_size_under_a_framework_is_its_shape_rule_architecture_at_the_size() -> None:
    # 120B and 200B have different shape-rule architectures (88 x 11,264 and 104 x 13,312, 12 L d^2
    # parameters at FFN 4 d: Kaplan et al. 2020, Eq. 2.1, which count 134.0B and 221.1B); each FFN
    # is sized so the architecture counts the size (L (4 d^2 + 2 d f) = N), so the same layout holds
    # different memory, and the FLOPs are 6 N T of that count N (count_parameters) plus the
    # attention core (Narayanan et al. 2021, Eq. 3 without the vocabulary).
    from apsi import evaluate
    from apsi.fmt import billions
    from apsi.model.counting import count_parameters

    runs = {size: evaluate(size, tp=8, pp=8, dp=8, tokens="2T") for size in ("120B", "200B")}
    for size, p in runs.items():
        a = p.model.architecture
        n = count_parameters(a).total.total
        assert n == a.layers * (4 * a.width**2 + 2 * a.width * a.ffn) and a.ffn != 4 * a.width
        assert n == pytest.approx(float(size[:-1]) * 1e9, rel=1e-3) and a.ffn % 128 == 0
        assert (p.model.params, p.model.active_params, p.model.source) == (n, n, "size")
        assert p.total_flops == pytest.approx(6 * n * p.tokens + _attention_flops(p), rel=1e-9)
        assert (f"{size} given; the shape rule's architecture (its FFN sized to {a.ffn:,} wide, not the rule's 4 d "
                f"of {4 * a.width:,}, to count the size) has {billions(n)} parameters, used for memory and FLOPs") \
            in p.notes
    small, large = runs["120B"].memory, runs["200B"].memory
    assert small.weights_gib < large.weights_gib and small.total_gib < large.total_gib
    assert small.model_states_total_gib / large.model_states_total_gib == pytest.approx(
        runs["120B"].model.params / runs["200B"].model.params, rel=1e-9)


def test_bare_sizes_sharing_a_shape_rule_shape_are_each_their_size() -> None:
    # 120B and 150B both round to 88 layers x 11,264 (default_layers: the multiple of 8 nearest the
    # cube root of N / (12 x 128^2), 84.8 and 91.4), whose FFN 4 d counts 134.0B: they were planned
    # as one model. Each FFN is sized to its size now, so the FLOPs are 6 N T of each N.
    one, two = plan("120B", tokens="2T"), plan("150B", tokens="2T")
    a, b = one.model.architecture, two.model.architecture
    assert (a.layers, a.width) == (b.layers, b.width) == (88, 11264) and a.ffn < 4 * a.width < b.ffn
    assert one.model.params == pytest.approx(120e9, rel=1e-3) and two.model.params == pytest.approx(150e9, rel=1e-3)
    assert one.model_flops_per_token * one.tokens == pytest.approx(
        6 * one.model.params * one.tokens + _attention_flops(one), rel=1e-9)
    assert any(n.startswith("120B given;") for n in one.notes) and any(n.startswith("150B given;") for n in two.notes)


def test_a_bare_moe_size_is_counted_with_its_experts_placed() -> None:
    # The placed architecture (apsi.training.frameworks.evaluate.placeable) is the count: total, active and
    # the matrix weights behind the FLOPs' 6 N (count_parameters' matmul_active).
    from apsi.model.counting import count_parameters

    p = plan("1T", active="32B", tokens="15T", precision="fp8")
    counts = count_parameters(p.model.architecture)
    assert p.model.architecture.moe and (p.model.params, p.model.active_params) == (counts.total.total,
                                                                                      counts.active.total)
    assert p.model_flops_per_token * p.tokens == pytest.approx(
        6 * counts.matmul_active * p.tokens + _attention_flops(p), rel=1e-9)
    # Its active layers count 34.67B at the rule's FFN, within 10%: kept (modelspec.placed).
    assert any(n.startswith("1T (32B active) given; the shape rule's architecture (the experts placed) has "
                            "1,001.44B parameters (34.67B active)") for n in p.notes)


def test_the_reference_arithmetic_keeps_a_bare_size() -> None:
    # The reference's own numbers (tests/test_golden.py pins its whole output): the size is the
    # count and the 6 N of the FLOPs, with no Note on the shape rule's count.
    p = plan("120B", tokens="2T", framework="reference")
    assert p.model.params == 120e9
    # Model FLOPs (the plan's own recomputation aside): 6 N per token of the size, plus attention.
    assert p.model_flops_per_token * p.tokens == pytest.approx(6 * 120e9 * p.tokens + _attention_flops(p), rel=1e-9)
    assert not any("shape rule's architecture" in n for n in p.notes)


def test_every_preset_knows_its_context() -> None:
    # Each preset's config.json max_position_embeddings (GPT-3: n_positions, 2,048 in Brown et al.
    # 2020 Table 2.1), so that a serving launch never asks an engine for more (apsi.outputs.export.engines).
    from apsi.inputs.presets import presets

    for key, preset in presets().items():
        context = resolve_model(key).context_tokens
        assert context == preset.config.get("max_position_embeddings", preset.config.get("n_positions")), key
        assert context is not None and context >= 2048, key
    assert resolve_model("llama-3.1-8b").context_tokens == 131_072
    assert resolve_model("70B").context_tokens is None  # a size has no config


def test_a_config_given_as_a_mapping_is_told_to_be_a_file() -> None:
    # A config's contents (AutoConfig(...).to_dict()) passed as params was told "is not a size: give
    # a number such as 70B or 7e10", naming neither the preset nor the config.json a model takes.
    import json
    from pathlib import Path

    from apsi import plan, serve

    config = json.loads((Path(__file__).parent / "configs" / "llama-3.1-70b.json").read_text())
    for ask in (plan, serve):
        with pytest.raises(ApsiError, match=r"^params is a mapping \(<a dict of 24 items>\), not a size, a preset or a config\.json's "
                                            r"path: write the config to a config\.json \(json\.dump\) and give its path"):
            ask(config)
