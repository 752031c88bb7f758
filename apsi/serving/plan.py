"""serve(): the serving plan. Composes the inputs (apsi.serving.inputs), the walk over replica
layouts (apsi.serving.walk), the replica mix under an inventory (apsi.serving.mix) and the
explanation of what decided the answer (apsi.serving.explain), into a ServePlan. No I/O.

The choice: with a load (a rate or a concurrency), the fewest GPUs (or the least cost), then the
lower TPOT, then the GPU types' order, then the narrower TP and the fewer stages; without a load,
one replica at the most output tokens per second per GPU meeting the targets (the most economical
replica), then the same ties.
"""

from __future__ import annotations

import math
from typing import Any

from apsi.errors import ApsiError, InputError, LayoutError
from apsi import fmt
from apsi.serving import explain
from apsi.serving import replica as rp
from apsi.serving.inputs import Question, question, unpriced
from apsi.model.serve_schema import ReplicaGroup, ReplicaMemory, ServeFrontierPoint, ServePlan, ServeSolver, ServeWorkload
from apsi.catalog import GPU
from apsi.serving.frontier import Staircase, frontier
from apsi.serving.walk import Aside, Bound, Kind, Layouts, Sized, held, layouts, replicas_for, size
from apsi.units import GIB

SERVE_OPTIONS = ("engine", "gpu", "precision", "kv_precision", "isl", "osl", "prefix", "ttft", "tpot", "rate",
                 "concurrency", "inventory", "objective", "tp", "pp", "active", "catalog", "price", "pue")


def serve(params: Any, *, engine: Any = None, gpu: Any = None, precision: Any = "bf16", kv_precision: Any = None,
          isl: Any = None, osl: Any = None, prefix: Any = None, ttft: Any = None, tpot: Any = None,
          rate: Any = None, concurrency: Any = None, inventory: Any = None, objective: Any = None,
          tp: Any = None, pp: Any = None, active: Any = None, catalog: Any = None, price: Any = None, pue: Any = None,
          **architecture: Any) -> ServePlan:
    """The serving plan for a model (a size, a preset, a config.json, as plan() takes): the replica
    layout and batch, TTFT, TPOT, tokens/s per GPU and per user, the replicas the load needs and
    the GPUs, on `engine` (vllm, sglang, trtllm; default vllm).

    ttft is milliseconds (a number, or "p99:MS"), tpot milliseconds per output token; the load is
    rate (requests/s) or concurrency (requests in flight); inventory ("H100=64,H200=32") limits
    the GPUs of each type, and the answer may then mix replica kinds (CP-SAT); tp and pp pin the
    replica's degrees. A target or load left out is not constrained."""
    from apsi.errors import unknown
    from apsi.inputs.modelspec import ARCHITECTURE_OPTIONS

    for key in architecture:
        if key not in ARCHITECTURE_OPTIONS:
            raise unknown("keyword", key, SERVE_OPTIONS + ARCHITECTURE_OPTIONS)
    q = question(params, engine=engine, gpu=gpu, precision=precision, kv_precision=kv_precision, isl=isl, osl=osl,
                 prefix=prefix, ttft=ttft, tpot=tpot, rate=rate, concurrency=concurrency, inventory=inventory,
                 objective=objective, active=active, catalog=catalog, price=price, pue=pue, architecture=architecture,
                 tp=tp, pp=pp)
    answer = answered(q)
    if isinstance(answer, str):
        raise LayoutError(answer)
    return answer


def answered(q: Question) -> ServePlan | str:
    """The serving plan for a question checked (serve()'s, or a training plan's Serving line,
    apsi.serving.trained), or why no layout serves it."""
    found = walked(q, bounded=True)
    if not found.kinds:
        return explain.nothing(q, found)
    if q.inventory is not None:
        return _mixed(q, found)
    return _single(q, found)


