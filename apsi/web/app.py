"""`apsi web`'s application: the page at `/` (apsi/web/static: HTML, JavaScript and CSS shipped in the
package; nothing fetched from the network) and the JSON API it uses.

`GET` or `POST /api/plan`, `/api/serve`, `/api/frontier` and `/api/fleet` take the CLI options of
the command of the same name (apsi.web.questions) and answer with exactly what `apsi <command> ...
--json` prints: the question runs as that command (apsi.web.jobs), so the two cannot differ. A GET
takes the options as query parameters (`/api/plan?params=llama-3.1-70b&tokens=15T`); a POST takes
them as a JSON object, with `config` holding an uploaded config.json in place of `params`, and the
fleet's YAML as `fleet`. `/api/export/plan` and `/api/export/serve` (with `export=FORMAT`) answer
with the launch file. A bad question answers 400 with the CLI's one line (`{"error": ...,
"field": ...}`: the parameter it names, for the page to show it beside its field); a question past
the time limit answers 504. With `Accept: application/x-ndjson` the answer streams: progress lines
as the question runs, then the answer or the error; closing the request ends the question.

Owns `create_app(limits)`. FastAPI is imported only here (the `web` extra).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from importlib import resources
from typing import Any, AsyncIterator

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles

from apsi.errors import ApsiError
from apsi.web import jobs, questions

_STATIC = resources.files("apsi.web") / "static"
_MODELS = {"plan": "apsi.model.schema:Plan", "frontier": "apsi.outputs.schema:FrontierOutput",
           "serve": "apsi.outputs.schema:ServePlan", "fleet": "apsi.fleets.result:FleetResult"}
_EXPORTS = ("plan", "serve")
_NDJSON = "application/x-ndjson"


def _schema(command: str) -> type:
    import importlib

    where, name = _MODELS[command].split(":")
    model: type = getattr(importlib.import_module(where), name)
    return model


def _documented(command: str, export: bool = False) -> dict[str, Any]:
    """The OpenAPI parameters of /api/<command>: the CLI's options (apsi.web.questions), a switch
    as a boolean; with `export`, /api/export/<command>'s, `export` first (required: the launch
    format, a training format for plan, a serving engine for serve)."""
    from apsi.outputs.export import FORMATS
    from apsi.serving.engines import ENGINES

    names = (["fleet"] if command == "fleet" else ["params"]) + questions.parameters(command)
    found = [{"name": n, "in": "query", "required": False,
              "schema": {"type": "boolean" if questions.is_switch(command, n) else "string"},
              "description": f"apsi {command} " + ("FILE's YAML text" if n == "fleet" else "PARAMS" if n == "params"
                                                   else "--" + n.replace("_", "-"))} for n in names]
    if export:
        formats = list(FORMATS) if command == "plan" else list(ENGINES)
        found.insert(0, {"name": "export", "in": "query", "required": True, "schema": {"type": "string", "enum": formats},
                         "description": f"apsi {command} --export FORMAT: the launch file to write"})
    return {"parameters": found}


async def _params(request: Request, limits: jobs.Limits) -> dict[str, str]:
    """The question's parameters: the query string's, and a POST's JSON object (values as the
    CLI would read them: true/false for switches, numbers as written)."""
    params: dict[str, str] = dict(request.query_params)
    for key in params:
        if len(request.query_params.getlist(key)) > 1:  # the last one won, silently
            raise _Refused(f"{key} is given {len(request.query_params.getlist(key))} times: give it once", key)
    if request.method == "POST":
        body = await _body(request, limits.body_bytes)
        if body.strip():
            try:
                data = json.loads(body)
            except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
                raise ApsiError("the request body is not JSON: give the question as a JSON object of CLI "
                                "options (e.g. {\"params\": \"llama-3.1-70b\", \"tokens\": \"15T\"})") from None
            except ValueError:  # Python's limit on an integer's digits (a 500 before)
                raise ApsiError("the request body holds a whole number of more than 4,300 digits, which no option "
                                "takes") from None
            if not isinstance(data, dict):
                kind = {type(None): "null", list: "array", str: "string", int: "number", float: "number",
                        bool: "boolean"}.get(type(data), type(data).__name__)
                raise ApsiError(f"the request body is a JSON {kind}: give a JSON object of CLI options")
            for key, value in data.items():
                if key in params and value is not None:  # the body's had won over the query's, silently
                    raise _Refused(f"{key} is given in the query and in the body: give it once", key)
                if key == "config":  # the file's text, or its object; null: not given, as for any key
                    if value is not None:
                        params[key] = value if isinstance(value, str) else json.dumps(value)
                elif value is not None:
                    params[key] = _cli_text(key, value)
    given: dict[str, str] = {}
    for key in params:  # max-gpus and max_gpus are one option: the last one won, silently
        name = key.strip().replace("-", "_")
        if name in given:
            raise _Refused(f"{key} and {given[name]} are one option: give it once", name)
        given[name] = key
    for key, value in params.items():
        if len(value) > limits.body_bytes:
            raise _Refused(f"{key} is {len(value):,} characters; the server takes at most {limits.body_bytes:,}",
                           key.strip().replace("-", "_"))
    return params


def _extension(command: str, fmt: str) -> str:
    """The launch file's extension: the training format's own (apsi.outputs.export.TARGETS: .sh,
    .py, .sbatch); a serving engine's launch is a bash script (apsi.outputs.export.engines)."""
    from apsi.outputs.export import TARGETS

    target = TARGETS.get(fmt.strip().lower()) if command == "plan" else None
    return target.extension if target is not None else "sh"


