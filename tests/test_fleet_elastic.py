"""Elastic runs (apsi.fleets.elastic): an outage absorbed by a run that may change its GPUs at
checkpoint boundaries where the same run, fixed, is late; each segment schedule checked against
the rules directly (GPUs per day, the work done, the restart charged)."""

from __future__ import annotations

import pytest

from apsi.fleets.elastic import RESTART_MINUTES_WHOLE, SEGMENTS
from apsi.fleets.program import schedule
from apsi.fleets.tables import Option, Program, ProgramRun


def outage(elastic: bool, deadline: int = 13) -> Program:
    """8 GPUs of one type over 30 days, 4 of them out on days 5 to 7; one run due on day 13 that
    takes 10 days on 8 GPUs or 20 on 4."""
    capacity = tuple(4 if 5 <= d < 8 else 8 for d in range(30))
    run = ProgramRun(name="train", options=[Option(gpu_type="H", gpus=4, days=20, cost=0),
                                            Option(gpu_type="H", gpus=8, days=10, cost=0)],
                     deadline=deadline, elastic=elastic)
    return Program(runs=[run], capacity={"H": capacity})


def work_done(p: Program, segments: list[tuple[int, int, int]]) -> float:
    """The share of the run's work its segments do: minutes / the option's minutes (its whole days'
    where it gives none), less the restart (RESTART_MINUTES_WHOLE) after each change, the rule
    apsi.fleets.elastic states."""
    total = 0.0
    for k, (o, _, days) in enumerate(segments):
        lost = RESTART_MINUTES_WHOLE if k else 0
        total += (days * 24 * 60 - lost) / p.runs[0].options[o].work_minutes
    return total


def test_an_outage_is_absorbed_by_an_elastic_run_where_a_fixed_one_is_late() -> None:
    fixed = schedule(outage(elastic=False), ("deadlines", "tardiness"))
    # Fixed: 8 GPUs cannot span the outage, so it starts on day 8 and ends on day 18 (5 days late);
    # on 4 GPUs it ends on day 20.
    assert fixed.status == "OPTIMAL" and [s.value for s in fixed.stages] == [1, 5]
    assert (fixed.choice, fixed.start) == ([1], [8])
    p = outage(elastic=True)
    elastic = schedule(p, ("deadlines", "tardiness", "makespan"))
    # (then the fewest restarts among those plans: two, one at each change)
    assert elastic.status == "OPTIMAL" and [s.value for s in elastic.stages] == [0, 0, 12, 2]
    # By hand: 5 days on 8 GPUs (half the work), the outage's 3 days on 4 (3/20 of it, less a
    # restart), then 8 GPUs again: the 0.35 left and a restart take 3.5 days and 19 minutes, so 4
    # whole days: the run ends on day 12, a day before its deadline.
    segments = elastic.segments[0]
    assert 1 < len(segments) <= SEGMENTS
    assert work_done(p, segments) >= 1.0 - 1e-12
    assert segments[0][1] == elastic.start[0] == 0 and segments[-1][1] + segments[-1][2] == 12
    used = [0] * p.horizon_days
    for (o, first, days), following in zip(segments, segments[1:] + [None]):
        assert following is None or following[1] >= first + days  # in order, none overlapping
        for d in range(first, first + days):
            used[d] += p.runs[0].options[o].gpus
    assert all(u <= c for u, c in zip(used, p.capacity["H"]))


def test_an_elastic_run_without_an_outage_is_its_fixed_self() -> None:
    # With 8 GPUs every day a change would only cost a restart: one segment, 10 days on 8 GPUs.
    p = outage(elastic=True).model_copy(update={"capacity": {"H": (8,) * 30}})
    s = schedule(p, ("deadlines", "tardiness", "makespan"))
    assert s.status == "OPTIMAL" and s.segments == {0: [(1, 0, 10)]}
    assert [(st.name, st.value) for st in s.stages[-2:]] == [("makespan", 10), ("restarts", 0)]


