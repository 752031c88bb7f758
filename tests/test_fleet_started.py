"""Runs already running (a fleet run's `started:`) stay where they are when the fleet is planned
again: the program fixes their day and option (apsi.fleets.program), the greedy schedule places
them first, compaction leaves them, and the spec refuses a `started:` it cannot hold."""

from __future__ import annotations

import pytest

from apsi import ApsiError, fleet
from apsi.fleets import program
from apsi.fleets.tables import Option, Program, ProgramRun


def test_a_started_run_stays_on_its_day_though_an_earlier_one_is_free() -> None:
    # 16 GPUs for 12 days; "running" started on day 3 on 8 GPUs for 5 days. Every objective would
    # move it to day 0 (makespan, and compaction moves runs earlier); started, it stays on day 3,
    # and "other" (16 GPUs, 3 days) goes where the GPUs are whole: day 0 is too short (3 free days
    # before day 3), so day 8, after it.
    p = Program(runs=[ProgramRun(name="running", options=[Option(gpu_type="H", gpus=8, days=5, cost=40)], started=3),
                      ProgramRun(name="other", options=[Option(gpu_type="H", gpus=16, days=3, cost=48)])],
                capacity={"H": (16,) * 12})
    s = program.schedule(p, ("makespan", "cost"), time_limit_s=10.0)
    assert s.status == "OPTIMAL" and s.start == [3, 0] and s.choice == [0, 0]
    greedy = program.greedy(p)
    assert greedy[1][0] == 3
    # Without started, the same run goes to day 0 (so the test can fail).
    free = Program(runs=[p.runs[0].model_copy(update={"started": None}), p.runs[1]], capacity=p.capacity)
    assert program.schedule(free, ("makespan", "cost"), time_limit_s=10.0).start[0] != 3


def _data(deadline: str) -> dict:
    return {"fleet": {"start": "2026-07-01", "horizon_days": 120, "gpus": {"H100": 64}},
            "defaults": {"framework": "reference"},
            "runs": [{"name": "running", "params": "llama-3.2-1b", "tokens": "300B",
                      "started": {"date": "2026-07-10", "gpu": "H100", "gpus": 8}},
                     {"name": "next", "params": "llama-3.2-1b", "tokens": "300B", "deadline": deadline},
                     {"name": "third", "params": "llama-3.2-3b", "tokens": "300B"}]}


def test_a_replan_never_moves_a_started_run() -> None:
    # The same fleet planned with the other runs' deadline loose and tight, and with cost first:
    # the started run keeps its day, GPU type and GPUs each time.
    for deadline, objective in (("2026-10-01", None), ("2026-07-03", None), ("2026-07-03", ["cost"])):
        data = _data(deadline)
        if objective:
            data["fleet"]["objective"] = objective
        r = fleet(data, jobs=1)
        run = next(x for x in r.runs if x.name == "running")
        assert (run.start.isoformat(), run.gpu_type, run.gpus) == ("2026-07-10", "H100", 8)
        assert run.why.startswith("already started: it stays where it started, on 8 H100")


@pytest.mark.parametrize("started, message", [
    ({"date": "2026-07-10", "gpu": "H100", "gpus": 12}, "started on 12 H100, not whole nodes of 8: give the GPUs it "
                                                         r"holds, whole nodes \(its H100 options hold 8, 16, 24, 32, "
                                                         r"40 GPUs\)$"),
    ({"date": "2026-07-10", "gpu": "H100", "gpus": 72}, "started on 72 H100, more than the fleet's 64 H100 on "
                                                         "2026-07-10, a day it runs"),
    ({"date": "2026-07-10", "gpu": "B200", "gpus": 8}, "started gpu: unknown GPU type of the run"),
    ({"date": "2026-07-10", "gpus": 8}, r"started has no gpu: give the day it started, its GPU type and GPUs"),
    # A YAML date was printed as Python's repr ({'date': datetime.date(2026, 7, 10), ...}): the key is named.
    ({"date": __import__("datetime").date(2026, 7, 10), "gpu": "H100"}, r"started has no gpus: give the day"),
    ({"date": "2026-07-10", "gpu": "H100", "gpus": 8, "node": 1}, r"started has 'node', not one of its keys"),
    (5, r"started must be the day it started, its GPU type and GPUs, such as .*, got 5$"),
    ({"date": "2027-07-10", "gpu": "H100", "gpus": 8}, "is past the horizon's last day"),
    ({"date": "2026-06-10", "gpu": "H100", "gpus": 8}, "is before the fleet's start"),
])
def test_a_started_it_cannot_hold_is_one_line(started: dict, message: str) -> None:
    data = _data("2026-10-01")
    data["runs"][0]["started"] = started
    with pytest.raises(ApsiError, match=message) as err:
        fleet(data, jobs=1)
    assert "\n" not in str(err.value)


