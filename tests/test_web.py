"""`apsi web`'s JSON API (apsi.web): each answer is what the CLI prints under --json for the same
options, byte for byte (the expected values are the CLI's own output, run in this process, and the
Python API's); bad input is the CLI's one line, with the field it names; a question past the time
limit is ended. FastAPI's test client drives the app; the browser tests are tests/test_web_browser.py."""

from __future__ import annotations

import json
import os
import sys

import pytest

from apsi.errors import ApsiError
from apsi.web import questions

fastapi = pytest.importorskip("fastapi", reason="the web extra (pip install 'apsi-planner[web]') is not installed")
pytest.importorskip("httpx", reason="FastAPI's test client needs httpx")

from fastapi.testclient import TestClient  # noqa: E402

from apsi.web.app import create_app  # noqa: E402
from apsi.web.jobs import Limits  # noqa: E402

CONFIGS = os.path.join(os.path.dirname(__file__), "configs")


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(Limits(seconds=60, processes=2))) as c:
        yield c


def cli_json(apsi, *args: str) -> str:
    run = apsi(*args)
    assert run.code == 0, run.why()
    return run.out


# --- the mapping from API parameters to the command line --------------------------------------


def test_parameters_are_the_commands_options_less_the_servers_own() -> None:
    plan = questions.parameters("plan")
    assert {"tokens", "gpu", "days", "tp", "max_gpus", "levers", "micro_batch"} <= set(plan)
    # Files on the server, the output format and the exit code are not the visitor's to choose.
    assert not {"output", "plot", "fmt", "json", "catalog", "fail_on_miss", "export"} & set(plan)
    assert {"time_limit"} <= set(questions.parameters("fleet"))
    assert not {"jobs", "export_dir", "answer"} & set(questions.parameters("fleet"))


def test_argv_spells_the_options_as_the_cli_reads_them() -> None:
    assert questions.argv("plan", {"tokens": "15T", "max-gpus": "4096", "levers": "false"}, "llama-3.1-70b") == [
        "plan", "--tokens", "15T", "--max-gpus", "4096", "--no-levers", "--json", "llama-3.1-70b"]
    assert questions.argv("serve", {"disagg": "true", "rate": "5"}, "70B", export="vllm") == [
        "serve", "--disagg", "--rate", "5", "--export", "vllm", "70B"]
    # A PARAMS that looks like an option is still PARAMS (and refused there, as the CLI refuses it).
    assert questions.argv("plan", {}, "-5B")[-2:] == ["--", "-5B"]


@pytest.mark.parametrize("command, params, words", [
    ("plan", {"bogus": "1"}, "/api/plan takes no parameter 'bogus'"),
    ("plan", {"output": "/etc/x"}, "takes no parameter 'output'"),
    ("plan", {"levers": "maybe"}, "levers is a switch; give true or false"),
    ("nope", {}, "unknown command 'nope'"),
])
def test_a_parameter_the_command_does_not_take_is_one_line(command, params, words) -> None:
    with pytest.raises(ApsiError, match=words.replace("(", r"\(").replace(")", r"\)")):
        questions.argv(command, params, "7B")


# --- answers equal the CLI's --json -----------------------------------------------------------


def test_plan_equals_the_cli_and_the_python_api(client, apsi) -> None:
    from apsi import plan

    r = client.get("/api/plan", params={"params": "llama-3.1-70b", "tokens": "15T"})
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    assert r.text == cli_json(apsi, "plan", "llama-3.1-70b", "--tokens", "15T", "--json")
    assert json.loads(r.text)["gpus"] == plan("llama-3.1-70b", tokens="15T").gpus


def test_post_takes_the_same_options_as_a_json_object(client) -> None:
    get = client.get("/api/plan", params={"params": "llama-3.1-8b", "tokens": "1T", "gpu": "A100", "tp": "2"})
    post = client.post("/api/plan", json={"params": "llama-3.1-8b", "tokens": "1T", "gpu": "A100", "tp": 2})
    assert get.status_code == post.status_code == 200
    assert get.text == post.text
    assert json.loads(post.text)["layout"]["tp"] == 2