def test_an_elastic_run_with_room_ends_as_soon_as_on_one_segment() -> None:
    # No deadline and nothing to pay: every placement is optimal to the stages, and the program left
    # elastic runs where it put them, so one could end weeks late in needless segments (two end to
    # end on one option, a restart lost). Finishing early now takes one segment on one option where
    # that ends no later on no more GPU-days: here 8 GPUs from day 0, ending on day 10.
    from apsi.fleets.early import finish

    p = outage(elastic=True).model_copy(update={"capacity": {"H": (8,) * 30}})
    p = p.model_copy(update={"runs": [p.runs[0].model_copy(update={"deadline": None})]})
    # As a solve may leave it: 4 GPUs on days 3 to 7, then 8 GPUs from day 12 to 19 (ends day 20).
    segments = {0: [(0, 3, 5), (1, 12, 8)]}
    done = finish(p, [0], [3], segments)
    assert (done["choice"], done["start"], segments) == ([1], [0], {0: [(1, 0, 10)]})
    # Where no single option ends as soon (the GPUs are out), the segments stay.
    short = p.model_copy(update={"capacity": {"H": tuple(4 if 5 <= d < 8 else 8 for d in range(30))}})
    kept = {0: [(1, 0, 5), (0, 5, 3), (1, 8, 6)]}
    finish(short, [1], [0], kept)
    assert kept == {0: [(1, 0, 5), (0, 5, 3), (1, 8, 6)]}


def test_the_restart_is_an_interruption_of_the_goodput_model() -> None:
    # apsi.model.goodput: restart and reload 3.6 min plus half a 30-minute interval = 18.6 min, whole.
    assert RESTART_MINUTES_WHOLE == pytest.approx(19, abs=0)


def _fleet(elastic: bool) -> dict:
    """1,024 H100, 512 of them out on days 5 to 7 (two supplies that end and come back); a 13B run
    on 4T tokens, due by day 15, whose fastest option holds 944 H100 for 11 whole days (10.91), and
    1,024 for 10.06 days, 11 whole too (its frontier under the reference arithmetic): a fixed run
    keeps the first, an elastic one both (the second does more of the work in the days it holds)."""
    return {"defaults": {"framework": "reference"},
            "fleet": {"start": "2026-07-01", "horizon_days": 60,
                      "gpus": {"H100": [{"count": 512}, {"count": 512, "until": "2026-07-05"},
                                        {"count": 512, "from": "2026-07-09"}]}},
            "runs": [{"name": "a", "params": "13B", "tokens": "4T", "deadline": 15, "elastic": elastic}]}


def test_a_fleet_outage_is_absorbed_by_an_elastic_run(tmp_path) -> None:
    import json

    import apsi
    from apsi.fleets.render import render

    fixed = apsi.fleet(_fleet(False), jobs=1).runs[0]
    # Fixed on 944 H100 it waits for the GPUs back (day 8) and ends 4 days late; fewer GPUs take longer.
    assert (fixed.start_day, fixed.days, fixed.late_days, fixed.segments) == (8, 11, 4, [])
    r = apsi.fleet(_fleet(True), jobs=1)
    row = r.runs[0]
    assert r.status == "OPTIMAL" and row.late_days == 0 and len(row.segments) > 1
    # No segment holds more H100 than are there on any of its days (512 on days 5 to 7).
    for x in row.segments:
        assert all(x.gpus <= (512 if 5 <= d < 8 else 1024) for d in range(x.start_day, x.start_day + x.days))
    assert row.segments[0].start_day == row.start_day and row.start_day + row.days <= 15
    # Two segments end to end are on different options (the same one again only after a pause).
    for a, b in zip(row.segments, row.segments[1:]):
        assert a.start_day + a.days < b.start_day or (a.gpu_type, a.gpus) != (b.gpu_type, b.gpus)
    assert "elastic:" in row.why and json.loads(render(r, "json"))["runs"][0]["segments"][0]["gpus"] > 0
    # The CSV's gpus and gpu_type are the first segment's: its segments column lists each.
    import csv
    import io

    cells = list(csv.DictReader(io.StringIO(render(r, "csv"))))[0]
    assert cells["segments"] == "; ".join(f"{x.gpus} {x.gpu_type} from {x.start.isoformat()} for {x.days} "
                                          f"day{'s' if x.days != 1 else ''}" for x in row.segments)
    assert int(cells["gpus"]) == row.segments[0].gpus
    pytest.importorskip("matplotlib")
    from apsi.fleets.plot import fleet_plot

    fleet_plot(r, tmp_path / "elastic.svg")
    assert (tmp_path / "elastic.svg").stat().st_size > 0


