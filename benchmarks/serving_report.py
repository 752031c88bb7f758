"""docs/validation.md's serving section: the constants, the errors per engine and source against the
issue's bars, the leave-one-model-out check, the TTFT floor at low load and where the model is
weakest, rendered from benchmarks/serving_validation.py's predictions (render(); written by
benchmarks/validation.py, whose --check fails when the section is stale: tests/test_megatron.py).

    python benchmarks/serving_report.py   # print the section
"""

from __future__ import annotations

import statistics
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from serving_validation import (  # noqa: E402  (benchmarks/serving_validation.py)
    BOUNDS, LEAVE_ONE_OUT, ROOT, START, Case, _ape, _engine, _errors, amd_check, amd_trial, cases, in_flight, predict)

from apsi.serving.engine import Calibration  # noqa: E402

WIDTH = 100
"""The prose lines' width (docs/validation.md wraps at 100)."""


def table(all_cases: list[Case], cals: dict[str, Calibration]) -> list[str]:
    """Median absolute percentage errors per engine and source, calibration and validation apart."""
    groups: dict[tuple, dict[str, list[float]]] = {}
    unfit: dict[tuple, int] = {}
    for c in all_cases:
        key = (c.engine, c.source.split(":")[0], c.row["split"])
        got = predict(c, cals[c.engine])
        if got is None:
            unfit[key] = unfit.get(key, 0) + 1
            continue
        for metric, value in c.measured.items():
            if value and metric in got:
                groups.setdefault(key, {}).setdefault(metric, []).append(_ape(got[metric], value))
    lines = ["| engine | source | rows | TPOT MdAPE | TTFT MdAPE | throughput MdAPE | rows the model does not fit |",
             "|---|---|---|---|---|---|---|"]
    for key in sorted(set(groups) | set(unfit)):
        g = groups.get(key, {})
        n = max((len(v) for v in g.values()), default=0)

        def cell(m: str) -> str:
            return f"{statistics.median(g[m]):.1%} ({len(g[m])})" if g.get(m) else "-"

        lines.append(f"| {key[0]} | {key[1]} ({key[2]}) | {n} | {cell('tpot')} | {cell('ttft')} | "
                     f"{cell('throughput')} | {unfit.get(key, 0)} |")
    return lines


def _validation_summary(all_cases: list[Case], cals: dict[str, Calibration]) -> list[str]:
    """Per engine, over every validation row: the three figures against their bars."""
    bars = {"tpot": 0.12, "throughput": 0.12, "ttft": 0.20}
    lines = ["| engine | TPOT MdAPE (bar 12%) | throughput MdAPE (bar 12%) | TTFT MdAPE (bar 20%) |",
             "|---|---|---|---|"]
    for engine in sorted({c.engine for c in all_cases}):
        errs = _errors([c for c in all_cases if c.engine == engine and c.row["split"] == "validation"], cals[engine])

        def cell(m: str) -> str:
            if not errs[m]:
                return "-"
            e = statistics.median(errs[m])
            return f"{e:.1%} ({len(errs[m])} rows): {'met' if e <= bars[m] else '**missed**'}"

        lines.append(f"| {engine} | {cell('tpot')} | {cell('throughput')} | {cell('ttft')} |")
    return lines


def _leave_one_out_lines() -> list[str]:
    import json

    if not LEAVE_ONE_OUT.exists():
        return []
    rows = json.loads(LEAVE_ONE_OUT.read_text(encoding="utf-8"))

    def cell(x: float | None) -> str:
        return "-" if x is None else f"{x:.1%}"

    lines = ["", "Leave one model out (the stricter check benchmarks/serving/README.md fixed before fitting): each",
             "engine's constants fitted on the other models' calibration rows, the MdAPE on the left-out model's",
             f"validation rows (written by --fit to {LEAVE_ONE_OUT.relative_to(ROOT)}):", "",
             "| engine | left-out model | validation rows | TPOT MdAPE | TTFT MdAPE | throughput MdAPE |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['engine']} | {r['model']} | {r['rows']} | {cell(r['tpot'])} | {cell(r['ttft'])} | "
              f"{cell(r['throughput'])} |" for r in rows]
    lines += ["", "The constants carry across models much less well than across layouts of a model the fit saw,",
              "most of all on vLLM and SGLang, whose calibration rows hold three models each: with one left out,",
              "the other two do not tell the dense efficiencies from the experts' share and the per-layer cost, so",
              "a model unlike those measured (a new MoE, another size) is planned with errors nearer these than the",
              "validation rows' above."]
    return lines


