"""The layout space of a framework: which configurations are legal and how they are enumerated.

Owns the configuration (every layout knob but dp: recomputation, pp, tp, cp, vpp, ep, etp, ZeRO
stage), the order that breaks ties between equally good layouts (tie()), and the families and
groups the walk enumerates lazily: configurations that share their legal dps form a Family, and
the families of one (recomputation, pp, tp, cp, vpp) a Group, made only when the walk first
refines it (most groups of a large question never are). configs() lists every group the
framework's rules allow (its tp_ok, cp_ok, vpp_ok, zero_ok, splits, ep and etp choices), each member
with the closed-form floors of its memory (what no dp removes, and what dp divides); this module
has no framework's rule in it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple

from apsi.catalog import GPU
from apsi.training.frameworks import recompute
from apsi.training.frameworks.batch import MAX_TOLERANCE, MICRO_BATCH, MicroRule, micro_rule
from apsi.inputs.knobs import flag_value
from apsi.inputs.question import Setup
from apsi.model import memory as mem
from apsi.model.arithmetic import divisors
from apsi.model.counting import count_parameters
from apsi.units import GIB

if TYPE_CHECKING:
    from apsi.training.frameworks.interface import Framework

def vpp_most(layers: int, pp: int) -> int:
    """The most virtual stages per pipeline rank a split of `layers` can hold at pp: a chunk of one
    layer at least, the embedding and the loss counted as a layer each where a framework counts
    them (Megatron's account_for_embedding/loss_in_pipeline_split: Llama 3's one-layer chunks, L3
    3.3.2). The search tries every vpp up to it that the framework's rules take (vpp_ok, splits);
    it tried 8 at most, and a pinned VPP 20 beat its proved answer (Llama 3.1 70B at 15T: 1,952 H100
    against 2,008)."""
    return max(1, (layers + 2) // pp)
MIN_CP_CHUNK = 4096
"""Tokens each context-parallel rank keeps at least, unless cp is pinned: published CP runs keep
4,096 (Bridge's 405B, 8,192 over CP 2) to 8,192 tokens (Llama 3 405B, 131,072 over CP 16) per
rank, and a thinner slice leaves the attention's ring traffic less compute to hide behind."""

def _floored(fw: Framework, s: Setup, pins: dict) -> list[int]:
    """The cps above 1 the framework allows at this sequence that MIN_CP_CHUNK leaves out (none
    where cp is pinned)."""
    return [] if "cp" in pins else [c for c in divisors(max(1, s.seq // 2))
                                    if c > 1 and s.seq // c < MIN_CP_CHUNK and fw.cp_ok(s.seq, c, 1)]


def cp_floor_words(fw: Framework, s: Setup, pins: dict) -> str:
    """The Solver line's words on MIN_CP_CHUNK where it leaves out a cp the framework allows."""
    return (f", with context-parallel ranks of {MIN_CP_CHUNK:,} tokens or more (a pinned cp may go below)"
            if _floored(fw, s, pins) else "")


def cp_unsearched(fw: Framework, s: Setup, pins: dict) -> str | None:
    """A Note where no cp above 1 was searched (each rank would keep under MIN_CP_CHUNK tokens), for a
    plan whose target is missed or whose goal is speed: a pinned cp is weighed."""
    if 2 not in _floored(fw, s, pins):
        return None
    return (f"context parallelism was not searched: at {s.seq:,}-token sequences cp 2 leaves each rank {s.seq // 2:,} "
            f"tokens, fewer than the {MIN_CP_CHUNK:,} published runs keep (the step-time model is not calibrated on "
            "thinner slices); pin cp (--cp 2) to weigh it")


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


def _config(fields: tuple) -> Config:
    """A Config of its eight fields in order, without NamedTuple's keyword handling (the hot path)."""
    return tuple.__new__(Config, fields)


def tie(c: Config) -> tuple:
    """The order that breaks ties between equally good layouts: lighter recomputation, smaller pp,
    tp, cp and vpp, a smaller expert grid ep x etp and within it more expert parallelism (less
    expert TP, as Megatron's MoE guide advises for fine-grained experts), then the lower ZeRO
    stage."""
    return (c.recompute_rank, c.pp, c.tp, c.cp, c.vpp, c.ep * c.etp, -c.ep, c.zero)


def memory_knobs(fw: Framework, pins: dict) -> dict:
    """The pinned knobs the framework's memory() takes as they are (its MEMORY_KNOBS); the
    recomputed modules are each configuration's (recompute.of)."""
    return {k: v for k, v in pins.items() if k in fw.MEMORY_KNOBS}


def least_dp(floors: list[float], shards: list[float], capacity: float) -> float:
    """The least dp (a real number) at which some member's floor + shard / dp fits `capacity` bytes
    (math.inf where none can): memory falls with dp on every stage, and the most loaded stage holds
    at least the average one's state (configs()), so no layout of these members fits below it.
    Shaved by a billionth, as the walk's other floors are, so that rounding never passes a layout."""
    least = math.inf
    for floor, shard in zip(floors, shards):
        if floor < capacity:
            least = min(least, shard / (capacity - floor) * (1 - 1e-9))
    return least


class Step:
    """The members of one dp step of a (tp, cp, pp): what the families of that step share over every
    vpp and recomputation level."""

    __slots__ = ("step", "members", "floors", "shards", "least", "most", "_at")

    def __init__(self, step: int, members: list[tuple[int, int, int]], floors: list[float], shards: list[float]):
        self.step, self.members, self.floors, self.shards = step, members, floors, shards
        self.least, self.most = min(floors), max(floors)
        self._at: tuple[float, float] | None = None

    def least_dp(self, capacity: float) -> float:
        """least_dp() of its members in `capacity` bytes, kept for the last capacity asked (the
        shapes of every vpp of its pp share the Step)."""
        if self._at is None or self._at[0] != capacity:
            self._at = (capacity, least_dp(self.floors, self.shards, capacity))
        return self._at[1]


class Family:
    """Configurations that share their legal dps (the same recomputation, pp, tp, cp, vpp,
    micro-batch rule and dp step) and differ in ep, etp and the ZeRO stage: at a flat MFU only in
    memory, under the step-time model in their traffic too. The bounds are worked out once per
    family (the least over its configurations), and its configurations are made when it is
    visited."""

    __slots__ = ("first", "micro", "step", "members", "floors", "shards", "kept", "least", "most", "index",
                 "per_replica", "bubble", "bounds", "starts", "shape", "position", "_configs")

    def __init__(self, first: Config, micro: MicroRule, kept: Step, index: int, shape: "Shape", position: int):
        self.first, self.micro, self.step, self.members, self.index = first, micro, kept.step, kept.members, index
        self.shape, self.position = shape, position
        """Its shape, and its Step's position there (the same in every group of the shape)."""
        self.kept = kept
        """Its Step, shared with its siblings of every vpp and recomputation level."""
        self.floors = kept.floors
        """Per member, bytes no dp can remove from its most loaded stage (configs())."""
        self.shards = kept.shards
        """Per member, bytes of its most loaded stage that dp divides, at dp 1 (at least): at dp it
        holds at least floor + shard / dp (configs())."""
        self.least, self.most = kept.least, kept.most
        """min(floors) and max(floors)."""
        self.per_replica = first.tp * first.pp * first.cp
        self.bubble = (first.pp - 1) / first.vpp
        """(p - 1) / v: the bubble is this over the micro-batches."""
        self.bounds: dict = {}
        """Search.family_k's answers by the setup and GPU they were worked out for (warm calls)."""
        self.starts: dict = {}
        """Search.start's answers by the setup, run and target they were worked out for."""
        self._configs: dict[float, tuple[Config, ...]] = {}
        """configs()' answers by capacity."""

    def within(self, capacity: float):
        """The configurations whose floor leaves them a chance to fit in `capacity` bytes."""
        f = self.first
        for (ep, etp, zero), floor in zip(self.members, self.floors):
            if floor <= capacity:
                yield _config((f.recompute_rank, f.pp, f.tp, f.cp, f.vpp, ep, etp, zero))

    def configs(self, capacity: float) -> tuple[Config, ...]:
        """within(capacity) as a tuple, kept for later searches with this capacity (the walks ask
        on every visit, and every question on the same model and GPU memory asks the same)."""
        known = self._configs.get(capacity)
        if known is None:
            if len(self._configs) >= 8:
                self._configs.clear()
            known = self._configs[capacity] = tuple(self.within(capacity))
        return known

    def count(self, capacity: float) -> int:
        return len(self.floors) if self.most <= capacity else sum(1 for floor in self.floors if floor <= capacity)


class Group:
    """The families of one recomputation level, pp, tp, cp and vpp: they differ only in their dp
    step (and so in their expert grids and ZeRO stages), and share one cheap duration bound
    (Search.group_k). Its families are made when the walk first refines the group: most groups of
    a large question never are."""

    __slots__ = ("first", "micro", "steps", "index", "per_replica", "bubble", "least", "shape", "bounds", "rows",
                 "known", "_families", "_within")

    def __init__(self, r: int, pp: int, tp: int, cp: int, vpp: int, micro: MicroRule, steps: list[Step], index: int,
                 shape: "Shape"):
        self.shape = shape
        """The groups of every recomputation level with this pp, tp, cp and vpp."""
        self.steps = steps
        """Its families' Steps, in family order."""
        self.first = _config((r, pp, tp, cp, vpp) + steps[0].members[0])
        self.micro, self.index = micro, index
        """The micro-batch rule of the schedule; the first family's index (the next ones follow)."""
        self.per_replica = shape.per_replica
        self.bubble = shape.bubble
        self.least = shape.least
        self._families: list[Family] | None = None
        self.bounds: dict = {}
        """Search.group_k's least of its families' own K, by setup and capacity, once each is known."""
        self.known: dict = {}
        """By setup (Search.family_k's key), [the indices of the families whose K is known, their
        least] (note_k, least_k)."""
        self.rows: dict = {}
        """Search.family_rows' answers by the setup, run and target they were worked out for (their
        bounds filled in as the walks ask for them)."""
        self._within: dict[float, list[Family]] = {}
        """families()' answers by capacity (the walks ask on every look)."""

    def families(self, capacity: float) -> list[Family]:
        """Its families whose least floor fits `capacity` bytes."""
        known = self._within.get(capacity)
        if known is not None:
            return known
        if self._families is None:
            f = self.first
            self._families = [Family(_config(f[:5] + kept.members[0]), self.micro, kept, self.index + j, self.shape, j)
                              for j, kept in enumerate(self.steps)]
        if len(self._within) >= 8:
            self._within.clear()
        known = self._within[capacity] = [family for family in self._families if family.least <= capacity]
        return known

    def note_k(self, key: Any, index: int, k: float) -> None:
        """Family `index`'s K under setup `key` is k (Search.family_k): tallied for least_k()."""
        tally = self.known.get(key)
        if tally is None:
            if len(self.known) >= 16:
                self.known.clear()
            tally = self.known[key] = [set(), k]
        tally[0].add(index)
        if k < tally[1]:
            tally[1] = k

    def least_k(self, key: Any, capacity: float) -> float | None:
        """The least K of its families under setup `key` (of GPU memory `capacity`), once each
        family's is known (Search.group_k), else None."""
        made, tally = self.made(capacity), self.known.get(key)
        return tally[1] if made and tally is not None and len(tally[0]) == len(made) else None

    def made(self, capacity: float) -> list[Family] | None:
        """families(capacity) where they are made already, else None."""
        return None if self._families is None else self.families(capacity)

    def count(self, capacity: float) -> int:
        """Its configurations whose floor fits `capacity` bytes."""
        return sum(len(x.floors) if x.most <= capacity else sum(1 for floor in x.floors if floor <= capacity)
                   for x in self.steps if x.least <= capacity)


class Shape:
    """The groups of one pp, tp, cp and vpp, one per recomputation level: they share their dp
    steps, members and memory floors, and differ only in their duration bounds. The walks take a
    shape by the least of its groups' bounds (Search.shape_k) and its groups only when it comes
    first: most shapes of a large question never are."""

    __slots__ = ("first", "micro", "levels", "made", "index", "per_replica", "bubble", "least", "steps", "fits",
                 "_groups")

    def __init__(self, index: int, first: Config, micro: MicroRule, levels: int, made: int, steps: list[Step]):
        self.index, self.first, self.micro, self.levels, self.made, self.steps = index, first, micro, levels, made, steps
        """Its index among the shapes; its first configuration (the lightest recomputation); the
        micro-batch rule of its schedule; how many recomputation levels (groups) it has; the
        index of its first family (the groups' families follow, level by level)."""
        self.per_replica = first.tp * first.pp * first.cp
        self.bubble = (first.pp - 1) / first.vpp
        self.least = min(x.least for x in steps)
        """The least memory floor of any member (Group.least, the same for each)."""
        self.fits: dict[tuple, Any] = {}
        """Search.least_dp's answers by GPU capacity, cap and node granularity, and
        MemoryFloors.fits_of's by those and the batch's legal dps."""
        self._groups: list[Group] | None = None

    @property
    def groups(self) -> list[Group]:
        """Its groups, lightest recomputation first, made when first asked (most shapes of a large
        question never are)."""
        if self._groups is None:
            f, n = self.first, len(self.steps)
            self._groups = [Group(r, f.pp, f.tp, f.cp, f.vpp, self.micro, self.steps, self.made + r * n, self)
                            for r in range(self.levels)]
        return self._groups

    def count(self, capacity: float) -> int:
        """Its configurations whose floor fits `capacity` bytes, over every recomputation level."""
        return self.levels * sum(len(x.floors) if x.most <= capacity else
                                 sum(1 for floor in x.floors if floor <= capacity)
                                 for x in self.steps if x.least <= capacity)


class Space(NamedTuple):
    """configs()'s answer: every shape (each the groups of its recomputation levels)."""

    shapes: list[Shape]


_FAMILIES: dict[tuple, Space] = {}
"""configs()'s answers, kept for later calls and the other GPU types with the same NVLink domain,
the least recently used dropped first past FAMILIES_KEPT."""

FAMILIES_KEPT = 24
"""configs() answers kept: a few MB each (DeepSeek-V3: 16,000 families). The levers of one plan
ask some ten setups in turn; at 16, emptied all at once when full, a second call found none."""

def configs(fw: Framework, s: Setup, gpu: GPU, cap: int, pins: dict, ceiling: float = math.inf) -> Space:
    """Every configuration the framework's rules allow (dp aside), the pins kept, in families:
    tp within the NVLink domain (a pinned tp may exceed it), cp keeping MIN_CP_CHUNK tokens per
    rank, tp and cp splitting the sequence as the framework splits it (fw.cp_ok), every pp and vpp
    (up to vpp_most) with a split, and the framework's ep, etp, ZeRO stages and recomputation
    levels. Each member carries its floor: the most loaded stage holds at least
    the average stage's share of the state no dp divides (fw.state_floor bytes per parameter over
    tp, experts over ep x etp, and over pp) plus the reserve's fixed part, so a GPU with less
    memory cannot fit it at any dp; and its shard, the average stage's state that dp divides
    (fw.sharded_floor), so that at dp it holds at least floor + shard / dp (the states are linear
    in the stage's parameters, and no stage holds fewer than the model's over tp, ep x etp and pp
    on average), which bounds the dps at which it may fit (least_dp). Members whose floor exceeds
    `ceiling` bytes (the most memory of the GPU types asked about) are left out. The answer depends on the GPU only through its
    NVLink domain, and is kept for the next call."""
    # The micro-batch only leaves dp steps without a dp (widest below): the sizes share one list,
    # made at one sequence.
    pins = {k: v for k, v in pins.items() if k != "micro_batch"}
    # The counts too: a bare size's architecture is shared by a band of sizes (apsi.inputs.modelspec).
    key = (fw.NAME, s.model.architecture, s.model.params, s.model.active, s.model.mtp_params,
           s.model.active_parts is not None, s.seq, s.precision, s.optimizer,
           gpu.scaleup_domain, cap, s.batch_sequences, s.flat_mfu, ceiling,
           tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in pins.items())))
    known = _FAMILIES.pop(key, None)
    if known is None:
        if len(_FAMILIES) >= FAMILIES_KEPT:
            del _FAMILIES[next(iter(_FAMILIES))]  # the least recently used
        known = _configs(fw, s, gpu.scaleup_domain, cap, pins, ceiling)
    _FAMILIES[key] = known
    return known


def _configs(fw: Framework, s: Setup, domain: int, cap: int, pins: dict, ceiling: float = math.inf) -> Space:
    a = s.model.architecture
    parts = count_parameters(a).total
    experts, dense = parts.experts, parts.total - parts.experts
    reserve = mem.RESERVE_FIXED_GIB * GIB

    per_params: dict[tuple[int, int], float] = {}
    per_shard: dict[tuple[int, ...], tuple[float, float]] = {}

    def parts_of(tp: int, cp: int, ep: int, etp: int, zero: int) -> tuple[float, float]:
        """A member's parts that pp leaves alone: the parameters one GPU of the average stage holds
        at pp 1, dense / tp + experts / (ep x etp), and the bytes of them dp divides at dp 1
        (fw.sharded_floor). Its floor at pp is the first times fw.state_floor / pp, with the
        reserve's fixed part; its shard the second / pp."""
        key = (zero, tp, cp, ep, etp)
        if key not in per_shard:
            on_dense, on_experts = fw.sharded_floor(zero, s.precision, s.optimizer, pins, tp=tp, cp=cp, ep=ep, etp=etp)
            share = experts / (ep * etp)
            per_shard[key] = (dense / tp + share, on_dense * dense / tp + on_experts * share)
        return per_shard[key]

    def state_of(pp: int, zero: int) -> float:
        if (pp, zero) not in per_params:
            per_params[pp, zero] = fw.state_floor(pp, zero, s.precision, s.optimizer, pins)
        return per_params[pp, zero]

    levels = len(recompute.of(fw, s, pins))  # a configuration's recompute_rank: recompute.of's index
    mb = pins.get("micro_batch", MICRO_BATCH)
    tps = [pins["tp"]] if "tp" in pins else [t for t in divisors(domain) if fw.tp_ok(a, t)]
    eps = [pins["ep"]] if "ep" in pins else [e for e in fw.ep_choices(a) if e <= cap]
    shapes: list[Shape] = []
    made = 0  # families so far: their indices
    # The TP ranks that split the sequence: tp under sequence parallelism, none without it
    # (fw.cp_ok's rule on seq, cp and them; a pinned cp too, which check_pins took at any tp).
    sequence_split = flag_value("sequence_parallel", fw.NAME, pins)
    for tp in tps:
        split = tp if sequence_split else 1
        cps = [c for c in ([pins["cp"]] if "cp" in pins else divisors(max(1, s.seq // 2)))
               if fw.cp_ok(s.seq, c, split) and (c == 1 or "cp" in pins or s.seq // c >= MIN_CP_CHUNK)]
        etps = [pins["etp"]] if "etp" in pins else [e for e in fw.etp_choices(a, tp) if e <= cap]
        for cp in cps:
            if tp * cp > cap:
                continue
            grid = [(ep, etp) for ep in eps for etp in etps]
            if fw.GRID_DOMINANCE and s.flat_mfu:
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
            prepared: dict[tuple, tuple[list, list]] = {}
            """By dp step and ZeRO stages: the step's members and their parts (parts_of), which
            every pp shares."""
            for ep, etp in grid:
                by_step.setdefault(fw.dp_step(Config(0, 1, tp, cp, 1, ep, etp, 0), pins), []).append((ep, etp))
            for pp in ([pins["pp"]] if "pp" in pins else range(1, min(a.layers, cap // (tp * cp)) + 1)):
                vpps = ([pins["vpp"]] if "vpp" in pins
                        else [v for v in range(1, vpp_most(a.layers + a.mtp_layers, pp) + 1) if fw.vpp_ok(pp, v)])
                zeros: tuple[int, ...]
                if "zero" in pins:
                    zeros = (pins["zero"],) if fw.zero_ok(pp, pins["zero"], s.optimizer, a.moe) else ()
                else:
                    zeros = tuple(fw.zero_choices(pp, s.optimizer, a.moe))
                if not zeros:
                    continue  # a pinned ZeRO stage this pp does not allow
                # dp is a multiple of the step, at most cap / (t c p) and the batch at the widest
                # tolerance (MAX_TOLERANCE) over the micro-batch: larger steps leave no dp.
                widest = min(cap // (tp * cp * pp), int(s.batch_sequences * (1 + MAX_TOLERANCE)) // mb)
                kept = []
                states = [state_of(pp, zero) for zero in zeros]
                for step, pairs in by_step.items():
                    if step > widest:
                        continue
                    # Each member's floor and shard: the average stage's bytes no dp removes, with
                    # the reserve's fixed part, and those dp divides at dp 1 (parts_of over pp).
                    both = prepared.get((step, zeros))
                    if both is None:
                        both = prepared[step, zeros] = (
                            [(ep, etp, zero) for ep, etp in pairs for zero in zeros],
                            [(z, *parts_of(tp, cp, ep, etp, zero)) for ep, etp in pairs
                             for z, zero in enumerate(zeros)])
                    every, pp_free = both
                    floors = [states[z] * held / pp + reserve for z, held, _ in pp_free]
                    shards = [divided / pp for _, _, divided in pp_free]
                    if max(floors) <= ceiling:
                        members = every[:]  # a list of its own: its id keys Search's member parts
                    else:
                        fit = [j for j, least in enumerate(floors) if least <= ceiling]
                        members = [every[j] for j in fit]
                        floors, shards = [floors[j] for j in fit], [shards[j] for j in fit]
                    if members:
                        kept.append(Step(step, members, floors, shards))
                if not kept:
                    continue
                for vpp in vpps:
                    if not fw.splits(a.layers, pp, vpp, a.mtp_layers):
                        continue
                    first = Config(0, pp, tp, cp, vpp, *kept[0].members[0])
                    # The groups of one (pp, tp, cp, vpp), one per recomputation level, side by side.
                    shapes.append(Shape(len(shapes), first, micro_rule(fw, first), levels, made, kept))
                    made += levels * len(kept)
    return Space(shapes)
