"""What a result shows in a notebook: `Shown._repr_html_`, which Jupyter and IPython call (and any
front end that looks for it), rendered by the function HTML names for the result's class.

The results (Plan, ServePlan, DisaggPlan, FrontierOutput, ServeFrontierOutput, FleetResult) take
`Shown` as a base; their renderers (apsi.outputs.html, apsi.fleets.render) sit in wings after
theirs, so a renderer is named here by module and function and imported only when a result is
shown: nothing is imported by a plan that is never displayed.
"""

from __future__ import annotations

import importlib

HTML: dict[str, tuple[str, str]] = {
    "Plan": ("apsi.outputs.html", "plan_html"),
    "ServePlan": ("apsi.outputs.html", "serve_html"),
    "DisaggPlan": ("apsi.outputs.html", "disagg_html"),
    "FleetResult": ("apsi.fleets.render", "html"),
    "FrontierOutput": ("apsi.outputs.html", "frontier_html"),
    "ServeFrontierOutput": ("apsi.outputs.html", "serve_frontier_html"),
}
"""Each result class's HTML renderer: (module, function), by the class's name."""


class Shown:
    """A result with an HTML table for notebooks: the same figures as its text, with its Why line."""

    def _repr_html_(self) -> str:
        # The nearest class of the result's own with a renderer (a subclass, such as a scenario
        # file's RunRow of a Plan, shows as what it extends).
        name = next(k.__name__ for k in type(self).__mro__ if k.__name__ in HTML)
        module, function = HTML[name]
        return str(getattr(importlib.import_module(module), function)(self))
