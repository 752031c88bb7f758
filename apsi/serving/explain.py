"""The words of a serving plan: what decided its batch and its replicas (the Why line), its notes
(a GPU its engine was not fitted on, KV-starved layouts, the engine's defaults), and why nothing
serves when no layout does. Reads what apsi.serving.walk and apsi.serving.replica computed; decides
nothing."""

from __future__ import annotations

from apsi import fmt
from apsi.catalog import GPU
from apsi.serving import admission
from apsi.serving import replica as rp
from apsi.serving.engine import calibrated_on, maker
from apsi.serving.inputs import VENDORS, Question
from apsi.serving.queues import FRONT_END_MOST_BUSY, front_end_busy, slot_wait
from apsi.serving.walk import Kind, Layouts, Sized
from apsi.units import GIB


def _seconds(s: float) -> str:
    """A wait in words: ms below a second, seconds below 100, minutes above."""
    return f"{s * 1e3:,.0f} ms" if s < 1 else f"{s:,.1f} s" if s < 100 else f"{s / 60:,.1f} minutes"


def layout_name(k: Kind) -> str:
    """A replica kind in words: its layout and GPU type."""
    return f"{k.replica.words} on {k.gpu.name}"


def limit(q: Question, s: Sized) -> str:
    """Why the batch is what it is, in words."""
    k = s.kind
    if s.limit == "tpot":
        return f"TPOT {q.targets.tpot_s * 1e3:g} ms decides: batch {k.batch:,} is the largest {layout_name(k)} runs within it"  # type: ignore[operator]
    if s.limit == "ttft":
        return (f"TTFT {'p99 ' if q.targets.p99 else ''}{q.targets.ttft_s * 1e3:g} ms decides: batch {k.batch:,} is "  # type: ignore[operator]
                f"the largest {layout_name(k)} runs within it")
    if s.limit == "kv_cache":
        return f"the KV cache decides: {layout_name(k)} holds {fmt.counted(k.max_batch, 'request')} of {held(q)}"
    if s.limit == "max_batch":
        return (f"{q.engine.title}'s max batch ({q.engine.on(k.gpu).max_sequences:,}"
                + (f" in each of {k.replica.dp} attention-DP groups" if k.replica.dp > 1 else "")
                + f") decides the batch of {layout_name(k)}")
    return f"the load decides: each replica of {layout_name(k)} runs {s.batch:,} requests"


def held(q: Question) -> str:
    """What one request holds in the KV cache, in words (admission.held_tokens)."""
    w, e = q.workload, q.engine
    if e.admission == "reserve":
        return f"{w.isl + w.osl:,} tokens (reserved whole at admission)"
    return f"{admission.held_tokens(e, w):,.0f} tokens on average (paged as they grow)"


def _load(q: Question) -> str:
    """The question's load in words: '10 requests/s', '1 request in flight'."""
    if q.rate is not None:
        return fmt.counted(q.rate, "request/s", "requests/s")
    assert q.concurrency is not None
    return fmt.counted(q.concurrency, "request in flight", "requests in flight")


