"""Fleet plans end to end (apsi.fleets): the fleet: block and its refusals, each run's options read
off its own frontier, fleet() on examples/fleet.yaml, conflicts named and resolved, the CLI
(`apsi fleet`, `apsi run` on a fleet file), determinism. The program itself is checked against
brute force in tests/test_fleet_program.py, the conflict analysis in tests/test_fleet_conflicts.py."""

from __future__ import annotations

import copy
import json
import math
import re
import sys
from pathlib import Path

import pytest

import apsi
import apsi as apsi_pkg
from apsi.errors import ApsiError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from apsi.fleets.spec import FleetError, read_fleet
from apsi.api.scenarios import ScenarioError, load

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "fleet.yaml"


def base(**fleet) -> dict:
    """A small fleet under the reference arithmetic (frontiers in milliseconds)."""
    block = {"start": "2026-07-01", "horizon_days": 120, "gpus": {"H100": 1024}, **fleet}
    return {"defaults": {"framework": "reference"}, "fleet": block,
            "runs": [{"name": "a", "params": "7B", "tokens": "1T"},
                     {"name": "b", "params": "13B", "tokens": "1T", "after": ["a"]}]}


# -- the fleet: block and its refusals --------------------------------------------------------------


def test_read_fleet_turns_dates_into_days():
    data = base(gpus={"H100": 1024, "B200": {"count": 512, "from": "2026-08-01"},
                      "A100": {"count": 256, "until": "2026-07-10"}})
    data["runs"][0].update(start_after="2026-07-03", deadline="2026-07-31")
    f = read_fleet(data)
    cap = f.inventory.capacity(f.horizon_days)
    # 2026-08-01 is day 31 of a horizon starting 2026-07-01; until 2026-07-10 (day 9) is the last day there.
    assert cap["B200"][30] == 0 and cap["B200"][31] == 512
    assert cap["A100"][9] == 256 and cap["A100"][10] == 0
    assert cap["H100"] == (1024,) * 120
    a = f.runs[0]
    # A deadline date is the last day the run may hold GPUs: the program's deadline is the day after (day 31).
    assert (a.start_after, a.deadline) == (2, 31)
    assert f.objective == ["deadlines", "tardiness", "optional", "cost"]


def test_grid_runs_and_after_a_grid():
    data = base()
    data["runs"].append({"name": "sft", "params": "7B", "tokens": ["1B", "2B"], "after": ["b"]})
    data["runs"].append({"name": "eval", "params": "1B", "tokens": "10B", "after": ["sft"]})
    f = read_fleet(data)
    names = [r.name for r in f.runs]
    assert names == ["a", "b", "sft tokens=1B", "sft tokens=2B", "eval"]
    assert f.runs[-1].after == ["sft tokens=1B", "sft tokens=2B"]  # after a grid: after each of its runs


