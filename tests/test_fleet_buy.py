"""Purchases as decisions (apsi fleet --buy, a fleet's `buy:` block): the program's purchase stage
against an enumeration of purchases, the least purchase re-planned with it and with one node less,
both types offered, the plain run's remedies from the same program, and the block's checks."""

from __future__ import annotations

import copy
import datetime as dt
import itertools
import random

import pytest

from apsi import fleet
from apsi.fleets import program
from apsi.fleets.conflicts import analyse, holds
from apsi.fleets.spec import FleetError
from apsi.fleets.tables import Offer, Option, Program, ProgramRun

START = "2026-07-01"
HORIZON_DAYS = 60
H100_LEAD, B200_LEAD = 3, 5


def _data(h100: object = 256, b200: object = 0, buy: bool = True) -> dict:
    """Two 13B runs of 1T tokens, a and b, that each take 11 days on 240 of the 256 H100 owned (their
    frontier under the reference arithmetic), both due by day 20: one after the other, the second
    ends 2 days late; c, a 1B run after b, due the day after b's deadline (the dependent a remedy
    must count)."""
    block: dict = {"start": START, "horizon_days": HORIZON_DAYS, "gpus": {"H100": h100, "B200": b200}}
    if buy:
        block["buy"] = {"H100": {"usd_per_gpu_hour": 2.0, "lead_days": H100_LEAD},
                        "B200": {"usd_per_gpu_hour": 3.5, "lead_days": B200_LEAD}}
    return {"defaults": {"framework": "reference"}, "fleet": block,
            "runs": [{"name": "a", "params": "13B", "tokens": "1T", "deadline": "2026-07-20"},
                     {"name": "b", "params": "13B", "tokens": "1T", "deadline": "2026-07-20"},
                     {"name": "c", "params": "1B", "tokens": "100B", "after": ["b"], "deadline": "2026-07-21"}]}


def _rented(gpus: int, lead: int, usd_per_gpu_hour: float) -> float:
    """A rental's cost by the buy: block's rule (apsi.fleets.buy): GPUs x hours from the lead day
    to the horizon's end x price."""
    return gpus * (HORIZON_DAYS - lead) * 24 * usd_per_gpu_hour


def _arriving(count: int, lead: int) -> list:
    return [256, {"count": count, "from": f"2026-07-{1 + lead:02d}"}] if count else [256]


def test_buy_returns_the_least_purchase_and_a_replan_with_one_node_less_misses() -> None:
    plain = fleet(_data(), jobs=1)
    assert plain.late_runs == 1  # the fleet as owned: b, then a ends 2 days late
    bought = fleet(_data(), jobs=1, buy=True)
    assert bought.late_runs == 0 and bought.status == "OPTIMAL"
    # The least: 4 nodes of H100 (32 GPUs) from day 3, which let the 13B runs hold more than the 256
    # owned (one on 288 H100 after the other, or both side by side on 288 in all: the same purchase).
    assert [(p.gpu_type, p.gpus, p.nodes, p.first.isoformat(), p.how, p.proved) for p in bought.purchase] == [
        ("H100", 32, 4, "2026-07-04", "rented", True)]
    assert bought.purchase_cost_usd == pytest.approx(_rented(32, H100_LEAD, 2.0), rel=1e-9)  # $87,552
    held = [sum(r.gpus or 0 for r in bought.runs if r.start_day is not None and r.days
                and r.start_day <= day < r.start_day + r.days) for day in range(HORIZON_DAYS)]
    assert max(held[:H100_LEAD]) <= 256 and max(held) <= 288 and max(held[H100_LEAD:]) > 256
    # Both types are offered where both work: B200 alone takes 10 nodes (80 GPUs) from day 5.
    alone = {p.gpu_type: p for p in bought.purchase_alternatives}
    assert set(alone) == {"H100", "B200"} and all(p.proved for p in alone.values())
    assert (alone["H100"].gpus, alone["B200"].gpus) == (32, 80)
    assert alone["B200"].cost_usd == pytest.approx(_rented(80, B200_LEAD, 3.5), rel=1e-9)
    # Re-planned as owned (a supply arriving on the lead day), each meets every deadline, and one
    # node (8 GPUs) less of it misses one.
    for gpu, gpus, lead in (("H100", 32, H100_LEAD), ("B200", 80, B200_LEAD)):
        for count, late in ((gpus, False), (gpus - 8, True)):
            data = _data(buy=False)
            if gpu == "H100":
                data["fleet"]["gpus"]["H100"] = _arriving(count, lead)
            else:
                data["fleet"]["gpus"]["B200"] = {"count": count, "from": f"2026-07-{1 + lead:02d}"}
            replanned = fleet(data, jobs=1)
            assert (replanned.late_runs > 0) == late, (gpu, count, [(r.name, r.late_days) for r in replanned.runs])


