"""From plan to launch: a plan as the configuration a framework runs.

Owns export_config(plan, format) and the formats' registry. Each format is one small module
(apsi/outputs/export/megatron.py, bridge.py, torchtitan.py, deepspeed.py, slurm.py) that turns a Plan
into text with the framework's own argument names (MLM-ARGS, MB-RECIPE, TT-CFG, DS; keys in
docs/sources.md), or refuses in one line what that framework cannot express. A format exports
only a plan made under its framework (the layout was judged by that framework's rules); slurm
wraps the plan's own framework. Every file
opens with apsi's version, the plan's summary, the predicted memory per GPU and step time, and
the framework version whose names it uses. Pure: a Plan in, text out; a plan read back from its
JSON exports the same text.

A plan read back from its JSON (read_plan, for `apsi export` and `apsi compare`) must keep the
rules a fresh plan keeps (apsi.outputs.export.checks.check_plan): a hand-edited one that does not is
refused in one line. Whatever the plan, what it writes cannot run as a command it did not ask
for: every value in a shell script is one shell word (shlex.quote, or a placeholder apsi itself
writes), a value holding a character that is not printable is refused, and the plan's words in
comments and Python strings are escaped (checks.comment_text, checks.py_string).
"""

from __future__ import annotations

import importlib
from typing import Any, NamedTuple

from apsi.errors import InputError, brief, unknown


class Target(NamedTuple):
    """One export format: the module under apsi.outputs.export whose render(plan) writes it, the
    framework whose plans it launches (None: the plan's own, which it wraps), and its file's
    extension (a fleet writes one file per run: apsi.fleets.export)."""

    module: str
    framework: str | None
    extension: str


TARGETS: dict[str, Target] = {
    "megatron": Target("megatron", "megatron", "sh"),
    "megatron-bridge": Target("bridge", "megatron", "py"),
    "torchtitan": Target("torchtitan", "torchtitan", "py"),
    "deepspeed": Target("deepspeed", "deepspeed", "sh"),
    "slurm": Target("slurm", None, "sbatch"),
}
"""Every export format, declared once: a new one is an entry here and its module (render(plan));
the CLI's choices and help, the fleet's files and each framework's formats follow from it."""
FORMATS: tuple[str, ...] = tuple(TARGETS)
"""Export formats, each named for what it launches."""
FRAMEWORK_OF: dict[str, str | None] = {name: t.framework for name, t in TARGETS.items()}
"""The framework whose plan a format exports (None: the plan's own)."""


def formats_of(framework: str) -> tuple[str, ...]:
    """The formats that launch plans made under `framework` (those that wrap any plan aside)."""
    return tuple(name for name, t in TARGETS.items() if t.framework == framework)


def formats_words() -> str:
    """The formats in words, for help texts: "megatron, megatron-bridge, ... or slurm"."""
    return ", ".join(FORMATS[:-1]) + " or " + FORMATS[-1]


def check_format(format: object) -> str:
    """The format's name, or an error suggesting the nearest."""
    if not isinstance(format, str) or format.strip().lower() not in FORMATS:
        from apsi.serving.engines import ENGINES

        if isinstance(format, str) and format.strip().lower() in ENGINES:
            # A serving engine's configuration is a serving plan's: apsi serve writes it.
            raise InputError(f"export format {format.strip()!r} is a serving engine's: apsi serve ... --export "
                             f"{format.strip().lower()} writes it; a training plan exports to {', '.join(FORMATS)}")
        raise unknown("export format", format, FORMATS)
    return format.strip().lower()


def default_framework(format: str) -> str | None:
    """The framework a plan must be made under to export `format` (None: any)."""
    return FRAMEWORK_OF[check_format(format)]


