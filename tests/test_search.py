"""Tests for the framework walk (apsi.training.frameworks.walk over apsi.training.frameworks.bounds): its answers equal a plain enumeration of every layout, each
judged by the framework's own rules (check_layout) and scored as evaluate() scores it (every split,
every stage, the duration with its bubble), on random small scenarios; and the plans it gives.

The enumeration shares nothing with the search but the framework's rules and memory: it walks tp,
pp, vpp, cp, ep, etp, the ZeRO stage, dp and the recomputation level over plain ranges, works out
each dp's micro-batches from the batch tolerance itself, and keeps the best by brute force. It is
the oracle the search's shortcuts (monotone memory in dp, the duration floor, the bound order,
identical stages skipped) must agree with.
"""

from __future__ import annotations

import itertools
import math
import os
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apsi import ApsiError, evaluate, plan
from apsi.errors import LayoutError
from apsi.training.frameworks import framework_module, timing
from apsi.training.frameworks.batch import BATCH_TOLERANCE
from apsi.training.frameworks.bounds import Search
from apsi.training.frameworks.space import MIN_CP_CHUNK, Config, vpp_most
from apsi.training.frameworks.walk import cheapest, fastest, fewest
from apsi.training.explain.frameworks import aside, time_alone
from apsi.inputs.question import resolve
from apsi.model import arithmetic as ar
from apsi.units import SECONDS_PER_DAY

FRAMEWORKS = ["megatron", "torchtitan", "deepspeed"]
DEEP = os.environ.get("APSI_DEEP") == "1"


