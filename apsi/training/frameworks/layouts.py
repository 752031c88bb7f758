"""The legal layouts of one run on one GPU type under one framework, with their exact memory and duration.

Owns, for a setup, a GPU type, a cap and the pins: the families of configurations that may fit
this GPU (apsi.training.frameworks.space), the legal dps of each configuration with its micro-batches per
replica (the batch rules, apsi.training.frameworks.batch), whether a layout fits and under which of the
framework's splits (its memory model, judged by fw.peak_bytes), and its exact duration (the
step-time model, apsi.training.frameworks.timing, or at a flat MFU the closed form, ordered exactly by
apsi.training.frameworks.found.Seconds). The bounds that let the walk skip layouts are apsi.training.frameworks.bounds, built on this.
Answers are pure functions of the setup and are kept for warm calls.
"""

from __future__ import annotations

import bisect
import math
from typing import TYPE_CHECKING

from apsi.catalog import GPU
from apsi.training.frameworks import recompute, timing
from apsi.training.frameworks.batch import BATCH_TOLERANCE, MICRO_BATCH, MicroRule, batch_dps, micro_rule, stepped
from apsi.training.frameworks.evaluate import capacity_gib, split_taken
from apsi.training.frameworks.found import Found, Seconds
from apsi.training.frameworks.space import Config, Family, Group, configs, memory_knobs
from apsi.training.frameworks.tokens import token
from apsi.inputs.question import Setup
from apsi.model import goodput
from apsi.model import memory as mem
from apsi.units import GIB

if TYPE_CHECKING:
    from apsi.training.frameworks.interface import Framework


_BOUNDS: dict[tuple, dict] = {}
"""Layouts._k's entries by setup (warm calls share them), the least recently used dropped first
past BOUNDS_KEPT."""

BOUNDS_KEPT = 64
"""Setups (one per GPU type and micro-batch size of a question) whose bounds stay kept: a question
over every GPU type takes nine, and the levers or a frontier ask near-identical ones in turn, so
a limit of 16 dropped them all before the next call could reuse them."""

MAX_RUNS_KEPT = 8
"""Runs (batch, tolerance, cap, interruptions) whose floors and durations a setup keeps."""


CUT_KEPT = 4096
"""Legal-dp lists a run keeps (_legal_of); past it they are cut again."""


