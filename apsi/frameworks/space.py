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
from typing import TYPE_CHECKING, NamedTuple

from apsi.catalog import GPU
from apsi.frameworks import recompute
from apsi.frameworks.batch import MAX_TOLERANCE, MICRO_BATCH
from apsi.inputs import Setup
from apsi.model import memory as mem
from apsi.model.arithmetic import divisors
from apsi.model.counting import count_parameters
from apsi.units import GIB

if TYPE_CHECKING:
    from apsi.frameworks.interface import Framework

MAX_VPP = 8
"""Largest number of virtual stages tried per pipeline rank (Bridge's recipes use 2 to 8)."""
MIN_CP_CHUNK = 4096
"""Tokens each context-parallel rank keeps at least, unless cp is pinned: published CP runs keep
4,096 (Bridge's 405B, 8,192 over CP 2) to 8,192 tokens (Llama 3 405B, 131,072 over CP 16) per
rank, and a thinner slice leaves the attention's ring traffic less compute to hide behind."""

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


def memory_knobs(fw: Framework, pins: dict) -> dict:
    """The pinned knobs the framework's memory() takes as they are (its MEMORY_KNOBS); the
    recomputed modules are each configuration's (recompute.of)."""
    return {k: v for k, v in pins.items() if k in fw.MEMORY_KNOBS}


Front = tuple[tuple[float, float], ...]
"""(floor, shard) pairs in bytes, floors rising and shards falling: the members' memory floors at
any dp, floor + shard / dp, that no other member's are both at or below (front())."""


def front(floors: list[float], shards: list[float]) -> Front:
    """The (floor, shard) pairs of members no other member's pair is at or below on both."""
    out: list[tuple[float, float]] = []
    for floor, shard in sorted(zip(floors, shards)):
        if not out or shard < out[-1][1]:
            out.append((floor, shard))
    return tuple(out)


def least_dp(pairs: Front, capacity: float) -> float:
    """The least dp (a real number) at which some member's floor + shard / dp fits `capacity` bytes
    (math.inf where none can): memory falls with dp on every stage, and the most loaded stage holds
    at least the average one's state (configs()), so no layout of these members fits below it.
    Shaved by a billionth, as the walk's other floors are, so that rounding never passes a layout."""
    least = math.inf
    for floor, shard in pairs:
        if floor >= capacity:
            break
        least = min(least, shard / (capacity - floor) * (1 - 1e-9))
    return least


class Family:
    """Configurations that share their legal dps (the same recomputation, pp, tp, cp, vpp,
    micro-batch group and dp step) and differ in ep, etp and the ZeRO stage: at a flat MFU only in
    memory, under the step-time model in their traffic too. The bounds are worked out once per
    family (the least over its configurations), and its configurations are made when it is
    visited."""

    __slots__ = ("first", "group", "step", "members", "floors", "shards", "front", "least", "most", "index",
                 "per_replica", "bubble", "bounds")

    def __init__(self, first: Config, group: int, step: int, members: list[tuple[int, int, int]],
                 floors: list[float], shards: list[float], front: Front, index: int, least: float, most: float):
        self.first, self.group, self.step, self.members, self.index = first, group, step, members, index
        self.floors = floors
        """Per member, bytes no dp can remove from its most loaded stage (configs())."""
        self.shards = shards
        """Per member, bytes of its most loaded stage that dp divides, at dp 1 (at least): at dp it
        holds at least floor + shard / dp (configs())."""
        self.front = front
        """The members' (floor, shard) pairs no other member's are both at or below (least_dp())."""
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

    __slots__ = ("first", "micro", "steps", "index", "per_replica", "bubble", "least", "shape", "_families")

    def __init__(self, r: int, pp: int, tp: int, cp: int, vpp: int, micro: int, steps: list[tuple], index: int,
                 shape: "Shape"):
        self.shape = shape
        """The groups of every recomputation level with this pp, tp, cp and vpp."""
        self.steps = steps
        """(dp step, members, their floors, their shards, their front, least floor, most floor) per
        family, in family order."""
        self.first = Config(r, pp, tp, cp, vpp, *steps[0][1][0])
        self.micro, self.index = micro, index
        """The micro-batch group of the schedule; the first family's index (the next ones follow)."""
        self.per_replica = tp * pp * cp
        self.bubble = (pp - 1) / vpp
        self.least = min(x[5] for x in steps)
        self._families: list[Family] | None = None

    def families(self, capacity: float) -> list[Family]:
        """Its families whose least floor fits `capacity` bytes."""
        if self._families is None:
            f = self.first
            self._families = [Family(Config(f.recompute_rank, f.pp, f.tp, f.cp, f.vpp, *members[0]), self.micro, step,
                                     members, floors, shards, front, self.index + j, least, most)
                              for j, (step, members, floors, shards, front, least, most) in enumerate(self.steps)]
        return [family for family in self._families if family.least <= capacity]

    def made(self, capacity: float) -> list[Family] | None:
        """families(capacity) where they are made already, else None."""
        return None if self._families is None else self.families(capacity)

    def count(self, capacity: float) -> int:
        """Its configurations whose floor fits `capacity` bytes."""
        return sum(len(floors) if most <= capacity else sum(1 for floor in floors if floor <= capacity)
                   for _, _, floors, _, _, least, most in self.steps if least <= capacity)


