"""The fleet program's input and output as plain integers: option tables, capacities, the schedule.

Owns the data apsi.fleets.program reads and returns, and nothing else: no solving, no frontier,
no dates. A Program is what remains of a fleet once every run's options are known (apsi.fleets.options
reads them off the runs' frontiers; tests write them directly): days counted from the horizon's
first day (day 0), GPUs per option, costs in whole units (US dollars from apsi.fleets.options).
"""

from __future__ import annotations

from typing import Literal

from apsi.model.documented import Documented


class Option(Documented):
    """One way to do a run: this many GPUs of this type for this many whole days."""

    gpu_type: str
    """The GPU type, a key of Program.capacity."""
    gpus: int
    """GPUs held from the start day to the end day."""
    days: int
    """Whole days held (the run's duration rounded up)."""
    cost: int
    """Cost in whole units (apsi.fleets.options: US dollars, rounded to the nearest)."""
    bought_nodes: tuple[tuple[int, int], ...] | None = None
    """Under Program.buy, the nodes of its type bought (inclusive ranges) with which the option is
    one of the run's options: those the inventory they make would keep (apsi.fleets.options,
    thinned); None: with any. A program with nothing more to buy offers it where a range holds 0."""
    minutes: int | None = None
    """The run's own duration on the option in whole minutes (its frontier days, rounded up), at
    most days x 1,440: what an elastic run's segment on it does a share of (apsi.fleets.elastic);
    None: its whole days."""

    @property
    def work_minutes(self) -> int:
        """Minutes the whole run takes on the option: `minutes`, else its whole days'."""
        return self.days * 24 * 60 if self.minutes is None else self.minutes

    def offered(self, nodes: int) -> bool:
        """Whether the option may be chosen with `nodes` nodes of its type bought."""
        return self.bought_nodes is None or any(a <= nodes <= b for a, b in self.bought_nodes)


class ProgramRun(Documented):
    """One run: its options and its rules."""

    name: str
    options: list[Option]
    """The ways to do it (at least one)."""
    start_after: int = 0
    """The first day it may start."""
    deadline: int | None = None
    """The day by which it should end (end <= deadline), or None."""
    weight: int = 1
    """Its weight in the deadlines, tardiness and optional stages."""
    optional: bool = False
    """True: it may be left out."""
    after: list[int] = []
    """Indices of the runs it starts after (each must have ended)."""
    started: int | None = None
    """The day it started on, for a run already running (it stays there, on its one option), or None."""
    elastic: bool = False
    """True: it may change its option at checkpoint boundaries, in up to apsi.fleets.elastic.SEGMENTS
    segments, a restart at each change."""
    fixed: list[tuple[int, int, int]] | None = None
    """An elastic run already running (a re-plan of a saved answer that started it): its segments
    begun before the re-plan's day (`resumed`) as (option, first day, days), kept where they are;
    None: the program places them."""
    resumed: int | None = None
    """With `fixed`: the re-plan's day. A fixed segment that ends on it was running then and may
    run on; the work the fixed segments leave is done in segments from it (apsi.fleets.elastic)."""


class Offer(Documented):
    """GPUs of one type that may be bought or rented (apsi fleet --buy): whole nodes, there from
    `from_day` to the horizon's end, each node at `cost`."""

    from_day: int = 0
    """The first day bought nodes are there (the lead time, in days from the horizon's start)."""
    node_gpus: int
    """GPUs per node: the unit bought."""
    max_nodes: int
    """The most nodes that may be bought."""
    cost: int
    """Cost of one node in whole units (apsi.fleets.buy: US dollars)."""


class Program(Documented):
    """Runs on a GPU inventory over a horizon of whole days."""

    runs: list[ProgramRun]
    capacity: dict[str, tuple[int, ...]]
    """GPUs of each type on each day of the horizon (one count per day)."""
    node_gpus: dict[str, int] = {}
    """GPUs per node of each type: the unit in which the program suggests more GPUs."""
    power_w: dict[str, int] = {}
    """Facility watts per GPU of each type (board power x PUE), for the power cap."""
    power_cap_w: int | None = None
    """The most watts the runs may draw on any day together; None: no cap."""
    buy: dict[str, Offer] = {}
    """Types whose nodes the program may buy (a key of capacity each), with their offer; the
    purchase stage minimises what they cost."""
    saved: tuple[list[int], list[int]] | None = None
    """A re-plan's saved answer as each run's option and first day (-1: not placed there), where
    the search starts in place of the greedy schedule's (apsi.fleets.program.schedule)."""
    saved_segments: dict[int, list[tuple[int, int, int]]] = {}
    """With `saved`, each elastic run's saved segments as (option, first day, days), by run index,
    where every one's option is still the run's: the `moved` stage keeps them all."""

    @property
    def horizon_days(self) -> int:
        return len(next(iter(self.capacity.values()))) if self.capacity else 0


Status = Literal["OPTIMAL", "FEASIBLE", "INFEASIBLE", "UNKNOWN"]


class Stage(Documented):
    """One objective stage as solved."""

    name: str
    """deadlines, tardiness, purchase, cost, makespan, optional or restarts (apsi.fleets.program)."""
    status: Status
    """OPTIMAL: the value is proved the least; FEASIBLE: the time limit stopped the search, the
    bound says how far it could still be; INFEASIBLE / UNKNOWN on the first stage: no schedule;
    UNKNOWN on a later one: the time ran out before its search improved on the schedule."""
    value: int | None = None
    """The stage's objective at the schedule (the optional stage: minus the weight kept); None
    where there is no schedule."""
    bound: int | None = None
    """The best bound proved: value - bound is the gap left."""


class Schedule(Documented):
    """The program's answer."""

    status: Status
    """OPTIMAL when every stage's search ran to its proof; FEASIBLE when the time limit stopped one
    (its value may still be proved: a stage's own status says)."""
    stages: list[Stage]
    choice: list[int]
    """Per run, the index of its chosen option, -1 when left out."""
    start: list[int]
    """Per run, its start day (a run left out: its start_after)."""
    bought: dict[str, int] = {}
    """Nodes bought per type (Program.buy), 0 where none."""
    segments: dict[int, list[tuple[int, int, int]]] = {}
    """Per elastic run (by index), its segments as (option, start day, days held), in order; its
    choice and start are its first segment's, and it ends where its last one does."""
    work_s: float = 0.0
    """CP-SAT's deterministic time over the stages (its measure of work, which repeats exactly)."""
    unplaced: list[int] = []
    """UNKNOWN only: the required runs (by index) the greedy first schedule found no room for, the
    reason it could not stand in for the search that found nothing in its time."""
