"""The recomputation space a framework offers: every option the walk tries, in tie order.

Owns Option (a recomputation level and, for selective, the modules it re-runs), options() (the
list one search walks, lightest first: a configuration's recompute_rank is its index there),
space_words() (what the Solver line says was proved) and lattice() (which options hold no more
memory than which, on every stage: the walk answers one's fit from another's). A framework with Megatron's
--recompute-modules (its KNOBS name recompute_modules) is searched over every set of the
modules that apply to the architecture (MLM-TC recompute_modules; MLM-MOE "Fine-grained
Recomputation"): core_attn, layernorm, mla_up_proj (MLA), mlp (dense MLP layers), moe and moe_act
(MoE layers), less the sets that hold both moe and moe_act (checkpointing the whole MoE block
already discards what moe_act would: MLM-TC, "moe" recomputes the block from its input). The
published recipes' sets are among them: Megatron-Bridge's DeepSeek-V3 ["mla_up_proj",
"layernorm"] (MB-RECIPE), DeepSeek-V3's own RMSNorms and MLA up-projections (DSV3 §3.2.3).
Frameworks without the knob offer none, their own selective level (torchtitan's per-op policy,
Megatron-DeepSpeed's core attention) and full. Full is every layer (Megatron's
--recompute-method uniform --recompute-num-layers 1); the per-stage layer counts of
--recompute-method block are not in the space, and the Solver line says so.
"""

from __future__ import annotations

import functools
import itertools
from typing import TYPE_CHECKING, NamedTuple

from apsi.model import memory as mem

if TYPE_CHECKING:
    from apsi.training.frameworks.interface import Framework
    from apsi.inputs.question import Setup
    from apsi.model.architecture import Architecture


FREE: tuple[str, ...] = ("layernorm", "moe_act")
"""Modules whose recomputation re-runs no matrix work (output-discarding checkpoints of a norm and
an activation, MLM-TC; apsi.model.arithmetic.flops_per_token counts no FLOPs for them): they change
memory alone, so the walk adds them only where a layout needs them to fit (Option.variants)."""

Variant = tuple[str, tuple[str, ...]]
"""(level, modules): what evaluate() is given."""


class Option(NamedTuple):
    """One recomputation the walk tries, a configuration's recompute_rank indexing the list: its
    level, the modules that re-run matrix work, and its variants (lightest first), which add the
    FREE modules: every variant has the same duration, the last (all of them) the least memory."""

    level: str
    modules: tuple[str, ...]
    variants: tuple[Variant, ...]

    @property
    def heaviest(self) -> Variant:
        """The variant with the least memory (every FREE module added): it fits if any does."""
        return self.variants[-1]


def applicable(a: Architecture, parts: bool) -> tuple[str, ...]:
    """The modules that change something on this architecture: MLA's up-projections only with MLA,
    mlp only with dense MLP layers, moe and moe_act only with MoE layers; mlp and moe need the
    model's parts (a preset or a config.json: apsi.model.arithmetic.flops_per_token)."""
    dense_mlp = not a.moe or a.dense_layers > 0 or a.moe_every > 1
    keep = {"core_attn": True, "layernorm": a.norms_per_layer > 0, "mla_up_proj": a.mla,
            "mlp": dense_mlp and parts, "moe": a.moe and parts, "moe_act": a.moe}
    return tuple(m for m in mem.RECOMPUTE_MODULES if keep[m])


def _ordered(modules) -> tuple[str, ...]:
    return tuple(sorted(set(modules), key=mem.RECOMPUTE_MODULES.index))


