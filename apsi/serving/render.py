"""Text for people: the serving plan block, its one-line summary (the training plan's Serving
line), the serving frontier table and the disaggregated plan block. Rendering only: every number comes from a ServePlan."""

from __future__ import annotations

from typing import TYPE_CHECKING

from apsi.fit import columns, wrap
from apsi import fmt
from apsi.fmt import billions, count as _n, gib as _gib
from apsi.serving.replica import layout_words as _words
from apsi.model.serve_schema import ReplicaGroup, ServeFrontierPoint, ServePlan
from apsi.units import human

if TYPE_CHECKING:
    from apsi.model.disagg_schema import DisaggPlan  # only the disaggregated text reads one: not imported for a plan


def _weighed(s, loaded: bool) -> str:
    """The Solver line's count of the layouts: each weighed in full, or (ServeSolver.bounded) set
    aside by a bound proving it is neither the answer, its runner-up, nor in a mix."""
    if not s.bounded:
        return f"every layout weighed ({s.layouts:,}, {s.kinds:,} meet the targets)"
    on = "their GPUs and the load they carry" if loaded else "their output tokens/s per GPU"
    return (f"every layout weighed or bounded ({s.layouts:,}: {s.layouts - s.bounded:,} weighed in full, {s.kinds:,} "
            f"of them meet the targets; {s.bounded:,} pipelined ones set aside by a bound on {on})")


def _title(p: ServePlan) -> str:
    from apsi.serving.engines import engines

    return engines()[p.engine].title


def layout_words(g: ReplicaGroup) -> str:
    return f"{_words(g.tp, g.pp, g.ep, g.attention_dp)} on {g.gpu}"


def _ms(x: float) -> str:
    return f"{x:,.1f} ms" if x < 100 else f"{x:,.0f} ms"


def _targets(p: ServePlan | DisaggPlan) -> str:
    w = p.workload
    parts = [f"{w.isl_tokens:,} in / {w.osl_tokens:,} out tokens per request"
             + (f" ({w.prefix_tokens:,} cached)" if w.prefix_tokens else "")]
    if w.rate_requests_per_s is not None:
        parts.append(fmt.counted(w.rate_requests_per_s, "request/s", "requests/s"))
    if w.concurrency is not None:
        parts.append(fmt.counted(w.concurrency, "request in flight", "requests in flight"))
    if w.tpot_target_ms is not None:
        parts.append(f"TPOT <= {w.tpot_target_ms:g} ms")
    if w.ttft_target_ms is not None:
        parts.append(f"TTFT{' p99' if w.ttft_percentile == 'p99' else ''} <= {w.ttft_target_ms:g} ms")
    if len(parts) == 1:
        parts.append("no load or targets given")
    return "; ".join(parts)


def _group_rows(p: ServePlan, g: ReplicaGroup, label: str) -> list[tuple[str, str]]:
    m = g.memory
    limit = {"tpot": "the TPOT target", "ttft": "the TTFT target", "kv_cache": "the KV cache",
             "max_batch": "the engine's max batch", "load": "the load"}[g.limit]
    cap = g.engine_max_batch
    room = (f"the engine's max batch is {cap:,}" if g.max_batch >= cap else f"the KV cache holds {g.max_batch:,}")
    # Set by the max batch, it is the batch: said once.
    why = f"set by {limit}" + ("" if g.limit == "max_batch" and g.max_batch >= cap else f"; {room}")
    return [
        (label, f"{layout_words(g)} ({g.gpus_per_replica:,} GPU{'s' if g.gpus_per_replica != 1 else ''}), "
                f"batch {g.batch:,}" + (f" ({g.batch - 1:,} on {g.lighter_replicas:,} of {g.replicas:,})"
                                        if g.lighter_replicas else "") + f" ({why})"),
        ("Memory/GPU", f"{_gib(m.weights_gib)} GiB weights + {_gib(m.activations_gib)} activations + "
                       f"{_gib(m.overhead_gib)} overhead + {_gib(m.kv_cache_gib)} KV cache "
                       f"({m.kv_cache_tokens:,} tokens, {m.kv_cache_bytes_per_token:,.0f} B each) of "
                       f"{_gib(m.memory_gib)} GiB"),
        ("Latency", f"TTFT {_ms(g.ttft_ms)} (p50 {_ms(g.ttft_p50_ms)}, p90 {_ms(g.ttft_p90_ms)}, "
                    f"p99 {_ms(g.ttft_p99_ms)}), TPOT {_ms(g.tpot_ms)} "
                    f"({g.output_tokens_per_s_per_user:,.1f} tokens/s per user)"),
        ("Throughput", f"{g.output_tokens_per_s_per_gpu:,.0f} output tokens/s per GPU, "
                       f"{g.requests_per_s_per_replica:,.2f} requests/s per replica"),
    ]


