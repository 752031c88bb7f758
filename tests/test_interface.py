"""Tests for apsi.training.frameworks.interface and apsi.training.frameworks.reference: every framework module meets
the Framework protocol (each member present, of its kind, callable as the protocol says, data of
the declared type), a module that does not is caught, and the reference arithmetic as a module
keeps the reference's rules, memory and plans (tests/golden/reference.json's figures)."""

from __future__ import annotations

import inspect
import re
import types
from pathlib import Path

import pytest

from apsi import ApsiError, plan
from apsi.errors import InputError, LayoutError
from apsi.outputs.export import FRAMEWORK_OF
from apsi.training.frameworks import FRAMEWORKS, framework_module, reference
from apsi.training.frameworks.interface import Framework, members, problems, signature_problems
from apsi.inputs.question import resolve
from apsi.model import arithmetic as ar
from apsi.units import GIB

ROOT = Path(__file__).resolve().parents[1]
_DELETE = object()


def _copy(module: object, **changes: object) -> types.ModuleType:
    """A module with `module`'s attributes, some replaced or (with _DELETE) deleted."""
    copy = types.ModuleType(f"{getattr(module, '__name__', 'framework')}_copy")
    copy.__dict__.update({k: v for k, v in vars(module).items() if not k.startswith("__")})
    for key, value in changes.items():
        if value is _DELETE:
            delattr(copy, key)
        else:
            setattr(copy, key, value)
    return copy


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_every_framework_meets_the_protocol(name: str) -> None:
    fw = framework_module(name)
    assert fw.NAME == name
    assert isinstance(fw, Framework)
    assert problems(fw) == []
    for member, kind in members().items():
        value = getattr(fw, member)
        if kind == "data":
            assert not callable(value), member
        elif kind == "hook":
            assert value is None or callable(value), member
        else:
            assert callable(value), member
            # Every parameter the protocol's method names is one the module's function takes
            # (by name, or through its **kwargs).
            wanted = list(inspect.signature(getattr(Framework, member)).parameters)[1:]
            given = inspect.signature(value).parameters
            takes_any = any(p.kind is p.VAR_KEYWORD for p in given.values())
            assert all(p in given or takes_any for p in wanted), (member, wanted, list(given))


def test_members_are_every_kind_the_callers_read() -> None:
    """Every `fw.X` the package reads (and every getattr(fw, "X")) is a member of Framework."""
    names: set[str] = set()
    for path in (ROOT / "apsi").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        names.update(re.findall(r"\bfw\.([A-Za-z_]\w*)", text))
        names.update(re.findall(r"(?:getattr|hasattr)\(fw, \"(\w+)\"", text))
    assert names, "the callers read no fw.X: the pattern is stale"
    assert names - set(members()) == set()
    # The six read with a default before they were members, and the data the protocol declares.
    for name in ("layer_bytes", "KEEPS_STAGE_OUTPUTS", "recompute_flops", "KERNEL_EFFICIENCY",
                 "ep_overlap_allowed", "GRID_DOMINANCE"):
        assert name in members()


@pytest.mark.parametrize("member", sorted(members()))
def test_a_module_lacking_a_member_is_not_a_framework(member: str) -> None:
    broken = _copy(framework_module("megatron"), **{member: _DELETE})
    assert problems(_copy(framework_module("megatron"))) == []  # the copy itself is one
    assert any(f"lacks {member}" in line for line in problems(broken)), problems(broken)
    assert not isinstance(broken, Framework)


def test_a_member_of_the_wrong_kind_or_call_is_caught() -> None:
    fw = framework_module("torchtitan")

    def few(layers: int, pp: int) -> tuple[tuple[int, ...], ...]:
        return ()

    def extra(layers: int, pp: int, vpp: int, mtp: int = 0, *, strict: bool) -> tuple[tuple[int, ...], ...]:
        return ()

    def renamed(c: object, knobs: object = None, *, other: int) -> int:
        return 1

    cases = {
        "splits": few,                      # a parameter the callers pass is missing
        "split_layers": extra,              # a parameter no caller gives is required
        "dp_step": renamed,                 # ... and the knobs default kept
        "KNOBS": ["tp", "pp"],              # a list, not a tuple
        "DEFAULTS": {"pp": 1},              # required defaults missing
        "KERNEL_EFFICIENCY": "fast",        # not a number
        "BUILDS_MTP": 1,                    # an int, not a bool
        "tp_ok": True,                      # data where a function belongs
        "layer_bytes": lambda moe: 0.0,     # a hook the stage memory cannot call
        "NAME": lambda: "torchtitan",       # a function where data belongs
    }
    for member, value in cases.items():
        found = problems(_copy(fw, **{member: value}))
        # Named as torchtitan.X, or by the module's name where NAME itself is broken.
        assert any(re.match(rf"[\w.]+\.{member} ", line) for line in found), (member, found)


