"""The Megatron layout search: every legal layout, each judged by apsi.frameworks.megatron.

Owns choosing the GPU type, tp, pp and its split, vpp, cp, ep, etp, dp and the recomputation
level for plan(framework="megatron"): the fewest GPUs meeting the target (ties: shortest, then
the GPU types' order, lighter recomputation, smaller pp, tp, cp, vpp, ep, etp, and the first of
Megatron's splits that fits), or, when none meets it, the fastest within the GPU cap. Exact by
exhaustion, with these facts doing the work (tests/test_search.py checks them against a plain
walk over every configuration, dp and split):

- for a fixed configuration (all knobs but dp), memory on every stage falls as dp grows (states
  and optimizer shards shrink, fewer micro-batches are in flight) and so does the duration
  (K / (t p c dp) (1 + (p - 1) dp / (v B))); so the fewest GPUs for that configuration are at its
  smallest legal dp that meets the target and fits, and the fastest at its largest legal dp;
- the target alone gives each configuration a lower bound on its GPUs in closed form, so
  configurations are visited in order of that bound and the walk stops once the bound passes the
  best layout found;
- the split only moves memory, and each split's memory falls with dp, so "some split fits" falls
  too: the split is chosen at the dp the bisection settles on.

Not the CP-SAT program: plan()'s program still works on the reference arithmetic, and a CP-SAT
formulation over this space is open work. The micro-batch is 1 sequence: under a flat MFU a
larger one only adds activation memory and bubble (m = B / (b dp) falls), so it never wins.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from apsi.catalog import GPU
from apsi.frameworks import megatron
from apsi.frameworks.evaluate import capacity_gib
from apsi.inputs import Setup
from apsi.model import arithmetic as ar
from apsi.model.arithmetic import divisors
from apsi.units import GIB

if TYPE_CHECKING:
    from apsi.model.schema import Plan

MAX_VPP = 8
"""Largest number of virtual stages tried per pipeline rank (Bridge's recipes use 2 to 8)."""
MIN_CP_CHUNK = 4096
"""Tokens each context-parallel rank keeps at least, unless cp is pinned. Until communication is
priced (the next step of the time model), CP would cost nothing here and be chosen as a free
extra data-parallel degree; published CP runs keep 4,096 (Bridge's 405B, 8,192 over CP 2) to
8,192 tokens (Llama 3 405B, 131,072 over CP 16) per rank."""
MICRO_BATCH = 1


class Config(NamedTuple):
    """A layout without its data-parallel degree."""

    recompute_rank: int
    pp: int
    tp: int
    cp: int
    vpp: int
    ep: int
    etp: int


class Found(NamedTuple):
    gpus: int
    seconds: float
    config: Config
    dp: int
    split: tuple[int, ...]
    """Layers of each virtual stage: the first of megatron.splits (Megatron's order of preference)
    that fits at this dp."""


def _configs(s: Setup, gpu: GPU, cap: int, pins: dict) -> list[Config]:
    """Every configuration Megatron's rules allow (dp aside), with the pins kept: tp within the
    NVLink domain (the reference's rule; a pinned tp may exceed it), cp keeping MIN_CP_CHUNK tokens
    per rank, every pp and vpp (up to MAX_VPP) with its splits, ep dividing the experts, etp
    dividing tp and the experts' FFN, every recomputation level."""
    a = s.model.architecture
    domain = gpu.scaleup_domain
    tps = [t for t in divisors(domain) if a.heads % t == 0 and (a.mla or a.kv_heads % t == 0 or t % a.kv_heads == 0)]
    cps = [c for c in divisors(max(1, s.seq // 2)) if c == 1 or (s.seq % (2 * c) == 0 and s.seq // c >= MIN_CP_CHUNK)]
    levels = [ar.RECOMPUTE_LEVELS.index(r) for r in ar.RECOMPUTE_LEVELS if pins.get("recompute") in (None, r)]
    eps = [1] if not a.moe else [e for e in divisors(a.experts) if e <= cap]
    out = []
    for tp in ([pins["tp"]] if "tp" in pins else tps):
        etps = [1] if not a.moe else [e for e in divisors(tp) if a.expert_ffn % e == 0]
        for cp in ([pins["cp"]] if "cp" in pins else cps):
            if tp * cp > cap:
                continue
            for pp in ([pins["pp"]] if "pp" in pins else range(1, min(a.layers, cap // (tp * cp)) + 1)):
                vpps = [pins["vpp"]] if "vpp" in pins else range(1, (MAX_VPP if pp > 1 else 1) + 1)
                for vpp in vpps:
                    if not megatron.splits(a.layers, pp, vpp, a.mtp_layers):
                        continue
                    for ep in ([pins["ep"]] if "ep" in pins else eps):
                        for etp in ([pins["etp"]] if "etp" in pins else etps):
                            out.extend(Config(r, pp, tp, cp, vpp, ep, etp) for r in levels)
    return out


class Search:
    """The legal layouts of one run on one GPU type, and the arithmetic that ranks them."""

    def __init__(self, s: Setup, gpu: GPU, cap: int, pins: dict):
        self.s, self.gpu, self.cap, self.pins = s, gpu, cap, pins
        self.big_b = s.batch_sequences
        self.capacity = capacity_gib(s.on(gpu)) * GIB
        peak = gpu.peak_tflops(s.precision) * 1e12
        self.k = [ar.training_flops(s.model, s.tokens, s.seq, r) / (peak * s.mfu) for r in ar.RECOMPUTE_LEVELS]
        self.dps = [d for d in divisors(self.big_b // MICRO_BATCH) if pins.get("dp") in (None, d)]
        self.configs = _configs(s, gpu, cap, pins)
        self.evaluations = 0
        self._dps: dict[tuple[int, int, int, int], list[int]] = {}
        self._fits: dict[tuple[Config, int], tuple[int, ...] | None] = {}
        self._rows: dict[float | None, list] = {}

    def legal_dps(self, c: Config) -> list[int]:
        """dp values the batch, the expert grid and the schedule allow for c within the cap,
        ascending: (ep x etp) | tp x cp x dp, and under the interleaved schedule B / dp a multiple
        of pp (megatron.check_layout)."""
        key = (c.tp * c.cp, c.ep * c.etp, c.tp * c.pp * c.cp, c.pp if c.vpp > 1 else 0)
        if key not in self._dps:
            width, experts, per_replica, group = key
            self._dps[key] = [d for d in self.dps if (width * d) % experts == 0 and per_replica * d <= self.cap
                              and (not group or (self.big_b // (MICRO_BATCH * d)) % group == 0)]
        return self._dps[key]

    def meeting(self, c: Config, dps: list[int], target_seconds: float | None) -> list[int]:
        """The dps of `dps` at which c meets the target: a suffix, as the duration falls with dp."""
        if target_seconds is None:
            return dps
        lo, hi = 0, len(dps)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.seconds(c, dps[mid]) <= target_seconds:
                hi = mid
            else:
                lo = mid + 1
        return dps[lo:]

    def seconds(self, c: Config, dp: int) -> float:
        gpus, micro = c.tp * c.pp * c.cp * dp, self.big_b // (MICRO_BATCH * dp)
        return self.k[c.recompute_rank] / gpus * (1 + (c.pp - 1) / (c.vpp * micro))

    def fits(self, c: Config, dp: int) -> tuple[int, ...] | None:
        """The first of Megatron's splits for c under which it fits at dp, or None. Each split's
        memory falls with dp, so "some split fits" does too. Answers are kept for a second walk
        (the runner-up GPU type)."""
        if (c, dp) not in self._fits:
            self._fits[c, dp] = self._first_split(c, dp)
        return self._fits[c, dp]

    def rows(self, target_seconds: float | None) -> list[tuple[int, Config, list[int]]]:
        """(bound, configuration, dps meeting the target) for every configuration that can meet it."""
        if target_seconds not in self._rows:
            out = []
            for c in self.configs:
                dps = self.meeting(c, self.legal_dps(c), target_seconds)
                if dps:
                    out.append((c.tp * c.pp * c.cp * dps[0], c, dps))
            self._rows[target_seconds] = out
        return self._rows[target_seconds]

    def _first_split(self, c: Config, dp: int) -> tuple[int, ...] | None:
        s = self.s
        a = s.model.architecture
        for split in megatron.splits(a.layers, c.pp, c.vpp, a.mtp_layers):
            self.evaluations += 1
            total = megatron.peak_bytes(
                a, tp=c.tp, pp=c.pp, cp=c.cp, ep=c.ep, etp=c.etp, dp=dp, vpp=c.vpp, micro_batch=MICRO_BATCH,
                seq=s.seq, batch_sequences=self.big_b, split=split,
                recompute=ar.RECOMPUTE_LEVELS[c.recompute_rank], optimizer=s.optimizer, precision=s.precision)
            if total <= self.capacity:
                return split
        return None

    def fewest(self, target_seconds: float | None) -> Found | None:
        """The fewest GPUs meeting the target on this GPU type (None: no target)."""
        best = fewest([self], target_seconds)
        return None if best is None else best[1]

    def fastest(self) -> Found | None:
        """The fastest layout within the cap on this GPU type."""
        best = fastest([self])
        return None if best is None else best[1]

    def _first_fit(self, c: Config, dps: list[int]) -> tuple[int, tuple[int, ...]] | None:
        """The smallest dp of `dps` (ascending) at which c fits, with its split; memory falls with
        dp, so bisect."""
        if self.fits(c, dps[-1]) is None:
            return None
        lo, hi = 0, len(dps) - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if self.fits(c, dps[mid]) is not None:
                hi = mid
            else:
                lo = mid + 1
        return dps[lo], self.fits(c, dps[lo])


def ranked(searches: list[Search], target_seconds: float | None) -> list[tuple[int, int, Config, list[int]]]:
    """Every (bound, type index, configuration, dps meeting the target), in the order fewest walks them."""
    rows = [(bound, i, c, dps) for i, search in enumerate(searches) for bound, c, dps in search.rows(target_seconds)]
    rows.sort(key=lambda row: row[:3])
    return rows


def fewest(searches: list[Search], target_seconds: float | None,
           rows: list[tuple[int, int, Config, list[int]]] | None = None,
           skip: int | None = None) -> tuple[int, Found] | None:
    """The fewest GPUs meeting the target over several GPU types (index into `searches`, layout).

    Every configuration's GPUs at its smallest legal dp that meets the target is a lower bound on
    its answer (memory can only push dp up), so configurations are visited in order of it and the
    walk ends once the bound passes the best layout found. Ties: shorter, then the types' order,
    then the configuration order (lighter recomputation, smaller pp, tp, cp, vpp, ep, etp).
    `rows` is ranked()'s list when the caller has it; `skip` leaves one type out (the runner-up)."""
    best = None
    for bound, i, c, dps in (ranked(searches, target_seconds) if rows is None else rows):
        if i == skip:
            continue
        if best is not None and bound > best[0][0]:
            break
        fit = searches[i]._first_fit(c, dps)
        if fit is None:
            continue
        dp, split = fit
        found = Found(c.tp * c.pp * c.cp * dp, searches[i].seconds(c, dp), c, dp, split)
        key = (found.gpus, found.seconds, i, c)
        if best is None or key < best[0]:
            best = (key, i, found)
    return None if best is None else (best[1], best[2])


def fastest(searches: list[Search]) -> tuple[int, Found] | None:
    """The fastest layout within the cap over several GPU types: each configuration at its largest
    legal dp (fastest and lightest there), visited fastest first; the first that fits is the answer.
    Ties: fewer GPUs, then the types' order, then the configuration order."""
    rows = []
    for i, search in enumerate(searches):
        for c in search.configs:
            dps = search.legal_dps(c)
            if dps:
                dp = dps[-1]
                rows.append((search.seconds(c, dp), c.tp * c.pp * c.cp * dp, i, c, dp))
    rows.sort(key=lambda row: row[:4])
    for secs, gpus, i, c, dp in rows:
        split = searches[i].fits(c, dp)
        if split is not None:
            return i, Found(gpus, secs, c, dp, split)
    return None


def time_bound_gpus(search: Search, target_seconds: float) -> int | None:
    """The fewest GPUs the target alone allows (memory ignored), for the Why line: the smallest
    bound among the configurations' rows."""
    return min((bound for bound, _, _ in search.rows(target_seconds)), default=None)


def knobs(found: Found) -> dict:
    c = found.config
    return dict(tp=c.tp, pp=c.pp, vpp=c.vpp, cp=c.cp, ep=c.ep, etp=c.etp, dp=found.dp, micro_batch=MICRO_BATCH,
                recompute=ar.RECOMPUTE_LEVELS[c.recompute_rank], split=found.split)


def plan(s: Setup, pins: dict) -> "Plan":
    """The Megatron plan for `s`: the search's layout on the best GPU type, evaluated in full."""
    from apsi.errors import InputError, LayoutError
    from apsi.fmt import count, duration
    from apsi.frameworks.evaluate import evaluate_layout
    from apsi.model.schema import SolverReport
    from apsi.units import SECONDS_PER_DAY

    if s.objective in ("cost", "energy"):
        raise InputError(f"objective {s.objective} is not yet searched under framework megatron: use gpus or days")
    megatron.check_pins(s.model.architecture, s.seq, pins)
    cap = s.gpus if s.gpus is not None else s.max_gpus
    if "dp" in pins and s.batch_sequences % (MICRO_BATCH * pins["dp"]):
        raise LayoutError(f"dp {pins['dp']:,} does not divide the batch of {s.batch_sequences:,} sequences: Megatron "
                          "needs global batch % (micro-batch x dp) == 0")
    pinned = 1
    for key in ("tp", "pp", "cp", "dp"):
        pinned *= pins.get(key, 1)
    if pinned > cap:
        raise LayoutError(f"pinned tp x pp x cp x dp = {pinned:,} GPUs exceeds the cap of {cap:,}")
    fastest_mode = s.objective == "days" or s.gpus is not None
    target = s.days * SECONDS_PER_DAY
    searches = [Search(s.on(gpu), gpu, cap, pins) for gpu in s.candidates]
    rows = None if fastest_mode else ranked(searches, target)
    best, mode = (None, "fastest") if fastest_mode else (fewest(searches, target, rows), "min_gpus")
    if best is None:
        best, mode = fastest(searches), "fastest"
    if best is None and not any(x.legal_dps(c) for x in searches for c in x.configs):
        pinned = ", ".join(f"{k} {v}" for k, v in pins.items()) or "no pins"
        raise LayoutError(f"no layout Megatron's rules allow fits within {cap:,} GPUs ({pinned}): the batch of "
                          f"{s.batch_sequences:,} sequences, the expert grid (ep x etp | tp x cp x dp) or the "
                          "interleaved schedule's groups of pp micro-batches leave no dp; change the pins or the cap")
    if best is None:
        raise LayoutError(f"no Megatron layout fits within {cap:,} GPUs on {', '.join(g.name for g in s.candidates)}: "
                          "even the lightest (full recomputation, the widest TP, PP and CP the rules allow) "
                          "exceeds the memory; try a larger-memory GPU, a shorter seq or more GPUs")
    index, found = best
    search, gpu = searches[index], s.candidates[index]
    evaluations = sum(x.evaluations for x in searches)
    choice = _choice(s, searches, index, mode, target, rows) if len(s.candidates) > 1 or s.skipped else None
    one = s.on(gpu).model_copy(update={"candidates": (gpu,)})
    report = SolverReport(status="OPTIMAL", seconds=0.0, solves=0, mode=mode, method="enumeration")
    result = evaluate_layout(one, knobs(found), report)
    configs = sum(len(x.configs) for x in searches)
    order = "the GPUs the target alone allows them" if mode == "min_gpus" else "their duration at their widest dp"
    note = (f"{configs:,} Megatron layouts (dp aside) ranked by {order}; {evaluations:,} memory evaluations "
            "settled the optimum; the CP-SAT program does not search framework layouts yet")
    days = found.seconds / SECONDS_PER_DAY
    if mode == "min_gpus":
        alone = time_bound_gpus(search, target)
        binding = "memory" if alone is not None and found.gpus > alone else "time"
        stage = result.memory.peak_stage
        why = (f"memory on pipeline stage {stage} decides: the {s.days:g}-day target alone would need {count(alone)} "
               f"x {gpu.name}, but the fewest that fit Megatron's memory are {count(found.gpus)}"
               if binding == "memory" else
               f"time decides: {count(found.gpus)} x {gpu.name} finish in {duration(days)}, and no layout on fewer "
               f"meets the {s.days:g}-day target")
    else:
        binding = "gpus" if s.gpus is not None else "max_gpus"
        why = (f"{'target met' if days <= s.days else 'target not met'}: the fastest Megatron layout within "
               f"{count(cap)} GPUs takes {duration(days)}")
    return result.model_copy(update={"binding": binding, "why": why, "notes": result.notes + [note],
                                     "gpu_choice": choice})


def _choice(s: Setup, searches: list[Search], index: int, mode: str, target: float, rows):
    """The types considered and the best plan on any other type (searched again without the winner)."""
    from apsi.model.schema import Alternative, GpuChoice
    from apsi.units import SECONDS_PER_DAY

    alt = fewest(searches, target, rows, skip=index) if mode == "min_gpus" else None
    if alt is None:
        others = [i for i in range(len(searches)) if i != index]
        alt = fastest([searches[i] for i in others])
        alt = None if alt is None else (others[alt[0]], alt[1])
    runner_up = None
    if alt is not None:
        i, f = alt
        gpu = s.candidates[i]
        days = f.seconds / SECONDS_PER_DAY
        hours = f.gpus * f.seconds / 3600
        price = s.price_per_hour(gpu)
        runner_up = Alternative(gpu=gpu.name, gpus=f.gpus, days=days, target_met=days <= s.days,
                                cost_usd=None if price is None else hours * price,
                                energy_mwh=None if gpu.tdp_w is None else hours * gpu.tdp_w * s.pue / 1e6)
    return GpuChoice(objective="gpus" if mode == "min_gpus" else "days", considered=[g.name for g in s.candidates],
                     skipped=list(s.skipped), runner_up=runner_up)
