"""apsi's launch exports read by the frameworks' own code (optional: needs the frameworks; run
`bash tests/frameworks/install.sh && python -m pytest tests/test_export_frameworks.py`).

For every preset (planned under each format's framework; slurm under each framework) and every
run of examples/*.yaml (as its file plans it), each export format either refuses in one line, or
its launch goes through the framework's code (tests/frameworks/harness.py): Megatron-LM's
parse_args, validate_args and TransformerConfig; Megatron-DeepSpeed's parser and DeepSpeed's
DeepSpeedConfig; torchtitan's ConfigManager, ParallelDims and pipeline stage mapping; Megatron-
Bridge's source (an ast walk). Every value the framework arrives at must equal the plan's JSON.
Cases that exercise a known export bug (harness.KNOWN_BUGS) are xfail(strict=True) with the
bug's name, so a fix flips them to XPASS; any other difference fails.

Without the frameworks every case skips with the reason naming what is missing, and nothing is
solved (collection only lists the presets and loads the examples).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "frameworks"))

import harness  # noqa: E402

CASE_IDS = harness.preset_ids() + harness.example_ids()


@pytest.fixture(scope="session")
def _checked(request: pytest.FixtureRequest) -> None:
    """Every selected case whose framework is here, solved, exported and checked in one batch per
    framework (one interpreter each: their imports take seconds)."""
    ids = [item.callspec.params["case_id"] for item in request.session.items
           if hasattr(item, "callspec") and "case_id" in item.callspec.params]
    harness.prepare(ids)


def _describe(problems) -> str:
    return "\n".join(f"  {field}: plan {want!r}, framework {got!r}" if not field.startswith("error:")
                     else f"  {field[6:]}: {got}" for field, want, got in problems)


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_export_read_by_framework(case_id: str, request: pytest.FixtureRequest) -> None:
    reason = harness.skip_reason(harness.kind_of(case_id))
    if reason:
        pytest.skip(reason)
    request.getfixturevalue("_checked")
    outcome = harness.outcome(case_id)
    if outcome.skipped:
        pytest.skip(outcome.skipped)
    c = outcome.case
    if c.refused is not None:
        # A refusal is one line naming what the format cannot express (apsi's error contract).
        assert "\n" not in c.refused and c.refused.strip(), f"{case_id}: refusal not one line: {c.refused!r}"
        return
    unexplained, explained = harness.split(outcome)
    assert not unexplained, f"{case_id} ({c.source}): the framework disagrees with the plan:\n{_describe(unexplained)}"
    bugs = harness.known_bugs(c)
    if bugs:
        request.node.add_marker(pytest.mark.xfail(
            strict=True, reason="; ".join(f"{b.name}: {b.reason}" for b in bugs)))
        shown = [p for b in bugs for p in explained[b.name]]
        assert not shown, f"{case_id}: known export bugs still show:\n{_describe(shown)}"


def test_every_case_has_a_kind() -> None:
    """Collection alone (no framework, nothing solved) names every case's checker."""
    kinds = {harness.kind_of(cid) for cid in CASE_IDS}
    assert kinds <= set(harness.CHECKERS), kinds
    assert len(CASE_IDS) == len(set(CASE_IDS))


ALTERED = [
    # (case, (text in its export, replacement) from its plan, the field the framework then disagrees on)
    ("llama-3.1-70b/megatron", lambda p: (f"--global-batch-size {p.batch_sequences}",
                                          f"--global-batch-size {p.batch_sequences + p.layout.dp}"), "global_batch"),
    ("llama-3.1-405b/megatron", lambda p: (f"--num-virtual-stages-per-pipeline-rank {p.layout.vpp}",
                                           "--num-virtual-stages-per-pipeline-rank 1"), "vpp"),
    ("llama-3.1-70b/deepspeed", lambda p: (f'"train_micro_batch_size_per_gpu": {p.layout.micro_batch_sequences}',
                                           f'"train_micro_batch_size_per_gpu": {p.layout.micro_batch_sequences + 1}'),
     "error:DeepSpeedConfig"),
    ("llama-3.1-8b/torchtitan", lambda p: (f"config.training.seq_len = {p.seq}",
                                           f"config.training.seq_len = {2 * p.seq}"), "seq_len"),
    ("deepseek-v3/megatron-bridge", lambda p: ("cfg.train.micro_batch_size =", "cfg.train.micro_batch_sizes ="),
     "error:field"),
]
"""One value changed in an export: the framework's code must then disagree with the plan (so the
comparison can fail)."""


@pytest.mark.parametrize("case_id, change, field", ALTERED, ids=[a[0] for a in ALTERED])
def test_a_changed_value_is_seen(case_id: str, change, field: str) -> None:
    reason = harness.skip_reason(harness.kind_of(case_id))
    if reason:
        pytest.skip(reason)
    old, new = change(harness.case(case_id).plan)
    outcome = harness.altered(case_id, old, new)
    assert field in {p[0] for p in outcome.problems}, outcome.problems
