"""Exhaustive layout search: the optimum apsi.training.reference.program should find, by walking every layout.

A test helper for tests/test_crosscheck.py, not part of the package. It takes the same keyword
arguments as apsi.plan(), resolves them with apsi.inputs.question.resolve, visits every (tp, pp, dp,
recompute) the solver may choose, judges each with the functions of apsi.model.arithmetic in the
same float order as apsi.api.plan.evaluate(), and picks the optimum by the objective stated in
apsi/training/reference/program.py's docstring. It relies on no property of the search space (no monotonicity in dp,
no dominance): every layout is looked at. It must not call the solver. It covers one GPU type
and the default objective (fewest GPUs, or fastest with gpus=N); GPU lists and the cost and
energy objectives are outside it.

The space, for a resolved setup s with cap = s.gpus if given else s.max_gpus:
  tp in s.tp_choices() (or the pin), pp in s.pp_choices() (or the pin), recompute in
  none/selective/full (or the pin), dp in 1..B // b (or the pin), with G = tp pp dp <= cap.
  Feasible: weights + gradients + optimizer states over G, plus activations over tp, fit in
  90% of the GPU's memory (Plan.fits).
The objective:
  no gpus: among feasible layouts with days <= target, fewest GPUs, then fewest days, then
    lighter recompute (none < selective < full), smaller pp, smaller tp; if none meets the
    target, the fastest feasible layout within max_gpus (ties: fewer GPUs, lighter recompute,
    smaller pp, smaller tp) with target_met False;
  gpus=N: the fastest feasible layout with G <= N, same ties;
  nothing feasible: plan() raises apsi.errors.LayoutError.

Ties in days are decided exactly (rationals), since layouts at one recompute level can tie in
real arithmetic while their float days differ in the last bit. `near` lists every layout the
solver's integer scaling cannot be asked to tell from the optimum: same objective prefix, days
within relative NEAR_DAYS of the optimum's (see tests/test_crosscheck.py for the resolution).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, NamedTuple

import apsi
from apsi.inputs.question import Setup, resolve
from apsi.model import arithmetic as ar
from apsi.units import GIB

NEAR_DAYS = 1e-6
"""Relative gap in days under which two layouts count as a near tie (see the module docstring)."""

PINS = ("tp", "pp", "dp", "recompute")


class Candidate(NamedTuple):
    """One feasible layout and what the objective needs to rank it."""

    gpus: int
    days: float
    """Days in the float arithmetic of apsi.api.plan.evaluate()."""
    rank: int
    """Position of the recompute level in none < selective < full."""
    pp: int
    tp: int
    dp: int
    recompute: str
    exact: Fraction
    """Days as an exact rational of the same float inputs, for deciding ties."""

    @property
    def layout(self) -> tuple[int, int, int, str]:
        return (self.tp, self.pp, self.dp, self.recompute)


@dataclass(frozen=True)
class Enumerated:
    """The exhaustive optimum for one plan() input."""

    setup: Setup
    mode: str
    """"min_gpus" (a layout meets the target), "fastest" (gpus=N, or no layout meets it), or
    "none" (nothing fits: plan() must raise LayoutError)."""
    best: Candidate | None
    near: tuple[Candidate, ...]
    """Layouts (best included) indistinguishable from best at relative NEAR_DAYS in days."""
    target_met: bool | None
    walked: int
    """Layouts visited (all of tp x pp x dp x recompute within the cap)."""
    feasible: int
    """Layouts that fit memory."""

    @property
    def exact_tie_only(self) -> bool:
        """True when every near layout has exactly the optimum's days: the answer is then unique."""
        return all(c.exact == self.best.exact for c in self.near)


