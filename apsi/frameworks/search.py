"""The framework layout search: every legal layout, each judged by its framework's memory model.

Owns choosing the GPU type, tp, pp and its split, vpp, cp, ep, etp, the ZeRO stage, dp and the
recomputation level for plan(framework=...): the fewest GPUs meeting the target (ties: shortest,
then the GPU types' order, lighter recomputation, smaller pp, tp, cp, vpp, ep, etp, ZeRO stage,
and the first of the framework's splits that fits), or, when none meets it, the fastest within the
GPU cap. The framework (apsi.frameworks.megatron, .torchtitan, .deepspeed) gives the choices of
each knob, the rules, the splits and the memory; this module has no framework's rule in it.
Exact by exhaustion, with these facts doing the work (tests/test_search.py checks the answers
against a plain enumeration of every layout, each judged by evaluate()):

- for a fixed configuration (every knob but dp), memory on every stage falls as dp grows (state
  shards shrink, fewer micro-batches are in flight), so the layouts that fit are a suffix of the
  configuration's legal dps, found by bisection;
- the duration is at least K / (t p c) (1 / dp + (p - 1) / (v B_max)), B_max the largest batch
  the tolerance allows (at a flat MFU, K / (t p c dp) (1 + (p - 1) / (v m)) exactly; under the
  step-time model K counts the layers' compute and traffic on the most loaded rank,
  apsi.frameworks.timing.floor_k), which falls with dp: it bounds each configuration's fewest
  GPUs and its shortest duration from below in closed form, so configurations are visited in
  order of that bound and the walk stops once the bound passes the best layout found; under the
  step-time model durations are not monotone in dp, and each configuration's dps are checked one
  by one from its bound, each first against floors of its whole step (Search.too_slow) before
  any memory evaluation or step time;
- the split only moves memory, and each split's memory falls with dp, so "some split fits" falls
  too.

The batch: a layout runs m micro-batches of b sequences on each of dp replicas, so the batch it
trains is m b dp. With batch_tolerance t (default 5%) m is the whole number (a multiple of the
framework's group, pp under Megatron's interleaved schedule) whose batch is nearest the one asked
for, and the layout is legal when that batch is within t of it; t = 0 asks the batch exactly.

Not the CP-SAT program: plan()'s program still works on the reference arithmetic. A Search has one
micro-batch size (1 sequence unless pinned); plan() walks one Search per size of MICRO_BATCHES and
GPU type together, so the micro-batch is chosen with the rest: under the step-time model a larger
one's longer backward hides more of the DP traffic and its GEMMs run larger, against more
activation memory and, with m falling, a larger bubble.
"""

from __future__ import annotations

import bisect
import functools
import math
import heapq
from fractions import Fraction
from typing import TYPE_CHECKING, NamedTuple

from apsi.catalog import GPU
from apsi.errors import InputError
from apsi.frameworks import timing
from apsi.frameworks.evaluate import capacity_gib, placeable
from apsi.inputs import Setup
from apsi.model import arithmetic as ar
from apsi.model import goodput
from apsi.model import memory as mem
from apsi.model.arithmetic import divisors
from apsi.model.counting import count_parameters
from apsi.units import GIB

if TYPE_CHECKING:
    from apsi.model.schema import Plan

MAX_VPP = 8
"""Largest number of virtual stages tried per pipeline rank (Bridge's recipes use 2 to 8)."""
MIN_CP_CHUNK = 4096
"""Tokens each context-parallel rank keeps at least, unless cp is pinned: published CP runs keep
4,096 (Bridge's 405B, 8,192 over CP 2) to 8,192 tokens (Llama 3 405B, 131,072 over CP 16) per
rank, and a thinner slice leaves the attention's ring traffic less compute to hide behind."""
MICRO_BATCH = 1
MICRO_BATCHES = (1, 2, 4)
"""Sequences per micro-batch plan() tries with micro_batch "any": what Megatron-Bridge's recipes
use (MB-RECIPE: micro_batch_size 1 in most, 2 and 4 in the rest). Each is a Search of its own,
walked together with the GPU types'. Without it the micro-batch is MICRO_BATCH, the frameworks'
default (Megatron's --micro-batch-size, MLM-ARGS), or the one pinned: each size costs a search,
and a first plan() in a process three of them."""


def micro_batch_sizes(pins: dict) -> tuple[dict, list[int]]:
    """The pins without a micro_batch of "any", and the sizes to search: MICRO_BATCHES for "any",
    else the one pinned or MICRO_BATCH."""
    if pins.get("micro_batch") == "any":
        return {k: v for k, v in pins.items() if k != "micro_batch"}, list(MICRO_BATCHES)
    return pins, [pins.get("micro_batch", MICRO_BATCH)]


def sized(pins: dict, mb: int) -> dict:
    """The pins of the search of micro-batch size mb (the default size's are the pins as they are)."""
    return pins if mb == MICRO_BATCH or "micro_batch" in pins else {**pins, "micro_batch": mb}
MAX_TOLERANCE = 0.5
"""The widest batch_tolerance apsi.inputs.check_tolerance accepts."""
BATCH_TOLERANCE = 0.05
"""How far the batch a layout trains may be from the one asked for, as a fraction (the issue's
default 5%): m b dp need not equal it exactly, as no framework needs the batch to be a given
number, only a whole number of micro-batches per replica."""


@functools.total_ordering
class Seconds:
    """A layout's duration k (v m + p - 1) / (t p c dp v m), ordered exactly: in floats where two
    differ by more than a billionth, else as rationals (layouts that trade GPUs for bubble, pp 13 at
    one micro-batch against pp 1, tie exactly and must not be split by rounding)."""

    __slots__ = ("value", "k", "n", "d")

    def __init__(self, k: float, n: int, d: int):
        self.value, self.k, self.n, self.d = k * n / d, k, n, d

    def _cmp(self, other: "Seconds") -> int:
        a, b = self.value, other.value
        if abs(a - b) > 1e-9 * max(a, b):
            return (a > b) - (a < b)
        if self.d == 0 or other.d == 0 or self.k != other.k:
            # A modelled duration (modelled()), or two whose K differ (recomputation levels: full's
            # K is 4/3 of none's in exact arithmetic, not in floats): equal to a billionth.
            return 0
        x, y = Fraction(self.k) * self.n * other.d, Fraction(other.k) * other.n * self.d
        return (x > y) - (x < y)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Seconds) and self._cmp(other) == 0

    def __lt__(self, other: "Seconds") -> bool:
        return self._cmp(other) < 0

    def __hash__(self) -> int:
        return hash(self.value) if self.d == 0 else hash(Fraction(self.k) * self.n / self.d)

    @classmethod
    def modelled(cls, value: float) -> "Seconds":
        """A duration from the step-time model: a float, equal to another within a billionth."""
        out = cls(value, 1, 1)
        out.d = 0
        return out


class Config(NamedTuple):
    """A layout without its data-parallel degree."""

    recompute_rank: int
    pp: int
    tp: int
    cp: int
    vpp: int
    ep: int
    etp: int
    zero: int


def tie(c: Config) -> tuple:
    """The order that breaks ties between equally good layouts: lighter recomputation, smaller pp,
    tp, cp and vpp, a smaller expert grid ep x etp and within it more expert parallelism (less
    expert TP, as Megatron's MoE guide advises for fine-grained experts), then the lower ZeRO
    stage."""
    return (c.recompute_rank, c.pp, c.tp, c.cp, c.vpp, c.ep * c.etp, -c.ep, c.zero)


class Found(NamedTuple):
    gpus: int
    seconds: float
    config: Config
    dp: int
    split: tuple[int, ...]
    """Layers of each virtual stage: the first of the framework's splits that fits at this dp."""
    micro_batches: int
    """Micro-batches per replica: the batch trained is micro_batches x micro-batch x dp."""