def test_a_run_started_on_gpus_that_are_no_options_count_runs_as_plan_would_on_them() -> None:
    # The 1B run's options on H100 hold 8 to 40 GPUs: more nodes end no sooner in whole days. Started
    # on 48 (or 64) it was refused ("which none of its options holds ... whole nodes", though 48 is
    # six whole nodes), then run on the 40-GPU option's layout. On n nodes a run runs the fastest
    # layout within them (apsi.fleets.options.choices keeps that option for the count it holds), so
    # its layout and days are plan()'s on those GPUs.
    from apsi import plan

    plain = fleet(_data("2026-10-01"), jobs=1).runs[0]
    assert plain.gpus == 8
    for held in (40, 48, 64):
        data = _data("2026-10-01")
        data["runs"][0]["started"]["gpus"] = held
        run = fleet(data, jobs=1).runs[0]
        alone = plan("llama-3.2-1b", tokens="300B", gpus=held, framework="reference")
        assert (run.start.isoformat(), run.gpu_type, run.gpus) == ("2026-07-10", "H100", held)
        assert run.run_days == pytest.approx(alone.days, rel=1e-12)
        assert run.layout_text == f"TP1 x PP1 x DP{held}" and alone.layout.dp == held


def test_a_run_started_on_a_count_the_thinning_dropped_runs_on_it() -> None:
    # A 13B run started on 128 H100 ran TP 1 x PP 4 x DP 28 (112 GPUs, 17 days), the largest option
    # the thinning kept within 128; apsi plan 13B --tokens 1T --gpus 128 runs TP 1 x PP 2 x DP 64 in
    # 14.4 days, and so does the fleet now.
    from apsi import plan

    data = {"fleet": {"start": "2026-07-01", "horizon_days": 60, "gpus": {"H100": 256}},
            "runs": [{"name": "a", "params": "13B", "tokens": "1T",
                      "started": {"date": "2026-07-01", "gpu": "H100", "gpus": 128}}]}
    run = fleet(data, jobs=1).runs[0]
    alone = plan("13B", tokens="1T", gpus=128)
    assert (run.gpus, alone.gpus) == (128, 128)
    assert run.run_days == pytest.approx(alone.days, rel=1e-9)
    assert run.layout_text == f"TP{alone.layout.tp} x PP{alone.layout.pp} x DP{alone.layout.dp}"


def _saved(tmp_path):
    """The fleet of _data with nothing started, its plan, and that plan saved as apsi fleet --json
    writes it (the answer a re-plan reads)."""
    data = _data("2026-10-01")
    del data["runs"][0]["started"]
    first = fleet(data, jobs=1)
    saved = tmp_path / "answer.json"
    saved.write_text(first.model_dump_json(), encoding="utf-8")
    return data, first, saved