def test_a_replan_keeps_an_elastic_runs_saved_segments(tmp_path) -> None:
    # Re-planned from a saved answer, an elastic run that had started was pinned on its first
    # segment's GPUs for the whole run, which the outage's inventory cannot hold: the re-plan was
    # refused ("more than the fleet's 512 H100"). It keeps its saved segments begun before the
    # re-plan's day (the work left, planned again on the same inventory, falls where it was), and
    # the runs after the re-plan's day are planned around them.
    import apsi

    data = _fleet(True)
    data["runs"].append({"name": "b", "params": "1B", "tokens": "100B"})
    first = apsi.fleet(data, jobs=1)
    row = first.runs[0]
    assert len(row.segments) > 1 and row.segments[0].gpus > 512
    saved = tmp_path / "answer.json"
    saved.write_text(first.model_dump_json(), encoding="utf-8")
    since = row.segments[1].start  # after the first segment began: the run has started
    data["runs"].append({"name": "c", "params": "1B", "tokens": "100B"})
    again = apsi.fleet(data, jobs=1, since=since.isoformat(), answer=str(saved))
    kept = again.runs[0]
    assert [(x.gpu_type, x.gpus, x.start_day, x.days) for x in kept.segments] == \
        [(x.gpu_type, x.gpus, x.start_day, x.days) for x in row.segments]
    assert "already started: its segments before the re-plan's day kept" in kept.why
    new = {r.name: r for r in again.runs}["c"]
    assert new.scheduled and new.start >= since
    # No day holds more H100 than are there (512 on days 5 to 7, 1,024 otherwise).
    for day in range(again.horizon_days):
        held = sum(x.gpus for r in again.runs for x in r.segments if x.start_day <= day < x.start_day + x.days)
        held += sum(r.gpus or 0 for r in again.runs if not r.segments and r.start_day is not None and r.days
                    and r.start_day <= day < r.start_day + r.days)
        assert held <= (512 if 5 <= day < 8 else 1024), day


def test_elastic_must_be_true_or_false() -> None:
    import apsi
    from apsi.errors import ApsiError

    data = _fleet(True)
    data["runs"][0]["elastic"] = "yes"
    with pytest.raises(ApsiError, match="elastic must be true or false"):
        apsi.fleet(data, jobs=1)


def test_an_elastic_run_that_changes_type_is_priced_and_shown_segment_by_segment() -> None:
    # 512 H100 until day 30 and 256 from day 45, 128 B200 from day 19 (catalog prices $2.69 and $5.98
    # per GPU-hour), and a 13B run due on day 50 that only H100 may hold: the 30B run starts on the
    # H100 and moves to the B200. Its worth was every GPU-hour at the H100's price and its row said
    # "H100 512" for the whole run.
    import apsi
    from apsi.catalog import find_gpu
    from apsi.fleets.render import render

    spec = {"defaults": {"framework": "reference"},
            "fleet": {"start": "2026-07-01", "horizon_days": 120,
                      "gpus": {"H100": [{"count": 512, "until": "2026-07-31"}, {"count": 256, "from": "2026-08-15"}],
                               "B200": {"count": 128, "from": "2026-07-20"}},
                      "objective": ["deadlines", "tardiness", "makespan", "cost"]},
            "runs": [{"name": "big", "params": "30B", "tokens": "2T", "deadline": "2026-09-15", "elastic": True},
                     {"name": "mid", "params": "13B", "tokens": "1T", "deadline": "2026-08-20", "gpu_types": ["H100"]}]}
    row = apsi.fleet(spec, jobs=1).runs[0]
    types = [x.gpu_type for x in row.segments]
    assert len(set(types)) == 2, row.segments  # the case: a change of type
    price = {t: find_gpu(t).price_usd_per_hour for t in types}
    assert row.cost_usd == pytest.approx(sum(x.gpus * x.days * 24 * price[x.gpu_type] for x in row.segments),
                                         rel=1e-12)
    line = next(x for x in render(apsi.fleet(spec, jobs=1), "table").splitlines() if x.startswith("big "))
    assert " -> ".join(dict.fromkeys(types)) in line
    assert " -> ".join(f"{x.gpus:,}" for x in row.segments) in line