@pytest.mark.parametrize("change, message", [
    (lambda d: d["runs"][1].update(after=["nope"]), r"run 'b' comes after 'nope', which is not a run"),  # data: no line (it said "line None")
    (lambda d: d["runs"][0].update(after=["b"]), r"after lists form a cycle \(a -> b -> a\)"),
    # Day 5 as a deadline is the first day the run may no longer hold GPUs: its last is day 4,
    # 2026-07-05; start_after 10 is 2026-07-11.
    (lambda d: d["runs"][0].update(start_after=10, deadline=5),
     r"the deadline 2026-07-05 \(the last day the run may hold GPUs\) is before start_after 2026-07-11 \(the first "
     r"it may start\): give a deadline on or after 2026-07-11"),
    # Horizon 120 days from 2026-07-01: its last day is 2026-10-28 (day 119); day 120 leaves the run none.
    (lambda d: d["runs"][0].update(start_after=120),
     r"run 'a': start_after 2026-10-29 is past the horizon's last day 2026-10-28"),
    (lambda d: d["runs"][0].update(start_after="2027-03-01"), r"start_after 2027-03-01 is past the horizon's last day"),
    (lambda d: d["fleet"]["gpus"].update(H100=1024.5), r"H100 must be a whole number of GPUs, at least 0, got 1024.5"),
    (lambda d: d["fleet"]["gpus"].update(H100={"count": "many"}), r"count must be a whole number of GPUs"),
    (lambda d: d["fleet"]["gpus"].update(H200X=8), r"unknown GPU 'H200X'"),
    # A supply from past the horizon was taken without a word; it is never there within it.
    (lambda d: d["fleet"]["gpus"].update(H100=[{"count": 64}, {"count": 64, "from": "2027-06-01"}]),
     r"H100: from 2027-06-01 is past the horizon's last day: the GPUs would never be there within it"),
    # One type named twice: the second had replaced the first's GPUs silently.
    (lambda d: d["fleet"]["gpus"].update(h100=64), r"gpus: 'h100' is H100 again: give each GPU type once"),
    (lambda d: d["fleet"].update(prices={"H100": 2.0, "h100": 3.0}), r"prices: 'h100' is H100 again"),
    (lambda d: d["fleet"].update(objective="speed"), r"unknown objective 'speed'"),
    (lambda d: d["fleet"].update(colour=1), r"unknown key 'colour'"),
    (lambda d: d["runs"][0].update(gpu="H100"), r"gpu is not a fleet run's key: the fleet program chooses"),
    (lambda d: d["runs"][0].update(gpu_types=["B200"]), r"unknown GPU type of the fleet 'B200'"),
    (lambda d: d["runs"][0].update(deadline="2026-06-01"), r"deadline 2026-06-01 is before the fleet's start"),
    (lambda d: d["runs"][0].update(weight=0), r"weight must be a whole number from 1"),
    (lambda d: d["fleet"].pop("start"), r"start is missing"),
    # It said "the horizon must be 1 to 3,660 whole days, got -29", naming no key given.
    (lambda d: (d["fleet"].pop("horizon_days", None), d["fleet"].update(end="2026-06-01")),
     r"fleet: end 2026-06-01 is before start 2026-07-01: give the horizon's last day, on or after its first"),
    (lambda d: d["fleet"].update(power_cap_mw=-1), r"power_cap_mw must be a positive number, got -1"),
    (lambda d: d["fleet"].update(pue=0.5), r"pue must be a number from 1 to 10"),
    (lambda d: d["fleet"].update(gap=1.5), r"gap must be a share from 0 to below 1 \(0.01: stop each stage within 1%"),
    # Once an OverflowError (the cap as whole watts) and a TypeError and OverflowError in CP-SAT.
    (lambda d: d["fleet"].update(power_cap_mw=float("inf")), r"power_cap_mw must be a positive number, got inf"),
    (lambda d: d["runs"][0].update(deadline=10**30), r"run 'a': deadline must be a date or a whole number of days "
                                                     r"from the start, 0 to 100,000, got 1000000000000000000000000000000"),
    (lambda d: d["runs"][0].update(start_after=10**30), r"run 'a': start_after must be a date or a whole number of "
                                                        r"days from the start, 0 to 100,000"),
    (lambda d: d["fleet"].update(gap=True), r"gap must be a share from 0 to below 1"),
])
def test_bad_fleets_are_one_line(change, message):
    data = copy.deepcopy(base())
    change(data)
    with pytest.raises(FleetError, match=message) as err:
        read_fleet(data)
    assert "\n" not in str(err.value)


def test_a_scenario_without_fleet_is_unchanged_and_with_fleet_is_refused_by_load():
    assert [r.name for r in load({"runs": [{"params": "7B", "gpu": ["H100", "B200"]}]})] == \
        ["run 1 gpu=H100", "run 1 gpu=B200"]
    with pytest.raises(ScenarioError, match="has a fleet: block"):
        load(base())


# -- options from the frontier -------------------------------------------------------------------------


def test_options_are_the_frontier_in_whole_nodes_and_days():
    from apsi.fleets.api import _options

    f = read_fleet(base())
    table, notes, _ = _options(f, 1)
    # One Note: what thinning left out, so that "proved" is read over the options kept.
    assert len(notes) == 1 and re.fullmatch(r"[\d,]+ of the runs' [\d,]+ options were thinned away \(max_options 12 "
                                            r"per run and GPU type\): each stage is proved over the options kept; "
                                            r"max_options: 0 weighs every one", notes[0]), notes
    points = apsi.frontier("13B", tokens="1T", framework="reference", gpu="H100", max_gpus=1024)
    by_nodes = {}
    for p in points:
        by_nodes[math.ceil(p.gpus / 8)] = p  # H100: 8 GPUs a node (apsi/gpus.yaml)
    options = table[1]
    assert options, "13B has options on 1,024 H100"
    days = [c.option.days for c in options]
    assert days == sorted(days, reverse=True) and len(set(days)) == len(days)  # Pareto: fewer days for more GPUs
    for c in options:
        p = by_nodes[c.nodes]
        # The option is the fastest frontier point on its node count, its days rounded up.
        assert (c.frontier_gpus, c.run_days, c.layout) == (p.gpus, p.days, p.layout)
        assert c.option.gpus == 8 * c.nodes and c.option.days == math.ceil(p.days - 1e-9)
        # The catalog's H100 price, $2.69/GPU-hour (apsi/gpus.yaml), over the GPUs held.
        assert c.cost_usd == pytest.approx(c.option.gpus * p.days * 24 * 2.69, rel=1e-12)
    # The Pareto set in whole nodes and days within the 120-day horizon, written out: the options are
    # drawn from it (at most max_options' default, 12: apsi.fleets.spec), its two ends both kept.
    pareto = []
    for nodes in sorted(by_nodes):
        whole = math.ceil(by_nodes[nodes].days - 1e-9)
        if whole <= 120 and 8 * nodes <= 1024 and (not pareto or whole < pareto[-1][1]):
            pareto.append((nodes, whole))
    kept = [(c.nodes, c.option.days) for c in options]
    assert set(kept) <= set(pareto) and len(kept) == min(12, len(pareto))
    assert kept[0] == pareto[0] and kept[-1] == pareto[-1]