def why(q: Question, best: Sized, runner: Sized | None) -> str:
    """The Why line of a single-layout plan: what set the batch, the replicas the load needs, and the
    next best layout."""
    k = best.kind
    head = limit(q, Sized(k, 1, k.batch, k.point, k.limit))
    if best.replicas == 1 and best.batch < k.batch:
        # One replica carries the load below its capacity: the load, not a limit, sets its batch.
        load = _load(q)
        text = (f"the load decides: one replica of {layout_name(k)} ({k.replica.gpus:,} GPU"
                f"{'s' if k.replica.gpus != 1 else ''}) carries {load}, running {best.batch:,} "
                f"request{'s' if best.batch != 1 else ''} at a time (up to {k.batch:,} within the targets)")
        if runner is not None and runner.gpus == best.gpus:
            text += f"; {layout_name(runner.kind)} also needs {fmt.counted(runner.gpus, 'GPU')}, at TPOT {runner.point.tpot_s * 1e3:,.1f} ms"
        elif runner is not None:
            text += f"; the next best, {layout_name(runner.kind)}, needs {runner.gpus:,}"
        return text
    if q.rate is None and q.concurrency is None:
        tail = (f"; it gives the most output tokens/s per GPU meeting the targets "
                f"({best.point.requests_per_s * q.workload.osl / k.replica.gpus:,.0f})")
        if runner is not None:
            tail += (f", then {layout_name(runner.kind)} "
                     f"({runner.point.requests_per_s * q.workload.osl / runner.kind.replica.gpus:,.0f})")
        return head + tail + "; give rate or concurrency to size the replicas"
    if q.rate is not None:
        load, each = _load(q), f" ({k.point.requests_per_s:,.2f} requests/s per replica)"
    else:
        # The head names the replica's batch already, unless its attention-DP groups each hold part.
        load, each = _load(q), f" ({k.batch:,} per replica)" if k.replica.dp > 1 else ""
    text = (f"{head}{each}; {load} need{'s' if q.rate is None and q.concurrency == 1 else ''} "
            f"{best.replicas:,} replica{'s' if best.replicas != 1 else ''} ({best.gpus:,} GPU{'s' if best.gpus != 1 else ''}), "
            + (f"running {best.batch:,} requests ({best.batch - 1:,} on {best.lighter:,} of them)" if best.lighter else
               f"each running {best.batch:,} requests" if best.replicas > 1 else
               f"running {best.batch:,} request{'s' if best.batch != 1 else ''}"))
    if runner is not None:
        if runner.gpus == best.gpus:
            text += (f"; {layout_name(runner.kind)} also needs {fmt.counted(runner.gpus, 'GPU')}, at a higher TPOT "
                     f"({runner.point.tpot_s * 1e3:,.1f} ms)" if runner.point.tpot_s > best.point.tpot_s else
                     f"; {layout_name(runner.kind)} also needs {fmt.counted(runner.gpus, 'GPU')}")
        else:
            text += f"; the next best, {layout_name(runner.kind)}, needs {runner.gpus:,}"
    return text


def kv_starved(q: Question, k: Kind) -> bool:
    """Whether the KV cache holds too few requests to amortise the weights: the cache, not the
    engine's max batch, stops the batch; the cache of a full batch is smaller than the weights a
    decode step of that batch reads (an MoE layer's: the experts its tokens touch); and reading
    those weights takes more than twice the batch's FLOPs (replica.step_parts, a step of the full
    batch before any context: the FLOPs idle more than half the step), so each step reads mostly
    weights for few tokens. A batch near or past the GPU's ridge point is not starved whatever its
    cache (an MLA model's small latent cache at hundreds of sequences a GPU)."""
    # Per GPU: its attention-DP group's share of the sequences' cache.
    full = k.max_batch / k.replica.dp * admission.held_tokens(q.engine, q.workload) * k.shape.kv_bytes_per_token
    read = k.shape.dense_read_bytes + k.shape.expert_read_bytes * rp.touched(k.shape, k.max_batch)
    if k.max_batch >= q.engine.on(k.gpu).max_sequences * k.replica.dp or read <= full:
        return False
    read_s, compute_s = rp.step_parts(k.shape, k.max_batch, 0.0, 0.0, 0.0)
    # Starved: the GPU's FLOPs idle more than half of each full-batch step. DeepSeek-V3 FP8 at
    # attention DP 8 on eight H200s (2,392 requests) reads for 57 ms and computes for 43: its FLOPs
    # are three quarters busy, and it was called starved when a read merely outlasted the compute.
    return read_s > 2 * compute_s


AMD_VLLM_OVERESTIMATE = 0.81
"""The median by which vLLM's NVIDIA-fitted figures exceed AMD's own published vLLM throughput on
8 x MI300X (docs/validation.md, "AMD GPUs": benchmarks/serving_validation.amd_check over
benchmarks/serving/amd_vllm_perf.yaml's 16 rows, never fitted); tests/test_serving_admission.py holds it to
them. The uncalibrated Note gives it for a vLLM plan on an AMD GPU."""


def uncalibrated(q: Question, gpus: list[GPU]) -> list[str]:
    """The Note for the GPUs of a plan whose maker the engine's constants were not fitted on (none
    when all were): each GPU type once, in the order the plan uses them."""
    cal = q.engine.calibration
    foreign = list({g.name: g for g in gpus if not calibrated_on(cal, g)}.values())
    if not foreign:
        return []
    fitted = ", ".join(VENDORS.get(m, m) for m in cal.makers) or "no"
    makers = ", ".join(sorted({VENDORS.get(maker(g), maker(g)) for g in foreign}))
    known = ("; on AMD's own published vLLM runs (8 x MI300X, docs/validation.md) such figures read a median "
             f"{AMD_VLLM_OVERESTIMATE:.0%} above the throughput measured, so expect fewer tokens/s per GPU"
             if q.engine.name == "vllm" and any(maker(g) == "amd" for g in foreign) else "")
    return [f"uncalibrated on {', '.join(g.name for g in foreign)}: {q.engine.title}'s timing constants were "
            f"fitted on {fitted} GPUs only, and no {makers}-published measurement is fitted here, so the "
            f"figures are those efficiencies applied to its datasheet{known}"]


