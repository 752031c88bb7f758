"""The training objectives, declared once: what `objective` (plan(), --objective, a scenario's
key) may name, each with what it minimises.

Everything else follows from it: the question's check (apsi.inputs.question), the CLI's choices
and help (apsi.cli.options), the walk each framework decides it by (its key in
apsi.training.frameworks.objectives.OBJECTIVES, which tests/test_interface.py holds to these
names) and the reference arithmetic's program (apsi.training.reference.planning, which refuses
in one line an objective its program has no model for). Plain data: `apsi --help` reads it.
"""

from __future__ import annotations

OBJECTIVES: dict[str, str] = {
    "gpus": "the fewest GPUs meeting the target",
    "days": "the shortest run within the cap",
    "cost": "the least cost meeting the target",
    "energy": "the least energy meeting the target",
}
"""Each objective by its name, the first the default, with what it minimises."""
DEFAULT = next(iter(OBJECTIVES))
