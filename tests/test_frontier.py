"""Tests for the GPU/day frontier (apsi.api.frontier), its table and its charts (apsi.plot, apsi.outputs.text).

Owns the claims that frontier() is monotone (more GPUs never slower), starts at the fewest GPUs
that fit, ends where more GPUs stop helping, and that each point is what plan(..., gpus=N)
returns for its N; plus that `apsi frontier` and `apsi plan --plot` write readable PNG and SVG
files, and say how to get matplotlib when it is missing. Expected values come from plan() (the
CP-SAT solver), from an exhaustive walk of every layout judged by the arithmetic as
apsi.evaluate() applies it, and from the reference arithmetic.
"""

from __future__ import annotations

import json
import math
import sys
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import apsi
from conftest import time_limit
from apsi.errors import ApsiError, InputError, LayoutError
from apsi.inputs.question import resolve
from apsi.model import arithmetic as ar
from apsi.api.frontier import FrontierPoint, frontier, sample
from apsi.units import GIB
from test_search import DEEP, FRAMEWORKS, best_of
from test_search import layouts as search_layouts
from test_search import order as search_order
from test_search import scenarios as search_scenarios

# These tests are about the reference arithmetic and its CP-SAT program: plans that name no
# framework are planned under it here (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("reference_default")


SEVENTY_B = dict(params="70B", tokens="1.4T")
TWO_T = dict(params="2T", tokens="40T", gpu="B200", precision="fp8", batch="16M")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def seventy_b() -> list[FrontierPoint]:
    return frontier(**SEVENTY_B, framework="reference")  # module-scoped: outside reference_default


def _check_monotone(points: list[FrontierPoint], per_node: int = 8) -> None:
    assert points, "a frontier has at least one point"
    for a, b in zip(points, points[1:]):
        assert a.gpus < b.gpus, (a, b)
        assert a.days > b.days, f"{b.gpus} GPUs are not faster than {a.gpus}: {b.days} >= {a.days}"
    for p in points:
        assert p.gpus == p.layout.tp * p.layout.pp * p.layout.dp
        assert p.nodes == math.ceil(p.gpus / per_node)


def _same_as_plan(point: FrontierPoint, options: dict) -> None:
    # Expected value: the CP-SAT solver's fastest layout on at most point.gpus GPUs.
    got = apsi.plan(**options, gpus=point.gpus)
    assert got.gpus == point.gpus, (point, got.layout)
    assert got.days == pytest.approx(point.days, rel=1e-9), (point, got.layout)
    assert got.layout == point.layout
    assert got.memory_per_gpu_gib == pytest.approx(point.memory_per_gpu_gib, rel=1e-12)
    assert got.target_met == point.target_met


@pytest.mark.parametrize("options", [SEVENTY_B, TWO_T], ids=["70B", "2T-16M"])
def test_reference_frontiers_are_monotone_and_fast(options) -> None:
    # The sweep takes about 0.1 s (70B) and 0.3 s (2T) of CPU; the guard only catches a regression
    # to one solve per GPU count (minutes), as a hang.
    with time_limit(120):
        points = frontier(**options)
    _check_monotone(points)
    assert len(points) > 1000  # thousands of breakpoints: why the sweep cannot call the solver per N