class Layouts:
    """The legal layouts of one run on one GPU type under one framework, and their exact memory
    and duration."""

    def __init__(self, fw: Framework, s: Setup, gpu: GPU, cap: int, pins: dict, tolerance: float = BATCH_TOLERANCE,
                 shapes: list | None = None, memory_aside: bool = False):
        self.fw, self.s, self.gpu, self.cap, self.pins, self.tolerance = fw, s, gpu, cap, pins, tolerance
        self.big_b = s.batch_sequences
        self.mb = pins.get("micro_batch", MICRO_BATCH)
        self.b_max = self.big_b * (1 + tolerance)
        # memory_aside: every legal layout, fitting or not (the Why line's "the target alone would need").
        self.capacity = math.inf if memory_aside else capacity_gib(s.on(gpu)) * GIB
        self.granularity = gpu.gpus_per_node if s.node_granularity is None else s.node_granularity
        """GPUs the layout's count is a multiple of: whole nodes of this type unless asked otherwise."""
        self.options = recompute.of(fw, s, pins)
        """The recomputations tried, lightest first: a configuration's recompute_rank indexes them."""
        self._signature = token((s.tokens, gpu.model_dump_json(exclude={"sources", "description"}), s.flat_mfu,
                                 s.mfu, s.model.flops_convention, self.capacity, self.mb))
        """What family_k depends on beyond the families' own key (configs(), which the micro-batch
        sizes share)."""
        # The counts too: a bare size keeps its shape rule's architecture over a band of sizes
        # (apsi.inputs.modelspec), and the bounds and durations scale with its parameters.
        counts = (s.model.params, s.model.active, s.model.matmul_active, s.model.mtp_params)
        shared = (fw.NAME, s.model.architecture, counts, s.seq, s.precision, s.optimizer, self.mb, self.options,
                  tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in pins.items())), self._signature)
        kept = _BOUNDS.pop(shared, None)
        if kept is None and len(_BOUNDS) >= BOUNDS_KEPT:
            del _BOUNDS[next(iter(_BOUNDS))]  # the least recently used
        self._k: dict = {} if kept is None else kept
        _BOUNDS[shared] = self._k
        """The bounds' parts (K and one layer per expert grid, most loaded ranks, groups): pure
        functions of the setup, kept for later calls with the same one (warm)."""
        runs = self._k.setdefault("runs", {})
        key = (self.big_b, tolerance, s.failures, s.checkpoint_minutes)  # the cap moves neither
        if key not in runs and len(runs) >= MAX_RUNS_KEPT:
            del runs[next(iter(runs))]  # the oldest: a sweep over batches keeps a bounded memory
        run = runs.setdefault(key, {})
        self._run_key = key + (pins.get("dp"),)
        """The run's key with the pinned dp: what the legal dps depend on beyond the setup and cap."""
        """What depends on the run's batch, cap and interruptions too: pure functions of the
        layout, kept per setup as _k (a later target reuses them). The memory answers stay per
        question (and its capped() searches): the Note counts the evaluations a question made."""
        self._starts_token = token((self._signature, self._run_key, cap, self.granularity))
        """What Search.start's answers kept on a family depend on beyond the target."""
        self._seconds: dict[tuple, Seconds] = run.setdefault("seconds", {})
        self._cut: dict[tuple, tuple[list[int], list[int]]] = run.setdefault("cut", {})
        """_legal_of's lists by micro-batch rule, dp step with whole nodes, cap and GPUs per replica."""
        self._floors: dict[Config, dict[int, tuple[float, float | None]]] = run.setdefault("floors", {})
        """(dp_floor, too_slow's whole floor or None until asked) by configuration, then dp."""
        self._windows: dict[tuple[Config, float], tuple[float, float]] = run.setdefault("windows", {})
        """Search.floor_window's answers by configuration and target (a later question with the same
        target, a repeated plan or a lever, asks the same)."""
        self._micro: dict[tuple, float] = self._k.setdefault("micro", {})
        """_micro_of's answers, by configuration less its ZeRO stage (kept per setup, as _k)."""
        self._slowest: dict[Config, tuple[int, float, tuple]] = self._k.setdefault("tails", {})
        self._rests: dict[tuple[Config, int], float] = self._k.setdefault("rests", {})
        """Search._rest_of's answers by configuration and dp (kept per setup, as _k)."""
        """timing.tail_parts by configuration (kept per setup, as _k)."""
        self._first_ok: dict[Config, tuple[int, tuple[int, ...]]] = {}
        self._layers: dict = {}
        self._per_sequence = s.tokens / (s.seq * self.mb)
        """Micro-batches of the whole run (of mb sequences each)."""
        self._member_parts: dict[tuple[int, int], tuple[float, float]] = {}
        # Families are shared by the GPU types with this NVLink domain: built for the most memory
        # among them (a member that fits none is left out), each type keeping those that may fit it.
        ceiling = self.capacity if memory_aside else max(
            capacity_gib(s.on(g)) * GIB for g in s.candidates if g.scaleup_domain == gpu.scaleup_domain)
        self._ceiling = ceiling
        self._capped = shapes is not None
        if shapes is not None:  # a higher cap's (capped()): those within this one
            self.shapes = [x for x in shapes if x.per_replica <= cap]
        else:
            self.shapes = [x for x in configs(fw, s, gpu, cap, pins, ceiling).shapes if x.least <= self.capacity]
        """The groups of configurations that may fit this GPU, by pp, tp, cp and vpp (their
        recomputation levels together)."""
        self.evaluations = 0
        self._legal: dict[tuple, tuple[list[int], list[int]]] = {}
        self._by_config: dict[Config, tuple[list[int], list[int]]] = {}
        self._family_dps: dict[int, list[int]] = {}
        self._stepped: dict[tuple[MicroRule, int], tuple[list[int], list[int]]] = {}
        self._batch: dict[MicroRule, tuple[tuple[int, ...], tuple[int, ...]]] = {}
        self._fits: dict[tuple[Config, int], tuple[int, ...] | None] = {}
        self._some: dict[tuple[Config, int], tuple[int, ...] | None] = {}
        self._rows: dict[float | None, list] = {}
        self._split_known: dict[tuple[Config, tuple[int, ...]], list] = {}
        """split_fits' answers by configuration and split: [the largest dp known not to fit, the
        smallest known to fit] (memory falls with dp: every dp at or below the one, at or above
        the other, is told)."""
        self._light_fits: dict[Config, list[int]] = {}
        """Search._light_fit's ranges: where a configuration's first dp fitting under every split lies."""
        self._starts: dict[tuple[float, int], int] = {}
        """Search.start's answers by target and family index (the walk's refine and visit share them)."""
        self._reach: dict[tuple[float, Config], float] = {}
        """The same verdicts from no GPUs up (fewest()'s), by target and configuration: their reach."""
        self._family_reach: dict[tuple, float] = {}
        """Search.noted()'s verdicts: by target and a lightest family's degrees and dp step, the GPUs
        up to which the floors of its every configuration fail the target."""
        self._pruned: dict[Config, list[tuple[float, float, float]]] = {}
        """Search.first_meeting's floor verdicts on a configuration with the lightest recomputation:
        (target, low, reach), no legal dp from low GPUs up to reach letting the target through."""
        self._leaner, self._fuller, self._leanest = recompute.lattice(fw, self.options)
        """By recompute rank: the ranks that provably hold no more memory on every stage (leaner),
        those that hold no less (fuller), and the leanest of the leaner, which split_fits asks
        first (the memory lattice of the recomputations, recompute.lattice())."""
        self._light = (bool(self.options) and not self.options[0].modules and self.options[0].level != "full"
                       and not pins.get("tp_overlap") and not pins.get("ep_overlap"))
        """Whether options[0] re-runs no matrix work, so that every other option adds work to it
        and is no faster, split by split (apsi.training.frameworks.recompute; dominated()). Not with the TP
        or EP overlaps, which hide traffic under the very compute a recomputation adds."""

    @property
    def groups(self) -> list[Group]:
        """Every group (families that differ only in their dp step, with one duration bound for
        all), shape by shape: each made if not yet."""
        return [group for shape in self.shapes for group in shape.groups]

    @property
    def families(self) -> list[Family]:
        """Every family whose floor may fit this GPU, group by group (each made if not yet)."""
        return [family for group in self.groups for family in group.families(self.capacity)]

    @property
    def configs(self) -> list[Config]:
        """Every configuration, family by family."""
        return [c for family in self.families for c in family.within(self.capacity)]

    def runs_below(self, gpus: int) -> bool:
        """Whether some legal layout whose memory floor may fit this GPU runs on fewer than `gpus`
        GPUs, from the shapes' dp steps without making their families (the fewest GPUs per
        replica first: most questions are told by the first)."""
        for shape in sorted(self.shapes, key=lambda x: x.per_replica):
            if shape.per_replica >= gpus:
                return False
            for kept in shape.steps:
                if kept.least <= self.capacity:
                    dps = self._legal_of(shape.micro, kept.step, shape.per_replica)[0]
                    if dps and shape.per_replica * dps[0] < gpus:
                        return True
        return False

    def members(self, family: Family) -> tuple[Config, ...]:
        """family.within(capacity), made once per family and capacity (Family.configs)."""
        return family.configs(self.capacity)

    def count(self) -> int:
        """How many configurations may fit this GPU (without making the families; kept per setup)."""
        key = ("count", self.cap, self.big_b, self._ceiling)
        if key not in self._k:
            self._k[key] = sum(shape.count(self.capacity) for shape in self.shapes)
        return self._k[key]

    def legal(self, c: Config) -> tuple[list[int], list[int]]:
        """The dps the framework's rules, the batch and the cap allow for c, ascending, with the
        micro-batches per replica at each (kept by configuration: the walk asks again and again)."""
        known = self._by_config.get(c)
        if known is None:
            known = self._by_config[c] = self._legal_of(micro_rule(self.fw, c), self.fw.dp_step(c, self.pins),
                                                        c.tp * c.pp * c.cp)
        return known

    def _legal_of(self, micro: MicroRule, step: int, per_replica: int) -> tuple[list[int], list[int]]:
        """The batch's dps for a micro-batch rule that are multiples of the framework's dp step,
        up to cap / (tp pp cp), and that make tp pp cp dp a whole number of nodes (a multiple of
        the granularity: dp a multiple of granularity / gcd(granularity, tp pp cp))."""
        key = (micro, step, per_replica)
        if key not in self._legal:
            whole = self.granularity // math.gcd(self.granularity, per_replica)
            both = step * whole // math.gcd(step, whole)
            if (micro, both) not in self._stepped:
                self._batch_dps(micro)  # listed (and charged, apsi.training.frameworks.budget) once per rule and search
                self._stepped[micro, both] = stepped(*self._batch_args(micro), both)
            # The cut lists are pure functions of the run, the cap and these: kept with the run.
            kept = self._cut.get((micro, both, self.cap, per_replica))
            if kept is None:
                dps, ms = self._stepped[micro, both]
                cut = bisect.bisect_right(dps, self.cap // per_replica)
                if len(self._cut) >= CUT_KEPT:
                    self._cut.clear()
                kept = self._cut[micro, both, self.cap, per_replica] = (dps[:cut], ms[:cut])
            self._legal[key] = kept
        return self._legal[key]

    def family_dps(self, f: Family) -> list[int]:
        """The legal dps the family's members share (kept by family: the walks ask on every look)."""
        known = self._family_dps.get(f.index)
        if known is None:
            c = f.first
            known = self._family_dps[f.index] = self._legal_of(f.micro, f.step, c.tp * c.pp * c.cp)[0]
        return known

    def _batch_dps(self, micro: MicroRule) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Every dp (the pinned one, if any) at which whole groups of micro-batches (those the rule
        accepts) run the batch within the tolerance, with its micro-batches, up to the cap."""
        if micro not in self._batch:
            self._batch[micro] = batch_dps(*self._batch_args(micro))
        return self._batch[micro]

    def _batch_args(self, micro: MicroRule) -> tuple[int, int, int, float, int, int | None, int, int]:
        """batch_dps' arguments for a micro-batch rule: the batch, micro-batch, group, tolerance,
        the most dps (the cap, or the widest batch), the pinned dp, the rounds' pipeline and the
        fewest micro-batches."""
        group = micro.group
        return (self.big_b, self.mb, group, self.tolerance, min(self.cap, int(self.b_max // (self.mb * group))),
                self.pins.get("dp"), micro.rounds, micro.least)

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
            option = self.options[r]
            self._k[key] = timing.floor_k(self.fw, self.s, option.level, option.modules or mem.DEFAULT_MODULES, tp, cp,
                                          ep, etp, self.mb, self.pins)
        return self._k[key]

    def seconds(self, c: Config, dp: int, m: int) -> float:
        return self.exact(c, dp, m).value

    def exact(self, c: Config, dp: int, m: int, split: tuple[int, ...] | None = None) -> Seconds:
        """The duration, exactly ordered: at a flat MFU K_r / (t p c dp) (1 + (p - 1) / (v m)) as a
        rational; else the step-time model's (apsi.training.frameworks.timing) under `split`, by default
        the split the layout takes (fits(), as found() reports it; the first of all where none does)."""
        if self.s.flat_mfu:
            return Seconds(self.k(c), c.vpp * m + c.pp - 1, c.tp * c.pp * c.cp * dp * c.vpp * m)
        a = self.s.model.architecture
        split = split or self.fits(c, dp, m) or self.fw.splits(a.layers, c.pp, c.vpp, a.mtp_layers)[0]
        key = (c, dp, split)
        if key not in self._seconds:
            self._seconds[key] = Seconds.modelled(timing.seconds(self.fw, self.s, self.layout(c, dp, m), split, m,
                                                                 self._layers))
        return self._seconds[key]

    def fits(self, c: Config, dp: int, m: int) -> tuple[int, ...] | None:
        """The split c takes at dp (evaluate.split_taken: of the framework's splits under which it
        fits, the fastest; each split is its own layout), or None where none fits. Answers are
        kept for a second walk (the runner-up GPU type)."""
        if (c, dp) not in self._fits:
            first = self.some_fit(c, dp, m)
            a = self.s.model.architecture
            splits = self.fw.splits(a.layers, c.pp, c.vpp, a.mtp_layers)
            if first is None or self.s.flat_mfu or len(splits) == 1:
                # At a flat MFU the duration does not depend on the split: the first that fits.
                self._fits[c, dp] = first
            else:
                layout = self.layout(c, dp, m)
                known = {first: True}
                # The framework's splits before the first that fits do not fit.
                known.update((x, False) for x in splits[:splits.index(first)])

                def fit(x: tuple[int, ...]) -> bool:
                    if x not in known:
                        known[x] = self.split_fits(c, dp, m, x, layout)
                    return known[x]

                self._fits[c, dp] = split_taken(splits, fit, lambda x: self.exact(c, dp, m, x).value,
                                                lambda x: self._split_floor(c, dp, m, x))
        return self._fits[c, dp]

    def _split_floor(self, c: Config, dp: int, m: int, split: tuple[int, ...]) -> float:
        """A lower bound on c's seconds at dp under `split` (split_taken's floor): the steps x (m +
        (p - 1) / v) micro-batches of this split's slowest rank (timing.split_micro_floor), with
        the interruptions' share of the GPUs, as Search.dp_floor for the fastest split."""
        s = self.s
        key = c[:7] + (split,)
        if key not in self._micro:
            self._micro[key] = timing.split_micro_floor(self.fw, s, self.layout(c, 1, 1), split, self._layers)
        ideal = timing.step_count(s.tokens, m, self.mb, dp, s.seq) * (m + (c.pp - 1) / c.vpp) * self._micro[key]
        if s.failures:
            ideal = goodput.wall_seconds(ideal, c.tp * c.pp * c.cp * dp, s.checkpoint_minutes)
        return ideal * (1 - 1e-9)

    def some_fit(self, c: Config, dp: int, m: int) -> tuple[int, ...] | None:
        """The first of the framework's splits under which c fits at dp, or None: whether c fits
        at all (the bisection's question). Each split's memory falls with dp, so once the
        framework's first split fits at some dp it is the first at every larger one."""
        if (c, dp) not in self._some:
            first = self._first_ok.get(c)
            if first is not None and dp >= first[0]:
                self._some[c, dp] = first[1]
            else:
                split = self._first_split(c, dp, m)
                self._some[c, dp] = split
                a = self.s.model.architecture
                if split is not None and split == self.fw.splits(a.layers, c.pp, c.vpp, a.mtp_layers)[0]:
                    self._first_ok[c] = (dp, split)
        return self._some[c, dp]

    def layout(self, c: Config, dp: int, m: int) -> dict:
        """The keywords of the framework's memory() for c at dp, less the split."""
        s = self.s
        return dict(tp=c.tp, pp=c.pp, cp=c.cp, ep=c.ep, etp=c.etp, dp=dp, vpp=c.vpp, micro_batch=self.mb,
                    seq=s.seq, batch_sequences=m * self.mb * dp, optimizer=s.optimizer, precision=s.precision,
                    zero=c.zero, **memory_knobs(self.fw, self.pins),
                    **self.recompute_of(self.options[c.recompute_rank].heaviest))

    def dominated(self, c: Config) -> bool:
        """Whether c's recomputation is heavier than the lightest and provably no faster than it on
        every split and dp (its floors no lower either): the extra compute hides no traffic but the
        data-parallel reduction's, which it at most matches. Without context parallelism only: the
        ring's exposed time falls by all the attention compute a recomputation adds
        (apsi.model.steptime.layer), so that the same compute would hide it and the DP traffic."""
        return self._light and c.recompute_rank > 0 and c.cp == 1

    def recompute_of(self, variant: recompute.Variant) -> dict:
        """The memory() keywords of a recomputation variant: its level, and its modules where the
        framework takes them."""
        level, modules = variant
        return dict(recompute=level, **({"modules": modules} if modules and "recompute_modules" in self.fw.KNOBS
                                         else {}))

    def lightest(self, c: Config, dp: int, m: int, split: tuple[int, ...]) -> recompute.Variant:
        """The first of c's recomputation variants (lightest first, the same duration each) that fits
        at dp under `split`: the layout takes no more recomputation than it needs to fit."""
        option = self.options[c.recompute_rank]
        if len(option.variants) == 1:
            return option.heaviest
        a = self.s.model.architecture
        layout = self.layout(c, dp, m)
        for variant in option.variants[:-1]:
            layout.pop("modules", None)
            layout.update(self.recompute_of(variant))
            if self.fw.peak_bytes(a, split=split, stop_above=self.capacity, **layout) <= self.capacity:
                return variant
        return option.heaviest

    def split_fits(self, c: Config, dp: int, m: int, split: tuple[int, ...], layout: dict | None = None) -> bool:
        """Whether c fits at dp (m micro-batches, the legal ones) under `split`: each split's memory
        falls with dp, so a dp at or above one where it fits fits, and one at or below one where it
        does not fit does not; else one memory evaluation (`layout` is self.layout(c, dp, m) where
        the caller has it)."""
        known = self._split_known.get((c, split))
        if known is None:
            known = self._split_known[c, split] = [0, math.inf]
        if dp >= known[1]:
            return True
        if dp <= known[0]:
            return False
        r = c.recompute_rank
        if self._leaner[r] or self._fuller[r]:
            # The memory lattice (recompute.lattice()): a sibling holding no more memory that does not fit at
            # this dp or above says c does not; one holding no less that fits at it or below says c fits.
            rest = c[1:]
            for other in self._leaner[r]:
                told = self._split_known.get((at_rank(other, rest), split))
                if told is not None and dp <= told[0]:
                    known[0] = dp
                    return False
            for other in self._fuller[r]:
                told = self._split_known.get((at_rank(other, rest), split))
                if told is not None and dp >= told[1]:
                    known[1] = dp
                    return True
            lean = self._leanest[r]
            if lean is not None and not self.split_fits(at_rank(lean, rest), dp, m, split):
                # One evaluation of the leanest sibling answers for every rank below it in the lattice.
                known[0] = dp
                return False
        self.evaluations += 1
        a = self.s.model.architecture
        ok = self.fw.peak_bytes(a, split=split, stop_above=self.capacity,
                                **(self.layout(c, dp, m) if layout is None else layout)) <= self.capacity
        if ok:
            known[1] = dp
        else:
            known[0] = dp
        return ok

    def _first_split(self, c: Config, dp: int, m: int) -> tuple[int, ...] | None:
        a = self.s.model.architecture
        layout = None
        for split in self.fw.splits(a.layers, c.pp, c.vpp, a.mtp_layers):
            known = self._split_known.get((c, split))
            if known is not None and dp >= known[1]:
                return split
            if known is not None and dp <= known[0]:
                continue
            if layout is None:  # made once, for the first split not told by the answers kept
                layout = self.layout(c, dp, m)
            if self.split_fits(c, dp, m, split, layout):
                return split
        return None

    def _first_fit(self, c: Config, start: int = 0, stop: int | None = None, last_first: bool = False) -> int | None:
        """Index of the smallest legal dp from `start` to `stop` (the last, by default) at which c
        fits (memory falls with dp: bisect), `start` itself when it fits there (the callers want
        no smaller one). With last_first the last is asked first: where `stop` is the walk's best
        found so far, most looks find nothing fits up to it, and then the start need not be asked."""
        dps, ms = self.legal(c)
        last = len(dps) - 1 if stop is None else min(stop, len(dps) - 1)
        if start > last:
            return None
        if last_first and self.some_fit(c, dps[last], ms[last]) is None:
            return None
        if self.some_fit(c, dps[start], ms[start]) is not None:
            return start
        if not last_first and self.some_fit(c, dps[last], ms[last]) is None:
            return None
        lo, hi = start + 1, last
        while lo < hi:
            mid = (lo + hi) // 2
            if self.some_fit(c, dps[mid], ms[mid]) is not None:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def memory_answers(self) -> tuple[dict, ...]:
        """A copy of its memory answers' tables, for take_memory() on a search of the same inputs."""
        return dict(self._fits), dict(self._some), dict(self._first_ok), {k: list(v) for k, v in self._split_known.items()}

    def take_memory(self, answers: tuple[dict, ...], evaluations: int) -> None:
        """Adds memory_answers() of a search of the same inputs, and the evaluations they took."""
        tables: tuple[dict, ...] = (self._fits, self._some, self._first_ok)
        for table, kept in zip(tables, answers):
            table.update(kept)
        self._split_known.update((k, list(v)) for k, v in answers[3].items())
        self.evaluations += evaluations

    def found(self, c: Config, i: int) -> Found:
        """c at its i-th legal dp, which the walk found to fit."""
        dps, ms = self.legal(c)
        split = self.fits(c, dps[i], ms[i])
        assert split is not None, "found() takes a layout that fits"
        return Found(c.tp * c.pp * c.cp * dps[i], self.seconds(c, dps[i], ms[i]), c, dps[i], split, ms[i])


def at_rank(rank: int, rest: tuple) -> Config:
    """The configuration with this recompute rank and the other knobs `rest` (Config[1:]): the
    lattice's siblings, made without NamedTuple._replace's keyword handling (the hot path)."""
    return tuple.__new__(Config, (rank,) + rest)


def knobs(search: Layouts, found: Found) -> dict:
    """The keywords of evaluate_layout() for a layout the walk found on `search`."""
    c = found.config
    level, modules = search.lightest(c, found.dp, found.micro_batches, found.split)
    return dict(tp=c.tp, pp=c.pp, vpp=c.vpp, cp=c.cp, ep=c.ep, etp=c.etp, dp=found.dp, micro_batch=search.mb,
                recompute=level, split=found.split, zero=c.zero,
                batch_sequences=found.micro_batches * search.mb * found.dp,
                **({"recompute_modules": modules} if modules and "recompute_modules" in search.fw.KNOBS else {}),
                **{k: v for k, v in search.pins.items() if k in search.fw.MEMORY_KNOBS})