def test_the_remedy_is_printed_under_the_default_time_limit(apsi) -> None:
    import json
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "fleet.json")  # JSON is YAML
        with open(path, "w") as f:
            json.dump(_data(), f)
        run = apsi("fleet", path, "--jobs", "1")
        assert run.code == 0, run.why()
        # The plain run's remedies come from the purchase program: both types, each from its lead day.
        assert "  - 32 more H100 from 2026-07-04 ($87,552) would let every run be scheduled by its deadline" in run.out
        assert "  - 80 more B200 from 2026-07-06 ($369,600) would let every run be scheduled by its deadline" in run.out
        # a's deadline may move (b first, then c and a); b's may not: c, after it, would be late.
        assert "a's deadline 2 days later" in run.out and "b's deadline" not in run.out, run.out
        # Asked to fail on a miss, it says so in one line, in the singular for one run.
        run = apsi("fleet", path, "--jobs", "1", "--fail-on-miss")
        assert run.code == 3 and run.err.startswith("error: 1 run misses its deadline: "), run.err
        run = apsi("fleet", path, "--jobs", "1", "--buy")
        assert run.code == 0, run.why()
        assert ("Purchase (the least that meets every deadline, proved): 32 H100 (4 nodes) rented from 2026-07-04, "
                "$87,552; $87,552 paid beyond the GPUs owned (owned GPUs are not charged).") in run.out, run.out
        assert "80 B200 (10 nodes) rented from 2026-07-06, $369,600" in run.out
        run = apsi("fleet", path, "--jobs", "1", "--buy", "--json")
        assert json.loads(run.out)["purchase_cost_usd"] == pytest.approx(87_552)


def test_with_nothing_late_buy_buys_nothing() -> None:
    data = _data(h100=1024)
    result = fleet(data, jobs=1, buy=True)
    assert result.late_runs == 0 and result.purchase == [] and result.purchase_cost_usd == 0


def test_buy_keeps_the_options_the_owned_gpus_give() -> None:
    # 400 H100 owned meet every deadline without --buy. Under --buy each run's options reach the
    # owned plus the buyable counts, and thinned as one range (12 per type) they lost the counts
    # that fit 400: --buy "proved" 32 H100 were needed. With nothing bought the options are now
    # the owned fleet's (apsi.fleets.options.by_purchase).
    data = {"defaults": {"framework": "reference"},
            "fleet": {"start": START, "horizon_days": HORIZON_DAYS, "gpus": {"H100": 400},
                      "buy": {"H100": {"usd_per_gpu_hour": 2.0, "lead_days": H100_LEAD}}},
            "runs": [{"name": "a", "params": "13B", "tokens": "1T", "deadline": "2026-07-12"},
                     {"name": "b", "params": "13B", "tokens": "1T", "deadline": "2026-07-18"},
                     {"name": "c", "params": "8B", "tokens": "1T", "deadline": "2026-07-15"}]}
    owned = fleet(data, jobs=1)
    assert owned.late_runs == 0
    bought = fleet(data, jobs=1, buy=True)
    assert bought.late_runs == 0 and bought.purchase == [] and bought.purchase_cost_usd == 0