def test_thinning_keeps_the_fewest_gpus_that_meet_a_deadline():
    # Two 13B runs due on days 10 and 11 on 512 H100: thinned in log GPUs alone, their options
    # were 200, 240, 288, 368, ... GPUs, so 240 + 288 did not fit and one deadline was missed
    # ("proved"), and --buy rented 8 more. Each keeps its fewest GPUs meeting its deadline alone
    # (apsi.fleets.options.thin): 240 for 11 days and 264 for 10, 504 GPUs together.
    data = {"defaults": {"framework": "reference"},
            "fleet": {"start": "2026-07-01", "horizon_days": 60, "gpus": {"H100": 512}},
            "runs": [{"name": "x", "params": "13B", "tokens": "1T", "deadline": 11},
                     {"name": "y", "params": "13B", "tokens": "1T", "deadline": 10}]}
    r = apsi.fleet(data, jobs=1)
    assert r.late_runs == 0 and sum(row.gpus for row in r.runs) <= 512
    points = apsi.frontier("13B", tokens="1T", framework="reference", gpu="H100", max_gpus=512)
    for row, days in zip(r.runs, (11, 10)):
        # the fewest whole nodes whose fastest layout ends within the deadline's days
        least = min(8 * math.ceil(p.gpus / 8) for p in points if math.ceil(p.days - 1e-9) <= days)
        assert row.start_day == 0 and row.gpus == least, (row.name, row.gpus, least)
    assert any("thinned away" in n for n in r.notes)


# -- fleet() ---------------------------------------------------------------------------------------


def test_small_fleet_keeps_its_rules():
    r = apsi.fleet(base(), jobs=1)
    assert r.status == "OPTIMAL" and all(s.status == "OPTIMAL" for s in r.stages)
    a, b = r.runs
    assert a.start == r.start and b.start_day == a.start_day + a.days  # b after a, at once (compacted)
    assert a.gpus <= 1024 and b.gpus <= 1024
    # Owned GPUs are not charged: nothing is paid; the GPU-hours' worth is the runs' sum.
    assert r.cost_usd == 0.0 and r.gpu_hours_usd == pytest.approx(a.cost_usd + b.cost_usd, rel=1e-9)


def test_a_gap_stop_is_reported_with_its_gap_and_never_as_proved():
    # Fleet.gap: each stage stops once within that share of its bound (CP-SAT's relative_gap_limit,
    # which calls such a stop OPTIMAL); apsi says OPTIMAL only where the value is its bound.
    # benchmarks/fleet_speed.py's 24-run fleet: at a 5% gap its cost stage stops short of its proof
    # (15,317,449 against a bound of 15,254,113; proved at 15,312,205 without the gap).
    import fleet_speed

    from apsi.fleets.api import _options, _program
    from apsi.fleets.program import schedule

    spec = read_fleet(fleet_speed.fleet_data(24, 0))
    table, _, _ = _options(spec, 1)
    program = _program(spec, table)
    loose = schedule(program, tuple(spec.objective), 30, 0.05)
    for stage in loose.stages:
        assert stage.value is not None and stage.bound is not None
        gap = abs(stage.value - stage.bound) / max(1, abs(stage.value))
        assert gap <= 0.05 + 1e-9
        assert (stage.status == "OPTIMAL") == (stage.value == stage.bound), stage
    assert read_fleet({**base(), "fleet": {**base()["fleet"], "gap": 0.01}}).gap == 0.01


