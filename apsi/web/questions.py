"""A web question as the command line that asks it: the parameters of `/api/plan`, `/api/serve`,
`/api/frontier` and `/api/fleet` are the CLI options of `apsi plan`, `apsi serve`, `apsi frontier`
and `apsi fleet` (their long names, dashes or underscores), read off the commands themselves, so an
option added to the CLI is a parameter of the API with no second declaration.

Owns `argv(command, params)`: the checked argument list (a parameter the command does not take, or
one the web app does not give, is one line naming it and the valid ones: ApsiError, HTTP 400), and
`parameters(command)`: the names each endpoint takes. No FastAPI here: the mapping is tested on its
own and the app only forwards.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Mapping, NamedTuple

from apsi.errors import ApsiError

COMMANDS = ("plan", "serve", "frontier", "fleet")
"""The CLI commands the web app asks, one endpoint each (/api/<command>)."""

_SERVER_SIDE = frozenset({"output", "plot", "fmt", "json", "export", "export_dir", "jobs", "answer", "since",
                          "catalog", "fail_on_miss"})
"""Options the web app does not pass through: files written or read on the server (--output, --plot,
--export-dir, --from, --catalog), the output format (every answer is the command's --json, or with
`export` its launch file: the page draws its own charts), the processes a fleet may start (--jobs: the server's, one
per question, not a visitor's), and
--fail-on-miss (an exit code, which an HTTP answer does not have: the JSON says whether the target
was met)."""

_TRUE = frozenset({"1", "true", "yes", "on", ""})
_FALSE = frozenset({"0", "false", "no", "off"})


class NotAParameter(ApsiError):
    """A parameter the command does not take: no field of the page is at fault."""


class Option(NamedTuple):
    """One CLI option as the API takes it: its flag(s) and whether it takes a value."""

    flag: str
    off_flag: str | None
    is_flag: bool


@lru_cache(maxsize=None)
def _options(command: str) -> dict[str, Option]:
    """The command's options by their parameter names (click's), less _SERVER_SIDE; the positional
    argument (PARAMS, or the fleet's FILE) is given by the app, not as an option."""
    import typer

    from apsi.cli.app import app

    found: dict[str, Option] = {}
    for param in typer.main.get_command(app).commands[command].params:  # type: ignore[attr-defined]
        if param.param_type_name != "option" or param.name in _SERVER_SIDE:
            continue
        longs = [o for o in param.opts if o.startswith("--")]
        off = [o for o in param.secondary_opts if o.startswith("--")]
        found[str(param.name)] = Option(longs[0], off[0] if off else None, bool(getattr(param, "is_flag", False)))
    return found


@lru_cache(maxsize=None)
def _takes_jobs(command: str) -> bool:
    """Whether the command starts processes of its own (--jobs): the server holds it to one."""
    import typer

    from apsi.cli.app import app

    return any(p.name == "jobs" for p in typer.main.get_command(app).commands[command].params)  # type: ignore[attr-defined]


def is_switch(command: str, name: str) -> bool:
    """Whether /api/<command>'s parameter `name` is a switch (true or false)."""
    option = _options(command).get(name)
    return option is not None and option.is_flag


def parameters(command: str) -> list[str]:
    """The names `/api/<command>` takes, beside the positional `params` (plan, serve, frontier)."""
    return sorted(_options(command))


def argv(command: str, params: Mapping[str, str], positional: str | None = None, export: str | None = None) -> list[str]:
    """The argument list of `apsi <command> ... --json` for these parameters (`--export FORMAT`
    instead of --json where `export` is given: the launch file, as the CLI prints it). `params` maps option
    names (`max_gpus` or `max-gpus`) to their text as typed on the command line; a flag takes
    true/false (true: the flag; false: its --no- form where it has one, else nothing). `positional`
    is PARAMS (or the fleet's FILE); a value that begins with "-" follows "--", so that "-5B" is read
    as PARAMS (and refused there, as the CLI refuses it) rather than as an option."""
    if command not in COMMANDS:
        raise ApsiError(f"unknown command {command!r}: the web app asks {', '.join(COMMANDS)}")
    options = _options(command)
    args = [command]
    for raw, value in params.items():
        name = raw.strip().replace("-", "_")
        option = options.get(name)
        if option is None:
            raise NotAParameter(f"/api/{command} takes no parameter {raw!r}: it takes "
                            f"{'fleet (the YAML text)' if command == 'fleet' else 'params'} and "
                            + ", ".join(n for n in parameters(command)))
        text = str(value)
        if option.is_flag:
            word = text.strip().lower()
            if word in _TRUE:
                args.append(option.flag)
            elif word in _FALSE:
                if option.off_flag:
                    args.append(option.off_flag)
            else:
                raise ApsiError(f"{raw}={text!r}: {raw} is a switch; give true or false")
        else:
            args += [option.flag, text]
    if _takes_jobs(command):
        # One question, one process: Limits.processes then bounds the cores the server's questions use.
        args += ["--jobs", "1"]
    args += ["--json"] if export is None else ["--export", export]
    if positional is not None:
        args += ["--", positional] if positional.startswith("-") else [positional]
    return args