def notes(q: Question, found: Layouts, chosen: list[Sized]) -> list[str]:
    """The plan's Note lines: an uncalibrated GPU maker first, KV-starved layouts and front ends past
    the model's range, the inputs' own notes, and the engine's defaults."""
    notes = uncalibrated(q, [s.kind.gpu for s in chosen])
    capacity = sum(s.kind.point.requests_per_s * s.replicas for s in chosen)
    for s in chosen:
        k = s.kind
        if kv_starved(q, k):
            notes.append(f"{layout_name(k)} is KV-starved: its KV cache holds {fmt.counted(k.max_batch, 'request')}, whose cache is "
                         f"less than its weights ({k.shape.weights_bytes / GIB:,.1f} GiB per GPU), so each decode "
                         "step reads mostly weights for few tokens")
        if q.rate is not None and s.point.requests_per_s > 0:
            # Random arrivals at a replica near the requests its KV cache (or engine) holds wait for
            # a slot (Erlang C), which the TTFT leaves out: said where it is a tenth of the TTFT or
            # more. Each replica's arrivals are its kind's share of the rate (apsi.serving.plan._shares),
            # each holding a slot for batch / requests_per_s (Little's law at its batch).
            arrivals = q.rate * k.point.requests_per_s / capacity
            held_s = s.batch / s.point.requests_per_s
            share, waited = slot_wait(k.max_batch, arrivals * held_s, held_s)
            if waited >= 0.1 * s.point.ttft_s:
                said = "every request would wait without end" if waited == float("inf") else (
                    f"{share:.0%} of requests would find every slot held and wait {_seconds(waited)} for one "
                    "on average (M/M/c)")
                notes.append(f"each replica of {layout_name(k)} runs {arrivals * held_s:,.1f} requests on average of the "
                             f"{k.max_batch:,} it holds at once: with arrivals at random, {said}, which its TTFT leaves "
                             "out (more replicas, or a layout that holds more, would shorten it)")
        busy = front_end_busy(k.shape.stream_s, s.batch, s.point.tpot_s)
        if busy > FRONT_END_MOST_BUSY:
            cal = q.engine.calibration
            notes.append(f"the front end of {layout_name(k)} would be {busy:.0%} busy streaming "
                         f"{s.batch / s.point.tpot_s:,.0f} output tokens/s ({q.engine.title}'s fitted "
                         f"{cal.stream_us:.1f} microseconds a token): past {FRONT_END_MOST_BUSY:.0%} the model holds "
                         f"its wait at {1 / (1 - FRONT_END_MOST_BUSY):g} x its {cal.request_ms:,.0f} ms, so the TTFT is "
                         "out of the model's range there (the GPUs' steps are not)")
    starved = [k for k in found.kinds if kv_starved(q, k) and all(k is not s.kind for s in chosen)]
    if starved:
        notes.append("KV-starved layouts weighed and not chosen: " + ", ".join(
            f"{layout_name(k)} (batch <= {k.max_batch:,})" for k in starved[:4]) + (" ..." if len(starved) > 4 else ""))
    notes.extend(q.placed)
    if q.full_attention_size and q.architecture.kv_heads > 1:
        # A divisor of the heads below them: 8 where it divides (Llama's), else the largest that does.
        heads = q.architecture.heads
        fewer = 8 if heads > 8 and heads % 8 == 0 else max(d for d in range(1, heads) if heads % d == 0)
        notes.append(f"a bare size keeps the shape rule's attention: {fmt.counted(q.architecture.kv_heads, 'KV head')}, "
                     "one per query head (no grouped-query attention), so its KV cache is full multi-head attention's; "
                     f"give --kv-heads (such as {fewer}) for grouped-query attention")
    if q.skipped:
        notes.append("left out: " + "; ".join(q.skipped))
    fractions = sorted({s.kind.shape.memory_fraction for s in chosen})
    # The max batch and the step's token budget by the GPUs chosen where the engine's differ by GPU
    # (vLLM's 256 and 2,048 below 70 GiB or on an A100).
    by_gpu = {s.kind.gpu.name: q.engine.on(s.kind.gpu) for s in chosen}
    caps = sorted({(e.max_sequences, e.chunk_tokens) for e in by_gpu.values()}, reverse=True)
    if len(caps) > 1 or (caps and caps[0] != (q.engine.max_sequences, q.engine.chunk_tokens)):
        batch = "; ".join(f"max batch {e.max_sequences:,} and steps of {e.chunk_tokens:,} tokens on {g}"
                          for g, e in by_gpu.items())
    else:
        batch = f"max batch {q.engine.max_sequences:,}"
    notes.append(f"{q.engine.title} {q.engine.version} defaults: {q.engine.memory_rule} memory rule at "
                 f"{', '.join(f'{f:g}' for f in fractions)}, {batch}, KV pages of "
                 f"{fmt.counted(q.engine.block_tokens, 'token')}; calibration: {q.engine.calibration.rows}")
    return notes


