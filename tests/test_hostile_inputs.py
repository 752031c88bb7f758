"""Hostile inputs, second round (issue 22, items 4, 5, 6 and 9): each reproduction a test.

Outputs write only regular files that are none of the command's inputs, atomically; every file
the CLI reads is refused before it is opened when it is a FIFO or a device; whole numbers past
Python's 4,300-digit limit, keys given twice, alias bombs and oversized files are one line; a GPU's
text holds no control character; messages name the field as the user wrote it. Each CLI case:
exit 2, one line on stderr starting with 'error:', no traceback, within a few seconds (the cases a
docs row shows as well: tests/bad_input_cases.py).
"""

from __future__ import annotations

import json
import os
import socket
import stat
from pathlib import Path

import pytest

from apsi import ApsiError, plan, run_scenarios
from conftest import time_limit

SECONDS = 120
"""Each case is answered in well under a second; past SECONDS it is taken for a hang (a guard, not a
speed test: a loaded machine does not fail it)."""
LONG = "1" * 5000
"""A whole number of 5,000 digits: past Python's int-to-string limit of 4,300 (sys.get_int_max_str_digits)."""
CONFIG = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
          "intermediate_size": 14336, "vocab_size": 128256}
CATALOG = "gpus:\n  X1: {memory_gib: 80, bf16_tflops: 900}\n"


def _refused(apsi, *args: str, match: str | None = None) -> str:
    """Run `apsi ARGS` and check it is refused in one line (exit 2), without hanging; the message."""
    with time_limit(SECONDS):
        run = apsi(*args)
    assert run.code == 2, run.why()
    assert run.err.startswith("error: ") and run.err.count("\n") == 1, run.why()
    assert "Traceback" not in run.err and run.out == "", run.why()
    message = run.err[len("error: "):].rstrip("\n")
    if match is not None:
        import re

        assert re.search(match, message), f"{message}\n does not match {match}"
    return message


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder with a catalog, a config.json, a scenario and a saved plan (empty JSON:
    the output checks come before the plan is read)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cat.yaml").write_text(CATALOG)
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    (tmp_path / "s.yaml").write_text("catalog: cat.yaml\nruns:\n  - {params: config.json, gpu: X1}\n")
    (tmp_path / "plan.json").write_text("{}\n")
    return tmp_path


# -- 4. --output and --plot write only regular files that are none of the inputs ------------------

