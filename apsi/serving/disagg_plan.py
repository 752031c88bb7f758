"""serve_disagg(): the disaggregated serving plan (`apsi serve --disagg`). Composes the question
(apsi.serving.inputs), every layout as a prefill and as a decode kind (apsi.serving.disagg), the
pool counts (apsi.serving.pools, CP-SAT) and the aggregated plan of the same question
(apsi.serving.plan.answered), into a DisaggPlan that says whether disaggregation wins. No I/O.

Without an inventory, the best pair of one prefill and one decode layout, each pool sized alone,
bounds the answer: the program then looks, within that many GPUs of each type (or that cost), for
pools that do better, a prefill pool mixing layouts included.
"""

from __future__ import annotations

import math
from typing import Any

from apsi import fmt
from apsi.errors import InputError, LayoutError
from apsi.model.disagg_schema import DisaggPlan, PoolGroup
from apsi.model.serve_schema import ServeSolver, ServeWorkload
from apsi.serving import disagg, pools, queues
from apsi.serving.disagg import DecodeKind, PrefillKind
from apsi.serving.inputs import Question, question, unpriced
from apsi.serving.walk import smallest


def serve_disagg(params: Any, **options: Any) -> DisaggPlan:
    """The disaggregated serving plan for a model at a rate: a prefill pool and a decode pool (xPyD)
    meeting the TTFT and TPOT targets at the fewest GPUs (or least cost), proved by CP-SAT, beside
    the aggregated plan (serve()) of the same question. Takes serve()'s options; rate and ttft are
    required (the prefill pool is sized by the TTFT target at the rate)."""
    from apsi.errors import unknown
    from apsi.inputs.modelspec import ARCHITECTURE_OPTIONS
    from apsi.serving.plan import SERVE_OPTIONS

    architecture = {k: v for k, v in options.items() if k not in SERVE_OPTIONS}
    for key in architecture:
        if key not in ARCHITECTURE_OPTIONS:
            raise unknown("keyword", key, SERVE_OPTIONS + ARCHITECTURE_OPTIONS)
    given = {k: options.get(k) for k in SERVE_OPTIONS}
    if given["precision"] is None:
        given["precision"] = "bf16"
    q = question(params, architecture=architecture, **given)
    if q.concurrency is not None or q.rate is None:
        raise InputError("disaggregated serving sizes its pools for a rate: give rate (requests/s: --rate)"
                         + (", not concurrency" if q.concurrency is not None else ""))
    if q.targets.ttft_s is None:
        raise InputError("disaggregated serving sizes its prefill pool by the TTFT target: give ttft (ms, or p99:MS: --ttft)")
    return _plan(q)


def _price(q: Question, k: PrefillKind | DecodeKind) -> float | None:
    each = q.price if q.price is not None else k.gpu.price_usd_per_hour
    return None if each is None else each * k.replica.gpus


def _unit(q: Question, k: PrefillKind | DecodeKind) -> float:
    """The objective's first measure of one replica: its price under cost, else its GPUs."""
    return (_price(q, k) or 0.0) if q.objective == "cost" else float(k.replica.gpus)


def _measure(q: Question, gpus: int, dollars: float | None) -> tuple[float, float]:
    """What the objective compares, GPUs then $/hour or the reverse; the dollars to a hundredth of a
    cent, so that sums of one price in another order (3 x 2.69 + 2 x 5.38 against 2.69 + 3 x 5.38)
    tie rather than one winning by a float's last bit."""
    d = math.inf if dollars is None else round(dollars, 4)
    return (gpus, d) if q.objective == "gpus" else (d, gpus)


