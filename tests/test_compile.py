"""torchtitan's compile knob: torch.compile on (its default) or off, priced at the rates fitted on
TT-BENCH's compiled and eager rows (benchmarks/calibrate.py), shown on the Layout line, written by
the export, refused under the frameworks that have no such switch."""

from __future__ import annotations

import pytest

from apsi import ApsiError, evaluate, export_config
from apsi.outputs.text import plan_text as render_plan
from apsi.training.frameworks import megatron, timing, torchtitan
from test_export import _assignments

LAYOUT = dict(framework="torchtitan", gpu="H100", tokens="1T", seq=8192, batch=16 * 8192, tp=1, dp=8,
              micro_batch=2, recompute="selective", failures=False)
"""TT-BENCH Table 1's layout: Llama 3.1 8B, FSDP 8, local batch 2, selective AC."""


def test_the_rate_is_the_compiled_one_unless_compile_is_false() -> None:
    rates = torchtitan.KERNEL_EFFICIENCY
    assert timing.efficiency(torchtitan, "bf16", {}) == rates["bf16"]
    assert timing.efficiency(torchtitan, "bf16", {"compile": True}) == rates["bf16"]
    assert timing.efficiency(torchtitan, "bf16", {"compile": False}) == pytest.approx(rates["bf16"] * rates["eager"])
    assert timing.efficiency(torchtitan, "fp8", {"compile": False}) == pytest.approx(rates["fp8"] * rates["eager"])
    # A framework without the knob keeps its rate whatever a layout holds.
    assert timing.efficiency(megatron, "bf16", {"compile": False}) == megatron.KERNEL_EFFICIENCY["bf16"] == 1.0


def test_eager_is_slower_by_about_what_tt_bench_measured() -> None:
    # TT-BENCH Table 1 ran this layout eager (5,762 tokens/s per GPU) and compiled (6,667): 0.864.
    # apsi's ratio is the fitted eager share on the compute, less on the whole step (the memory-bound
    # kernels and the exposed DP time do not change with it).
    compiled = evaluate("llama-3.1-8b", **LAYOUT)
    eager = evaluate("llama-3.1-8b", **LAYOUT, compile=False)
    assert eager.time is not None and compiled.time is not None
    assert eager.time.compute_seconds > compiled.time.compute_seconds
    ratio = compiled.step_seconds / eager.step_seconds
    assert ratio == pytest.approx(5762 / 6667, abs=0.02)
    assert evaluate("llama-3.1-8b", **LAYOUT, compile=True).step_seconds == compiled.step_seconds
    # Memory is the same: compile is a step-time setting only.
    assert eager.memory.total_gib == compiled.memory.total_gib


def test_the_layout_line_says_when_compile_is_off() -> None:
    eager = render_plan(evaluate("llama-3.1-8b", **LAYOUT, compile=False))
    assert "no torch.compile" in eager
    assert "torch.compile" not in render_plan(evaluate("llama-3.1-8b", **LAYOUT))
    assert ", torch.compile" in render_plan(evaluate("llama-3.1-8b", **LAYOUT, compile=True))


@pytest.mark.parametrize("compile_", [None, True, False])
def test_the_export_runs_compile_as_the_plan_did(compile_: bool | None) -> None:
    knobs = {} if compile_ is None else {"compile": compile_}
    cfg = _assignments(export_config(evaluate("llama-3.1-8b", **LAYOUT, **knobs), "torchtitan"), "config")
    assert cfg["compile.enable"] is (compile_ is not False)
    # Async TP needs compile (torchtitan 0.3's CompileConfig.__post_init__): off with it, and only then.
    assert ("compile.enable_async_tensor_parallel" in cfg) is (compile_ is False)
    if compile_ is False:
        assert cfg["compile.enable_async_tensor_parallel"] is False


def test_compile_is_torchtitans_alone() -> None:
    with pytest.raises(ApsiError, match=r"^compile is not a Megatron knob"):
        evaluate("llama-3.1-8b", framework="megatron", tokens="1T", tp=1, dp=8, compile=False)
