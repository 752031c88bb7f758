"""Tests for apsi.training.frameworks.recompute: the recomputations the walk proves its answer over.

The sets come from Megatron's --recompute-modules (MLM-TC recompute_modules; MLM-MOE
"Fine-grained Recomputation"): every set of the modules that apply to the architecture, the
output-discarding layernorm and moe_act added only where a layout needs them to fit. The published
DeepSeek-V3 layout (DSV3 §3.2.3: recompute every RMSNorm and the MLA up-projections) must be
planned with a recomputation at least as good as that set.
"""

from __future__ import annotations

import pytest

from apsi import ApsiError, evaluate, plan
from apsi.training.frameworks import framework_module
from apsi.training.frameworks.recompute import FREE, of
from apsi.inputs.question import resolve

DSV3_PUBLISHED = dict(tokens="14.8T", precision="fp8", gpus=2048, tp=1, pp=16, ep=64, seq=4096, batch=62_914_560)
"""DeepSeek-V3's published layout on 2,048 GPUs (DSV3 §3.2: TP 1, PP 16, EP 64, 4K sequences, a
15,360-sequence batch, FP8)."""


def _options(params: str, framework: str = "megatron", **pins):
    return of(framework_module(framework), resolve(params=params, tokens="1T"), pins)


def test_the_sets_are_every_combination_of_the_modules_that_apply() -> None:
    # DeepSeek-V3 (MLA, MoE with 3 dense layers): core_attn, mla_up_proj, mlp and moe re-run matrix
    # work: 2^4 = 16 sets with none, then full; layernorm and moe_act ride as variants.
    options = _options("deepseek-v3")
    assert len(options) == 17
    assert options[0].level == "none" and options[-1].level == "full"
    heavy = [o.modules for o in options[1:-1]]
    assert len(set(heavy)) == 15 and all(not set(m) & set(FREE) for m in heavy)
    # Each has every set of the free modules as a variant (moe_act not beside moe): 4 or 2.
    for o in options[:-1]:
        assert len(o.variants) == (2 if "moe" in o.modules else 4)
        assert o.heaviest[1][-1:] != ("moe_act",) or "moe" not in o.modules
    # A dense GQA model: core_attn and mlp re-run work, layernorm rides: 4 options and full.
    dense = _options("llama-3.1-70b")
    assert [o.modules for o in dense] == [(), ("core_attn",), ("mlp",), ("core_attn", "mlp"), ()]
    assert dense[0].variants == (("none", ()), ("selective", ("layernorm",)))


def test_pins_keep_their_options() -> None:
    assert [o.level for o in _options("llama-3.1-70b", recompute="none")] == ["none"]
    assert _options("llama-3.1-70b", recompute="none")[0].variants == (("none", ()),)
    assert [o.level for o in _options("llama-3.1-70b", recompute="full")] == ["full"]
    selective = _options("llama-3.1-70b", recompute="selective")
    assert all(v[0] == "selective" for o in selective for v in o.variants)
    pinned = _options("llama-3.1-70b", recompute="selective", recompute_modules=("core_attn", "layernorm"))
    assert [o.variants for o in pinned] == [(("selective", ("core_attn", "layernorm")),)]
    # Frameworks without --recompute-modules: their selective level alone.
    assert [o.level for o in _options("llama-3.1-70b", "torchtitan")] == ["none", "selective", "full"]
    assert [o.level for o in _options("llama-3.1-70b", "deepspeed")] == ["none", "selective", "full"]


def test_a_bare_size_has_no_parts_for_mlp_and_moe() -> None:
    # mlp and moe need the model's parts (apsi.model.arithmetic.flops_per_token): a bare size
    # searches core_attn alone among the modules that re-run work.
    assert [o.modules for o in _options("70B")] == [(), ("core_attn",), ()]


