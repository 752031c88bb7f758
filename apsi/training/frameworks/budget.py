"""A budget for the framework search's work: questions that would take minutes refused in one line.

Owns the work limits of plan(), frontier() and largest() under a framework and the refusals
that name what to narrow. Two checks, both deterministic (they count work, never read a clock,
so the same question is refused or answered on every machine):

- before the walk, the data-parallel range: a batch of B sequences allows every dp up to
  min(cap, B (1 + tolerance) / micro_batch), each a layout the walk may weigh one by one (the
  step-time model is not monotone in dp), so past MAX_DP_RANGE the question is refused at once
  (check_dp_range);
- the work, in units of estimated microseconds on the machine of docs/benchmarks.md (u): each
  group of configurations of each search when the searches are built (so a space too large to
  walk is refused before the walk starts), then during the walk each memory evaluation (a
  framework's peak_bytes), each visit of a configuration (Search.meeting), each floor verdict
  (Search.too_slow) and each tail floor it works out (charged there), each layout's duration asked
  (Search.exact), each dp of a micro-batch group's listing (once per question: its searches
  share the listing) and, in a frontier, each entry of
  its chain's queue taken up (Search.queued), all charged to one Budget
  shared by the question's searches (the explanation's what-if walks included: they share the
  counted framework); past WORK_BUDGET (FRONTIER_BUDGET for a frontier) the question stops
  with a refusal saying how far it got and what to narrow (the pins, the GPU types, the cap; for
  a frontier, the cap up to which its points were found).

Neither limit applies to the presets' ordinary plans (tests/test_budget.py). Does no arithmetic
of its own and no I/O.
"""

from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any, cast

from apsi.errors import LayoutError
from apsi.training.frameworks.bounds import Search

if TYPE_CHECKING:
    from apsi.catalog import GPU
    from apsi.training.frameworks.batch import MicroRule
    from apsi.training.frameworks.interface import Framework
    from apsi.training.frameworks.space import Config
    from apsi.inputs.question import Setup

# The constants below are marginal costs fitted (least squares on the relative error, none
# negative) to the CPU seconds of 21 questions, each run in its own process with the budget lifted
# and every event counted (the frontiers of Qwen3-30B-A3B, Qwen3-235B-A22B, Mixtral 8x22B, the
# DeepSeek-V3 ones in bf16, fp8 and under torchtitan, Llama 3.1 70B at 15T tokens and 405B, the
# 1T MoE, Llama 3.2 1B at seq 128, Qwen3-235B-A22B at a 64M-token batch within 20,000 GPUs; the
# plans of DeepSeek-V3 on H100, in fp8, on every GPU type, fastest within a million GPUs, with
# every micro-batch size, at a 1M-token seq, of Qwen3-235B-A22B fastest, Llama 3.1 8B at a
# 1-token seq and Llama 3.1 70B) on the machine of docs/benchmarks.md (u) at a load of about 4 (other
# work on both of its 2 cores, which makes its CPU seconds about 1.3 times those at a load of 2):
# 95 us per group, 93 per memory evaluation, 28 per floor verdict, 88 per visit, 1.1 per dp
# listed. The fit is within 25% on 17 of the 21; it underestimates questions with many groups and
# few memory evaluations (DeepSeek-V3 at a 1M-token seq, 1.6 times), hence GROUP_US above it.

MEMORY_US = 90
"""Work units (estimated microseconds) of one memory evaluation, a framework's peak_bytes over
every stage of a split (fitted: 93 us each)."""

FLOOR_US = 28
"""Work units of one floor verdict (Search.too_slow with what it asks: a dict lookup where the
verdict is kept, the step's tail floor at this dp where not; fitted: 28 us each)."""

GROUP_US = 150
"""Work units of one group of configurations of one search (apsi.training.frameworks.space: its members
made, its K bounds worked out, its bounds in the walk's queue), charged when the searches are
built: fitted 95 us, but 162 us each over DeepSeek-V3 at a 1M-token seq (85,255 groups, 13.8 CPU
s with few memory evaluations). Charged per search although the GPU types of one NVLink domain
and the micro-batch sizes share the groups made: each search still bounds and queues every one
(DeepSeek-V3 over nine GPU types ran 1.4 us per unit with each group charged once)."""

TAIL_US = 25
"""Work units of one tail floor worked out (Search.too_slow past its cheap floor: the PP fill and
drain, the exposed DP traffic and the optimizer at a dp, timing.tail_floor), beyond its verdict's
FLOOR_US. Not in the fit above: timed inside the plans themselves (2026-12-07, the machine of
docs/benchmarks.md), a tail floor took 5.5 CPU us in DeepSeek-V3's objective=days plan, 9.6 in
its frontier and 13.3 in Qwen3-30B-A3B's at a 1-token seq (its dps many and distinct, so
_dp_part's cache misses): 25 units is 8.75 us at UNIT_SECONDS. Before it that Qwen3 question,
nearly a million tail floors, ran 16.5 CPU seconds to a refusal that said about 11."""