def export_config(plan, format: str, job: Any = None) -> str:
    """The launch configuration of `plan` (an apsi Plan) in `format` (FORMATS), as text; an
    ApsiError naming what is missing when the format cannot express the plan. `job` (slurm only:
    apsi.outputs.export.slurm.Job) places it in a fleet's schedule."""
    from apsi.model.schema import Plan

    if not isinstance(plan, Plan):
        raise InputError(f"export_config needs a Plan (from plan() or evaluate()), got {type(plan).__name__}")
    name = check_format(format)
    wanted = FRAMEWORK_OF[name]
    from apsi.training.frameworks import FRAMEWORKS

    if plan.framework not in FRAMEWORKS:
        raise InputError(f"the plan's framework {brief(plan.framework)} is not one apsi models: valid: "
                         f"{', '.join(FRAMEWORKS)}")
    if plan.framework == "reference":
        raise InputError("a reference-arithmetic plan has no framework to launch: plan it under a framework "
                         f"(--framework {wanted or 'megatron'}, framework='{wanted or 'megatron'}') to export {name}")
    if wanted is not None and plan.framework != wanted:
        raise InputError(f"the plan is a {plan.framework} plan, judged by {plan.framework}'s rules; {name} exports "
                         f"{wanted} plans: plan it again with framework='{wanted}' (--framework {wanted})")
    if job is not None:
        import datetime as dt
        import re

        from apsi.outputs.export.slurm import Job

        if name != "slurm":
            raise InputError(f"job places a run in a fleet's schedule, which only the slurm export writes; leave job "
                             f"out for {name}")
        if not (isinstance(job, Job) and isinstance(job.name, str) and re.fullmatch(r"[A-Za-z0-9._-]+", job.name)
                and isinstance(job.begin, dt.date) and isinstance(job.days, (int, float))
                and not isinstance(job.days, bool) and 0 < job.days < 1e6):
            raise InputError(f"job must be an apsi.outputs.export.slurm.Job(name, begin, days): a name of letters, "
                             f"digits, '.', '-' and '_', a date and days from 0 to 1e6; got {brief(job)}")
    from apsi.outputs.export.checks import check_plan

    check_plan(plan, words=False)  # a Plan built or copied by hand keeps a fresh plan's rules too
    module = importlib.import_module(f"apsi.outputs.export.{TARGETS[name].module}")
    text: str = module.render(plan) if job is None else module.render(plan, job)
    return text


def _without_run_name(text: str) -> str:
    """A row of `apsi run --format json` (a Plan with its run's `name` first) as the Plan's JSON;
    any other text as it is."""
    import json

    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return text
    if isinstance(data, dict) and "name" in data and {"layout", "gpu", "framework"} <= data.keys():
        data.pop("name")
        return json.dumps(data)
    return text


def read_plan(text: str, purpose: str = "export"):
    """A Plan from its --json text that keeps the rules a fresh plan keeps (checks.check_plan),
    or one line saying why it is not one (`purpose`: export or compare, what the advice is for)."""
    from pydantic import ValidationError

    from apsi.outputs.export.checks import check_plan, comment_text, field_path
    from apsi.model.schema import Plan

    text = _without_run_name(text)
    try:
        # Strict: a hand-edited "tp": true, "1" or 1.0 is not the whole number a plan writes.
        plan = Plan.model_validate_json(text, strict=True)
    except ValidationError as err:
        from apsi.textfiles import json_kind

        advice = {"serving": (", which has no training launch to export" if purpose == "export"
                              else ": apsi compare weighs training plans (apsi plan --json)"),
                  "runs": ": save one of its rows (a training run's row is its plan, with its name first)",
                  "fleet": ": its runs export with apsi fleet FILE --export FORMAT --export-dir DIR",
                  "frontier": ": plan one of its points with apsi plan ... --gpus N --json"}
        kind, words = json_kind(text)
        if kind in advice:
            raise InputError(f"not an apsi plan (the JSON of `apsi plan --json`): it is {words}{advice[kind]}") from None
        first = err.errors()[0]
        msg = first["msg"].removeprefix("Value error, ")
        raise InputError(f"not an apsi plan (the JSON of `apsi plan --json`): {field_path(tuple(first['loc']))}: "
                         f"{comment_text(' '.join(msg.split()))}") from None
    return check_plan(plan)