def _off(all_cases: list[Case], cals: dict[str, Calibration], engine: str, model: str, bar: float = 0.25) -> str:
    """'k of n': the sample's validation rows of an engine and model whose predicted TTFT is off
    the measured one by more than `bar`."""
    errs = _errors([c for c in all_cases if (c.engine, c.row["model"], c.row["split"]) == (engine, model, "validation")
                    and c.source.startswith("aiconfigurator")], cals[engine])["ttft"]
    return f"{sum(e > bar for e in errs)} of {len(errs)}"


FLOOR_CONCURRENCY = 8
"""The most requests in flight at which the TTFT floor table (_floor_lines) reads a row: few enough
that queueing and the first wave are small."""


def _floors(all_cases: list[Case], cals: dict[str, Calibration]) -> tuple[dict, dict]:
    """Per engine and model, what the measured TTFT holds beyond the model's steps at low load:
    measured TTFT minus the prediction without the per-request latency (request_ms, stream_us),
    over the sample's rows with at most FLOOR_CONCURRENCY in flight; and what each row's
    prediction adds."""
    floors: dict[tuple[str, str], list[float]] = {}
    added: dict[tuple[str, str], set[float]] = {}
    for c in all_cases:
        if not c.source.startswith("aiconfigurator") or c.row["concurrency"] > FLOOR_CONCURRENCY:
            continue
        got = predict(c, cals[c.engine].model_copy(update={"request_ms": 0.0, "stream_us": 0.0}))
        if got is None:
            continue
        floors.setdefault((c.engine, c.row["model"]), []).append(c.measured["ttft"] - got["ttft"])
        # What the row's prediction adds (none for a run without a front end: _engine).
        added.setdefault((c.engine, c.row["model"]), set()).add(_engine(c, cals[c.engine]).calibration.request_ms)
    return floors, added


def _floor_lines(all_cases: list[Case], cals: dict[str, Calibration]) -> list[str]:
    """The table of _floors: median and range per engine and model."""
    floors, added = _floors(all_cases, cals)
    lines = ["", f"The TTFT the steps leave unexplained at low load (the sample's rows with at most {FLOOR_CONCURRENCY} in flight:",
             "measured TTFT minus the prediction without the per-request latency; median and range), which",
             "the one per-request constant of each engine stands for (the last column: what the rows'",
             "prediction adds, none for a run the harness predicts without a front end):", "",
             "| engine | model | rows | median ms | range ms | per-request latency added |", "|---|---|---|---|---|---|"]
    for (engine, model), v in sorted(floors.items()):
        lines.append(f"| {engine} | {model} | {len(v)} | {statistics.median(v):.0f} | {min(v):.0f} to {max(v):.0f} | "
                     + ", ".join(f"{ms:.0f} ms" for ms in sorted(added[(engine, model)])) + " |")
    return lines


DENSE = "llama-3.1-70b"
MOE = ("deepseek-v3", "qwen3-235b-a22b")


def _moe_floor(all_cases: list[Case], cals: dict[str, Calibration]) -> tuple[float, float, float, float]:
    """(least, most) of the MoE models' median floor over the dense Llama 3.1 70B's on the same
    engine, and TensorRT-LLM's DeepSeek and Llama 3.1 70B medians (ms)."""
    floors, _ = _floors(all_cases, cals)
    med = {k: statistics.median(v) for k, v in floors.items()}
    ratios = [med[(e, m)] / med[(e, DENSE)] for (e, m) in med if m in MOE and (e, DENSE) in med and med[(e, DENSE)] > 0]
    return min(ratios), max(ratios), med[("trtllm", "deepseek-v3")], med[("trtllm", DENSE)]


def _dp8(all_cases: list[Case], cals: dict[str, Calibration]) -> tuple[float, float, int, int, float, float]:
    """TensorRT-LLM's DeepSeek rows under attention DP 8 in the sample: measured TTFT range (s),
    concurrency range, predicted TTFT range (s)."""
    rows = [c for c in all_cases if c.engine == "trtllm" and c.row["model"] == "deepseek-v3"
            and c.source.startswith("aiconfigurator") and (c.row.get("attention_dp") or 1) == 8]
    got = [predict(c, cals["trtllm"]) for c in rows]
    measured = [c.measured["ttft"] / 1e3 for c in rows]
    predicted = [g["ttft"] / 1e3 for g in got if g is not None]
    flight = [c.row["concurrency"] for c in rows]
    return min(measured), max(measured), min(flight), max(flight), min(predicted), max(predicted)


