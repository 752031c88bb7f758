"""Fuzzing the command line: random argument lists through apsi.cli.app.main, in-process.

Owns one property: whatever the arguments, `apsi` exits 0 (a plan, a table, help) or 2
(a user error, one line on stderr), never raises, never prints a traceback and never hangs.
Arguments mix the real option names with garbage, and values from valid sizes and names to junk,
negatives and huge numbers. Sizes stay modest (at most a few trillion parameters) and --max-gpus
is drawn from small caps or left at its default, so the valid plans among the examples solve in
about a second each.
"""

from __future__ import annotations

import pytest

import io
from contextlib import redirect_stderr, redirect_stdout

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apsi.cli.app import main
from conftest import time_limit

PLAN_OPTIONS = ["--active", "--tokens", "--gpu", "--gpus", "--days", "--precision", "--optimizer", "--seq",
                "--layers", "--width", "--heads", "--batch", "--mfu", "--max-gpus", "--catalog", "--tp", "--pp",
                "--dp", "--recompute"]
SERVE_OPTIONS = ["--precision", "--gpu", "--seq", "--batch", "--active", "--layers", "--width", "--heads",
                 "--kv-heads", "--catalog"]
FLAGS = ["--json", "--help", "--version"]
GARBAGE_OPTIONS = ["--", "-", "--frob", "-x", "--gpu=", "--days=-1", "--tp=3", "-5B", "--mfu=2", "---", "--GPU"]

SIZES = ["7B", "32B", "70B", "1B", "16M", "4096", "2.5e10", "+3B", "1", "0", "-5B", "abc", "", "1Q", "nan", "inf",
         "1e400", "1e17", "1e18", "1e20", ".5T", "5.T", "1e-5", "0.4"]
"""Valid sizes first (SIZES[:8]), none above 70B: a dense model of a trillion parameters or more
misses a 90-day target, and its fastest-layout search with what-ifs can take tens of seconds."""
NUMBERS = ["1", "2", "3", "4", "8", "13", "16", "26", "64", "72", "96", "128", "1000", "4096", "9216", "0", "-1",
           "-8", "1.5", "0.4", "1e-9", "1e9", "99999999999999999999", "nan", "inf", "-inf", "0x10", " 8 ", "1_000"]
NAMES = ["H100", "h100", "H10", "B200", "GB200", "A100", "A100-40", "L40S", "MI300X", "MI325X", "RTX5090",
         "RTX4090", "RTX3090", "GTX1660", "TPU", "bf16", "fp16", "fp8", "fp4", "adamw", "adam8bit", "sgd", "adam",
         "none", "selective", "full", "some", "nope.yaml", "/", "."]
MAX_GPUS = ["1", "8", "64", "520", "1000", "0", "-3", "abc"]
GOOD = {
    "--active": ["1B", "7B", "32B"], "--tokens": ["100B", "420B", "1.4T", "15T"], "--gpu": NAMES[:14],
    "--gpus": ["8", "64", "520", "1000"], "--days": ["1", "30", "90", "3650"], "--precision": ["bf16", "fp16", "fp8"],
    "--optimizer": ["adamw", "adam8bit", "sgd"], "--seq": ["1024", "4096", "8192"], "--layers": ["8", "48", "80"],
    "--width": ["4096", "8192"], "--heads": ["32", "64"], "--batch": ["1M", "4M", "16M"], "--mfu": ["0.3", "0.5"],
    "--max-gpus": MAX_GPUS[:5], "--catalog": ["nope.yaml", "."], "--tp": ["1", "2", "4", "8"], "--pp": ["1", "2", "4"],
    "--dp": ["1", "8", "64"], "--recompute": ["none", "selective", "full"], "--kv-heads": ["1", "8"],
}
"""Plausible values per option, so that a fair share of the examples are valid plans."""

values = st.one_of(
    st.sampled_from(SIZES),
    st.sampled_from(NUMBERS),
    st.sampled_from(NAMES),
    st.text(max_size=8),
    st.integers(min_value=-10**30, max_value=10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)


@st.composite
def argument_lists(draw) -> list[str]:
    # Mostly plan; the last entries stand for the other commands and junk in the command's place.
    command = draw(st.sampled_from(["plan"] * 14 + ["serve"] * 3 + ["gpus", "frob", "--help"]))
    argv = [command]
    if command in ("plan", "serve") or draw(st.booleans()):
        argv.append(draw(st.sampled_from(SIZES[:8]) if draw(st.integers(0, 2)) else values))
    names = {"plan": PLAN_OPTIONS, "serve": SERVE_OPTIONS, "gpus": ["--catalog"]}.get(command, PLAN_OPTIONS)
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.integers(0, 9))
        if kind < 7:
            name = draw(st.sampled_from(names))
            if name == "--max-gpus":
                value = draw(st.sampled_from(MAX_GPUS))
            else:
                value = draw(st.sampled_from(GOOD[name]) if draw(st.integers(0, 2)) else values)
            argv += [name, value] if draw(st.integers(0, 9)) else [name]  # sometimes the value is missing
        elif kind < 8:
            argv.append(draw(st.sampled_from(FLAGS)))
        else:
            argv.append(draw(st.sampled_from(GARBAGE_OPTIONS)))
    if command == "plan" and "--max-gpus" not in argv and draw(st.booleans()):
        argv += ["--max-gpus", draw(st.sampled_from(MAX_GPUS[:5]))]
    return argv


@pytest.mark.slow
@settings(max_examples=200, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(argv=argument_lists())
def test_cli_never_crashes(argv: list[str]) -> None:
    out, err = io.StringIO(), io.StringIO()
    with time_limit(120), redirect_stdout(out), redirect_stderr(err):  # a hang guard
        code = main(argv)
    shown = f"apsi {argv!r}\nexit {code}\n--- stdout ---\n{out.getvalue()}\n--- stderr ---\n{err.getvalue()}"
    assert code in (0, 2), shown
    assert "Traceback" not in out.getvalue() + err.getvalue(), shown
    if code == 2:
        assert err.getvalue().startswith("error: ") and err.getvalue().count("\n") == 1, shown
