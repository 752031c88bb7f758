"""The serving model against published measurements: fit each engine's nine timing constants on the
calibration rows of benchmarks/serving, and report the error on every row, calibration and validation
apart (the validation rows are never fitted on).

    python benchmarks/serving_validation.py --fit   # refit, rewrite apsi/serving/calibrated.py
    python benchmarks/serving_validation.py         # print the tables docs/validation.md holds
                                                    # (benchmarks/serving_report.py renders them)

docs/validation.md's serving section is benchmarks/serving_report.py's render() of these predictions,
written by benchmarks/validation.py (its --check fails when the section is stale: tests/test_megatron.py).

Each row is predicted with the serve() functions (apsi.serving.replica, apsi.serving.walk), for the
row's engine, model, GPU, precision and layout:
- TensorRT-LLM's maximum-throughput tables: one replica at the largest batch its KV cache holds
  (the benchmark queues every request at once), with the KV cache at 0.95 of free memory as the tables
  say most runs were; the figure is output tokens/s.
- TensorRT-LLM's online table: one replica at the smallest batch carrying the offered rate (or its
  largest batch, at most the run's 500 requests, at "INF" or past its capacity); achieved requests/s
  (the offered rate where the replica carries it), mean TTFT and mean inter-token latency. A run's
  requests beyond what the replica holds wait for a place (backlog), and "INF" releases them all
  at once, so its first ones wait for each other's prefills (first_wave, over the whole run).
- aiconfigurator's sample: one replica at its measured concurrency, a closed loop (no steady-state
  prefill queue: replica.Workload.closed), TTFT with the closed loop's first wave (first_wave); TTFT,
  TPOT and output tokens/s per GPU (Little's law on those two, as the sample
  derives its own).
Rows the model cannot state are skipped and counted, with the reason: a GPU outside the catalog, a model
without a preset, MoE TP x EP other than the GPUs tp x attention_dp give (rows whose layout does not add up). Expert parallelism and attention data
parallelism are the row's own (aiconfigurator's moe_ep and attention_dp: replica.Replica's ep and dp).

The fit minimises, over the calibration rows of one engine, the mean absolute log error of each of the
three figures, summed over the figures (TPOT, TTFT and throughput weighted alike whatever the number of
rows holding each), by coordinate descent from a fixed start with fixed steps: the same rows give the same
constants. Absolute, not squared, errors: the figures reported are median absolute errors, and the
measured rows hold outliers no engine model states (a run measured past its saturation, 29.7 s TTFT),
which a squared loss lets move every constant; a least-absolute-deviations fit is the one whose
optimum the median of the errors is (loss()).

TTFT under load is the benchmark's as much as the engine's. A closed-loop run (the aiconfigurator
sample) releases its first requests together, and what they wait for the prompts before theirs is a
share of its mean TTFT (first_wave); TensorRT-LLM's throughput tables come from trtllm-bench,
in-process on pre-tokenized requests, and its online table from Triton's C++ server, so the engine's
per-request latency outside the steps (Calibration.request_ms: the OpenAI-compatible server's HTTP,
tokenizer, admission) is not in them (_engine).
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "serving"))

import load  # noqa: E402  (benchmarks/serving/load.py)

from apsi.catalog import catalog  # noqa: E402
from apsi.inputs.modelspec import resolve_model  # noqa: E402
from apsi.serving import admission  # noqa: E402
from apsi.serving import operating as op  # noqa: E402
from apsi.serving import replica as rp  # noqa: E402
from apsi.serving.engine import Calibration, Engine, maker  # noqa: E402
from apsi.serving.engines import engines  # noqa: E402
from apsi.serving.walk import smallest  # noqa: E402

CALIBRATED = ROOT / "apsi" / "serving" / "calibrated.py"
LEAVE_ONE_OUT = ROOT / "benchmarks" / "serving" / "leave_one_model_out.json"
"""The leave-one-model-out errors (leave_one_model_out()), written by --fit with the constants: a
dozen fits, too slow for the staleness check that renders the rest."""
PERF_OVERVIEW_FRACTION = 0.95
"""The KV-cache share of free memory TensorRT-LLM's throughput tables used "in the majority of cases"
(perf-overview.md; benchmarks/serving/trtllm_perf_overview.yaml, tables.*.kv_cache)."""
WEIGHTS = {"tpot": 1.0, "throughput": 1.0, "ttft": 1.0}
METRICS = ("tpot", "ttft", "throughput")


class Case(NamedTuple):
    source: str
    row: dict
    model: Any
    gpu: Any
    weights: str
    kv: str
    engine: str
    measured: dict


def _kv(row: dict, weights: str) -> str:
    if row.get("kv_precision") in rp.KV_BYTES:
        return row["kv_precision"]
    # Not stated: the engine's default, as serve() assumes (apsi.serving.replica.default_kv).
    return rp.default_kv(engines()[row["engine"]], weights)


def cases() -> tuple[list[Case], dict[str, int]]:
    """Every row the model can state, and the reasons for the rest, counted."""
    gpus = catalog()
    out, skipped = [], {}
    models: dict[str, Any] = {}

    def skip(why: str) -> None:
        skipped[why] = skipped.get(why, 0) + 1

    for source in ("trtllm_perf_overview", "aiconfigurator_sample"):
        for row in load.rows(source):
            if row["gpu"] not in gpus:
                skip(f"GPU {row['gpu']} not in the catalog")
                continue
            if row["model"] not in models:
                try:
                    models[row["model"]] = resolve_model(row["model"])
                except ValueError:
                    models[row["model"]] = None
            if models[row["model"]] is None:
                skip(f"model {row['model']} has no preset")
                continue
            if (row.get("ep") or 1) > 1:
                skip("expert parallelism in a throughput table")
                continue
            ranks = row["tp"] * (row.get("attention_dp") or 1)
            if (row.get("moe_tp") or 1) * (row.get("moe_ep") or 1) not in (1, ranks):
                skip("MoE TP x EP other than the GPUs tp x attention_dp give")
                continue
            weights = row["weights_precision"] or "bf16"
            gpu = gpus[row["gpu"]]
            if weights not in rp.weight_precisions(gpu):
                skip(f"{weights} on {gpu.name}")
                continue
            kind = load.kind_of(source, row)
            if kind == "throughput":
                measured = {"throughput": row["output_tokens_per_s_total"]}
            elif kind == "online":
                measured = {"throughput": row["request_throughput_req_per_s"], "ttft": row["mean_ttft_ms"],
                            "tpot": row["mean_itl_ms"]}
            else:
                measured = {"ttft": row["ttft_ms"], "tpot": row["tpot_ms"],
                            "throughput": row["derived_output_tokens_per_s_per_gpu"]}
            out.append(Case(f"{source}:{kind}", row, models[row["model"]], gpu, weights, _kv(row, weights),
                            row["engine"], measured))
    return out, skipped


QUEUED_BEYOND_BATCH = {("trtllm", "1.0.0rc3", "meta-llama/Llama-3.1-8B-Instruct"): 1}
"""Requests in flight beyond the engine's batch, for one collection of aiconfigurator's sample (engine,
engine version, checkpoint; the sample's source file data/h100_sxm/trtllm/1.0.0rc3/
meta-llama_Llama-3.1-8B-Instruct.csv). Its rows record no date, client or precision; their TTFT is
one completion interval (request latency / concurrency, from the row's own TTFT and TPOT) plus the
modelled steps, with nothing for a front end: on its 18 calibration rows with at most 32 in flight,
measured TTFT minus the one interval minus the steps is 14 ms median (-67 to 45 ms), where measured
TTFT minus the steps alone is 124 ms, and the measured TTFT falls as the concurrency rises (129 to
103 ms from 8 to 16 in flight at TP 2, ISL/OSL 1,024/128), the mark of a request waiting for a place
that frees the faster the more requests share the engine. So its rows are predicted as a run holding
one request more than the engine's batch (the sample's batch_size), in process (trtllm-bench's way:
no HTTP server or tokenizer before the first token, _engine). No other collection of the sample
shows it: on their calibration rows the same difference is -127 to -2,451 ms median per model (their
TTFT is below one completion interval). Found on the calibration rows; no constant is fitted to it."""


def _queued(case: Case) -> int:
    r = case.row
    return QUEUED_BEYOND_BATCH.get((case.engine, r.get("engine_version"), r.get("hf_model")), 0) \
        if case.source.startswith("aiconfigurator") else 0


def _engine(case: Case, cal: Calibration) -> Engine:
    e = engines()[case.engine].on(case.gpu)  # its defaults on the row's GPU, as the planner's walk takes them
    update: dict[str, Any] = {"calibration": cal}
    if case.source.endswith(":throughput"):
        update["memory_fraction"] = PERF_OVERVIEW_FRACTION
    if case.source.startswith("trtllm_perf_overview") or _queued(case):
        # trtllm-bench runs the engine in its own process on a dataset tokenized beforehand
        # (perf-overview.md: prepare_dataset.py writes token ids; `trtllm-bench ... throughput`
        # reads them): no HTTP server and no tokenizer stand before the first token. The online
        # table went through Triton's TensorRT-LLM backend (perf-overview.md, "Online Serving
        # Measurements"), a C++ server, not the OpenAI-compatible Python servers the sample's
        # request_ms stands for; its low-rate rows (Llama 3.1 70B TP 4 at ISL 467 and 2 requests/s:
        # 50 to 62 ms) are what the steps alone give (52 to 55 ms), so none is added.
        update["calibration"] = cal.model_copy(update={"request_ms": 0.0, "stream_us": 0.0})
    return e.model_copy(update=update)


def predict(case: Case, cal: Calibration) -> dict | None:
    """The model's figures for a row (the measured ones' units), or None when it does not fit."""
    r = case.row
    e = _engine(case, cal)
    rep = rp.Replica(r["tp"], r["pp"] or 1, ep=r.get("moe_ep") or 1, dp=r.get("attention_dp") or 1)
    kind = case.source.split(":")[1]
    # aiconfigurator's sample is measured at a fixed concurrency: a closed loop (rp.Workload.closed).
    w = rp.Workload(r["isl"], r["osl"], closed=kind == "silicon")
    a = case.model.architecture
    sh = rp.shape(a, case.gpu, e, case.weights, case.kv, rep)
    top = admission.max_batch(sh, e, w)
    if top < 1:
        return None

    def at(b: int) -> op.Point:
        return op.operating_point(sh, w, b)

    if kind == "throughput":
        return {"throughput": at(top).requests_per_s * w.osl}
    if kind == "online":
        rate = r["offered_rate_req_per_s"]
        # A run of n requests never has more than n in flight.
        most = min(top, r["num_requests"])
        b = most if rate is None or at(most).requests_per_s <= rate else \
            smallest(1, most, lambda n: at(n).requests_per_s >= rate)
        p = at(b)
        # A rate the replica carries is what it achieves; past its capacity (or all at once) the
        # run's requests queue for a place (backlog).
        done = p.requests_per_s if rate is None else min(rate, p.requests_per_s)
        ttft = p.ttft_s + backlog(r["num_requests"], rate, b, p.requests_per_s)
        if rate is None:
            ttft += first_wave(sh, w, b, e.chunk_tokens, runs=r["num_requests"] / b)
        return {"throughput": done, "ttft": ttft * 1e3, "tpot": p.tpot_s * 1e3}
    # More requests in flight than the replica holds wait in the queue for a place: by Little's law
    # the extra ones wait (c - held) / completions per second before their prefill starts (and a
    # collection that kept requests queued beyond the engine's batch, QUEUED_BEYOND_BATCH, those too).
    c = r["concurrency"]
    held = min(c, top)
    p = at(held)
    queue = (c + _queued(case) - held) / p.requests_per_s
    ttft = p.ttft_s + queue + first_wave(sh, w, held, e.chunk_tokens)
    tpot = p.tpot_s
    # The sample's throughput is its own Little's-law figure from its TTFT and TPOT (README):
    # the same arithmetic on the predicted ones.
    return {"ttft": ttft * 1e3, "tpot": tpot * 1e3,
            "throughput": c * w.osl / (ttft + (w.osl - 1) * tpot) / rep.gpus}


PROMPTS_PER_CONCURRENCY = 10
"""Requests a closed-loop benchmark sends per unit of concurrency: InferenceMAX's client runs
benchmark_serving.py with --num-prompts $((CONC * 10)) --max-concurrency $CONC --request-rate inf
(InferenceMAX README, "Benchmark Client Configuration"), the workloads (ISL/OSL 1,024/1,024,
1,024/8,192, 8,192/1,024 at concurrency 4 to 64) the aiconfigurator sample's DeepSeek-R1 and
Llama 3.1 70B rows hold. The sample does not record its client's request count; the same protocol
is assumed for its other rows."""


def backlog(n: int, rate: float | None, held: int, served: float) -> float:
    """The mean wait for a place of a run's n requests offered at `rate` a second (None: all at
    once, the online table's "INF") to a replica holding `held` at a time and completing `served`
    a second: the k-th (from 0) arrives at k / rate and finds a place when k - held + 1 requests
    have finished, (k - held + 1) / served after the start (arrivals and completions at their mean
    pace); 0 when the replica keeps up."""
    gap = 0.0 if rate is None else 1.0 / rate
    if rate is not None and rate <= served:
        return 0.0
    return sum(max(0.0, (k - held + 1) / served - k * gap) for k in range(held, n)) / n


def first_wave(sh: rp.Shape, w: rp.Workload, held: int, chunk_tokens: int,
               runs: float = PROMPTS_PER_CONCURRENCY) -> float:
    """What a closed-loop benchmark's start adds to its mean TTFT: its first `held` requests are
    released together, before anything decodes, so the k-th waits for the prefills of the k - 1
    before it in its attention group, (held / dp - 1) / 2 on average. Chunked prefill fills each
    step with up to the engine's chunk_tokens of prompts (vLLM's max_num_batched_tokens, SGLang's
    chunked_prefill_size, TensorRT-LLM's max_num_tokens), so those prompts run chunk_tokens / prompt
    to a step (replica.step_seconds on a step of chunk_tokens prefill tokens; one prompt a step when
    a prompt is longer); later requests arrive one at a time as others finish, the steady state
    operating.operating_point states. Over held x `runs` requests (PROMPTS_PER_CONCURRENCY in a closed
    loop; the online table's run of n released at once: n / held) the first wave's share is 1 / runs."""
    fresh = w.isl - w.prefix
    chunk = max(fresh, chunk_tokens)
    step = rp.step_seconds(sh, 0, 0, 0, w.prefix + fresh / 2, own=chunk)
    # Under attention DP the wave is spread over the groups, each prefilling its own share.
    return max(0.0, held / sh.dp - 1) / 2 * step * fresh / chunk / runs


UNFIT_PENALTY = 2.0
"""The absolute log error a figure counts when the model says the measured layout does not fit or
cannot keep up (e^2: 7.4 times off), a large fixed penalty."""


def loss(rows: list[Case], cal: Calibration) -> float:
    """Per figure (TPOT, TTFT, throughput), the mean absolute log error over the rows measuring it;
    summed over the figures with WEIGHTS (module docstring)."""
    total: dict[str, float] = {}
    count: dict[str, int] = {}
    for c in rows:
        got = predict(c, cal)
        unfit = got is None or not all(math.isfinite(v) for v in got.values())
        for metric, value in c.measured.items():
            if not value or (not unfit and not got.get(metric)):
                continue
            err = UNFIT_PENALTY if unfit else abs(math.log(got[metric] / value))
            total[metric] = total.get(metric, 0.0) + err
            count[metric] = count.get(metric, 0) + 1
    return sum(WEIGHTS[m] * total[m] / count[m] for m in total)


BOUNDS = {"prefill_efficiency": (0.05, 1.0), "bandwidth_efficiency": (0.1, 1.0), "layer_us": (0.0, 500.0),
          "collective_us": (0.0, 500.0), "request_ms": (0.0, 1000.0), "expert_efficiency": (0.1, 1.0),
          "stream_us": (0.0, 200.0), "sequence_us": (0.0, 200.0), "overlap": (0.0, 1.0)}
START = {"prefill_efficiency": 0.5, "bandwidth_efficiency": 0.7, "layer_us": 20.0, "collective_us": 10.0,
         "request_ms": 50.0, "expert_efficiency": 1.0, "stream_us": 0.0, "sequence_us": 0.0, "overlap": 1.0}


def fit(rows: list[Case], label: str) -> Calibration:
    """Coordinate descent: each constant up and down by its step while that lowers the loss, the
    steps halving when nothing does; 8 halvings."""
    values = dict(START)
    steps = {"prefill_efficiency": 0.1, "bandwidth_efficiency": 0.1, "layer_us": 10.0, "collective_us": 10.0,
             "request_ms": 50.0, "expert_efficiency": 0.1, "stream_us": 10.0, "sequence_us": 10.0, "overlap": 0.1}

    def make(v: dict) -> Calibration:
        return Calibration(**{k: round(x, 6) for k, x in v.items()}, rows=label)

    best = loss(rows, make(values))
    for _ in range(8):
        improved = True
        while improved:
            improved = False
            for key in values:
                for sign in (1, -1):
                    lo, hi = BOUNDS[key]
                    trial = dict(values)
                    trial[key] = min(hi, max(lo, values[key] + sign * steps[key]))
                    if trial[key] == values[key]:
                        continue
                    value = loss(rows, make(trial))
                    if value < best - 1e-12:
                        best, values, improved = value, trial, True
        steps = {k: s / 2 for k, s in steps.items()}
    return make(values)


def _ape(got: float, want: float) -> float:
    return abs(got / want - 1)


def _errors(rows: list[Case], cal: Calibration) -> dict[str, list[float]]:
    errs: dict[str, list[float]] = {m: [] for m in METRICS}
    for c in rows:
        got = predict(c, cal)
        if got is None:
            continue
        for metric, value in c.measured.items():
            if value and metric in got:
                errs[metric].append(_ape(got[metric], value))
    return errs


CARRIED = 0.95
"""An online row's offered rate counts as carried when the run achieved at least this share of it."""


def in_flight(all_cases: list[Case]) -> list[dict]:
    """The requests in flight at a rate, measured against planned, on TensorRT-LLM's online rows
    whose run carried the offered rate: measured, by Little's law, the achieved rate times a
    request's mean latency (TTFT + (osl - 1) ITL); planned, the rate times the same latency at the
    batch a plan runs a replica of the row's layout at for that rate (the smallest carrying it,
    apsi.serving.walk.size)."""
    out = []
    for c in all_cases:
        r = c.row
        rate = r.get("offered_rate_req_per_s")
        if not c.source.endswith(":online") or rate is None or r["request_throughput_req_per_s"] < CARRIED * rate:
            continue
        e = _engine(c, _shipped()[c.engine])
        sh = rp.shape(c.model.architecture, c.gpu, e, c.weights, c.kv, rp.Replica(r["tp"], r["pp"] or 1))
        w = rp.Workload(r["isl"], r["osl"])
        top = admission.max_batch(sh, e, w)
        b = smallest(1, top, lambda n: op.operating_point(sh, w, n).requests_per_s >= rate)
        p = op.operating_point(sh, w, b)
        measured = r["request_throughput_req_per_s"] * (r["mean_ttft_ms"] + (r["osl"] - 1) * r["mean_itl_ms"]) / 1e3
        out.append({"case": c, "rate": rate, "batch": b, "measured": measured,
                    "planned": rate * (p.ttft_s + (w.osl - 1) * p.tpot_s)})
    return out


def _shipped() -> dict[str, Calibration]:
    """The shipped constants (apsi.serving.calibrated), read when asked: --fit rewrites them."""
    from apsi.serving.calibrated import CALIBRATION

    return CALIBRATION


AMD_ROWS = ROOT / "benchmarks" / "serving" / "amd_vllm_perf.yaml"
"""AMD's published vLLM throughput on 8 x MI300X: validation rows only, never fitted (the file says why)."""


def amd_check(cal: Calibration | None = None) -> list[dict]:
    """Each of AMD's published rows with apsi's prediction at the engine's NVIDIA-fitted constants
    (what a plan on MI300X uses, and flags as uncalibrated): one TP 8 replica at the largest batch
    its KV cache holds under vLLM's paged admission, at most the run's prompts where the page states
    them (its --max-num-seqs), else vLLM's default max batch; output tokens/s, as the file reads the
    page's throughput."""
    import yaml

    rows = yaml.safe_load(AMD_ROWS.read_text(encoding="utf-8"))["rows"]
    gpu = catalog()["MI300X"]
    out = []
    for r in rows:
        e = engines()["vllm"]
        if cal is not None:
            e = e.model_copy(update={"calibration": cal})
        if r["prompts"]:
            e = e.model_copy(update={"max_sequences": r["prompts"]})
        sh = rp.shape(resolve_model(r["model"]).architecture, gpu, e, "fp8", rp.default_kv(e, "fp8"), rp.Replica(8, 1))
        w = rp.Workload(r["isl"], r["osl"])
        top = admission.max_batch(sh, e, w)
        got = op.operating_point(sh, w, top).requests_per_s * w.osl
        out.append({**r, "batch": top, "predicted": got})
    return out


def amd_trial() -> tuple[float, float, float]:
    """What AMD's rows would say if fitted, not adopted (serving_report says why): vLLM's constants
    with the compute and bandwidth efficiencies on a grid of 0.05 (0.05 to 1) chosen for the least
    mean absolute log error on the Llama 3.1 70B rows; (compute, bandwidth, the 405B rows' median
    absolute error at them)."""
    base = engines()["vllm"].calibration
    grid = [round(0.05 * i, 2) for i in range(1, 21)]

    def err(rows: list[dict], model: str) -> list[float]:
        return [abs(math.log(r["predicted"] / r["throughput"])) for r in rows if r["model"] == model]

    best = min(((statistics.fmean(err(amd_check(base.model_copy(update={"prefill_efficiency": pe, "bandwidth_efficiency": be})),
                                      "llama-3.1-70b")), pe, be) for pe in grid for be in grid))
    rows = amd_check(base.model_copy(update={"prefill_efficiency": best[1], "bandwidth_efficiency": best[2]}))
    off = statistics.median(_ape(r["predicted"], r["throughput"]) for r in rows if r["model"] == "llama-3.1-405b")
    return best[1], best[2], off


def leave_one_model_out(all_cases: list[Case]) -> list[dict]:
    """The stricter check benchmarks/serving/README.md decided on before fitting: per engine and
    model, the constants fitted on the other models' calibration rows, and the MdAPE on this
    model's validation rows (None where it has none)."""
    out = []
    for engine in sorted({c.engine for c in all_cases}):
        mine = [c for c in all_cases if c.engine == engine]
        for model in sorted({c.row["model"] for c in mine}):
            held = [c for c in mine if c.row["model"] == model and c.row["split"] == "validation"]
            rest = [c for c in mine if c.row["model"] != model and c.row["split"] == "calibration"]
            if not held or not rest:
                continue
            errs = _errors(held, fit(rest, "leave one model out"))
            out.append({"engine": engine, "model": model, "rows": len(held),
                        **{m: (round(statistics.median(v), 4) if v else None) for m, v in errs.items()}})
    return out


def _write(cals: dict[str, Calibration]) -> None:
    body = ['"""The serving engines\' fitted timing constants (apsi.serving.engine.Calibration).', "",
            "Written by benchmarks/serving_validation.py --fit from the calibration rows of benchmarks/serving (its",
            "README says which rows are calibration and which validation); do not edit by hand: rerun the script.",
            '"""', "", "from apsi.serving.engine import Calibration", "",
            "CALIBRATION: dict[str, Calibration] = {"]
    for name, cal in sorted(cals.items()):
        body.append(f"    {name!r}: Calibration(prefill_efficiency={cal.prefill_efficiency!r}, "
                    f"bandwidth_efficiency={cal.bandwidth_efficiency!r},")
        body.append(f"                        layer_us={cal.layer_us!r}, collective_us={cal.collective_us!r},")
        body.append(f"                        request_ms={cal.request_ms!r}, expert_efficiency={cal.expert_efficiency!r},")
        body.append(f"                        stream_us={cal.stream_us!r}, sequence_us={cal.sequence_us!r}, overlap={cal.overlap!r},")
        body.append(f"                        rows={cal.rows!r},")
        body.append(f"                        makers={cal.makers!r}),")
    body.append("}")
    CALIBRATED.write_text("\n".join(body) + "\n", encoding="utf-8")


if __name__ == "__main__":
    if "--fit" in sys.argv:
        all_cases, _ = cases()
        cals = {}
        for engine in sorted({c.engine for c in all_cases}):
            calibration = [c for c in all_cases if c.engine == engine and c.row["split"] == "calibration"]
            label = f"fitted on {len(calibration)} calibration rows of benchmarks/serving"
            makers = tuple(sorted({maker(c.gpu) for c in calibration}))
            cals[engine] = fit(calibration, label).model_copy(update={"makers": makers})
            print(engine, cals[engine], file=sys.stderr)
        _write(cals)
        print(f"wrote {CALIBRATED}", file=sys.stderr)
        import json

        LEAVE_ONE_OUT.write_text(json.dumps(leave_one_model_out(all_cases), indent=1) + "\n", encoding="utf-8")
        print(f"wrote {LEAVE_ONE_OUT}", file=sys.stderr)
    else:
        import serving_report  # benchmarks/serving_report.py

        print("\n".join(serving_report.render()))