@functools.lru_cache(maxsize=256)
def _subsets(modules: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """Every set of `modules`, the empty one first, fewer modules first, then in order."""
    return tuple(subset for n in range(len(modules) + 1) for subset in itertools.combinations(modules, n))


def _option(level: str, heavy: tuple[str, ...], free: tuple[str, ...], bare: bool) -> Option:
    """The option re-running `heavy`, its variants adding each set of `free` (moe_act not beside moe,
    whose checkpoint of the whole block already discards it; MLM-TC); `bare` keeps the variant
    adding none."""
    extras = tuple(m for m in free if not (m == "moe_act" and "moe" in heavy))
    variants = [("selective" if heavy or extra else level, _ordered(heavy + extra)) for extra in _subsets(extras)]
    return Option(level, heavy, tuple(variants if bare else variants[1:]))


def options(fw: Framework, a: Architecture, parts: bool, pins: dict) -> tuple[Option, ...]:
    """The recomputations one search tries, lightest first (the tie order: none, the selective
    sets re-running fewer modules first, full), kept to the pins: a pinned level keeps its options
    (pinned none adds no module), pinned recompute_modules the one set as given."""
    pinned = pins.get("recompute")
    if pins.get("recompute_modules"):
        modules = tuple(pins["recompute_modules"])
        return (Option("selective", modules, (("selective", modules),)),)
    if pinned == "none":
        return (Option("none", (), (("none", ()),)),)
    if "recompute_modules" not in fw.KNOBS:
        out = [Option("none", (), (("none", ()),)),
               Option("selective", mem.DEFAULT_MODULES, (("selective", mem.DEFAULT_MODULES),))]
    else:
        modules = applicable(a, parts)
        free = tuple(m for m in modules if m in FREE)
        heavy = tuple(m for m in modules if m not in FREE)
        out = [_option("selective" if subset else "none", subset, free, bare=pinned is None or bool(subset))
               for subset in _subsets(heavy)]
        out = [o for o in out if o.variants]
    out.append(Option("full", (), (("full", ()),)))
    return tuple(o for o in out if pinned is None or pinned == o.level or any(v[0] == pinned for v in o.variants))


def of(fw: Framework, s: Setup, pins: dict) -> tuple[Option, ...]:
    """options() for a setup: its architecture, and whether its model has the parts mlp and moe
    need."""
    return options(fw, s.model.architecture, s.model.active_parts is not None, pins)


def space_words(fw: Framework) -> str:
    """The recomputations the walk proved its answer over, in words (the Solver line)."""
    if "recompute_modules" in fw.KNOBS:
        return "every recomputation (none, selective with any set of the modules that apply, full of every layer)"
    return "every recomputation (none, selective, full of every layer)"


WORKING_SET_MODULES = ("mlp", "moe")
"""Recomputed modules that add a working set (the block recomputed in its backward holds its
activations: apsi.training.frameworks.stages._per_stage): adding one may raise a stage's peak (one layer of
one micro-batch in flight stores the block's input and then its whole working set), so the memory
lattice never crosses them."""


def lattice(fw: Framework, options: tuple[Option, ...]) -> tuple[list[list[int]], list[list[int]],
                                                                           list[int | None]]:
    """For each recompute rank: the ranks whose memory on every stage is no more (leaner), those
    whose memory is no less (fuller), and the leanest of the leaner (None where there is none).

    Rank r' is leaner than r when both are "none" or selective, r' recomputes every module r does
    (each option's memory is its heaviest variant's: Option.heaviest) and the modules it adds are
    none of WORKING_SET_MODULES: each such module only drops what it recomputes from what a layer
    keeps (apsi.model.memory: core_attn, mla_up_proj, layernorm, moe_act), the same on every stage,
    micro-batch and dp, with nothing added, and the reserve grows with the activations. Only where
    the framework keeps the model's activations (no layer_bytes of its own) and its selective level
    names its modules; full recomputation is left out (its working set is a whole layer).
    tests/test_recompute.py checks the order on every pair of every preset's layouts it samples,
    and the walk's answers against the enumeration (tests/test_search.py)."""
    n = len(options)
    none: list[list[int]] = [[] for _ in range(n)]
    if getattr(fw, "layer_bytes", None) is not None:
        return none, [[] for _ in range(n)], [None] * n
    sets = [frozenset(o.heaviest[1]) if o.heaviest[0] in ("none", "selective") and o.level != "full" else None
            for o in options]
    leaner: list[list[int]] = [[] for _ in range(n)]
    fuller: list[list[int]] = [[] for _ in range(n)]
    for r, mine in enumerate(sets):
        for q, theirs in enumerate(sets):
            if r == q or mine is None or theirs is None or not mine < theirs:
                continue
            if any(m in WORKING_SET_MODULES for m in theirs - mine):
                continue
            leaner[r].append(q)
            fuller[q].append(r)
    leanest: list[int | None] = []
    for r in range(n):
        tops = [q for q in leaner[r] if not leaner[q]]
        # The one with the most modules (the least memory of them), the later rank on a tie.
        leanest.append(max(tops, key=lambda q: (len(sets[q] or ()), q)) if tops else None)
    return leaner, fuller, leanest