EXACT_US = 80
"""Work units of one layout's duration asked (Search.exact: the step-time model at one dp, kept
where asked before). Not in the fit above: the cost walk (walk.cheapest) weighs the later dps of a
configuration one by one, and at a 1-token seq Qwen3-30B-A3B's cost and energy plans asked 533,169
in 15 CPU seconds (28 us each, 2026-12-07) with 1.6M units charged, answering after 77 s where the
budget said 11; the speed table's questions ask at most 8,145 (DeepSeek-V3's frontier)."""

VISIT_US = 90
"""Work units of one visit of a configuration from a dp (Search.meeting: the walk's queue, the
floors' bookkeeping and window, the fit's bisection, beyond the verdicts and evaluations charged
themselves; fitted: 88 us each)."""

QUEUE_US = 40
"""Work units of one entry of the frontier chain's queue taken up (apsi.training.frameworks.walk.faster:
the heap's pop, a group's bound worked out anew or a family's first dp past the last point, the
entry put back). Not in the fit above; fitted after it on the CPU seconds to the refusal of the
frontiers of Qwen3-235B-A22B (71,247 entries in its first 11M units) and of it at a 64M-token
batch (147,756), which differ in little else: about 22 CPU us per entry where the same fit's other
units took 0.29 us each (0.4 to 0.5 averaged over whole questions) on the machine of
docs/benchmarks.md (y) at a load below 1, so 40 units. Without it the frontier with
the most entries per visit ran 1.2 to 1.4 times longer per unit than the others."""

DP_US = 1
"""Work units of one dp weighed for the batch when a micro-batch group's legal dps are listed
(apsi.training.frameworks.layouts: every dp up to the cap tried against the batch tolerance; fitted: 1.1 us
each, Llama 3.1 8B at a 1-token seq lists 2.6 million). The listing has since been inlined (about
0.16 us a dp, apsi.training.frameworks.batch._listed) and is made once per question, charged so
(BudgetedSearch._batch_dps): a unit is now more than a listed dp takes."""

UNIT_SECONDS = 0.35e-6
"""CPU seconds one work unit takes now, for the refusal's "about N CPU seconds": the units above
were fitted as microseconds of the walk of the time, and the walk has since been made cheaper per
unit (the recomputations' memory lattice, the fastest walk's closed-form window). Measured on the
machine of docs/benchmarks.md (speed table), each question cold in a fresh process, CPU seconds
over units: DeepSeek-V3 objective=days 4.23 s / 9.9M, in fp8 5.25 / 12.8M, gpu=any 3.64 / 9.9M,
days with every GPU type and micro-batch size 9.39 / 30.1M, its frontier 6.69 / 25.9M,
Qwen3-235B-A22B's frontier 4.73 / 15.4M: 0.26 to 0.43 us a unit, 0.35 the median."""

WORK_BUDGET = 40_000_000
"""The work units one plan may spend: about 14 CPU seconds (UNIT_SECONDS), the most a refusal
takes. The ordinary plans of the presets stay far under it, and so does every question of the speed
table (docs/benchmarks.md), the heaviest DeepSeek-V3 fastest over every GPU type and micro-batch
size (33.1M cold, its tail floors charged: TAIL_US); Qwen3-30B-A3B at a 1-token seq passes it
and is refused, with objective=days (about 18 CPU s on a busy machine of docs/benchmarks.md, where
DeepSeek-V3's objective=days plan took 1.3 times its quiet time) and with cost or energy (12 to 14
CPU s, its durations charged: EXACT_US)."""

FRONTIER_BUDGET = 32_000_000
"""The work units a frontier may spend (a plan's budget and the chain's queue, QUEUE_US, charged
only there): DeepSeek-V3's frontier spends 15.1M, Qwen3-235B-A22B's at a 64M-token batch, which
passed it before the lattice and the whole step's floors (48.4M), 21.0M (measured 2026-12-07,
tail floors and durations charged: TAIL_US, EXACT_US)."""

SPLIT_UNITS_PER_CHUNK = 0.125
"""Work units per virtual stage of a candidate split (apsi.training.frameworks.space lists every pp up to the
layers and every vpp up to space.vpp_most, each split a list of pp x vpp chunk sizes summed rank by rank):
measured 7.0 CPU s in the configurations of a 3,000-layer 175B model (36 x 3,000^2 / 2 chunks, 44 ns
each, 0.125 units at UNIT_SECONDS), so that one of 10,000 layers is refused at once, where it ran
63 s and 3.4 GiB to an answer; DeepSeek-V3's 61 layers cost 1,190 units (8,400 when every vpp up to 8
was listed at every pp, a chunk of no layer included)."""