@pytest.mark.parametrize(("h100", "deadline", "max_options"), [(256, "2026-07-16", 12), (512, "2026-07-09", 12),
                                                                (320, "2026-07-16", 4), (256, "2026-07-20", 5)])
def test_the_least_purchase_once_owned_meets_every_deadline_and_a_node_less_does_not(
        h100: int, deadline: str, max_options: int) -> None:
    # _data's runs on h100 H100, a and b due on `deadline`, c the day after. Under --buy the options
    # above the GPUs owned were thinned apart from those within, so --buy chose options that the
    # fleet owning the purchase did not have (thinned over its own range): re-planned as owned, one
    # run was late on each of these fleets (it bought 120, 208, 48 and 32 H100). Each purchase
    # level now has the options its inventory would (apsi.fleets.options.by_purchase).
    data = _data(h100=h100)
    data["fleet"]["max_options"] = max_options
    for run in data["runs"][:2]:
        run["deadline"] = deadline
    data["runs"][2]["deadline"] = (dt.date.fromisoformat(deadline) + dt.timedelta(days=1)).isoformat()
    bought = fleet(data, jobs=1, buy=True)
    assert bought.late_runs == 0 and bought.status == "OPTIMAL" and bought.purchase
    for less in [None] + [p.gpu_type for p in bought.purchase]:
        owned = copy.deepcopy(data)
        del owned["fleet"]["buy"]
        for p in bought.purchase:
            gpus = p.gpus - (8 if p.gpu_type == less else 0)
            if gpus:
                arriving = {"count": gpus, "from": p.first.isoformat()}
                owned["fleet"]["gpus"][p.gpu_type] = [h100, arriving] if p.gpu_type == "H100" else arriving
        assert (fleet(owned, jobs=1).late_runs > 0) == (less is not None), (less, bought.purchase)


def test_the_options_of_each_purchase_are_those_its_inventory_thins() -> None:
    # by_purchase against its definition, k by k: with k nodes bought the options offered are the
    # Pareto set within the most GPUs then, thinned as a fleet owning them thins it.
    from apsi.fleets.options import Choice, Levels, by_purchase, thin

    def choice_at(gpus: int, days: int) -> Choice:  # only the option counts here
        return Choice.model_construct(option=Option(gpu_type="H100", gpus=gpus, days=days, cost=gpus * days))

    rng = random.Random(7)
    for _ in range(300):
        counts = sorted(rng.sample(range(1, 80), rng.randint(1, 25)))
        options = [choice_at(8 * n, 100 - i) for i, n in enumerate(counts)]
        levels = Levels(before=8 * rng.randint(0, 40), after=8 * rng.randint(0, 40), node_gpus=8,
                        max_nodes=rng.randint(0, 50))
        most = rng.choice((0, 1, 2, 3, 5, 12))
        got = by_purchase(options, most, levels)
        for k in range(levels.max_nodes + 1):
            expected = [c.option.gpus for c in thin([c for c in options if c.option.gpus <= levels.most(k)], most)]
            assert [c.option.gpus for c in got if c.option.offered(k)] == expected, (levels, most, k)


def test_a_purchase_too_late_to_help_is_neither_bought_nor_offered_as_a_remedy() -> None:
    # Nodes bought arrive on day 59 of 60: none helps b, which ends 2 days past its deadline. The
    # Purchase line said "the GPUs owned meet every deadline", and the Conflict offered "32 more
    # H100 from the start" (the remedies' default program, every type from day 0, not the terms).
    from apsi.fleets.render import render

    data = _data()
    data["fleet"]["buy"] = {"H100": {"usd_per_gpu_hour": 2.0, "lead_days": 59}}
    result = fleet(data, jobs=1, buy=True)
    assert result.late_runs == 1 and result.purchase == []
    assert result.conflict is not None
    assert [r.gpu_type for r in result.conflict.remedies if r.gpu_type] == []
    assert [r.text for r in result.conflict.remedies] == [
        "a's deadline 2 days later (2026-07-22) would let every deadline of the set be met"]
    text = render(result, "table")
    assert "nothing: no purchase the buy: terms allow meets a deadline more" in text
    assert "meet every deadline" not in text and "from the start" not in text
    # The same remedies as the fleet planned without --buy, whose remedies read the buy: terms.
    plain = fleet(data, jobs=1)
    assert [r.text for r in plain.conflict.remedies] == [r.text for r in result.conflict.remedies]