def test_example_fleet():
    r = apsi.fleet(str(EXAMPLE), jobs=1)
    assert r.status == "OPTIMAL" and r.conflict is None and r.late_runs == 0
    assert len(r.runs) >= 8
    rows = {row.name: row for row in r.runs}
    # Owned GPUs are not charged (issue 40): the 235B MoE, which has no deadline, no longer waits
    # nine months for the B200s (it did when every GPU-hour was priced: 57 days on 408 B200 from
    # 2027-04-01) but runs on the idle H100 once the flagship frees them.
    moe = rows["moe-235b-a22b"]
    assert moe.gpu_type == "H100" and moe.start.isoformat() < "2026-10-01"
    assert r.cost_usd == 0.0 and r.gpu_hours_usd == pytest.approx(sum(x.cost_usd or 0 for x in r.runs), rel=1e-9)
    # Utilisation is the GPU-days held over those there (4,096 H100 x 365 days, examples/fleet.yaml),
    # above the 14% of the priced plan; the idle rest is after the last run ends, with no run left.
    held = sum(x.gpus * x.days for x in r.runs if x.gpu_type == "H100")
    assert r.utilisation["H100"] == pytest.approx(held / (4096 * 365), rel=1e-9) and r.utilisation["H100"] > 0.142
    assert r.idle_after_share is not None and r.idle_after_share > 0.9
    flagship, extension = rows["flagship-70b"], rows["long-context-70b"]
    assert extension.start > flagship.end  # the extension comes after its pre-training
    # B200s arrive on 2027-04-01 (examples/fleet.yaml): no run holds one before.
    assert all(row.start.isoformat() >= "2027-04-01" for row in r.runs if row.gpu_type == "B200")
    # The flagship's deadline binds: it ends on its deadline day, and a day sooner cannot be met.
    assert flagship.end == flagship.deadline
    data = __import__("yaml").safe_load(EXAMPLE.read_text())
    data["runs"][0]["deadline"] = flagship.deadline.toordinal() - 1 - r.start.toordinal() + 1
    sooner = apsi.fleet(data, jobs=1)
    assert sooner.late_runs == 1 and sooner.conflict is not None and sooner.conflict.runs == ["flagship-70b"]


def test_conflict_named_and_each_remedy_resolves_it():
    # Two identical runs whose deadline is the days of their fastest option, which holds more than
    # half of the 1,024 H100 (every other option takes longer): each can meet it alone, not both.
    from apsi.fleets.api import _options

    data = base()
    data["runs"] = [{"name": n, "params": "13B", "tokens": "1T"} for n in ("x", "y")]
    table, _, _ = _options(read_fleet(data), 1)
    fastest = table[0][-1].option
    assert fastest.gpus > 512 and all(c.option.days > fastest.days for c in table[0][:-1])
    for run in data["runs"]:
        run["deadline"] = fastest.days
    data["fleet"]["objective"] = ["deadlines", "cost"]
    r = apsi.fleet(data, jobs=1)
    assert r.late_runs >= 1 and r.conflict is not None
    assert r.conflict.kind == "deadlines" and sorted(r.conflict.runs) == ["x", "y"] and r.conflict.minimal
    kinds = {m.kind for m in r.conflict.remedies}
    assert kinds == {"gpus", "deadline"}, r.conflict
    for remedy in r.conflict.remedies:
        fixed = copy.deepcopy(data)
        if remedy.kind == "gpus":
            fixed["fleet"]["gpus"] = {"H100": [1024, remedy.gpus]}
        else:
            run = next(x for x in fixed["runs"] if x["name"] == remedy.run)
            run["deadline"] += remedy.days
        again = apsi.fleet(fixed, jobs=1)
        assert again.late_runs == 0 and again.conflict is None, (remedy, again)


def test_runs_that_cannot_fit_are_infeasible_with_a_conflict():
    data = base(horizon_days=3)
    r = apsi.fleet(data, jobs=1)
    assert r.status == "INFEASIBLE" and r.conflict is not None and r.conflict.kind == "runs"
    assert any(m.kind == "horizon" for m in r.conflict.remedies)


def test_a_run_with_no_option_costs_only_itself():
    # A required run no GPU type can finish within the horizon stopped the whole fleet, where a
    # run whose question is refused is left out and the others planned: now it is left out too,
    # saying why in one line; alone, the fleet is that one line.
    data = base()
    data["runs"].append({"name": "huge", "params": "2T", "tokens": "100T"})
    r = apsi.fleet(data, jobs=1)
    assert len(r.left_out) == 1 and r.left_out[0].startswith("run 'huge' has no option in the fleet: H100: ")
    assert "\n" not in r.left_out[0] and r.runs == apsi.fleet(base(), jobs=1).runs
    with pytest.raises(ApsiError, match="^run 'huge' has no option in the fleet: H100: ") as err:
        apsi.fleet({**data, "runs": [data["runs"][-1]]}, jobs=1)
    assert "\n" not in str(err.value)