def _bound(q: Question, prefill: list[PrefillKind], decode: list[DecodeKind],
           capacity: list[list[float]]) -> tuple[dict[str, int], pools.Pools | None]:
    """GPUs of each type the pools may use: the inventory; without one, what the best pair of one
    prefill and one decode layout needs in all (or, for cost, what its cost buys of each type). And
    that pair's pools (without an inventory), where the program starts."""
    if q.inventory is not None:
        return dict(q.inventory), None
    best: tuple[tuple[float, float], int, float | None, pools.Pools] | None = None
    assert q.rate is not None
    rate = q.rate
    # Each kind's GPUs and price worked out once: the loop weighs every pair (hundreds of thousands
    # where PP runs at every TP), each as _measure would, the same floats in the same order.
    sizes = [p.replica.gpus for p in prefill]
    prices = [_price(q, p) for p in prefill]
    for j, d in enumerate(decode):
        y = max(1, math.ceil(rate / d.requests_per_s - 1e-12))  # a pool holds one replica at least
        dp, dg = _price(q, d), y * d.replica.gpus
        for i, c in enumerate(capacity[j]):
            if c <= 0:
                continue
            x = max(1, math.ceil(rate / c - 1e-12))
            gpus = x * sizes[i] + dg
            pp = prices[i]
            dollars = None if pp is None or dp is None else x * pp + y * dp
            key = _measure(q, gpus, dollars)
            if best is None or key < best[0]:
                counts = tuple(x if k == i else 0 for k in range(len(prefill)))
                best = (key, gpus, dollars, pools.Pools(counts, j, y, "FEASIBLE", 1.0))
    if best is None:
        return {}, None
    if q.objective == "gpus" or best[2] is None:
        return {g.name: best[1] for g in q.gpus}, best[3]
    out = {}
    for g in q.gpus:
        each = q.price if q.price is not None else g.price_usd_per_hour
        # What the best pair's dollars buy of this type, whole GPUs: rounded down past a relative
        # 1e-9, which float division may leave below a whole count (14 x 2.69 / 2.69 is 13.999...).
        out[g.name] = math.floor(best[2] / each * (1 + 1e-9)) if each else 0
    return out, best[3]


def _plan(q: Question) -> DisaggPlan:
    assert q.rate is not None and q.targets.ttft_s is not None
    rate, w = q.rate, q.workload
    prefill, decode, weighed = disagg.kinds(q.architecture, q.gpus, q.engine, q.weights, q.kv, w, q.targets,
                                            q.tp, q.pp, q.unshaped_experts)
    if not decode:
        raise LayoutError("no decode layout meets the targets: even one request per replica misses the TPOT or "
                          "TTFT target, or no KV cache holds one request; try looser targets, fp8 weights or "
                          "more GPUs per replica")
    if not prefill:
        raise LayoutError(f"no prefill layout holds one prompt of {w.isl:,} tokens in its KV cache")
    if q.objective == "cost" and (any(_price(q, k) is None for k in prefill) or any(_price(q, k) is None for k in decode)):
        raise LayoutError(f"objective cost needs a price: {', '.join(unpriced(q))} has none in the "
                          "catalog; give price ($/GPU-hour: --price)")
    useful = _useful(q, prefill, decode)
    aside, prefill = len(prefill) - len(useful), useful
    decode, capacity = _variants(q, prefill, decode)
    if not any(c > 0 for row in capacity for c in row):
        raise LayoutError(f"no pairing of prefill and decode layouts reaches TTFT {q.targets.ttft_s * 1e3:g} ms: "
                          "the prefill, the KV transfer and the decode's first step alone take longer")
    most, pair = _bound(q, prefill, decode, capacity)
    kinds_p = [pools.Kind(p.gpu.name, p.replica.gpus, round((_price(q, p) or 0) * 1e6)) for p in prefill]
    kinds_d = [pools.Kind(d.gpu.name, d.replica.gpus, round((_price(q, d) or 0) * 1e6)) for d in decode]
    found = pools.choose(kinds_p, kinds_d, capacity, [d.requests_per_s for d in decode], rate, most, q.objective,
                         hint=pair)
    if found is None:
        where = ", ".join(f"{n}={c:,}" for n, c in most.items())
        raise LayoutError(f"no prefill and decode pools within {where} carry {rate:,g} requests/s at the targets: "
                          "give more GPUs, a lower rate or looser targets")
    return _assemble(q, prefill, decode, capacity, found, weighed, aside)