def nothing(q: Question, found: Layouts) -> str:
    """Why no layout serves: nothing fits, or nothing meets the targets (the closest, by how much)."""
    w = q.workload
    if not found.missed:
        # The layout that comes closest: the most room left per GPU after its weights.
        shapes = [(rp.shape(q.architecture, g, q.engine.on(g), q.weights, q.kv, r, q.unshaped_experts), g, r)
                  for g in q.gpus for r in rp.replicas(q.architecture, g, q.tp, q.pp)]
        pins = " and ".join(f"{k} {v}" for k, v in (("tp", q.tp), ("pp", q.pp)) if v is not None)
        where = f"{', '.join(g.name for g in q.gpus)}" + (f" with {pins}" if pins else "")
        if not shapes:
            if q.tp is not None and q.pp is not None and q.pp > 1:
                # (apsi.serving.replica.replicas: the stages pack node by node)
                nodes = ", ".join(f"{g.name}: {g.gpus_per_node}" for g in q.gpus)
                return (f"no replica layout exists on {where}: under pipeline parallelism a stage's TP must divide "
                        f"a node's GPUs ({nodes}) or be whole nodes, so that no TP group straddles two hosts")
            return f"no replica layout exists on {where}"
        sh, g, r = max(shapes, key=lambda x: (x[0].kv_bytes / x[0].kv_bytes_per_token, -x[2].gpus))
        one = admission.tokens_per_sequence(q.engine, w) * sh.kv_bytes_per_token
        room = sh.kv_bytes + sh.weights_bytes
        head = (f"no replica fits on {where}: at best ({r.words} on {g.name}) each GPU holds {sh.weights_bytes / GIB:,.1f} "
                f"GiB of weights, and {q.engine.title} leaves {room / GIB:,.1f} GiB for weights and KV cache "
                f"({sh.memory_fraction:g} of {sh.memory_bytes / GIB:,.1f} GiB by its memory rule)")
        if sh.weights_bytes >= room:  # the weights alone do not fit: no request length would help
            return head + "; try a wider layout, fp8 or fp4 weights or a larger-memory GPU"
        return (head + f", short of one request of {w.isl + w.osl:,} tokens ({one / GIB:,.2f} GiB of KV cache); try a "
                "wider layout, fp8 or fp4 weights, a larger-memory GPU or shorter requests")
    parts = []
    if q.targets.tpot_s is not None:
        k = min(found.missed, key=lambda k: (k.point.tpot_s, k.replica.gpus))
        if k.point.tpot_s > q.targets.tpot_s:
            parts.append(f"TPOT {q.targets.tpot_s * 1e3:g} ms: the lowest reachable is {k.point.tpot_s * 1e3:,.1f} ms "
                         f"({layout_name(k)}, batch 1), {k.point.tpot_s / q.targets.tpot_s:,.2f}x the target")
    if q.targets.ttft_s is not None:
        k = min(found.missed, key=lambda k: (q.targets.ttft(k.point), k.replica.gpus))
        reach = q.targets.ttft(k.point)
        if reach > q.targets.ttft_s:
            parts.append(f"TTFT {'p99 ' if q.targets.p99 else ''}{q.targets.ttft_s * 1e3:g} ms: the lowest reachable is "
                         f"{reach * 1e3:,.1f} ms ({layout_name(k)}, batch 1), {reach / q.targets.ttft_s:,.2f}x the target")
    if not parts:
        parts.append("TPOT and TTFT cannot both be met by one layout")
    return "no layout meets the targets: " + "; ".join(parts)