def split_units(layers: int, pins: dict) -> int:
    """Work units of listing the pipeline splits of every pp up to `layers` (or the pinned pp) and
    every vpp up to space.vpp_most (or the pinned one): about chunks x SPLIT_UNITS_PER_CHUNK."""
    from apsi.training.frameworks.space import vpp_most

    pps = [pins["pp"]] if "pp" in pins else range(1, layers + 1)
    chunks = 0  # every pp with every vpp (a virtual stage may hold no layer)
    for pp in pps:
        most = pins["vpp"] if "vpp" in pins else vpp_most(layers, pp)
        chunks += pp * (most if "vpp" in pins else most * (most + 1) // 2)
    return int(chunks * SPLIT_UNITS_PER_CHUNK)


MAX_DP_RANGE = 250_000
"""The widest data-parallel range a question may leave open, as the frontiers' cap
(apsi.training.frameworks.frontier.MAX_FRONTIER_GPUS): a dp range of a million (a 1-token sequence, a
4M-sequence batch, a cap of a million GPUs) makes lists of a million dps per micro-batch group and
a fastest walk over them that ran past 60 s on the machine of docs/benchmarks.md (u)."""


class WorkBudgetExceeded(LayoutError):
    """The walk spent its WORK_BUDGET without settling the answer; the message says what to narrow."""


class Budget:
    """The work one question has spent, shared by its searches; `advice` is the refusal's tail
    (what to narrow) and `progress` how far the question got (the frontier's points so far)."""

    def __init__(self, advice: str, frontier: bool = False):
        self.advice, self.used = advice, 0
        self.limit = FRONTIER_BUDGET if frontier else WORK_BUDGET
        self.progress: str = ""
        self.split_layers: set[int] = set()
        """The layer counts whose pipeline splits were charged (split_units): once per question."""
        self.tail_units = TAIL_US
        """TAIL_US, where Search.too_slow charges it inline."""
        self.listed: set[tuple] = set()
        """The dp listings charged (BudgetedSearch._batch_dps, by batch_dps' arguments): once per question."""

    def words(self) -> str:
        """The budget as its refusal names it: "(40M units, about 14 CPU seconds)"."""
        return f"({self.limit / 1e6:g}M units, about {self.limit * UNIT_SECONDS:.0f} CPU seconds)"

    def charge(self, units: int, what: str = "") -> None:
        """Adds `units` of work; past the limit, the refusal. Work charged before it is done
        (`what` names it) is refused before it starts, in words that say so."""
        self.used += units
        if self.used > self.limit:
            budget = self.words()
            if what:
                raise WorkBudgetExceeded(
                    f"this search would pass its work budget {budget}: {what} alone would take about "
                    f"{units * UNIT_SECONDS:,.0f} CPU seconds{self.progress}: {self.advice}")
            raise WorkBudgetExceeded(
                f"this search passed its work budget {budget} before settling the answer{self.progress}: "
                f"{self.advice}")


def counted(fw: Framework, budget: Budget) -> Framework:
    """`fw` with its peak_bytes charged to `budget` (a copy of the module's namespace: every other
    attribute is the module's own, and searches built from it, the explanation's included, are
    charged too)."""
    module = cast(types.ModuleType, fw)  # a framework is a module (apsi.training.frameworks.framework_module)
    copy = types.ModuleType(module.__name__, module.__doc__)
    copy.__dict__.update({k: v for k, v in vars(module).items() if k not in ("__name__", "__doc__")})
    peak = fw.peak_bytes

    def peak_bytes(*args: Any, **layout: Any) -> float:
        budget.charge(MEMORY_US)
        return peak(*args, **layout)

    copy.__dict__["peak_bytes"] = peak_bytes
    return copy  # type: ignore[return-value]  # a module with the Framework's attributes


class BudgetedSearch(Search):
    """A Search whose floor verdicts are charged to a Budget (its memory evaluations are, through
    counted())."""

    budget: Budget

    def __init__(self, budget: Budget, fw: Framework, s: Setup, gpu: GPU, cap: int, pins: dict,
                 tolerance: float):
        layers = s.model.architecture.layers
        if layers not in budget.split_layers:
            # Before the configurations are made: the framework's splits of every pp and vpp, work
            # that grows with the square of the layers (a 10,000-layer model ran a minute in them).
            budget.split_layers.add(layers)
            budget.charge(split_units(layers, pins), f"listing the pipeline splits of {layers:,} layers")
        super().__init__(counted(fw, budget), s, gpu, cap, pins, tolerance)
        self.budget = budget
        budget.charge(GROUP_US * sum(shape.levels for shape in self.shapes))

    def too_slow(self, c: Config, dp: int, m: int, target: float, floors: dict | None = None) -> bool:
        budget = self.budget
        budget.used += FLOOR_US  # Budget.charge(FLOOR_US), inline: the walks' hottest call
        if budget.used > budget.limit:
            budget.charge(0)  # the refusal
        return super().too_slow(c, dp, m, target, floors)

    def exact(self, *args: Any, **kwargs: Any) -> Any:
        budget = self.budget
        budget.used += EXACT_US  # Budget.charge(EXACT_US), inline
        if budget.used > budget.limit:
            budget.charge(0)  # the refusal
        return super().exact(*args, **kwargs)

    def queued(self) -> None:
        self.budget.charge(QUEUE_US)

    def meeting(self, *args: Any, **kwargs: Any) -> Any:
        self.budget.charge(VISIT_US)
        return super().meeting(*args, **kwargs)

    def _batch_dps(self, micro: MicroRule) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Charge the listing of a micro-batch rule's legal dps (every dp up to the cap, or the
        batch's widest, tried against the batch tolerance) once per question: its searches share
        the listing (apsi.training.frameworks.batch keeps it), so the question's charge does not
        depend on what the process asked before. A rule with rounds is made from its group's
        listing, and one with a least count from the rule's without it (batch_dps), which is
        listed and charged first."""
        if micro not in self._batch:
            if micro.least > 1:
                self._batch_dps(micro._replace(least=1))
            elif micro.rounds:
                self._batch_dps(micro._replace(rounds=0))
            key = self._batch_args(micro)
            if key not in self.budget.listed:
                self.budget.listed.add(key)
                self.budget.charge(self.listing_units(micro))
        return super()._batch_dps(micro)

    def listing_units(self, micro: MicroRule) -> int:
        """The work units charged for listing a micro-batch rule's legal dps: a dp each, or with
        rounds a dp each of those whose count they may move (m >= 2 rounds, so m b dp <= B_max puts
        dp at most B_max / (2 rounds b)), its group's listing charged apart; with a least count
        (`least`), a dp each of those it moves and keeps (their batch m b dp, m >= least, above B
        and at most B_max: dp in an interval (B_max - B) / (m b) <= (B_max - B) / (least b) wide,
        one more than that at most) and the first past them, the rule's listing without it charged
        apart."""
        if micro.least > 1:
            return DP_US * (2 + min(self.cap, int((self.b_max - self.big_b) // (self.mb * micro.least))))
        if micro.rounds:
            return DP_US * min(self.cap, int(self.b_max // (self.mb * 2 * micro.rounds)))
        return DP_US * min(self.cap, int(self.b_max // (self.mb * micro.group)))


def advice(s: Setup, pins: dict, cap: int, sizes: list[int], *, name_cap: bool = True) -> str:
    """What to narrow, for this question: pin the degrees not pinned (ep for an MoE only), one
    micro-batch size where several are walked, one GPU type where several are, and unless
    `name_cap` is false (largest(): the GPUs are the question) a smaller cap. A frontier that
    found points names the cap that draws them too (Budget.progress)."""
    degrees = ("tp", "pp", "ep", "cp") if s.model.architecture.experts else ("tp", "pp", "cp")
    free = [k for k in degrees if k not in pins]
    ways = []
    if free:
        ways.append("pin " + ", ".join(free[:-1]) + (" or " if len(free) > 1 else "") + free[-1]
                    + " (" + " ".join(f"--{k}" for k in free) + ")")
    if len(sizes) > 1:
        ways.append(f"one micro-batch size (--micro-batch {sizes[0]}) instead of {len(sizes)}")
    if len(s.candidates) > 1:
        ways.append(f"give one GPU type (--gpu) instead of {len(s.candidates)}")
    if name_cap:
        ways.append(f"fewer gpus (now {cap:,})" if s.gpus is not None else f"lower max_gpus (now {cap:,})")
    return "; ".join(ways) if ways else "narrow the question"


def check_dp_range(s: Setup, cap: int, pins: dict, tolerance: float, micro_batch: int) -> None:
    """Refuse at once a question whose batch and cap leave over MAX_DP_RANGE data-parallel degrees."""
    if "dp" in pins:
        return
    widest = min(cap, int(s.batch_sequences * (1 + tolerance)) // micro_batch)
    if widest > MAX_DP_RANGE:
        fewer = max(1, MAX_DP_RANGE)
        raise WorkBudgetExceeded(
            f"the batch of {s.batch_sequences:,} sequences of {s.seq:,} token{'s' if s.seq != 1 else ''} within {cap:,} GPUs leaves data "
            f"parallelism from 1 to {widest:,}, each a layout to weigh (over a minute of search): pin dp, give a "
            f"longer seq or a smaller batch, or lower max_gpus to {fewer:,}")
