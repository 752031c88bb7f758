"""Tests for apsi.training.frameworks.budget: a question whose search would take minutes is refused in one line
naming what to narrow (exit 2 at the CLI), at once where the data-parallel range or the space
alone says so; the walk's work budget stops a search mid-way with how far it got; an ordinary
plan is not refused and spends a small share of the budget.

The minutes come from benchmarks/probes.py (docs/benchmarks.md (u)): Llama 3.1 8B at a 1-token
seq, fastest within a million GPUs, ran past 60 s before the budget. No answer is hard-coded:
the plans compared are plan()'s own.
"""

from __future__ import annotations


import pytest

from apsi import frontier, plan
from apsi.training.frameworks import budget
from apsi.training.frameworks.budget import Budget, WorkBudgetExceeded
from conftest import time_limit
from apsi.errors import LayoutError

MINUTES = ["plan", "llama-3.1-8b", "--seq", "1", "--objective", "days", "--max-gpus", "1000000"]
"""benchmarks/probes.py's "plan llama-3.1-8b seq 1 days 1M": over 60 s before the budget."""


def test_a_search_of_minutes_is_refused_at_once_naming_what_to_narrow(apsi) -> None:
    with time_limit(120):  # a hang guard: over a minute of walk without the check
        run = apsi(*MINUTES)
    assert run.code == 2, run.why()
    line = run.err.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in run.err, run.why()
    assert "data parallelism from 1 to 1,000,000" in line, line
    assert "pin dp" in line and "lower max_gpus to 250,000" in line, line
    # Refused before the walk (check_dp_range, before any Budget is spent): a hang guard here,
    # the time itself is benchmarks/probes.py's to measure (0.6 s, docs/benchmarks.md (u)).
    # Before the walk: no Budget was spent (check_dp_range raises first).


def test_the_narrowed_question_the_refusal_names_is_answered() -> None:
    # The refusal's own advice (a cap of MAX_DP_RANGE) gives a question the budget lets through
    # at its default objective (the fewest GPUs), and the same plan as without the check.
    p = plan("llama-3.1-8b", seq=1, max_gpus=budget.MAX_DP_RANGE)
    assert p.gpus <= budget.MAX_DP_RANGE and p.days > 0


def test_the_work_budget_refuses_with_what_to_narrow(monkeypatch: pytest.MonkeyPatch) -> None:
    # A budget a five-hundredth of the real one, which Llama 3.1 70B's plan (about 0.52M units) passes.
    monkeypatch.setattr(budget, "WORK_BUDGET", 20_000)
    with pytest.raises(WorkBudgetExceeded, match=r"passed its work budget .* pin tp, pp or cp \(--tp --pp --cp\); "
                                                  r"lower max_gpus \(now 200,000\)$"):
        plan("llama-3.1-70b")
    # Pinned degrees are not offered again, a list of GPU types is, and a given GPU count is.
    with pytest.raises(WorkBudgetExceeded, match=r"pin pp or cp .*; give one GPU type \(--gpu\) instead of 2; "
                                                  r"fewer gpus \(now 4,096\)$"):
        plan("llama-3.1-70b", tp=8, gpu="H100,H200", gpus=4096)
    # An MoE's expert parallelism is offered too, and one micro-batch size for "any".
    with pytest.raises(WorkBudgetExceeded, match=r"pin tp, pp, ep or cp \(--tp --pp --ep --cp\); one micro-batch "
                                                  r"size \(--micro-batch 1\) instead of 3;"):
        plan("mixtral-8x7b", micro_batch="any")


def _spent(call) -> tuple[object, int]:
    """call()'s answer and the work units its Budget spent."""
    spent: list[Budget] = []
    original = Budget.__init__

    def keep(self: Budget, *args: object, **kwargs: object) -> None:
        original(self, *args, **kwargs)  # type: ignore[arg-type]
        spent.append(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Budget, "__init__", keep)
        answer = call()
    assert len(spent) == 1
    return answer, spent[0].used