def walked(q: Question, bounded: bool = False, aside: Aside | None = None) -> Layouts:
    """The walk over q's layouts (apsi.serving.walk.layouts); `bounded`: setting aside the pipelined
    layouts that cannot be _single's answer or its runner-up, nor (with a load) in a mix that beats
    it (walk.Bound). A mix under an inventory takes every layout (bounded False); the frontier sets
    aside those none of whose points it can keep (`aside`: apsi.serving.frontier.Staircase)."""
    loaded = q.rate is not None or q.concurrency is not None
    load = q.rate if q.rate is not None else q.concurrency

    def least(gpu: GPU, r: rp.Replica, most: float | None) -> float:
        # _primary's first part for replicas of r carrying at most `most` each (replicas_for); without
        # a load, minus its requests/s per GPU at most (-inf unknown: it bounds nothing).
        if load is None:
            return -math.inf if most is None else -most / r.gpus
        n: float = 1
        if most is not None:
            n = max(1, math.ceil(load / most - 1e-12)) if most > 0 else math.inf
        each = q.price if q.price is not None else gpu.price_usd_per_hour
        if q.objective == "gpus":
            return n * r.gpus
        return math.inf if each is None else n * each * r.gpus

    bound = Bound(key=lambda k: _primary(q, k), least=least, capacity=_capacity(q),
                  rate=q.concurrency is None, mixes=loaded) if bounded else None
    return layouts(q.architecture, q.gpus, q.engine, q.weights, q.kv, q.workload, q.targets, q.tp, q.pp,
                   q.unshaped_experts, bound, aside)


def price_of(q: Question, k: Kind) -> float | None:
    """$/hour of one replica of k, or None without a price."""
    each = q.price if q.price is not None else k.gpu.price_usd_per_hour
    return None if each is None else each * k.replica.gpus


def _primary(q: Question, k: Kind) -> tuple:
    """The part of _key that needs no operating point: the GPUs and the cost of the replicas."""
    if q.rate is None and q.concurrency is None:
        return (-k.point.requests_per_s / k.replica.gpus, k.replica.gpus)
    n = replicas_for(k, q.rate, q.concurrency)
    cost = price_of(q, k)
    dollars = n * cost if cost is not None else float("inf")
    return (n * k.replica.gpus, dollars) if q.objective == "gpus" else (dollars, n * k.replica.gpus)


def _key(q: Question, s: Sized) -> tuple:
    ties = (s.point.tpot_s, s.kind.order, s.kind.replica.tp, s.kind.replica.pp, s.kind.replica.ep, s.kind.replica.dp)
    if q.rate is None and q.concurrency is None:
        return (-s.point.requests_per_s / s.kind.replica.gpus,) + (s.gpus,) + ties
    cost = price_of(q, s.kind)
    dollars = s.replicas * cost if cost is not None else float("inf")
    return ((s.gpus, dollars) if q.objective == "gpus" else (dollars, s.gpus)) + ties


def _single(q: Question, found: Layouts) -> ServePlan:
    # The operating point (a bisection) only matters for the ties the GPUs (or the cost) leave:
    # size the kinds whose replica count puts them among the two best such keys.
    primary = {id(k): _primary(q, k) for k in found.kinds}
    levels = sorted(set(primary.values()))[:2]
    sized = [size(k, q.workload, q.rate, q.concurrency) for k in found.kinds if primary[id(k)] in levels]
    loaded = q.rate is not None or q.concurrency is not None
    if q.objective == "cost" and loaded:
        priced = [s for s in sized if price_of(q, s.kind) is not None]
        if not priced:
            raise LayoutError(f"objective cost needs a price: {', '.join(unpriced(q))} has none in the "
                              "catalog; give price ($/GPU-hour: --price)")
        sized = priced
    ranked = sorted(sized, key=lambda s: _key(q, s))
    best = ranked[0]
    mixed = None
    if loaded:
        # Replicas of one layout are not the only answer: a mix of layouts (TP 2 and TP 4 replicas
        # together) can carry the load on fewer GPUs. CP-SAT decides, over every kind, with each GPU
        # type capped at what would still beat the best single layout (apsi.serving.mix).
        mixed = _cover(q, found, _caps(q, best), strictly_below=_key(q, best)[0])
        if mixed is not None and mixed is not UNPROVED_MIX:
            return mixed
    runner = next((s for s in ranked[1:] if (s.kind.gpu.name, s.kind.replica) != (best.kind.gpu.name, best.kind.replica)),
                  None)
    groups = [_group(q, best)]
    goal = "throughput" if not loaded else q.objective
    # Proved unless the mix program stopped before it could say no mix beats the best layout.
    proved = not (loaded and mixed is UNPROVED_MIX)
    solver = ServeSolver(method="walk", status="OPTIMAL" if proved else "FEASIBLE", gap=0.0 if proved else 1.0,
                         layouts=found.weighed, kinds=len(found.kinds), bounded=found.bounded,
                         mixes_checked=loaded)
    return _plan(q, groups, goal, explain.why(q, best, runner), explain.notes(q, found, [best]), solver)