def _special(kind: str, where: Path) -> str:
    """A path of the given kind: a device, a FIFO, a socket or a folder."""
    if kind == "device":
        return "/dev/null"
    path = where / kind
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
        server.close()  # the socket file stays
    else:
        path.mkdir()
    return str(path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX special files")
@pytest.mark.parametrize("kind", ["device", "fifo", "socket", "folder"])
@pytest.mark.parametrize("option", ["--output", "--plot"])
def test_outputs_never_replace_a_special_file(apsi, folder, kind, option) -> None:
    target = _special(kind, folder)
    if option == "--plot" and kind != "folder":
        # --plot wants .png/.svg: reach the special file through a link with that name.
        os.symlink(target, folder / "chart.svg")
        given = "chart.svg"
    else:
        given = target
    mode = os.stat(target).st_mode
    _refused(apsi, "plan", "7B", option, given, match=rf"^{option} .* is (a device|a FIFO|a socket|a directory)")
    assert os.stat(target).st_mode == mode  # still the same kind of file: nothing renamed over it
    assert not list(folder.glob(".apsi-*")), "a temporary file was left behind"


def test_output_dev_null_keeps_the_device(apsi, folder) -> None:
    # As root os.replace() would rename a regular file over /dev/null; it must not get that far.
    if not os.path.exists("/dev/null"):
        pytest.skip("no /dev/null")
    for args in (("plan", "7B", "--output", "/dev/null"), ("frontier", "7B", "--output", "/dev/null"),
                 ("run", "s.yaml", "--output", "/dev/null"), ("export", "plan.json", "--to", "slurm", "--output",
                                                               "/dev/null")):
        _refused(apsi, *args, match=r"/dev/null is a device, not a regular file")
        assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


@pytest.mark.parametrize("args, target, what", [
    (("plan", "config.json", "--output", "LINK"), "config.json", "the model's config.json"),
    (("plan", ".", "--output", "LINK"), "config.json", "the model's config.json"),
    (("frontier", "config.json", "--output", "LINK"), "config.json", "the model's config.json"),
    (("plan", "7B", "--catalog", "cat.yaml", "--output", "LINK"), "cat.yaml", "the --catalog file"),
    (("frontier", "7B", "--catalog", "cat.yaml", "--output", "LINK"), "cat.yaml", "the --catalog file"),
    (("plan", "7B", "--catalog", "cat.yaml", "--export", "slurm", "--output", "LINK"), "cat.yaml", "the --catalog file"),
    (("run", "s.yaml", "--output", "LINK"), "s.yaml", "the scenario file"),
    (("run", "s.yaml", "--output", "LINK"), "cat.yaml", "the scenario's catalog file"),
    (("run", "s.yaml", "--output", "LINK"), "config.json", "the config.json of 'run 1'"),
    (("export", "plan.json", "--to", "slurm", "--output", "LINK"), "plan.json", "the saved plan"),
    (("plan", "7B", "--catalog", "cat.yaml", "--plot", "LINK.svg"), "cat.yaml", "the --catalog file"),
    (("plan", "config.json", "--plot", "LINK.svg"), "config.json", "the model's config.json"),
    (("frontier", "7B", "--catalog", "cat.yaml", "--plot", "LINK.svg"), "cat.yaml", "the --catalog file"),
])
def test_outputs_never_replace_an_input(apsi, folder, args, target, what) -> None:
    """Each input, named through a symbolic link (and through a hard link), is refused as the output."""
    before = (folder / target).read_bytes()
    for link in ("LINK", "LINK.svg"):
        os.symlink(target, folder / link)
    option = "--plot" if "--plot" in args else "--output"
    message = _refused(apsi, *args)
    assert message.startswith(f"{option} LINK") and message.endswith(f"is {what} itself: give another file"), message
    os.unlink(folder / "LINK")
    os.unlink(folder / "LINK.svg")
    os.link(folder / target, folder / "LINK")
    os.link(folder / target, folder / "LINK.svg")
    _refused(apsi, *args, match=r"itself: give another file$")
    assert (folder / target).read_bytes() == before


def test_plot_and_output_cannot_share_a_file(apsi, folder) -> None:
    _refused(apsi, "plan", "7B", "--output", "x.svg", "--plot", "x.svg", match=r"^--plot x\.svg is the --output file too")


def test_output_replaces_a_regular_file_whole(apsi, folder) -> None:
    """The ordinary case still works: an existing file is replaced, its mode kept, no temporary left."""
    out = folder / "out.json"
    out.write_text("old")
    out.chmod(0o640)
    run = apsi("plan", "7B", "--output", "out.json")
    assert run.code == 0, run.why()
    assert json.loads(out.read_text())["gpus"] >= 1
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    assert not list(folder.glob(".apsi-*"))


def test_plot_is_written_whole_beside_its_name(apsi, folder) -> None:
    pytest.importorskip("matplotlib")
    run = apsi("plan", "7B", "--plot", "m.svg")
    assert run.code == 0, run.why()
    assert (folder / "m.svg").read_text().lstrip().startswith("<?xml")
    assert not list(folder.glob(".apsi-*"))


# -- 5. whole numbers past 4,300 digits ----------------------------------------------------------

DIGITS = r"has 5,000 digits; give a whole number of at most 100 digits$"


@pytest.mark.parametrize("key", ["hidden_size", "num_hidden_layers", "vocab_size", "rope_theta"])
def test_a_long_number_in_a_config_json(apsi, folder, key) -> None:
    text = json.dumps({**CONFIG, key: 1}).replace(f'"{key}": 1', f'"{key}": {LONG}')
    (folder / "long.json").write_text(text)
    _refused(apsi, "plan", "long.json", match=rf"^{key} in config long\.json {DIGITS}")
    with pytest.raises(ApsiError, match=rf"{key} in config long\.json {DIGITS}"):
        plan("long.json")


def test_a_long_number_in_a_config_list_or_nested_object(apsi, folder) -> None:
    (folder / "list.json").write_text(json.dumps({**CONFIG, "mlp_only_layers": [1]}).replace("[1]", f"[{LONG}]"))
    _refused(apsi, "plan", "list.json", match=rf"^mlp_only_layers in config list\.json {DIGITS}")
    (folder / "nested.json").write_text(json.dumps({**CONFIG, "rope_scaling": {"factor": 1}})
                                        .replace('"factor": 1', f'"factor": {LONG}'))
    _refused(apsi, "plan", "nested.json", match=rf"^factor in config nested\.json {DIGITS}")
    (folder / "bare.json").write_text(LONG)
    _refused(apsi, "plan", "bare.json", match=rf"^a number in config bare\.json {DIGITS}")


@pytest.mark.parametrize("text", [
    f"gpus:\n  X1: {{memory_gib: 80, bf16_tflops: 900, gpus_per_node: {LONG}}}\n",
    f"gpus:\n  X1: {{memory_gib: {LONG}, bf16_tflops: 900}}\n",
    f"gpus:\n  ? {LONG}\n  : {{memory_gib: 80, bf16_tflops: 900}}\n",  # a key (explicit: past 1,024 characters)
    f"gpus:\n  X1: {{memory_gib: 80, bf16_tflops: 900, sources: [{LONG}]}}\n",  # a list item
    f"gpus:\n  X1: {{memory_gib: 80, bf16_tflops: 900, scaleup_domain: 0x{LONG}}}\n",  # hexadecimal
])
def test_a_long_number_in_a_catalog(apsi, folder, text) -> None:
    (folder / "long.yaml").write_text(text)
    _refused(apsi, "plan", "7B", "--catalog", "long.yaml", match=r"^catalog file .*long\.yaml, line 2: .*has 5,00\d digits")


@pytest.mark.parametrize("text", [
    f"runs:\n  - {{params: 7B, gpus: {LONG}}}\n",
    f"runs:\n  - {{params: {LONG}}}\n",
    f"defaults: {{seq: {LONG}}}\nruns:\n  - {{params: 7B}}\n",
    f"runs:\n  - {{params: 7B, tp: [1, {LONG}]}}\n",
    f"runs:\n  - {{name: {LONG}, params: 7B}}\n",
])
def test_a_long_number_in_a_scenario(apsi, folder, text) -> None:
    (folder / "long.yaml").write_text(text)
    _refused(apsi, "run", "long.yaml", match=r"^scenario file long\.yaml, line \d: .*has 5,000 digits; give a whole")
    with pytest.raises(ApsiError, match=r"has 5,000 digits"):
        run_scenarios(str(folder / "long.yaml"))


@pytest.mark.parametrize("option", ["--gpus", "--tp", "--pp", "--dp", "--node-granularity", "--zero"])
def test_a_long_number_as_a_whole_number_option(apsi, folder, option) -> None:
    _refused(apsi, "plan", "7B", option, LONG, match=rf"^Invalid value for '{option}': 1{{20}}\.\.\. \(5,000 digits\) "
                                                     r"is out of range")


@pytest.mark.parametrize("args", [("plan", "7B", "--tokens", "1e5000"), ("plan", "7B", "--gpus", "1e5000"),
                                  ("plan", "7B", "--tokens", LONG), ("plan", "7B", "--seq", LONG),
                                  ("plan", "7B", "--days", LONG), ("plan", "7B", "--gpus", "2^5000"),
                                  ("run", "s.yaml", "--jobs", LONG), ("serve", "7B", "--batch", LONG)])
def test_long_numbers_at_the_command_line(apsi, folder, args) -> None:
    _refused(apsi, *args)


@pytest.mark.parametrize("key", ["params", "tokens", "gpus", "gpu", "batch"])
def test_a_long_string_in_a_scenario_run_is_that_runs_short_error(folder, key) -> None:
    given = f"{key}: '{LONG}'" if key == "params" else f"params: 7B, {key}: '{LONG}'"
    (folder / "s.yaml").write_text(f"runs:\n  - {{name: good, params: 7B}}\n  - {{name: long, {given}}}\n")
    good, long = run_scenarios(str(folder / "s.yaml"), jobs=1)
    assert good.ok and not long.ok
    assert long.error == f"run 'long' (line 3): {key} is a string of 5,000 characters: give at most 4,096"


def test_long_python_ints_are_named_not_printed() -> None:
    for kwargs in ({"gpus": 10**5000}, {"seq": 10**5000}, {"tp": 10**5000}, {"days": 10**5000}):
        with pytest.raises(ApsiError, match=r"got <a whole number of some 5,001 digits>$"):
            plan("7B", **kwargs)
    with pytest.raises(ApsiError, match=r"^jobs must be a whole number from 1 to 1,024"):
        run_scenarios({"runs": [{"params": "7B"}]}, jobs=10**5000)


# -- 6. YAML: alias bombs, a size cap, paths that cannot be a file -------------------------------

BOMB = "\n".join(['a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
                 + [f"{n}: &{n} [" + ", ".join([f"*{p}"] * 9) + "]" for p, n in zip("abcdefghijk", "bcdefghijkl")])
"""A billion-laughs bomb: 12 lines standing for 9^12 (2.8 * 10^11) strings."""


def _indented(text: str) -> str:
    return "  " + text.replace("\n", "\n  ")


@pytest.mark.parametrize("scenario", [
    f"catalog:\n{_indented(BOMB)}\nruns:\n  - {{params: 7B}}\n",  # an inline mapping
    "catalog: bomb.yaml\nruns:\n  - {params: 7B}\n",  # a catalog file holding one
    "catalog: bombgpu.yaml\nruns:\n  - {params: 7B}\n",
])
def test_an_alias_bomb_under_catalog_is_refused_at_once(apsi, folder, scenario) -> None:
    (folder / "bomb.yaml").write_text(f"{CATALOG}sources:\n{_indented(BOMB)}\n")
    (folder / "bombgpu.yaml").write_text(f"bomb:\n{_indented(BOMB)}\ngpus:\n  X1: {{memory_gib: 80, bf16_tflops: 900, "
                                         "description: *l}\n")
    (folder / "s.yaml").write_text(scenario)
    _refused(apsi, "run", "s.yaml", match=r"its aliases \(\*name\) expand to more than [\d,]+ items")
    _refused(apsi, "plan", "7B", "--catalog", "bomb.yaml", match=r"expand to more than 1,000,000 items")


def test_a_31_mb_scenario_is_refused_before_it_is_read(apsi, folder) -> None:
    with open(folder / "big.yaml", "w") as f:
        f.write("runs:\n  - {params: 7B}\n")
        f.truncate(31 * 10**6)  # sparse: the size is checked before a byte is read
    from apsi.api.scenario_file import MAX_FILE_BYTES

    _refused(apsi, "run", "big.yaml", match=rf"^scenario file big\.yaml is 31,000,000 bytes; apsi reads at most "
                                            rf"{MAX_FILE_BYTES:,}$")
    (folder / "s.yaml").write_text("catalog: big.yaml\nruns:\n  - {params: 7B}\n")
    _refused(apsi, "run", "s.yaml", match=r"catalog file .*big\.yaml is 31,000,000 bytes; apsi reads at most ")


def test_a_scenario_at_its_size_cap_parses_in_seconds() -> None:
    """A scenario just under the cap, one-line runs up to MAX_FILE_BYTES, parsed (not solved)
    within a hang guard (about 5 s on two loaded cores; a 31 MB file took 98 s: its time is
    benchmarks/probes.py's to measure)."""
    from apsi.api.scenario_file import MAX_FILE_BYTES, parse_text

    line = "  - {params: 7B, tokens: 140B, days: 90, gpu: H100}\n"
    count = (MAX_FILE_BYTES - 6) // len(line)
    with time_limit(120):
        data = parse_text("runs:\n" + line * count, "scenario")
    assert len(data["runs"]) == count


@pytest.mark.parametrize("path, why", [
    ('"x\\0y.yaml"', r"embedded null byte"),
    ("loop-a.yaml", r"(a symbolic link loop|Too many levels of symbolic links)"),
    ("dangling.yaml", r"does not exist"),
])
def test_a_catalog_path_that_cannot_be_a_file(apsi, folder, path, why) -> None:
    os.symlink("loop-b.yaml", folder / "loop-a.yaml")
    os.symlink("loop-a.yaml", folder / "loop-b.yaml")
    os.symlink("nowhere.yaml", folder / "dangling.yaml")
    (folder / "s.yaml").write_text(f"catalog: {path}\nruns:\n  - {{params: 7B}}\n")
    _refused(apsi, "run", "s.yaml", match=rf"^scenario file s\.yaml: catalog file .*{why}")


# -- 7. special files refused before they are opened -----------------------------------------------

@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
@pytest.mark.parametrize("args, pattern", [
    (("plan", "fifo.json"), r"^config fifo\.json is a FIFO: give a regular Hugging Face config\.json file$"),
    (("plan", "model"), r"^config model/config\.json is a FIFO: "),
    (("frontier", "fifo.json"), r"^config fifo\.json is a FIFO"),
    (("serve", "fifo.json"), r"^config fifo\.json is a FIFO"),
    (("plan", "7B", "--catalog", "fifo.json"), r"^catalog file .*fifo\.json is a FIFO: give a regular YAML file$"),
    (("gpus", "--catalog", "fifo.json"), r"^catalog file .*fifo\.json is a FIFO"),
    (("run", "fifo.json"), r"^scenario file fifo\.json is a FIFO: give a regular YAML file$"),
    (("run", "fifocat.yaml"), r"^scenario file fifocat\.yaml: catalog file .*fifo\.json is a FIFO"),
    (("run", "fiforun.yaml"), None),  # a run's config.json: that run's error, exit 1
    (("export", "fifo.json", "--to", "slurm"), r"^saved plan fifo\.json is a FIFO: give a regular JSON file$"),
    (("compare", "fifo.json", "plan.json"), r"^saved plan fifo\.json is a FIFO: give a regular JSON file$"),
])
def test_a_fifo_is_refused_at_once(apsi, folder, args, pattern) -> None:
    os.mkfifo(folder / "fifo.json")  # nothing ever writes to it: opening it to read would block
    (folder / "model").mkdir()
    os.mkfifo(folder / "model" / "config.json")
    (folder / "fifocat.yaml").write_text("catalog: fifo.json\nruns:\n  - {params: 7B}\n")
    (folder / "fiforun.yaml").write_text("runs:\n  - {params: fifo.json}\n")
    if pattern is not None:
        _refused(apsi, *args, match=pattern)
        return
    with time_limit(SECONDS):
        run = apsi(*args)
    assert run.code == 1 and "is a FIFO" in run.out, run.why()


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/urandom"])
@pytest.mark.parametrize("command", [("plan", "PATH"), ("run", "PATH"), ("export", "PATH", "--to", "slurm"),
                                     ("compare", "PATH", "PATH"), ("plan", "7B", "--catalog", "PATH")])
def test_a_device_is_refused_at_once(apsi, folder, path, command) -> None:
    if not os.path.exists(path):
        pytest.skip(f"no {path} here")
    _refused(apsi, *(path if a == "PATH" else a for a in command), match=r"is a device: give a regular ")


# -- 9. keys given twice -----------------------------------------------------------------------------

def test_a_key_given_twice_in_a_config_json(apsi, folder) -> None:
    (folder / "twice.json").write_text(json.dumps(CONFIG)[:-1] + ', "num_hidden_layers": 80}')
    _refused(apsi, "plan", "twice.json",
             match=r"^config twice\.json: key 'num_hidden_layers' appears twice in one object: give each key once$")
    (folder / "nested.json").write_text(json.dumps(CONFIG)[:-1] + ', "rope_scaling": {"factor": 8, "factor": 4}}')
    _refused(apsi, "plan", "nested.json", match=r"key 'factor' appears twice")


@pytest.mark.parametrize("text, command", [
    ("runs:\n  - params: 7B\n    gpu: H100\n    gpu: B200\n", "run"),
    ("defaults: {days: 30, days: 60}\nruns:\n  - {params: 7B}\n", "run"),
    ("runs: []\nruns:\n  - {params: 7B}\n", "run"),
    ("gpus:\n  X1: {memory_gib: 80, memory_gib: 40, bf16_tflops: 900}\n", "catalog"),
])
def test_a_key_given_twice_in_yaml(apsi, folder, text, command) -> None:
    (folder / "twice.yaml").write_text(text)
    args = ("run", "twice.yaml") if command == "run" else ("plan", "7B", "--catalog", "twice.yaml")
    _refused(apsi, *args, match=r", line \d: key '\w+' appears twice \(first on line \d\)$")


def test_a_key_given_twice_or_a_long_number_in_a_saved_plan(apsi, folder) -> None:
    run = apsi("plan", "7B", "--json")
    assert run.code == 0, run.why()
    saved = json.loads(run.out)
    (folder / "twice.json").write_text(run.out.rstrip()[:-1] + f', "gpus": {saved["gpus"] * 2}}}')
    (folder / "long.json").write_text(run.out.replace(f'"gpus":{saved["gpus"]}', f'"gpus":{LONG}', 1))
    assert (folder / "long.json").read_text() != run.out
    for command in (("export", "PLAN", "--to", "slurm"), ("compare", "PLAN", "PLAN")):
        _refused(apsi, *(a.replace("PLAN", "twice.json") for a in command),
                 match=r"^saved plan twice\.json: key 'gpus' appears twice in one object: give each key once$")
        _refused(apsi, *(a.replace("PLAN", "long.json") for a in command),
                 match=rf"^gpus in saved plan long\.json {DIGITS}")


# -- control characters in a catalog's text ----------------------------------------------------------

@pytest.mark.parametrize("char", ["\\n", "\\r", "\\0", "\\t", "\\e", "\\x7f", "\\x85", "\\x9b", "\\u2028"])
@pytest.mark.parametrize("where", ["name", "description", "source", "source key"])
def test_control_characters_in_a_catalog(apsi, folder, char, where) -> None:
    bad = f'"X{char}1"'
    entry = {"name": f"  {bad}: {{memory_gib: 80, bf16_tflops: 900}}\n",
             "description": f"  X1: {{memory_gib: 80, bf16_tflops: 900, description: {bad}}}\n",
             "source": f"  X1: {{memory_gib: 80, bf16_tflops: 900, sources: {{memory_gib: {bad}}}}}\n",
             "source key": f"  X1: {{memory_gib: 80, bf16_tflops: 900, sources: {{{bad}: S1}}}}\n"}[where]
    (folder / "ctrl.yaml").write_text("gpus:\n" + entry)
    message = _refused(apsi, "gpus", "--catalog", "ctrl.yaml", match=r"holds the control character U\+[0-9A-F]{4}: "
                                                                      r"give printable text on one line$")
    assert message.isprintable()


# -- wrong-field messages ------------------------------------------------------------------------------

@pytest.mark.parametrize("key, field", [("hidden_size", "width"), ("num_hidden_layers", "layers"),
                                        ("num_key_value_heads", "kv_heads"), ("intermediate_size", "ffn"),
                                        ("vocab_size", "vocab")])
def test_config_messages_name_the_files_key(folder, key, field) -> None:
    (folder / "c.json").write_text(json.dumps({**CONFIG, key: 10**17}))
    with pytest.raises(ApsiError, match=rf"^config c\.json: {key} \({field}\): Input should be less than or equal to"):
        plan("c.json")


def test_a_catalog_names_a_misspelled_top_level_key(apsi, folder) -> None:
    (folder / "typo.yaml").write_text("gpus: {}\nsource: {S1: a paper}\n")
    _refused(apsi, "plan", "7B", "--catalog", "typo.yaml",
             match=r"unknown top-level key 'source': did you mean sources\? valid: gpus, sources$")


def test_scenario_catalog_of_the_wrong_kind_names_its_kind(apsi, folder) -> None:
    (folder / "s.yaml").write_text("catalog: [a.yaml, b.yaml]\nruns:\n  - {params: 7B}\n")
    _refused(apsi, "run", "s.yaml", match=r"'catalog' must be the path of a GPU catalog YAML file, got "
                                          r"\['a\.yaml', 'b\.yaml'\] \(a list\)$")


# -- apsi.textfiles and apsi.lineyaml directly ----------------------------------------------------------

def test_textfiles_bounds() -> None:
    from apsi.errors import InputError
    from apsi.textfiles import MAX_DIGITS, load_json, too_many_digits

    assert too_many_digits("9" * MAX_DIGITS) is None and too_many_digits("-" + "9" * MAX_DIGITS) is None
    assert too_many_digits("9" * (MAX_DIGITS + 1)) == MAX_DIGITS + 1
    assert too_many_digits("0x" + "f" * 101) == 101 and too_many_digits("1_0" * 51) == 102
    assert load_json('{"a": [1, {"b": 2}], "c": 1.5}', "x") == {"a": [1, {"b": 2}], "c": 1.5}
    with pytest.raises(InputError, match=r"^x: key 'b' appears twice in one object: give each key once$"):
        load_json('{"a": {"b": 1, "b": 1}}', "x")
    with pytest.raises(InputError, match=rf"^a in x has {MAX_DIGITS + 1} digits; "):
        load_json('{"a": [[' + "7" * (MAX_DIGITS + 1) + "]]}", "x")


def test_read_text_file_limits(tmp_path) -> None:
    from apsi.errors import InputError
    from apsi.textfiles import read_text_file

    path = tmp_path / "f.yaml"
    path.write_bytes(b"x" * 11)
    assert read_text_file(path, "f", 11) == "x" * 11
    with pytest.raises(InputError, match=r"^f .*f\.yaml is 11 bytes; apsi reads at most 10$"):
        read_text_file(path, "f", 10)
    path.write_bytes(b"\xff")
    with pytest.raises(InputError, match=r"is not UTF-8 text: give a JSON file$"):
        read_text_file(path, "f", 10, kind="JSON")
    with pytest.raises(InputError, match=r"is a directory: give a regular YAML file$"):
        read_text_file(tmp_path, "f", 10)


def test_expanded_size_counts_aliases_without_walking_them() -> None:
    from apsi.lineyaml import Refused, expanded_size, load_yaml

    assert expanded_size({"a": [1, 2], "b": 3}, 100) == 1 + (1 + 2) + 1 + 2  # map, list and items, scalar, keys
    shared = [0] * 10
    nested = [shared] * 10
    assert expanded_size([nested] * 10, 10**9) == 1 + 10 * (1 + 10 * 11)
    with time_limit(10), pytest.raises(Refused, match=r"expand to more than 1,000,000,000 items"):
        load_yaml(BOMB, max_items=10**9)  # 9^12 strings: counted by shared part, never walked
    with pytest.raises(Refused, match=r"expand to more than"):
        load_yaml("a: &a [*a]\n")  # a list holding itself stands for no end of items