def test_deepseek_v3_published_layout_recomputes_no_worse_than_its_own_set() -> None:
    # The question: the search must choose a recomputation at least as good as the
    # modules DeepSeek-V3 recomputes (RMSNorms and MLA up-projections), which is in its space.
    chosen = plan("deepseek-v3", framework="megatron", **DSV3_PUBLISHED)
    named = plan("deepseek-v3", framework="megatron", recompute="selective",
                 recompute_modules="layernorm,mla_up_proj", **DSV3_PUBLISHED)
    assert chosen.days <= named.days * (1 + 1e-12)
    full = plan("deepseek-v3", framework="megatron", recompute="full", **DSV3_PUBLISHED)
    assert chosen.days < full.days
    # The plan's Layout says what it recomputes, and evaluate() of it gives the same plan.
    assert chosen.layout.recompute == "selective" and chosen.layout.recompute_modules
    again = evaluate("deepseek-v3", framework="megatron", recompute="selective",
                     recompute_modules=",".join(chosen.layout.recompute_modules), dp=chosen.layout.dp,
                     **{k: v for k, v in DSV3_PUBLISHED.items() if k != "gpus"})
    assert again.days == pytest.approx(chosen.days, rel=1e-12)
    assert again.memory_per_gpu_gib == pytest.approx(chosen.memory_per_gpu_gib, rel=1e-12)


def test_layernorm_is_added_only_where_it_is_needed_to_fit() -> None:
    # layernorm re-runs no matrix work (apsi.model.arithmetic.flops_per_token counts none): a plan
    # whose layout fits without it does not recompute it.
    p = plan("llama-3.1-8b", framework="megatron", tokens="100B", gpus=8)
    assert "layernorm" not in p.layout.recompute_modules


def test_the_solver_line_names_the_space() -> None:
    from apsi.outputs.text import plan_text

    p = plan("llama-3.1-8b", framework="megatron", tokens="100B", gpus=8)
    assert p.solver.space is not None and "any set of the modules that apply" in p.solver.space
    assert p.solver.space in plan_text(p)
    with pytest.raises(ApsiError, match="recompute_modules is not a DeepSpeed knob"):
        plan("llama-3.1-8b", framework="deepspeed", tokens="100B", recompute="selective", recompute_modules="mlp")


@pytest.mark.parametrize("params", ["deepseek-v3", "qwen3-30b-a3b", "mixtral-8x22b", "llama-3.1-70b"])
@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_the_memory_lattice_holds_on_every_stage(params: str, precision: str) -> None:
    # apsi.training.frameworks.recompute.lattice: a recomputation "leaner" than another holds no more memory on
    # any stage of any layout, so split_fits may answer one from the other without evaluating it.
    # Checked on 300 seeded samples of each preset's layouts (every dp, split and ZeRO stage
    # alike), each against every leaner rank.
    import random

    from apsi.training.frameworks.bounds import Search
    from apsi.training.frameworks.recompute import lattice
    from apsi.training.frameworks.planner import prepare

    fw = framework_module("megatron")
    s, pins, _, _, _ = prepare(fw, resolve(params=params, tokens="1T", precision=precision), {}, 0.05)
    x = Search(fw, s, s.candidates[0], 2048, pins, 0.05)
    leaner, fuller, leanest = lattice(fw, x.options)
    assert any(leaner) and all(r in fuller[q] for r, qs in enumerate(leaner) for q in qs)
    a = s.model.architecture
    configs = x.configs
    rng = random.Random(7)
    pairs = 0
    for _ in range(300):
        c = rng.choice(configs)
        dps, ms = x.legal(c)
        if not dps or not leaner[c.recompute_rank]:
            continue
        j = rng.randrange(len(dps))
        split = rng.choice(fw.splits(a.layers, c.pp, c.vpp, a.mtp_layers))

        def stages(rank: int) -> list[float]:
            layout = x.layout(c._replace(recompute_rank=rank), dps[j], ms[j])
            return [p["total"] for p in fw.memory(a, split=split, **layout) if p is not None]

        mine = stages(c.recompute_rank)
        for q in leaner[c.recompute_rank]:
            pairs += 1
            assert all(lean <= own * (1 + 1e-12) for lean, own in zip(stages(q), mine)), (c, dps[j], q)
    assert pairs > 40


def test_recompute_modules_may_be_a_python_set() -> None:
    # The modules are a set (docs/method.md); {"mlp", "core_attn"} was refused as "must be a list".
    from apsi import plan

    a = plan("llama-3.1-8b", tokens="1T", recompute="selective", recompute_modules={"mlp", "core_attn"})
    b = plan("llama-3.1-8b", tokens="1T", recompute="selective", recompute_modules=["core_attn", "mlp"])
    assert a.layout.recompute_modules == ["core_attn", "mlp"] and a == b
