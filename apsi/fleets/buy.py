"""What a fleet may buy or rent: its `buy:` block (`apsi fleet FILE --buy`), per GPU type a price,
a lead time, a node size and the most that may be bought.

Owns the Purchasable model, `read_buy()` (the block, checked, refused in one line naming the place),
`purchasable()` (the block, or with --buy and no block every type of the inventory at its price)
`offers()` (the fleet program's apsi.fleets.tables.Offer per type: whole nodes from their first
day, one node's cost in whole US dollars) and `with_purchase()` (a program with what a schedule
bought owned). It solves nothing (apsi.fleets.program does). A block:

    fleet:
      gpus: {H100: 2048}
      buy:
        H100: {usd_per_gpu_hour: 2.5, lead_days: 14}            # rented: from day 14 to the horizon's end
        B200: {usd_per_gpu: 38000, lead_days: 60, max_gpus: 1024}  # bought outright, there from day 60

The inventory's GPUs are owned: their cost is sunk and the purchase stage charges nothing for them.
What is bought or rented is charged: a GPU bought at its price once, a GPU rented at its price per
hour for every hour from its first day to the horizon's end (a rental is held, used or idle, as an
owned GPU is). A type that may be bought and is not in `gpus:` is owned at 0 (runs may use it once
bought).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from apsi.fleets.tables import Offer, Option, Program
from apsi.model.documented import Documented

BUY_KEYS = ("usd_per_gpu_hour", "usd_per_gpu", "lead_days", "node_gpus", "max_gpus")
"""The keys of one type in the `buy:` block."""
HOURS_PER_DAY = 24


class Purchasable(Documented):
    """GPUs of one type that a fleet may buy or rent."""

    gpu_type: str
    usd_per_gpu_hour: float | None = None
    """Rented at this price per GPU-hour, from the first day to the horizon's end (None: bought, or
    no price known: the plain run's remedies count nodes only)."""
    usd_per_gpu: float | None = None
    """Bought at this price per GPU, once."""
    lead_days: int = 0
    """Days from the horizon's start before they are there."""
    node_gpus: int
    """GPUs per node: they come in whole nodes (default the catalog's gpus_per_node)."""
    max_gpus: int
    """The most GPUs of the type that may be bought (whole nodes; default the largest count of any
    type in the inventory, at least one node)."""

    def node_usd(self, horizon_days: int) -> float | None:
        """One node's cost over the horizon, US dollars: GPUs x price bought, or GPUs x hours from
        its first day to the horizon's end x price per GPU-hour rented; None without a price."""
        if self.usd_per_gpu is not None:
            return self.node_gpus * self.usd_per_gpu
        if self.usd_per_gpu_hour is None:
            return None
        return self.node_gpus * (horizon_days - self.lead_days) * HOURS_PER_DAY * self.usd_per_gpu_hour


def read_buy(value: Any, inventory: dict[str, Any], prices: dict[str, float], horizon: int, where: str,
             catalog: str | None) -> dict[str, Purchasable]:
    """The `buy:` block: each type (a catalog name, in `gpus:` or not) and its terms, checked (the
    caller adds a type the inventory lacks, owned at 0, so runs may name it)."""
    from apsi.catalog import find_gpu
    from apsi.errors import ApsiError, brief, unknown
    from apsi.fleets.reading import FleetError

    if value is None:
        return {}
    example = "'buy: {H100: {usd_per_gpu_hour: 2.5, lead_days: 14}}'"
    if not isinstance(value, Mapping) or not value:
        raise FleetError(f"{where}: buy must map GPU types to their terms, such as {example}, got {brief(value)}")
    largest = max((_most(supplies) for supplies in inventory.values()), default=0)
    out: dict[str, Purchasable] = {}
    for name, terms in value.items():
        try:
            gpu = find_gpu(str(name), catalog)
        except ApsiError as err:
            raise FleetError(f"{where}, buy: {err}") from None
        if gpu.name in out:  # as gpus: and prices: refuse it (apsi.fleets.spec)
            raise FleetError(f"{where}, buy: {str(name)!r} is {gpu.name} again: give each GPU type's terms once")
        at = f"{where}, buy, {gpu.name}"
        terms = {} if terms is None else terms
        if not isinstance(terms, Mapping):
            raise FleetError(f"{at}: give its terms as a mapping, such as {example}, got {brief(terms)}")
        for key in terms:
            if key not in BUY_KEYS:
                raise FleetError(f"{at}: {unknown('key', key, BUY_KEYS)}")
        if "usd_per_gpu" in terms and "usd_per_gpu_hour" in terms:
            raise FleetError(f"{at}: give usd_per_gpu (bought) or usd_per_gpu_hour (rented), not both")
        node = _count(terms.get("node_gpus", gpu.gpus_per_node), f"{at}: node_gpus", 1)
        lead = _count(terms.get("lead_days", 0), f"{at}: lead_days", 0)
        if lead >= horizon:
            raise FleetError(f"{at}: lead_days {lead:,} is past the {horizon:,}-day horizon: GPUs bought would never "
                             "be there")
        # Its default is the largest count owned, in whole nodes (as without a buy: block).
        most = _count(terms.get("max_gpus", max(node, largest - largest % node)), f"{at}: max_gpus", node)
        if most % node:
            raise FleetError(f"{at}: max_gpus {most:,} is not a whole number of {node}-GPU nodes")
        per_gpu = _price(terms.get("usd_per_gpu"), f"{at}: usd_per_gpu")
        hourly = _price(terms.get("usd_per_gpu_hour"), f"{at}: usd_per_gpu_hour")
        if per_gpu is None and hourly is None:
            hourly = prices.get(gpu.name, gpu.price_usd_per_hour)  # rented at the fleet's price
            if hourly is None:
                raise FleetError(f"{at}: the catalog has no price for {gpu.name}: give usd_per_gpu_hour or usd_per_gpu")
        out[gpu.name] = Purchasable(gpu_type=gpu.name, usd_per_gpu_hour=hourly, usd_per_gpu=per_gpu, lead_days=lead,
                                    node_gpus=node, max_gpus=most)
    return out