def test_the_frontier_refusal_names_the_cap_its_points_reached(monkeypatch: pytest.MonkeyPatch) -> None:
    whole, used = _spent(lambda: frontier("llama-3.1-70b", tokens="15T"))
    # Three fifths of what the whole frontier spends: past the groups' charge, short of the end.
    monkeypatch.setattr(budget, "FRONTIER_BUDGET", used * 3 // 5)
    with pytest.raises(WorkBudgetExceeded) as refused:
        frontier("llama-3.1-70b", tokens="15T")
    message = str(refused.value)
    assert "the frontier's first" in message, message
    reached = int(message.split("max_gpus ")[1].split(" draws")[0].replace(",", ""))
    assert whole[0].gpus <= reached < whole[-1].gpus, message  # type: ignore[index]
    # The points up to the named cap are the whole frontier's, and the narrowed frontier is them.
    monkeypatch.undo()  # the real budget again
    assert [p.gpus for p in frontier("llama-3.1-70b", tokens="15T", max_gpus=reached)] == \
        [p.gpus for p in whole if p.gpus <= reached]  # type: ignore[attr-defined]


def test_the_frontier_chain_charges_each_queue_entry_and_plans_do_not(monkeypatch: pytest.MonkeyPatch) -> None:
    # QUEUE_US per entry of faster()'s queue taken up (apsi.training.frameworks.budget): the frontier with the charge
    # spends more than without it by a whole number of entries, and the points are the same; a
    # plan's walk has no such queue and spends the same either way.
    whole, used = _spent(lambda: frontier("llama-3.1-70b", tokens="15T"))
    _, plan_used = _spent(lambda: plan("llama-3.1-70b"))
    per_entry = budget.QUEUE_US
    monkeypatch.setattr(budget, "QUEUE_US", 0)
    bare, bare_used = _spent(lambda: frontier("llama-3.1-70b", tokens="15T"))
    entries, rest = divmod(used - bare_used, per_entry)
    assert rest == 0 and entries > len(whole), (used, bare_used)  # type: ignore[arg-type]
    assert [p.gpus for p in bare] == [p.gpus for p in whole]  # type: ignore[attr-defined]
    assert _spent(lambda: plan("llama-3.1-70b"))[1] == plan_used


def test_an_ordinary_plan_is_not_refused_and_spends_a_small_share() -> None:
    p, used = _spent(lambda: plan("llama-3.1-70b"))
    assert p.gpus > 0  # type: ignore[attr-defined]
    # Under a tenth of the budget (docs/benchmarks.md (u): about 0.52M of 11M units, nearly
    # all of it the 3,175 groups of configurations).
    assert 0 < used < budget.WORK_BUDGET / 10, used


def test_a_runner_up_past_the_budget_leaves_the_plan_standing(monkeypatch: pytest.MonkeyPatch) -> None:
    # Llama 3.1 70B on H100 or H200: its walk spends about 1.007M units and the runner-up's walk on
    # the other type (explain) about 24k more (both measured here). With a budget between the two the
    # plan is the same, its Why line too, and a Note says why it has no runner-up.
    bare, used = _spent(lambda: plan("llama-3.1-70b", gpu="H100,H200"))
    explained, all_used = _spent(lambda: plan("llama-3.1-70b", gpu="H100,H200", explain=True))
    assert explained.gpu_choice.runner_up is not None and all_used > used  # type: ignore[attr-defined]
    monkeypatch.setattr(budget, "WORK_BUDGET", used + (all_used - used) // 2)
    p = plan("llama-3.1-70b", gpu="H100,H200", explain=True)
    assert (p.gpu, p.gpus, p.days, p.why) == (bare.gpu, bare.gpus, bare.days, explained.why)  # type: ignore[attr-defined]
    assert p.gpu_choice is not None and p.gpu_choice.runner_up is None
    assert p.notes[-1].startswith("no runner-up on another GPU type: its walk would pass what this plan's walk left "
                                  "of the work budget (") and p.notes[-1].endswith("fewer of the 2 types (--gpu) to see it")
    assert not any(n.startswith("no runner-up") for n in explained.notes)  # type: ignore[attr-defined]


def test_the_frontier_keeps_its_cap_limit() -> None:
    # The frontier's own cap (MAX_FRONTIER_GPUS) is checked before the budget's dp range.
    with pytest.raises(LayoutError, match="drawn up to 250,000 GPUs"):
        frontier("llama-3.1-8b", max_gpus=1_000_000)


def test_the_probe_harness_times_and_classifies_a_process() -> None:
    # benchmarks/probes.py, which docs/benchmarks.md (u) is taken with: an answer, a one-line
    # refusal (exit 2) with its line, and --check's verdict on a probe over the limit.
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import probes

    answer = probes.run("serve", ["serve", "llama-3.1-8b"], timeout=30, memory_gib=6)
    assert (answer.outcome, answer.code) == ("answer", 0), answer
    assert 0 < answer.cpu_seconds and 10 < answer.peak_mib < 6 * 1024, answer
    refused = probes.run("batch", ["plan", "1T", "--batch", "1T"], timeout=30, memory_gib=6)
    assert (refused.outcome, refused.code) == ("refused", 2), refused
    assert refused.line.startswith("error: batch of 244,140,625 sequences is beyond"), refused
    assert probes.failures([answer, refused], limit=answer.seconds * 10) == []
    assert probes.failures([answer, refused], limit=0.0) == [answer, refused]
    assert all(argv and name for name, argv in probes.PROBES) and len(probes.PROBES) >= 46


def test_the_splits_of_ten_thousand_layers_are_refused_before_they_are_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every pp up to the layers with every vpp up to (layers + 2) / pp: about 10,000^2 ln(10,000) / 2
    # candidate chunks (apsi.training.frameworks.budget.split_units, 61.7M units; with vpp up to 8,
    # 36 x 10,000^2 / 2, 225M units, ran a minute and 3.4 GiB to an answer); the charge comes
    # first, so the configurations are never made.
    import apsi.training.frameworks.space as space

    def never(*args, **kwargs):
        raise AssertionError("the configurations were made")

    monkeypatch.setattr(space, "_configs", never)
    monkeypatch.setattr(space, "_FAMILIES", {})
    assert budget.split_units(10_000, {}) == 61_692_375
    assert budget.split_units(61, {}) < budget.WORK_BUDGET / 1000  # DeepSeek-V3's 61 layers: a trifle
    with pytest.raises(WorkBudgetExceeded, match=r"pin tp, pp or cp") as refused:
        plan("175B", layers=10_000)
    # Refused before the work starts, so the message says what it would have cost, not that it
    # spent the budget: 61,692,375 units x UNIT_SECONDS (0.35 us) = 22 CPU seconds.
    assert "would pass its work budget" in str(refused.value)
    assert "listing the pipeline splits of 10,000 layers alone would take about 22 CPU seconds" in str(refused.value)


def test_a_narrow_175b_is_refused_before_its_splits_are_listed() -> None:
    # `apsi plan 175B --max-gpus 256 --kv-heads 4 --width 512` ran past 2 minutes: 512 wide, the
    # shape rule gives 175e9 / (12 x 512^2) = 55,631 layers, whose pipeline splits alone would take
    # about 784 CPU seconds (apsi.training.frameworks.budget.split_units); it is refused before they are listed.
    with time_limit(60):
        with pytest.raises(WorkBudgetExceeded, match=r"listing the pipeline splits of 55,631 layers alone would take "
                                                     r"about 784 CPU seconds"):
            plan("175B", max_gpus=256, kv_heads=4, width=512)


@pytest.mark.parametrize("units", ["EXACT_US", "TAIL_US"])
def test_each_duration_asked_and_each_tail_floor_is_charged(monkeypatch: pytest.MonkeyPatch, units: str) -> None:
    # The cost walk weighs a configuration's later dps one by one (walk.cheapest): Qwen3-30B-A3B at a
    # 1-token seq with objective cost ran 77 CPU seconds past a budget that said about 11, its
    # durations uncharged; and nearly a million uncharged tail floors took objective days to 16.5 s.
    # Each is charged now: the plan spends more by a whole number of them, and answers the same.
    # (The dp listings' charge, once per question, can differ between a process's first question and
    # its second by what the first listed: left out of both.)
    monkeypatch.setattr(budget, "DP_US", 0)
    whole, used = _spent(lambda: plan("deepseek-v3", objective="cost"))
    monkeypatch.setattr(budget, units, 0)
    bare, bare_used = _spent(lambda: plan("deepseek-v3", objective="cost"))
    count, rest = divmod(used - bare_used, getattr(budget, units) or {"EXACT_US": 80, "TAIL_US": 25}[units])
    assert rest == 0 and count > 0, (used, bare_used)
    assert bare == whole
