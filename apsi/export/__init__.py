"""From plan to launch: a plan as the configuration a framework runs.

Owns export_config(plan, format) and the formats' registry. Each format is one small module
(apsi/export/megatron.py, bridge.py, torchtitan.py, deepspeed.py, slurm.py) that turns a Plan
into text with the framework's own argument names (MLM-ARGS, MB-RECIPE, TT-CFG, DS; keys in
docs/sources.md), or refuses in one line what that framework cannot express. A format exports
only a plan made under its framework (the layout was judged by that framework's rules); slurm
wraps the plan's own framework. Every file
opens with apsi's version, the plan's summary, the predicted memory per GPU and step time, and
the framework version whose names it uses. Pure: a Plan in, text out; a plan read back from its
JSON exports the same text.
"""

from __future__ import annotations

from apsi.errors import InputError, unknown

FORMATS: tuple[str, ...] = ("megatron", "megatron-bridge", "torchtitan", "deepspeed", "slurm")
"""Export formats, each named for what it launches."""

FRAMEWORK_OF: dict[str, str | None] = {"megatron": "megatron", "megatron-bridge": "megatron",
                                       "torchtitan": "torchtitan", "deepspeed": "deepspeed", "slurm": None}
"""The framework whose plan a format exports (None: the plan's own)."""


def check_format(format: object) -> str:
    """The format's name, or an error suggesting the nearest."""
    if not isinstance(format, str) or format.strip().lower() not in FORMATS:
        raise unknown("export format", format, FORMATS)
    return format.strip().lower()


def default_framework(format: str) -> str | None:
    """The framework a plan must be made under to export `format` (None: any)."""
    return FRAMEWORK_OF[check_format(format)]


def export_config(plan, format: str) -> str:
    """The launch configuration of `plan` (an apsi Plan) in `format` (FORMATS), as text; an
    ApsiError naming what is missing when the format cannot express the plan."""
    from apsi.model.schema import Plan

    if not isinstance(plan, Plan):
        raise InputError(f"export_config needs a Plan (from plan() or evaluate()), got {type(plan).__name__}")
    name = check_format(format)
    wanted = FRAMEWORK_OF[name]
    if plan.framework == "reference":
        raise InputError("a reference-arithmetic plan has no framework to launch: plan it under a framework "
                         f"(framework='{wanted or 'megatron'}') to export {name}")
    if wanted is not None and plan.framework != wanted:
        raise InputError(f"the plan is a {plan.framework} plan, judged by {plan.framework}'s rules; {name} exports "
                         f"{wanted} plans: plan it again with framework='{wanted}' (--framework {wanted})")
    from apsi.export import bridge, deepspeed, megatron, slurm, torchtitan

    module = {"megatron": megatron, "megatron-bridge": bridge, "torchtitan": torchtitan, "deepspeed": deepspeed,
              "slurm": slurm}[name]
    return module.render(plan)


def read_plan(text: str):
    """A Plan from its --json text, or one line saying why it is not one."""
    from pydantic import ValidationError

    from apsi.model.schema import Plan

    try:
        return Plan.model_validate_json(text)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the document"
        raise InputError(f"not an apsi plan (the JSON of `apsi plan --json`): {where}: {first['msg']}") from None