def _cli_text(key: str, value: object) -> str:
    """A JSON value as the CLI reads it: true/false for a switch, a number as written, an array as
    the CLI's comma-separated list (gpu: ["H100", "B200"] is H100,B200), an object as its
    KEY=VALUE list (inventory: {"H100": 16} is H100=16)."""
    def scalar(x: object) -> bool:
        return isinstance(x, (str, int, float)) and not isinstance(x, bool)

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list) and value and all(scalar(x) for x in value):
        return ",".join(str(x) for x in value)
    if isinstance(value, dict) and value and all(scalar(x) for x in value.values()):
        return ",".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, (list, dict)):
        raise ApsiError(f"{key}: give a value, a list of them or a comma-separated string (such as "
                        f"\"H100,B200\"); got {json.dumps(value)[:80]}")
    return str(value)


class TooLarge(Exception):
    """A request past the server's size limit (413, with the API's {"error", "field"})."""


async def _body(request: Request, most: int) -> bytes:
    """The request's body, refused (413) past `most` bytes: on its Content-Length before any of it
    is read, else as it arrives, so a large body is never held whole."""
    def refuse(size: str) -> TooLarge:
        return TooLarge(f"the request is {size} bytes; the server takes at most {most:,}")

    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > most:
        raise refuse(f"{int(declared):,}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > most:
            raise refuse(f"more than {most:,}")
        chunks.append(chunk)
    return b"".join(chunks)


def _write(path: str, text: str, what: str) -> None:
    """An uploaded file's text into `path` (UTF-8; text that cannot be, a lone surrogate, is refused)."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        raise ApsiError(f"{what} is not valid UTF-8 text: give the file as it is on disk") from None
    with open(path, "wb") as out:
        out.write(data)


class _Refused(ApsiError):
    """A parameter the server will not take, with the field the page marks."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field


def _model_name(value: object, where: str, field: str = "params") -> None:
    """A model the server may plan: not a path, which would read a file on the server (an uploaded
    config.json goes as `config`; a fleet's runs take sizes and presets). Anything else is the
    CLI's to read (a size, a preset, or its one line with the names it meant)."""
    from apsi.units import looks_like_size

    if not isinstance(value, str) or looks_like_size(value):
        return
    text = value.strip()
    if "/" in text or "\\" in text or text.startswith(("~", ".")) or text.lower().endswith(".json") or (
            "\0" not in text and os.path.lexists(text)):
        raise _Refused(f"{where}: {value!r:.80} names a file on the server, which the server does not read: give a "
                       "size (70B) or a preset (llama-3.1-70b), or upload a config.json as config", field)


def _fleet_names(text: str) -> None:
    """A fleet file names no file on the server: no `catalog:`, and each run's (and the defaults')
    params a size or a preset. Text that is not a YAML mapping is left to the CLI's own message."""
    from apsi.lineyaml import load_yaml

    try:
        data = load_yaml(text)
    except Exception:  # the CLI reads it again, and says what is wrong on one line
        return
    if not isinstance(data, dict):
        return
    if data.get("catalog") is not None:
        raise _Refused("catalog: the server reads no file of its own; the fleet's GPUs come from its built-in "
                       "catalog (apsi gpus)", "fleet")
    runs = data.get("runs")
    blocks = [data.get("defaults")] + (list(runs) if isinstance(runs, list) else [])
    for n, block in enumerate(blocks):
        if isinstance(block, dict) and block.get("params") is not None:
            values = block["params"] if isinstance(block["params"], list) else [block["params"]]
            for value in values:
                _model_name(value, "defaults: params" if n == 0 else f"run {n}: params", "fleet")


def _question(command: str, params: dict[str, str], folder: str, export: bool = False) -> list[str]:
    """The CLI arguments of the question; an uploaded config.json or fleet file is written into
    `folder` (removed when the question is answered) and given as the command's PARAMS or FILE."""
    params = dict(params)
    fmt = params.pop("export", None) if export else None
    if export and not fmt:
        raise _Refused("give export=FORMAT: the launch file to write (see apsi plan --help, --export)", "export")
    positional: str | None
    if command == "fleet":
        text = params.pop("fleet", None)
        if not text:
            raise ApsiError("give the fleet's scenario file as fleet (its YAML text)")
        _fleet_names(text)
        positional = os.path.join(folder, "fleet.yaml")
        _write(positional, text, "fleet")
    else:
        config = params.pop("config") if "config" in params else None
        positional = params.pop("params", None)
        if config is not None:
            if positional is not None:
                raise ApsiError("give params (a size or a preset) or config (a config.json), not both")
            if command == "serve" and fmt is not None:  # the engine would load weights the server has not
                raise _Refused("an uploaded config.json names no weights an engine could load: give a preset, or "
                               "run apsi serve with the model's folder and --export on the machine that holds it",
                               "config")
            positional = os.path.join(folder, "config.json")
            _write(positional, config, "config")
        elif positional:
            _model_name(positional, "params")
        elif command != "plan":  # apsi plan says so itself (or searches, with largest)
            raise _Refused("give params: a size (70B), a preset (llama-3.1-70b) or an uploaded config.json", "params")
    return questions.argv(command, params, positional, fmt)


def _field(message: str, params: dict[str, str], command: str) -> str | None:
    """The parameter a CLI error is about, for the page to mark: the --option it names that was
    given, else PARAMS (`params`), else an --option `command` takes (a missing one: "give ttft
    (ms: --ttft)"), else the parameter it opens with ("days: ..."), else the one whose value it
    quotes ("unknown GPU 'H1000'"), else one it names as a word ("unknown precision")."""
    given = {name.replace("-", "_"): value for name, value in params.items()}
    named = [option.replace("-", "_") for option in re.findall(r"--([a-z][a-z0-9-]*)", message)]
    for option in named:
        if option in given:
            return option
    if "PARAMS" in message:
        return "params"
    takes = set(questions.parameters(command)) if command in questions.COMMANDS else set()
    for option in named:
        if option in takes:
            return option
    for name in ("gpus", "max_gpus"):  # "within 8 GPUs": the cap given, not the GPU type
        value = given.get(name, "").strip()
        if value.isdigit() and re.search(rf"\b{int(value):,} GPUs?\b", message):
            return name
    for name in given:
        if re.match(rf"{re.escape(name)}\b", message):
            return name
    for name, value in sorted(given.items(), key=lambda item: -len(item[1])):
        if value and f"'{value}'" in message:
            return name
    for name in given:
        if re.search(rf"\b{re.escape(name)}\b", message, re.IGNORECASE):
            return name
    return None


def _error(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("error:")]
    line = lines[-1] if lines else (stderr.strip().splitlines() or ["the question failed"])[-1]
    return line.removeprefix("error:").strip()


async def _events(command: str, params: dict[str, str], worker: jobs.Worker, request: Request,
                  export: bool) -> AsyncIterator[tuple[Any, ...]]:
    """The question's events (apsi.web.jobs.Worker.ask), its uploaded files in a folder of its own."""
    with tempfile.TemporaryDirectory(prefix="apsi-web-") as folder:
        argv = _question(command, params, folder, export)
        async for event in worker.ask(argv, request.is_disconnected):
            if event[0] == "done":
                # The answer names an upload as the user gave it, not by the server's folder (gone
                # once answered): config.json, and the folder as "." (a plan's origin, a model_repo).
                _, code, out, err = event
                event = ("done", code, out.replace(os.path.join(folder, "config.json"), "config.json")
                         .replace(folder, "."), err)
            yield event


def _refusal(err: ApsiError, params: dict[str, str], command: str) -> dict[str, Any]:
    """The body of a question the server refused before the CLI ran it ("levers='maybe': ..."),
    with the field it names."""
    if isinstance(err, questions.NotAParameter):
        return {"error": str(err), "field": None}  # no field of the page is at fault (it named params)
    return {"error": str(err), "field": getattr(err, "field", None) or _field(str(err), params, command)}


def _answer(event: tuple[Any, ...], params: dict[str, str], command: str) -> tuple[int, dict[str, Any] | str]:
    """The HTTP status and body of a finished question: its output (200; a missed target, exit 3,
    is still an answer) or its one-line error (400, 500 for anything but the CLI's own refusals)."""
    _, code, out, err = event
    if code in (0, 3) and out:
        return 200, out
    # An uploaded file is named as the user knows it, not by the server's temporary path.
    message = re.sub(r"\S*apsi-web-[^/\s]*/(config\.json|fleet\.yaml)", r"the uploaded \1", _error(err))
    return (400 if code == 2 else 500), {"error": message, "field": _field(message, params, command)}


def _lists() -> dict[str, Any]:
    """The presets (`apsi models`), GPU types (`apsi gpus`), frameworks, serving engines and launch
    formats, by the names the options take."""
    from apsi.api.plan import models
    from apsi.catalog import catalog
    from apsi.outputs.export import FORMATS
    from apsi.serving.engines import DEFAULT_ENGINE, ENGINES
    from apsi.training.frameworks import DEFAULT, FRAMEWORKS

    return {"models": [row.key for row in models()], "gpus": sorted(catalog()), "frameworks": list(FRAMEWORKS),
            "framework": DEFAULT, "engines": list(ENGINES), "engine": DEFAULT_ENGINE, "formats": list(FORMATS)}


def create_app(limits: jobs.Limits | None = None) -> FastAPI:
    """The web app: the page, its assets and the API, each question bounded by `limits`."""
    from apsi import __version__

    limits = limits or jobs.Limits()
    worker = jobs.Worker(limits)
    app = FastAPI(title="apsi", version=__version__,
                  description="Plans for training and serving large models: the answers of `apsi plan`, "
                  "`apsi serve`, `apsi frontier` and `apsi fleet` with --json, for the same options.")
    app.router.on_shutdown.append(worker.close)
    app.mount("/static", StaticFiles(directory=str(_STATIC)), name="static")

    @app.exception_handler(ApsiError)
    async def _bad(request: Request, err: ApsiError) -> JSONResponse:
        return JSONResponse({"error": str(err), "field": getattr(err, "field", None)}, status_code=400)

    @app.exception_handler(TooLarge)
    async def _large(request: Request, err: TooLarge) -> JSONResponse:
        return JSONResponse({"error": str(err), "field": None}, status_code=413)

    @app.get("/", include_in_schema=False)
    async def _page() -> FileResponse:
        return FileResponse(str(_STATIC / "index.html"))

    @app.get("/api/info", summary="What the page's lists offer: presets, GPUs, frameworks, engines, export formats")
    async def _info() -> dict[str, Any]:
        return _lists()

    async def run(command: str, request: Request, export: bool = False) -> Response:
        params = await _params(request, limits)
        fmt = params.get("export") if export else None
        events = _events(command, params, worker, request, export)
        if _NDJSON in request.headers.get("accept", ""):
            return StreamingResponse(_stream(events, params, fmt, command), media_type=_NDJSON)
        try:
            async for event in events:
                if event[0] == "done":
                    status, body = _answer(event, params, command)
                    if isinstance(body, dict):
                        return JSONResponse(body, status_code=status)
                    if fmt is not None:
                        # The format as the CLI took it (stripped, lower case): a raw "megatron\n" or
                        # one with a non-Latin-1 space broke the header and dropped the reply.
                        name = fmt.strip().lower()
                        name = name if re.fullmatch(r"[a-z0-9-]+", name) else "export"
                        return Response(body, media_type="text/plain; charset=utf-8", headers={
                            "Content-Disposition": f'attachment; filename="apsi-{command}-{name}.{_extension(command, name)}"'})
                    return Response(body, media_type="application/json")
        except ApsiError as err:
            return JSONResponse(_refusal(err, params, command), status_code=400)
        except jobs.TimeLimit as err:
            return JSONResponse({"error": str(err), "field": None}, status_code=504)
        return JSONResponse({"error": "the question was cancelled", "field": None}, status_code=499)

    def endpoint(command: str, export: bool = False) -> Any:
        async def answer(request: Request) -> Response:
            return await run(command, request, export)
        return answer

    for command in questions.COMMANDS:
        extra = _documented(command)
        summary = f"What `apsi {command} ... --json` prints"
        for method in ("GET", "POST"):
            app.add_api_route(f"/api/{command}", endpoint(command), methods=[method], summary=summary,
                              responses={200: {"model": _schema(command)}}, openapi_extra=extra,
                              name=f"{command}_{method.lower()}")
    for command in _EXPORTS:
        for method in ("GET", "POST"):
            app.add_api_route(f"/api/export/{command}", endpoint(command, export=True), methods=[method],
                              summary=f"What `apsi {command} ... --export FORMAT` prints",
                              openapi_extra=_documented(command, export=True),
                              name=f"export_{command}_{method.lower()}")
    return app


async def _stream(events: AsyncIterator[tuple[Any, ...]], params: dict[str, str],
                  fmt: str | None, command: str) -> AsyncIterator[bytes]:
    """The NDJSON stream: {"progress": line} as the question runs, then {"answer": ...} (the JSON
    the CLI printed, or {"text": ...} for a launch file) or {"error": ..., "field": ..., "status": N}."""
    def line(obj: Any) -> bytes:
        return (json.dumps(obj) + "\n").encode()

    try:
        async for event in events:
            if event[0] == "progress":
                yield line({"progress": event[1]})
            elif event[0] == "done":
                status, body = _answer(event, params, command)
                if isinstance(body, dict):
                    yield line({**body, "status": status})
                elif fmt is not None:
                    yield line({"text": body})
                else:  # one line: the fleet's JSON is indented over many
                    yield line({"answer": json.loads(body)})
    except ApsiError as err:
        yield line({**_refusal(err, params, command), "status": 400})
    except jobs.TimeLimit as err:
        yield line({"error": str(err), "field": None, "status": 504})