def _most(supplies: list) -> int:
    """The most GPUs a type's supplies (apsi.fleets.spec.Supply) give on one day: the count on some
    supply's first day, as counts change only there and where one ends."""
    return max(sum(s.count for s in supplies if s.from_day <= d and (s.until_day is None or d < s.until_day))
               for d in [s.from_day for s in supplies])


def _count(value: Any, what: str, least: int) -> int:
    from apsi.errors import brief
    from apsi.fleets.reading import FleetError

    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= 10_000_000:
        raise FleetError(f"{what} must be a whole number from {least:,} to 10,000,000, got {brief(value)}")
    return value


def _price(value: Any, what: str) -> float | None:
    from apsi.fleets.reading import positive

    return None if value is None else positive(value, what)


def purchasable(spec: Any, buy: bool) -> dict[str, Purchasable]:
    """What the fleet may buy: its `buy:` block; with `buy` (apsi fleet --buy) and no block, or for
    the plain run's remedies, each type of the inventory from day 0, rented at the fleet's price
    (None where there is none), in nodes of the catalog's size, up to the largest count of any type."""
    from apsi.catalog import find_gpu

    if spec.buy:
        return dict(spec.buy)
    capacity = spec.inventory.capacity(spec.horizon_days)
    largest = max((max(days) for days in capacity.values()), default=0)
    out = {}
    for t in capacity:
        gpu = find_gpu(t, spec.catalog)
        node = gpu.gpus_per_node
        out[t] = Purchasable(gpu_type=t, usd_per_gpu_hour=spec.prices.get(t, gpu.price_usd_per_hour), node_gpus=node,
                             max_gpus=max(node, largest - largest % node))
    return out


def offers(items: dict[str, Purchasable], horizon_days: int) -> dict[str, Offer]:
    """The program's offer per type: whole nodes from the lead day, one node's cost in whole US
    dollars (0 without a price: only the nodes count then)."""
    return {t: Offer(from_day=b.lead_days, node_gpus=b.node_gpus, max_nodes=b.max_gpus // b.node_gpus,
                     cost=round(b.node_usd(horizon_days) or 0)) for t, b in items.items()}


def with_purchase(p: Program, bought: dict[str, int], more: bool = False) -> Program:
    """Program `p` with the nodes `bought` of each type added to its capacity from their offer's
    first day: the inventory a schedule that bought them runs on. Without `more`, nothing more to
    buy, and each option offered where what was bought of its type keeps it (Option.bought_nodes:
    None, else ()); with `more`, the nodes each offer has left, each option's ranges counted from
    what was bought (the conflict analysis's remedies under --buy: what may still be added)."""
    capacity = dict(p.capacity)
    for t, nodes in bought.items():
        offer = p.buy[t]
        capacity[t] = tuple(c + (nodes * offer.node_gpus if d >= offer.from_day else 0)
                            for d, c in enumerate(capacity[t]))

    def kept(o: Option) -> Option:
        n = bought.get(o.gpu_type, 0)
        if o.bought_nodes is None:
            return o
        if not more:
            return o.model_copy(update={"bought_nodes": None if o.offered(n) else ()})
        return o.model_copy(update={"bought_nodes": tuple((max(0, a - n), b - n) for a, b in o.bought_nodes if b >= n)})

    runs = [run.model_copy(update={"options": [kept(o) for o in run.options]}) for run in p.runs]
    left = {t: o.model_copy(update={"max_nodes": o.max_nodes - bought.get(t, 0)}) for t, o in p.buy.items()} if more else {}
    return p.model_copy(update={"capacity": capacity, "buy": {t: o for t, o in left.items() if o.max_nodes > 0},
                                "runs": runs})