def test_an_optional_run_with_no_option_is_not_scheduled_and_the_rest_are_planned():
    # An optional run the fleet cannot hold within its horizon stopped the whole fleet ("has no
    # option in the fleet"); it is now not scheduled, with its Why and a Note naming the cause.
    data = base()
    data["runs"].append({"name": "stretch", "params": "2T", "tokens": "100T", "optional": True})
    r = apsi.fleet(data, jobs=1)
    row = {x.name: x for x in r.runs}["stretch"]
    assert not row.scheduled and row.why.startswith("left out: an optional run with no option that ends within")
    assert any(n.startswith("run 'stretch' is optional and has no option in the fleet: H100: ") for n in r.notes)
    assert [x for x in r.runs if x.name != "stretch"] == apsi.fleet(base(), jobs=1).runs and not r.left_out


def test_a_run_whose_inputs_are_refused_costs_only_itself(tmp_path):
    # One run with params 'abc' stopped the whole fleet ("has no option in the fleet"); as in a
    # scenario file of runs, it is left out with its line and why, and the others are planned.
    import subprocess

    data = base()
    data["runs"].append({"name": "typo", "params": "abc", "tokens": "1T"})
    r = apsi.fleet(data, jobs=1)
    assert [x.name for x in r.runs] == [x["name"] for x in base()["runs"]]
    assert len(r.left_out) == 1 and r.left_out[0].startswith("run 'typo': params 'abc' is not a size")
    assert any(n.endswith(": left out, the other runs planned without it") for n in r.notes)
    assert r.runs == apsi.fleet(base(), jobs=1).runs
    path = tmp_path / "fleet.yaml"
    path.write_text(json.dumps(data), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "apsi", "fleet", str(path), "--jobs", "1"], capture_output=True,
                          text=True)
    assert done.returncode == 1 and "Traceback" not in done.stderr and "left out" in done.stdout
    # Every run refused: one line, as before.
    with pytest.raises(ApsiError, match="^run 'typo': params 'abc' is not a size"):
        apsi.fleet({**data, "runs": [data["runs"][-1]]}, jobs=1)
    # Ahead of the others, with a run after it: that one cannot keep its order and is left out
    # too; the rest are planned as without them (the choices stay with their runs).
    ahead = base()
    ahead["runs"][:0] = [{"name": "typo", "params": "abc", "tokens": "1T"}]
    ahead["runs"] += [{"name": "c", "params": "13B", "tokens": "1T", "after": ["typo"]},
                      {"name": "d", "params": "1B", "tokens": "1T"}]
    r = apsi.fleet(ahead, jobs=1)
    assert r.left_out[1] == "run 'c' runs after 'typo', which is left out"
    alone = base()
    alone["runs"].append({"name": "d", "params": "1B", "tokens": "1T"})
    assert r.runs == apsi.fleet(alone, jobs=1).runs


def test_no_price_is_needed_when_nothing_is_paid(tmp_path):
    catalog = tmp_path / "gpus.yaml"
    # H100's catalog figures (apsi/gpus.yaml) without a price.
    catalog.write_text("gpus:\n  X1:\n    memory_gib: 80\n    bf16_tflops: 989.4\n    fp16_tflops: 989.4\n"
                       "    fp8_tflops: 1978.9\n    hbm_tbps: 3.35\n    scaleup_domain: 8\n    scaleup_gbps: 900\n"
                       "    scaleout_gbps: 50\n    gpus_per_node: 8\n    tdp_w: 700\n    price_usd_per_hour: null\n")
    data = base(gpus={"X1": 512})
    data["catalog"] = str(catalog)
    # Owned GPUs are not charged (docs/method.md 4.12): the cost stage needs no price; the GPU-hours'
    # worth is unknown without one.
    r = apsi.fleet(data, jobs=1)
    assert r.cost_usd == 0.0 and r.gpu_hours_usd is None and r.status == "OPTIMAL"
    data["fleet"]["prices"] = {"X1": 2.0}
    assert apsi.fleet(data, jobs=1).gpu_hours_usd is not None


# -- the CLI ---------------------------------------------------------------------------------------