def micro_batches(batch: int, micro_batch: int, dp: int, group: int, tolerance: float) -> int | None:
    """The micro-batches per replica whose batch m b dp is nearest `batch` (m a positive multiple
    of `group`; ties keep the larger), or None when that batch is off by more than `tolerance`."""
    unit = micro_batch * dp * group
    low = max(1, batch // unit)
    m = low + 1 if abs((low + 1) * unit - batch) <= abs(low * unit - batch) else low
    return m * group if abs(m * unit - batch) <= tolerance * batch else None


def whole_sequences(s: Setup, tolerance: float) -> list[str]:
    """The Note for a batch asked in tokens that is not a whole number of sequences (the batch is
    its whole sequences, rounded down); beyond the batch tolerance, an InputError naming the
    batches that are whole."""
    asked, kept = s.batch_tokens_asked, s.batch_sequences * s.seq
    if asked is None or asked == kept:
        return []
    change = (kept - asked) / asked
    if -change > tolerance:
        raise InputError(f"a batch of {asked:,} tokens is {s.batch_sequences:,} whole sequence"
                         f"{'s' if s.batch_sequences != 1 else ''} of {s.seq:,} ({kept:,} tokens, {change:+.2%}), beyond "
                         f"the batch tolerance of {tolerance:.0%}: give a multiple of {s.seq:,} tokens ({kept:,} or "
                         f"{kept + s.seq:,}) or a wider batch_tolerance")
    return [f"the batch of {asked:,} tokens asked is {s.batch_sequences:,} whole sequences of {s.seq:,}: "
            f"{kept:,} tokens ({change:+.2%})"]


def memory_knobs(fw, pins: dict) -> dict:
    """The pinned knobs the framework's memory() takes as they are (its MEMORY_KNOBS), and the
    recomputed modules."""
    out = {k: v for k, v in pins.items() if k in fw.MEMORY_KNOBS}
    if pins.get("recompute_modules"):
        out["modules"] = tuple(pins["recompute_modules"])
    return out


class Family:
    """Configurations that share their legal dps (the same recomputation, pp, tp, cp, vpp,
    micro-batch group and dp step) and differ in ep, etp and the ZeRO stage: at a flat MFU only in
    memory, under the step-time model in their traffic too. The bounds are worked out once per
    family (the least over its configurations), and its configurations are made when it is
    visited."""

    __slots__ = ("first", "group", "step", "members", "floors", "least", "most", "index", "per_replica", "bubble",
                 "bounds")

    def __init__(self, first: Config, group: int, step: int, members: list[tuple[int, int, int]],
                 floors: list[float], index: int, least: float, most: float):
        self.first, self.group, self.step, self.members, self.index = first, group, step, members, index
        self.floors = floors
        """Per member, bytes no dp can remove from its most loaded stage (configs())."""
        self.least, self.most = least, most
        """min(floors) and max(floors)."""
        self.per_replica = first.tp * first.pp * first.cp
        self.bubble = (first.pp - 1) / first.vpp
        """(p - 1) / v: the bubble is this over the micro-batches."""
        self.bounds: dict = {}
        """Search.family_k's answers by the setup and GPU they were worked out for (warm calls)."""

    def within(self, capacity: float):
        """The configurations whose floor leaves them a chance to fit in `capacity` bytes."""
        f = self.first
        for (ep, etp, zero), floor in zip(self.members, self.floors):
            if floor <= capacity:
                yield Config(f.recompute_rank, f.pp, f.tp, f.cp, f.vpp, ep, etp, zero)

    def count(self, capacity: float) -> int:
        return len(self.floors) if self.most <= capacity else sum(1 for floor in self.floors if floor <= capacity)


class Group:
    """The families of one recomputation level, pp, tp, cp and vpp: they differ only in their dp
    step (and so in their expert grids and ZeRO stages), and share one cheap duration bound
    (Search.group_k). Its families are made when the walk first refines the group: most groups of
    a large question never are."""

    __slots__ = ("first", "micro", "steps", "index", "per_replica", "bubble", "least", "_families")

    def __init__(self, r: int, pp: int, tp: int, cp: int, vpp: int, micro: int, steps: list[tuple], index: int):
        self.steps = steps
        """(dp step, members, their floors, least floor, most floor) per family, in family order."""
        self.first = Config(r, pp, tp, cp, vpp, *steps[0][1][0])
        self.micro, self.index = micro, index
        """The micro-batch group of the schedule; the first family's index (the next ones follow)."""
        self.per_replica = tp * pp * cp
        self.bubble = (pp - 1) / vpp
        self.least = min(x[3] for x in steps)
        self._families: list[Family] | None = None

    def families(self, capacity: float) -> list[Family]:
        """Its families whose least floor fits `capacity` bytes."""
        if self._families is None:
            f = self.first
            self._families = [Family(Config(f.recompute_rank, f.pp, f.tp, f.cp, f.vpp, *members[0]), self.micro, step,
                                     members, floors, self.index + j, least, most)
                              for j, (step, members, floors, least, most) in enumerate(self.steps)]
        return [family for family in self._families if family.least <= capacity]

    def made(self, capacity: float) -> list[Family] | None:
        """families(capacity) where they are made already, else None."""
        return None if self._families is None else self.families(capacity)

    def count(self, capacity: float) -> int:
        """Its configurations whose floor fits `capacity` bytes."""
        return sum(len(floors) if most <= capacity else sum(1 for floor in floors if floor <= capacity)
                   for _, _, floors, least, most in self.steps if least <= capacity)


_FAMILIES: dict[tuple, list[Group]] = {}
"""configs()'s answers, kept for later calls and the other GPU types with the same NVLink domain."""
_BOUNDS: dict[tuple, dict] = {}
"""Search._k's entries by setup (warm calls share them)."""


def configs(fw, s: Setup, gpu: GPU, cap: int, pins: dict, ceiling: float = math.inf) -> list[Group]:
    """Every configuration the framework's rules allow (dp aside), the pins kept, in families:
    tp within the NVLink domain (a pinned tp may exceed it), cp keeping MIN_CP_CHUNK tokens per
    rank, every pp and vpp (up to MAX_VPP) with a split, and the framework's ep, etp, ZeRO stages
    and recomputation levels. Each member carries its floor: the most loaded stage holds at least
    the average stage's share of the state no dp divides (fw.state_floor bytes per parameter over
    tp, experts over ep x etp, and over pp) plus the reserve's fixed part, so a GPU with less
    memory cannot fit it at any dp; members whose floor exceeds `ceiling` bytes (the most memory
    of the GPU types asked about) are left out. The answer depends on the GPU only through its
    NVLink domain, and is kept for the next call."""
    # The micro-batch only leaves dp steps without a dp (widest below): the sizes share one list,
    # made at one sequence.
    pins = {k: v for k, v in pins.items() if k != "micro_batch"}
    key = (fw.NAME, s.model.architecture, s.seq, s.precision, s.optimizer, gpu.scaleup_domain, cap, s.batch_sequences,
           s.flat_mfu, ceiling,
           tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in pins.items())))
    if key not in _FAMILIES:
        if len(_FAMILIES) >= 16:  # a few MB each (DeepSeek-V3: 16,000 families)
            _FAMILIES.clear()
        _FAMILIES[key] = _configs(fw, s, gpu.scaleup_domain, cap, pins, ceiling)
    return _FAMILIES[key]