@pytest.mark.parametrize(("since", "expected"), [
    # Day 2: the first segment is running; it runs on, one segment of 11 whole days (10.06 on 1,024).
    ("2026-07-03", [(1024, 0, 11)]),
    # Day 5: the first (days 0 to 3, 4 x 1,440 / 14,487 minutes of the work) ended before it; the
    # rest, 60.2% of 14,487 minutes and a restart's 19, is 6.1 days: 7 whole from day 5.
    ("2026-07-06", [(1024, 0, 4), (1024, 5, 7)]),
])
def test_a_replan_plans_an_elastic_runs_work_left_again(since: str, expected: list) -> None:
    # _fleet's run, elastic, pauses on its 1,024 H100 through the outage (days 4 to 7) and ends on
    # day 15. Re-planned with the outage called off, it had kept every saved segment, the pause
    # too, and still ended on day 15. The segments begun before the re-plan's day are kept, the one
    # running then runs on, and the work left is planned again (apsi.fleets.elastic's work rule).
    import apsi

    first = apsi.fleet(_fleet(True), jobs=1)
    saved = first.runs[0]
    assert [(x.gpus, x.start_day, x.days) for x in saved.segments] == [(1024, 0, 4), (1024, 8, 7)]
    data = _fleet(True)
    data["fleet"]["gpus"]["H100"] = 1024
    again = apsi.fleet(data, jobs=1, since=since, answer=first.model_dump(mode="json")).runs[0]
    assert [(x.gpus, x.start_day, x.days) for x in again.segments] == expected
    assert again.start_day + again.days == expected[-1][1] + expected[-1][2] < 15 and again.late_days == 0


@pytest.mark.parametrize(("fixed", "resumed", "finished_as"), [
    ([(1, 0, 3)], 3, [(1, 0, 10)]),  # running on the re-plan's day: it runs on to its 10 days
    ([(1, 0, 3)], 5, [(1, 0, 3), (1, 5, 8)]),  # ended before it: 7 days left and a restart (19 min), 8 whole
])
def test_a_replanned_elastic_run_does_the_work_its_kept_segments_leave(fixed, resumed, finished_as) -> None:
    # outage()'s run already running (a re-plan of a saved answer), 8 GPUs with no outage: the work
    # its kept segments leave is done, by list scheduling's rule (elastic.finished) and in the
    # program's schedule, which keeps them and starts nothing new before the re-plan's day.
    from apsi.fleets.elastic import finished

    p = outage(True)
    run = p.runs[0].model_copy(update={"fixed": fixed, "resumed": resumed, "started": 0})
    p = p.model_copy(update={"runs": [run], "capacity": {"H": (8,) * 30}})
    assert finished(run) == finished_as and work_done(p, finished_as) >= 1
    s = schedule(p, ("deadlines", "makespan"), time_limit_s=20)
    assert s.status == "OPTIMAL" and s.stages[0].value == 0
    got = s.segments[0]
    assert work_done(p, got) >= 1 and got[0][:2] == fixed[0][:2] and got[0][2] >= fixed[0][2]
    assert all(first >= resumed for _, first, _ in got[len(fixed):])
    assert s.stages[1].value == finished_as[-1][1] + finished_as[-1][2]  # it ends where the rule does


def test_a_replan_with_nothing_changed_keeps_an_elastic_runs_plan() -> None:
    # Two 13B runs, both elastic, one after the other on 288 H100 (tests/test_fleet_buy.py's _data
    # owned 288): re-planned on the same inventory from days 1 to 7, the running one had been moved
    # into pauses and restarts its saved plan did not have (the stages do not weigh them). The
    # restarts stage (apsi.fleets.program) keeps the fewest: each run on its one segment.
    import apsi
    from tests.test_fleet_buy import _data

    data = _data(h100=288, buy=False)
    for run in data["runs"]:
        run["elastic"] = True
    # Both orders of the two 13B runs: listed b first, the re-plan had put c (after b, on 24 GPUs)
    # between them and a a day later, where the stages tied; the re-plan's last stage, moved
    # (apsi.fleets.replan.moved_from_saved), keeps the saved plan among equal ones.
    for runs in (data["runs"], [data["runs"][1], data["runs"][0], data["runs"][2]]):
        data = dict(data, runs=runs)
        first = apsi.fleet(data, jobs=1)
        saved = {r.name: [(x.gpus, x.start_day, x.days) for x in r.segments] for r in first.runs}
        assert all(len(segs) == 1 for segs in saved.values()) and first.late_runs == 0
        for day in (1, 4, 7):
            again = apsi.fleet(data, jobs=1, since=f"2026-07-{1 + day:02d}", answer=first.model_dump(mode="json"))
            assert {r.name: [(x.gpus, x.start_day, x.days) for x in r.segments] for r in again.runs} == saved, day
            assert again.late_runs == 0
            assert [(s.name, s.value) for s in again.stages if s.name in ("restarts", "moved")] == [
                ("restarts", 0), ("moved", 0)]