def nearest_micro_batches(batch: int, dp: int, group: int, tolerance: float, rounds: int = 0,
                          least: int = 1) -> int | None:
    """By brute force: the multiple of `group` whose batch m x dp is nearest `batch` (ties: larger);
    with `rounds`, only an m that torch's interleaved schedules run over that many pipeline ranks,
    in max(1, m // rounds) rounds of which m is a multiple (TORCH-PIPE); with `least`, only an m
    of at least that many (torch's Schedule1F1B refuses fewer micro-batches than stages, TORCH-PIPE)."""
    best = None
    for m in range(group, 2 * batch + group + least, group):
        if rounds and m % max(1, m // rounds) or m < least:
            continue
        key = (abs(m * dp - batch), -m)
        if best is None or key < best[0]:
            best = (key, m)
    m = best[1]
    return m if abs(m * dp - batch) <= tolerance * batch else None


def oracle(fw, s, capacity: float, cap: int, target: float, tolerance: float, mb: int = 1,
           knobs: dict | None = None):
    """(gpus, seconds, configuration, dp, split, micro-batches, ...) of the best layout by brute
    force over the ZeRO stages the search offers, the mode, and the best (gpus, seconds) over
    every stage the framework runs (a stage the search leaves out must not beat it)."""
    every = layouts(fw, s, capacity, cap, tolerance, mb, knobs)
    rows = [r for r in every if r[9]]
    meeting = [r for r in rows if r[6] <= target]
    if meeting:
        fewest = min(r[0] for r in meeting)
        best = best_of([r for r in meeting if r[0] == fewest], lambda r: r[1], lambda r: order(r[2]), lambda r: r[8])
        anywhere = [r for r in every if r[6] <= target]
        least = min(r[0] for r in anywhere)
        return best, "min_gpus", (least, min(r[1] for r in anywhere if r[0] == least))
    if rows:
        best = best_of(rows, lambda r: r[1], lambda r: r[0], lambda r: order(r[2]), lambda r: r[8])
        quickest = min(r[1] for r in every)
        return best, "fastest", (min(r[0] for r in every if r[1] <= quickest * (1 + Fraction(1, 10**9))), quickest)
    return None, "none", None


def best_of(rows: list, *keys):
    """The least row by `keys` in turn, each key's rows within a billionth of its least tied (the
    search orders durations from the step-time model in floats to that precision,
    apsi.training.frameworks.layouts.Seconds) and the tie broken by the next key."""
    for key in keys:
        least = min(key(r) for r in rows)
        if isinstance(least, (int, tuple)):
            rows = [r for r in rows if key(r) == least]
        else:
            rows = [r for r in rows if key(r) <= least * (1 + Fraction(1, 10**9))]
    return rows[0]  # the last key (the configuration order) leaves one row, or identical ones


def order(c: Config) -> tuple:
    """Ties: lighter recomputation, smaller pp, tp, cp, vpp, a smaller expert grid and within it
    more EP, then the lower ZeRO stage (docs/method.md 3.4)."""
    return (c.recompute_rank, c.pp, c.tp, c.cp, c.vpp, c.ep * c.etp, -c.ep, c.zero)


def layouts(fw, s, capacity: float, cap: int, tolerance: float, mb: int = 1,
            knobs: dict | None = None) -> list[tuple]:
    """Every layout that fits, by brute force: (gpus, exact seconds, configuration, dp, split,
    micro-batches, float seconds, recomputation variant, the split's index in the framework's
    order, whether the search offers its ZeRO stage), one per split under which it fits; `knobs`
    (the framework's time knobs) are pinned for the step."""
    a = s.model.architecture
    peak = s.gpu.peak_tflops(s.precision) * 1e12
    # Whole nodes: the GPU count a multiple of the granularity (the GPU's node unless given).
    whole = s.gpu.gpus_per_node if s.node_granularity is None else s.node_granularity
    rows = []
    for tp in range(1, s.gpu.scaleup_domain + 1):
        if s.gpu.scaleup_domain % tp:
            continue  # tp within the NVLink domain: the search's space (a pinned tp may leave it)
        for cp in range(1, cap // tp + 1):
            if cp > 1 and s.seq // cp < MIN_CP_CHUNK:
                continue
            for pp in range(1, min(a.layers, cap // (tp * cp)) + 1):
                for vpp in range(1, vpp_most(a.layers + a.mtp_layers, pp) + 1):
                    for ep in range(1, (min(a.experts, cap) if a.moe else 1) + 1):
                        for etp in range(1, (min(a.expert_ffn, cap) if a.moe else 1) + 1):
                            # Every ZeRO stage the framework runs at this pp (zero_ok), not only those
                            # its search offers (zero_choices): a stage it leaves out must lose.
                            for zero in [z for z in range(4) if fw.zero_ok(pp, z)]:
                                try:
                                    fw.check_pins(a, s.seq, dict(tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, vpp=vpp,
                                                                 zero=zero))
                                except LayoutError:
                                    continue
                                config = Config(0, pp, tp, cp, vpp, ep, etp, zero)
                                for dp in range(1, cap // (tp * pp * cp) + 1):
                                    if tp * pp * cp * dp % whole:
                                        continue
                                    m = nearest_micro_batches(s.batch_sequences, mb * dp, fw.micro_group(config),
                                                              tolerance, fw.micro_rounds(config),
                                                              fw.micro_least(config))
                                    if m is None:
                                        continue
                                    layout = dict(tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, dp=dp, vpp=vpp,
                                                  micro_batch=mb, seq=s.seq, zero=zero, batch_sequences=m * mb * dp)
                                    try:
                                        fw.check_layout(a, **layout)
                                    except LayoutError:
                                        continue
                                    for rank, variants in enumerate(recomputations(fw, s)):
                                        # Every split is its own layout; on each, the lightest variant
                                        # fitting there (the variants' durations are equal).
                                        for index, split in enumerate(fw.splits(a.layers, pp, vpp, a.mtp_layers)):
                                            variant = next((v for v in variants if max(
                                                part["total"] for part in fw.memory(
                                                    a, split=split, optimizer=s.optimizer, precision=s.precision,
                                                    **_recompute_keywords(fw, v), **layout)) <= capacity), None)
                                            if variant is None:
                                                continue
                                            recompute, modules = variant
                                            if s.flat_mfu:
                                                # GPU-seconds K_r, and the duration K_r (v m + p - 1) / (t p c
                                                # dp v m) as an exact rational (Narayanan et al. 2021 Sec. 2.2).
                                                hw = timing.flops_per_token(fw, s.model, s.seq, recompute,
                                                                            modules or ("core_attn",))[1]
                                                k = float(hw) * s.tokens / (peak * s.mfu)
                                                n, d = vpp * m + pp - 1, tp * pp * cp * dp * vpp * m
                                                exact, secs = Fraction(k) * n / d, k * n / d
                                            else:  # the step-time model, as evaluate() times it
                                                secs = timing.seconds(fw, s, dict(layout, **_recompute_keywords(fw, variant),
                                                                                  **(knobs or {})), split, m)
                                                exact = Fraction(secs)
                                            rows.append((tp * pp * cp * dp, exact, config._replace(recompute_rank=rank),
                                                         dp, split, m, secs, variant, index,
                                                         zero in fw.zero_choices(pp)))
    return rows


FREE = {"layernorm", "moe_act"}
"""Megatron's output-discarding modules that re-run no matrix work (MLM-TC): memory alone."""


def recomputations(fw, s) -> list[list[tuple[str, tuple[str, ...]]]]:
    """The framework's recomputations in the tie order, each its variants lightest first, written
    out here from Megatron's --recompute-modules (MLM-TC) without apsi.training.frameworks.recompute: none,
    then selective over every set of the modules re-running matrix work that apply (core_attn;
    mla_up_proj with MLA; mlp with dense MLP layers and moe with MoE layers, where the model has
    its parts), fewer first, each adding any set of layernorm and moe_act (not moe_act beside
    moe), then full. Frameworks without the modules knob: none, selective, full."""
    if "recompute_modules" not in fw.KNOBS:
        return [[("none", ())], [("selective", ())], [("full", ())]]
    a = s.model.architecture
    parts = s.model.active_parts is not None
    order = ["core_attn", "mla_up_proj", "layernorm", "mlp", "moe", "moe_act"]
    apply = {"core_attn": True, "mla_up_proj": a.mla, "layernorm": a.norms_per_layer > 0,
             "mlp": parts and (not a.moe or a.dense_layers > 0 or a.moe_every > 1), "moe": parts and a.moe,
             "moe_act": a.moe}
    heavy = [m for m in order if apply[m] and m not in FREE]
    free = [m for m in order if apply[m] and m in FREE]
    out = []
    for n in range(len(heavy) + 1):
        for chosen in itertools.combinations(heavy, n):
            extras = [m for m in free if not (m == "moe_act" and "moe" in chosen)]
            variants = []
            for k in range(len(extras) + 1):
                for extra in itertools.combinations(extras, k):
                    both = sorted(set(chosen) | set(extra), key=order.index)
                    variants.append(("selective" if both else "none", tuple(both)))
            out.append(variants)
    return out + [[("full", ())]]


def _recompute_keywords(fw, variant: tuple[str, tuple[str, ...]]) -> dict:
    level, modules = variant
    return dict(recompute=level, **({"modules": modules} if modules else {}))


@st.composite
def scenarios(draw) -> dict:
    model = draw(st.sampled_from(["llama-3.2-1b", "qwen3-30b-a3b", "olmo-2-7b", "mixtral-8x7b"]))
    seq = draw(st.sampled_from([2048, 4096, 8192]))
    gpu = draw(st.sampled_from(["H100", "A100-40", "RTX4090", "L40S"] + SMALL))
    case = dict(params=model, gpu=gpu, seq=seq,
                batch=seq * draw(st.sampled_from([7, 8, 16, 30, 48, 64, 96])),
                days=draw(st.sampled_from([1, 5, 30, 365])), max_gpus=draw(st.sampled_from([4, 8, 16])),
                optimizer=draw(st.sampled_from(["adamw", "adam8bit"])), precision=draw(st.sampled_from(["bf16", "fp8"])))
    case["tokens"] = case["batch"] * draw(st.integers(10**3, 10**6))
    # Whole nodes (None: the GPU's own node) or any count (1), or a granularity between.
    case["node_granularity"] = draw(st.sampled_from([None, 1, 1, 2, 3, 4, 6, 7]))
    if draw(st.booleans()):
        case["mfu"] = 0.4  # a flat MFU: the reference's duration with the real bubble
    if gpu in SMALL:
        case["catalog"] = SMALL_CATALOG
    return case


SMALL_CATALOG = os.path.join(os.path.dirname(__file__), "configs", "small-memory-gpus.yaml")
SMALL = ["H100-16", "A100-12", "L40S-10"]
"""Small-memory GPUs (the shipped figures with 10 to 16 GiB): there a layout fits on some pipeline
splits only, and which split it takes moves its duration."""


PROFILE = settings(max_examples=10_000 if DEEP else 200, deadline=None, derandomize=not DEEP, database=None,
                   suppress_health_check=list(HealthCheck))


@PROFILE
@given(scenarios(), st.sampled_from(FRAMEWORKS), st.sampled_from([0.0, BATCH_TOLERANCE]), st.sampled_from([1, 1, 2]),
       st.booleans())
def test_search_equals_the_enumeration(case: dict, framework: str, tolerance: float, mb: int, flex: bool) -> None:
    fw = framework_module(framework)
    try:
        s = resolve(**case)
    except ApsiError:
        return  # fp8 on a GPU without it (tests/test_bad_input.py)
    try:
        fw.check_training(s.precision, s.optimizer, {})
    except LayoutError:
        return  # a precision or optimizer this framework does not train with (its own test)
    # Megatron's flex dispatcher (pinned on half the cases) changes only the EP traffic, which the
    # bounds must follow.
    knobs = {"dispatcher": "flex"} if flex and "dispatcher" in fw.KNOBS else {}
    search = Search(fw, s, s.gpu, s.max_gpus, dict(knobs, **({} if mb == 1 else {"micro_batch": mb})), tolerance)
    target = s.days * SECONDS_PER_DAY
    expected, mode, anywhere = oracle(fw, s, search.capacity, s.max_gpus, target, tolerance, mb, knobs)
    got = fewest([search], target)
    if mode == "min_gpus":
        found = got[1]
        # The Why line's "the target alone would need": by brute force, the fewest GPUs under the
        # answer's of any legal configuration, fitting or not (memory aside: aside()), at any legal
        # dp and under any of the framework's splits meeting the target, or None.
        a = s.model.architecture
        alone = None
        if found.gpus > 1:
            free = aside(search, found.gpus)
            assert free.capacity == math.inf and free.cap == found.gpus - 1
            alone = min((c.tp * c.pp * c.cp * dp for c in free.configs
                         for dp, m in zip(*free.legal(c))
                         if any(free.exact(c, dp, m, x).value <= target
                                for x in fw.splits(a.layers, c.pp, c.vpp, a.mtp_layers))),
                        default=None)
        assert time_alone(search, target, found.gpus) == alone
        # The time gate (memory_aside False): the same walk over the search's own configurations.
        kept = min((c.tp * c.pp * c.cp * dp for c in search.configs for dp, m in zip(*search.legal(c))
                    if c.tp * c.pp * c.cp * dp < found.gpus
                    and any(search.exact(c, dp, m, x).value <= target
                            for x in fw.splits(a.layers, c.pp, c.vpp, a.mtp_layers))), default=None)
        assert time_alone(search, target, found.gpus, memory_aside=False) == kept
    else:
        assert got is None
        got = fastest([search])
        found = None if got is None else got[1]
    if expected is None:
        assert found is None
        return
    assert (found.gpus, found.config, found.dp, found.split, found.micro_batches) == (
        expected[0], expected[2], expected[3], expected[4], expected[5])
    assert math.isclose(found.seconds, float(expected[1]), rel_tol=1e-12)
    # No ZeRO stage the search leaves out does better (fewer GPUs, or at as many a shorter run).
    if mode == "min_gpus":
        assert found.gpus == anywhere[0] and found.seconds <= float(anywhere[1]) * (1 + 1e-9)
    else:
        assert found.seconds <= float(anywhere[1]) * (1 + 1e-9)
    level, modules = search.lightest(found.config, found.dp, found.micro_batches, found.split)
    assert (level, modules if "recompute_modules" in fw.KNOBS else ()) == expected[7]


def _trained(case: dict, framework: str):
    """(framework module, setup) for a scenario the framework trains, or None (a precision on a GPU
    without it, or one the framework does not train with: their own tests)."""
    fw = framework_module(framework)
    try:
        s = resolve(**case)
        fw.check_training(s.precision, s.optimizer, {})
    except ApsiError:
        return None
    return fw, s


@settings(max_examples=10_000 if DEEP else 60, deadline=None, derandomize=not DEEP, database=None,
          suppress_health_check=list(HealthCheck))
@given(scenarios(), st.sampled_from(FRAMEWORKS))
def test_cheapest_equals_the_enumeration(case: dict, framework: str) -> None:
    # On one GPU type the cost is price x GPUs x seconds: the cheapest layout meeting the target is
    # the one with the least GPU-seconds (ties: fewer GPUs, shorter, the configuration order).
    trained = _trained(case, framework)
    if trained is None:
        return
    fw, s = trained
    search = Search(fw, s, s.gpu, s.max_gpus, {}, BATCH_TOLERANCE)
    target = s.days * SECONDS_PER_DAY
    price = 2.5 / 3600
    meeting = [r for r in layouts(fw, s, search.capacity, s.max_gpus, BATCH_TOLERANCE) if r[6] <= target and r[9]]
    got = cheapest([search], target, [price])
    if not meeting:
        assert got is None
        return
    best = best_of(meeting, lambda r: r[0] * r[1], lambda r: r[0], lambda r: r[1], lambda r: order(r[2]),
                   lambda r: r[8])
    found = got[1]
    assert (found.gpus, found.config, found.dp, found.split) == (best[0], best[2], best[3], best[4])


def test_a_recomputation_never_makes_a_step_faster_with_fewer_micro_batches_than_stages() -> None:
    # Found by the deep run (APSI_DEEP=1): Llama 3.2 1B on L40S under torchtitan, PP 2 x VPP 8 x
    # DP 7, one micro-batch per replica. The interleaved schedule's DP overlap counted chunk c's
    # reduction as hiding under c groups of pp micro-batches' backwards where the replica has one:
    # the selective recomputation's added forward hid more DP traffic than it cost (0.3080 s
    # against 0.3166 s without), the recomputation lattice's bound broke, and the search returned
    # 7 GPUs where the enumeration found the selective layout on 14 cheaper.
    case = {"params": "llama-3.2-1b", "gpu": "L40S", "seq": 4096, "batch": 28672, "days": 1, "max_gpus": 16,
            "optimizer": "adamw", "precision": "bf16", "tokens": 28672000, "node_granularity": 7}
    shape = dict(framework="torchtitan", gpu="L40S", seq=4096, batch=28672, tokens=28672000, tp=1, pp=2, vpp=8, dp=7)
    none, selective = (evaluate("llama-3.2-1b", recompute=r, **shape) for r in ("none", "selective"))
    assert none.layout.micro_batches_per_replica == 1
    assert selective.step_seconds > none.step_seconds
    assert selective.time.compute_seconds - none.time.compute_seconds >= none.time.dp_seconds - selective.time.dp_seconds
    test_cheapest_equals_the_enumeration.hypothesis.inner_test(case, "torchtitan")


def test_405b_on_16384_gpus_needs_a_pipeline() -> None:
    # Under the distributed optimizer every replica keeps bf16 weights and fp32 gradients of its
    # TP x PP shard: 405.85B x 6 B / 8 = 284 GiB at PP 1, so memory forces PP > 1 (issue's case:
    # apsi plan llama-3.1-405b --tokens 15.6T --gpus 16384).
    p = plan("llama-3.1-405b", framework="megatron", tokens="15.6T", gpus=16384, seq=8192, batch=2048 * 8192)
    assert p.framework == "megatron" and p.gpus <= 16384 and p.layout.pp > 1 and p.fits
    assert p.memory.total_gib <= p.memory.usable_gib
    with pytest.raises(ApsiError):
        plan("llama-3.1-405b", framework="megatron", tokens="15.6T", gpus=16384, seq=8192, batch=2048 * 8192, pp=1)


def test_pins_are_kept_and_judged() -> None:
    p = plan("llama-3.1-8b", framework="megatron", tokens="100B", tp=2, pp=2, recompute="selective")
    assert (p.layout.tp, p.layout.pp, p.layout.recompute) == (2, 2, "selective")
    with pytest.raises(LayoutError, match="tp 3 does not divide the 32 attention heads"):
        plan("llama-3.1-8b", framework="megatron", tokens="100B", tp=3)


def test_reference_refuses_framework_knobs() -> None:
    with pytest.raises(ApsiError, match="^vpp is a framework knob the reference arithmetic does not have"):
        plan("70B", framework="reference", vpp=2)


@pytest.mark.parametrize("params, options, binding", [
    # Memory binds: 1T tokens over 3,000 days needs some 30 H100 for its FLOPs, but 405B's
    # states alone need more.
    ("llama-3.1-405b", dict(tokens="1T", days=3000), "memory"),
    # Time binds: the 90-day target on 15T tokens.
    ("llama-3.1-70b", dict(tokens="15T", gpu="A100,H100"), "time"),
])
def test_explain_only_adds_the_what_ifs(params, options, binding):
    # Expected: the same plan with or without explain, Why line included (the GPUs the target
    # alone needs come from the search's own walk, checked against brute force in
    # test_search_equals_the_enumeration); explain adds the runner-up GPU type.
    quick, full = plan(params, **options), plan(params, explain=True, **options)
    assert quick.binding == full.binding == binding
    drop = {"gpu_choice": {"runner_up"}}
    assert quick.model_dump(exclude=drop) == full.model_dump(exclude=drop)
    if binding == "memory":
        alone = int(full.why.split("alone would need ")[1].split(" x ")[0].replace(",", ""))
        assert 0 < alone < full.gpus
    else:
        assert quick.gpu_choice.runner_up is None and full.gpu_choice.runner_up is not None


def test_explain_is_a_boolean():
    with pytest.raises(ApsiError, match="explain is true or false"):
        plan("7B", explain="yes")


@settings(max_examples=10_000 if DEEP else 100, deadline=None, derandomize=not DEEP, database=None,
          suppress_health_check=list(HealthCheck))
@given(scenarios(), st.sampled_from(FRAMEWORKS), st.integers(0, 10**6))
def test_a_block_floor_is_below_each_dp_floor_in_its_block(case: dict, framework: str, pick: int) -> None:
    # fastest() passes over a block of dps whose Search.block_floor exceeds the best found: that is
    # exact only if the block floor is at most dp_floor (itself below the step) at each dp in it.
    trained = _trained(case, framework)
    if trained is None:
        return
    fw, s = trained
    if s.flat_mfu:
        return  # at a flat MFU dp_floor is the duration itself and fastest() keeps to its floors
    search = Search(fw, s, s.gpu, s.max_gpus, {}, BATCH_TOLERANCE)
    configs = search.configs
    if not configs:
        return
    c = configs[pick % len(configs)]
    dps, ms = search.legal(c)
    if not dps:
        return
    low = pick % len(dps)
    high = low + (pick // 7) % (len(dps) - low)
    floor = search.block_floor(c, dps[low], dps[high])
    assert all(floor <= search.dp_floor(c, dps[j], ms[j]) for j in range(low, high + 1))


@st.composite
def wide_scenarios(draw) -> dict:
    """Runs on up to thousands of GPUs (data parallelism across NVLink domains, where the tail's
    floor of Search.floor_window counts the DP traffic), no brute force needed."""
    case = draw(scenarios())
    case.pop("mfu", None)  # the step-time model: the windows of its floors
    case["max_gpus"] = draw(st.sampled_from([64, 512, 4096]))
    case["params"] = draw(st.sampled_from(["qwen3-30b-a3b", "mixtral-8x7b", "olmo-2-7b", "llama-3.1-70b"]))
    return case


@settings(max_examples=5_000 if DEEP else 150, deadline=None, derandomize=not DEEP, database=None,
          suppress_health_check=list(HealthCheck))
@given(wide_scenarios(), st.sampled_from(FRAMEWORKS), st.integers(0, 10**6), st.sampled_from([0.5, 0.9, 1.0, 1.1, 2.0]))
def test_the_floor_window_holds_every_dp_the_floors_let_through(case: dict, framework: str, pick: int,
                                                                 scale: float) -> None:
    # The walks look only at the dps in Search.floor_window (narrowed by the tail's floor,
    # timing.tail_least, where the DP traffic must cross NVLink domains): exact only if every legal
    # dp whose whole-step floor (too_slow's) meets the target lies in it. The target sits near one
    # of the configuration's own durations.
    trained = _trained(case, framework)
    if trained is None:
        return
    fw, s = trained
    search = Search(fw, s, s.gpu, s.max_gpus, {}, BATCH_TOLERANCE)
    configs = search.configs
    if not configs:
        return
    c = configs[pick % len(configs)]
    dps, ms = search.legal(c)
    if not dps:
        return
    j = (pick // 13) % len(dps)
    target = search.seconds(c, dps[j], ms[j]) * scale
    lo, hi = search.floor_window(c, target)
    for dp, m in zip(dps, ms):
        if not search.too_slow(c, dp, m, target):
            assert lo <= dp <= hi, (c, dp, lo, hi)


@pytest.mark.parametrize("change", [dict(failures=False), dict(batch="8M"), dict(tokens="2T")])
def test_a_kept_floor_window_is_the_one_worked_out_afresh(change: dict) -> None:
    # Search.floor_window keeps its answers with the run (its setup, batch and interruptions) by
    # configuration and target, for a later question: one that differs in its interruptions, its
    # batch or its tokens gets windows of its own, each what the closed form gives (_floor_window).
    fw = framework_module("megatron")
    base = dict(params="llama-3.1-70b", tokens="1T", gpu="H100", max_gpus=4096)
    first = resolve(**base)
    search = Search(fw, first, first.gpu, first.max_gpus, {}, BATCH_TOLERANCE)
    target = first.days * SECONDS_PER_DAY
    configs = search.configs[::97]
    kept = [search.floor_window(c, target) for c in configs]
    assert kept == [search._floor_window(c, target) for c in configs]
    then = resolve(**{**base, **change})
    other = Search(fw, then, then.gpu, then.max_gpus, {}, BATCH_TOLERANCE)
    fresh = [other._floor_window(c, target) for c in configs]
    assert [other.floor_window(c, target) for c in configs] == fresh
    assert fresh != kept  # the change moves the windows: a window kept from the first would be wrong


@settings(max_examples=5_000 if DEEP else 150, deadline=None, derandomize=not DEEP, database=None,
          suppress_health_check=list(HealthCheck))
@given(wide_scenarios(), st.sampled_from(FRAMEWORKS), st.integers(0, 10**6))
def test_the_tails_floor_is_below_the_tail_at_every_dp_from_its_own(case: dict, framework: str, pick: int) -> None:
    # timing.tail_least(dp) bounds timing.tail_floor at every dp from dp on: the window's narrowing
    # rests on it (the DP groups whose ranks are a domain apart grow slower with dp, never faster).
    from apsi.training.frameworks import timing

    trained = _trained(case, framework)
    if trained is None:
        return
    fw, s = trained
    search = Search(fw, s, s.gpu, s.max_gpus, {}, BATCH_TOLERANCE)
    configs = search.configs
    if not configs:
        return
    c = configs[pick % len(configs)]
    dps, ms = search.legal(c)
    if not dps:
        return
    n, compute_mb, parts = timing.tail_parts(fw, s, search.layout(c, 1, 1), {})
    first = (pick // 11) % len(dps)
    least = timing.tail_least(s, parts, n, compute_mb, dps[first])
    for dp, m in zip(dps[first:], ms[first:]):
        assert least <= timing.tail_floor(s, parts, dp, m, n, compute_mb) * (1 + 1e-12), (c, dp)


@settings(max_examples=2_000 if DEEP else 40, deadline=None, derandomize=not DEEP, database=None,
          suppress_health_check=list(HealthCheck))
@given(scenarios(), st.sampled_from(FRAMEWORKS))
def test_plan_chooses_the_micro_batch_as_each_pinned_one_would(case: dict, framework: str) -> None:
    # With micro_batch "any" plan() walks one search per size (MICRO_BATCHES); its answer must be
    # the best of the plans pinned to each: the fewest GPUs meeting the target (then shorter, then
    # the smaller micro-batch), or where none meets it the shortest (then fewer GPUs, then smaller).
    from apsi.training.frameworks.batch import MICRO_BATCHES

    try:
        free = plan(framework=framework, micro_batch="any", **case)
    except ApsiError:
        free = None
    rows = []
    for mb in MICRO_BATCHES:
        try:
            rows.append((plan(framework=framework, micro_batch=mb, **case), mb))
        except ApsiError:
            pass
    if free is None:
        assert not rows
        return
    meeting = [r for r in rows if r[0].target_met]
    if meeting:
        best = best_of(meeting, lambda r: r[0].gpus, lambda r: Fraction(r[0].days), lambda r: r[1])
    else:
        best = best_of(rows, lambda r: Fraction(r[0].days), lambda r: r[0].gpus, lambda r: r[1])
    assert free.layout.micro_batch == best[1]
    assert free.model_dump(exclude={"notes", "why", "binding", "inputs"}) == \
        best[0].model_dump(exclude={"notes", "why", "binding", "inputs"})


def test_each_split_is_its_own_layout() -> None:
    # OLMo 2 7B on 4 L40S at pp 4 (the case where the walk took the first split that fits,
    # Megatron's even 8 | 8 | 8 | 8): the embedding-and-loss-balanced 7 | 9 | 9 | 7 fits too and its
    # slowest rank is shorter (the last rank's 7 layers plus the head against 8 plus the head), so
    # it is the answer; every other split that fits is no faster (timing.seconds, split by split).
    fw = framework_module("megatron")
    s = resolve("olmo-2-7b", gpu="L40S", seq=2048, batch=14336, days=1, tokens=14336000, max_gpus=4,
                node_granularity=1)
    search = Search(fw, s, s.gpu, s.max_gpus, {}, 0.0)
    _, found = fewest([search], s.days * SECONDS_PER_DAY)
    a = s.model.architecture
    splits = fw.splits(a.layers, found.config.pp, found.config.vpp, a.mtp_layers)
    assert found.config.pp == 4 and splits[0] == (8, 8, 8, 8) and found.split == (7, 9, 9, 7)
    layout = search.layout(found.config, found.dp, found.micro_batches)
    fitting = [x for x in splits if fw.peak_bytes(a, split=x, **layout) <= search.capacity]
    assert splits[0] in fitting and found.split in fitting
    by_split = {x: timing.seconds(fw, s, layout, x, found.micro_batches) for x in fitting}
    assert by_split[found.split] == pytest.approx(found.seconds, rel=1e-12)
    assert by_split[found.split] == min(by_split.values()) < by_split[splits[0]]
    # plan() and evaluate() take the same split for the same layout.
    p = plan("olmo-2-7b", framework="megatron", gpu="L40S", seq=2048, batch=14336, days=1, tokens=14336000,
             max_gpus=4, node_granularity=1)
    assert tuple(p.layout.virtual_stage_layers) == found.split


def test_kept_family_bounds_leave_every_plan_as_on_cold_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    # Search.family_rows keeps each group's family bounds by setup, run and target for later
    # questions, and the walk's tie on GPUs is settled against the best's duration. A sweep of
    # deadlines (time decides DeepSeek-V3 fp8, memory decides it in bf16) asked again warm, in the
    # other order, gives each plan byte for byte as on cold caches: its layout, its Note's memory
    # evaluations and the work its walk charged to its budget (apsi.training.frameworks.budget;
    # read before the JSON, whose Why line's what-if walk is deferred to it).
    from apsi.training.frameworks import kept, layouts, planner, space
    from apsi.training.frameworks.budget import Budget

    budgets: list = []

    class Recorded(Budget):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            budgets.append(self)

    monkeypatch.setattr(planner, "Budget", Recorded)
    questions = [dict(precision="fp8", tokens="14.8T", days=days) for days in (60, 90)] + [dict(days=60)]
    cold = []
    for q in questions:
        layouts._BOUNDS.clear()
        space._FAMILIES.clear()
        kept.forget()
        p = plan("deepseek-v3", **q)
        cold.append((budgets[-1].used, p.model_dump_json()))
    for q, (used, text) in reversed(list(zip(questions, cold))):
        kept.forget()
        p = plan("deepseek-v3", **q)
        assert budgets[-1].used == used, q
        assert p.model_dump_json() == text, q