def test_signature_problems_name_the_parameter() -> None:
    def wanted(layers: int, pp: int, vpp: int, mtp: int = 0) -> None: ...
    def swapped(pp: int, layers: int, vpp: int, mtp: int = 0) -> None: ...
    def required(layers: int, pp: int, vpp: int, mtp: int) -> None: ...
    def anything(*args: int, **kwargs: int) -> None: ...

    w = inspect.signature(wanted)
    assert signature_problems(w, inspect.signature(wanted)) == []
    assert signature_problems(w, inspect.signature(anything)) == []
    assert signature_problems(w, inspect.signature(swapped)) == ["parameter 1 is pp, not layers",
                                                                 "parameter 2 is layers, not pp"]
    assert signature_problems(w, inspect.signature(required)) == ["requires mtp, which a caller may leave out"]


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_every_export_target_launches_a_framework_apsi_models(name: str) -> None:
    # The export targets are declared once (apsi.outputs.export.TARGETS): a framework's formats are
    # those whose target names it, and each target's module renders a plan.
    import importlib

    from apsi.outputs.export import TARGETS, formats_of

    assert set(formats_of(name)) == {f for f, w in FRAMEWORK_OF.items() if w == name}
    assert all(w is None or w in FRAMEWORKS for w in FRAMEWORK_OF.values())
    for target in TARGETS.values():
        assert callable(importlib.import_module(f"apsi.outputs.export.{target.module}").render)


@pytest.mark.parametrize("name", ["megatron", "torchtitan", "deepspeed"])
def test_plan_hook_is_the_planners(name: str) -> None:
    """fw.plan is the layout search plan(framework=...) runs (apsi.training.frameworks.planner)."""
    from apsi.training.frameworks.batch import BATCH_TOLERANCE

    setup = resolve("llama-3.1-8b", tokens="1T", days=30, include_consumer=False)
    mine = framework_module(name).plan(setup, {}, BATCH_TOLERANCE)
    assert mine.framework == name
    assert mine.model_dump() == plan("llama-3.1-8b", tokens="1T", days=30, framework=name).model_dump()


def test_framework_module_checks_the_name() -> None:
    assert framework_module(" Reference ") is reference
    with pytest.raises(ApsiError, match="unknown framework 'megatorn': did you mean megatron"):
        framework_module("megatorn")


# -- the reference arithmetic as a module ----------------------------------------------------------

GOLDEN_1T = dict(params="1T", active="32B", tokens="15T", precision="fp8")
"""tests/golden/reference.json's first plan: 520 x H100, TP 8 x PP 1 x DP 65, 65.8 GiB/GPU (28.7 of
model states, 37.1 of activations), 89.3 days."""


def test_reference_plan_is_the_cp_sat_program_s() -> None:
    setup = resolve(GOLDEN_1T["params"], **{k: v for k, v in GOLDEN_1T.items() if k != "params"})
    mine = reference.plan(setup, {}, 0.0)
    theirs = plan(framework="reference", **GOLDEN_1T)
    assert mine.model_dump() == theirs.model_dump()
    # tests/golden/reference.json (captured when the reference was the only framework).
    assert (mine.gpus, mine.layout.tp, mine.layout.pp, mine.layout.dp) == (520, 8, 1, 65)
    assert mine.days == pytest.approx(89.3, abs=0.05)
    assert mine.memory_per_gpu_gib == pytest.approx(65.8, abs=0.05)


def test_reference_plan_takes_pins_as_resolve_does() -> None:
    pinned = reference.plan(resolve("70B", days=60), {"tp": 4, "pp": 2, "recompute": "full"}, 0.0)
    assert pinned.model_dump() == plan("70B", days=60, tp=4, pp=2, recompute="full",
                                       framework="reference").model_dump()
    assert (pinned.layout.tp, pinned.layout.pp, pinned.layout.recompute) == (4, 2, "full")
    with pytest.raises(LayoutError, match="tp 3 is not allowed on H100"):
        reference.plan(resolve("70B"), {"tp": 3}, 0.0)
    with pytest.raises(InputError, match="cp is not a reference arithmetic knob"):
        reference.plan(resolve("70B"), {"cp": 2}, 0.0)
    with pytest.raises(InputError, match="batch_tolerance is a framework option"):
        reference.plan(resolve("70B"), {}, 0.05)