def _useful(q: Question, prefill: list[PrefillKind], decode: list[DecodeKind]) -> list[PrefillKind]:
    """The prefill kinds that may be in an optimal pair of pools (without an inventory; with one,
    all). A pool holding one replica of p carries at most p's most requests/s, c(p) (each attention
    group flat out, within its NICs: disagg.capacity), and the rest of the rate costs at least the
    least measure per request/s of any kind; the decode pool at least the least of any decode kind
    at its largest batch. Where that passes the measure of a feasible pair (a one-stage prefill
    kind's pool beside a decode kind's), p is in no optimal pools: set aside before the capacity
    matrix is made (PP at every TP made it some 560 x 565 kinds)."""
    if q.inventory is not None or not prefill or not decode:
        return prefill
    assert q.rate is not None
    rate = q.rate
    most = [min(p.shape.dp / p.service_s, p.link_rate) for p in prefill]
    per = min(_unit(q, p) / m for p, m in zip(prefill, most))
    ys = [max(1, math.ceil(rate / d.requests_per_s - 1e-12)) for d in decode]
    least_decode = min(y * _unit(q, d) for y, d in zip(ys, decode))
    upper = math.inf
    for p in prefill:
        if p.replica.pp > 1:
            continue
        for y, d in zip(ys, decode):
            c = disagg.capacity(p, d, q.targets)
            if c > 0:
                upper = min(upper, math.ceil(rate / c - 1e-12) * _unit(q, p) + y * _unit(q, d))
    return [p for p, m in zip(prefill, most)
            if p.replica.pp == 1 or _unit(q, p) + max(0.0, rate - m) * per + least_decode <= upper * (1 + 1e-9)]


def _variants(q: Question, prefill: list[PrefillKind],
              decode: list[DecodeKind]) -> tuple[list[DecodeKind], list[list[float]]]:
    """Each decode layout at every batch its pool may run at, as a kind of its own: a pool of y
    replicas runs each at the smallest batch carrying rate / y (disagg.at_batch), and its decode
    side of TTFT there is what the prefill pool's budget keeps, so more decode replicas can buy a
    smaller prefill pool. Every y from the fewest replicas that carry the rate up to where the decode
    pool alone, with the least any prefill pool takes (each prefill kind at its busiest, a
    fractional count), costs more than the best pair found so far within the inventory (the
    objective's measure), and at most what the inventory holds. An optimal pool's decode batch is
    among them, so the program over them is exact. With each kind's row of prefill capacities
    beside it (disagg.capacity)."""
    assert q.rate is not None
    rate, w = q.rate, q.workload
    # The least any prefill pool takes: the rate at each kind's most requests/s per unit.
    least = rate * min(_unit(q, p) / min(p.shape.dp / p.service_s, p.link_rate) for p in prefill)

    def fits(p: PrefillKind, n: int, d: DecodeKind, y: int) -> bool:  # within the inventory, if any
        if q.inventory is None:
            return True
        need = {d.gpu.name: y * d.replica.gpus}
        need[p.gpu.name] = need.get(p.gpu.name, 0) + n * p.replica.gpus
        return all(q.inventory.get(t, 0) >= g for t, g in need.items())

    rows: dict[int, list[float]] = {}  # by id(kind): its prefill capacities, worked out once

    def row(d: DecodeKind) -> list[float]:
        if id(d) not in rows:
            rows[id(d)] = [disagg.capacity(p, d, q.targets) for p in prefill]
        return rows[id(d)]

    units = [_unit(q, p) for p in prefill]  # worked out once: best_pair weighs every prefill kind per decode kind

    def best_pair(d: DecodeKind, y: int) -> float:
        """The least measure of y replicas of d beside one prefill kind's pool, within the inventory."""
        options = []
        for p, c, each in zip(prefill, row(d), units):
            if c > 0:
                n = math.ceil(rate / c - 1e-12)
                if q.inventory is None or fits(p, n, d, y):
                    options.append(n * each)
        return min(options, default=math.inf) + y * _unit(q, d)

    bound = math.inf
    for d in decode:
        bound = min(bound, best_pair(d, max(1, math.ceil(rate / d.requests_per_s - 1e-12))))
    out: list[DecodeKind] = []
    for d in decode:
        most = None if q.inventory is None else q.inventory.get(d.gpu.name, 0) // d.replica.gpus
        out.append(d)  # at its largest batch within the targets (what an inventory refuses, it says)
        y = max(1, math.ceil(rate / d.requests_per_s - 1e-12))
        # (The best pair bounds only where it fits the inventory: best_pair weighs those alone.)
        while y * _unit(q, d) + least <= bound * (1 + 1e-12) and (most is None or y <= most):
            share = rate / y

            def carries(n: int, d: DecodeKind = d, share: float = share) -> bool:
                return disagg.decode_point(d.shape, w, n)[1] >= share * (1 - 1e-12)

            b = smallest(1, d.batch, carries)
            if b < d.batch:
                v = disagg.at_batch(d, w, b)
                if v.requests_per_s < share * (1 - 1e-12):
                    break  # its NICs, not its batch, limit it: fewer requests each does not help
                out.append(v)
                bound = min(bound, best_pair(v, y))
            if b == 1:
                break
            # The fewest replicas whose share a smaller batch carries.
            y = max(y + 1, math.ceil(rate / disagg.at_batch(d, w, b - 1).requests_per_s - 1e-12))
    return out, [row(d) for d in out]