def _caps(q: Question, best: Sized) -> dict[str, int]:
    """GPUs of each type a mix may use and still beat `best`: fewer GPUs in all, or (objective
    cost) less cost, which bounds each type's GPUs by its price."""
    if q.objective == "gpus":
        return {g.name: max(0, best.gpus - 1) for g in q.gpus}
    cost = price_of(q, best.kind)
    assert cost is not None
    total = best.replicas * cost
    out = {}
    for g in q.gpus:
        each = q.price if q.price is not None else g.price_usd_per_hour
        out[g.name] = int(total / each) if each else 0
    return out


def _capacity(q: Question):
    """What one replica of a kind carries in a mix: requests/s at its batch, or its batch under a
    concurrency."""
    return (lambda k: k.point.requests_per_s) if q.rate is not None else (lambda k: float(k.batch))


def _offers(q: Question, found: Layouts) -> list:
    from apsi.serving import mix

    offers = []
    carries = _capacity(q)
    for k in found.kinds:
        capacity = carries(k)
        cost = price_of(q, k)
        offers.append(mix.Offer(gpu=k.gpu.name, gpus=k.replica.gpus, capacity=int(capacity * mix.CAPACITY_SCALE),
                                exact=float(capacity),
                                cost=0 if cost is None else round(cost * 1e6)))
    return offers


UNPROVED_MIX = object()
"""_cover()'s answer when the mix program stopped before it could say whether a mix beats the best
single layout: that layout is the answer, not proved optimal (ServeSolver status FEASIBLE)."""


