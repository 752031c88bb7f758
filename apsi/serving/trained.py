"""The serving plan a training plan shows (its Serving line): the trained model on the plan's GPU type.

Owns the question a training plan asks of the serving model: the model the plan placed (its
architecture, experts placed for a bare MoE size: apsi.inputs.modelspec.placed) on the plan's GPU type
under the default engine, at the training precision where the GPU serves it (fp8, else bf16),
for DEFAULT_RATE. It is `apsi serve` on the same inputs: the same question (apsi.serving.inputs),
the same answer (apsi.serving.plan.answered). A training plan defers it (apsi.model.schema.Plan):
worked out when the line, the JSON's serve block or plan.serve is read.
"""

from __future__ import annotations

from typing import Any

from apsi.errors import InputError
from apsi.model.serve_schema import ServePlan

DEFAULT_RATE = 10.0
"""The load a training plan's Serving line sizes replicas for: 10 requests/s of the default
1,000 in / 1,000 out (apsi.serving.inputs.DEFAULT_ISL), said on the line; `apsi serve` takes any."""


def for_training(model: Any, gpu: Any, precision: str, catalog: str | None,
                 price: float | None) -> tuple[ServePlan | None, str | None]:
    """The serving plan of the trained model (a ModelSpec, as the plan placed it) on `gpu`, and
    None; or None and the one line `apsi serve` gives for the same question when the GPU cannot
    serve it (no serving precision, no bandwidth figure, the engine does not run on it, the request
    longer than the model's context) or no replica fits: `apsi serve MODEL --gpu GPU --precision P
    --rate 10` (P the training precision where the GPU serves it, else bf16)."""
    from apsi.serving import replica as rp
    from apsi.serving.inputs import question
    from apsi.serving.plan import answered

    weights = "fp8" if precision == "fp8" and "fp8" in rp.weight_precisions(gpu) else "bf16"
    try:  # a GPU without the weights' tensor cores or a bandwidth figure is refused here too
        q = question(None, model=model, engine=None, gpu=gpu.name, precision=weights, kv_precision=None, isl=None,
                     osl=None, prefix=None, ttft=None, tpot=None, rate=DEFAULT_RATE, concurrency=None, inventory=None,
                     objective=None, active=None, catalog=catalog, price=price, pue=None, architecture={})
    except InputError as err:
        return None, str(err)
    answer = answered(q)
    return (None, answer) if isinstance(answer, str) else (answer, None)