def serve_text(p: ServePlan, width: int | None = None) -> str:
    what = f"{p.model_name} ({billions(p.params)} params)" if p.model_name else f"{human(p.params)} params"
    head = (f"Serving plan: {what} on {_title(p)} {p.engine_version}, {p.precision} weights, {p.kv_precision} KV cache: "
            f"{_n(p.gpus)} GPU{'s' if p.gpus != 1 else ''} in {_n(p.replicas)} replica{'s' if p.replicas != 1 else ''}")
    rows: list[tuple[str, str]] = [("Workload", _targets(p))]
    for i, g in enumerate(p.groups):
        rows += _group_rows(p, g, "Replica" if len(p.groups) == 1 else f"Kind {i + 1}")
    rows.append(("Replicas", " + ".join(f"{g.replicas:,} x {g.gpus_per_replica:,} {g.gpu}" for g in p.groups)
                 + f" = {_n(p.gpus)} GPU{'s' if p.gpus != 1 else ''}; {p.requests_per_s:,.2f} requests/s, "
                 f"{p.output_tokens_per_s:,.0f} output tokens/s"))
    if p.cost_usd_per_hour is not None and p.usd_per_million_output_tokens is not None:
        rate = p.workload.rate_requests_per_s
        # The per-token figures are at the throughput the replicas carry at their planned batches
        # (requests_per_s: the load's, rounded up to whole replicas; not their largest batches);
        # below it, at the rate asked too, where it is 5% or more below: GPUs held for 0.0001
        # requests/s cost far more a token than flat out.
        planned = f"{p.requests_per_s:,.2f} requests/s"
        at_rate = p.cost_usd_per_hour / (rate * p.workload.osl_tokens * 3600) * 1e6 if rate else 0.0
        asked = (f", {fmt.per_million(at_rate)} at the "
                 f"{fmt.counted(rate, 'request/s', 'requests/s')} asked") if rate and rate < 0.95 * p.requests_per_s else ""
        rows.append(("Cost", f"${p.cost_usd_per_hour:,.2f}/h, {fmt.per_million(p.usd_per_million_output_tokens)} per million "
                             f"output tokens at the planned {planned}" + asked
                     + (f", {p.kwh_per_million_output_tokens:,.3f} kWh per million there"
                        if p.kwh_per_million_output_tokens is not None else "")))
    rows.append(("Why", p.why))
    s = p.solver
    loaded = p.workload.rate_requests_per_s is not None or p.workload.concurrency is not None
    if s.method == "walk":
        rows.append(("Solver", f"{_weighed(s, loaded)}, each at its largest batch within the targets"
                     + (", and no mix of layouts needs fewer" if s.mixes_checked else "") + ": proved"))
    elif s.method == "enumeration":
        rows.append(("Solver", f"{_weighed(s, loaded)}, and every mix of them that could beat replicas of one layout "
                               "(apsi.serving.mix.cover_free): proved"))
    else:
        bounded = f", {s.bounded:,} pipelined ones set aside by a bound" if s.bounded else ""
        rows.append(("Solver", f"CP-SAT over {s.kinds:,} replica kinds ({s.layouts:,} layouts weighed{bounded}): {s.status}"
                               + (f", gap {s.gap:.2%}" if s.status != "OPTIMAL" else ", proved")))
    rows += [("Note", n) for n in p.notes]
    return wrap(head + "\n\n" + "\n".join(f"  {k:<11} {v}" for k, v in rows), width) + "\n"


def serving_line(p: ServePlan) -> str:
    """The training plan's Serving line: the layout (each kind of a mix, with its replicas), the
    replicas for the default load, TPOT (the slowest kind's, for a mix)."""
    w = p.workload
    if len(p.groups) == 1:
        g = p.groups[0]
        what = f"{layout_words(g)}, batch {g.batch:,}, TPOT {_ms(g.tpot_ms)}"
    else:
        what = (" + ".join(f"{g.replicas:,} x {layout_words(g)} (batch {g.batch:,})" for g in p.groups)
                + f", TPOT up to {_ms(max(g.tpot_ms for g in p.groups))}")
    return (f"{_title(p)} {p.precision}: {what}; "
            f"{_n(p.replicas)} replica{'s' if p.replicas != 1 else ''} ({_n(p.gpus)} GPU{'s' if p.gpus != 1 else ''}) for "
            f"{fmt.counted(w.rate_requests_per_s or 0, 'request/s', 'requests/s')} of {w.isl_tokens:,} in / {w.osl_tokens:,} out (apsi serve)")