def _cover(q: Question, found: Layouts, inventory: dict[str, int], strictly_below: float | None = None):
    """The serving plan of the best mix of replica kinds within `inventory` (CP-SAT), each kind
    at its operating point under its share of the load; None when no mix carries the load (or,
    with `strictly_below`, none beats that GPU count or cost)."""
    from apsi.serving import mix

    load = q.rate if q.rate is not None else q.concurrency
    assert load is not None
    offers = _offers(q, found)
    if q.objective == "cost" and any(o.cost == 0 for o in offers):
        if strictly_below is not None:
            return None
        raise LayoutError("objective cost needs a price for every GPU type in the inventory; give price ($/GPU-hour: --price)")
    free = strictly_below is not None and q.inventory is None
    # Without an inventory a mix only has to beat the best single layout, and nothing couples the
    # kinds: an exact enumeration settles it (mix.cover_free); an inventory couples them (CP-SAT).
    answer = (mix.cover_free(offers, mix.scaled(load), q.objective, inventory, load=load) if free
              else mix.cover(offers, inventory, mix.scaled(load), q.objective, load=load))
    if answer is None:
        return None
    if answer is mix.UNPROVED:
        if strictly_below is not None:
            return UNPROVED_MIX
        raise LayoutError("the replica mix program stopped on its time limit before it found a mix within the "
                          "inventory that carries the load: give a smaller load or a larger inventory")
    chosen = [(found.kinds[i], n) for i, n in enumerate(answer.counts) if n > 0]
    gpus = sum(k.replica.gpus * n for k, n in chosen)
    dollars = sum((price_of(q, k) or 0.0) * n for k, n in chosen)
    if strictly_below is not None and (gpus if q.objective == "gpus" else dollars) >= strictly_below - 1e-9:
        return None
    if strictly_below is not None and len(chosen) == 1:
        return None  # one kind: the walk's own answer is at least as good
    sized = _shares(q, chosen)
    groups = [_group(q, x) for x in sized]
    order = [x.name for x in q.gpus]
    pairs = sorted(zip(groups, sized), key=lambda gs: (order.index(gs[0].gpu), gs[0].tp, gs[0].pp, gs[0].ep,
                                                        gs[0].attention_dp))
    groups = [g for g, _ in pairs]
    parts = ", ".join(f"{g.replicas:,} x {rp.layout_words(g.tp, g.pp, g.ep, g.attention_dp)} on {g.gpu}"
                      for g in groups)
    unit = "requests/s" if q.rate is not None else "requests in flight"
    units = ("request/s", unit) if q.rate is not None else ("request in flight", unit)
    measure = "GPUs" if q.objective == "gpus" else "dollars"
    if strictly_below is not None:
        # strictly_below is the best single layout's GPUs, or its $/hour under objective cost (_key).
        fewer, best = (("fewer GPUs", f"{strictly_below:,.0f} GPUs") if q.objective == "gpus"
                       else ("a lower cost", f"${strictly_below:,.2f}/h"))
        why = (f"a mix of layouts decides: {parts} carry {fmt.load(load)} {unit} on {gpus:,} GPUs, {fewer} than "
               f"replicas of any one layout (the best, {best}); "
               + ("every mix of counts within it weighed" if free and answer.method == "enumeration"
                  else "CP-SAT chose the counts"))
    else:
        used: dict[str, int] = {}
        for g in groups:
            used[g.gpu] = used.get(g.gpu, 0) + g.gpus
        full = [n for n, c in inventory.items()
                if used.get(n, 0) + min((o.gpus for o in offers if o.gpu == n), default=c + 1) > c]
        why = (f"within the inventory: {parts} {'carries' if len(groups) == 1 and groups[0].replicas == 1 else 'carry'} "
               f"{fmt.counted(load, *units)} at the fewest {measure}; "
               f"{', '.join(full)} {'has' if len(full) == 1 else 'have'} no room for another replica" if full else
               f"the fewest {measure} over every mix of replica kinds (CP-SAT): {parts} "
               f"{'carries' if len(groups) == 1 and groups[0].replicas == 1 else 'carry'} {fmt.counted(load, *units)}; "
               "the inventory does not bind")
    solver = ServeSolver(method=answer.method, status="OPTIMAL" if answer.status == "OPTIMAL" else "FEASIBLE",
                         gap=answer.gap, layouts=found.weighed, kinds=len(found.kinds), bounded=found.bounded,
                         mixes_checked=True)
    return _plan(q, groups, q.objective, why, explain.notes(q, found, [x for _, x in pairs]), solver)


def _shares(q: Question, chosen: list[tuple[Kind, int]]) -> list[Sized]:
    """Each chosen kind's replicas at the batch its share of the load needs: the load split in
    proportion to the kinds' capacities, each replica at the smallest batch carrying its part."""
    from apsi.serving.walk import smallest

    w = q.workload
    if q.rate is not None:
        total = sum(k.point.requests_per_s * n for k, n in chosen)
        out = []
        for k, n in chosen:
            share = q.rate * k.point.requests_per_s / total  # requests/s per replica of k

            def carries(x: int, k: Kind = k, share: float = share) -> bool:
                return k.at(x, w).requests_per_s >= share * (1 - 1e-12)

            b = smallest(1, k.batch, carries)
            out.append(Sized(k, n, b, k.at(b, w), k.limit if b == k.batch else "load"))
        return out
    assert q.concurrency is not None
    # The requests in flight split over the kinds in proportion to what their replicas hold, whole
    # requests by the largest remainders (the shares sum to the concurrency), each kind's as evenly
    # over its replicas as whole requests go (walk.held).
    capacity = [k.batch * n for k, n in chosen]
    total = sum(capacity)
    exact = [q.concurrency * c / total for c in capacity]
    shares = [min(c, math.floor(x)) for c, x in zip(capacity, exact)]
    for i in sorted(range(len(chosen)), key=lambda i: (-(exact[i] - shares[i]), i))[:q.concurrency - sum(shares)]:
        shares[i] += 1
    return [held(k, w, n, share, k.limit if math.ceil(share / n) >= k.batch else "load")
            for (k, n), share in zip(chosen, shares)]


