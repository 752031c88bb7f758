"""The Plan of a training run, assembled around a layout whose memory and duration are known.

Owns finish() (data, tokens, cost and energy, the model's description, the reference's serving
quotient, notes, and under a framework the deferred serving plan: Plan.defer), money_of() (days,
GPU-hours, cost and energy of a run), model_shape() and serving() (the weights and KV cache a
serving GPU count is sized by). Every path that makes a training plan ends here: the framework
walks (apsi.training.frameworks.evaluate) and the reference arithmetic
(apsi.training.reference.planning). No search and no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypedDict

from apsi.catalog import GPU
from apsi.errors import InputError
from apsi.inputs.question import Setup
from apsi.model import arithmetic as ar
from apsi.model.schema import Binding, GpuChoice, Layout, MemoryBreakdown, ModelShape, Plan, ServingPlan, SolverReport
from apsi.inputs.modelspec import ModelSpec
from apsi.model.serve_schema import ServePlan
from apsi.units import GIB, SECONDS_PER_DAY


class Money(TypedDict):
    """Days, GPU-hours, the $/GPU-hour price, cost and energy of one run (money_of)."""

    days: float
    gpu_hours: float
    price: float | None
    cost_usd: float | None
    energy_mwh: float | None


def money_of(s: Setup, gpus: int, secs: float) -> Money:
    """Days, GPU-hours, cost and energy of a run of `secs` seconds on `gpus` of s.gpu."""
    hours = gpus * secs / 3600
    price = s.price_per_hour()
    watts = s.gpu.tdp_w
    return Money(days=secs / SECONDS_PER_DAY, gpu_hours=hours, price=price,
                 cost_usd=None if price is None else hours * price,
                 energy_mwh=None if watts is None else hours * watts * s.pue / 1e6)


def model_shape(m: ModelSpec) -> ModelShape:
    """The plan's description of the model."""
    a = m.architecture
    return ModelShape(params=m.params, active_params=m.active, layers=a.layers, width=a.width, heads=a.heads,
                      moe=m.active < m.params, name=m.name, source=m.source, origin=m.origin, family=m.family,
                      architecture=a, parts=m.parts, active_parts=m.active_parts, mtp_params=m.mtp_params,
                      derived=list(m.derived), flops_convention=m.flops_convention)


def serving(s: Setup, batch: int = 1) -> ServingPlan:
    """Weights (the model without its MTP blocks) and the KV cache of `batch` sequences at s.precision."""
    per = ar.SERVING_BYTES[s.precision]
    weights = s.params * per
    kv = ar.kv_cache_bytes(s.model.architecture, s.seq, batch, per)
    usable = ar.USABLE_FRACTION * s.gpu.memory_gib * GIB
    return ServingPlan(
        gpu=s.gpu.name, gpus=ar.gpus_for_bytes(weights + kv, usable), precision=s.precision, params=s.params,
        model_name=s.model.name, kv_cache_bytes_per_token=ar.kv_cache_bytes(s.model.architecture, 1, 1, per),
        weights_gib=weights / GIB, kv_cache_gib=kv / GIB, total_gib=(weights + kv) / GIB,
        seq=s.seq, batch=batch,
    )


@dataclass(frozen=True)
class TrainedServing:
    """The serving plan a framework plan shows (apsi.serving.trained.for_training), as the plan's
    deferred `serve` (Plan.defer): worked out when first read, never by the walk or evaluate()."""

    model: ModelSpec
    gpu: GPU
    precision: str
    catalog: str | None
    price: float | None

    portable = True
    """Data only: a pickled plan (apsi run --jobs) carries it unread."""

    def __call__(self) -> tuple[ServePlan | None, str | None]:
        from apsi.serving.trained import for_training

        return for_training(self.model, self.gpu, self.precision, self.catalog, self.price)


def finish(s: Setup, layout: Layout, memory: MemoryBreakdown, gpus: int, secs: float, report: SolverReport,
           binding: Binding, *, objective: str = "gpus", gpu_choice: GpuChoice | None = None,
           notes: list[str] | None = None, framework: str = "reference", flops: float | None = None) -> Plan:
    """The Plan around a layout whose memory and duration are known: data, cost, serving, notes."""
    money = money_of(s, gpus, secs)
    for what, value in (("days", money["days"]), ("GPU-hours", money["gpu_hours"]), ("cost", money["cost_usd"]),
                        ("energy", money["energy_mwh"])):
        if value is not None and not (math.isfinite(value) and value < 1e30):
            told = "not a finite number" if not math.isfinite(value) else f"{value:.3g}, past 1e30"
            raise InputError(f"the plan's {what} is {told}: the inputs are beyond what apsi plans (a smaller "
                             "price, or a larger MFU, link efficiency, days or cluster)")
    window = s.model.architecture.sliding_window
    model_notes = list(s.model.notes)
    if window is not None and s.seq > window:
        model_notes.append(f"the model's {window:,}-token sliding-window attention is not modelled: attention FLOPs, "
                           f"activations and the KV cache are those of full attention over {s.seq:,} tokens")
    plan = Plan(
        gpu=s.gpu.name, gpus=gpus, nodes=math.ceil(gpus / s.gpu.gpus_per_node), gpus_per_node=s.gpu.gpus_per_node,
        layout=layout,
        memory_per_gpu_gib=memory.total_gib, memory=memory, fits=memory.total_gib <= memory.usable_gib,
        days=money["days"], target_days=s.days, target_met=money["days"] <= s.days,
        total_flops=ar.training_flops(s.model, s.tokens, s.seq, layout.recompute) if flops is None else flops,
        steps=math.ceil(s.tokens / s.batch_tokens), batch_tokens=s.batch_tokens,
        batch_sequences=s.batch_sequences, tokens=s.tokens, data_gib=s.tokens * ar.TOKEN_ID_BYTES / GIB,
        precision=s.precision, optimizer=s.optimizer, mfu=s.mfu, seq=s.seq,
        peak_tflops=s.peak_flops / 1e12,
        model=model_shape(s.model), model_flops_per_token=ar.flops_per_token(s.model, s.seq),
        serving=serving(s), serve=None, solver=report, binding=binding, objective=objective,
        gpu_hours=money["gpu_hours"], price_usd_per_gpu_hour=money["price"], cost_usd=money["cost_usd"],
        power_w_per_gpu=s.gpu.tdp_w, pue=s.pue, energy_mwh=money["energy_mwh"], gpu_choice=gpu_choice,
        notes=model_notes + (notes or []), framework=framework,
    )
    if framework == "reference":
        return plan
    return plan.defer(("serve", "serve_refused"), TrainedServing(s.model, s.gpu, s.precision, s.catalog, s.price))