def _tiny(rng: random.Random) -> Program:
    """Two to four runs on one or two types, each with one or two options, some due, over 10 days;
    each type offered from day 0 to 3 in nodes of 2 at a cost of 1 to 5."""
    types = ["H", "B"][: rng.randint(1, 2)]
    runs = []
    for r in range(rng.randint(2, 4)):
        options = [Option(gpu_type=rng.choice(types), gpus=rng.choice([2, 4, 6]), days=rng.randint(2, 4), cost=1)
                   for _ in range(rng.randint(1, 2))]
        runs.append(ProgramRun(name=f"r{r}", options=options, deadline=rng.choice([None, rng.randint(3, 8)]),
                               after=[r - 1] if r and rng.random() < 0.2 else []))
    return Program(runs=runs, capacity={t: (rng.choice([2, 4]),) * 10 for t in types},
                   buy={t: Offer(from_day=rng.randint(0, 3), node_gpus=2, max_nodes=3, cost=rng.randint(1, 5))
                        for t in types})


@pytest.mark.parametrize("seed", range(20))
def test_the_purchase_stage_is_the_least_cost_of_every_purchase_that_meets_the_deadlines(seed: int) -> None:
    # The oracle: every vector of nodes per type, each re-planned with them owned (with_purchase);
    # the least cost among those where every deadline holds (conflicts.holds, a feasibility solve).
    p = _tiny(random.Random(7000 + seed))
    types = list(p.buy)
    costs = []
    for nodes in itertools.product(range(4), repeat=len(types)):
        bought = dict(zip(types, nodes))
        if holds(program.with_purchase(p, bought), "deadlines", 5.0):
            costs.append(sum(p.buy[t].cost * n for t, n in bought.items()))
    s = program.schedule(p, ("deadlines", "tardiness", "purchase"), time_limit_s=10.0)
    if not costs:  # the most that may be bought still misses a deadline
        assert s.status in ("OPTIMAL", "INFEASIBLE") and (s.status == "INFEASIBLE" or s.stages[0].value > 0)
        return
    assert s.status == "OPTIMAL" and s.stages[0].value == 0
    assert s.stages[2].value == min(costs)
    assert s.stages[2].value == program.stage_value(p, "purchase", s.choice, s.start, s.bought)
    # The schedule fits the inventory with what it bought: compaction and why.reasons read it so.
    assert holds(program.with_purchase(p, s.bought), "deadlines", 5.0)


def test_a_deadline_remedy_keeps_the_deadlines_of_the_runs_after_it() -> None:
    # 8 GPUs; a and b each hold all 8 for 3 days, due by day 4: one is late. c comes after b (1 day,
    # due by day 5). Moving b's deadline would make c late, so only a's is offered: a runs after
    # b and c (days 4-7), 3 days past its deadline.
    run = lambda name, days, deadline, after=(): ProgramRun(  # noqa: E731
        name=name, options=[Option(gpu_type="H", gpus=8, days=days, cost=1)], deadline=deadline, after=list(after))
    p = Program(runs=[run("a", 3, 4), run("b", 3, 4), run("c", 1, 5, [1])], capacity={"H": (8,) * 12},
                node_gpus={"H": 8})
    found = analyse(p)
    assert found is not None and found.members == [0, 1]
    assert [(r.run, r.days) for r in found.remedies if r.kind == "deadline"] == [(0, 3)]