def _mixed(q: Question, found: Layouts) -> ServePlan:
    from apsi.serving import mix

    assert q.inventory is not None
    load = q.rate if q.rate is not None else q.concurrency
    if load is None:
        raise ApsiError("an inventory needs a load to cover: give rate (requests/s: --rate) or concurrency (requests in flight: --concurrency)")
    # The plan without the inventory, where it fits within it, is the plan with it (the inventory
    # only takes answers away), its ties broken as without one (the lower TPOT first), which the
    # mix program does not weigh.
    try:
        free = _single(q._replace(inventory=None), found)
    except LayoutError:
        free = None
    if free is not None:
        used: dict[str, int] = {}
        for g in free.groups:
            used[g.gpu] = used.get(g.gpu, 0) + g.gpus
        if all(n <= q.inventory.get(gpu, 0) for gpu, n in used.items()):
            where = ", ".join(f"{n}={c:,}" for n, c in q.inventory.items())
            return free.model_copy(update={"why": f"{free.why}; within the inventory ({where}), which does not bind"})
    if found.bounded:
        found = walked(q)  # a mix within the inventory may use any layout, those the bound set aside too
    offers = _offers(q, found)
    fitting = [o for o in offers if q.inventory.get(o.gpu, 0) >= o.gpus]
    if not fitting:
        smallest_kind = min(found.kinds, key=lambda k: k.replica.gpus)
        raise LayoutError(f"no replica fits in the inventory ({', '.join(f'{n}={c:,}' for n, c in q.inventory.items())}): "
                          f"the smallest that meets the targets, {explain.layout_name(smallest_kind)}, needs "
                          f"{fmt.counted(smallest_kind.replica.gpus, 'GPU')}")
    plan = _cover(q, found, q.inventory)
    if plan is None:
        reach = mix.most(offers, q.inventory) / mix.CAPACITY_SCALE
        unit = "requests/s" if q.rate is not None else "requests in flight"
        raise LayoutError(f"the inventory ({', '.join(f'{n}={c:,}' for n, c in q.inventory.items())}) serves at most "
                          f"{reach:,.2f} {unit} at the targets, not {fmt.load(load)}: give more GPUs, a lower load or "
                          "looser targets")
    return plan