def test_a_replan_from_a_saved_answer_keeps_what_started_before_the_day(tmp_path) -> None:
    # Plan, save the answer as apsi fleet --json writes it, then re-plan from the day after the
    # first run started with "third" suddenly due early: whatever the saved plan started before
    # that day stays (day, GPU type, GPUs); the notes say so and list what moved.
    import datetime as dt
    import subprocess
    import sys

    data, first, saved = _saved(tmp_path)
    since = min(r.start for r in first.runs if r.start is not None) + dt.timedelta(days=1)
    data["runs"][2]["deadline"] = (since + dt.timedelta(days=3)).isoformat()
    again = fleet(data, jobs=1, since=since.isoformat(), answer=str(saved))
    before = {r.name: r for r in first.runs}
    stayed = [r for r in again.runs if before[r.name].start is not None and before[r.name].start < since]
    assert stayed
    for r in stayed:
        b = before[r.name]
        assert (r.start, r.gpu_type, r.gpus) == (b.start, b.gpu_type, b.gpus)
        assert r.why.startswith("already started")
    # Re-planned after every run ended, each one ran there: said so (it read "already started").
    last = max(r.end for r in first.runs if r.end is not None) + dt.timedelta(days=1)
    done = fleet(_data("2026-10-01") | {"runs": data["runs"]}, jobs=1, since=last.isoformat(), answer=str(saved))
    assert all(r.why == f"already ran: it ended on {r.end}, before the re-plan's {last}" for r in done.runs)
    assert any(n.startswith(f"re-planned from {since}: {len(stayed)} run") for n in again.notes)
    assert any(n.startswith("moved: ") or n == "no run moved" for n in again.notes)
    # The command: --since needs --from, and a file that is not a plan's JSON is one line.
    spec = tmp_path / "fleet.json"
    import json

    spec.write_text(json.dumps(data), encoding="utf-8")
    for extra, message in ((["--since", since.isoformat()], "--since DATE and --from FILE go together"),
                           (["--since", since.isoformat(), "--from", str(spec)], "is not a fleet plan's JSON"),
                           (["--since", "2031-01-01", "--from", str(saved)], "is outside the fleet's horizon")):
        done = subprocess.run([sys.executable, "-m", "apsi", "fleet", str(spec), *extra], capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1, \
            done.stderr


def test_a_replan_starts_no_run_before_its_day(tmp_path) -> None:
    # A run new to the fleet, and the runs the saved plan had not started by the re-plan's day, start
    # on that day at the earliest, though the GPUs are free before it (a run that ran there was left
    # out of the file): they had been placed on the horizon's first day, in the past.
    import datetime as dt

    data, first, saved = _saved(tmp_path)
    since = max(r.start for r in first.runs if r.start is not None) + dt.timedelta(days=1)
    fewer = {**data, "runs": data["runs"][1:] + [{"name": "new", "params": "llama-3.2-1b", "tokens": "100B"}]}
    again = fleet(fewer, jobs=1, since=since.isoformat(), answer=str(saved))
    started = {r.name for r in first.runs if r.start is not None and r.start < since}
    for r in again.runs:
        assert r.scheduled, r.name
        if r.name in started:
            assert r.start == {x.name: x for x in first.runs}[r.name].start
        else:
            assert r.start is not None and r.start >= since, (r.name, r.start, since)
    assert {r.name for r in again.runs} - started == {"new"}
    # Without the re-plan the new run takes the horizon's first day (so the test can fail).
    assert {r.name: r for r in fleet(fewer, jobs=1).runs}["new"].start < since


def test_a_replan_from_another_fleets_answer_is_refused_and_a_run_gone_is_named(tmp_path) -> None:
    # An answer that plans none of the fleet's runs was taken: its runs that had started were
    # dropped without a word and their GPUs planned as free.
    import datetime as dt

    _, first, saved = _saved(tmp_path)
    since = (max(r.start for r in first.runs if r.start is not None) + dt.timedelta(days=1)).isoformat()
    other = _data("2026-10-01")
    for run in other["runs"]:
        run["name"] = "other-" + run["name"]
    with pytest.raises(ApsiError, match=r"^the saved fleet answer plans none of this fleet's runs \(it plans "
                                        r"'running', 'next', 'third'\): re-plan from an answer of this fleet$"):
        fleet(other, jobs=1, since=since, answer=str(saved))
    # One run left out of the file: it is named, and its GPUs are free.
    fewer = _data("2026-10-01")
    del fewer["runs"][0]["started"]
    fewer["runs"] = fewer["runs"][1:]
    again = fleet(fewer, jobs=1, since=since, answer=str(saved))
    assert (f"the saved answer started 'running' before {since}, and this fleet has no such run: its GPUs are "
            "planned as free") in again.notes


@pytest.mark.parametrize("edit, message", [
    (dict(start=None), "the saved fleet answer's run 'running' is scheduled but has no start: give apsi fleet FILE "
                       "--json's output as it was written"),
    (dict(start_day=50), "the saved fleet answer's run 'running' starts on {start} but at day 50 of a fleet from "
                         "2026-07-01"),
    (dict(gpus="lots"), "the saved fleet answer is not a fleet plan's JSON (apsi fleet FILE --json): runs[0].gpus: "
                        "Input should be a valid integer"),
    (dict(gpu_type="B200"), "run 'running' started on {gpus} B200, and none of its options is on B200 (they are on H100): "
                            "give the GPU type it runs on"),
])
def test_a_hand_edited_saved_answer_is_one_line_naming_the_run_or_field(edit: dict, message: str) -> None:
    # A start of null was pinned at its start_day and reported as moved "from None"; a field of the
    # wrong type was reported as "1 validation error for FleetResult", naming nothing.
    import datetime as dt

    data = _data("2026-10-01")
    del data["runs"][0]["started"]
    first = fleet(data, jobs=1).model_dump(mode="json")
    row = first["runs"][0]
    assert row["name"] == "running"
    since = dt.date.fromisoformat(row["start"]) + dt.timedelta(days=2)
    message = message.format(start=row["start"], gpus=row["gpus"])
    row.update(edit)
    with pytest.raises(ApsiError) as err:
        fleet(data, jobs=1, since=since.isoformat(), answer=first)
    assert str(err.value).startswith(message) and "\n" not in str(err.value), str(err.value)


def test_a_saved_answer_that_is_another_commands_json_is_named(tmp_path) -> None:
    # --from a training plan said "the saved fleet answer is not a fleet plan's JSON ...: status:
    # Field required", naming neither the file nor what it held.
    from apsi import plan

    saved = tmp_path / "plan.json"
    saved.write_text(plan("7B", framework="reference").model_dump_json(), encoding="utf-8")
    with pytest.raises(ApsiError, match=rf"^the saved fleet answer {saved} is not a fleet plan's JSON \(apsi fleet "
                                        r"FILE --json\): it is a training plan \(apsi plan --json\)$"):
        fleet(_data("2026-10-01"), jobs=1, since="2026-07-15", answer=str(saved))


def test_an_elastic_run_already_running_pauses_through_an_outage() -> None:
    # An elastic run started on 944 H100 was refused ("more than the fleet's 512 H100 on 2026-07-06,
    # a day it runs"): its room was checked over its whole option as if it could not pause, where
    # the same run not yet started pauses through the outage and meets its deadline. It holds its
    # GPUs on the day it started; after it, the program pauses and resumes it.
    data = {"defaults": {"framework": "reference"},
            "fleet": {"start": "2026-07-01", "horizon_days": 60, "time_limit_s": 20,
                      "gpus": {"H100": [{"count": 512}, {"count": 512, "until": "2026-07-05"},
                                        {"count": 512, "from": "2026-07-09"}]}},
            "runs": [{"name": "a", "params": "13B", "tokens": "4T", "deadline": 15, "elastic": True,
                      "started": {"date": "2026-07-01", "gpu": "H100", "gpus": 944}}]}
    r = fleet(data, jobs=1)
    run = r.runs[0]
    assert run.scheduled and run.start.isoformat() == "2026-07-01" and run.gpus == 944 and run.late_days == 0
    # Not on a day of the outage (2026-07-06 to 2026-07-08), where 512 H100 are there.
    assert all(s.end.isoformat() < "2026-07-06" or s.start.isoformat() > "2026-07-08" for s in run.segments)


def test_a_replan_notes_a_run_whose_end_or_segments_changed() -> None:
    # An elastic run re-planned from 144 then 168 then 264 H100, ending on its deadline, onto 144 then
    # 240 H100, a day late: the note compared only the start, GPU type and GPUs, and said "no run moved".
    import datetime as dt

    from apsi.fleets.replan import moved
    from apsi.fleets.result import FleetResult, FleetRow, Segment

    def row(end: str, held: list[int]) -> FleetRow:
        days = [dt.date(2026, 7, 1) + dt.timedelta(days=5 * i) for i in range(len(held) + 1)]
        segs = [Segment.model_construct(gpu_type="H100", gpus=g, layout_text="", start=days[i],
                                        end=days[i + 1] - dt.timedelta(days=1), start_day=5 * i, days=5)
                for i, g in enumerate(held)]
        return FleetRow.model_construct(name="b", scheduled=True, optional=False, gpu_type="H100", gpus=held[0],
                                        start=dt.date(2026, 7, 1), end=dt.date.fromisoformat(end), segments=segs)

    saved = FleetResult.model_construct(runs=[row("2026-07-15", [144, 168, 264])])
    again = FleetResult.model_construct(runs=[row("2026-07-16", [144, 240])])
    notes = moved(saved, again, dt.date(2026, 7, 3))
    assert notes[-1] == ("moved: b from 2026-07-01 on 144 H100 then 168 H100 then 264 H100, ending 2026-07-15 to "
                         "2026-07-01 on 144 H100 then 240 H100, ending 2026-07-16"), notes
    assert moved(saved, saved, dt.date(2026, 7, 3))[-1] == "no run moved"
    # A run saved elastic on one segment and re-planned plain (no segments) on the same GPUs and
    # days has not moved: the note had said "moved: ... to" the same place.
    one = row("2026-07-05", [144])
    plain = FleetRow.model_construct(**{**one.__dict__, "segments": []})
    assert moved(FleetResult.model_construct(runs=[one]), FleetResult.model_construct(runs=[plain]),
                 dt.date(2026, 7, 3))[-1] == "no run moved"


def test_runs_already_running_that_hold_more_together_than_there_is_are_one_line() -> None:
    # Each of two runs started on 240 of 256 H100 fits alone; together they were planned as an
    # infeasible fleet, "a and b cannot all be scheduled within the 60-day horizon", exit 3.
    data = {"defaults": {"framework": "reference"},
            "fleet": {"start": "2026-07-01", "horizon_days": 60, "gpus": {"H100": 256}, "time_limit_s": 10},
            "runs": [{"name": "a", "params": "7B", "tokens": "500B",
                      "started": {"date": "2026-07-01", "gpu": "H100", "gpus": 240}},
                     {"name": "b", "params": "7B", "tokens": "500B",
                      "started": {"date": "2026-07-02", "gpu": "H100", "gpus": 240}},
                     {"name": "c", "params": "1B", "tokens": "100B"}]}
    with pytest.raises(ApsiError, match=r"^runs 'a' and 'b' started on 240 and 240 H100, 480 in all, more than the "
                                        r"fleet's 256 H100 on 2026-07-02, a day they all run") as err:
        fleet(data, jobs=1)
    assert "\n" not in str(err.value)


def test_a_run_already_running_after_one_not_yet_started_is_one_line() -> None:
    # It was planned as an infeasible fleet ("a cannot be scheduled within the 40-day horizon; no
    # single change found resolves it", exit 3): a run that has started ran after the runs it follows.
    data = {"defaults": {"framework": "reference"},
            "fleet": {"start": "2026-07-01", "horizon_days": 40, "gpus": {"H100": 512}, "time_limit_s": 10},
            "runs": [{"name": "a", "params": "7B", "tokens": "500B", "after": ["b"],
                      "started": {"date": "2026-07-03", "gpu": "H100", "gpus": 256}},
                     {"name": "b", "params": "7B", "tokens": "2T"}]}
    with pytest.raises(ApsiError, match=r"^run 'a' started on 2026-07-03 and comes after 'b', which has not started"):
        fleet(data, jobs=1)
    data["runs"][1]["started"] = {"date": "2026-07-05", "gpu": "H100", "gpus": 256}
    with pytest.raises(ApsiError, match=r"^run 'a' started on 2026-07-03 and comes after 'b', which started on "
                                        r"2026-07-05"):
        fleet(data, jobs=1)


def test_a_replan_starts_its_search_from_the_saved_answer() -> None:
    # The search started from the greedy schedule only, never from the plan being re-planned: an
    # unchanged fleet re-planned within a short limit could come out with more runs late. Each run
    # is hinted on the option of its saved GPU type and GPUs (an elastic run's first segment's),
    # from its saved day; -1 where it was not placed or has no such option now.
    import datetime as dt

    from apsi.fleets.api import _saved_hint
    from apsi.fleets.result import FleetResult, FleetRow, Segment

    p = Program(runs=[ProgramRun(name="a", options=[Option(gpu_type="H", gpus=8, days=5, cost=0),
                                                    Option(gpu_type="H", gpus=16, days=3, cost=0)]),
                      ProgramRun(name="b", options=[Option(gpu_type="H", gpus=8, days=4, cost=0)], start_after=2,
                                 elastic=True),
                      ProgramRun(name="c", options=[Option(gpu_type="H", gpus=8, days=4, cost=0)], start_after=1),
                      ProgramRun(name="d", options=[Option(gpu_type="H", gpus=8, days=4, cost=0)], optional=True)],
                capacity={"H": (16,) * 20})
    day = dt.date(2026, 7, 1)
    seg = Segment.model_construct(gpu_type="H", gpus=8, layout_text="", start=day, end=day, start_day=6, days=2)
    saved = FleetResult.model_construct(runs=[
        FleetRow.model_construct(name="a", scheduled=True, optional=False, gpu_type="H", gpus=16, start_day=3,
                                 segments=[]),
        FleetRow.model_construct(name="b", scheduled=True, optional=False, gpu_type="H", gpus=16, start_day=6,
                                 segments=[seg, seg]),
        FleetRow.model_construct(name="c", scheduled=True, optional=False, gpu_type="H", gpus=32, start_day=9,
                                 segments=[]),
        FleetRow.model_construct(name="d", scheduled=False, optional=True, segments=[])])
    assert _saved_hint(p, saved) == ([1, 0, -1, -1], [3, 6, 1, 0])
    # Where it places every required run, the search starts from it, not from the greedy schedule.
    hints: list = []
    real = program._hint
    program._hint = lambda model, solution, bought: (hints.append(solution), real(model, solution, bought))[1]
    try:
        complete = ([1, 0, 0, -1], [3, 6, 10, 0])
        program.schedule(p.model_copy(update={"saved": complete}), ("deadlines",), time_limit_s=5)
    finally:
        program._hint = real
    assert hints[0] == complete and complete != program.greedy(p)


def test_a_run_started_before_its_start_after_says_so() -> None:
    # It was placed where it started, start_after passed over without a word.
    data = {"defaults": {"framework": "reference"},
            "fleet": {"start": "2026-07-01", "horizon_days": 40, "gpus": {"H100": 512}, "time_limit_s": 10},
            "runs": [{"name": "a", "params": "7B", "tokens": "500B", "start_after": 10,
                      "started": {"date": "2026-07-03", "gpu": "H100", "gpus": 256}}]}
    r = fleet(data, jobs=1)
    assert r.runs[0].start.isoformat() == "2026-07-03"
    assert "run 'a' started on 2026-07-03, before its start_after (2026-07-11): it stays where it started" in r.notes