def _assemble(q: Question, prefill: list[PrefillKind], decode: list[DecodeKind], capacity: list[list[float]],
              found: pools.Pools, weighed: int, aside: int = 0) -> DisaggPlan:
    from apsi.serving.plan import memory_of

    assert q.rate is not None
    rate, w = q.rate, q.workload
    d, y = decode[found.decode], found.decode_replicas
    share = rate / y
    batch = smallest(1, d.batch, lambda b: disagg.decode_point(d.shape, w, b)[1] >= share * (1 - 1e-12))
    tpot, _, first, first_p99 = disagg.decode_point(d.shape, w, batch)
    first_p50, first_p90, _ = disagg.decode_quantiles(d.shape, w, batch)
    carried = sum(capacity[found.decode][i] * n for i, n in enumerate(found.prefill))
    groups, ttft, ttft_p99, ttft_p50, ttft_p90 = [], 0.0, 0.0, 0.0, 0.0
    for i, n in enumerate(found.prefill):
        if not n:
            continue
        p = prefill[i]
        each = rate * capacity[found.decode][i] / carried  # every prefill replica at one share of its capacity
        wait, wait_p50, wait_p90, wait_p99 = queues.wait_quantiles(each / p.shape.dp, p.service_s, (0.5, 0.9, 0.99))
        transfer = max(p.send_s, d.recv_s)
        ttft = max(ttft, wait + p.prefill_s + transfer + first)
        ttft_p99 = max(ttft_p99, wait_p99 + p.prefill_s + transfer + first_p99)
        ttft_p50 = max(ttft_p50, wait_p50 + p.prefill_s + transfer + first_p50)
        ttft_p90 = max(ttft_p90, wait_p90 + p.prefill_s + transfer + first_p90)
        groups.append(PoolGroup(role="prefill", gpu=p.gpu.name, tp=p.replica.tp, pp=p.replica.pp, ep=p.replica.ep,
                                attention_dp=p.replica.dp, gpus_per_replica=p.replica.gpus, replicas=n,
                                gpus=n * p.replica.gpus, requests_per_s_per_replica=capacity[found.decode][i],
                                utilization=each * p.service_s / p.shape.dp, batch=0, prefill_ms=p.prefill_s * 1e3,
                                queue_ms=wait * 1e3, kv_transfer_ms=p.send_s * 1e3, tpot_ms=0.0,
                                memory=memory_of(q, p.shape)))
    groups.append(PoolGroup(role="decode", gpu=d.gpu.name, tp=d.replica.tp, pp=d.replica.pp, ep=d.replica.ep,
                            attention_dp=d.replica.dp, gpus_per_replica=d.replica.gpus, replicas=y,
                            gpus=y * d.replica.gpus, requests_per_s_per_replica=d.requests_per_s,
                            utilization=rate / (y * d.requests_per_s), batch=batch, prefill_ms=0.0, queue_ms=0.0,
                            kv_transfer_ms=d.recv_s * 1e3, tpot_ms=tpot * 1e3, memory=memory_of(q, d.shape)))
    gpus = sum(g.gpus for g in groups)
    from apsi.inputs.question import MAX_GPUS_LIMIT

    if gpus > MAX_GPUS_LIMIT:  # as aggregated serving's (apsi.serving.plan._plan) and training's cap
        raise LayoutError(f"{fmt.load(rate)} requests/s needs {gpus:,} GPUs, past the {MAX_GPUS_LIMIT:,} apsi plans: "
                          "give a lower load")
    prices = [_price(q, prefill[i]) for i, n in enumerate(found.prefill) if n] + [_price(q, d)]
    counts = [n for n in found.prefill if n] + [y]
    cost = None if any(p is None for p in prices) else sum(p * c for p, c in zip(prices, counts) if p is not None)
    agg_gpus, agg_cost, agg_words = _aggregated(q)
    mine = _measure(q, gpus, cost)
    wins = agg_gpus is None or mine < _measure(q, agg_gpus, agg_cost)
    targets = ServeWorkload(isl_tokens=w.isl, osl_tokens=w.osl, prefix_tokens=w.prefix,
                            ttft_target_ms=q.targets.ttft_s * 1e3 if q.targets.ttft_s is not None else None,
                            ttft_percentile="p99" if q.targets.p99 else "mean",
                            tpot_target_ms=None if q.targets.tpot_s is None else q.targets.tpot_s * 1e3,
                            rate_requests_per_s=rate, concurrency=None)
    plan = DisaggPlan(
        model_name=q.name, params=q.params, engine=q.engine.name, engine_version=q.engine.version,
        precision=q.weights, kv_precision=q.kv, workload=targets, groups=groups,
        prefill_replicas=sum(found.prefill), decode_replicas=y, gpus=gpus, ttft_ms=ttft * 1e3,
        ttft_p99_ms=ttft_p99 * 1e3, ttft_p50_ms=ttft_p50 * 1e3, ttft_p90_ms=ttft_p90 * 1e3, tpot_ms=tpot * 1e3, requests_per_s=rate, output_tokens_per_s=rate * w.osl,
        cost_usd_per_hour=cost, objective=q.objective,  # type: ignore[arg-type]
        usd_per_million_output_tokens=None if cost is None else cost / (rate * w.osl * 3600) * 1e6,
        aggregated_gpus=agg_gpus, aggregated_cost_usd_per_hour=agg_cost, wins=wins, why="", notes=[],
        solver=ServeSolver(method="cp-sat", status=found.status,  # type: ignore[arg-type]
                           gap=found.gap, layouts=weighed, kinds=len(prefill) + len(decode), bounded=aside,
                           mixes_checked=True))
    return plan.model_copy(update={"why": _why(q, plan, d, agg_words), "notes": _notes(q, plan)})