def test_reference_memory_is_the_plan_s() -> None:
    """memory() of the plan's layout gives the plan's per-GPU figures (apsi.training.reference.planning.assemble)."""
    setup = resolve(GOLDEN_1T["params"], **{k: v for k, v in GOLDEN_1T.items() if k != "params"})
    p = reference.plan(setup, {}, 0.0)
    lay, a = p.layout, setup.model.architecture
    stages = reference.memory(a, tp=lay.tp, pp=lay.pp, cp=1, ep=1, etp=1, dp=lay.dp, vpp=1, micro_batch=1,
                              seq=setup.seq, batch_sequences=setup.batch_sequences, recompute=lay.recompute,
                              optimizer=setup.optimizer, precision=setup.precision,
                              params=setup.model.trained_params)
    assert len(stages) == lay.pp
    first = stages[0]
    assert first is not None
    for part in ("weights", "gradients", "optimizer", "activations"):
        assert first[part] / GIB == pytest.approx(getattr(p.memory, f"{part}_gib"), rel=1e-12), part
    assert first["total"] / GIB == pytest.approx(p.memory_per_gpu_gib, rel=1e-12)
    # 16 B of adamw states per parameter over 520 GPUs (arithmetic.OPTIMIZER_BYTES) and 56 layers'
    # s b (34 d + 5 a s) bytes over TP 8 (Korthikanti et al. 2022 Table 2): 28.7 + 37.1 GiB.
    states = first["weights"] + first["gradients"] + first["optimizer"]
    assert states / GIB == pytest.approx(16e12 / 520 / GIB, rel=1e-12)
    assert first["activations"] == 56 * 4096 * (34 * 7168 + 5 * 56 * 4096) / 8
    assert reference.peak_bytes(a, tp=8, pp=1, cp=1, ep=1, etp=1, dp=65, vpp=1, micro_batch=1, seq=4096,
                                batch_sequences=1024, recompute="none", optimizer="adamw", precision="fp8",
                                params=setup.model.trained_params) == first["total"]


@pytest.mark.parametrize("model", ["1T", "llama-3.1-70b", "qwen3-30b-a3b", "deepseek-v3", "gemma-2-27b"])
def test_reference_rules_are_the_program_s(model: str) -> None:
    """tp_ok and splits allow exactly the tp and pp the program chooses from (Setup.tp_choices
    within the NVLink domain, Setup.pp_choices)."""
    s = resolve(model)
    a = s.model.architecture
    assert tuple(t for t in ar.divisors(s.gpu.scaleup_domain) if reference.tp_ok(a, t)) == s.tp_choices()
    assert tuple(pp for pp in range(1, a.layers + 2) if reference.splits(a.layers, pp, 1)) == s.pp_choices()
    for pp in s.pp_choices():
        assert reference.rank_layers(reference.split_layers(a.layers, pp, 1), pp) == (a.layers // pp,) * pp


def test_reference_refusals_name_the_rule() -> None:
    a = resolve("1T", active="32B").model.architecture  # 56 layers, 56 heads (the golden plan's)
    base = dict(tp=8, pp=1, cp=1, ep=1, etp=1, dp=65, vpp=1, micro_batch=1, seq=4096, batch_sequences=1024)
    reference.check_layout(a, **base)
    for change, message in [
        (dict(tp=3), "tp 3 does not divide the 56 attention heads; valid: 1, 2, 4, 7, 8"),
        (dict(pp=5), "pp 5 does not divide the 56 layers; valid: 1, 2, 4, 7, 8, 14, 28, 56"),
        (dict(pp=57), "pp 57 exceeds the 56 layers"),
        (dict(cp=2), "cp 2 is not a knob of the reference arithmetic.*valid: 1"),
        (dict(vpp=2), "vpp 2 is not a knob of the reference arithmetic.*valid: 1"),
        (dict(zero=1), "zero 1 is not a reference choice.*valid: 3"),
        (dict(dp=1025), "dp 1,025 exceeds the batch of 1,024 sequences.*valid: dp <= 1,024"),
    ]:
        with pytest.raises(LayoutError, match=message):
            reference.check_layout(a, **{**base, **change})
    assert reference.zero_choices(4) == (3,) and reference.ep_choices(a) == [1]
    assert reference.vpp_ok(4, 2) is False and reference.cp_ok(4096, 2, 1) is False