@pytest.mark.parametrize(("terms", "match"), [
    ({"H100": {"usd": 2}}, r"buy, H100: unknown key 'usd'"),
    ({"H100": {"usd_per_gpu": 30000, "usd_per_gpu_hour": 2}}, "not both"),
    ({"H100": {"lead_days": 60}}, r"lead_days 60 is past the 60-day horizon"),
    ({"H100": {"max_gpus": 12}}, r"max_gpus 12 is not a whole number of 8-GPU nodes"),
    ({"H999": {}}, r"buy: .*H999"),
    ([1], r"buy must map GPU types"),
    # One type under two spellings (lookups ignore case): refused, as under gpus: and prices:.
    ({"h100": {"usd_per_gpu_hour": 2.0}, "H100": {"usd_per_gpu_hour": 3.0}}, r"buy: 'H100' is H100 again"),
])
def test_a_bad_buy_block_is_one_line(terms: object, match: str) -> None:
    data = _data()
    data["fleet"]["buy"] = terms
    with pytest.raises(FleetError, match=match) as err:
        fleet(data, jobs=1)
    assert "\n" not in str(err.value)


def test_a_purchase_has_one_price_in_every_line() -> None:
    # 32 H100 rented for the 30-day horizon at the catalog's $2.69: 32 x 720 h x 2.69 = $61,977.60.
    # The program counts each node in whole dollars (4 x $15,494): the Objective stages line said
    # "purchase 61,976" and the plain run's remedy "$61,976", against $61,978 on the Total line.
    from apsi.catalog import find_gpu
    from apsi.fleets.render import render

    data = {"defaults": {"framework": "reference"},
            "fleet": {"start": START, "horizon_days": 30, "gpus": {"H100": 256}},
            "runs": [{"name": "a", "params": "7B", "tokens": "200B", "deadline": START}]}
    exact = 32 * 30 * 24 * find_gpu("H100").price_usd_per_hour
    bought = fleet(data, jobs=1, buy=True)
    assert bought.cost_usd == pytest.approx(exact, rel=1e-12)
    text = render(bought, "table")
    assert "purchase $61,978 (proved)" in text and "Total: $61,978 paid" in text
    plain = fleet(data, jobs=1)
    remedy = next(r for r in plain.conflict.remedies if r.gpu_type == "H100")
    assert remedy.gpus == 32 and remedy.cost_usd == pytest.approx(exact, rel=1e-12)
    assert "($61,978)" in remedy.text


def test_a_plan_that_bought_gpus_is_replanned_with_what_it_bought(tmp_path) -> None:
    # examples/fleet-buy.yaml under --buy rents 32 H100 beyond the 256 owned from 2026-07-04, and
    # the runs started by 2026-07-15 hold more than the 256 owned on a day. Re-planned from its
    # answer on 2026-07-15 they were refused, --buy or not. What the saved plan had there before the
    # re-plan's day is kept, as owned: the runs stay, nothing more is bought, and a Note says so; a
    # purchase is never offered before the re-plan's day.
    import datetime as dt
    from pathlib import Path

    example = str(Path(__file__).resolve().parents[1] / "examples" / "fleet-buy.yaml")
    first = fleet(example, buy=True, jobs=1)
    since = dt.date(2026, 7, 15)
    started = [r for r in first.runs if r.start is not None and r.start < since]
    held = [sum(r.gpus or 0 for r in started if r.start_day is not None and r.days
                and r.start_day <= day < r.start_day + r.days) for day in range(first.horizon_days)]
    assert max(held) > 256
    assert [(p.gpu_type, p.gpus, p.first.isoformat()) for p in first.purchase] == [("H100", 32, "2026-07-04")]
    saved = tmp_path / "answer.json"
    saved.write_text(first.model_dump_json(), encoding="utf-8")
    for buy in (True, False):
        again = fleet(example, buy=buy, jobs=1, since=since.isoformat(), answer=str(saved))
        kept = {r.name: r for r in again.runs}
        assert all((kept[r.name].gpus, kept[r.name].start) == (r.gpus, r.start) for r in started)
        assert again.late_runs == 0
        assert again.purchase == [] and any(n.startswith("the saved answer's purchase there before the re-plan's day "
                                                         "(32 H100 rented from 2026-07-04) is kept") for n in again.notes)
    # A plan that bought nothing, re-planned with --buy on 2026-07-06: the H100 rented from day 3
    # (2026-07-04) would arrive in the past, so they come from the re-plan's day.
    plain = fleet(example, jobs=1)
    late = fleet(example, buy=True, jobs=1, since="2026-07-06", answer=plain.model_dump(mode="json"))
    assert late.purchase and all(p.first.isoformat() >= "2026-07-06" for p in late.purchase)