def _aggregated(q: Question) -> tuple[int | None, float | None, str]:
    """The aggregated plan of the same question: its GPUs, cost and layouts in words (or why none)."""
    from apsi.serving.plan import answered
    from apsi.serving.render import layout_words

    try:
        agg = answered(q)
    except LayoutError as e:  # an inventory no aggregated mix fits says so by raising
        agg = str(e)
    if isinstance(agg, str):
        return None, None, agg
    words = " + ".join(f"{g.replicas:,} x {layout_words(g)}" for g in agg.groups)
    return agg.gpus, agg.cost_usd_per_hour, words


def _words(g: PoolGroup) -> str:
    from apsi.serving.replica import layout_words

    return f"{g.replicas:,} x {layout_words(g.tp, g.pp, g.ep, g.attention_dp)} on {g.gpu}"


def _why(q: Question, p: DisaggPlan, d: DecodeKind, agg_words: str) -> str:
    pre = [g for g in p.groups if g.role == "prefill"]
    dec = p.groups[-1]
    head = (f"{' + '.join(_words(g) for g in pre)} prefill and {_words(dec)} decode = {p.gpus:,} GPUs"
            + (f" (${p.cost_usd_per_hour:,.2f}/h)" if p.cost_usd_per_hour is not None and q.objective == "cost" else ""))
    limit = {"kv_cache": "its KV cache", "max_batch": "the engine's max batch", "tpot": "the TPOT target",
             "ttft": "the TTFT target",
             "load": f"the rate over {fmt.counted(p.decode_replicas, 'replica')}, below the {d.largest:,} its "
                     "targets allow: a smaller batch's first step is shorter, which leaves the prefill pool more of "
                     "the TTFT target"}[d.limit]
    text = (f"{head}: each decode replica runs up to {fmt.counted(d.batch, 'request')} (set by {limit}) in steps that carry no "
            f"prompt; the prefill pool is sized so a prompt's queue wait keeps {'p99 ' if q.targets.p99 else ''}TTFT "
            f"within {q.targets.ttft_s * 1e3:g} ms" if q.targets.ttft_s is not None else head)
    if p.aggregated_gpus is None:
        return text + f"; disaggregation wins: aggregated serving cannot meet the targets ({agg_words})"
    mine = _measure(q, p.gpus, p.cost_usd_per_hour)
    theirs = _measure(q, p.aggregated_gpus, p.aggregated_cost_usd_per_hour)
    # The objective's figure first, the other breaking a tie (_measure): a win on the second alone
    # says so, and equal on both is a tie, not a loss.
    verdict = ("ties" if mine == theirs else "loses" if not p.wins
               else f"wins on {'cost' if q.objective == 'gpus' else 'GPUs'} at the same "
                    f"{'GPUs' if q.objective == 'gpus' else 'cost'}" if mine[0] == theirs[0] else "wins")
    agg_cost, own_cost = p.aggregated_cost_usd_per_hour, p.cost_usd_per_hour
    if mine[0] == theirs[0] and agg_cost is not None and own_cost is not None:
        # Equal on the objective's figure: the other one, both sides of it.
        if q.objective == "gpus":
            also = (f"{fmt.counted(p.aggregated_gpus, 'GPU')} as well, at ${agg_cost:,.2f}/h against "
                    f"${own_cost:,.2f}/h here")
        else:
            also = f"${agg_cost:,.2f}/h as well, on {fmt.counted(p.aggregated_gpus, 'GPU')} against {p.gpus:,} here"
        return text + f"; disaggregation {verdict}: aggregated serving needs {also} ({agg_words})"
    agg = fmt.counted(p.aggregated_gpus, "GPU") + (f" (${agg_cost:,.2f}/h)"
                                           if q.objective == "cost" and agg_cost is not None else "")
    return text + f"; disaggregation {verdict}: aggregated serving needs {agg} ({agg_words})"


def _notes(q: Question, p: DisaggPlan) -> list[str]:
    from apsi.catalog import find_gpu
    from apsi.serving.explain import uncalibrated

    cal = q.engine.calibration
    notes = uncalibrated(q, [find_gpu(g.gpu, q.catalog) for g in p.groups]) + list(q.placed)
    if q.skipped:
        notes.append("left out: " + "; ".join(q.skipped))
    notes.append("the KV cache crosses the scale-out network, each GPU's shard over its own NIC (NIXL); a prefill "
                 "and a decode replica on one NVLink node would move it faster. Each request's first token comes "
                 "from the decode replica, as in Dynamo's and vLLM's flows")
    notes.append(f"the decode pool is one layout (every request's TTFT has the same decode part); the prefill pool "
                 f"may mix layouts; {q.engine.title} {q.engine.version} defaults, calibration: {cal.rows}")
    return notes