def memory_of(q: Question, sh: rp.Shape) -> ReplicaMemory:
    """One GPU's memory of a replica of shape `sh`, by part (the plan's and the disaggregated pools')."""
    return ReplicaMemory(memory_gib=sh.memory_bytes / GIB, weights_gib=sh.weights_bytes / GIB,
                         activations_gib=sh.activation_bytes / GIB, overhead_gib=q.engine.overhead_gib,
                         memory_fraction=sh.memory_fraction,
                         kv_cache_gib=sh.kv_bytes / GIB, kv_cache_bytes_per_token=sh.kv_bytes_per_token,
                         kv_cache_tokens=int(sh.kv_bytes // sh.kv_bytes_per_token))


def _group(q: Question, s: Sized) -> ReplicaGroup:
    k, p = s.kind, s.point
    return ReplicaGroup(gpu=k.gpu.name, tp=k.replica.tp, pp=k.replica.pp, ep=k.replica.ep, attention_dp=k.replica.dp,
                        gpus_per_replica=k.replica.gpus,
                        batch=s.batch, batch_limit=k.batch, max_batch=k.max_batch,
                        engine_max_batch=q.engine.on(k.gpu).max_sequences * k.replica.dp,
                        gpus_per_node=max(k.gpu.gpus_per_node, 1), limit=s.limit,
                        replicas=s.replicas, gpus=s.gpus,
                        ttft_ms=p.ttft_s * 1e3, ttft_p99_ms=p.ttft_p99_s * 1e3, ttft_p50_ms=p.ttft_p50_s * 1e3,
                        ttft_p90_ms=p.ttft_p90_s * 1e3, tpot_ms=p.tpot_s * 1e3,
                        requests_per_s_per_replica=s.requests_per_s / s.replicas, lighter_replicas=s.lighter,
                        output_tokens_per_s_per_gpu=s.requests_per_s / s.replicas * q.workload.osl / k.replica.gpus,
                        output_tokens_per_s_per_user=1 / p.tpot_s, memory=memory_of(q, k.shape))


def _plan(q: Question, groups: list[ReplicaGroup], goal: str, why: str, notes: list[str], solver: ServeSolver) -> ServePlan:
    from apsi.catalog import find_gpu
    from apsi.inputs.question import MAX_GPUS_LIMIT

    gpus = sum(g.gpus for g in groups)
    if gpus > MAX_GPUS_LIMIT:
        # As a training plan's cap: a billion requests/s took 124,437,828 GPUs of Llama 3.1 8B.
        load = f"{fmt.load(q.rate)} requests/s" if q.rate is not None else f"{fmt.load(q.concurrency or 0)} in flight"
        raise LayoutError(f"{load} needs {gpus:,} GPUs, past the {MAX_GPUS_LIMIT:,} apsi plans: give a lower load")

    rps = sum(g.replicas * g.requests_per_s_per_replica for g in groups)
    tokens = rps * q.workload.osl
    prices = [q.price if q.price is not None else find_gpu(g.gpu, q.catalog).price_usd_per_hour for g in groups]
    cost = None if any(p is None for p in prices) else sum(p * g.gpus for p, g in zip(prices, groups) if p is not None)
    watts = [find_gpu(g.gpu, q.catalog).tdp_w for g in groups]
    power = None if any(w is None for w in watts) else sum(w * g.gpus for w, g in zip(watts, groups) if w is not None)
    w = q.workload
    return ServePlan(
        model_name=q.name, model_repo=q.repo, params=q.params, context_tokens=q.context_tokens, engine=q.engine.name,
        engine_version=q.engine.version,
        precision=q.weights, kv_precision=q.kv,
        workload=ServeWorkload(isl_tokens=w.isl, osl_tokens=w.osl, prefix_tokens=w.prefix,
                               ttft_target_ms=None if q.targets.ttft_s is None else q.targets.ttft_s * 1e3,
                               ttft_percentile="p99" if q.targets.p99 else "mean",
                               tpot_target_ms=None if q.targets.tpot_s is None else q.targets.tpot_s * 1e3,
                               rate_requests_per_s=q.rate, concurrency=q.concurrency),
        groups=groups, replicas=sum(g.replicas for g in groups), gpus=sum(g.gpus for g in groups),
        requests_per_s=rps, output_tokens_per_s=tokens, cost_usd_per_hour=cost,
        usd_per_million_output_tokens=None if cost is None else cost / (tokens * 3600) * 1e6,
        # Watts x PUE over tokens/s is joules per token; a million of them, in kWh (3.6e6 J).
        kwh_per_million_output_tokens=None if power is None else power * q.pue / tokens * 1e6 / 3.6e6,
        objective=goal,  # type: ignore[arg-type]
        why=why, notes=notes, solver=solver)


def serve_frontier(params: Any, **options: Any) -> list[ServeFrontierPoint]:
    """Output tokens/s per GPU against per user over every layout and batch meeting the targets:
    the points no other beats on both, by tokens/s per user falling."""
    from apsi.errors import unknown
    from apsi.inputs.modelspec import ARCHITECTURE_OPTIONS

    architecture = {k: options.pop(k) for k in list(options) if k in ARCHITECTURE_OPTIONS}
    for key in options:
        if key not in SERVE_OPTIONS:
            raise unknown("keyword", key, SERVE_OPTIONS + ARCHITECTURE_OPTIONS)
    for key in ("rate", "concurrency", "inventory", "objective"):
        if options.get(key) is not None:
            raise InputError(f"the serving frontier lists one replica at every layout and batch; {key} sizes "
                             "replicas for a load: leave it out, or call serve()")
    given = {k: options.get(k) for k in SERVE_OPTIONS}
    if given["precision"] is None:
        given["precision"] = "bf16"
    q = question(params, architecture=architecture, **given)
    stair = Staircase(q.workload)
    found = walked(q, aside=stair)
    if not found.kinds:
        raise LayoutError(explain.nothing(q, found))
    return [ServeFrontierPoint(gpu=p.kind.gpu.name, tp=p.kind.replica.tp, pp=p.kind.replica.pp, ep=p.kind.replica.ep,
                               attention_dp=p.kind.replica.dp, batch=p.batch,
                               output_tokens_per_s_per_gpu=p.per_gpu, output_tokens_per_s_per_user=p.per_user,
                               ttft_ms=p.point.ttft_s * 1e3, tpot_ms=p.point.tpot_s * 1e3)
            for p in frontier(stair, found.kinds)]