class Shape:
    """The groups of one pp, tp, cp and vpp, one per recomputation level: they share their dp
    steps, members and memory floors, and differ only in their duration bounds. The walks take a
    shape by the least of its groups' bounds (Search.shape_k) and its groups only when it comes
    first: most shapes of a large question never are."""

    __slots__ = ("groups", "index", "per_replica", "bubble", "least", "steps", "fits")

    def __init__(self, index: int, steps: list[tuple], per_replica: int, bubble: float):
        self.index, self.steps, self.per_replica, self.bubble = index, steps, per_replica, bubble
        self.groups: list[Group] = []
        self.least = min(x[5] for x in steps)
        """The least memory floor of any member (Group.least, the same for each)."""
        self.fits: dict[tuple, int] = {}
        """Search.least_dp's answers by GPU capacity, cap and node granularity."""


class Space(NamedTuple):
    """configs()'s answer: every group, and the same groups by shape."""

    groups: list[Group]
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
    rank, every pp and vpp (up to MAX_VPP) with a split, and the framework's ep, etp, ZeRO stages
    and recomputation levels. Each member carries its floor: the most loaded stage holds at least
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
    # The counts too: a bare size's architecture is shared by a band of sizes (apsi.modelspec).
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

    def floor(tp: int, pp: int, ep: int, etp: int, zero: int) -> float:
        if (pp, zero) not in per_params:
            per_params[pp, zero] = fw.state_floor(pp, zero, s.precision, s.optimizer, pins)
        return per_params[pp, zero] * (dense / tp + experts / (ep * etp)) / pp + reserve

    def shard(tp: int, pp: int, cp: int, ep: int, etp: int, zero: int) -> float:
        """The average stage's bytes that dp divides, at dp 1 (fw.sharded_floor)."""
        key = (pp, zero, tp, cp, ep, etp)
        if key not in per_shard:
            per_shard[key] = fw.sharded_floor(pp, zero, s.precision, s.optimizer, pins, tp=tp, cp=cp, ep=ep, etp=etp)
        on_dense, on_experts = per_shard[key]
        return (on_dense * dense / tp + on_experts * experts / (ep * etp)) / pp

    levels = range(len(recompute.of(fw, s, pins)))  # a configuration's recompute_rank: recompute.of's index
    mb = pins.get("micro_batch", MICRO_BATCH)
    tps = [pins["tp"]] if "tp" in pins else [t for t in divisors(domain) if fw.tp_ok(a, t)]
    eps = [pins["ep"]] if "ep" in pins else [e for e in fw.ep_choices(a) if e <= cap]
    out: list[Group] = []
    shapes: list[Shape] = []
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
                    members, floors, shards = [], [], []
                    for ep, etp in pairs:
                        for zero in zeros:
                            least = floor(tp, pp, ep, etp, zero)
                            if least <= ceiling:
                                members.append((ep, etp, zero))
                                floors.append(least)
                                shards.append(shard(tp, pp, cp, ep, etp, zero))
                    if members:
                        kept.append((step, members, floors, shards, front(floors, shards), min(floors), max(floors)))
                if not kept:
                    continue
                for vpp in vpps:
                    if not fw.splits(a.layers, pp, vpp, a.mtp_layers):
                        continue
                    group = fw.micro_group(Config(0, pp, tp, cp, vpp, 1, 1, 0))
                    shape = Shape(len(shapes), kept, tp * pp * cp, (pp - 1) / vpp)
                    shapes.append(shape)
                    for r in levels:  # the families of one (r, pp, tp, cp, vpp) side by side: one bound
                        out.append(Group(r, pp, tp, cp, vpp, group, kept, made, shape))
                        shape.groups.append(out[-1])
                        made += len(kept)
    return Space(out, shapes)