def test_70b_ends_and_reference_plan(seventy_b) -> None:
    first, last = seventy_b[0], seventy_b[-1]
    # First point, from the reference arithmetic's rules: 16 bytes of states per parameter over G GPUs plus
    # 2 s b d bytes per layer of activations (full recomputation) over tp fit in 90% of 80 GiB,
    # with tp in 1, 2, 4, 8 dividing G; the smallest such G.
    states, full = 70e9 * 16 / GIB, 2 * 4096 * 9216 * 72 / GIB
    fewest = min(g for g in range(1, 100) for tp in (1, 2, 4, 8) if g % tp == 0 and states / g + full / tp <= 72)
    assert fewest == 16
    assert first.gpus == fewest
    with pytest.raises(LayoutError, match="no layout fits"):
        apsi.plan(**SEVENTY_B, gpus=first.gpus - 1)
    check = apsi.evaluate(**SEVENTY_B, tp=first.layout.tp, pp=first.layout.pp, dp=first.layout.dp,
                          recompute=first.layout.recompute)
    assert check.fits and check.days == pytest.approx(first.days, rel=1e-12)
    # Last point: DP is at most the batch, 4,194,304 / 4,096 = 1,024 sequences, and TP at most 8
    # (one NVLink domain); pipelining cannot beat TP 8 x DP 1,024 (its bubble grows with DP).
    assert (last.gpus, last.layout.tp, last.layout.pp, last.layout.dp) == (8 * 1024, 8, 1, 1024)
    assert last == frontier(**SEVENTY_B, max_gpus=1_000_000)[-1]
    # The reference arithmetic's table: 70B dense on 1.4T tokens, 208 GPUs (8 x 26), about 89
    # days; that plan is the frontier point at 208 GPUs, and the first point to meet 90 days.
    at_208 = next(p for p in seventy_b if p.gpus == 208)
    assert (at_208.layout.tp, at_208.layout.pp, at_208.layout.dp, at_208.layout.recompute) == (8, 1, 26, "none")
    assert at_208.days == pytest.approx(89.1, abs=0.05)
    assert next(p for p in seventy_b if p.target_met) == at_208


def test_70b_points_equal_plan_on_their_gpu_count(seventy_b) -> None:
    # A deterministic sample of 20 (the frontier has over a thousand points; each plan() solves).
    for point in sample(seventy_b, 20):
        _same_as_plan(point, SEVENTY_B)


def test_2t_points_equal_plan_and_reference(seventy_b) -> None:
    points = frontier(**TWO_T)
    # The reference arithmetic: 2T dense, 40T tokens, B200 FP8 -> 31,248 B200: TP 8 x DP 3,906, the batch of
    # 16,000,000 / 4,096 = 3,906 sequences; no layout is faster, so the target is not met.
    last = points[-1]
    assert (last.gpus, last.layout.tp, last.layout.dp) == (31_248, 8, 3_906)
    assert not last.target_met
    for point in sample(points, 8):
        _same_as_plan(point, TWO_T)


@pytest.mark.parametrize("options", [
    dict(params="21B", tokens="420B", max_gpus=24),
    dict(params="70B", tokens="1.4T", pp=4, max_gpus=400),
    dict(params="70B", tokens="1.4T", dp=8, recompute="selective"),
    dict(params="8B", layers=6, heads=18, width=18 * 128, batch=10 * 4096, gpu="GB200", max_gpus=700),
], ids=["21B-all-points", "pp-pinned", "dp-recompute-pinned", "GB200-odd-tp"])
def test_small_and_pinned_frontiers_equal_plan(options) -> None:
    points = frontier(**options)
    _check_monotone(points, per_node=4 if options.get("gpu") == "GB200" else 8)  # gpus.yaml
    for p in points:
        for key in ("pp", "dp", "recompute"):
            if key in options:
                assert getattr(p.layout, key) == options[key]
    for point in sample(points, 12):  # every point when there are at most 12
        _same_as_plan(point, options)


# -- against an exhaustive walk of every layout ---------------------------------------------------