def test_an_uploaded_config_json_is_planned_as_the_cli_plans_its_file(client, apsi) -> None:
    path = os.path.join(CONFIGS, "llama-3.1-70b.json")
    with open(path) as f:
        config = json.load(f)
    r = client.post("/api/plan", json={"config": config, "tokens": "2T"})
    assert r.status_code == 200, r.text
    expected = json.loads(cli_json(apsi, "plan", path, "--tokens", "2T", "--json"))
    got = json.loads(r.text)
    # The model's origin is the file it was read from (here a temporary copy): all else is equal.
    for answer in (got, expected):
        answer["model"].pop("origin")
    assert got == expected


def test_serve_frontier_and_fleet_equal_the_cli(client, apsi) -> None:
    serve = client.get("/api/serve", params={"params": "llama-3.1-70b", "precision": "fp8", "rate": "20"})
    assert serve.text == cli_json(apsi, "serve", "llama-3.1-70b", "--precision", "fp8", "--rate", "20", "--json")
    disagg = client.get("/api/serve", params={"params": "llama-3.1-70b", "rate": "10", "ttft": "500", "disagg": "true"})
    assert disagg.text == cli_json(apsi, "serve", "llama-3.1-70b", "--rate", "10", "--ttft", "500", "--disagg", "--json")
    frontier = client.get("/api/frontier", params={"params": "llama-3.1-8b", "tokens": "1T"})
    assert frontier.text == cli_json(apsi, "frontier", "llama-3.1-8b", "--tokens", "1T", "--json")
    example = os.path.join(os.path.dirname(__file__), "..", "examples", "fleet.yaml")
    with open(example) as f:
        text = f.read()
    fleet = client.post("/api/fleet", json={"fleet": text, "time_limit": 20})
    assert fleet.status_code == 200, fleet.text
    expected = json.loads(cli_json(apsi, "fleet", example, "--time-limit", "20", "--json"))
    got = json.loads(fleet.text)
    # Solver time is the only figure that may differ between two solves of the same program.
    for answer in (got, expected):
        answer.pop("solver_work_s")
    assert got == expected


def test_exports_are_the_clis_launch_files(client, apsi) -> None:
    r = client.get("/api/export/plan", params={"params": "llama-3.1-70b", "tokens": "15T", "export": "megatron"})
    assert r.status_code == 200
    # Named with the format's extension (apsi.outputs.export.TARGETS: a bash script), not .txt.
    assert r.headers["content-disposition"] == 'attachment; filename="apsi-plan-megatron.sh"'
    assert r.text == cli_json(apsi, "plan", "llama-3.1-70b", "--tokens", "15T", "--export", "megatron")
    s = client.get("/api/export/serve", params={"params": "llama-3.1-8b", "rate": "5", "export": "vllm"})
    assert s.text == cli_json(apsi, "serve", "llama-3.1-8b", "--rate", "5", "--export", "vllm")
    assert s.headers["content-disposition"] == 'attachment; filename="apsi-serve-vllm.sh"'
    t = client.get("/api/export/plan", params={"params": "llama-3.1-8b", "tokens": "1T", "export": "torchtitan"})
    assert t.headers["content-disposition"] == 'attachment; filename="apsi-plan-torchtitan.py"'


# --- bad input, limits, streaming --------------------------------------------------------------