def test_cli_fleet_table_json_csv_and_run(apsi, tmp_path):
    path = tmp_path / "f.yaml"
    path.write_text(json.dumps(base()))
    table = apsi("fleet", str(path))
    assert table.code == 0, table.why()
    assert table.out.startswith("Fleet plan: 2 of 2 runs scheduled from 2026-07-01 to 2026-10-28 (120 days)")
    assert "GPUs in use per type by month" in table.out and "Objective stages: deadlines 0 (proved)" in table.out
    one = apsi("fleet", str(path), "--json")
    two = apsi("fleet", str(path), "--json", "--jobs", "2")
    assert one.out == two.out  # byte for byte, whatever the jobs
    dumped = json.loads(one.out)
    assert dumped["status"] == "OPTIMAL" and [s["name"] for s in dumped["stages"]] == dumped["objective"]
    assert apsi("run", str(path), "--format", "json").out == one.out  # apsi run sends a fleet file to the fleet
    csv = apsi("fleet", str(path), "--format", "csv")
    assert csv.out.splitlines()[0].startswith("name,start,end,gpu_type,gpus,layout,days,cost_usd")
    assert len(csv.out.splitlines()) == 3


@pytest.mark.parametrize("change, message", [
    (lambda d: d["runs"][1].update(after=["nope"]), "comes after 'nope', which is not a run"),
    (lambda d: d["runs"][0].update(after=["b"]), "form a cycle"),
    (lambda d: d["runs"][0].update(start_after=10, deadline=5), "is before start_after"),
    (lambda d: d["runs"][0].update(start_after=400), "is past the horizon's last day"),
    (lambda d: d["fleet"]["gpus"].update(H100=10.5), "must be a whole number of GPUs"),
])
def test_cli_bad_fleet_is_one_line_and_exit_2(apsi, tmp_path, change, message):
    data = base()
    change(data)
    path = tmp_path / "f.yaml"
    path.write_text(json.dumps(data))
    for command in ("fleet", "run"):
        run = apsi(command, str(path))
        assert run.code == 2, run.why()
        assert message in run.err and len(run.err.strip().splitlines()) == 1 and run.out == ""