def _walked_frontier(options: dict) -> list[tuple]:
    """Every layout plan() may choose (apsi/training/reference/program.py's rules), judged in the float arithmetic of
    apsi.training.reference.planning.assemble; the frontier is each G whose best layout (exact days, then lighter
    recompute, smaller pp, smaller tp: the solver's order) is faster than any on fewer GPUs."""
    s = resolve(**options)
    cap = s.gpus if s.gpus is not None else s.max_gpus
    tps = (s.tp,) if s.tp else s.tp_choices()
    pps = (s.pp,) if s.pp else s.pp_choices()
    levels = (s.recompute,) if s.recompute else ar.RECOMPUTE_LEVELS
    dps = (s.dp,) if s.dp else range(1, s.batch_sequences // s.micro_batch + 1)
    big_b, b = s.batch_sequences, s.micro_batch
    rows = []
    for rank, r in enumerate(ar.RECOMPUTE_LEVELS):
        if r not in levels:
            continue
        flops = ar.training_flops(s.model, s.tokens, s.seq, r)
        k = Fraction(flops / (s.peak_flops * s.mfu))
        for tp in tps:
            act = ar.activation_bytes(s.layers, s.seq, b, s.width, s.heads, r) / tp / GIB
            for pp in pps:
                for dp in (d for d in dps if tp * pp * d <= cap):
                    g = tp * pp * dp
                    w, gr, o = (x / g / GIB for x in ar.state_bytes(s.model.trained_params, s.optimizer))
                    if w + gr + o + act > ar.USABLE_FRACTION * s.gpu.memory_gib:
                        continue
                    days = ar.duration_seconds(flops, g, s.peak_flops, s.mfu, pp, big_b / (dp * b)) / 86_400
                    exact = k * Fraction(big_b + b * (pp - 1) * dp, big_b * g)
                    rows.append((g, exact, rank, pp, tp, dp, r, days))
    rows.sort(key=lambda x: x[:5])
    out: list[tuple] = []
    for row in rows:
        if not out or (row[1] < out[-1][1] and row[0] != out[-1][0]):
            out.append(row)
    return [(g, tp, pp, dp, r, days) for g, _, _, pp, tp, dp, r, days in out]


@st.composite
def small_cases(draw) -> dict:
    gpu = draw(st.sampled_from([g.name for g in apsi.gpu_table()]))
    case = dict(params=int(10 ** draw(st.floats(8, 12.5))), gpu=gpu, seq=draw(st.sampled_from([512, 1024, 2048])),
                max_gpus=draw(st.integers(1, 600)), optimizer=draw(st.sampled_from(sorted(ar.OPTIMIZER_BYTES))))
    case["batch"] = case["seq"] * draw(st.integers(1, 48))
    case["tokens"] = case["batch"] * draw(st.integers(1, 10**6))
    if draw(st.booleans()):
        case["layers"] = draw(st.sampled_from([4, 12, 24, 36, 60]))
    s = resolve(**case)
    if draw(st.integers(0, 3)) == 0:
        case["pp"] = draw(st.sampled_from(s.pp_choices()))
    if draw(st.integers(0, 3)) == 0:
        case["dp"] = draw(st.integers(1, s.batch_sequences))
    if draw(st.integers(0, 3)) == 0:
        case["recompute"] = draw(st.sampled_from(ar.RECOMPUTE_LEVELS))
    return case


@settings(max_examples=100, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(small_cases())
def test_frontier_equals_the_exhaustive_walk(case) -> None:
    # Expected values: every layout walked and judged one by one (_walked_frontier).
    try:
        walked = _walked_frontier(case)
    except LayoutError:  # a pin no layout allows (e.g. pp x dp over the cap): frontier() agrees
        with pytest.raises(LayoutError):
            frontier(**case)
        return
    if not walked:
        with pytest.raises(LayoutError, match="no layout fits"):
            frontier(**case)
        return
    got = [(p.gpus, p.layout.tp, p.layout.pp, p.layout.dp, p.layout.recompute, p.days) for p in frontier(**case)]
    assert got == walked


def test_frontier_refuses_a_gpu_list_and_what_does_not_fit() -> None:
    with pytest.raises(InputError, match="one GPU, not a list or any"):
        frontier("70B", gpu="any")
    # 16 GPUs are the fewest that fit (test_70b_ends_and_reference_plan): plan()'s message, which
    # says memory alone would allow it but no tp x pp x dp within 15 GPUs builds it.
    with pytest.raises(LayoutError, match="^no layout fits within 15 GPUs: memory would allow"):
        frontier("70B", max_gpus=15)
    # Below that, memory itself is short: 1,043 GiB of model states over at most 7 GPUs.
    with pytest.raises(LayoutError, match="^no layout fits: .*1,043 GiB of model states"):
        frontier("70B", max_gpus=7)


def test_sample_keeps_ends_and_asked_points(seventy_b) -> None:
    shown = sample(seventy_b, 40, keep_gpus=(208,))
    assert len(shown) == 40
    assert shown[0] == seventy_b[0] and shown[-1] == seventy_b[-1]
    assert any(p.gpus == 208 for p in shown)
    assert [p.gpus for p in shown] == sorted(p.gpus for p in shown)
    assert sample(seventy_b[:7], 40) == seventy_b[:7]


# -- under a framework: a chain of exact walks (apsi.training.frameworks.frontier) -----------------------------

FRAMEWORK_CASES = {
    "megatron-1b": dict(params="llama-3.2-1b", tokens="50B", max_gpus=64),
    "torchtitan-moe": dict(params="qwen3-30b-a3b", tokens="200B", max_gpus=128, framework="torchtitan"),
    "deepspeed-zero3": dict(params="llama-3.1-8b", tokens="100B", max_gpus=64, framework="deepspeed", zero=3),
    "micro-batch-any": dict(params="olmo-2-7b", tokens="100B", max_gpus=48, micro_batch="any"),
    "flat-mfu-moe": dict(params="mixtral-8x7b", tokens="100B", max_gpus=96, mfu=0.4),
    "tp-pinned": dict(params="llama-3.1-8b", tokens="100B", max_gpus=256, tp=2),
}
LLAMA_70B_15T = dict(params="llama-3.1-70b", tokens="15T")


def _framework_options(options: dict) -> dict:
    return {"framework": "megatron", **options}


def _same_as_framework_plan(point: FrontierPoint, options: dict) -> None:
    # Expected value: plan()'s own walk for the fastest layout on at most point.gpus GPUs.
    got = apsi.plan(**_framework_options(options), gpus=point.gpus, objective="days")
    assert got.gpus == point.gpus, (point, got.layout)
    assert got.days == pytest.approx(point.days, rel=1e-9), (point, got.layout)
    assert got.layout == point.layout
    assert got.memory.total_gib == pytest.approx(point.memory_per_gpu_gib, rel=1e-12)
    assert got.target_met == point.target_met


@pytest.mark.parametrize("options", list(FRAMEWORK_CASES.values()), ids=list(FRAMEWORK_CASES))
def test_framework_frontier_points_equal_plan(options) -> None:
    points = frontier(**_framework_options(options))
    assert points
    for a, b in zip(points, points[1:]):
        assert a.gpus < b.gpus and a.days > b.days, (a, b)
    for point in sample(points, 16):  # every point when there are at most 16
        _same_as_framework_plan(point, options)
    # The last point is the fastest within the cap; the first, the fewest GPUs that fit.
    fastest = apsi.plan(**_framework_options(options), objective="days")
    assert (fastest.gpus, fastest.layout) == (points[-1].gpus, points[-1].layout)
    if points[0].gpus > 1:
        with pytest.raises(LayoutError, match="fits within|exceeds the cap"):  # or a pin needs more
            apsi.plan(**_framework_options(options), gpus=points[0].gpus - 1)


@pytest.fixture(scope="module")
def llama_70b_15t() -> list[FrontierPoint]:
    return frontier(**_framework_options(LLAMA_70B_15T))


def test_llama_70b_15t_frontier_equals_plan(llama_70b_15t) -> None:
    points = llama_70b_15t
    # Hundreds of points (163 on this code): plan() is asked at an even sample of 12 of them, the
    # ends included, and at the count just below each sampled point, where it must be slower.
    assert len(points) > 100
    for point in sample(points, 12):
        _same_as_framework_plan(point, LLAMA_70B_15T)
    shown = sample(points, 12)
    for before, point in zip(points, points[1:]):
        if point in shown and point.gpus - 1 > before.gpus:
            below = apsi.plan(**_framework_options(LLAMA_70B_15T), gpus=point.gpus - 1, objective="days")
            assert below.days == pytest.approx(before.days, rel=1e-9), (before, below.layout)


def _strictly_faster(a: tuple, b: tuple, flat: bool) -> bool:
    """a's duration below b's in the search's order (apsi.training.frameworks.layouts.Seconds): floats within
    a billionth tie, and at a flat MFU two of one recomputation level (one K) are then compared as
    rationals. a, b: rows of tests/test_search.layouts()."""
    x, y = a[6], b[6]
    if abs(x - y) > 1e-9 * max(x, y):
        return x < y
    return flat and a[2].recompute_rank == b[2].recompute_rank and a[1] < b[1]


@settings(max_examples=2_000 if DEEP else 80, deadline=None, derandomize=not DEEP, database=None,
          suppress_health_check=list(HealthCheck))
@given(search_scenarios(), st.sampled_from(FRAMEWORKS), st.sampled_from([0.0, 0.05]),
       st.sampled_from([1, 1, 2]))
def test_framework_frontier_equals_the_enumeration(case: dict, framework: str, tolerance: float, mb: int) -> None:
    # Expected values: every layout the framework allows, judged one by one by its memory and
    # step-time functions (tests/test_search.layouts, which shares no bound or walk with the
    # search); the best on each GPU count (shortest, then the configuration order), kept where it
    # is strictly faster than every count below it.
    from apsi.training.frameworks import framework_module
    from apsi.training.frameworks.bounds import Search
    from apsi.training.frameworks.frontier import frontier as framework_frontier

    fw = framework_module(framework)
    try:
        s = resolve(**case)
        fw.check_training(s.precision, s.optimizer, {})
    except ApsiError:
        return  # a precision or optimizer this framework does not train with (tests/test_search.py)
    pins = {} if mb == 1 else {"micro_batch": mb}
    capacity = Search(fw, s, s.gpu, s.max_gpus, pins, tolerance).capacity
    every = search_layouts(fw, s, capacity, s.max_gpus, tolerance, mb)
    rows = [r for r in every if r[9]]  # the ZeRO stages the search offers
    expected: list[tuple] = []
    for gpus in sorted({r[0] for r in rows}):
        # Shortest, then the configuration order, then the split's in the framework's order.
        best = best_of([r for r in rows if r[0] == gpus], lambda r: r[1], lambda r: search_order(r[2]),
                       lambda r: r[8])
        # A ZeRO stage the search leaves out is no faster on these GPUs.
        assert all(r[6] >= best[6] * (1 - 1e-9) for r in every if r[0] == gpus)
        if not expected or _strictly_faster(best, expected[-1], s.flat_mfu):
            expected.append(best)
    if not expected:
        # plan()'s refusal: no dp left by the rules, the batch and whole nodes, or none that fits.
        with pytest.raises(LayoutError, match="fits within"):
            framework_frontier(fw, s, pins, tolerance)
        return
    got = framework_frontier(fw, s, pins, tolerance)
    assert [p.gpus for p in got] == [r[0] for r in expected]
    for p, r in zip(got, expected):
        c = r[2]
        assert (p.layout.tp, p.layout.pp, p.layout.cp, p.layout.vpp, p.layout.ep, p.layout.etp, p.layout.zero,
                p.layout.dp, p.layout.recompute) == (c.tp, c.pp, c.cp, c.vpp, c.ep, c.etp, c.zero, r[3], r[7][0]), (p, r)
        # The recomputed modules, the lightest set that fits (tests/test_search.recomputations).
        assert tuple(p.layout.recompute_modules) == (r[7][1] if "recompute_modules" in fw.KNOBS else ()), (p, r)
        assert p.days * 86_400 == pytest.approx(r[6], rel=1e-9)


def test_framework_frontier_limits_say_what_to_narrow(monkeypatch) -> None:
    import apsi.training.frameworks.frontier as framework_frontier

    # The cap: refused before any walk (a 7B model at seq 1 has a point at nearly every count).
    with time_limit(120), pytest.raises(LayoutError, match=r"^the Megatron frontier is drawn up to 250,000 GPUs, .* "
                                                          r"1,000,000 were asked for: give a max_gpus of at most "
                                                          r"250,000$"):
        frontier("7B", seq=1, max_gpus=1_000_000, framework="megatron")
    # The points: the chain stops at the limit, naming the GPUs of the last point it listed.
    points = frontier(**_framework_options(FRAMEWORK_CASES["megatron-1b"]))
    monkeypatch.setattr(framework_frontier, "MAX_POINTS", len(points) - 1)
    with pytest.raises(LayoutError, match=rf"over {len(points) - 1:,} points within 64 GPUs \(the "
                                          rf"{len(points) - 1:,}th at {points[-2].gpus:,}\): give a max_gpus of at "
                                          rf"most {points[-2].gpus:,}"):
        frontier(**_framework_options(FRAMEWORK_CASES["megatron-1b"]))


# -- the command line: table, JSON, charts ---------------------------------------------------------


def test_cli_frontier_table_and_json(apsi, seventy_b) -> None:
    run = apsi("frontier", "70B", "--tokens", "1.4T")
    assert run.code == 0, run.why()
    lines = run.out.splitlines()
    assert lines[0] == "GPU/day frontier: 70B params, 1.4T tokens on H100 (bf16, 40% MFU)"
    assert lines[1].startswith(f"{len(seventy_b):,} GPU counts at which the fastest layout gets faster, "
                               "from 16 GPUs (1,544.3 days) to 8,192 GPUs (2.26 days)")
    # The plan (208 x H100, 89.1 days, the reference arithmetic) is marked in its row.
    marked = [line for line in lines if line.endswith("<- plan")]
    assert len(marked) == 1 and marked[0].split()[:6] == ["208", "26", "89.1", "8", "1", "26"], marked
    assert f"Showing 40 of {len(seventy_b):,} points" in run.out and "--json gives all" in run.out
    run = apsi("frontier", "70B", "--tokens", "1.4T", "--json")
    assert run.code == 0, run.why()
    assert json.loads(run.out) == [p.model_dump() for p in seventy_b]


def test_cli_frontier_plot_png_and_svg(apsi, tmp_path) -> None:
    png, svg = tmp_path / "f.png", tmp_path / "f.svg"
    run = apsi("frontier", "70B", "--tokens", "1.4T", "--plot", str(png))
    assert run.code == 0, run.why()
    assert png.read_bytes().startswith(PNG_MAGIC) and png.stat().st_size > 10_000
    assert f"frontier plot written to {png}" in run.err
    run = apsi("frontier", "21B", "--max-gpus", "64", "--plot", str(svg))
    assert run.code == 0, run.why()
    text = svg.read_text()
    assert text.startswith("<?xml") and "<svg" in text


def test_cli_plan_memory_plot(apsi, tmp_path) -> None:
    first, second, svg = tmp_path / "m.png", tmp_path / "again.png", tmp_path / "m.svg"
    for path in (first, second, svg):
        run = apsi("plan", "70B", "--tokens", "1.4T", "--no-levers", "--plot", str(path))
        assert run.code == 0, run.why()
        assert run.out.startswith("Training plan: 70B params")
    assert first.read_bytes().startswith(PNG_MAGIC) and first.stat().st_size > 10_000
    assert first.read_bytes() == second.read_bytes()  # deterministic output
    assert svg.read_text().startswith("<?xml")


@pytest.mark.parametrize("command", [["frontier", "70B"], ["plan", "70B", "--no-levers"]])
def test_plot_without_matplotlib_says_how_to_get_it(apsi, tmp_path, monkeypatch, command) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    target = tmp_path / "x.png"
    run = apsi(*command, "--plot", str(target))
    assert run.code == 2, run.why()
    assert run.err == "error: plotting needs matplotlib: pip install 'apsi-planner[plot]'\n"
    assert run.out == "" and not target.exists()


def test_plot_extension_must_be_png_or_svg(apsi, tmp_path) -> None:
    run = apsi("frontier", "70B", "--plot", str(tmp_path / "f.pdf"))
    assert run.code == 2, run.why()
    assert run.err == f"error: plot file '{tmp_path / 'f.pdf'}' must end in .png or .svg\n"


def test_plot_titles_say_their_figures_plainly(apsi, tmp_path) -> None:
    # The GPU/day frontier's title printed the MFU to six digits (54.6113%); the serving
    # frontier's named neither model nor engine. matplotlib's SVG keeps each text as a comment.
    import re

    pytest.importorskip("matplotlib")
    svg = tmp_path / "f.svg"
    run = apsi("frontier", "21B", "--max-gpus", "64", "--plot", str(svg))
    assert run.code == 0, run.why()
    title = re.search(r"<!-- (GPU/day frontier: [^>]*) -->", svg.read_text())
    assert title and re.search(r" \d+\.\d% MFU\)$", title.group(1)), title
    served = tmp_path / "s.svg"
    run = apsi("serve", "llama-3.1-8b", "--frontier", "--plot", str(served), "--engine", "sglang", "--precision", "fp8")
    assert run.code == 0, run.why()
    assert "<!-- Serving frontier of llama-3.1-8b on SGLang 0.5 (fp8 weights): -->" in served.read_text()


def test_the_frontier_tells_its_progress_point_by_point() -> None:
    # A long frontier (the DeepSeek-V3 one takes seconds) once printed nothing until done: the
    # chain tells progress(points, gpus) of each point it finds, in order.
    from apsi import frontier

    told: list[tuple[int, int]] = []
    points = frontier("llama-3.1-8b", tokens="1T", max_gpus=512, framework="megatron",
                      progress=lambda n, g: told.append((n, g)))
    assert [n for n, _ in told] == list(range(1, len(points) + 1))
    assert [g for _, g in told] == [p.gpus for p in points]


def test_the_progress_line_is_drawn_on_a_terminal_only() -> None:
    import io

    from apsi.outputs.tables import FrontierProgress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty, pipe = Terminal(), io.StringIO()
    for stream in (tty, pipe):
        shown = FrontierProgress(stream, after=0.0)
        shown(1, 8)
        shown(12, 4096)
        shown.done()
    assert pipe.getvalue() == ""
    assert tty.getvalue() == ("\rfrontier: 1 point so far, up to 8 GPUs\x1b[K"
                              "\rfrontier: 12 points so far, up to 4,096 GPUs\x1b[K\r\x1b[K")
    quiet = Terminal()
    FrontierProgress(quiet, after=3600.0)(5, 64)  # a frontier done within `after` prints nothing
    assert quiet.getvalue() == ""


def test_the_frontier_table_shows_every_row_s_days_apart() -> None:
    # DeepSeek-V3's last two points take 31.33 and 31.28 days: at one decimal both read 31.3, a
    # frontier whose days did not fall. The column takes the decimals that tell them apart.
    from apsi import frontier as frontier_of, plan
    from apsi.outputs.text import frontier_text

    points = frontier_of("deepseek-v3", tokens="14.8T")
    text = frontier_text(points, plan("deepseek-v3", tokens="14.8T"), rows=len(points))
    import re

    cells = [line.split()[2] for line in text.splitlines() if re.match(r"^  +[\d,]+ +[\d,]+ +[\d.,]+ +\d", line)]
    assert len(cells) == len(points) and all(a != b for a, b in zip(cells, cells[1:])), cells[-3:]
