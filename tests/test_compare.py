"""`apsi compare` marks a row by the plans' values, not their printed words
(apsi.outputs.compare): 1.449T and 1.45T tokens both print "1.45T", and the row was shown
unmarked, as if the runs were the same. Values that differ but print alike are printed as finely
as tells them apart; values with no finer words are numbered."""

from __future__ import annotations

import functools
import json

from apsi import evaluate, plan
from apsi.outputs.export import read_plan

LABELS = ("model", "tokens", "framework", "GPU", "GPUs", "nodes", "layout", "sharding", "recompute", "micro-batch",
          "batch", "precision", "GiB/GPU", "days", "target met", "MFU", "step", "tokens/s/GPU", "GPU-hours", "cost",
          "energy")


def compare_text(*args, **kwargs) -> str:
    from apsi.outputs.compare import compare_text as text

    return text(*args, **kwargs)


@functools.lru_cache(maxsize=None)
def _llama(tokens: str):
    return plan("llama-3.1-8b", tokens=tokens)


def _rows(text: str) -> dict[str, str]:
    """{label: the row's line} of a compare table."""
    out = {}
    for line in text.splitlines():
        label = line[2:16].strip()
        if line[:2] in ("  ", "* ") and label in LABELS:
            out[label] = line
    return out


def test_a_difference_the_short_form_hides_is_marked_and_shown(apsi, tmp_path) -> None:
    a, b = tmp_path / "t1.json", tmp_path / "t2.json"
    for path, tokens in ((a, "1.449T"), (b, "1.45T")):
        run = apsi("plan", "llama-3.1-8b", "--tokens", tokens, "--json")
        assert run.code == 0, run.err
        path.write_text(run.out)
    run = apsi("compare", str(a), str(b))
    assert run.code == 0, run.err
    rows = _rows(run.out)
    assert set(rows) == set(LABELS)
    assert rows["tokens"].startswith("* tokens")
    assert "1,449,000,000,000" in rows["tokens"] and "1,450,000,000,000" in rows["tokens"]
    # Every marked row shows the plans apart, and every unmarked one is the same value.
    for label, line in rows.items():
        cells = line[16:].split("  ")
        cells = [c.strip() for c in cells if c.strip()]
        assert len(cells) == 2, line
        assert (cells[0] != cells[1]) == line.startswith("*"), line


def test_rows_are_marked_by_value_and_shown_as_finely_as_needed() -> None:
    p = _llama("1.45T")
    # The same plan: nothing marked, the short forms kept.
    same = compare_text([p, p], ["a", "b"], width=400)
    assert "0 of " in same and "1.45T" in _rows(same)["tokens"] and "Numbered" not in same
    # Days a hair apart print alike at one decimal; they are marked and given more figures.
    near = p.model_copy(update={"days": p.days + 1e-9})
    rows = _rows(compare_text([p, near], ["a", "b"], width=400))
    assert rows["days"].startswith("* days")
    shown = [c.strip() for c in rows["days"][16:].split("  ") if c.strip()]
    assert len(set(shown)) == 2 and all(c.endswith(" days") for c in shown)
    for label in ("tokens", "GiB/GPU", "model"):
        assert rows[label].startswith("  "), label
    # Three columns, two alike: the finer figures only as many as the values need, the equal ones equal.
    rows = _rows(compare_text([p, near, p], ["a", "b", "c"], width=400))
    shown = [c.strip() for c in rows["days"][16:].split("  ") if c.strip()]
    assert shown[0] == shown[2] != shown[1]


def test_values_with_no_finer_words_are_numbered() -> None:
    # Selective recomputation of different modules printed "selective" in both columns, unmarked.
    base = dict(tokens="100B", tp=1, pp=1, dp=8, recompute="selective")
    one = evaluate("llama-3.1-8b", framework="megatron", recompute_modules=["core_attn"], **base)
    two = evaluate("llama-3.1-8b", framework="megatron", recompute_modules=["core_attn", "mlp"], **base)
    rows = _rows(compare_text([one, two], ["a", "b"], width=400))
    assert rows["recompute"].startswith("* recompute")
    assert "selective (core_attn)" in rows["recompute"] and "selective (core_attn, mlp)" in rows["recompute"]
    # A model whose dimensions differ under the same name and count: numbered, and said so below.
    p = _llama("1.45T")
    data = json.loads(p.model_dump_json())
    data["model"]["architecture"]["rope_theta"] = 10_000.0
    other = read_plan(json.dumps(data), "compare")
    text = compare_text([p, other, p], ["a", "b", "c"], width=400)
    model = _rows(text)["model"]
    assert model.startswith("* model") and model.count("(#1)") == 2 and model.count("(#2)") == 1
    assert "Numbered (#1, #2, ...): model differ" in text
    assert text == compare_text([p, other, p], ["a", "b", "c"], width=400)  # deterministic


def test_layouts_whose_degrees_print_alike_are_told_apart() -> None:
    # The layout row compared its words (TP, PP, CP, DP, EP, VPP) only: two plans differing in
    # sequence parallelism alone showed it unmarked. It compares ETP, sequence parallelism and the
    # split too, and prints them where the degrees read alike.
    kw = dict(tokens="1T", tp=4, pp=2, dp=8)
    on, off = evaluate("llama-3.1-70b", **kw), evaluate("llama-3.1-70b", sequence_parallel=False, **kw)
    rows = _rows(compare_text([on, off], ["on", "off"]))
    assert rows["layout"].startswith("* ")
    assert "sequence parallel on" in rows["layout"] and "sequence parallel off" in rows["layout"]
    same = _rows(compare_text([on, on], ["a", "b"]))
    assert same["layout"].startswith("  ") and "sequence parallel" not in same["layout"]