def space(s: Setup) -> tuple[tuple[int, ...], tuple[int, ...], tuple[str, ...], int, int, int]:
    """(tp choices, pp choices, recompute levels, dp low, dp high, cap) the solver may choose from."""
    cap = s.gpus if s.gpus is not None else s.max_gpus
    tps = (s.tp,) if s.tp is not None else s.tp_choices()
    pps = (s.pp,) if s.pp is not None else s.pp_choices()
    levels = (s.recompute,) if s.recompute is not None else ar.RECOMPUTE_LEVELS
    dp_lo, dp_hi = (s.dp, s.dp) if s.dp is not None else (1, s.batch_sequences // s.micro_batch)
    return tps, pps, levels, dp_lo, dp_hi, cap


def enumerate_layouts(params: Any, *, confirm: bool = True, **options: Any) -> Enumerated:
    """Walk every layout for plan(params, **options) and return the optimum (module docstring).

    With `confirm`, the optimum is re-judged by apsi.evaluate(), whose Plan.fits must be True and
    whose Plan.days must equal the enumerator's (relative 1e-12: the same float operations).
    """
    s = resolve(params, **options)
    tps, pps, levels, dp_lo, dp_hi, cap = space(s)
    big_b, b = s.batch_sequences, s.micro_batch
    usable = ar.USABLE_FRACTION * s.gpu.memory_gib
    sw, sg, so = ar.state_bytes(s.model.trained_params, s.optimizer)
    peak, mfu, target = s.peak_flops, s.mfu, s.days
    rate = Fraction(peak) * Fraction(mfu)

    meets: list[tuple] = []   # layouts meeting the target at the fewest GPUs seen so far
    meets_g = math.inf
    fast: list[tuple] = []    # layouts within NEAR_DAYS of the fastest seen so far
    fast_days = math.inf
    walked = feasible = 0
    for rank, r in enumerate(ar.RECOMPUTE_LEVELS):
        if r not in levels:
            continue
        flops = ar.training_flops(s.model, s.tokens, s.seq, r)
        act_bytes = ar.activation_bytes(s.layers, s.seq, b, s.width, s.heads, r)
        for tp in tps:
            act = act_bytes / tp / GIB
            for pp in pps:
                top = min(dp_hi, cap // (tp * pp))
                walked += max(0, top - dp_lo + 1)
                for dp in range(dp_lo, top + 1):
                    gpus = tp * pp * dp
                    # Same expression, same order as apsi.training.reference.planning.assemble, which evaluate() uses.
                    if not sw / gpus / GIB + sg / gpus / GIB + so / gpus / GIB + act <= usable:
                        continue
                    feasible += 1
                    days = ar.days(ar.duration_seconds(flops, gpus, peak, mfu, pp, big_b / (dp * b)))
                    row = (gpus, days, rank, pp, tp, dp, r, flops)
                    if s.gpus is None and days <= target and gpus <= meets_g:
                        if gpus < meets_g:
                            meets_g, meets = gpus, []
                        meets.append(row)
                    if days <= fast_days * (1 + 2 * NEAR_DAYS):
                        fast.append(row)
                        fast_days = min(fast_days, days)

    def candidate(row: tuple) -> Candidate:
        gpus, days, rank, pp, tp, dp, r, flops = row
        # Days = flops / (G peak mfu) * (B + b (pp - 1) dp) / B, as a rational of the float inputs.
        exact = Fraction(flops) / rate * Fraction(big_b + b * (pp - 1) * dp, big_b * gpus) / 86_400
        return Candidate(gpus, days, rank, pp, tp, dp, r, exact)

    if meets:
        mode, pool = "min_gpus", [candidate(x) for x in meets]
        pool.sort(key=lambda c: (c.exact, c.rank, c.pp, c.tp))
    elif fast:
        mode = "fastest"
        pool = [candidate(x) for x in fast if x[1] <= fast_days * (1 + 2 * NEAR_DAYS)]
        pool.sort(key=lambda c: (c.exact, c.gpus, c.rank, c.pp, c.tp))
    else:
        return Enumerated(s, "none", None, (), None, walked, feasible)
    best = pool[0]
    near = tuple(c for c in pool if c.days <= best.days * (1 + NEAR_DAYS))
    enumerated = Enumerated(s, mode, best, near, best.days <= target, walked, feasible)
    if confirm:
        confirm_with_evaluate(params, options, best)
    return enumerated


def confirm_with_evaluate(params: Any, options: dict[str, Any], c: Candidate) -> None:
    """apsi.evaluate() must agree that `c` fits and on its days."""
    rest = {k: v for k, v in options.items() if k not in PINS}
    check = apsi.evaluate(params, tp=c.tp, pp=c.pp, dp=c.dp, recompute=c.recompute, **rest)
    assert check.fits, f"enumerator's optimum {c.layout} does not fit by evaluate(): {check.memory}"
    assert math.isclose(check.days, c.days, rel_tol=1e-12), (check.days, c.days)
