"""A fuzz run of plan() and `apsi plan` (issue 12): generated inputs, good and hostile, must give a
plan or one line (an ApsiError; exit 2), never a traceback, another exit code or a run over 10 s;
and every plan must pass an independent check of its GPU count, memory, days and layout rules.
300 examples in CI, 5,000 with APSI_DEEP=1 (figures in docs/bad-inputs.md)."""

from __future__ import annotations

import contextlib
import io
import math
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apsi import ApsiError, plan
from apsi.cli.app import main
from conftest import time_limit

DEEP = os.environ.get("APSI_DEEP") == "1"
PROFILE = settings(max_examples=5_000 if DEEP else 300, deadline=None, derandomize=not DEEP, database=None,
                   suppress_health_check=list(HealthCheck))

HOSTILE = st.one_of(st.sampled_from([0, -1, 1e-300, 5e-324, 1e308, float("inf"), float("nan"), True, "abc", "",
                                     "²", "-3", None]),
                    st.floats(allow_nan=True, allow_infinity=True), st.integers(-10, 10**7))


def mixed(valid: list, hostile=HOSTILE):
    """Nine times in ten a valid value, else a hostile one."""
    good = st.sampled_from(valid)
    return st.integers(0, 9).flatmap(lambda i: hostile if i == 0 else good)


OPTIONS = {
    "params": mixed(["7B", "1B", "13B", "70B", "1T", "llama-3.2-1b", "qwen3-30b-a3b", "olmo-2-7b", "mixtral-8x7b"],
                    st.sampled_from(["-5B", "abc", "", "1e18", 7_000_000_000])),
    "active": mixed(["1B", "3B"], st.sampled_from(["0", "x", "2T"])),
    "tokens": mixed(["10B", "100B", "1T", "15T"], st.sampled_from(["0", "-1T", "1e30", "abc"])),
    "gpu": mixed(["H100", "A100-40", "L40S", "RTX4090", "B200", "GB200", "H100,B200", "any"],
                 st.sampled_from(["H1000", "", 3])),
    "days": mixed([1, 7, 30, 90, 365]), "mfu": mixed([0.2, 0.4, 0.6]), "seq": mixed([1024, 2048, 4096, 8192]),
    "batch": mixed(["1M", "4M", "16M"], st.sampled_from(["1", "0", "abc"])),
    "precision": mixed(["bf16", "fp8", "fp16"], st.sampled_from(["fp4", 8])),
    "optimizer": mixed(["adamw", "adam8bit", "sgd"], st.sampled_from(["lion"])),
    "max_gpus": mixed([8, 64, 512, 4096], st.sampled_from([0, -1, "x"])),
    "tp": mixed([1, 2, 4, 8], st.sampled_from([3, 0, "x"])), "pp": mixed([1, 2, 4], st.sampled_from([0, 3])),
    "recompute": mixed(["none", "selective", "full"], st.sampled_from(["some"])),
    "framework": mixed(["megatron", "torchtitan", "deepspeed", "reference"], st.sampled_from(["megtron"])),
    "objective": mixed(["gpus", "days", "cost", "energy"], st.sampled_from(["speed"])),
}


@st.composite
def inputs(draw) -> dict:
    keys = draw(st.sets(st.sampled_from(sorted(OPTIONS)), min_size=1, max_size=5))
    out = {k: draw(OPTIONS[k]) for k in sorted(keys | {"params", "max_gpus"})}
    return {k: v for k, v in out.items() if v is not None or k == "params"}


def check(p) -> None:
    """An independent check of a plan: the numbers agree with one another and with the rules."""
    lay = p.layout
    assert p.gpus == lay.tp * lay.pp * lay.cp * lay.dp
    assert p.nodes >= 1 and p.gpus >= 1
    assert math.isfinite(p.days) and p.days > 0 and math.isfinite(p.gpu_hours)
    assert p.gpu_hours == p.gpus * p.days * 24 or math.isclose(p.gpu_hours, p.gpus * p.days * 24, rel_tol=1e-9)
    assert p.fits and p.memory_per_gpu_gib <= p.memory.usable_gib * (1 + 1e-12)
    assert math.isclose(p.memory.total_gib, p.memory_per_gpu_gib, rel_tol=1e-12)
    if p.framework == "reference":
        assert lay.cp == lay.ep == lay.vpp == 1
        return
    from apsi.training.frameworks import framework_module

    fw = framework_module(p.framework)
    a = p.model.architecture
    fw.check_layout(a, tp=lay.tp, pp=lay.pp, cp=lay.cp, ep=lay.ep, etp=lay.etp, dp=lay.dp, vpp=lay.vpp,
                    micro_batch=lay.micro_batch_sequences, seq=p.seq, batch_sequences=p.batch_sequences, zero=lay.zero,
                    **p.framework_knobs if p.framework == "megatron" else {})
    assert sum(lay.stage_layers) == a.layers and len(lay.stage_layers) == lay.pp
    assert p.batch_sequences == lay.micro_batch_sequences * lay.dp * round(lay.micro_batches_per_replica)
    if p.time is not None:
        assert math.isclose(p.days * 86_400, p.steps * p.step_seconds + (p.failure_days or 0) * 86_400, rel_tol=1e-9)


@PROFILE
@given(inputs())
def test_plan_fuzz(options: dict) -> None:
    try:
        with time_limit(120):  # a hang guard; speed is benchmarks/'s to measure
            p = plan(**options)
    except ApsiError as err:
        message = str(err)
        assert message and "\n" not in message and "Traceback" not in message
    else:
        check(p)


CLI_VALUES = st.sampled_from(["7B", "70B", "1T", "H100", "any", "fp8", "0", "-1", "1e-300", "nan", "²", "abc", "8",
                              "64", "selective", "reference", "torchtitan", ""])
CLI_OPTIONS = ["--gpu", "--days", "--precision", "--seq", "--mfu", "--tp", "--pp", "--framework", "--batch",
               "--max-gpus", "--recompute", "--zero", "--cp", "--vpp"]


@settings(max_examples=2_000 if DEEP else 100, deadline=None, derandomize=not DEEP, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.sampled_from(["7B", "1B", "llama-3.2-1b", "qwen3-30b-a3b", "x"]),
       st.lists(st.tuples(st.sampled_from(CLI_OPTIONS), CLI_VALUES), max_size=4))
def test_cli_fuzz(params: str, pairs: list) -> None:
    argv = ["plan", params, "--max-gpus", "64", "--no-levers", "--json"] + [x for pair in pairs for x in pair]
    out, err = io.StringIO(), io.StringIO()
    with time_limit(120), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    assert code in (0, 1, 2), (argv, code)
    assert "Traceback" not in err.getvalue(), argv
    if code == 2:
        assert err.getvalue().count("\n") == 1 and err.getvalue().startswith("error: "), (argv, err.getvalue())