def test_cli_plot(apsi, tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "f.yaml"
    path.write_text(json.dumps(base()))
    run = apsi("fleet", str(path), "--plot", str(tmp_path / "g.svg"))
    assert run.code == 0, run.why()
    assert (tmp_path / "g.svg").read_text().startswith("<?xml")


def test_cli_export_one_file_per_run(apsi, tmp_path):
    # Under Megatron (the default framework), so the runs have a framework to launch.
    data = {"fleet": {"start": "2026-07-01", "horizon_days": 60, "gpus": {"H100": 64}},
            "runs": [{"name": "small one", "params": "llama-3.2-1b", "tokens": "20B"},
                     {"name": "two", "params": "llama-3.2-1b", "tokens": "10B", "after": ["small one"]}]}
    path = tmp_path / "f.yaml"
    path.write_text(json.dumps(data))
    run = apsi("fleet", str(path), "--json", "--export", "slurm", "--export-dir", str(tmp_path / "out"))
    assert run.code == 0, run.why()
    rows = {r["name"]: r for r in json.loads(run.out)["runs"]}
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert files == ["small_one.sbatch", "submit.sh", "two.sbatch"]  # submit.sh: tests/test_fleet_export.py
    for name, file in (("small one", "small_one.sbatch"), ("two", "two.sbatch")):
        lay = rows[name]["layout"]
        gpus = lay["tp"] * lay["pp"] * lay["cp"] * lay["dp"]
        text = (tmp_path / "out" / file).read_text()
        # The sbatch header names the plan's GPUs and layout: the fleet row's (apsi.outputs.export.slurm).
        assert f": {gpus:,} x H100" in text and f"TP {lay['tp']} x PP {lay['pp']}" in text
    assert "3 slurm configurations written to" in run.err


def test_cli_export_of_a_reference_fleet_is_one_line(apsi, tmp_path):
    path = tmp_path / "f.yaml"
    path.write_text(json.dumps(base()))
    run = apsi("fleet", str(path), "--export", "megatron", "--export-dir", str(tmp_path / "out"))
    assert run.code == 2, run.why()
    assert "run 'a' cannot be exported as megatron: a reference-arithmetic plan has no framework" in run.err
    assert len(run.err.strip().splitlines()) == 1
    assert run.out == ""  # refused before the plan is printed, as every other refusal is
    assert apsi("fleet", str(path), "--export", "megatron").code == 2  # --export-dir missing
    # An --export-dir that is a file is refused before the fleet is solved.
    run = apsi("fleet", str(path), "--export", "megatron", "--export-dir", str(path))
    assert run.code == 2 and run.out == "", run.why()
    assert run.err == f"error: --export-dir {path} is not a folder: give a folder (made if it does not exist)\n"


def test_a_date_that_is_no_date_is_one_line(apsi, tmp_path):
    # PyYAML reads 2026-13-01 as a timestamp and fails in datetime: refused in one line
    # (apsi.lineyaml), in a fleet and in a plain scenario alike.
    for text in ("fleet: {start: 2026-13-01, gpus: {H100: 8}}\nruns: [{params: 7B}]\n",
                 "runs: [{params: 7B, days: 2026-13-01}]\n"):
        path = tmp_path / "f.yaml"
        path.write_text(text)
        run = apsi("fleet" if text.startswith("fleet") else "run", str(path))
        assert run.code == 2, run.why()
        assert run.err.strip().endswith("line 1: '2026-13-01' is not a date (month must be in 1..12): write it as "
                                        "2026-07-01")


def test_an_unknown_run_key_names_the_fleet_keys_too():
    data = base()
    data["runs"][0]["dedline"] = 3
    with pytest.raises(FleetError, match="unknown key 'dedline': did you mean deadline?"):
        read_fleet(data)


def test_fleet_json_validates_against_apsi_schema_fleet(apsi, tmp_path):
    from jsonschema import Draft202012Validator

    path = tmp_path / "f.yaml"
    path.write_text(json.dumps(base()))
    schema = json.loads(apsi("schema", "fleet").out)
    Draft202012Validator.check_schema(schema)
    Draft202012Validator(schema).validate(json.loads(apsi("fleet", str(path), "--json").out))
    definitions = {schema["title"]: schema, **schema.get("$defs", {})}
    missing = [f"{n}.{f}" for n, d in definitions.items() if n != "Layout"
               for f, p in d.get("properties", {}).items() if not p.get("description")]
    assert missing == []  # every field of the fleet's output says what it is


def test_power_cap_holds_every_day():
    # H100: 700 W board power (apsi/gpus.yaml) x PUE 1.3 = 910 W a GPU; 0.5 MW holds 549 of them.
    data = base(power_cap_mw=0.5)
    data["runs"] = [{"name": n, "params": "13B", "tokens": "1T", "deadline": 30} for n in ("x", "y")]
    free = apsi.fleet(base(objective=["makespan"], gpus={"H100": 1024}) | {"runs": data["runs"]}, jobs=1)
    assert free.peak_power_mw is None and max(r.gpus for r in free.runs) > 549  # without a cap, more
    capped = apsi.fleet(data | {"fleet": {**data["fleet"], "objective": ["makespan"]}}, jobs=1)
    use = [0] * capped.horizon_days
    for r in capped.runs:
        for d in range(r.start_day, r.start_day + r.days):
            use[d] += r.gpus * 910
    assert max(use) <= 0.5e6 and capped.peak_power_mw == pytest.approx(max(use) / 1e6)
    assert capped.power_cap_mw == 0.5


def test_power_cap_needs_board_power(tmp_path):
    catalog = tmp_path / "gpus.yaml"
    catalog.write_text("gpus:\n  X1:\n    memory_gib: 80\n    bf16_tflops: 989.4\n    fp16_tflops: 989.4\n"
                       "    fp8_tflops: 1978.9\n    hbm_tbps: 3.35\n    scaleup_domain: 8\n    scaleup_gbps: 900\n"
                       "    scaleout_gbps: 50\n    gpus_per_node: 8\n    tdp_w: null\n    price_usd_per_hour: 2.0\n")
    data = base(gpus={"X1": 512}, power_cap_mw=1)
    data["catalog"] = str(catalog)
    with pytest.raises(ApsiError, match="a power cap needs each GPU's board power, and the catalog has none for X1"):
        apsi.fleet(data, jobs=1)


def test_example_is_byte_for_byte_the_same_in_fresh_processes():
    # Two processes with different string-hash seeds, one with --jobs 2: the same bytes.
    import os
    import subprocess
    import sys

    outs = []
    for seed, jobs in (("1", "1"), ("2", "2")):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-m", "apsi", "fleet", str(EXAMPLE), "--json", "--jobs", jobs],
                              capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr
        outs.append(done.stdout)
    assert outs[0] == outs[1]
    assert json.loads(outs[0])["status"] == "OPTIMAL"  # proved: the promise holds (docs/method.md 4.12)


def test_a_run_named_like_an_option_gets_a_file_name_that_is_not_one():
    # A fleet run named "--help" (or ".hidden", "-") once wrote "--help.sh", which every tool given
    # the file reads as an option; names are made safe (apsi.fleets.export._file_name).
    from apsi.fleets.export import _file_name

    taken: dict[str, str] = {}
    names = []
    for run in ("--help", "-", ".hidden", "-x-", "a b/c"):
        name = _file_name(run, taken, "sh")
        taken[name] = ""
        names.append(name)
    assert names == ["help.sh", "run.sh", "hidden.sh", "x.sh", "a_b_c.sh"]
    assert not any(n.startswith(("-", ".")) for n in names)


def test_a_deadline_past_the_horizon_is_met_by_any_schedule_within_it():
    # Day 100,000 (the most a day number may be, apsi.fleets.spec.MAX_DAY) is far past a 120-day
    # horizon: the program takes it as it is, and the run is planned on time.
    data = base()
    data["runs"][0]["deadline"] = 100_000
    r = apsi.fleet(data, jobs=1)
    assert r.status == "OPTIMAL" and all(not row.late_days for row in r.runs)


def test_a_number_yaml_reads_as_text_is_named_so() -> None:
    # YAML 1.1 reads 1e-9 as text: "must be a positive number, got '1e-9'" read as a contradiction.
    import apsi

    data = {"fleet": {"start": "2026-07-01", "gpus": {"H100": 8}, "power_cap_mw": "1e-9"},
            "runs": [{"name": "a", "params": "1B", "tokens": "1B"}]}
    with pytest.raises(apsi.ApsiError, match=r"power_cap_mw must be a positive number, got '1e-9', which YAML reads "
                                             r"as text: write the number with a decimal point, such as 1.0e-9, or in "
                                             r"full$"):
        apsi.fleet(data, jobs=1)
    data["fleet"]["power_cap_mw"] = 30
    data["fleet"]["foo"] = 1
    with pytest.raises(apsi.ApsiError, match=r"^scenario, fleet: unknown key 'foo'"):  # no "(line None)"
        apsi.fleet(data, jobs=1)


def test_a_run_whose_pins_are_refused_costs_only_itself():
    # tp 3 of Llama-shaped 7B's 32 heads: refused by Megatron's rules on every type, it sank the
    # fleet ("has no option in the fleet"); as a params typo, it is left out with why.
    data = base()
    data["runs"].append({"name": "a3", "params": "7B", "tokens": "100B", "tp": 3, "framework": "megatron"})
    r = apsi.fleet(data, jobs=1)
    assert [x.name for x in r.runs] == ["a", "b"]
    assert r.left_out == ["run 'a3': tp 3 does not divide the 32 attention heads; valid: 1, 2, 4, 8, 16, 32"]


def test_a_bad_time_limit_is_named_as_it_was_given(apsi) -> None:
    # The CLI's option is --time-limit; the file's key and the API's keyword are time_limit_s.
    example = str(Path(__file__).resolve().parents[1] / "examples" / "fleet.yaml")
    with pytest.raises(ApsiError, match=r"^time_limit_s must be a number of seconds above 0"):
        apsi_pkg.fleet(example, time_limit_s=-1)  # the package (the fixture takes its name here)
    run = apsi("fleet", example, "--time-limit", "-1")
    assert run.code == 2, run.why()
    assert run.err.startswith("error: --time-limit must be a number of seconds above 0"), run.why()


def test_a_missed_deadline_without_a_named_conflict_says_why(monkeypatch):
    # When the conflict analysis settled none within its share of the time limit, a plan with a
    # late run printed no Conflict line and no word why (conflict: null).
    from apsi.fleets import conflicts
    from apsi.fleets.api import _options

    data = base()
    data["runs"] = [{"name": n, "params": "13B", "tokens": "1T"} for n in ("x", "y")]
    fastest = _options(read_fleet(data), 1)[0][0][-1].option
    for run in data["runs"]:
        run["deadline"] = fastest.days
    data["fleet"]["objective"] = ["deadlines", "cost"]
    monkeypatch.setattr(conflicts, "analyse", lambda *a, **k: None)
    r = apsi.fleet(data, jobs=1, time_limit_s=6)
    assert r.late_runs >= 1 and r.conflict is None
    assert "no conflict is named: its analysis settled none within its share of the time limit (2 s of 6); a longer " \
           "--time-limit (time_limit_s) names the runs or deadlines in conflict" in r.notes