def test_a_replanned_elastic_run_may_take_its_other_options() -> None:
    # _fleet's run due on day 14 shrank to 176 H100 through the outage (944 on either side). Re-
    # planned on day 2 with nothing changed, its options had been cut to its kept segment's (944),
    # so it waited the outage out and ended a day late. (Due on day 13 now: a segment's work counts
    # its option's exact minutes, and by day 14 two segments on 1,024 do it, with a pause.)
    import apsi

    data = _fleet(True)
    data["runs"][0]["deadline"] = 13
    first = apsi.fleet(data, jobs=1)
    assert first.late_runs == 0 and len(first.runs[0].segments) == 3
    again = apsi.fleet(data, jobs=1, since="2026-07-03", answer=first.model_dump(mode="json"))
    assert again.late_runs == 0 and again.runs[0].end <= first.runs[0].end


def test_list_scheduling_starts_a_run_after_a_resumed_one_ends() -> None:
    # A run after an elastic one already running started on the day its kept segment was cut
    # (the re-plan's), while the work it left held the GPUs to day 10 (early.ends_at).
    from apsi.fleets import program

    train = ProgramRun(name="train", options=[Option(gpu_type="H", gpus=4, days=20, cost=0),
                                              Option(gpu_type="H", gpus=8, days=10, cost=0)],
                       elastic=True, fixed=[(1, 0, 3)], resumed=3, started=0)
    after = ProgramRun(name="eval", options=[Option(gpu_type="B", gpus=1, days=1, cost=0)], after=[0])
    p = Program(runs=[train, after], capacity={"H": (8,) * 30, "B": (1,) * 30})
    choice, start = program.greedy(p)
    assert (choice, start) == ([1, 0], [0, 10])


def _shrinking() -> dict:
    """256 H100 to day 7 and from day 14, 64 throughout; an elastic 13B run on 1T due on day 11
    (2026-07-12), and a 3B run on 100B."""
    return {"defaults": {"framework": "reference"},
            "fleet": {"start": "2026-07-01", "horizon_days": 60,
                      "gpus": {"H100": [{"count": 256, "until": "2026-07-08"}, {"count": 256, "from": "2026-07-15"},
                                        {"count": 64}]}},
            "runs": [{"name": "a", "params": "13B", "tokens": "1T", "elastic": True, "deadline": "2026-07-12"},
                     {"name": "b", "params": "3B", "tokens": "100B"}]}


def test_a_segment_counts_its_options_exact_minutes() -> None:
    # 256 H100 to day 7 and from day 14, 64 throughout: a 13B run on 1T due on day 11 (2026-07-12).
    # 320 H100 take it in 8.05 days (the reference arithmetic's frontier), 9 whole like 288's 8.4:
    # 320 was dropped as no sooner in whole days, and 8 days on it counted 8/9 of the work, so the
    # run missed its deadline ("proved"). 8 x 1,440 minutes on 320 do 99.4% of it; the rest and a
    # restart fit a day on 64 (40.2 days for the whole), and b still runs.
    import apsi

    data = _shrinking()
    r = apsi.fleet(data, jobs=1)
    a = r.runs[0]
    assert r.late_runs == 0 and a.end.isoformat() <= "2026-07-12"
    assert [x.gpus for x in a.segments][0] == 320


def test_a_replan_with_nothing_changed_keeps_every_segment_of_a_running_elastic_run() -> None:
    # The fleet above, saved, then re-planned unchanged: a runs on 320 H100 then 64. Its first
    # segment is pinned from the re-plan's day (it started), and the moved stage had weighed only
    # that, so the second moved to 48 H100 with the stage at 0 "proved" and the Note saying it moved.
    # It now keeps every saved segment (Program.saved_segments).
    import apsi

    data = _shrinking()
    first = apsi.fleet(data, jobs=1)
    saved = {r.name: [(x.gpus, x.start_day, x.days) for x in r.segments] for r in first.runs}
    assert len(saved["a"]) == 2
    for since in ("2026-07-03", "2026-07-09"):
        again = apsi.fleet(data, jobs=1, since=since, answer=first.model_dump(mode="json"))
        assert {r.name: [(x.gpus, x.start_day, x.days) for x in r.segments] for r in again.runs} == saved, since
        assert [s.value for s in again.stages if s.name == "moved"] == [0] and "no run moved" in again.notes
