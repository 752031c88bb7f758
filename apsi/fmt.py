"""How numbers read in text: counts, durations, GiB, money, and a model's name with its count.
Shared by every text apsi writes (outputs.text, explain, levers, tables, plots) so that a figure
reads the same everywhere. Formatting only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from apsi.units import human

if TYPE_CHECKING:
    from apsi.model.schema import ModelShape


def count(x: float) -> str:
    """1234567 -> '1,234,567'."""
    return f"{x:,.0f}"


def load(x: float) -> str:
    """A request rate or a count in flight: 1,000,000,000 (no exponent), 12.5, 0.25."""
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,g}"


def counted(n: float, one: str, many: str | None = None) -> str:
    """n and its noun, singular at exactly 1: '1 GPU', '1,024 GPUs', '1 request/s', '2.5 requests/s'."""
    return f"{load(n)} {one if n == 1 else (many if many is not None else one + 's')}"


def gib(x: float) -> str:
    """GiB with one decimal below 1,000, whole above; tiny but nonzero amounts keep 2 significant digits."""
    if 0 < x < 0.05:
        return f"{x:.2g}"
    return f"{x:,.1f}" if x < 1000 else f"{x:,.0f}"


def duration(days: float) -> str:
    """Days with one decimal; under a day in hours, under an hour in minutes, under a minute in seconds."""
    if days >= 1:
        return f"{days:,.1f} days"
    hours = days * 24
    if hours >= 1:
        return f"{hours:.1f} hours"
    minutes = hours * 60
    return f"{minutes:.1f} minutes" if minutes >= 1 else f"{minutes * 60:.1f} seconds"


def per_million(x: float) -> str:
    """Dollars per million tokens to a tenth of a cent; past $10^12 (a rate near nothing) in powers
    of ten."""
    return f"${x:,.3f}" if x < 1e12 else f"${x:.3g}"


def usd(x: float | None) -> str:
    return "-" if x is None else f"${x:,.0f}"


def mwh(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:,.0f} MWh" if x >= 10 else f"{x:.3g} MWh"


def billions(n: float) -> str:
    """Parameters with two decimals: 405.85B, 8.03B; millions below a billion."""
    return f"{n / 1e9:,.2f}B" if n >= 1e9 else f"{n / 1e6:,.1f}M"


def model_title(m: ModelShape) -> str:
    """How a head line names the model: a size as given, or the model's name with its count."""
    if m.source == "size":
        active = f" ({human(m.active_params)} active)" if m.moe else ""
        return f"{human(m.params)} params{active}"
    label = m.name or m.origin
    active = f", {billions(m.active_params)} active" if m.moe else ""
    return f"{label} ({billions(m.params)} params{active})"


def runs(values: Iterable[Any]) -> list[tuple[Any, int]]:
    """Each run of equal consecutive values with its length: [8, 8, 4] is [(8, 2), (4, 1)] (a
    pipeline's stages, a hostfile's slots, said run by run)."""
    out: list[list[Any]] = []
    for v in values:
        if out and out[-1][0] == v:
            out[-1][1] += 1
        else:
            out.append([v, 1])
    return [(v, n) for v, n in out]