def test_bad_input_is_the_clis_one_line_with_its_field(client, apsi) -> None:
    r = client.get("/api/plan", params={"params": "llama-3.1-70b", "tokens": "-5T"})
    run = apsi("plan", "llama-3.1-70b", "--tokens", "-5T", "--json")
    assert run.code == 2 and r.status_code == 400
    assert r.json() == {"error": run.err.strip().removeprefix("error: "), "field": "tokens"}
    bad = client.get("/api/plan", params={"params": "llama-9"})
    assert bad.status_code == 400 and bad.json()["field"] == "params"
    assert "did you mean" in bad.json()["error"]
    missing = client.get("/api/plan", params={"tokens": "1T"})
    assert missing.status_code == 400 and missing.json()["field"] == "params"
    assert missing.json()["error"].startswith("Missing argument 'PARAMS'")
    unknown = client.get("/api/serve", params={"params": "7B", "tokens": "1T"})
    assert unknown.status_code == 400 and "/api/serve takes no parameter 'tokens'" in unknown.json()["error"]
    body = client.post("/api/plan", content=b"[1, 2]", headers={"content-type": "application/json"})
    assert body.status_code == 400 and "JSON array" in body.json()["error"]


@pytest.mark.parametrize(("command", "params", "field"), [
    # Refused by the server before the CLI runs: the message opens with the parameter.
    ("plan", {"params": "llama-3.1-8b", "levers": "maybe"}, "levers"),
    # A parameter the question needs and left out is named as its --option: the page marks its field.
    ("serve", {"params": "llama-3.1-8b", "disagg": "true", "rate": "5"}, "ttft"),
    ("serve", {"params": "llama-3.1-8b", "disagg": "true", "ttft": "500"}, "rate"),
])
def test_a_refusal_names_its_field_answered_or_streamed(client, command, params, field) -> None:
    r = client.get(f"/api/{command}", params=params)
    assert r.status_code == 400 and r.json()["field"] == field, r.text
    streamed = client.get(f"/api/{command}", params=params, headers={"accept": "application/x-ndjson"})
    assert json.loads(streamed.text.splitlines()[-1]) == {**r.json(), "status": 400}