def _prompt_slopes(all_cases: list[Case], cals: dict[str, Calibration]) -> tuple[float, float]:
    """Qwen3-235B-A22B on SGLang and vLLM: how many times faster its measured TTFT grows with the
    prompt than the prediction, between the shortest and longest prompt of each series of the
    sample's rows (one engine, layout, concurrency and output length); (least, most)."""
    series: dict[tuple, list[tuple[int, float, float]]] = {}
    for c in all_cases:
        r = c.row
        if r["model"] != "qwen3-235b-a22b" or c.engine not in ("sglang", "vllm") or not c.source.startswith("aiconfigurator"):
            continue
        got = predict(c, cals[c.engine])
        if got is None:
            continue
        key = (c.engine, r["tp"], r.get("attention_dp"), r.get("moe_ep"), r["concurrency"], r["osl"])
        series.setdefault(key, []).append((r["isl"], c.measured["ttft"], got["ttft"]))
    ratios = []
    for points in series.values():
        points.sort()
        (lo, m0, p0), (hi, m1, p1) = points[0], points[-1]
        if hi > lo and p1 > p0:
            ratios.append((m1 - m0) / (p1 - p0))
    return min(ratios), max(ratios)


IN_FLIGHT_BAR = 0.25
"""The requests in flight a plan holds at a rate, against the engine's own benchmark: within 25%."""


def _in_flight_lines(all_cases: list[Case]) -> list[str]:
    """TensorRT-LLM's online rows that carried their rate: requests in flight, measured and planned."""
    rows = [x for x in in_flight(all_cases) if x["case"].row["split"] == "validation"]
    errs = [x["planned"] / x["measured"] - 1 for x in rows]
    within = sum(abs(e) <= IN_FLIGHT_BAR for e in errs)
    lines = [""] + textwrap.wrap(
        "Requests in flight at a rate: on TensorRT-LLM's online validation rows whose run carried the "
        "offered rate (at least 95% of it achieved), the run's own count by Little's law (achieved "
        "requests/s x (TTFT + (osl - 1) ITL)) against the plan's at the batch serve() runs for that rate "
        f"(the rate x its predicted latency there): median error "
        f"{statistics.median(abs(e) for e in errs):.1%}, {within} of {len(rows)} within "
        f"{IN_FLIGHT_BAR:.0%} (bar: all).", WIDTH)
    lines += ["", "| model | ISL / OSL | requests/s | measured in flight | planned (batch) | error |", "|---|---|---|---|---|---|"]
    for x, e in zip(rows, errs):
        r = x["case"].row
        lines.append(f"| {r['model']} | {r['isl']:,} / {r['osl']:,} | {x['rate']:g} | {x['measured']:.2f} | "
                     f"{x['planned']:.2f} ({x['batch']:,}) | {e:+.1%} |")
    return lines


def _amd_lines() -> list[str]:
    """AMD's published vLLM rows against the NVIDIA-fitted constants a plan on MI300X uses."""
    rows = amd_check()
    errs = [r["predicted"] / r["throughput"] - 1 for r in rows]
    med = statistics.median(errs)
    lines = [""] + textwrap.wrap(
        "AMD GPUs: no constant is fitted on AMD hardware, and a plan on an AMD GPU says so (a Note: "
        "uncalibrated). AMD's own published vLLM throughput on 8 x MI300X "
        "(benchmarks/serving/amd_vllm_perf.yaml, two ROCm containers; validation rows only) against what "
        f"those NVIDIA-fitted constants predict: median error {med:+.0%}, from {min(errs):+.0%} to "
        f"{max(errs):+.0%} ({len(rows)} rows): a plan on MI300X expects {1 + med:.1f} times the "
        "throughput AMD measures.", WIDTH)
    lines += ["", "| container | model | ISL / OSL | prompts | batch | measured tokens/s | predicted | error |",
              "|---|---|---|---|---|---|---|---|"]
    for r, e in zip(rows, errs):
        prompts = f"{r['prompts']:,}" if r["prompts"] else "-"
        lines.append(f"| {r['container']} | {r['model']} | {r['isl']:,} / {r['osl']:,} | {prompts} | "
                     f"{r['batch']:,} | {r['throughput']:,.1f} | {r['predicted']:,.0f} | {e:+.0%} |")
    pe, be, off = amd_trial()
    lines += [""] + textwrap.wrap(
        "A two-constant fit on the 70B rows alone (compute and bandwidth efficiency on a grid of 0.05, "
        f"the rest vLLM's: serving_validation.amd_trial) lands at {pe:.2f} of the FP8 peak and {be:.2f} "
        f"of the HBM bandwidth and leaves the 405B rows {off:.0%} off (median). Efficiencies that low "
        "say the benchmark is not the steady state the model states (its run starts with every prompt "
        "at once, and the page does not say whether its figure counts input tokens), so none is "
        "adopted until AMD-published latency and serving rows can pin them.", WIDTH)
    return lines