def frontier_text(points: list[ServeFrontierPoint], width: int | None = None) -> str:
    header = ("GPU", "TP", "PP", "EP", "attn DP", "batch", "tokens/s/GPU", "tokens/s/user", "TTFT ms", "TPOT ms")
    rows = [(x.gpu, str(x.tp), str(x.pp), str(x.ep), str(x.attention_dp), f"{x.batch:,}",
             f"{x.output_tokens_per_s_per_gpu:,.0f}", f"{x.output_tokens_per_s_per_user:,.1f}", f"{x.ttft_ms:,.1f}",
             f"{x.tpot_ms:,.1f}") for x in points]
    lines = columns(header, rows, [False] + [True] * 9, width)
    note = ("Each row: a replica layout at a batch that no other layout and batch beats on both output tokens/s "
            "per GPU and per user.")
    return "\n".join(lines) + "\n\n" + wrap(note, width) + "\n"


def disagg_text(p: DisaggPlan, width: int | None = None) -> str:
    """The disaggregated plan block: each pool's replicas, their memory and latencies, the TTFT and
    TPOT at the rate, and the aggregated plan it was weighed against."""
    from apsi.serving.engines import engines

    what = f"{p.model_name} ({billions(p.params)} params)" if p.model_name else f"{human(p.params)} params"
    head = (f"Disaggregated serving plan: {what} on {engines()[p.engine].title} {p.engine_version}, {p.precision} "
            f"weights, {p.kv_precision} KV cache: {_n(p.gpus)} GPUs, {fmt.counted(p.prefill_replicas, 'prefill replica')} + "
            f"{fmt.counted(p.decode_replicas, 'decode replica')}")
    rows: list[tuple[str, str]] = [("Workload", _targets(p))]
    for g in p.groups:
        m = g.memory
        where = f"{g.replicas:,} x {_words(g.tp, g.pp, g.ep, g.attention_dp)} on {g.gpu} ({fmt.counted(g.gpus, 'GPU')})"
        if g.role == "prefill":
            rows.append(("Prefill", f"{where}: a prompt's prefill {_ms(g.prefill_ms)}, queue {_ms(g.queue_ms)} at "
                                    f"{g.utilization:.0%} busy, {g.requests_per_s_per_replica:,.2f} requests/s per "
                                    f"replica within the TTFT target, KV out {_ms(g.kv_transfer_ms)}"))
        else:
            rows.append(("Decode", f"{where}: batch {g.batch:,} at the rate, TPOT {_ms(g.tpot_ms)}, "
                                   f"{g.requests_per_s_per_replica:,.2f} requests/s per replica at most, KV in "
                                   f"{_ms(g.kv_transfer_ms)}"))
        rows.append(("Memory/GPU", f"{_gib(m.weights_gib)} GiB weights + {_gib(m.activations_gib)} activations + "
                                   f"{_gib(m.overhead_gib)} overhead + {_gib(m.kv_cache_gib)} KV cache "
                                   f"({m.kv_cache_tokens:,} tokens) of {_gib(m.memory_gib)} GiB"))
    rows.append(("Latency", f"TTFT {_ms(p.ttft_ms)} (p50 {_ms(p.ttft_p50_ms)}, p90 {_ms(p.ttft_p90_ms)}, "
                            f"p99 {_ms(p.ttft_p99_ms)}), TPOT {_ms(p.tpot_ms)}"))
    rows.append(("Throughput", f"{fmt.counted(p.requests_per_s, 'request/s', 'requests/s')}, {p.output_tokens_per_s:,.0f} output tokens/s, "
                               f"{p.output_tokens_per_s / p.gpus:,.0f} per GPU"))
    if p.cost_usd_per_hour is not None and p.usd_per_million_output_tokens is not None:
        # The pools are sized to the rate: the cost per token is at it.
        rows.append(("Cost", f"${p.cost_usd_per_hour:,.2f}/h, {fmt.per_million(p.usd_per_million_output_tokens)} "
                             "per million output tokens at the rate"))
    rows.append(("Why", p.why))
    s = p.solver
    aside = f"; {s.bounded:,} prefill kinds set aside by a bound on their GPUs and the rate" if s.bounded else ""
    rows.append(("Solver", f"CP-SAT over {s.kinds:,} prefill and decode kinds ({s.layouts:,} layouts weighed{aside}), "
                           "the pool counts and the decode layout together: "
                           + ("proved" if s.status == "OPTIMAL" else f"{s.status}, gap {s.gap:.2%}")))
    rows += [("Note", n) for n in p.notes]
    return wrap(head + "\n\n" + "\n".join(f"  {k:<11} {v}" for k, v in rows), width) + "\n"