def test_a_request_over_the_size_limit_is_refused(client) -> None:
    body = json.dumps({"fleet": "x" * (Limits().body_bytes + 10)}).encode()
    r = client.post("/api/fleet", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 413  # refused on its Content-Length, before it is read
    assert r.json() == {"error": f"the request is {len(body):,} bytes; the server takes at most "
                                 f"{Limits().body_bytes:,}", "field": None}

    # A body that says no length is read as it comes, and refused once past the limit, not held whole.
    def chunks():
        for _ in range(3):
            yield b"x" * (Limits().body_bytes // 2 + 1)

    streamed = client.post("/api/plan", content=chunks(), headers={"content-type": "application/json"})
    assert streamed.status_code == 413 and "more than" in streamed.json()["error"]


def test_the_server_reads_no_file_of_its_own(client, tmp_path) -> None:
    # PARAMS or a fleet run's params that name a path, or a fleet's catalog:, would read a file on
    # the server: refused on one line, with the field. An upload goes as `config`.
    secret = tmp_path / "config.json"
    secret.write_text(open(os.path.join(CONFIGS, "llama-3.1-70b.json")).read())
    for value in (str(secret), str(tmp_path), "../x.json", "~/model"):
        r = client.get("/api/plan", params={"params": value, "tokens": "1T"})
        assert r.status_code == 400 and r.json()["field"] == "params", r.text
        assert "names a file on the server" in r.json()["error"]
    fleet = ("fleet:\n  start: 2027-01-01\n  horizon_days: 30\n  gpus: {H100: 8}\n"
             f"runs:\n  - {{name: a, params: {secret}, tokens: 1B}}\n")
    r = client.post("/api/fleet", json={"fleet": fleet})
    assert r.status_code == 400 and r.json()["field"] == "fleet" and "run 1: params" in r.json()["error"]
    r = client.post("/api/fleet", json={"fleet": "catalog: /etc/passwd\n" + fleet.replace(str(secret), "7B")})
    assert r.status_code == 400 and r.json()["error"].startswith("catalog: the server reads no file")
    # A size, a preset and an unknown name are the CLI's to read (its own did-you-mean).
    assert client.get("/api/plan", params={"params": "llama-9"}).json()["field"] == "params"


def test_uploads_as_text_and_text_that_is_not_utf8(client, apsi) -> None:
    # config as the file's text (not only its object), and an error about it names the upload,
    # not the server's temporary copy.
    text = open(os.path.join(CONFIGS, "llama-3.1-70b.json")).read()
    r = client.post("/api/plan", json={"config": text, "tokens": "2T"})
    assert r.status_code == 200, r.text
    bad = client.post("/api/plan", json={"config": "[1]", "tokens": "2T"})
    assert bad.status_code == 400 and "the uploaded config.json" in bad.json()["error"]
    assert "apsi-web-" not in bad.json()["error"]
    # A lone surrogate cannot be written as UTF-8: one line, not a 500.
    odd = client.post("/api/fleet", content=b'{"fleet": "\\ud800"}', headers={"content-type": "application/json"})
    assert odd.status_code == 400 and "not valid UTF-8" in odd.json()["error"]


def test_a_fleet_question_runs_in_one_process() -> None:
    # --jobs is the server's: each fleet question is held to one process (Limits.processes bounds them).
    assert questions.argv("fleet", {}, "f.yaml")[-4:] == ["--jobs", "1", "--json", "f.yaml"]
    assert "--jobs" not in questions.argv("plan", {}, "70B")


def test_a_question_past_the_time_limit_is_ended() -> None:
    # DeepSeek-V3's frontier takes seconds (docs/benchmarks.md); a 0.3 s limit ends it.
    with TestClient(create_app(Limits(seconds=0.3, processes=1))) as c:
        r = c.get("/api/frontier", params={"params": "deepseek-v3", "tokens": "14.8T"})
        assert r.status_code == 504
        assert "more than 0.3 s" in r.json()["error"]
        # The server still answers the next question.
        ok = c.get("/api/plan", params={"params": "llama-3.2-1b", "tokens": "100B"})
        assert ok.status_code == 200


def test_the_stream_gives_the_same_answer_or_the_error(client, apsi) -> None:
    headers = {"accept": "application/x-ndjson"}
    lines = [json.loads(line) for line in client.get("/api/frontier", params={"params": "llama-3.1-8b", "tokens": "1T"},
                                                      headers=headers).text.splitlines()]
    assert lines[-1] == {"answer": json.loads(cli_json(apsi, "frontier", "llama-3.1-8b", "--tokens", "1T", "--json"))}
    assert all(set(line) == {"progress"} for line in lines[:-1])
    error = client.get("/api/plan", params={"params": "llama-3.1-70b", "gpu": "H1000"}, headers=headers)
    last = json.loads(error.text.splitlines()[-1])
    assert last["status"] == 400 and last["field"] == "gpu" and "H1000" in last["error"]


# --- the page and the schema ---------------------------------------------------------------------


def test_the_page_and_its_assets_ship_in_the_package(client) -> None:
    page = client.get("/")
    assert page.status_code == 200
    assert '<form id="form-plan"' in page.text and 'id="form-serve"' in page.text and 'id="form-fleet"' in page.text
    for asset in ("app.js", "charts.js", "app.css"):
        assert client.get(f"/static/{asset}").status_code == 200
    # Nothing is fetched from the network: every src and href is the app's own.
    import re

    assert not re.findall(r'(?:src|href)="(?:https?:)?//', page.text)
    info = client.get("/api/info").json()
    assert "llama-3.1-70b" in info["models"] and "H100" in info["gpus"] and "megatron" in info["formats"]


def test_the_openapi_schema_documents_the_clis_options_and_models(client) -> None:
    schema = client.get("/openapi.json").json()
    plan = schema["paths"]["/api/plan"]["get"]
    names = {p["name"] for p in plan["parameters"]}
    assert {"params", "tokens", "gpu", "max_gpus"} <= names
    assert "Plan" in schema["components"]["schemas"] and "FleetResult" in schema["components"]["schemas"]
    # A switch is documented as a boolean; the export endpoints list their parameters too (they
    # listed none), `export` first and required, with the formats each takes.
    kinds = {p["name"]: p["schema"]["type"] for p in plan["parameters"]}
    assert kinds["levers"] == "boolean" and kinds["tokens"] == "string"
    for command, formats in (("plan", ["megatron", "megatron-bridge", "torchtitan", "deepspeed", "slurm"]),
                             ("serve", ["vllm", "sglang", "trtllm"])):
        documented = schema["paths"][f"/api/export/{command}"]["post"]["parameters"]
        assert documented[0] == {"name": "export", "in": "query", "required": True,
                                 "schema": {"type": "string", "enum": formats},
                                 "description": f"apsi {command} --export FORMAT: the launch file to write"}
        assert {p["name"] for p in documented[1:]} == {p["name"] for p in schema["paths"][f"/api/{command}"]["get"]["parameters"]}


def test_apsi_web_without_the_extra_says_how_to_install_it(apsi, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "uvicorn", None)
    run = apsi("web", "--port", "8123")
    assert run.code == 2
    assert "pip install 'apsi-planner[web]'" in run.err and len(run.err.strip().splitlines()) == 1


def test_the_base_install_has_no_web_dependency() -> None:
    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11's")
    root = os.path.join(os.path.dirname(__file__), "..")
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    web = ("fastapi", "uvicorn", "starlette", "httpx")
    assert not [d for d in project["dependencies"] if d.lower().startswith(web)]
    assert {d.split(">")[0] for d in project["optional-dependencies"]["web"]} == {"fastapi", "uvicorn"}
    # Nothing outside the web wing imports it: a plan and the CLI load no web module.
    import subprocess

    code = ("import sys, apsi.cli.app, apsi.api.plan; apsi.api.plan.plan('7B', tokens='1T'); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('fastapi', 'uvicorn', 'starlette') "
            "or m.startswith('apsi.web')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_signal_to_apsi_web_stops_its_server() -> None:
    # `apsi web` runs the server as a child process; SIGTERM to it (a supervisor's, a script's kill)
    # left the child answering on its port.
    import signal
    import socket
    import subprocess
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "apsi", "web", "--port", str(port), "--processes", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/api/info"
    try:
        for _ in range(200):  # until it answers (some seconds on a busy machine)
            try:
                assert urllib.request.urlopen(url, timeout=2).status == 200
                break
            except OSError:
                time.sleep(0.1)
        else:
            pytest.fail("apsi web did not answer")
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        with pytest.raises(OSError):
            urllib.request.urlopen(url, timeout=2)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_json_arrays_and_objects_are_the_clis_lists_and_a_repeat_is_refused(client) -> None:
    # A JSON array became its Python text split on commas ('unknown GPU "[\\'H100\\'"'), an object
    # likewise; a parameter given twice (or as max-gpus and max_gpus) kept the last silently.
    from apsi import plan, serve

    r = client.post("/api/plan", json={"params": "llama-3.1-8b", "tokens": "1T", "gpu": ["H100", "B200"]})
    alone = plan("llama-3.1-8b", tokens="1T", gpu="H100,B200")
    assert r.status_code == 200 and (r.json()["gpu"], r.json()["gpus"], r.json()["gpu_choice"]["considered"]) == \
        (alone.gpu, alone.gpus, ["H100", "B200"])
    r = client.post("/api/plan", json={"params": "llama-3.1-8b", "tokens": "1T", "recompute": "selective",
                                       "recompute_modules": ["core_attn", "mlp"]})
    assert r.status_code == 200 and r.json()["layout"]["recompute_modules"] == ["core_attn", "mlp"]
    r = client.post("/api/serve", json={"params": "llama-3.1-8b", "rate": 10, "inventory": {"H100": 16}})
    assert r.status_code == 200 and r.json()["gpus"] == serve("llama-3.1-8b", rate=10, inventory={"H100": 16}).gpus
    for bad, message in (
            (("get", "/api/plan?params=llama-3.1-70b&tokens=15T&tokens=1T", None), "tokens is given 2 times: give it once"),
            (("post", "/api/plan", {"params": "70B", "max-gpus": 8, "max_gpus": 16}),
             "max_gpus and max-gpus are one option: give it once"),
            (("post", "/api/plan", {"params": "70B", "gpu": [["H100"]]}), "gpu: give a value, a list of them or a "
                                                                          "comma-separated string")):
        method, url, body = bad
        r = client.get(url) if method == "get" else client.post(url, json=body)
        assert r.status_code == 400 and r.json()["error"].startswith(message), r.json()
    r = client.post("/api/plan", content="null", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"] == "the request body is a JSON null: give a JSON object of CLI options"


def test_the_server_answers_what_it_dropped_or_crashed_on(client) -> None:
    # An export format with a trailing newline or a non-Latin-1 space reached the Content-Disposition
    # header raw: the reply was dropped (h11) or a 500. The file name is the format the CLI took.
    for raw in ("megatron\n", "\u2003megatron", "MEGATRON"):
        r = client.get("/api/export/plan", params={"params": "llama-3.2-1b", "tokens": "10B", "export": raw})
        assert r.status_code == 200 and r.headers["content-disposition"] == 'attachment; filename="apsi-plan-megatron.sh"'
    # A whole number past Python's 4,300 digits in a POST body was a 500.
    huge = client.post("/api/plan", content=b'{"params": "8B", "gpus": ' + b"9" * 5000 + b"}",
                       headers={"content-type": "application/json"})
    assert huge.status_code == 400 and "more than 4,300 digits" in huge.json()["error"]
    # The body's value silently won over the query's; now refused, as a key given twice is.
    both = client.post("/api/plan?params=8B&tokens=1T", json={"tokens": "2T"})
    assert both.status_code == 400 and both.json() == {"error": "tokens is given in the query and in the body: give "
                                                                "it once", "field": "tokens"}
    twice = client.get("/api/plan", params=[("params", "70B"), ("tokens", "1T"), ("tokens", "2T")])
    assert twice.json()["field"] == "tokens"
    assert client.get("/api/serve").json()["field"] == "params"
    assert client.get("/api/export/plan", params={"params": "70B"}).json()["field"] == "export"
    # "config": null is not given, as any key's null is.
    assert client.post("/api/plan", json={"params": "llama-3.2-1b", "tokens": "10B", "config": None}).status_code == 200


def test_an_upload_is_named_as_the_user_gave_it(client) -> None:
    # An uploaded config.json was named by the server's temporary folder (gone once answered) in a
    # plan's origin, an export's header and serve's model_repo; an engine's launch of it pointed
    # there. It reads config.json (its folder "."), and an engine's launch is refused: the server
    # holds no weights.
    config = json.load(open(os.path.join(CONFIGS, "llama-3.1-70b.json")))
    planned = client.post("/api/plan", json={"config": config, "tokens": "1T"}).json()
    assert planned["model"]["origin"] == "config.json"
    exported = client.post("/api/export/plan", json={"config": config, "tokens": "1T", "export": "megatron"})
    assert "# Plan: config.json (70.55B params)" in exported.text and "apsi-web-" not in exported.text
    assert client.post("/api/serve", json={"config": config}).json()["model_repo"] == "."
    launch = client.post("/api/export/serve", json={"config": config, "export": "vllm"})
    assert launch.status_code == 400 and launch.json()["field"] == "config"
    assert launch.json()["error"].startswith("an uploaded config.json names no weights an engine could load")


def test_a_cap_and_an_unknown_parameter_mark_the_right_field(client) -> None:
    # "no Megatron layout fits within 8 GPUs" is about max_gpus, not the GPU type; a parameter the
    # command does not take is no field of the page (it marked params, a word of the list).
    capped = client.get("/api/plan", params={"params": "70B", "tokens": "1T", "days": "1", "max_gpus": "8"})
    assert capped.status_code == 400 and capped.json()["field"] == "max_gpus", capped.text
    unknown = client.get("/api/plan", params={"params": "70B", "foo": "1"})
    assert unknown.status_code == 400 and unknown.json()["field"] is None