def render() -> list[str]:
    """docs/validation.md's serving section (markdown lines)."""
    from apsi.serving.calibrated import CALIBRATION

    all_cases, skipped = cases()
    lines = ["## Serving: calibration and validation", "",
             "The serving model (apsi.serving.replica, docs/method.md) has nine timing constants per engine, fitted",
             "by `python benchmarks/serving_validation.py --fit` on the calibration rows of benchmarks/serving",
             "(TensorRT-LLM's performance overview, v0.17 and v1.0 maximum-throughput tables and the v0.14 online",
             "table; a named subset of aiconfigurator's measured serving sample); the split into calibration and",
             "validation rows is a fixed hash of each layout's series (benchmarks/serving/README.md), decided before",
             "fitting. The fit minimises each figure's mean absolute log error over the calibration rows, TPOT,",
             "TTFT and throughput weighing alike (the script's docstring says why). Errors are median absolute",
             "percentage errors (MdAPE), with the number of figures in brackets.",
             "", "Constants:", "",
             "| engine | prefill efficiency | bandwidth efficiency | fixed cost per layer | per all-reduce doubling "
             "| per decoding sequence | per request, to the first token | front end per streamed token "
             "| routed experts' share of the efficiency | reads and FLOPs overlapped |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, cal in sorted(CALIBRATION.items()):
        lines.append(f"| {name} | {cal.prefill_efficiency:.3f} | {cal.bandwidth_efficiency:.3f} | "
                     f"{cal.layer_us:.2f} us | {cal.collective_us:.2f} us | {cal.sequence_us:.2f} us | {cal.request_ms:.1f} ms | "
                     f"{cal.stream_us:.1f} us | "
                     f"{cal.expert_efficiency:.3f} | {cal.overlap:.3f} |")
    lines += ["", "Validation rows, against the bars (TPOT 12%, throughput 12%, TTFT 20%; TTFT is the mean TTFT a run reports):", ""]
    lines += _validation_summary(all_cases, CALIBRATION)
    lines += ["", "By engine and source:", ""]
    lines += table(all_cases, CALIBRATION)
    lines += _leave_one_out_lines()
    lines += _floor_lines(all_cases, CALIBRATION)
    lines += _in_flight_lines(all_cases)
    lines += _amd_lines()
    dp8, slopes, moe = _dp8(all_cases, CALIBRATION), _prompt_slopes(all_cases, CALIBRATION), _moe_floor(all_cases, CALIBRATION)
    lines += ["", "Rows left out (the model cannot state them): "
              + "; ".join(f"{why}: {n}" for why, n in sorted(skipped.items())) + ".", "",
              "Where the model is weakest: TTFT, the hardest of the three: it holds the engine's latency outside",
              "the GPU's steps (a fitted constant per engine, stretched by the front end's streaming work: two",
              "constants standing for tokenizers, HTTP servers and schedulers the model does not itemize), the",
              "closed loop's first wave (the benchmark's protocol, assumed InferenceMAX's: docs/method.md 5.2), a",
              "steady state taken as free of prefill queueing (the closed loop's arrivals keep their prefills'",
              "spacing; jitter in real runs queues some) and queueing near saturation; then MoE layouts, whose",
              "expert kernels the model states with one share of the dense efficiency per engine, whatever the",
              "expert's size and the batch. Two groups of rows hold much of the TTFT error: TensorRT-LLM's",
              "DeepSeek-R1 rows with attention DP 8 (measured %.0f to %.0f s at %d to %d in flight, predicted %.1f to" % dp8[:5],
              "%.1f s: the engine's scheduling of prompts across attention-DP ranks is not modelled), and" % dp8[5],
              "Qwen3-235B-A22B on SGLang and vLLM, whose measured TTFT grows with the prompt %.1f to %.0f times" % slopes,
              "faster (between the shortest and longest prompt of each series of rows) than its",
              "prefill FLOPs and bytes at the fitted efficiencies say (a separate efficiency for",
              "the experts' prefill GEMMs, fitted, did not carry to the validation rows: SGLang's TTFT error rose).",
              "On TensorRT-LLM its Llama 3.1 70B rows are %s validation TTFTs off by more than 25%%, most" % (
                  _off(all_cases, CALIBRATION, "trtllm", "llama-3.1-70b"),),
              "of them over-predicted, as the shared per-request latency is fitted up by DeepSeek-R1's rows",
              "(below). Its Llama 3.1 8B rows (%s off; no date, client or precision recorded) are predicted as" % (
                  _off(all_cases, CALIBRATION, "trtllm", "llama-3.1-8b"),),
              "the run their calibration rows show: TTFT is one completion interval plus the modelled steps,",
              "a request queued beyond the engine's batch, with no front end before the first token",
              "(benchmarks/serving_validation.py, QUEUED_BEYOND_BATCH; inferred from the rows, not recorded, and",
              "shown by no other collection of the sample).",
              "At low load (the table above) the MoE models' TTFT holds %.1f to %.1f times the dense Llama 3.1 70B's" % moe[:2],
              "time outside the modelled steps on the same engine (on TensorRT-LLM, DeepSeek-R1 %.0f ms against" % moe[2],
              "%.0f ms), which one per-request constant per engine cannot be both of; the model has no term for it." % moe[3],
              "Part of it is the benchmark's server settings: InferenceMAX's launch scripts for TensorRT-LLM",
              "(benchmarks/*_trt_slurm.sh in its repository) make context requests of Llama 3.1 70B at 1k/1k",
              "below TP 8 wait up to 20 iterations to be batched (batch_wait_timeout_iters; on TP 4, 192 to",
              "282 ms measured against 62 to 103 ms on TP 8), and give DeepSeek-R1 a token budget of about one",
              "prompt per step and, under attention DP, a balancing wait of up to 60 iterations. The sample",
              "does not say which script version measured which row, and the harness does not state them; a",
              "trial adding the 20 iterations to the rows they would apply to raised TensorRT-LLM's TTFT error",
              "(to 32.3%, under the eight-constant model without overlap), the shared per-request constant",
              "then serving DeepSeek-R1's rows the more.",
              "SGLang's constants come from 38 rows, most of them MoE and MLA models, so its dense decode is not",
              "well determined."]
    words = {"prefill_efficiency": "prefill efficiency", "bandwidth_efficiency": "bandwidth efficiency",
             "layer_us": "fixed cost per layer (us)", "collective_us": "cost per all-reduce doubling (us)",
             "request_ms": "latency per request to the first token (ms)",
             "expert_efficiency": "routed experts' share of the efficiency",
             "stream_us": "front end's time per streamed token (us)",
             "sequence_us": "cost per decoding sequence per step (us)",
             "overlap": "share of the shorter step part overlapped"}
    bounded = [f"{name}'s {words[key]}, {getattr(cal, key):g}" for name, cal in sorted(CALIBRATION.items())
               for key, (lo, hi) in BOUNDS.items() if getattr(cal, key) in (lo, hi)]
    if bounded:
        lines += ["", "Constants the fit left at a bound of their range (the data does not determine them): "
                  + "; ".join(bounded) + "."]
    unmoved = [f"{name}'s {words[key]}, {getattr(cal, key):g}" for name, cal in sorted(CALIBRATION.items())
               for key in BOUNDS if getattr(cal, key) == START[key] and START[key] not in BOUNDS[key]]
    if unmoved:
        lines += ["", "Constants the fit left at their starting value (no step along them, down to a 128th of the first,",
                  "lowered the loss: an absolute-error loss has kinks, and the descent stops at one): "
                  + "; ".join(unmoved) + "."]
    lines += [""]
    lines += ["A bar marked missed above is a part of the serving model that is not yet good enough; none is",
              "closed by fitting to a validation row.", ""]
    return lines



if __name__ == "__main__":
    print("\n".join(render()))