def test_max_gpus_left_out_is_the_largest_count_owned_in_whole_nodes() -> None:
    # 300 H100 owned and a buy: block without max_gpus was refused: "max_gpus 300 is not a whole
    # number of 8-GPU nodes", a key the file does not have. Its default is 296, whole nodes.
    from apsi.fleets.buy import purchasable
    from apsi.fleets.spec import read_fleet

    data = {"fleet": {"start": START, "horizon_days": 30, "gpus": {"H100": 300},
                      "buy": {"H100": {"usd_per_gpu_hour": 2.0}}},
            "runs": [{"name": "a", "params": "1B", "tokens": "10B"}]}
    assert purchasable(read_fleet(data), True)["H100"].max_gpus == 296


def test_buy_is_a_flag() -> None:
    # fleet(..., buy='yes') was taken as true (any non-empty string); it is refused in one line.
    from apsi import ApsiError

    with pytest.raises(ApsiError, match=r"^buy must be true or false \(whether the fleet may buy or rent GPUs\), "
                                        r"got 'yes'$"):
        fleet({"fleet": {"start": "2026-07-01", "horizon_days": 30, "gpus": {"H100": 8}},
               "runs": [{"name": "a", "params": "1B", "tokens": "10B"}]}, buy="yes")


def test_a_purchase_that_cannot_meet_every_deadline_names_the_conflict() -> None:
    # examples/fleet-buy.yaml with pretrain-a due on day 2 (2026-07-02) and at most one node of
    # H100 to rent: no purchase meets it, and the conflict is analysed with what the buy: terms
    # still offer. (fleet() once kept the runs it left out and those terms under one name: left_out
    # held the terms' Offers here.)
    from pathlib import Path

    import yaml

    data = yaml.safe_load((Path(__file__).resolve().parents[1] / "examples" / "fleet-buy.yaml").read_text())
    data["fleet"]["buy"] = {"H100": {"usd_per_gpu_hour": 2.0, "lead_days": 3, "max_gpus": 8}}
    data["runs"][0]["deadline"] = "2026-07-02"
    r = fleet(data, buy=True, jobs=1)
    assert r.late_runs >= 1 and r.conflict is not None and r.left_out == []
    assert any(run.name == "pretrain-a" for run in r.runs)


def test_what_a_plan_bought_is_owned_and_the_rest_still_offered() -> None:
    # Under --buy the conflict analysis's remedies add to what the plan bought: its program had
    # inherited the options fixed at the bought level, so a further purchase never saw the options
    # it keeps. Counted from what was bought, an option kept with 0-2 or 5-8 nodes bought is, after
    # 3 bought, kept with 2-5 more; owned as bought (nothing more), it is not offered.
    p = Program(runs=[ProgramRun(name="a", options=[
        Option(gpu_type="H", gpus=8, days=5, cost=0),
        Option(gpu_type="H", gpus=64, days=1, cost=0, bought_nodes=((0, 2), (5, 8)))])],
        capacity={"H": (16,) * 10}, buy={"H": Offer(from_day=2, node_gpus=8, max_nodes=10, cost=100)})
    owned = program.with_purchase(p, {"H": 3})
    assert owned.buy == {} and owned.capacity["H"] == (16, 16) + (40,) * 8
    assert [o.bought_nodes for o in owned.runs[0].options] == [None, ()]
    more = program.with_purchase(p, {"H": 3}, more=True)
    assert more.capacity == owned.capacity and more.buy["H"].max_nodes == 7
    assert [o.bought_nodes for o in more.runs[0].options] == [None, ((2, 5),)]