def _configs(fw, s: Setup, domain: int, cap: int, pins: dict, ceiling: float = math.inf) -> list[Group]:
    a = s.model.architecture
    parts = count_parameters(a).total
    experts, dense = parts.experts, parts.total - parts.experts
    reserve = mem.RESERVE_FIXED_GIB * GIB

    per_params: dict[tuple[int, int], float] = {}

    def floor(tp: int, pp: int, ep: int, etp: int, zero: int) -> float:
        if (pp, zero) not in per_params:
            per_params[pp, zero] = fw.state_floor(pp, zero, s.precision, s.optimizer, pins)
        return per_params[pp, zero] * (dense / tp + experts / (ep * etp)) / pp + reserve

    levels = [ar.RECOMPUTE_LEVELS.index(r) for r in ar.RECOMPUTE_LEVELS if pins.get("recompute") in (None, r)]
    mb = pins.get("micro_batch", MICRO_BATCH)
    tps = [pins["tp"]] if "tp" in pins else [t for t in divisors(domain) if fw.tp_ok(a, t)]
    eps = [pins["ep"]] if "ep" in pins else [e for e in fw.ep_choices(a) if e <= cap]
    out: list[Group] = []
    made = 0  # families so far: their indices
    for tp in tps:
        cps = ([pins["cp"]] if "cp" in pins else
               [c for c in divisors(max(1, s.seq // 2))
                if c == 1 or (s.seq // c >= MIN_CP_CHUNK and fw.cp_ok(s.seq, c, tp))])
        etps = [pins["etp"]] if "etp" in pins else [e for e in fw.etp_choices(a, tp) if e <= cap]
        for cp in cps:
            if tp * cp > cap:
                continue
            grid = [(ep, etp) for ep in eps for etp in etps]
            if getattr(fw, "GRID_DOMINANCE", False) and s.flat_mfu:
                # Of the expert grids with one ep x etp, the most EP: its memory is no more at any
                # dp (the experts' shards are the same, the routed inputs etp times smaller), its
                # duration and dps the same at a flat MFU, and it wins the tie (tie()). Under the
                # step-time model their all-to-alls and GEMMs differ, and every grid is kept.
                most: dict[int, tuple[int, int]] = {}
                for ep, etp in grid:
                    if ep * etp not in most or ep > most[ep * etp][0]:
                        most[ep * etp] = (ep, etp)
                grid = [pair for pair in grid if most[pair[0] * pair[1]] == pair]
            by_step: dict[int, list[tuple[int, int]]] = {}
            for ep, etp in grid:
                by_step.setdefault(fw.dp_step(Config(0, 1, tp, cp, 1, ep, etp, 0), pins), []).append((ep, etp))
            for pp in ([pins["pp"]] if "pp" in pins else range(1, min(a.layers, cap // (tp * cp)) + 1)):
                vpps = [pins["vpp"]] if "vpp" in pins else [v for v in range(1, MAX_VPP + 1) if fw.vpp_ok(pp, v)]
                if "zero" in pins:
                    zeros = [pins["zero"]] if fw.zero_ok(pp, pins["zero"]) else []
                else:
                    zeros = list(fw.zero_choices(pp))
                if not zeros:
                    continue  # a pinned ZeRO stage this pp does not allow
                # dp is a multiple of the step, at most cap / (t c p) and the batch at the widest
                # tolerance (MAX_TOLERANCE) over the micro-batch: larger steps leave no dp.
                widest = min(cap // (tp * cp * pp), int(s.batch_sequences * (1 + MAX_TOLERANCE)) // mb)
                kept = []
                for step, pairs in by_step.items():
                    if step > widest:
                        continue
                    members, floors = [], []
                    for ep, etp in pairs:
                        for zero in zeros:
                            least = floor(tp, pp, ep, etp, zero)
                            if least <= ceiling:
                                members.append((ep, etp, zero))
                                floors.append(least)
                    if members:
                        kept.append((step, members, floors, min(floors), max(floors)))
                if not kept:
                    continue
                for vpp in vpps:
                    if not fw.splits(a.layers, pp, vpp, a.mtp_layers):
                        continue
                    group = fw.micro_group(Config(0, pp, tp, cp, vpp, 1, 1, 0))
                    for r in levels:  # the families of one (r, pp, tp, cp, vpp) side by side: one bound
                        out.append(Group(r, pp, tp, cp, vpp, group, kept, made))
                        made += len(kept)
    return out


MAX_RUNS_KEPT = 8
"""Runs (batch, tolerance, cap, interruptions) whose floors and durations a setup keeps."""


class Search:
    """The legal layouts of one run on one GPU type under one framework, and the arithmetic that
    ranks them."""

    def __init__(self, fw, s: Setup, gpu: GPU, cap: int, pins: dict, tolerance: float = BATCH_TOLERANCE):
        self.fw, self.s, self.gpu, self.cap, self.pins, self.tolerance = fw, s, gpu, cap, pins, tolerance
        self.big_b = s.batch_sequences
        self.mb = pins.get("micro_batch", MICRO_BATCH)
        self.b_max = self.big_b * (1 + tolerance)
        self.capacity = capacity_gib(s.on(gpu)) * GIB
        self.modules = tuple(pins.get("recompute_modules") or mem.DEFAULT_MODULES)
        self._signature = (s.tokens, gpu.model_dump_json(exclude={"sources", "description"}), s.flat_mfu, s.mfu,
                           s.model.flops_convention, self.capacity, self.mb)
        """What family_k depends on beyond the families' own key (configs(), which the micro-batch
        sizes share)."""
        shared = (fw.NAME, s.model.architecture, s.seq, s.precision, s.optimizer, self.mb, self.modules,
                  tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in pins.items())), self._signature)
        if shared not in _BOUNDS:
            if len(_BOUNDS) >= 16:
                _BOUNDS.clear()
            _BOUNDS[shared] = {}
        self._k: dict = _BOUNDS[shared]
        """The bounds' parts (K and one layer per expert grid, most loaded ranks, groups): pure
        functions of the setup, kept for later calls with the same one (warm)."""
        runs = self._k.setdefault("runs", {})
        key = (self.big_b, tolerance, cap, s.failures, s.checkpoint_minutes)
        if key not in runs and len(runs) >= MAX_RUNS_KEPT:
            del runs[next(iter(runs))]  # the oldest: a sweep over batches keeps a bounded memory
        run = runs.setdefault(key, {})
        """What depends on the run's batch, cap and interruptions too: pure functions of the
        layout, kept per setup as _k (a later target reuses them; memory answers stay per call)."""
        self._seconds: dict[tuple, Seconds] = run.setdefault("seconds", {})
        self._floors: dict[tuple[Config, int], tuple[float, float | None]] = run.setdefault("floors", {})
        """(dp_floor, too_slow's whole floor or None until asked) by configuration and dp."""
        self._micro: dict[tuple, float] = self._k.setdefault("micro", {})
        """_micro_of's answers, by configuration less its ZeRO stage (kept per setup, as _k)."""
        self._slowest: dict[Config, tuple[int, float, tuple]] = self._k.setdefault("tails", {})
        """timing.tail_parts by configuration (kept per setup, as _k)."""
        self._first_ok: dict[Config, tuple[int, tuple[int, ...]]] = {}
        self._layers: dict = {}
        self._per_sequence = s.tokens / (s.seq * self.mb)
        """Micro-batches of the whole run (of mb sequences each)."""
        self._member_parts: dict[tuple[int, int], tuple[float, float]] = {}
        # Families are shared by the GPU types with this NVLink domain: built for the most memory
        # among them (a member that fits none is left out), each type keeping those that may fit it.
        ceiling = max(capacity_gib(s.on(g)) * GIB for g in s.candidates if g.scaleup_domain == gpu.scaleup_domain)
        self._ceiling = ceiling
        self.groups = [g for g in configs(fw, s, gpu, cap, pins, ceiling) if g.least <= self.capacity]
        """Families that differ only in their dp step, with one duration bound for all."""
        self.evaluations = 0
        self._legal: dict[tuple, tuple[list[int], list[int]]] = {}
        self._stepped: dict[tuple[int, int], tuple[list[int], list[int]]] = {}
        self._batch: dict[int, tuple[list[int], list[int]]] = {}
        self._fits: dict[tuple[Config, int], tuple[int, ...] | None] = {}
        self._rows: dict[float | None, list] = {}

    @property
    def families(self) -> list[Family]:
        """Every family whose floor may fit this GPU, group by group (each made if not yet)."""
        return [family for group in self.groups for family in group.families(self.capacity)]

    @property
    def configs(self) -> list[Config]:
        """Every configuration, family by family."""
        return [c for family in self.families for c in family.within(self.capacity)]

    def count(self) -> int:
        """How many configurations may fit this GPU (without making the families; kept per setup)."""
        key = ("count", self.cap, self.big_b, self._ceiling)
        if key not in self._k:
            self._k[key] = sum(group.count(self.capacity) for group in self.groups)
        return self._k[key]

    def legal(self, c: Config) -> tuple[list[int], list[int]]:
        """The dps the framework's rules, the batch and the cap allow for c, ascending, with the
        micro-batches per replica at each."""
        return self._legal_of(self.fw.micro_group(c), self.fw.dp_step(c, self.pins), c.tp * c.pp * c.cp)

    def _legal_of(self, group: int, step: int, per_replica: int) -> tuple[list[int], list[int]]:
        """The batch's dps for a micro-batch group that are multiples of the framework's dp step,
        up to cap / (tp pp cp)."""
        key = (group, step, per_replica)
        if key not in self._legal:
            if (group, step) not in self._stepped:
                dps, ms = self._batch_dps(group)
                keep = [i for i, d in enumerate(dps) if d % step == 0]
                self._stepped[group, step] = ([dps[i] for i in keep], [ms[i] for i in keep])
            dps, ms = self._stepped[group, step]
            cut = bisect.bisect_right(dps, self.cap // per_replica)
            self._legal[key] = (dps[:cut], ms[:cut])
        return self._legal[key]

    def family_dps(self, f: Family) -> list[int]:
        c = f.first
        return self._legal_of(f.group, f.step, c.tp * c.pp * c.cp)[0]

    def _batch_dps(self, group: int) -> tuple[list[int], list[int]]:
        """Every dp (the pinned one, if any) at which whole groups of micro-batches run the batch
        within the tolerance, with its micro-batches, up to the cap."""
        if group not in self._batch:
            most = min(self.cap, int(self.b_max // (self.mb * group)))
            pinned = self.pins.get("dp")
            dps, ms = [], []
            for d in ([pinned] if pinned is not None and pinned <= most else [] if pinned is not None
                      else range(1, most + 1)):
                m = micro_batches(self.big_b, self.mb, d, group, self.tolerance)
                if m is not None:
                    dps.append(d)
                    ms.append(m)
            self._batch[group] = (dps, ms)
        return self._batch[group]

    def legal_dps(self, c: Config) -> list[int]:
        return self.legal(c)[0]

    def k(self, c: Config) -> float:
        """K of timing.floor_k for c's recomputation, tp, cp, ep and etp: seconds >= K / (t p c dp)
        (1 + (p - 1) / (v m)), with equality at a flat MFU (where K depends on the level alone)."""
        return self._k_parts(c)[0]

    def _k_parts(self, c: Config) -> tuple[float, float]:
        return self._parts(c.recompute_rank, c.tp, c.cp, c.ep, c.etp)

    def _parts(self, r: int, tp: int, cp: int, ep: int, etp: int) -> tuple[float, float]:
        key = (r,) if self.s.flat_mfu else (r, tp, cp, ep, etp)
        if key not in self._k:
            self._k[key] = timing.floor_k(self.fw, self.s, ar.RECOMPUTE_LEVELS[r], self.modules, tp, cp, ep, etp,
                                          self.mb, self.pins)
        return self._k[key]

    def most_layers(self, pp: int, vpp: int) -> int:
        """The fewest layers the most loaded rank holds over the framework's splits (MTP blocks on
        the last rank): the slowest rank runs at least that many layers' micro-batches."""
        key = ("most", pp, vpp)
        if key not in self._k:
            a = self.s.model.architecture
            self._k[key] = min((max(self.fw.rank_layers(x, pp)[:-1] + (self.fw.rank_layers(x, pp)[-1] + a.mtp_layers,))
                                for x in self.fw.splits(a.layers, pp, vpp, a.mtp_layers)), default=0)
        return self._k[key]

    def dp_floor(self, c: Config, dp: int, m: int) -> float:
        """A lower bound on seconds at exactly this dp and m (the legal one for dp): at a flat MFU
        the duration itself, else the tokens' batches x (m + (p - 1) / v) micro-batches of the
        fastest split's slowest rank (timing.micro_batch_floor), tighter than floor_seconds where
        the split is uneven; the steps rounded up and the interruptions' share of this GPU count
        added, as timing.seconds does."""
        s = self.s
        if s.flat_mfu:
            return self.exact(c, dp, m).value
        known = self._floors.get((c, dp))
        if known is not None:
            return known[0]
        ideal = timing.step_count(s.tokens, m, self.mb, dp, s.seq) * (m + (c.pp - 1) / c.vpp) * self._micro_of(c)
        if s.failures:
            ideal = goodput.wall_seconds(ideal, c.tp * c.pp * c.cp * dp, s.checkpoint_minutes)
        self._floors[c, dp] = (ideal * (1 - 1e-9), None)
        return ideal * (1 - 1e-9)

    def block_floor(self, c: Config, low: int, high: int) -> float:
        """A lower bound on dp_floor at every dp from `low` to `high`: steps x m >= the tokens'
        sequences over b dp (at most at `high`), steps >= the tokens over the widest batch
        (B_max), and the interruptions stretch the least at the fewest GPUs (`low`)."""
        s = self.s
        steps = math.ceil(s.tokens / (self.b_max * s.seq))
        ideal = (s.tokens / (self.mb * high * s.seq) + steps * (c.pp - 1) / c.vpp) * self._micro_of(c)
        if s.failures:
            ideal = goodput.wall_seconds(ideal, c.tp * c.pp * c.cp * low, s.checkpoint_minutes)
        return ideal * (1 - 1e-9)

    def _micro_of(self, c: Config) -> float:
        """timing.micro_batch_floor for c: its fastest split's slowest rank, one micro-batch (the
        same for every ZeRO stage: c[:7] leaves it out)."""
        key = c[:7]
        if key not in self._micro:
            self._micro[key] = timing.micro_batch_floor(self.fw, self.s, self.layout(c, 1, 1), self._layers)
        return self._micro[key]

    def too_slow(self, c: Config, dp: int, m: int, target: float) -> bool:
        """Whether no split of c at this dp meets the target: dp_floor exceeds it, or, where it
        does not, dp_floor with the rest of the step added (the PP fill and drain, the exposed DP
        traffic and the optimizer at this dp, each at its least over the framework's splits:
        timing.tail_parts, timing.tail_floor), dearer to work out."""
        s = self.s
        if self.dp_floor(c, dp, m) > target:
            return True
        if s.flat_mfu:
            return False
        cheap, whole = self._floors[c, dp]
        if whole is not None:
            return whole > target
        if c not in self._slowest:
            self._slowest[c] = timing.tail_parts(self.fw, s, self.layout(c, 1, 1), self._layers)
        n, compute_mb, parts = self._slowest[c]
        rest = timing.tail_floor(s, parts, dp, m, n, compute_mb)
        ideal = timing.step_count(s.tokens, m, self.mb, dp, s.seq) * (
            (m + (c.pp - 1) / c.vpp) * self._micro_of(c) + rest)
        if s.failures:
            ideal = goodput.wall_seconds(ideal, c.tp * c.pp * c.cp * dp, s.checkpoint_minutes)
        self._floors[c, dp] = (cheap, ideal * (1 - 1e-9))
        return ideal * (1 - 1e-9) > target

    def split_k(self, c: Config) -> float:
        """A K for c tighter than k(c): the fastest split's slowest rank instead of the average
        rank (timing.micro_batch_floor); the flat K at a flat MFU."""
        if self.s.flat_mfu:
            return self.k(c)
        return self.s.tokens / (self.s.seq * self.mb) * self._micro_of(c) * c.tp * c.pp * c.cp * (1 - 1e-9)

    def group_k(self, group: list["Family"]) -> float:
        """A K below every family_k of the group (its families share recomputation, pp, tp, cp
        and vpp): the family bound with the least K and layer over every expert grid the framework
        offers for that tp, so that bounding a group needs no pass over its configurations."""
        f = group.first
        if self.s.flat_mfu:
            return self.k(f)
        key = ("group", f.recompute_rank, f.tp, f.cp)
        if key not in self._k:
            a = self.s.model.architecture
            eps = [self.pins["ep"]] if "ep" in self.pins else list(self.fw.ep_choices(a)) if a.moe else [1]
            etps = [self.pins["etp"]] if "etp" in self.pins else list(self.fw.etp_choices(a, f.tp)) if a.moe else [1]
            parts = [self._parts(f.recompute_rank, f.tp, f.cp, ep, etp) for ep in eps for etp in etps]
            self._k[key] = (min(k for k, _ in parts), min(one for _, one in parts))
        least, layer = self._k[key]
        per = self._per_sequence * f.tp * f.cp * f.pp
        bound = max(least, per * self.most_layers(f.pp, f.vpp) * layer * (1 - 1e-9))
        made = group.made(self.capacity)
        kept = [family.bounds.get(self._signature) for family in made] if made else [None]
        if all(x is not None for x in kept):  # a warm call: the families' own bounds, tighter
            bound = max(bound, min(kept))
        return bound

    def family_k(self, family: "Family") -> float:
        """The least K of the family's configurations that may fit (a bound for all of them), kept
        on the family for later calls with this setup and GPU."""
        if self.s.flat_mfu:
            return self.k(family.first)
        cached = family.bounds.get(self._signature)
        if cached is None:
            # At least the average rank (K) and at least the most loaded rank's layers, each layer's
            # micro-batch at the family's fastest: K / (L + mtp + head) x p x most layers, as seconds.
            f = family.first
            # The members (and their floors) are one list shared by the families of every vpp of
            # a (tp, cp, pp, dp step): their least parts are worked out once per recomputation level.
            shared = (f.recompute_rank, id(family.members))
            parts = self._member_parts.get(shared)
            if parts is None:
                least, layer = math.inf, math.inf
                for (ep, etp, _), floor in zip(family.members, family.floors):
                    if floor <= self.capacity:
                        k, one = self._parts(f.recompute_rank, f.tp, f.cp, ep, etp)
                        least, layer = min(least, k), min(layer, one)
                parts = self._member_parts[shared] = (least, layer)
            least, layer = parts
            per = self._per_sequence * f.tp * f.cp * f.pp
            cached = max(least, per * self.most_layers(f.pp, f.vpp) * layer * (1 - 1e-9))
            if len(family.bounds) >= 8:
                family.bounds.clear()
            family.bounds[self._signature] = cached
        return cached

    def seconds(self, c: Config, dp: int, m: int) -> float:
        return self.exact(c, dp, m).value

    def exact(self, c: Config, dp: int, m: int, split: tuple[int, ...] | None = None) -> Seconds:
        """The duration, exactly ordered: at a flat MFU K_r / (t p c dp) (1 + (p - 1) / (v m)) as a
        rational; else the step-time model's (apsi.frameworks.timing) under the split the layout
        takes (the first that fits, as found() reports it; the first of all where none does)."""
        if self.s.flat_mfu:
            return Seconds(self.k(c), c.vpp * m + c.pp - 1, c.tp * c.pp * c.cp * dp * c.vpp * m)
        a = self.s.model.architecture
        split = split or self.fits(c, dp, m) or self.fw.splits(a.layers, c.pp, c.vpp, a.mtp_layers)[0]
        key = (c, dp, split)
        if key not in self._seconds:
            self._seconds[key] = Seconds.modelled(timing.seconds(self.fw, self.s, self.layout(c, dp, m), split, m,
                                                                 self._layers))
        return self._seconds[key]

    def floor_seconds(self, c: Config, dp: int, k: float | None = None) -> float:
        """A lower bound on seconds at dp and above: K / (t p c) (1 / dp + (p - 1) b / (v B_max)), the
        bubble at the most micro-batches the tolerance allows, m <= B_max / (b dp); K is c's, or
        `k` (a family's least)."""
        k = self.k(c) if k is None else k
        return k / (c.tp * c.pp * c.cp) * (1 / dp + (c.pp - 1) * self.mb / (c.vpp * self.b_max))

    def _first_floor(self, c: Config, dps: list[int], target: float, k: float | None = None) -> int:
        """Index of the first dp whose floor_seconds meets the target (len(dps) when none): the
        floor is K / (t p c) (1 / dp + bubble), so dp >= 1 / (target t p c / K - bubble), found by
        bisection and checked against floor_seconds itself either side (float rounding)."""
        per = c.tp * c.pp * c.cp
        k = self.k(c) if k is None else k
        room = target * per / k - (c.pp - 1) * self.mb / (c.vpp * self.b_max)
        if room <= 0:
            return len(dps)
        i = bisect.bisect_left(dps, 1 / room)
        while i > 0 and self.floor_seconds(c, dps[i - 1], k) <= target:
            i -= 1
        while i < len(dps) and self.floor_seconds(c, dps[i], k) > target:
            i += 1
        return i

    def fits(self, c: Config, dp: int, m: int) -> tuple[int, ...] | None:
        """The first of the framework's splits for c under which it fits at dp, or None. Answers
        are kept for a second walk (the runner-up GPU type). Each split's memory falls with dp, so
        once the framework's first split fits at some dp it is the answer at every larger one."""
        if (c, dp) not in self._fits:
            first = self._first_ok.get(c)
            if first is not None and dp >= first[0]:
                self._fits[c, dp] = first[1]
            else:
                split = self._first_split(c, dp, m)
                self._fits[c, dp] = split
                a = self.s.model.architecture
                if split is not None and split == self.fw.splits(a.layers, c.pp, c.vpp, a.mtp_layers)[0]:
                    self._first_ok[c] = (dp, split)
        return self._fits[c, dp]

    def layout(self, c: Config, dp: int, m: int) -> dict:
        """The keywords of the framework's memory() for c at dp, less the split."""
        s = self.s
        return dict(tp=c.tp, pp=c.pp, cp=c.cp, ep=c.ep, etp=c.etp, dp=dp, vpp=c.vpp, micro_batch=self.mb,
                    seq=s.seq, batch_sequences=m * self.mb * dp, recompute=ar.RECOMPUTE_LEVELS[c.recompute_rank],
                    optimizer=s.optimizer, precision=s.precision, zero=c.zero, **memory_knobs(self.fw, self.pins))

    def _first_split(self, c: Config, dp: int, m: int) -> tuple[int, ...] | None:
        a = self.s.model.architecture
        layout = self.layout(c, dp, m)
        for split in self.fw.splits(a.layers, c.pp, c.vpp, a.mtp_layers):
            self.evaluations += 1
            if self.fw.peak_bytes(a, split=split, stop_above=self.capacity, **layout) <= self.capacity:
                return split
        return None

    def rows(self, target: float | None) -> list[tuple[int, Group]]:
        """(bound, group) for every group of families that may meet the target: the bound is the
        GPUs at the smallest dp whose duration floor meets it, 1 / (target t p c / K - bubble), in
        closed form and rounded down (the families' legal dps are listed only when visited)."""
        if target not in self._rows:
            out = []
            if target is None:
                out = [(group.per_replica, group) for group in self.groups]
            else:
                per_sequence = self.mb / self.b_max  # m <= B_max / (b dp): bubble >= (p - 1) b dp / (v B_max)
                cap = self.cap
                for group in self.groups:
                    per = group.per_replica
                    room = target / self.group_k(group) * per - group.bubble * per_sequence
                    if room > 0:
                        low = max(1, int(1 / room * (1 - 1e-9)))
                        if per * low <= cap:
                            out.append((per * low, group))
            self._rows[target] = out
        return self._rows[target]

    def gpu_bounds(self, group: Group, target: float | None) -> list[tuple[int, Family]]:
        """(GPUs at its first legal dp whose duration floor meets the target, family) for each
        family of the group that has one: the exact bounds a group's cheap bound refines into."""
        out = []
        for family in group.families(self.capacity):
            dps = self.family_dps(family)
            start = self.start(family, target)
            if start < len(dps):
                out.append((family.per_replica * dps[start], family))
        return out

    def start(self, family: Family, target: float | None) -> int:
        """Index of the family's first legal dp whose duration floor meets the target."""
        dps = self.family_dps(family)
        return 0 if target is None else self._first_floor(family.first, dps, target, self.family_k(family))

    def _first_fit(self, c: Config, start: int = 0, stop: int | None = None) -> int | None:
        """Index of the smallest legal dp from `start` to `stop` (the last, by default) at which c
        fits (memory falls with dp: bisect), `start` itself when it fits there (the callers want
        no smaller one)."""
        dps, ms = self.legal(c)
        last = len(dps) - 1 if stop is None else min(stop, len(dps) - 1)
        if start > last:
            return None
        if self.fits(c, dps[start], ms[start]) is not None:
            return start
        if self.fits(c, dps[last], ms[last]) is None:
            return None
        lo, hi = start + 1, last
        while lo < hi:
            mid = (lo + hi) // 2
            if self.fits(c, dps[mid], ms[mid]) is not None:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def first_meeting(self, c: Config, start: int, target: float | None, most_gpus: int | None = None) -> int | None:
        """Index of c's smallest legal dp that fits and meets the target (from `start`, the first
        whose duration floor does), or None; the walk gives up past `most_gpus` GPUs."""
        dps, ms = self.legal(c)
        modelled = target is not None and not self.s.flat_mfu
        if modelled:
            # c's own floor, with its fastest split's slowest rank: tighter than its family's; and
            # the first dp whose exact-bubble floor meets the target, before any memory evaluation.
            start = max(start, self._first_floor(c, dps, target, self.split_k(c)))
            while start < len(dps) and self.dp_floor(c, dps[start], ms[start]) > target:
                start += 1
            if start >= len(dps) or (most_gpus is not None and c.tp * c.pp * c.cp * dps[start] > most_gpus):
                return None
            if most_gpus is not None:
                # Within the best found so far, the first dp the whole step's floor lets through,
                # before any memory evaluation (the scan is bounded by that best).
                while start < len(dps) and self.too_slow(c, dps[start], ms[start], target):
                    start += 1
                    if start >= len(dps) or c.tp * c.pp * c.cp * dps[start] > most_gpus:
                        return None
        # Past most_gpus the walk gives up: the bisection need not look there.
        stop = None if most_gpus is None else bisect.bisect_right(dps, most_gpus // (c.tp * c.pp * c.cp)) - 1
        fit = self._first_fit(c, start, stop)
        if fit is None:
            return None
        for j in range(fit, len(dps)):
            if most_gpus is not None and c.tp * c.pp * c.cp * dps[j] > most_gpus:
                return None
            if modelled and self.too_slow(c, dps[j], ms[j], target):
                continue  # no split makes it in time at this dp (no memory evaluation needed)
            if target is None or self.seconds(c, dps[j], ms[j]) <= target:
                return j
        return None

    def found(self, c: Config, i: int) -> Found:
        dps, ms = self.legal(c)
        return Found(c.tp * c.pp * c.cp * dps[i], self.seconds(c, dps[i], ms[i]), c, dps[i],
                     self.fits(c, dps[i], ms[i]), ms[i])

    def fewest(self, target: float | None) -> Found | None:
        """The fewest GPUs meeting the target on this GPU type (None: no target)."""
        best = fewest([self], target)
        return None if best is None else best[1]

    def fastest(self) -> Found | None:
        """The fastest layout within the cap on this GPU type."""
        best = fastest([self])
        return None if best is None else best[1]


def _walk(entries: list, refine, visit, done) -> None:
    """Visit families in order of their bound, exactly: `entries` are (cheap bound, type index,
    key, group of families); a group is first refined into its families with their exact bounds
    (`refine(i, group)`: (bound, family) for each that can still meet the target) and put back, and
    a family is visited (`visit(i, family)`) only when its exact bound comes first. The walk ends
    when `done(bound)` says the smallest bound left cannot beat the best found. Cheap bounds are
    lower bounds of the exact ones, so the visits come in the order of the exact bounds."""
    heap = [(bound, i, key, False, group) for bound, i, key, group in entries]
    heapq.heapify(heap)
    while heap:
        bound, i, key, exact, payload = heapq.heappop(heap)
        if done(bound):
            return
        if not exact:
            for refined, family in refine(i, payload):
                heapq.heappush(heap, (refined, i, key + (family.index,), True, family))
            continue
        visit(i, payload)


def ranked(searches: list[Search], target: float | None) -> list[tuple[int, int, tuple, Group]]:
    """Every (GPU bound, type index, key, group) that may meet the target: fewest()'s start."""
    return [(bound, i, (group.index,), group) for i, search in enumerate(searches)
            for bound, group in search.rows(target)]


def fewest(searches: list[Search], target: float | None, rows: list | None = None,
           skip: frozenset[int] = frozenset(), visited: list | None = None) -> tuple[int, Found] | None:
    """The fewest GPUs meeting the target over several GPU types (index into `searches`, layout).

    Families are visited in order of their bound (the GPUs at the first legal dp whose duration
    floor meets the target) and the walk ends once the bound passes the best layout found. For
    each configuration of a family, the answer is its first dp that both fits (a suffix, from
    bisection) and meets the target (checked one by one from there). Ties: shorter, then the
    types' order, then the configuration order. `rows` is ranked()'s list when the caller has it;
    `skip` leaves those searches out (the runner-up's: every search of the winner's type).

    `visited`, a list, gets (type index, configuration, its family's start) for every
    configuration the walk looks at, for time_alone()."""
    best = []

    def refine(i: int, group: Group) -> list[tuple[int, Family]]:
        return searches[i].gpu_bounds(group, target)

    def visit(i: int, family: Family) -> None:
        search = searches[i]
        start = search.start(family, target)
        for c in family.within(search.capacity):
            if visited is not None and (not search.s.flat_mfu or c == family.first):
                # At a flat MFU a family's members share their durations: its first answers for all.
                visited.append((i, c, start))
            j = search.first_meeting(c, start, target, best[0][0][0] if best else None)
            if j is not None:
                dps, ms = search.legal(c)
                key = (c.tp * c.pp * c.cp * dps[j], search.exact(c, dps[j], ms[j]), i, tie(c))
                if not best or key < best[0][0]:
                    best[:] = [(key, i, search.found(c, j))]

    entries = [row for row in (ranked(searches, target) if rows is None else rows) if row[1] not in skip]
    _walk(entries, refine, visit, lambda bound: bool(best) and bound > best[0][0][0])
    return (best[0][1], best[0][2]) if best else None


def cheapest(searches: list[Search], target: float, weights: list[float | None],
             skip: frozenset[int] = frozenset()) -> tuple[int, Found] | None:
    """The cheapest layout meeting the target over several GPU types, cost being weight x GPUs x
    seconds (weight: $ per GPU-second, or watts, for each type; None leaves a type out).

    GPUs x seconds = K_r (1 + (p - 1) / (v m)) grows with dp (m falls), so a configuration's
    cheapest layout is its fewest-GPU one, and its cost at the first dp whose duration floor meets
    the target bounds it from below: families are visited in order of that bound and the walk
    ends once it passes the best found. Ties: fewer GPUs, shorter, the types' order, the
    configuration order."""
    best = []
    entries = []
    for i, search in enumerate(searches):
        if weights[i] is None or i in skip:
            continue
        for low, group in search.rows(target):
            c = group.first
            # At dp >= low / (t p c) a replica runs at most B_max / (b dp) micro-batches.
            most = search.b_max / (search.mb * (low // (c.tp * c.pp * c.cp)))
            entries.append((weights[i] * search.group_k(group) * (1 + (c.pp - 1) / (c.vpp * most)),
                            i, (group.index,), group))

    def refine(i: int, group: Group) -> list[tuple[float, Family]]:
        search = searches[i]
        out = []
        for family in group.families(search.capacity):
            dps, ms = search.legal(family.first)
            start = search.start(family, target)
            if start < len(dps):
                out.append((_cost_floor(search, weights[i], family.first, ms[start], search.family_k(family)), family))
        return out

    def visit(i: int, family: Family) -> None:
        search = searches[i]
        start = search.start(family, target)
        for c in family.within(search.capacity):
            j = search.first_meeting(c, start, target)
            if j is None:
                continue
            dps, ms = search.legal(c)
            # At a flat MFU the first dp meeting the target is the cheapest (GPU-seconds grow with
            # dp); under the step-time model the steps round up and the exposed traffic moves, so
            # the later dps are checked until their cost floor passes the best found.
            for k in (range(j, j + 1) if search.s.flat_mfu else range(j, len(dps))):
                if k > j and best and _cost_floor(search, weights[i], c, ms[k]) > best[0][0][0].value * (1 + 1e-9):
                    break
                if k > j and (search.fits(c, dps[k], ms[k]) is None or search.seconds(c, dps[k], ms[k]) > target):
                    continue
                key = (_cost(search, weights[i], c, dps[k], ms[k]), c.tp * c.pp * c.cp * dps[k],
                       search.exact(c, dps[k], ms[k]), i, tie(c))
                if not best or key < best[0][0]:
                    best[:] = [(key, i, search.found(c, k))]

    _walk(entries, refine, visit, lambda bound: bool(best) and bound > best[0][0][0].value * (1 + 1e-9))
    return (best[0][1], best[0][2]) if best else None


def _cost_floor(search: Search, weight: float, c: Config, m: int, k: float | None = None) -> float:
    """A lower bound on weight x GPUs x seconds at m micro-batches per replica or fewer (at more
    dp): weight K (1 + (p - 1) / (v m)) (timing.floor_k; K is c's, or `k`, a family's least)."""
    return weight * (search.k(c) if k is None else k) * (1 + (c.pp - 1) / (c.vpp * m))


def _cost(search: Search, weight: float, c: Config, dp: int, m: int) -> Seconds:
    """weight x GPUs x seconds, exactly ordered: at a flat MFU weight K_r (v m + p - 1) / (v m)."""
    if search.s.flat_mfu:
        return Seconds(weight * search.k(c), c.vpp * m + c.pp - 1, c.vpp * m)
    return Seconds.modelled(weight * c.tp * c.pp * c.cp * dp * search.seconds(c, dp, m))


def fastest(searches: list[Search]) -> tuple[int, Found] | None:
    """The fastest layout within the cap over several GPU types: families visited by the floor
    of their duration at their widest legal dp; for each configuration, the fastest of the dps at
    which it fits; the walk ends once the floor passes the best found. Ties: fewer GPUs, then the
    types' order, then the configuration order."""
    best = []
    entries = []
    for i, search in enumerate(searches):
        for group in search.groups:
            c = group.first
            widest = min(search.cap // (c.tp * c.pp * c.cp), int(search.b_max // search.mb))
            if widest >= 1:
                least = search.group_k(group)
                entries.append((search.floor_seconds(c, widest, least), i, (group.index,), group))

    def refine(i: int, group: Group) -> list[tuple[float, Family]]:
        out = []
        for family in group.families(searches[i].capacity):
            dps = searches[i].family_dps(family)
            if dps:
                out.append((searches[i].floor_seconds(family.first, dps[-1], searches[i].family_k(family)), family))
        return out

    def visit(i: int, family: Family) -> None:
        search = searches[i]
        for c in family.within(search.capacity):
            dps, ms = search.legal(c)
            own = search.split_k(c)  # c's fastest split's slowest rank: tighter than the family's K
            # From the widest dp down: the floors rise as dp falls, and memory does too, so the
            # first dp that does not fit ends c (the fitting dps are a suffix of the legal ones).
            # A block of BLOCK dps whose common floor is above the best is passed over whole.
            j = len(dps) - 1
            while j >= 0:
                low = max(j - BLOCK + 1, 0)
                if best and not search.s.flat_mfu and search.block_floor(c, dps[low], dps[j]) > best[0][0][0].value:
                    if search.floor_seconds(c, dps[low], own) > best[0][0][0].value * (1 + 1e-9):
                        break
                    j = low - 1
                    continue
                if not _fastest_dps(search, c, dps, ms, own, range(j, low - 1, -1), i, best):
                    break
                j = low - 1

    _walk(entries, refine, visit, lambda bound: bool(best) and bound > best[0][0][0].value * (1 + 1e-9))
    return (best[0][1], best[0][2]) if best else None


BLOCK = 32
"""dps fastest() passes over at once when their common floor (Search.block_floor) cannot beat the
best found: a wide batch has thousands of legal dps per configuration."""


def _fastest_dps(search: "Search", c: Config, dps: list[int], ms: list[int], own: float, order: range, i: int,
                 best: list) -> bool:
    """fastest()'s look at c's dps in `order` (falling): each that its floors let through, fits
    and beats the best replaces it. False once no smaller dp can: its floor is above the best, or
    it does not fit (memory rises as dp falls)."""
    for j in order:
        if best and search.floor_seconds(c, dps[j], own) > best[0][0][0].value * (1 + 1e-9):
            return False
        # The whole step's floor at this dp (the tail included), before any memory evaluation: a
        # dp it puts above the best cannot beat or tie it (too_slow is strict).
        if best and not search.s.flat_mfu and search.too_slow(c, dps[j], ms[j], best[0][0][0].value):
            continue
        if search.fits(c, dps[j], ms[j]) is None:
            return False
        key = (search.exact(c, dps[j], ms[j]), c.tp * c.pp * c.cp * dps[j], i, tie(c))
        if not best or key < best[0][0]:
            best[:] = [(key, i, search.found(c, j))]
    return True


def time_alone(search: Search, visited: list[tuple[Config, int]], target: float, below: int) -> int | None:
    """The fewest GPUs under `below` (the answer's) at which the target alone is met on this GPU
    type, memory ignored, or None: every family that could hold such a layout has a bound under
    `below`, so fewest() visited it, and `visited` holds its configurations with their family's
    start. Each is checked from there (and from its own floor) while the GPUs stay under the best
    so far, under each of the framework's splits (memory aside, any may be used): the Why line's
    "the target alone would need"."""
    a = search.s.model.architecture
    flat = search.s.flat_mfu
    best = below
    for c, start in visited:
        dps, ms = search.legal(c)
        splits = search.fw.splits(a.layers, c.pp, c.vpp, a.mtp_layers)
        own = start if flat else max(start, search._first_floor(c, dps, target, search.split_k(c)))
        per = c.tp * c.pp * c.cp
        for j in range(own, len(dps)):
            gpus = per * dps[j]
            if gpus >= best:
                break
            if not flat and search.too_slow(c, dps[j], ms[j], target):
                continue
            # At a flat MFU the split does not change the duration: the first answers for all.
            if any(search.exact(c, dps[j], ms[j], split).value <= target for split in (splits[:1] if flat else splits)):
                best = gpus
                break
    return best if best < below else None


def knobs(search: Search, found: Found) -> dict:
    c = found.config
    return dict(tp=c.tp, pp=c.pp, vpp=c.vpp, cp=c.cp, ep=c.ep, etp=c.etp, dp=found.dp, micro_batch=search.mb,
                recompute=ar.RECOMPUTE_LEVELS[c.recompute_rank], split=found.split, zero=c.zero,
                batch_sequences=found.micro_batches * search.mb * found.dp,
                **{k: v for k, v in search.pins.items() if k in search.fw.MEMORY_KNOBS or k == "recompute_modules"})


def plan(fw, s: Setup, pins: dict, tolerance: float = BATCH_TOLERANCE, explain: bool = False) -> "Plan":
    """The plan for `s` under framework `fw`: the search's layout on the best GPU type, evaluated
    in full. With `explain`, the best plan on another GPU type too (a second walk without the
    winner's type)."""
    from apsi.errors import LayoutError
    from apsi.fmt import count, duration
    from apsi.frameworks.evaluate import evaluate_layout
    from apsi.model.schema import SolverReport
    from apsi.units import SECONDS_PER_DAY

    title = fw.TITLE
    given = pins.get("micro_batch")
    pins, sizes = micro_batch_sizes(pins)
    s, placed = placeable(fw, s)
    fw.check_pins(s.model.architecture, s.seq, pins)
    fw.check_training(s.precision, s.optimizer, pins)
    whole = whole_sequences(s, tolerance)
    cap = s.gpus if s.gpus is not None else s.max_gpus
    pinned = 1
    for key in ("tp", "pp", "cp", "dp"):
        pinned *= pins.get(key, 1)
    if pinned > cap:
        raise LayoutError(f"pinned tp x pp x cp x dp = {pinned:,} GPUs exceeds the cap of {cap:,}")
    mb = pins.get("micro_batch", MICRO_BATCH)
    if "dp" in pins and micro_batches(s.batch_sequences, mb, pins["dp"], 1, tolerance) is None:
        raise LayoutError(f"dp {pins['dp']:,} with micro-batches of {mb} cannot run the batch of "
                          f"{s.batch_sequences:,} sequences within the batch tolerance of {tolerance:.0%}: the batch "
                          f"is micro-batches x {mb} x dp; widen batch_tolerance or choose another dp")
    # Every byte of model state is held at least once across the cap's GPUs, whatever the layout:
    # when even that share exceeds every GPU type's capacity, no layout fits (and the walk would
    # visit every configuration of a huge model to find so).
    share = s.model.trained_params * fw.state_bytes_per_param(s.precision, s.optimizer, pins) / cap
    if all(share > capacity_gib(s.on(gpu)) * GIB for gpu in s.candidates):
        raise LayoutError(f"no {title} layout fits within {cap:,} GPU{'s' if cap != 1 else ''} on "
                          f"{', '.join(g.name for g in s.candidates)}: the model states alone are "
                          f"{share / GIB:,.1f} GiB per GPU when spread over all of them; "
                          "try a larger-memory GPU or more GPUs")
    fastest_mode = s.objective == "days" or s.gpus is not None
    target = s.days * SECONDS_PER_DAY
    # One search per GPU type and micro-batch size, in that order: a tie goes to the earlier type,
    # then the smaller micro-batch.
    types = [gpu for gpu in s.candidates for _ in sizes]
    searches = [Search(fw, s.on(gpu), gpu, cap, sized(pins, mb), tolerance) for gpu in s.candidates for mb in sizes]
    rows = None if fastest_mode else ranked(searches, target)
    weights = _weights(s)
    weights = None if weights is None else [w for w in weights for _ in sizes]
    visited: list[tuple[int, Config, int]] = []
    if fastest_mode:
        best, mode = None, "fastest"
    elif weights is not None:
        best, mode = cheapest(searches, target, weights), f"min_{s.objective}"
    else:
        best, mode = fewest(searches, target, rows, visited=visited), "min_gpus"
    if best is None:
        best, mode = fastest(searches), "fastest"
    if best is None and not any(x.family_dps(f) for x in searches for f in x.families):
        pinned = ", ".join(f"{k} {v}" for k, v in pins.items()) or "no pins"
        raise LayoutError(f"no layout {title}'s rules allow fits within {cap:,} GPUs ({pinned}): the batch of "
                          f"{s.batch_sequences:,} sequences (within {tolerance:.0%}) and {fw.DP_RULES} leave no dp; "
                          "change the pins, the batch or the cap")
    if best is None:
        raise LayoutError(f"no {title} layout fits within {cap:,} GPUs on {', '.join(g.name for g in s.candidates)}: "
                          "even the lightest (full recomputation, the widest TP, PP and CP the rules allow) "
                          "exceeds the memory; try a larger-memory GPU, a shorter seq or more GPUs")
    index, found = best
    search, gpu = searches[index], types[index]
    evaluations = sum(x.evaluations for x in searches)
    choice = (_choice(s, searches, types, weights, index, mode, target, rows, explain)
              if len(s.candidates) > 1 or s.skipped else None)
    one = s.on(gpu).model_copy(update={"candidates": (gpu,)})
    report = SolverReport(status="OPTIMAL", seconds=0.0, solves=0, mode=mode, method="enumeration")
    result = evaluate_layout(fw, one, knobs(search, found), report)
    n_configs = sum(x.count() for x in searches)
    order = {"min_gpus": "the GPUs the target alone allows them", "min_cost": "the least cost the target allows them",
             "min_energy": "the least energy the target allows them"}.get(mode, "their duration at their widest dp")
    note = (f"{n_configs:,} {title} layouts (dp aside){_sizes_words(given, sizes)} ranked by {order}; "
            f"{evaluations:,} memory evaluations settled the optimum; the CP-SAT program does not search "
            "framework layouts yet")
    days = found.seconds / SECONDS_PER_DAY
    if mode in ("min_cost", "min_energy"):
        binding = "time"
        what = (f"${result.cost_usd:,.0f}" if mode == "min_cost" else f"{result.energy_mwh:,.0f} MWh")
        why = (f"{s.objective} decides: {count(found.gpus)} x {gpu.name} meet the {s.days:g}-day target for {what}, "
               f"the least of every {title} layout that meets it" + (
                   " (at a flat MFU a layout's GPU-hours are its FLOPs over the peak, stretched only by its pipeline "
                   "bubble)" if s.flat_mfu else ""))
    elif mode == "min_gpus":
        # The target alone on this type, at any micro-batch: each of its searches from what it visited.
        alone = [time_alone(searches[j], [(c, start) for i, c, start in visited if i == j], target, found.gpus)
                 for j in range(len(searches)) if types[j] is gpu]
        fewer = min((x for x in alone if x is not None), default=None)
        binding = "memory" if fewer is not None and found.gpus > fewer else "time"
        stage = result.memory.peak_stage
        why = (f"memory on pipeline stage {stage} decides: the {s.days:g}-day target alone would need "
               f"{count(fewer)} x {gpu.name}, but the fewest that fit {title}'s memory are {count(found.gpus)}"
               if binding == "memory" else
               f"time decides: {count(found.gpus)} x {gpu.name} finish in {duration(days)}, and no layout on fewer "
               f"meets the {s.days:g}-day target")
    else:
        binding = "gpus" if s.gpus is not None else "max_gpus"
        # A pinned dp with one tp x pp x cp left leaves the GPU count to the pins, not to the cap.
        fixed = "dp" in pins and len({c.tp * c.pp * c.cp for x in searches for c in x.configs}) == 1
        scope = f"on the {count(found.gpus)} GPUs the pins fix" if fixed else f"within {count(cap)} GPUs"
        why = (f"{'target met' if days <= s.days else 'target not met'}: the fastest {title} layout {scope} "
               f"takes {duration(days)}")
    if result.time is not None:
        why += "; " + cost_words(result)
    notes = placed + [n for n in result.notes if n not in placed]  # evaluate_layout places (again) too
    notes = whole + notes
    return result.model_copy(update={"binding": binding, "why": why, "notes": notes + [note],
                                     "gpu_choice": choice})


def _sizes_words(given, sizes: list[int]) -> str:
    """The Note's words on the micro-batch sizes walked: none for a pinned size; the sizes under
    "any"; else the default size, and how to ask for the others."""
    if given not in (None, "any"):
        return ""
    if len(sizes) > 1:
        return f" over micro-batches of {', '.join(map(str, sizes[:-1]))} and {sizes[-1]} sequences"
    others = MICRO_BATCHES[1:]
    return (f" at micro-batches of {sizes[0]} sequence (micro_batch any also tries "
            f"{', '.join(map(str, others[:-1]))} and {others[-1]})")


def cost_words(p: "Plan") -> str:
    """What costs the step the most after its compute, in words with its share: the bubble of the
    schedule, or a kind of traffic over its link."""
    t = p.time
    lay = p.layout
    link = {"nvlink": "NVLink", "scale-out": "the scale-out network"}
    parts = {
        "bubble": (t.bubble_seconds, f"the bubble of PP {lay.pp}" + (f" x VPP {lay.vpp}" if lay.vpp > 1 else "")
                   + f" with {lay.micro_batches_per_replica:,.0f} micro-batches"),
        "tp": (t.tp_seconds, f"TP traffic over {link.get(t.links.get('tp') or t.links.get('etp'), 'NVLink')}"),
        "ep": (t.ep_seconds, f"the EP all-to-all over {link.get(t.links.get('ep'), 'NVLink')}"),
        "cp": (t.cp_seconds, f"CP traffic over {link.get(t.links.get('cp'), 'NVLink')}"),
        "dp": (t.dp_seconds, f"DP gradient traffic over {link.get(t.links.get('dp'), 'NVLink')}"),
        "pp": (t.pp_seconds, f"PP messages over {link.get(t.links.get('pp'), 'NVLink')}"),
    }
    seconds, words = max(parts.values(), key=lambda x: x[0])
    if seconds <= 0:
        return f"compute is the whole step ({t.step_seconds:,.3g} s)"
    return f"after compute, {words} takes the most of each step ({seconds / t.step_seconds:.0%})"


def _weights(s: Setup) -> list[float | None] | None:
    """Each candidate type's cost per GPU-second ($ or watts) under the cost or energy objective."""
    if s.objective == "cost":
        return [None if s.price_per_hour(g) is None else s.price_per_hour(g) / 3600 for g in s.candidates]
    if s.objective == "energy":
        return [None if g.tdp_w is None else float(g.tdp_w) for g in s.candidates]
    return None


def _choice(s: Setup, searches: list[Search], types: list[GPU], weights: list[float | None] | None, index: int,
            mode: str, target: float, rows, explain: bool):
    """The types considered and, with `explain`, the best plan on any other type (searched again
    without the winner's searches; `types` and `weights` are each search's GPU type and cost)."""
    from apsi.model.schema import Alternative, GpuChoice
    from apsi.units import SECONDS_PER_DAY

    objective = {"min_gpus": "gpus", "min_cost": "cost", "min_energy": "energy"}.get(mode, "days")
    if not explain:
        return GpuChoice(objective=objective, considered=[g.name for g in s.candidates], skipped=list(s.skipped),
                         runner_up=None)
    skip = frozenset(i for i in range(len(searches)) if types[i] is types[index])
    if mode == "min_gpus":
        alt = fewest(searches, target, rows, skip=skip)
    elif mode in ("min_cost", "min_energy"):
        alt = cheapest(searches, target, weights, skip=skip)
    else:
        alt = None
    if alt is None:
        others = [i for i in range(len(searches)) if i not in skip]
        alt = fastest([searches[i] for i in others])
        alt = None if alt is None else (others[alt[0]], alt[1])
    runner_up = None
    if alt is not None:
        i, f = alt
        gpu = types[i]
        days = f.seconds / SECONDS_PER_DAY
        hours = f.gpus * f.seconds / 3600
        price = s.price_per_hour(gpu)
        runner_up = Alternative(gpu=gpu.name, gpus=f.gpus, days=days, target_met=days <= s.days,
                                cost_usd=None if price is None else hours * price,
                                energy_mwh=None if gpu.tdp_w is None else hours * gpu.tdp_w * s.pue / 1e6)
    return GpuChoice(objective=objective, considered=[g.name for g in s.candidates],
                     skipped=list(s.skipped), runner_up=runner_up)
