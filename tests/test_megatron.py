"""Tests for apsi.training.frameworks.megatron and apsi.model.memory: Megatron's layout rules, its pipeline
splits, its state sharding and each stage's memory, and evaluate(framework="megatron").

Expected values are derived worked cases (the regression case of Megatron-Bridge's Llama 3.1
405B on 1,024 H100, MB-RECIPE; keys in docs/sources.md) and hand counts written beside them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from apsi import ApsiError, evaluate, plan
from apsi.errors import LayoutError
from apsi.training.frameworks import check_framework, megatron, stages
from apsi.model import memory as mem
from apsi.inputs.presets import find_preset, preset_architecture

GIB = 2**30
L405 = preset_architecture(find_preset("llama-3.1-405b"))
ROOT = Path(__file__).resolve().parents[1]


def test_405b_layer_activations_match_the_derived_count() -> None:
    # Derived (after KOR): s 8,192, b 1, t 8: [s b h (12 + 4 g/a) + 6 s b f + 4 s b a] / t = 533 MB
    # per layer; with CP 2 half of it, 266,600,448 bytes (254 MiB, the regression case below).
    assert mem.layer_activation_bytes(L405, False, 8192, 1, 8, "none") == pytest.approx(533.2e6, rel=1e-3)
    assert mem.layer_activation_bytes(L405, False, 4096, 1, 8, "none") == 266_600_448


def test_bridge_405b_stage_0_matches_the_regression_case() -> None:
    # MB-RECIPE's layout, derived: TP 8 PP 8 CP 2 VP 8, stage 0 = embedding + 15 layers: states 39.2 GiB
    # (bf16 + fp32 Adam, distributed optimizer over DP x CP = 16) and 133 layer-micro-batches of
    # 254 MiB = 33.1 GiB of activations.
    stages = megatron.memory(L405, tp=8, pp=8, cp=2, ep=1, etp=1, dp=8, vpp=8, micro_batch=1, seq=8192,
                             batch_sequences=1536, recompute="none", optimizer="adamw", precision="bf16")
    first = stages[0]
    assert (first["weights"] + first["gradients"] + first["optimizer"]) / GIB == pytest.approx(39.2, abs=0.1)
    assert first["activations"] / GIB == pytest.approx(33.1, abs=0.1)
    assert first["logits"] == 0 and stages[-1]["logits"] > 0


def test_in_flight_micro_batches() -> None:
    # 1F1B: rank r holds min(m, p - r); interleaved rank 0: p + (p - 1) / v (8 + 7/8 at p 8, v 8).
    assert mem.in_flight(0, 16, 1, 16) == 16 and mem.in_flight(1, 16, 1, 16) == 15 and mem.in_flight(0, 16, 1, 4) == 4
    assert mem.in_flight(0, 8, 8, 192) == pytest.approx(8 + 7 / 8)
    assert mem.in_flight(7, 8, 1, 192) == 1


@pytest.mark.parametrize(("layers", "pp", "vpp", "split"), [
    (126, 16, 1, (7,) + (8,) * 14 + (7,)),  # Llama 3's balanced split: one layer off the first and last
    (126, 8, 8, (15,) + (16,) * 6 + (15,)),  # Bridge's 405B: (126 + 2) / 8 = 16, 2 per virtual stage
    (96, 12, 1, (8,) * 12),  # Nemotron-4 340B: even
    (80, 8, 5, (10,) * 8),  # Bridge's 70B: VP 5
])
def test_pipeline_splits(layers: int, pp: int, vpp: int, split: tuple) -> None:
    assert megatron.rank_layers(megatron.split_layers(layers, pp, vpp), pp) == split


def test_deepseek_split_counts_the_mtp_block() -> None:
    # Bridge's DeepSeek-V3 layouts count the embedding, the MTP block and the loss as layers:
    # (61 + 3) / 8 = 8 per rank, 2 per virtual stage at VP 4: 7 | 8 x 6 | 6 + MTP.
    chunks = megatron.split_layers(61, 8, 4, mtp=1)
    assert len(chunks) == 32 and chunks[0] == 1 and chunks[-1] == 0
    assert megatron.rank_layers(chunks, 8) == (7,) + (8,) * 6 + (6,)


@pytest.mark.parametrize(("knobs", "pattern"), [
    (dict(tp=3), r"^tp 3 does not divide the 128 attention heads; valid: 1, 2, 4, 8"),
    (dict(tp=8, pp=16, vpp=5), r"^pp 16 with vpp 5 cannot split 126 layers: .*valid vpp: 1, 2, 3, 4, 6, 7, 8"),
    (dict(tp=8, cp=3), r"^cp 3 needs the sequence \(8,192\) divisible by 2 x cp = 6"),
    (dict(tp=8, ep=2), r"^ep 2 needs experts"),
    # The dispatcher and the EP overlap on a dense model were kept in framework_knobs and changed
    # nothing; they are refused as ep is.
    (dict(tp=8, dispatcher="flex"), r"^dispatcher flex needs experts: the model has none \(it sets how tokens reach "
                                    r"their experts\); leave it out$"),
    (dict(tp=8, ep_overlap=True), r"^ep_overlap needs experts: the model has none"),
    # With batch_tolerance 0 the batch stays exact (by default it would move to 2,049 = 683 x 3).
    (dict(tp=8, pp=1, dp=3, batch_tolerance=0),
     r"the batch of 2,048 sequences is no whole number of micro-batches of 1 on each of 3 data-parallel replicas "
     r"within the batch tolerance of 0%: the nearest is 2,049 sequences \(\+0.0%\)"),
    # A dp past the batch: the nearest whole batch is one sequence a replica (it cited Megatron's
    # divisibility rule, which dp 26 of 1,024 passes by moving the batch to 1,014 within 5%).
    (dict(tp=8, pp=1, dp=3000),
     r"the batch of 2,048 sequences is no whole number of micro-batches of 1 on each of 3,000 data-parallel "
     r"replicas within the batch tolerance of 5%: the nearest is 3,000 sequences \(\+46.5%\); give a dp nearer"),
])
def test_layout_rules_name_the_rule(knobs: dict, pattern: str) -> None:
    with pytest.raises(LayoutError, match=pattern):
        evaluate("llama-3.1-405b", framework="megatron", **{"dp": 1, **knobs}, seq=8192, batch=2048 * 8192,
                 tokens="1T")


def test_sequence_parallelism_needs_the_sequence_divisible_by_tp_x_cp() -> None:
    # MLM-SP: with sequence parallelism Megatron scatters each context-parallel rank's s / cp
    # tokens over tp (tensor_parallel/mappings.py _split_along_first_dim asserts "First dimension of
    # the tensor should be divisible by tensor parallel size"). Hand counts: 4,100 = 4 x 1,025, so
    # tp 4 divides it and tp 8 does not; with cp 2 each rank keeps 2,050 = 2 x 1,025 tokens, so
    # tp 2 still divides them and tp 4 no longer does.
    a = preset_architecture(find_preset("llama-3.1-8b"))
    layout = dict(pp=1, ep=1, etp=1, dp=1, vpp=1, micro_batch=1, batch_sequences=16)
    megatron.check_layout(a, tp=4, cp=1, seq=4100, **layout)
    megatron.check_layout(a, tp=2, cp=2, seq=4100, **layout)
    with pytest.raises(LayoutError, match=r"^tp 8 with sequence parallelism needs the sequence \(4,100\) divisible by "
                                          r"tp: .*\(MLM-SP, .*valid tp: 1, 2, 4, or sequence_parallel false$"):
        megatron.check_layout(a, tp=8, cp=1, seq=4100, **layout)
    with pytest.raises(LayoutError, match=r"^tp 4 with sequence parallelism needs the sequence \(4,100\) divisible by "
                                          r"tp x cp = 8: .*valid tp: 1, 2, or sequence_parallel false$"):
        megatron.check_layout(a, tp=4, cp=2, seq=4100, **layout)
    # Without sequence parallelism the tokens are not split over tp: the rule is not Megatron's then.
    megatron.check_layout(a, tp=8, cp=1, seq=4100, sequence_parallel=False, **layout)
    # An MoE layer refuses TP without sequence parallelism (MLM-MOE), so it is not offered there.
    moe = preset_architecture(find_preset("mixtral-8x7b"))
    with pytest.raises(LayoutError, match=r"^tp 8 with sequence parallelism .*valid tp: 1, 2, 4$"):
        megatron.check_pins(moe, 4100, dict(tp=8))
    assert megatron.cp_ok(4100, 1, 4) and not megatron.cp_ok(4100, 1, 8) and not megatron.cp_ok(4100, 2, 4)
    assert megatron.cp_ok(4097, 1, 1)  # cp 1 and no sequence split: any sequence (before: 2 cp halves at cp 1)


def test_the_search_never_takes_a_tp_the_sequence_forbids() -> None:
    # The pinned tp 8 at seq 4,100 is refused in one line naming the rule (as the CLI's
    # `apsi plan llama-3.1-8b --seq 4100 --tp 8`), and the search's plans keep s % (tp x cp) = 0:
    # Llama 3.1 405B at 4,100 took TP 8 before the rule (TP 8 x PP 9 x DP 108).
    with pytest.raises(ApsiError, match=r"^tp 8 with sequence parallelism needs the sequence \(4,100\)"):
        plan("llama-3.1-8b", seq=4100, tp=8)
    for preset in ("llama-3.1-8b", "llama-3.1-405b"):
        p = plan(preset, seq=4100)
        assert 4100 % (p.layout.tp * p.layout.cp) == 0, (preset, p.layout.tp, p.layout.cp)
    big = plan("llama-3.1-405b", seq=4100)
    assert big.layout.tp in (1, 2, 4)
    # sequence_parallel false lifts the rule: tp 8 at 4,100 is a Megatron layout again.
    p = evaluate("llama-3.1-8b", seq=4100, tp=8, dp=1, tokens="1B", sequence_parallel=False)
    assert p.layout.tp == 8 and not p.layout.sequence_parallel


def test_tp_beyond_kv_heads() -> None:
    # Megatron accepts tp % num_query_groups == 0 (KV heads replicated): Llama 3.1 8B has 8 KV heads
    # and 32 heads, so tp 16 is legal where the NVLink domain allows; tp 3 is not.
    a = preset_architecture(find_preset("llama-3.1-8b"))
    megatron.check_layout(a, tp=16, pp=1, cp=1, ep=1, etp=1, dp=1, vpp=1, micro_batch=1, seq=4096, batch_sequences=16)
    with pytest.raises(LayoutError, match="tp 3 does not divide the 32 attention heads"):
        megatron.check_layout(a, tp=3, pp=1, cp=1, ep=1, etp=1, dp=1, vpp=1, micro_batch=1, seq=4096,
                              batch_sequences=16)


def test_evaluate_megatron_plan() -> None:
    # Nemotron-4 340B's own layout (TP 8 PP 12 DP 64 on 6,144 H100, s 4,096, batch 2,304) fits.
    p = evaluate("nemotron-4-340b", framework="megatron", tp=8, pp=12, dp=64, seq=4096, batch=2304 * 4096,
                 tokens="9T")
    assert p.framework == "megatron" and p.gpus == 6144 and p.fits
    # Its 96 layers over 12 stages: the even split, or the uneven first and last stages Megatron
    # allows (--decoder-first/last-pipeline-num-layers) where the output head's 256,000-token GEMM
    # (28 GFLOPs a token, a layer's 21) makes the even split's last stage the slowest.
    assert sum(p.layout.stage_layers) == 96 and len(p.layout.stage_layers) == 12 and p.layout.sequence_parallel
    assert p.layout.stage_layers[-1] <= min(p.layout.stage_layers[1:-1])
    assert p.memory.total_gib == pytest.approx(max(p.memory.stages_gib))
    parts = (p.memory.weights_gib + p.memory.gradients_gib + p.memory.optimizer_gib + p.memory.activations_gib
             + p.memory.logits_gib + p.memory.reserve_gib)
    assert parts == pytest.approx(p.memory.total_gib)
    # At a given flat MFU the 1F1B bubble stretches the FLOPs' time by 1 + (p - 1) / m with m = 2,304 / 64
    # = 36 micro-batches (Narayanan et al. 2021 Sec. 2.2).
    q = evaluate("nemotron-4-340b", framework="megatron", tp=8, pp=12, dp=64, seq=4096, batch=2304 * 4096,
                 tokens="9T", mfu=0.4)
    flat = q.total_flops / (6144 * q.peak_tflops * 1e12 * 0.4) / 86_400
    assert q.days == pytest.approx(flat * (1 + 11 / 36), rel=1e-12) and q.time is None
    # Under the step-time model the days are the steps x the step, its parts adding up to it.
    t = p.time
    assert p.days * 86_400 == pytest.approx(p.steps * p.step_seconds + p.failure_days * 86_400, rel=1e-12)
    assert t.step_seconds == pytest.approx(p.step_seconds, rel=1e-12)
    assert (t.compute_seconds + t.tp_seconds + t.cp_seconds + t.ep_seconds + t.bubble_seconds + t.pp_seconds
            + t.dp_seconds + t.optimizer_seconds) == pytest.approx(t.step_seconds, rel=1e-12)


def test_reference_has_no_framework_knobs() -> None:
    with pytest.raises(ApsiError, match="^cp is a framework knob the reference arithmetic does not have"):
        evaluate("70B", framework="reference", tp=8, pp=1, dp=26, recompute="none", cp=2)
    with pytest.raises(ApsiError, match=r"^unknown framework 'megatorn': did you mean megatron\?"):
        check_framework("megatorn")


def test_validation_doc_is_current() -> None:
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "validation.py"), "--check"], capture_output=True)
    assert run.returncode == 0, "docs/validation.md is stale: run python benchmarks/validation.py"


def test_interleaved_schedule_needs_whole_groups_of_micro_batches() -> None:
    # MLM-SCHED: with vpp > 1, microbatch_group_size_per_vp_stage = pp must divide the micro-batches
    # per replica (and m >= pp): 2,048 / 256 = 8 is fine at pp 8; 1,024 / 256 = 4 is not.
    evaluate("llama-3.1-405b", framework="megatron", tp=8, pp=8, vpp=8, dp=256, seq=8192, batch=2048 * 8192,
             tokens="15.6T")
    with pytest.raises(LayoutError, match=r"^the interleaved schedule \(vpp 8\) needs the micro-batches per replica "
                                          r"\(4\) to be a multiple of pp 8"):
        evaluate("llama-3.1-405b", framework="megatron", tp=8, pp=8, vpp=8, dp=256, seq=8192, batch=1024 * 8192,
                 tokens="15.6T")


def test_interleaved_ranks_hold_round_robin_layers() -> None:
    # Megatron's virtual stage j runs on rank j % pp: Bridge's DeepSeek-V3 (PP 8, VP 4, 2 layers per
    # virtual stage with the embedding first and MTP + loss last) puts layers {0, 15, 16, 31, 32, 47,
    # 48} on rank 0, of which only layer 0 is dense (first_k_dense_replace 3).
    a = preset_architecture(find_preset("deepseek-v3"))
    ranks = stages.placement(a, megatron.split_layers(61, 8, 4, mtp=1), 8)
    assert (ranks[0].layers, ranks[0].moe_layers) == (7, 6)
    assert (ranks[1].layers, ranks[1].moe_layers) == (8, 6)  # layers 1, 2 dense


def test_uneven_splits_are_among_the_choices() -> None:
    # --decoder-first/last-pipeline-num-layers 6 with 32 layers on 4 stages: 6 | 10 | 10 | 6.
    options = [megatron.rank_layers(x, 4) for x in megatron.splits(32, 4, 1)]
    assert (8, 8, 8, 8) == options[0] and (6, 10, 10, 6) in options


def test_expert_tensor_parallelism() -> None:
    # MLM-PR4687's unit test layout: world 64 = TP 2 x PP 2 x DP 16, EP 2, ETP 4 (EDP 4) is legal;
    # Megatron's default ETP is TP.
    p = evaluate("mixtral-8x7b", framework="megatron", tp=2, pp=2, ep=2, etp=4, dp=16, batch=64 * 4096, tokens="1T")
    assert (p.layout.etp, p.gpus) == (4, 64)
    assert evaluate("mixtral-8x7b", framework="megatron", tp=8, ep=8, dp=8, batch=64 * 4096,
                    tokens="1T").layout.etp == 8


def test_the_mtp_stage_holds_an_embedding() -> None:
    # Megatron builds an embedding where mtp_process (the last stage) as well as on the first:
    # DeepSeek-V3 at PP 2 keeps a second 129,280 x 7,168 / 8 table (padded to 129,280) on stage 1.
    a = preset_architecture(find_preset("deepseek-v3"))
    no_mtp = a.model_copy(update={"mtp_layers": 0})
    layout = dict(tp=8, pp=2, cp=1, ep=8, etp=1, dp=8, vpp=1, micro_batch=1, seq=4096, batch_sequences=64,
                  recompute="full", optimizer="adamw", precision="bf16")
    with_block = megatron.memory(a, **layout)[-1]["weights"]
    split = megatron.split_layers(61, 2, 1, mtp=1)
    without = megatron.memory(no_mtp, split=split, **layout)[-1]["weights"]
    table = megatron.padded_vocab(129_280, 8) * 7168 / 8
    assert with_block - without > 2 * table


def test_recompute_modules_and_precision_knobs() -> None:
    # Bridge's DeepSeek-V3 H100 recipe recomputes mla_up_proj and mlp: MLA's per-head Q, K, V and
    # the dense MLPs' insides are not stored, FLOPs rise by the recomputed matrices.
    knobs = dict(framework="megatron", tp=2, pp=8, vpp=2, ep=64, etp=1, dp=64, seq=4096, batch=16384 * 4096,
                 tokens="14.8T", precision="fp8")
    plain = evaluate("deepseek-v3", **knobs)
    light = evaluate("deepseek-v3", recompute="selective", recompute_modules=["mla_up_proj", "mlp"], **knobs)
    assert light.memory.activations_gib < plain.memory.activations_gib
    assert light.layout.recompute_modules == ["mla_up_proj", "mlp"]
    # mlp is the dense MLP only (the 3 dense layers; the MoE block is the module moe): 2 x their
    # weights, plus 2 x the up-projections of the 61 layers and the MTP block.
    parts = light.model.active_parts
    a = preset_architecture(find_preset("deepseek-v3"))
    up = a.q_lora_rank * 128 * 192 + a.kv_lora_rank * 128 * 256
    extra = 2 * parts.mlp + 2 * 62 * up
    assert light.total_flops - plain.total_flops == pytest.approx(extra * 14.8e12, rel=1e-9)
    # --fp8-param-gather drops the linear weights' bf16 copy; --grad-reduce-in-bf16 halves the grads.
    bf16_grads = evaluate("llama-3.1-8b", framework="megatron", tp=1, dp=8, tokens="1T", grad_dtype="bf16")
    fp32_grads = evaluate("llama-3.1-8b", framework="megatron", tp=1, dp=8, tokens="1T")
    assert bf16_grads.memory.gradients_gib == pytest.approx(fp32_grads.memory.gradients_gib / 2)
    gather = evaluate("llama-3.1-8b", framework="megatron", tp=1, dp=8, tokens="1T", precision="fp8",
                      fp8_param_gather=True)
    copies = evaluate("llama-3.1-8b", framework="megatron", tp=1, dp=8, tokens="1T", precision="fp8")
    assert gather.memory.weights_gib < copies.memory.weights_gib
    with pytest.raises(ApsiError, match="recompute_modules go with recompute='selective'"):
        evaluate("llama-3.1-8b", framework="megatron", tp=1, dp=8, tokens="1T", recompute="full",
                 recompute_modules=["mlp"])
    with pytest.raises(ApsiError, match="^unknown recompute module 'attn'"):
        evaluate("llama-3.1-8b", framework="megatron", tp=1, dp=8, tokens="1T", recompute="selective",
                 recompute_modules="attn")
    # A size, bare or with other fields, is planned as its shape-rule architecture under a framework
    # (apsi.inputs.modelspec.placed, counted), which has the parts the mlp module re-runs. (A size
    # with fields kept the size as its count, without parts, and was refused here.)
    for fields in ({}, {"kv_heads": 8}):
        p = evaluate("70B", framework="megatron", tp=8, dp=8, tokens="1T", recompute="selective",
                     recompute_modules="mlp", **fields)
        assert p.model.active_parts is not None and p.model.active_parts.mlp > 0


def test_bf16_moments_shard_eight_bytes() -> None:
    # The precision-aware optimizer's bf16 moments (--exp-avg-dtype/--exp-avg-sq-dtype bf16): the
    # distributed optimizer shards fp32 master 4 + moments 2 + 2 = 8 B instead of 12 (derived from
    # MLM-DOPT; DeepSeek-V3 trained so, DSV3 3.3.1).
    fp32 = evaluate("llama-3.1-8b", framework="megatron", tp=1, dp=8, tokens="1T")
    bf16 = evaluate("llama-3.1-8b", framework="megatron", tp=1, dp=8, tokens="1T", moments_dtype="bf16")
    assert bf16.memory.optimizer_gib == pytest.approx(fp32.memory.optimizer_gib * 8 / 12, rel=1e-12)
    assert bf16.memory.weights_gib == fp32.memory.weights_gib
    with pytest.raises(ApsiError, match="^moments_dtype bf16 needs optimizer adamw"):
        evaluate("llama-3.1-8b", framework="megatron", tp=1, dp=8, tokens="1T", moments_dtype="bf16",
                 optimizer="adam8bit")
    # Megatron's precision-aware optimizer (its bf16 moments) asserts the distributed optimizer
    # (MLM-OPT OptimizerConfig.__post_init__): no such layout without it.
    with pytest.raises(ApsiError, match="^moments_dtype bf16 runs under Megatron only with the distributed optimizer"):
        evaluate("llama-3.1-8b", framework="megatron", tp=1, dp=8, tokens="1T", moments_dtype="bf16", zero=0)


QWEN3_MOE = preset_architecture(find_preset("qwen3-30b-a3b"))
DSV3 = preset_architecture(find_preset("deepseek-v3"))


def test_a_qk_norm_keeps_its_input() -> None:
    # Qwen3's q_layernorm / k_layernorm (TENorm, MLM attention.py) keep the pre-norm Q and K for
    # their backward: 2 bytes x s (a + g) d_h = 2 x 4,096 x (32 + 4) x 128 at s 4,096, tp 1.
    plain = QWEN3_MOE.model_copy(update={"qk_norm": "none"})
    extra = mem.attention_activation_bytes(QWEN3_MOE, 4096, 1, 1, "none") - \
        mem.attention_activation_bytes(plain, 4096, 1, 1, "none")
    assert extra == 2 * 4096 * (32 + 4) * 128


def test_the_router_keeps_the_norm_output_unless_layernorm_is_recomputed() -> None:
    # RouterGatingLinearFunction saves its input, the pre-MLP norm's output (MLM moe_utils.py):
    # 2 bytes x s h = 2 x 4,096 x 2,048 for Qwen3-30B-A3B (no shared expert to share it with);
    # the layernorm module discards it and recomputes it.
    kept = mem.moe_activation_bytes(QWEN3_MOE, 4096, 1, 1)
    assert kept - mem.moe_activation_bytes(QWEN3_MOE, 4096, 1, 1, dropped=frozenset({"layernorm"})) == 2 * 4096 * 2048


def test_mla_attention_per_token_by_hand() -> None:
    # DeepSeek-V3, one token, tp 1, nothing recomputed (bytes): norm input and the down-projection
    # input 2 h each (h 7,168); per-head Q 2 x 128 x 192; O 2 x 128 x 128; latents q_r 1,536 and
    # kv_r 512 + rope 64, and the two up-projections' normed copies (TE LayerNormLinear) 1,536 +
    # 512, 2 bytes each; the fp32 log-sum-exp 4 x 128; per-head K and V 2 x 128 x (192 + 128).
    by_hand = (2 * 7168 * 2 + 2 * 128 * 192 + 2 * 128 * 128 + 2 * (1536 + 512 + 64 + 1536 + 512) + 4 * 128
               + 2 * 128 * (192 + 128))
    assert mem.attention_activation_bytes(DSV3, 1, 1, 1, "none") == by_hand == 201_344


def test_plan_refuses_expert_settings_on_a_dense_model_and_keeps_them_on_moe() -> None:
    from apsi import plan

    with pytest.raises(LayoutError, match=r"^dispatcher flex needs experts"):
        plan("llama-3.1-8b", tokens="1T", dispatcher="flex")
    assert plan("qwen3-30b-a3b", tokens="1T", dispatcher="flex").framework_knobs["dispatcher"] == "flex"


def test_the_cp_floor_is_said_where_it_binds() -> None:
    # An unpinned cp keeps MIN_CP_CHUNK (4,096) tokens per rank (apsi.training.frameworks.space): at
    # 4,096-token sequences no cp is searched. Llama 3.1 405B on 15T tokens then misses 90 days at
    # any GPU count the batch allows, where a pinned cp 2 meets it: the Solver line names the floor
    # and a Note says cp was not searched, so "proved optimal" is read over the layouts walked.
    from apsi.outputs.text import plan_text

    free = plan("llama-3.1-405b", tokens="15T")
    assert not free.target_met and free.layout.cp == 1
    assert any(n.startswith("context parallelism was not searched: at 4,096-token sequences cp 2 leaves each rank "
                            "2,048 tokens") for n in free.notes)
    assert "with context-parallel ranks of 4,096 tokens or more (a pinned cp may go below)" in plan_text(free)
    pinned = plan("llama-3.1-405b", tokens="15T", cp=2)
    assert pinned.target_met and pinned.days < free.days
    assert not any(n.startswith("context parallelism was not searched") for n in pinned.notes)
    # At 8,192-token sequences cp 2 is searched (4,096 per rank): no such Note.
    assert not any("not searched" in n for n in plan("llama-3.1-405b", tokens="15T", seq=8192, batch="16M").notes)
