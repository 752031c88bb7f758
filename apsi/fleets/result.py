"""What fleet() returns: one row per run, GPU use per type by month, the objective stages, totals, conflicts.

Owns the output models only (pydantic, frozen); apsi.fleets.api fills them, apsi.fleets.render prints
them. Days are whole days of the horizon's grid; dates are calendar days (a run's `end` is the
last day it holds its GPUs).
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

from apsi.fleets.tables import Status
from apsi.model.schema import Layout
from apsi.model.notebook import Shown
from apsi.model.documented import Documented


class Segment(Documented):
    """One stretch of an elastic run on one option (apsi.fleets.elastic)."""

    gpu_type: str
    """The GPU type it holds."""
    gpus: int
    """GPUs held, whole nodes (its option's)."""
    layout_text: str
    """Its option's layout, as FleetRow.layout_text."""
    start: dt.date
    """Its first day holding the GPUs."""
    end: dt.date
    """Its last day holding the GPUs."""
    start_day: int
    """Days from the horizon's start to `start`."""
    days: int
    """Whole days held."""


class FleetRow(Documented):
    """One run of the fleet and where the program put it."""

    name: str
    """The run's name (a grid's runs carry their values, as in scenario files)."""
    scheduled: bool
    """False for an optional run left out (or, in an infeasible fleet, every run)."""
    optional: bool
    """Whether the run may be left out."""
    gpu_type: str | None = None
    """The GPU type chosen."""
    gpus: int | None = None
    """GPUs held: whole nodes."""
    nodes: int | None = None
    """Whole nodes held (GPUs / the type's gpus_per_node)."""
    layout: Layout | None = None
    """The frontier's layout on those GPUs (its GPUs may be fewer than those held, within the last node)."""
    layout_text: str = ""
    """The layout in short: TP x PP x DP (with CP and EP past 1), recomputation."""
    start: dt.date | None = None
    """The first day it holds its GPUs."""
    end: dt.date | None = None
    """The last day it holds its GPUs."""
    start_day: int | None = None
    """Days from the horizon's start to `start`."""
    days: int | None = None
    """Whole days held."""
    run_days: float | None = None
    """The frontier's duration, days (days is this rounded up)."""
    gpu_hours: float | None = None
    """GPUs held x run_days x 24."""
    cost_usd: float | None = None
    """gpu_hours x the type's $/GPU-hour: what its GPU-hours are worth (on owned GPUs, not charged:
    FleetResult.cost_usd is what is paid); None without a price."""
    deadline: dt.date | None = None
    """The last day it may hold its GPUs."""
    late_days: int = 0
    """Days past its deadline that it ends (0 when it meets it or has none)."""
    slack_days: int | None = None
    """Days between its end and its deadline (negative: late); None without a deadline. Under the
    fleet's `confidence: high`, counted from its end at the slow end of its calibrated days."""
    after: list[str] = []
    """The runs it comes after."""
    why: str = ""
    """What decided its slot, in one sentence."""
    segments: list[Segment] = []
    """An elastic run's segments in order (its GPU type, GPUs and layout are the first one's, start_day
    and days span them all; gpu_hours and cost_usd are their whole days held); empty for a fixed run."""


class MonthUse(Documented):
    """GPU use of one type in one calendar month of the horizon."""

    month: str
    """YYYY-MM."""
    gpu_type: str
    """The GPU type."""
    days: int
    """Days of the month within the horizon."""
    mean_gpus_used: float
    """GPU-days held by runs / days."""
    mean_gpus_available: float
    """GPU-days in the inventory / days."""


class StageReport(Documented):
    """One objective stage: its value at the plan and how far from proved."""

    name: str
    """deadlines, tardiness, purchase, cost, makespan, optional, restarts or (a re-plan's) moved
    (docs/method.md 4.12)."""
    status: Status
    """OPTIMAL: proved; FEASIBLE: stopped by the time limit (see gap); INFEASIBLE or UNKNOWN with no
    value: no schedule; UNKNOWN with a value: the time ran out before the stage's search improved on
    the schedule, whose value it is (no bound)."""
    value: int | None
    """The stage's objective (deadlines: weight late; tardiness: weighted days late; cost and
    purchase: US dollars paid beyond the GPUs owned, each node's cost rounded to whole dollars as
    the program counts it, FleetResult.cost_usd the exact sum; makespan: days; optional: minus the
    weight of optional runs scheduled; restarts: the elastic runs' segments after their first)."""
    bound: int | None
    """The best bound CP-SAT proved for the stage."""
    gap: float | None
    """|value - bound| / max(1, |value|): 0 when proved."""


class Remedy(Documented):
    """One change that resolves the conflict, verified by solving again."""

    kind: Literal["gpus", "deadline", "horizon"]
    """gpus: more GPUs of a type for the whole horizon; deadline: a deadline later; horizon: a longer horizon."""
    gpu_type: str | None = None
    """The type to add (kind gpus)."""
    gpus: int | None = None
    """GPUs to add, whole nodes (kind gpus)."""
    run: str | None = None
    """The run whose deadline moves (kind deadline)."""
    days: int | None = None
    """Days later (kind deadline) or days more of horizon (kind horizon)."""
    first: dt.date | None = None
    """The first day the GPUs added are there (kind gpus: the start, or the `buy:` lead time)."""
    cost_usd: float | None = None
    """What the GPUs added cost at the `buy:` terms, US dollars (kind gpus; None without a price)."""
    proved: bool = True
    """kind gpus: True when no fewer nodes of the type would do; False when the time ran out first."""
    text: str
    """The remedy in one sentence."""


class Purchase(Documented):
    """GPUs of one type bought or rented (apsi fleet --buy): the plan's purchase, or the least of
    one type alone that meets every deadline."""

    gpu_type: str
    """The GPU type."""
    nodes: int
    """Whole nodes."""
    gpus: int
    """GPUs: nodes x the type's GPUs per node."""
    first: dt.date
    """The first day they are there (the `buy:` lead time); rented, they are held to the horizon's end."""
    how: Literal["bought", "rented"]
    """bought: at a price per GPU, once; rented: at a price per GPU-hour from `first` to the horizon's end."""
    cost_usd: float | None
    """What they cost at those terms, US dollars (None without a price)."""
    proved: bool
    """True when no cheaper purchase (of this type alone, for an alternative) meets every deadline."""


class Conflict(Documented):
    """A minimal set of runs (kind runs) or deadlines (kind deadlines) that cannot all hold."""

    kind: Literal["runs", "deadlines"]
    """runs: the required runs cannot all be scheduled; deadlines: they can, not all by their deadlines."""
    runs: list[str]
    """The runs whose being scheduled (kind runs) or whose deadline (kind deadlines) is in the set."""
    minimal: bool
    """True when every deletion test was answered: each member is needed."""
    text: str
    """The conflict in one sentence."""
    remedies: list[Remedy]
    """Changes that resolve it, each verified by solving again."""


class FleetResult(Shown, Documented):
    """A fleet plan."""

    status: Status
    """OPTIMAL: every stage proved (the plan repeats byte for byte); FEASIBLE: a stage stopped by
    the time limit (see its gap; the plan may then depend on the machine's speed);
    INFEASIBLE: the required runs cannot all be scheduled within the horizon (see conflict);
    UNKNOWN: the time limit passed before any schedule was found."""
    start: dt.date
    """Day 0 of the horizon."""
    horizon_days: int
    """Days in the horizon."""
    objective: list[str]
    """The objective stages, in the order solved."""
    confidence: str = "expected"
    """The days each run is planned at: expected, or high (the slow end of its calibrated range)."""
    stages: list[StageReport]
    """Each stage as solved: value, bound, proof status."""
    runs: list[FleetRow]
    """One row per run, in the file's order (grids expanded)."""
    months: list[MonthUse]
    """GPU use per type in each calendar month of the horizon."""
    inventory: dict[str, list[tuple[int, int]]] = {}
    """Each type's count over the horizon as (first day, GPUs) wherever it changes, day 0 first."""
    cost_usd: float | None
    """What is paid beyond the GPUs owned, US dollars: the purchase (apsi fleet --buy), else 0. The
    inventory is owned: its cost is sunk, and its GPU-hours are not charged (gpu_hours_usd is
    their value). None when a purchase has no price."""
    gpu_hours_usd: float | None = None
    """The runs' GPU-hours at each type's $/GPU-hour (FleetRow.cost_usd summed): what they are worth,
    for information, not what is paid; None when a type has no price."""
    utilisation: dict[str, float] = {}
    """Per GPU type, the GPU-days the runs hold over the GPU-days there in the horizon (0 to 1):
    owned GPUs idle are the waste."""
    idle_after_share: float | None = None
    """Of the idle GPU-days of every type, the share after the last run ends (no run is left then
    to use them); None when no GPU-day is idle."""
    gpu_hours: float
    """GPU-hours of the runs scheduled (GPUs held x their frontier days x 24)."""
    makespan_days: int
    """Days from the horizon's start to the last day any run holds GPUs, inclusive."""
    late_runs: int
    """Runs scheduled that end past their deadline."""
    power_cap_mw: float | None = None
    """The fleet's power cap, MW (None: none)."""
    peak_power_mw: float | None = None
    """Under a cap, the most facility power the runs' GPUs draw on one day, MW (board power x PUE)."""
    options: int
    """Options the program chose among (all runs, all types)."""
    solver_work_s: float
    """CP-SAT's deterministic time over the program's stages: its measure of work, not a wall
    time (it repeats exactly; on these models it runs well behind the wall clock)."""
    conflict: Conflict | None = None
    """Set when a required run cannot be scheduled or a deadline is missed."""
    purchase: list[Purchase] = []
    """apsi fleet --buy: what the plan buys or rents, one entry per type bought (none: the owned
    inventory meets every deadline). The inventory is owned: its GPUs are not charged for it."""
    purchase_cost_usd: float | None = None
    """apsi fleet --buy: what the purchase costs, US dollars: what is paid beyond what is owned."""
    purchase_alternatives: list[Purchase] = []
    """apsi fleet --buy: for each type that may be bought, the least of it alone that meets every
    deadline (a type absent: none of it alone does, or none was found in the time)."""
    unplaced: list[str] = []
    """UNKNOWN only: the required runs apsi's greedy first schedule (list scheduling) found no room
    for within the horizon, which is why it could not stand in for a search that found nothing in
    the time limit (a complete greedy schedule stands in: FEASIBLE, never UNKNOWN)."""
    notes: list[str] = []
    """GPU types a run cannot use (no layout fits them), and the like."""
    left_out: list[str] = []
    """Runs left out because their question was refused (their inputs, their pins, no layout that
    fits), and the runs after them, one line each (the run, its line in the file and why): each
    costs only itself, the others are planned without it (apsi fleet exits 1)."""
