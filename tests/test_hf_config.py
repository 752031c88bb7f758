"""Tests for apsi.inputs.hf_config: Hugging Face config.json files read into architectures.

Owns the promise that a config.json written out by hand from a model's public config plans
exactly as the shipped preset does (tests/configs/ holds the Llama 3.1 70B, Mixtral 8x22B and
DeepSeek-V3 configs as published on huggingface.co, every field included), that each family's
fields map as transformers' modeling code builds the model, and that a bad file gets one line and
exit 2 naming the field.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from apsi import ApsiError, plan
from apsi.inputs.hf_config import architecture_from_config
from apsi.model.counting import count_parameters
from apsi.inputs.presets import find_preset, preset_architecture

CONFIGS = Path(__file__).resolve().parent / "configs"
OPTIONS = dict(tokens="1T", days=60)


def _without_source(p) -> dict:
    data = p.model_dump(mode="json")
    for key in ("name", "source", "origin"):
        data["model"].pop(key)
    data["serving"].pop("model_name")
    if data.get("serve") is not None:
        data["serve"].pop("model_name")
    return data


@pytest.mark.parametrize("key", ["llama-3.1-70b", "mixtral-8x22b", "deepseek-v3"])
def test_hand_written_config_plans_as_the_preset(key: str) -> None:
    path = CONFIGS / f"{key}.json"
    assert architecture_from_config(json.loads(path.read_text())) == preset_architecture(find_preset(key))
    from_file, from_preset = plan(str(path), **OPTIONS), plan(key, **OPTIONS)
    assert from_file.model.source == "config" and from_preset.model.source == "preset"
    assert _without_source(from_file) == _without_source(from_preset)


def test_a_folder_holding_config_json(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text((CONFIGS / "llama-3.1-70b.json").read_text())
    p = plan(str(tmp_path), **OPTIONS)
    assert p.model.origin == str(tmp_path / "config.json")
    assert p.model.params == 70_553_706_496  # meta-llama/Llama-3.1-70B: 70.55B (derived count, HFCFG)


def _write(tmp_path: Path, data, name: str = "config.json") -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def _llama(**changes) -> dict:
    data = json.loads((CONFIGS / "llama-3.1-70b.json").read_text())
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


@pytest.mark.parametrize(("data", "pattern"), [
    (_llama(hidden_size=None, hidden_sizes=8192), r"config .* has no hidden_size: a llama config needs it$"),
    (_llama(num_hidden_layers=None), r"has no num_hidden_layers"),
    # No nearest family is offered: gpt_oss was offered gpt_neox, and a config so relabelled plans
    # as 2.7B where gpt-oss-20b has 20.9B.
    (_llama(model_type="llamma"), r"model_type 'llamma' is not a family apsi reads; it reads llama, "),
    (_llama(model_type="gpt_oss"), r"model_type 'gpt_oss' is not a family apsi reads; it reads llama, [^?]*$"),
    ({"model_type": "gemma3", "text_config": {"model_type": "gemma3_text"}},
     r"model_type 'gemma3' is not a family apsi reads; its text_config is a gemma3_text config, which apsi reads: "
     r"give that part alone as the config \(the other towers left out\); it reads llama, "),
    (_llama(model_type=None), r"has no model_type: apsi reads the families llama, "),
    (_llama(num_hidden_layers="80"), r"num_hidden_layers must be a whole number >= 1, got '80'"),
    (_llama(tie_word_embeddings="no"), r"tie_word_embeddings must be true or false"),
    (_llama(num_key_value_heads=7), r"kv_heads 7 must divide heads 64"),
    ("{not json", r"is not JSON \(line 1: "),
    ("[1, 2]", r"holds a JSON list, not an object"),
])
def test_bad_configs_get_one_line(tmp_path: Path, apsi, data, pattern: str) -> None:
    path = _write(tmp_path, data)
    with pytest.raises(ApsiError, match=pattern):
        plan(path)
    run = apsi("plan", path)
    assert run.code == 2, run.why()
    assert run.out == "" and run.err.count("\n") == 1 and "Traceback" not in run.err, run.why()


def test_a_folder_without_config_json(tmp_path: Path, apsi) -> None:
    run = apsi("plan", str(tmp_path))
    assert run.code == 2, run.why()
    assert run.err == f"error: {tmp_path} has no config.json: give a Hugging Face model folder or its config.json\n"


def test_a_missing_file(apsi) -> None:
    run = apsi("plan", "llama3-70b.json")
    assert run.code == 2
    assert run.err.startswith("error: params 'llama3-70b.json': no such file or folder; give the path of a Hugging Face")


def test_qwen2_biases_and_gemma_ties() -> None:
    # Qwen2 puts biases on q, k and v (transformers Qwen2Attention: bias=True for q/k/v_proj):
    # a d_h + 2 g d_h per layer. Gemma ties the head (class default tie_word_embeddings=True) and
    # its MLP is gated GELU: three matrices.
    base = dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=2, num_attention_heads=8,
                num_key_value_heads=2, vocab_size=1000)
    qwen = count_parameters(architecture_from_config({"model_type": "qwen2", **base})).total
    llama = count_parameters(architecture_from_config({"model_type": "llama", **base})).total
    assert qwen.attention - llama.attention == 2 * (8 * 128 + 2 * 2 * 128)
    gemma = architecture_from_config({"model_type": "gemma", "head_dim": 128, **base})
    counted = count_parameters(gemma).total
    assert gemma.tied and counted.head == 0
    assert counted.mlp == 2 * 3 * 1024 * 4096


def test_gpt_neox_counts_like_pythia() -> None:
    # EleutherAI/pythia-160m config: 12 layers x 768, 12 heads, FFN 3072, vocab 50304, untied;
    # its safetensors hold 162,322,944 parameters (the HF model card: "160M", 162,322,944 total).
    data = dict(model_type="gpt_neox", hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                num_attention_heads=12, vocab_size=50304, tie_word_embeddings=False)
    assert count_parameters(architecture_from_config(data)).total.total == 162_322_944


def test_family_fallbacks_follow_transformers() -> None:
    # google/gemma-7b's config has head_dim 256; without it GemmaConfig's default 256 applies
    # (not 3072 / 16 = 192): 8,537,680,896 parameters (the model card's 8.54B).
    gemma = dict(model_type="gemma", hidden_size=3072, intermediate_size=24576, num_hidden_layers=28,
                 num_attention_heads=16, num_key_value_heads=16, vocab_size=256000)
    assert count_parameters(architecture_from_config(gemma)).total.total == 8_537_680_896
    # Qwen/Qwen1.5-MoE-A2.7B: 60 experts of 1,408, top-4, a gated shared expert of 5,632, q/k/v
    # biases: 14,315,784,192 parameters (the model card's 14.3B).
    qwen = dict(model_type="qwen2_moe", hidden_size=2048, intermediate_size=5632, num_hidden_layers=24,
                num_attention_heads=16, num_key_value_heads=16, vocab_size=151936, num_experts=60,
                num_experts_per_tok=4, moe_intermediate_size=1408, shared_expert_intermediate_size=5632)
    assert count_parameters(architecture_from_config(qwen)).total.total == 14_315_784_192
    # GPT-NeoX without attention biases (attention_bias false) drops 12 x (3 x 768 + 768).
    pythia = dict(model_type="gpt_neox", hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                  num_attention_heads=12, vocab_size=50304, tie_word_embeddings=False, attention_bias=False)
    assert count_parameters(architecture_from_config(pythia)).total.total == 162_322_944 - 12 * 4 * 768


def test_class_defaults_where_a_family_has_its_own(tmp_path: Path) -> None:
    # Where a config omits the field, transformers builds the class default (transformers 008e574,
    # configuration_<family>.py), not the generic fallback apsi had taken. Qwen/Qwen3-0.6B without
    # its head_dim: Qwen3Config(head_dim=128), not 1024 / 16 = 64, so 596,049,920 parameters as with
    # it (apsi read 507,965,952, its KV per token half).
    qwen3 = dict(model_type="qwen3", hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                 num_attention_heads=16, num_key_value_heads=8, vocab_size=151936, tie_word_embeddings=True)
    assert count_parameters(architecture_from_config(qwen3)).total.total == 596_049_920
    assert architecture_from_config(qwen3) == architecture_from_config(dict(qwen3, head_dim=128))
    # mistralai/Mistral-7B-v0.1 without num_key_value_heads and sliding_window: MistralConfig's 8
    # and 4096 (apsi read 32 KV heads, 8,047,038,464 parameters, and no window); a null is the query
    # heads (transformers' "backward compatibility") and no window.
    mistral = dict(model_type="mistral", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                   num_attention_heads=32, vocab_size=32000)
    got = architecture_from_config(mistral)
    assert (got.kv_heads, got.sliding_window, count_parameters(got).total.total) == (8, 4096, 7_241_732_096)
    nulls = architecture_from_config(dict(mistral, num_key_value_heads=None, sliding_window=None))
    assert (nulls.kv_heads, nulls.sliding_window) == (32, None)
    # Qwen2's window only under use_sliding_window, and only with a layer at or past max_window_layers
    # (Qwen2Config: 28 where omitted, so Qwen2.5-7B's 28 layers all attend in full).
    qwen2 = dict(model_type="qwen2", hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                 num_attention_heads=28, num_key_value_heads=4, vocab_size=152064)
    assert [architecture_from_config(dict(qwen2, **k)).sliding_window for k in
            ({}, {"use_sliding_window": True}, {"use_sliding_window": True, "max_window_layers": 0})] == [None, None, 4096]


def test_a_sliding_window_apsi_does_not_model_is_noted_in_serving(tmp_path: Path) -> None:
    # The training plan said so and serve() did not, though its KV cache is counted at full length
    # (Mistral 7B v0.1 at 8,000 + 1,000 tokens: twice its 4,096-token window's).
    from apsi import serve

    path = _write(tmp_path, dict(model_type="mistral", hidden_size=4096, intermediate_size=14336,
                                 num_hidden_layers=32, num_attention_heads=32, vocab_size=32000,
                                 max_position_embeddings=32768))
    note = ("the model's 4,096-token sliding-window attention is not modelled: each request's KV cache is counted at "
            "its full 9,000 tokens in every layer (an upper bound: an engine that frees the KV outside the window holds "
            "more requests) and its attention reads as full attention's")
    assert note in serve(path, isl=8000, rate=2).notes
    assert not any("sliding" in n for n in serve(path, isl=3000, rate=2).notes)


def test_a_scenario_reads_a_config_beside_it(tmp_path, monkeypatch) -> None:
    # Like catalog:, a relative config path in a scenario names the file beside the scenario.
    from apsi import run_scenarios

    (tmp_path / "m.json").write_text((CONFIGS / "llama-3.1-70b.json").read_text())
    (tmp_path / "s.yaml").write_text("runs:\n  - {name: a, params: m.json, tokens: 1T}\n")
    monkeypatch.chdir("/")
    (result,) = run_scenarios(tmp_path / "s.yaml", jobs=1)
    assert result.ok, result.error
    assert result.plan.model.params == 70_553_706_496
