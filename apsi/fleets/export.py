"""A fleet plan's runs as launch configurations: one file per scheduled run, as its plan exports.

Owns `fleet_exports()`. Each scheduled run's layout is a point of its frontier, and each frontier
point is the plan of `plan(..., gpus=N, objective="days")` for its N (apsi.api.frontier,
apsi.training.frameworks.frontier; tests/test_frontier.py): that plan, made again for the run's GPU type and
the layout's GPUs, is handed to apsi.outputs.export.export_config, so a run exports exactly as
`apsi plan ... --export FORMAT` would. A run planned under the reference arithmetic has no
framework to launch and is refused in one line, as a plan is. No files are written here (the CLI
writes them).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from apsi.errors import ApsiError
from apsi.fleets.spec import FleetError

if TYPE_CHECKING:
    from apsi.fleets.result import FleetResult
    from apsi.fleets.spec import Fleet

def fleet_exports(spec: Fleet, result: FleetResult, fmt: str) -> dict[str, str]:
    """{file name: launch configuration} for each scheduled run of `result` (the plan of `spec`),
    in the runs' order; a run that cannot be exported is a FleetError naming it."""
    from apsi.outputs.export import TARGETS, check_format, export_config
    from apsi.api.plan import plan

    name = check_format(fmt)
    out: dict[str, str] = {}
    for run, row in zip(spec.runs, result.runs):
        if not row.scheduled or row.layout is None:
            continue
        lay = row.layout
        gpus = lay.tp * lay.pp * lay.cp * lay.dp  # the layout's GPUs (apsi.model.schema.Layout)
        try:
            made = plan(**run.inputs, gpu=row.gpu_type, gpus=gpus, objective="days",
                        **({"catalog": spec.catalog} if spec.catalog else {}))
            assert made.layout == lay, (run.name, made.layout, lay)  # the frontier's point is the plan
            text = export_config(made, name)
        except ApsiError as err:
            raise FleetError(f"run {run.name!r} cannot be exported as {name}: {err}") from None
        out[_file_name(run.name, out, TARGETS[name].extension)] = text
    return out


def _file_name(run: str, taken: dict[str, str], extension: str) -> str:
    """A file name for a run: its name with anything but letters, digits, dot, dash and underscore
    as '_', never starting with a dot or a dash (a file named "--help.sh" is an option to the tools
    that handle it), numbered when two runs would share one."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", run).strip("._-") or "run"
    candidate, k = f"{stem}.{extension}", 2
    while candidate in taken:
        candidate, k = f"{stem}-{k}.{extension}", k + 1
    return candidate
