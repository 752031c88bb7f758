"""The hostile and extreme inputs apsi is checked against, and the writer of docs/bad-inputs.md.

Owns the list of bad inputs (each with its CLI arguments, the equivalent API call, and a regex
for the one-line message) used by tests/test_bad_input.py, and the table in docs/bad-inputs.md
made from real runs of the `apsi` command:

    python tests/bad_input_cases.py          # rewrite the table in docs/bad-inputs.md
    python tests/bad_input_cases.py --check  # exit 1 if it is stale (tests/test_bad_input.py checks the same table)

Catalog-file cases run in a scratch folder holding FILES; the folder's path is shown as <dir>.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

BOMB = "\n".join(['a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
                 + [f"{n}: &{n} [" + ", ".join([f"*{p}"] * 9) + "]" for p, n in zip("abcdefghijk", "bcdefghijkl")])
"""A billion-laughs alias bomb: twelve lines standing for 9^12 (about 2.8 * 10^11) strings."""
FILES = {
    "notyaml.yaml": "gpus: [1, 2\n",
    "nofields.yaml": "gpus:\n  X1:\n    bf16_tflops: 100\n",
    "scalar.yaml": "just a string\n",
    "negative.yaml": "gpus:\n  H100:\n    memory_gib: -3\n",
    "typo.json": '{"model_type": "llama", "hidden_sizes": 4096, "num_hidden_layers": 32, '
                 '"num_attention_heads": 32, "intermediate_size": 14336, "vocab_size": 128256}\n',
    "nolayers.json": '{"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, '
                     '"intermediate_size": 14336, "vocab_size": 128256}\n',
    "rwkv.json": '{"model_type": "rwkv", "hidden_size": 4096}\n',
    "broken.json": '{"model_type": "llama", \n',
    "inf.yaml": "gpus:\n  X1: {memory_gib: .inf, bf16_tflops: 900}\n",
    "boolean.yaml": "gpus:\n  X1: {memory_gib: true, bf16_tflops: 900}\n",
    "domain.yaml": "gpus:\n  X1: {memory_gib: 80, bf16_tflops: 900, scaleup_domain: 1000000000000}\n",
    "twice.yaml": "gpus:\n  X1: {memory_gib: 80, bf16_tflops: 900}\n  X1: {memory_gib: 40, bf16_tflops: 9}\n",
    "runs.yaml": "runs:\n  - {params: 7B}\n",
    "nulcatalog.yaml": 'catalog: "x\\0"\nruns:\n  - {params: 7B}\n',
    "dircatalog.yaml": "catalog: .\nruns:\n  - {params: 7B}\n",
    # Issue 22: numbers past Python's 4,300-digit limit, keys given twice, alias bombs, control
    # characters, inputs named as the output.
    "long.json": '{"model_type": "llama", "hidden_size": ' + "1" * 5000 + ', "num_hidden_layers": 32, '
                 '"num_attention_heads": 32, "intermediate_size": 14336, "vocab_size": 128256}\n',
    "twice.json": '{"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "hidden_size": 8192, '
                  '"num_attention_heads": 32, "intermediate_size": 14336, "vocab_size": 128256}\n',
    "wide.json": '{"model_type": "llama", "hidden_size": 100000000000000000, "num_hidden_layers": 32, '
                 '"num_attention_heads": 32, "intermediate_size": 14336, "vocab_size": 128256}\n',
    "kvheads.json": '{"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, '
                    '"num_key_value_heads": 3, "intermediate_size": 14336, "vocab_size": 128256}\n',
    "long.yaml": "gpus:\n  X1: {memory_gib: 80, bf16_tflops: 900, scaleup_domain: " + "1" * 5000 + "}\n",
    "longrun.yaml": "runs:\n  - {params: 7B, gpus: " + "1" * 5000 + "}\n",
    "bomb.yaml": "gpus:\n  X1: {memory_gib: 80, bf16_tflops: 900}\nsources:\n  " + BOMB.replace("\n", "\n  ") + "\n",
    "bombinline.yaml": "catalog:\n  " + BOMB.replace("\n", "\n  ") + "\nruns:\n  - {params: 7B}\n",
    "bombfile.yaml": "catalog: bomb.yaml\nruns:\n  - {params: 7B}\n",
    "loopcatalog.yaml": "catalog: loop-a.yaml\nruns:\n  - {params: 7B}\n",
    "runtwice.yaml": "runs:\n  - {params: 7B, gpu: H100, gpu: B200}\n",
    "newline.yaml": 'gpus:\n  "X1\\necho INJECTED": {memory_gib: 80, bf16_tflops: 900}\n',
    "escape.yaml": 'gpus:\n  X1: {memory_gib: 80, bf16_tflops: 900, description: "\\e[31mred"}\n',
    "topkey.yaml": "gpu:\n  X1: {memory_gib: 80, bf16_tflops: 900}\ngpus: {}\n",
    "named.yaml": "gpus:\n  X1: {name: Y1, memory_gib: 80, bf16_tflops: 900}\n",
    "cat.yaml": "gpus:\n  X1: {memory_gib: 80, bf16_tflops: 900}\n",
    "withcat.yaml": "catalog: cat.yaml\nruns:\n  - {params: 7B}\n",
    "plan.json": "{}\n",
    "gpt2.json": '{"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12, "vocab_size": 50257, '
                 '"n_positions": 1024}\n',
    "context.json": '{"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, '
                    '"intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 0}\n',
    "nobandwidth.yaml": "gpus:\n  X1: {memory_gib: 80, bf16_tflops: 1000, scaleup_domain: 8, gpus_per_node: 8}\n",
}
"""Catalog files the catalog cases read, written into the folder the commands run in."""
LINKS = {"loop-a.yaml": "loop-b.yaml", "loop-b.yaml": "loop-a.yaml", "loop-a.json": "loop-b.json",
         "loop-b.json": "loop-a.json", "cat-link.yaml": "cat.yaml", "cat-link.svg": "cat.yaml",
         "config-link.json": "typo.json", "plan-link.json": "plan.json"}
"""Symbolic links written beside FILES, each to its target: two loops, and links to inputs."""


@dataclass(frozen=True)
class Case:
    """One bad input: what it is, `apsi ARGV`, the API call that means the same, and the message."""

    id: str
    what: str
    argv: tuple[str, ...] | None
    """Arguments after `apsi`; None for a case only the Python API can express."""
    pattern: str
    """Regex the message (stderr without 'error: ') must match from its start."""
    api: tuple[str, tuple, dict] | None = None
    """(function in apsi, args, kwargs) raising ApsiError; None for CLI-only cases."""
    api_pattern: str | None = None
    """Regex for the API's message when it differs from the CLI's."""


def _plan(*args, **kwargs) -> tuple[str, tuple, dict]:
    return ("plan", args, kwargs)


NOT_A_SIZE = r"is not a size: give a number with an optional K/M/B/T suffix"
NOT_A_MODEL = r"is not a size, a preset or a config.json: give a number with an optional K/M/B/T suffix"
WHOLE_GPUS = r"a whole number from 1 to 1,000,000, such as 512, 16K or 2\^13"

CASES: list[Case] = [
    # -- sizes that do not parse -----------------------------------------------------------------
    Case("size-empty", "empty size", ("plan", ""), rf"params '' {NOT_A_SIZE}", _plan("")),
    Case("size-garbage", "garbage size", ("plan", "abc"), rf"params 'abc' {NOT_A_MODEL}", _plan("abc")),
    Case("size-suffix", "unknown suffix", ("plan", "1Q"), rf"params '1Q' {NOT_A_MODEL}", _plan("1Q")),
    Case("size-negative", "negative size (click reads -5B as options)", ("plan", "-5B"),
         r"-5B is negative: it must be positive", _plan("-5B"), r"params must be positive, got '-5B'$"),
    Case("size-negative-after-dashdash", "negative size after --", ("plan", "--", "-5B"),
         r"params must be positive, got '-5B'$", _plan("-5B")),
    Case("size-nan", "nan", ("plan", "nan"), rf"params 'nan' {NOT_A_MODEL}", _plan("nan")),
    Case("size-inf", "inf", ("plan", "inf"), rf"params 'inf' {NOT_A_MODEL}", _plan("inf")),
    Case("size-overflow", "overflowing size", ("plan", "1e400"), r"params '1e400' is not a finite size",
         _plan("1e400")),
    Case("size-rounds-to-zero", "size below one", ("plan", "0.4"), r"params '0\.4' rounds to zero", _plan("0.4")),
    Case("active-garbage", "garbage --active", ("plan", "70B", "--active", "abc"), rf"active 'abc' {NOT_A_SIZE}",
         _plan("70B", active="abc")),
    Case("tokens-garbage", "garbage --tokens", ("plan", "70B", "--tokens", "1Q"), rf"tokens '1Q' {NOT_A_SIZE}",
         _plan("70B", tokens="1Q")),
    # -- zero, negative, out of range ----------------------------------------------------------
    Case("tokens-zero", "zero tokens", ("plan", "70B", "--tokens", "0"), r"tokens must be positive, got '0'$",
         _plan("70B", tokens="0")),
    Case("tokens-negative", "negative tokens", ("plan", "70B", "--tokens", "-1T"),
         r"tokens must be positive, got '-1T'$", _plan("70B", tokens="-1T")),
    Case("days-zero", "zero days", ("plan", "70B", "--days", "0"), r"days: input should be greater than or equal to 0.0001, got '0'$",
         _plan("70B", days=0), r"days: input should be greater than or equal to 0.0001, got 0$"),
    Case("days-negative", "negative days", ("plan", "70B", "--days", "-3"),
         r"days: input should be greater than or equal to 0.0001, got '-3'$", _plan("70B", days=-3),
         r"days: input should be greater than or equal to 0.0001, got -3$"),
    Case("days-nan", "nan days", ("plan", "70B", "--days", "nan"), r"days: input should be a finite number",
         _plan("70B", days=float("nan"))),
    Case("days-garbage", "garbage days", ("plan", "70B", "--days", "abc"), r"days: input should be a valid number",
         _plan("70B", days="abc")),
    # Whole-number options are typed at the command line (apsi.cli.options WHOLE_RANGES): click's
    # usage error names the option and the range; the API says the same in its own words.
    Case("gpus-zero", "zero GPUs", ("plan", "70B", "--gpus", "0"),
         rf"Invalid value for '--gpus': 0 is out of range: give {WHOLE_GPUS} \(see apsi plan --help\)$",
         _plan("70B", gpus="0"), r"gpus: input should be greater than or equal to 1, got '0'$"),
    Case("gpus-negative", "negative GPUs", ("plan", "70B", "--gpus", "-8"),
         rf"Invalid value for '--gpus': -8 is out of range: give {WHOLE_GPUS} ", _plan("70B", gpus="-8"),
         r"gpus: input should be greater than or equal to 1, got '-8'$"),
    Case("gpus-fraction", "fractional GPUs", ("plan", "70B", "--gpus", "1.5"),
         rf"Invalid value for '--gpus': '1\.5' is not {WHOLE_GPUS} ", _plan("70B", gpus="1.5"),
         r"gpus: input should be a valid integer"),
    Case("tp-word", "a word as tp", ("plan", "70B", "--tp", "abc"),
         r"Invalid value for '--tp': 'abc' is not a whole number from 1 to 1,000,000 \(see apsi plan --help\)$",
         _plan("70B", tp="abc"), r"tp: input should be a valid integer"),
    Case("tp-zero", "zero tp", ("plan", "70B", "--tp", "0"),
         r"Invalid value for '--tp': 0 is out of range: give a whole number from 1 to 1,000,000 ",
         _plan("70B", tp=0), r"tp: input should be greater than or equal to 1, got 0$"),
    Case("zero-stage-4", "a ZeRO stage past 3", ("plan", "llama-3.1-8b", "--framework", "deepspeed", "--zero", "4"),
         r"Invalid value for '--zero': 4 is out of range: give a whole number from 0 to 3 ",
         _plan("llama-3.1-8b", framework="deepspeed", zero=4), r"zero: input should be less than or equal to 3, got 4$"),
    Case("vpp-fraction", "a fractional vpp", ("plan", "70B", "--vpp", "2.5"),
         r"Invalid value for '--vpp': '2\.5' is not a whole number from 1 to 100,000 ", _plan("70B", vpp="2.5"),
         r"vpp: input should be a valid integer"),
    Case("mfu-zero", "zero MFU", ("plan", "70B", "--mfu", "0"), r"mfu: input should be greater than or equal to 0.001, got '0'$",
         _plan("70B", mfu="0")),
    Case("mfu-negative", "negative MFU", ("plan", "70B", "--mfu", "-0.1"),
         r"mfu: input should be greater than or equal to 0.001, got '-0\.1'$", _plan("70B", mfu="-0.1")),
    Case("mfu-above-one", "MFU above 1", ("plan", "70B", "--mfu", "1.5"),
         r"mfu: input should be less than or equal to 1, got '1\.5'$", _plan("70B", mfu="1.5")),
    Case("mfu-inf", "infinite MFU", ("plan", "70B", "--mfu", "inf"), r"mfu: input should be a finite number",
         _plan("70B", mfu="inf")),
    Case("seq-zero", "zero sequence length", ("plan", "70B", "--seq", "0"),
         r"seq: input should be greater than or equal to 1, got '0'$", _plan("70B", seq="0")),
    Case("seq-negative", "negative sequence length", ("plan", "70B", "--seq", "-1"),
         r"seq: input should be greater than or equal to 1, got '-1'$", _plan("70B", seq="-1")),
    Case("seq-huge", "sequence past the limit", ("plan", "70B", "--seq", "10000001"),
         r"seq: input should be less than or equal to 10000000", _plan("70B", seq="10000001")),
    Case("layers-zero", "zero layers", ("plan", "70B", "--layers", "0"),
         r"layers: input should be greater than or equal to 1, got '0'$", _plan("70B", layers="0")),
    Case("layers-negative", "negative layers", ("plan", "70B", "--layers", "-2"),
         r"layers: input should be greater than or equal to 1, got '-2'$", _plan("70B", layers="-2")),
    Case("width-zero", "zero width", ("plan", "70B", "--width", "0"),
         r"width: input should be greater than or equal to 1, got '0'$", _plan("70B", width="0")),
    Case("width-negative", "negative width", ("plan", "70B", "--width", "-128"),
         r"width: input should be greater than or equal to 1, got '-128'$", _plan("70B", width="-128")),
    Case("heads-zero", "zero heads", ("plan", "70B", "--heads", "0"),
         r"heads: input should be greater than or equal to 1, got '0'$", _plan("70B", heads="0")),
    Case("batch-zero", "zero batch", ("plan", "70B", "--batch", "0"), r"batch must be positive, got '0'$",
         _plan("70B", batch="0")),
    Case("max-gpus-zero", "zero --max-gpus", ("plan", "70B", "--max-gpus", "0"),
         r"max_gpus: input should be greater than or equal to 1, got '0'$", _plan("70B", max_gpus="0")),
    Case("max-gpus-huge", "--max-gpus past the limit", ("plan", "70B", "--max-gpus", "2000000"),
         r"max_gpus: input should be less than or equal to 1000000", _plan("70B", max_gpus="2000000")),
    # -- inputs that contradict each other -------------------------------------------------------
    Case("active-above-total", "active above total", ("plan", "32B", "--active", "70B"),
         r"active parameters \(70,000,000,000\) exceed total parameters \(32,000,000,000\)",
         _plan("32B", active="70B")),
    Case("width-heads", "width not divisible by heads", ("plan", "70B", "--width", "9000", "--heads", "64"),
         r"width 9000 is not divisible by 64 heads", _plan("70B", width=9000, heads=64)),
    Case("width-head-dim", "width not a multiple of 128, no heads", ("plan", "70B", "--width", "1000"),
         r"width 1000 is not a multiple of 128: give heads", _plan("70B", width=1000)),
    Case("pp-above-layers", "pp above the layers", ("plan", "70B", "--layers", "4", "--pp", "8"),
         r"pp 8 cannot split 4 layers: a pipeline stage needs at least one layer; valid: 1 to 4$",
         _plan("70B", layers=4, pp=8)),
    Case("pp-not-dividing", "pp not dividing the layers (reference arithmetic)",
         ("plan", "70B", "--framework", "reference", "--pp", "5"),
         r"pp 5 does not divide the 72 layers; valid: 1, 2, 3, 4, 6, 8, 9, 12, 18, 24, 36, 72$",
         _plan("70B", framework="reference", pp=5)),
    Case("tp-above-nvlink", "tp above the NVLink domain (reference arithmetic)",
         ("plan", "70B", "--framework", "reference", "--tp", "16"),
         r"tp 16 is not allowed on H100 with 72 heads: tp must divide the NVLink domain \(8 GPUs\)",
         _plan("70B", framework="reference", tp=16)),
    Case("tp-heads", "tp not dividing the heads", ("plan", "70B", "--heads", "36", "--tp", "8"),
         r"tp 8 does not divide the 36 attention heads; valid: 1, 2, 3, 4, 6, 9, 12, 18, 36$",
         _plan("70B", heads=36, tp=8)),
    Case("dp-above-batch", "dp above the batch", ("plan", "70B", "--dp", "5000"),
         r"dp 5,000 with micro-batches of 1 cannot run the batch of 1,024 sequences within the batch tolerance of 5%",
         _plan("70B", dp=5000)),
    Case("pins-above-cap", "pinned layout above the cap", ("plan", "70B", "--tp", "8", "--pp", "72", "--dp", "1024"),
         r"pinned tp x pp x cp x dp = 589,824 GPUs exceeds the cap of 200,000$", _plan("70B", tp=8, pp=72, dp=1024)),
    Case("gpus-above-max", "--gpus above --max-gpus", ("plan", "70B", "--gpus", "300", "--max-gpus", "200"),
         r"gpus 300 exceeds max_gpus 200", _plan("70B", gpus=300, max_gpus=200)),
    Case("batch-fraction", "a batch of part of a token", ("plan", "llama-3.1-8b", "--batch", "4194304.5"),
         r"batch '4194304\.5' is not a whole number of tokens: give one, such as 4,194,304$",
         ("plan", ("llama-3.1-8b",), {"batch": "4194304.5"})),
    Case("batch-below-seq", "batch below one sequence", ("plan", "70B", "--batch", "1000"),
         r"batch of 1,000 tokens is less than one sequence of 4,096", _plan("70B", batch=1000)),
    # -- names -------------------------------------------------------------------------------------
    Case("gpu-unknown", "unknown GPU (near a name)", ("plan", "70B", "--gpu", "H10"),
         r"unknown GPU 'H10': did you mean H100\? valid: H100, H200, ", _plan("70B", gpu="H10")),
    Case("gpu-unknown-far", "unknown GPU (far from every name)", ("plan", "70B", "--gpu", "TPUv5"),
         r"unknown GPU 'TPUv5': valid: H100, ", _plan("70B", gpu="TPUv5")),
    Case("optimizer-unknown", "unknown optimizer", ("plan", "70B", "--optimizer", "adam"),
         r"unknown optimizer 'adam': did you mean adamw\? valid: adamw, adam8bit, sgd$", _plan("70B", optimizer="adam")),
    Case("precision-unknown", "unknown precision", ("plan", "70B", "--precision", "fp4"),
         r"unknown precision 'fp4': did you mean fp8\? valid: bf16, fp16, fp8$", _plan("70B", precision="fp4")),
    Case("recompute-unknown", "unknown recompute level", ("plan", "70B", "--recompute", "some"),
         r"unknown recompute level 'some': did you mean none\? valid: none, selective, full$",
         _plan("70B", recompute="some")),
    Case("precision-a100-fp8", "fp8 on A100", ("plan", "70B", "--gpu", "A100", "--precision", "fp8"),
         r"A100 cannot run fp8: it supports bf16, fp16$", _plan("70B", gpu="A100", precision="fp8")),
    Case("precision-gtx1660-bf16", "bf16 (the default) on GTX1660", ("plan", "70B", "--gpu", "GTX1660"),
         r"GTX1660 cannot run bf16: it supports fp16$", _plan("70B", gpu="GTX1660")),
    # -- catalog files -----------------------------------------------------------------------------
    Case("catalog-missing", "catalog file missing", ("plan", "70B", "--catalog", "nope.yaml"),
         r"catalog file .*nope\.yaml does not exist$", _plan("70B", catalog="nope.yaml")),
    Case("catalog-not-yaml", "catalog file not YAML", ("plan", "70B", "--catalog", "notyaml.yaml"),
         r"catalog file .*notyaml\.yaml is not valid YAML at line 2: ", _plan("70B", catalog="notyaml.yaml")),
    Case("catalog-missing-fields", "catalog GPU missing required fields",
         ("plan", "70B", "--catalog", "nofields.yaml", "--gpu", "X1"),
         r"catalog file .*nofields\.yaml: GPU 'X1': memory_gib: Field required$",
         _plan("70B", catalog="nofields.yaml", gpu="X1")),
    Case("catalog-not-mapping", "catalog file not a mapping", ("plan", "70B", "--catalog", "scalar.yaml"),
         r"catalog file .*scalar\.yaml: a GPU catalog must be a mapping", _plan("70B", catalog="scalar.yaml")),
    Case("catalog-negative", "catalog figure out of range", ("plan", "70B", "--catalog", "negative.yaml"),
         r"catalog file .*negative\.yaml: GPU 'H100': memory_gib: Input should be greater than or equal to 0\.001$",
         _plan("70B", catalog="negative.yaml")),
    Case("catalog-directory", "catalog is a folder", ("plan", "70B", "--catalog", "."),
         r"catalog file .* is a directory: give a regular YAML file$", _plan("70B", catalog=".")),
    # -- absurd sizes and models that fit nowhere -------------------------------------------------
    Case("params-1e18", "10^18 parameters", ("plan", "1e18"), r"params '1e18' is beyond what apsi plans for",
         _plan("1e18")),
    Case("tokens-1e20", "10^20 tokens", ("plan", "70B", "--tokens", "1e20"),
         r"tokens '1e20' is beyond what apsi plans for", _plan("70B", tokens="1e20")),
    Case("tokens-one", "1 token", ("plan", "70B", "--tokens", "1"),
         r"1 training tokens are fewer than one batch of 4,194,304", _plan("70B", tokens="1")),
    # The states of a bare size are its shape-rule architecture's (apsi.inputs.modelspec.counted):
    # 1e17 -> 7,984 x 1,021,952 (1.0006e17 parameters), 100T -> 800 x 102,400 (100.66T), 70B ->
    # 72 x 9,216 (73.38B), each 12 L d^2 (Kaplan et al. 2020, Eq. 2.1) at Megatron's bytes per
    # parameter over the cap's GPUs (planner.prepare).
    Case("params-1e17-h100", "10^17 parameters (the size limit) on H100", ("plan", "1e17"),
         r"no Megatron layout fits within 200,000 GPUs on H100: the model states alone are 8,387\.0 GiB per GPU",
         _plan("1e17")),
    Case("100t-gtx1660", "100T parameters on GTX1660", ("plan", "100T", "--gpu", "GTX1660", "--precision", "fp16"),
         r"no Megatron layout fits within 200,000 GPUs on GTX1660: the model states alone are 9\.4 GiB per GPU",
         _plan("100T", gpu="GTX1660", precision="fp16")),
    Case("70b-one-gpu", "70B on one GPU", ("plan", "70B", "--gpus", "1"),
         r"no Megatron layout fits within 1 GPU on H100: the model states alone are 1,230\.2 GiB per GPU",
         _plan("70B", gpus=1)),
    # -- the command line itself -------------------------------------------------------------------
    Case("cli-unknown-option", "unknown option", ("plan", "70B", "--bogus", "3"), r"No such option: --bogus"),
    Case("cli-missing-value", "option without its value", ("plan", "70B", "--gpu"),
         r"Option '--gpu' requires an argument"),
    Case("cli-missing-params", "no PARAMS", ("plan",), r"Missing argument"),
    Case("cli-unknown-command", "unknown command", ("frob",), r"No such command 'frob'"),
    Case("serve-batch-zero", "the reference's serving quotient with zero batch",
         ("serve", "70B", "--batch", "0", "--framework", "reference"),
         r"batch is the number of sequences served at once, a whole number from 1 to 1,000,000 .*got '0'$",
         ("inference", ("70B",), {"batch": "0"})),
    Case("serve-kv-heads", "serve with KV heads not dividing heads", ("serve", "70B", "--kv-heads", "7",
                                                                        "--framework", "reference"),
         r"the architecture with kv_heads 7 is not buildable: kv_heads 7 must divide heads 72 ",
         ("inference", ("70B",), {"kv_heads": 7})),
    Case("serve-precision", "the reference's serving quotient in fp8 on A100",
         ("serve", "70B", "--gpu", "A100", "--precision", "fp8", "--framework", "reference"),
         r"A100 cannot run fp8: it supports bf16, fp16$",
         ("inference", ("70B",), {"gpu": "A100", "precision": "fp8"})),
    Case("serve-fp4-h100", "serve fp4 weights on H100", ("serve", "llama-3.1-70b", "--precision", "fp4"),
         r"H100 cannot serve fp4 weights \(it has bf16, fp16, fp8\); GPUs with fp4: B200, GB200$",
         ("serve", ("llama-3.1-70b",), {"precision": "fp4"})),
    Case("serve-kv-fp16", "serve a bf16 model with an fp16 KV cache (the engines keep the model's dtype or fp8)",
         ("serve", "llama-3.1-8b", "--kv-precision", "fp16", "--rate", "3"),
         r"vLLM keeps the KV cache in the model's dtype \(bf16\) or fp8, not fp16: give kv_precision bf16 or fp8 "
         r"\(--kv-precision\)$",
         ("serve", ("llama-3.1-8b",), {"kv_precision": "fp16", "rate": 3})),
    Case("serve-tp-heads", "serve with a TP the heads forbid", ("serve", "llama-3.1-70b", "--tp", "3"),
         r"tp 3 is not allowed: TP must divide the 64 query heads \(the 8 KV heads a multiple of TP, or TP a multiple "
         r"of them\) .*valid: 1, 2, 4, 8$",
         ("serve", ("llama-3.1-70b",), {"tp": 3})),
    Case("serve-tpot-unreachable", "serve with a TPOT no layout meets",
         ("serve", "llama-3.1-70b", "--precision", "fp8", "--tpot", "1"),
         r"no layout meets the targets: TPOT 1 ms: the lowest reachable is [\d.]+ ms \(TP 8 on H100, batch 1\)",
         ("serve", ("llama-3.1-70b",), {"precision": "fp8", "tpot": 1})),
    Case("serve-tpot-one-token", "serve a TPOT target on one output token",
         ("serve", "llama-3.1-8b", "--osl", "1", "--tpot", "10", "--rate", "20"),
         r"tpot needs a second output token: with osl 1 every request ends at its first token, whose time is "
         r"the TTFT; leave tpot out \(give ttft\) or give osl of at least 2$",
         ("serve", ("llama-3.1-8b",), {"osl": 1, "tpot": 10, "rate": 20})),
    Case("serve-rate-and-concurrency", "serve with both a rate and a concurrency",
         ("serve", "llama-3.1-70b", "--rate", "5", "--concurrency", "64"),
         r"give the load as rate \(requests/s\) or as concurrency \(requests in flight\), not both$",
         ("serve", ("llama-3.1-70b",), {"rate": 5, "concurrency": 64})),
    Case("serve-inventory-short", "serve a rate the inventory cannot carry",
         ("serve", "llama-3.1-70b", "--precision", "fp8", "--inventory", "H100=2", "--rate", "500"),
         r"the inventory \(H100=2\) serves at most [\d.,]+ requests/s at the targets, not 500",
         ("serve", ("llama-3.1-70b",), {"precision": "fp8", "inventory": "H100=2", "rate": 500})),
    Case("serve-inventory-no-bandwidth", "serve on an inventory type without a memory bandwidth",
         ("serve", "llama-3.1-8b", "--inventory", "X1=8", "--rate", "5", "--catalog", "nobandwidth.yaml"),
         r"X1 in the inventory has no memory bandwidth \(hbm_tbps\) in the catalog: serving time needs it$",
         ("serve", ("llama-3.1-8b",), {"inventory": "X1=8", "rate": 5, "catalog": "nobandwidth.yaml"})),
    Case("serve-inventory-engine-vendor", "serve TensorRT-LLM on an AMD inventory",
         ("serve", "llama-3.1-70b", "--inventory", "MI300X=16", "--engine", "trtllm", "--rate", "5"),
         r"TensorRT-LLM runs on NVIDIA GPUs only, not MI300X: give --engine vllm or sglang, or another GPU$",
         ("serve", ("llama-3.1-70b",), {"inventory": "MI300X=16", "engine": "trtllm", "rate": 5})),
    Case("serve-inventory-precision", "serve fp4 on an inventory type without it",
         ("serve", "llama-3.1-70b", "--inventory", "A100=16,B200=8", "--precision", "fp4", "--rate", "5"),
         r"A100 in the inventory cannot serve fp4 weights \(it has bf16, fp16\); GPUs with fp4: ",
         ("serve", ("llama-3.1-70b",), {"inventory": "A100=16,B200=8", "precision": "fp4", "rate": 5})),
    Case("recompute-module-not-in-model", "recompute MLA's up-projections on a dense model",
         ("plan", "llama-3.1-70b", "--recompute", "selective", "--recompute-modules", "mla_up_proj"),
         r"recompute module mla_up_proj needs multi-latent attention, and the model has none; valid for it: "
         r"core_attn, layernorm, mlp$",
         ("plan", ("llama-3.1-70b",), {"recompute": "selective", "recompute_modules": ["mla_up_proj"]})),
    Case("kv-heads-under-mla", "KV heads given for a model with multi-latent attention",
         ("plan", "deepseek-v3", "--kv-heads", "8"),
         r"kv_heads has no meaning under the multi-latent attention of the preset deepseek-v3: its keys and values "
         r"come from one latent per token; leave kv_heads out$",
         ("plan", ("deepseek-v3",), {"kv_heads": 8})),
    Case("levers-outside-plan", "levers given to frontier()", None,
         r"levers is plan\(\)'s keyword \(the nearby changes of one plan, each planned again\): leave it out here$",
         ("frontier", ("70B",), {"levers": True})),
    Case("seq-past-learned-positions", "a sequence longer than the model's learned positions",
         ("plan", "gpt2.json", "--seq", "4096"),
         r"seq 4,096 is longer than the model's 1,024 learned positions \(its config's n_positions or "
         r"max_position_embeddings\): give seq of at most 1,024$", ("plan", ("gpt2.json",), {"seq": 4096})),
    Case("serve-seq-without-reference", "serve with the reference's --seq",
         ("serve", "llama-3.1-70b", "--seq", "8192"),
         r"--seq belongs to the reference's quotient \(--framework reference\)"),
    # -- models: presets, config.json, architecture options ------------------------------------------
    Case("config-context", "config.json with a context length of 0", ("serve", "context.json"),
         r"config context.json: max_position_embeddings must be a whole number >= 1 \(the longest sequence the "
         r"model takes\), got 0$", ("serve", ("context.json",), {})),
    Case("config-misspelled", "config.json with hidden_size misspelled", ("plan", "typo.json"),
         r"config typo.json has no hidden_size: a llama config needs it$", _plan("typo.json")),
    Case("config-missing-field", "config.json without num_hidden_layers", ("plan", "nolayers.json"),
         r"config nolayers.json has no num_hidden_layers: a llama config needs it$", _plan("nolayers.json")),
    Case("config-unknown-family", "config.json of an unknown model_type", ("plan", "rwkv.json"),
         r"config rwkv.json: model_type 'rwkv' is not a family apsi reads; it reads llama, ", _plan("rwkv.json")),
    Case("config-not-json", "config.json that is not JSON", ("plan", "broken.json"),
         r"config broken.json is not JSON \(line 2: ", _plan("broken.json")),
    Case("config-folder-empty", "folder without config.json", ("plan", "."),
         r"\. has no config.json: give a Hugging Face model folder or its config.json$", _plan(".")),
    Case("config-no-such-file", "config path that does not exist", ("plan", "llama3-70b.json"),
         r"params 'llama3-70b.json': no such file or folder", _plan("llama3-70b.json")),
    Case("preset-typo", "misspelled preset", ("plan", "lama-3.1-70b"),
         r"params 'lama-3.1-70b' is not a size, a preset or a config.json: .*did you mean llama-3.1-70b\?",
         _plan("lama-3.1-70b")),
    Case("active-vs-moe", "--active that the MoE architecture contradicts", ("plan", "mixtral-8x22b", "--active", "20B"),
         r"active 20,000,000,000 does not match the preset's architecture, which uses 39,152,031,744 parameters",
         _plan("mixtral-8x22b", active="20B")),
    Case("kv-heads-zero", "--kv-heads 0", ("plan", "llama-3.1-8b", "--kv-heads", "0"),
         r"kv_heads: input should be greater than or equal to 1, got '0'", _plan("llama-3.1-8b", kv_heads="0")),
    Case("preset-heads", "a head count the preset's KV heads cannot divide", ("plan", "llama-3.1-8b", "--heads", "36"),
         r"the preset llama-3.1-8b with heads 36 is not buildable: kv_heads 8 must divide heads 36",
         _plan("llama-3.1-8b", heads=36)),
    Case("tied-garbage", "--tied with a word", ("plan", "llama-3.1-8b", "--tied", "yes"),
         r"tied must be true or false", _plan("llama-3.1-8b", tied="yes")),
    Case("top-k-missing", "--experts on a size without --top-k", ("plan", "1T", "--active", "32B", "--experts", "64"),
         r"top_k is needed with experts", _plan("1T", active="32B", experts=64)),
    Case("flops-convention", "unknown FLOPs convention", ("plan", "70B", "--flops-convention", "half"),
         r"unknown flops_convention 'half': ", _plan("70B", flops_convention="half")),
    # -- frameworks --------------------------------------------------------------------------------
    Case("framework-unknown", "misspelled framework", ("plan", "70B", "--framework", "megatorn"),
         r"unknown framework 'megatorn': did you mean megatron\? valid: megatron, torchtitan, deepspeed, reference$",
         _plan("70B", framework="megatorn")),
    Case("framework-knob-reference", "a Megatron knob under the reference arithmetic",
         ("plan", "70B", "--framework", "reference", "--vpp", "2"),
         r"vpp is a framework knob the reference arithmetic does not have: give framework='megatron' to use it$",
         _plan("70B", framework="reference", vpp=2)),
    Case("megatron-tp-kv", "a TP the heads forbid, under Megatron",
         ("plan", "llama-3.1-405b", "--framework", "megatron", "--tp", "3"),
         r"tp 3 does not divide the 128 attention heads; valid: 1, 2, 4, 8, 16, 32, 64, 128$",
         _plan("llama-3.1-405b", framework="megatron", tp=3)),
    Case("megatron-vpp", "virtual stages the layers cannot take",
         ("plan", "llama-3.1-405b", "--framework", "megatron", "--pp", "16", "--vpp", "5"),
         r"pp 16 with vpp 5 cannot split 126 layers: .*valid vpp: 1, 2, 3, 4, 6, 7, 8$",
         _plan("llama-3.1-405b", framework="megatron", pp=16, vpp=5)),
    Case("megatron-tp-sequence", "a TP that does not divide the sequence, under sequence parallelism",
         ("plan", "llama-3.1-8b", "--seq", "4100", "--tp", "8"),
         r"tp 8 with sequence parallelism needs the sequence \(4,100\) divisible by tp: .*\(MLM-SP, .*valid tp: 1, 2, 4, "
         r"or sequence_parallel false$", _plan("llama-3.1-8b", seq=4100, tp=8)),
    Case("torchtitan-tp-sequence", "a TP that does not divide the sequence, under torchtitan",
         ("plan", "llama-3.1-8b", "--framework", "torchtitan", "--seq", "4100", "--tp", "8"),
         r"tp 8 with sequence parallelism needs the sequence \(4,100\) divisible by tp \(torchtitan's seq_len_divisor",
         _plan("llama-3.1-8b", framework="torchtitan", seq=4100, tp=8)),
    Case("deepspeed-adam8bit", "8-bit Adam under Megatron-DeepSpeed, which does not build it",
         ("plan", "llama-3.1-8b", "--framework", "deepspeed", "--optimizer", "adam8bit"),
         r"optimizer adam8bit is not one Megatron-DeepSpeed builds \(its --optimizer takes adam or sgd, MDS-OPT\); "
         r"valid: adamw, sgd$", _plan("llama-3.1-8b", framework="deepspeed", optimizer="adam8bit")),
    Case("megatron-sgd-distributed", "SGD with Megatron's distributed optimizer, which takes Adam only",
         ("plan", "llama-3.1-8b", "--optimizer", "sgd", "--zero", "1"),
         r"optimizer sgd runs under Megatron only without the distributed optimizer \(zero 0; .*valid: zero 0, or "
         r"optimizer adamw$", _plan("llama-3.1-8b", optimizer="sgd", zero=1)),
    Case("torchtitan-sgd", "SGD under torchtitan, which builds Adam and AdamW",
         ("plan", "llama-3.1-8b", "--framework", "torchtitan", "--optimizer", "sgd"),
         r"optimizer sgd is not one torchtitan builds; valid: adamw$",
         _plan("llama-3.1-8b", framework="torchtitan", optimizer="sgd")),
    Case("megatron-adam8bit-zero0", "8-bit Adam without Megatron's distributed optimizer, which its 8-bit moments need",
         ("plan", "llama-3.1-8b", "--optimizer", "adam8bit", "--zero", "0"),
         r"optimizer adam8bit runs under Megatron only with the distributed optimizer \(zero 1; .*valid: zero 1, or "
         r"optimizer adamw$", _plan("llama-3.1-8b", optimizer="adam8bit", zero=0)),
    Case("megatron-bf16-moments-zero0", "bf16 Adam moments without Megatron's distributed optimizer, which its "
         "precision-aware optimizer asserts", ("plan", "llama-3.1-8b", "--moments-dtype", "bf16", "--zero", "0"),
         r"moments_dtype bf16 runs under Megatron only with the distributed optimizer \(MLM-OPT: .*valid: zero 1, or "
         r"moments_dtype fp32$", _plan("llama-3.1-8b", moments_dtype="bf16", zero=0)),
    Case("megatron-dispatcher", "an EP dispatcher Megatron's knob does not name",
         ("plan", "deepseek-v3", "--dispatcher", "deepep"),
         r"unknown EP token dispatcher \(dispatcher\) 'deepep': valid: alltoall, flex$", _plan("deepseek-v3", dispatcher="deepep")),
    Case("megatron-batch-whole", "a batch in tokens whose whole sequences fall outside the tolerance",
         ("plan", "llama-3.1-8b", "--batch", "6000"),
         r"a batch of 6,000 tokens is 1 whole sequence of 4,096 \(4,096 tokens, -31.73%\), beyond the batch tolerance "
         r"of 5%: give a multiple of 4,096 tokens \(4,096 or 8,192\) or a wider batch_tolerance$",
         _plan("llama-3.1-8b", batch=6000)),
    Case("micro-batch-word", "a micro-batch that is neither a number nor any", ("plan", "70B", "--micro-batch", "many"),
         r"micro_batch is a whole number of sequences or any, got 'many'$", _plan("70B", micro_batch="many")),
    Case("evaluate-micro-batch-any", "micro_batch any given to evaluate(), which judges one layout", None,
         r"evaluate\(\) judges one layout: give micro_batch a number",
         ("evaluate", ("70B",), dict(tp=8, dp=8, micro_batch="any"))),
    # -- only the Python API can pass these ---------------------------------------------------------
    Case("api-int-overflow", "int past float range", None, r"params '<a whole number of some 401 digits>' is beyond what apsi plans for",
         _plan(10**400)),
    Case("api-int-5000-digits", "a 5,000-digit int (past repr's limit)", None,
         r"^tokens '<a whole number of some 5,001 digits>' is beyond what apsi plans for \(at most 1e17\)$",
         _plan("7B", tokens=10**5000)),
    Case("api-layers-5000-digits", "a 5,000-digit layer count", None,
         r"^layers: input should be less than or equal to 100000, got <a whole number of some 5,001 digits>$",
         _plan("7B", layers=10**5000)),
    Case("api-float-nan", "float nan", None, r"params 'nan' is not a finite size", _plan(float("nan"))),
    Case("api-bool", "True as a size", None, r"params True is not a size", _plan(True)),
    Case("api-none-params", "None as a size", None, r"params None is not a size", _plan(None)),
    Case("api-seq-bool", "True as the sequence length", None,
         r"seq: a number is needed, not a boolean, got True", _plan("70B", seq=True)),
    Case("api-mfu-bool", "True as the MFU", None,
         r"mfu: a number is needed, not a boolean, got True", _plan("70B", mfu=True)),
    Case("api-gpu-number", "a number as the GPU", None, r"GPU name must be a string, got 5", _plan("70B", gpu=5)),
    Case("api-catalog-int", "a number as the catalog", None, r"catalog must be a path to a YAML file, got 5",
         _plan("70B", catalog=5)),
    Case("api-seq-fraction", "fractional sequence length", None,
         r"seq: input should be a valid integer, got 4096.5$", _plan("70B", seq=4096.5)),
    Case("api-optimizer-int", "a number as the optimizer", None, r"unknown optimizer 3: ", _plan("70B", optimizer=3)),
    Case("api-evaluate-tp", "evaluate() with tp 3 (reference arithmetic)", None, r"tp 3 is not allowed on H100 with 72 heads",
         ("evaluate", ("70B",), {"framework": "reference", "tp": 3, "pp": 1, "dp": 1, "recompute": "none"})),
    Case("torchtitan-tp-kv", "a tp the KV heads forbid, under torchtitan",
         ("plan", "llama-3.1-70b", "--framework", "torchtitan", "--tp", "16"),
         r"tp 16 does not divide the 8 KV heads \(torchtitan splits them, it does not replicate them\); "
         r"valid: 1, 2, 4, 8$", ("evaluate", ("llama-3.1-70b",), {"framework": "torchtitan", "tp": 16, "dp": 1})),
    Case("torchtitan-1f1b-micro", "fewer micro-batches than stages, under torchtitan's 1F1B",
         ("plan", "llama-3.1-405b", "--framework", "torchtitan", "--tp", "8", "--pp", "64", "--vpp", "1", "--dp", "62"),
         r"no layout torchtitan's rules allow fits within 200,000 GPUs \(tp 8, pp 64, vpp 1, dp 62\): the batch of "
         r"1,024 sequences \(within 5%\), .* or 1F1B's micro-batches \(n >= pp at vpp 1\) and whole nodes",
         ("evaluate", ("llama-3.1-405b",), {"framework": "torchtitan", "tp": 8, "pp": 64, "vpp": 1, "dp": 62}),
         r"the 1F1B schedule \(vpp 1, Schedule1F1B\) runs the 17 micro-batches per replica over pp 64 stages, and "
         r"torch refuses fewer micro-batches than stages; valid: 64 or more \(a batch of 3,968 sequences or more at "
         r"dp 62, or dp 16 or less for a batch of 1,054\), or vpp 2 or more \(Interleaved1F1B runs fewer\)$"),
    Case("deepspeed-zero-pp", "ZeRO-3 with a pipeline, under DeepSpeed",
         ("plan", "llama-3.1-8b", "--framework", "deepspeed", "--zero", "3", "--pp", "2"),
         r"zero 3 does not run under DeepSpeed's pipeline engine \(pp 2\): ZeRO-2 and ZeRO-3 need pp 1; "
         r"valid with a pipeline: 0, 1$", _plan("llama-3.1-8b", framework="deepspeed", zero=3, pp=2)),
    Case("knob-not-in-framework", "a knob the framework lacks",
         ("plan", "llama-3.1-8b", "--framework", "deepspeed", "--cp", "2"),
         r"cp is not a DeepSpeed knob; its knobs: tp, pp, dp, micro_batch, recompute, zero, sequence_parallel$",
         _plan("llama-3.1-8b", framework="deepspeed", cp=2)),
    Case("batch-tolerance-range", "batch tolerance out of range", ("plan", "70B", "--batch-tolerance", "2"),
         r"batch_tolerance must be a fraction from 0 to 0\.5 \(for example 0\.05\), got '2'$",
         _plan("70B", batch_tolerance="2")),
]

# Issue 12's reproductions that a command line shows (the others: tests/test_hardening.py).
CASES += [
    Case("tiny-mfu", "an MFU of 1e-300", ("plan", "7B", "--mfu", "1e-300"),
         r"mfu: input should be greater than or equal to 0\.001, got '1e-300'$", _plan("7B", mfu=1e-300),
         r"mfu: input should be greater than or equal to 0\.001, got 1e-300$"),
    Case("tiny-days", "a target of 1e-310 days", ("plan", "7B", "--days", "1e-310"),
         r"days: input should be greater than or equal to 0\.0001, got '1e-310'$"),
    Case("tiny-price", "a price of 5e-324 $/GPU-hour", ("plan", "7B", "--objective", "cost", "--price", "5e-324"),
         r"price: input should be greater than or equal to 0\.0001, got '5e-324'$"),
    # The catalog's H800 has no board power: the message names it and the way out.
    Case("energy-no-tdp", "objective energy on a GPU without board power", ("plan", "70B", "--gpu", "H800",
         "--objective", "energy"), r"objective energy needs board power: H800 has no tdp_w in the catalog; give a "
         r"catalog with it \(--catalog FILE\) or another GPU$", _plan("70B", gpu="H800", objective="energy")),
    Case("frontier-tiny-mfu", "a frontier at an MFU of 5e-324", ("frontier", "7B", "--mfu", "5e-324"),
         r"mfu: input should be greater than or equal to 0\.001, got '5e-324'$"),
    Case("catalog-dev-zero", "/dev/zero as the catalog", ("plan", "7B", "--catalog", "/dev/zero"),
         r"catalog file /dev/zero is a device: give a regular YAML file$"),
    Case("catalog-inf", "an infinite memory in a catalog", ("plan", "7B", "--catalog", "inf.yaml", "--gpu", "X1"),
         r"catalog file .*GPU 'X1': memory_gib: Input should be a finite number$"),
    Case("catalog-boolean", "memory_gib: true in a catalog", ("plan", "7B", "--catalog", "boolean.yaml", "--gpu", "X1"),
         r"catalog file .*GPU 'X1': memory_gib: a number is needed, not a boolean$"),
    Case("catalog-domain", "an NVLink domain of 10^12", ("plan", "7B", "--catalog", "domain.yaml", "--gpu", "X1"),
         r"catalog file .*GPU 'X1': scaleup_domain: Input should be less than or equal to 1000000$"),
    Case("catalog-twice", "one GPU given twice in a catalog", ("plan", "7B", "--catalog", "twice.yaml"),
         r"catalog file .*key 'X1' appears twice \(first on line 2\)$"),
    Case("jobs-superscript", "--jobs ² (a superscript digit)", ("run", "runs.yaml", "--jobs", "²"),
         r"jobs must be a whole number from 1 to 1,024, got '²'$"),
    Case("output-is-input", "--output naming the scenario file", ("run", "runs.yaml", "--output", "runs.yaml"),
         r"--output runs\.yaml is the scenario file itself: give another file$"),
    # Paths that cannot be a file: a NUL byte, a symlink loop, a folder.
    Case("scenario-catalog-nul", "a NUL byte in a scenario's catalog path", ("run", "nulcatalog.yaml"),
         r"scenario file nulcatalog\.yaml: catalog file '.*x\\x00' cannot be used: embedded null byte$",
         ("run_scenarios", ({"catalog": "x\0", "runs": [{"params": "7B"}]},), {}),
         r"scenario: catalog file '.*x\\x00' cannot be used: embedded null byte$"),
    Case("scenario-catalog-folder", "a folder as a scenario's catalog", ("run", "dircatalog.yaml"),
         r"scenario file dircatalog\.yaml: catalog file .* is a directory: give a regular YAML file$"),
    Case("scenario-loop", "a symlink loop as the scenario file", ("run", "loop-a.yaml"),
         r"scenario file 'loop-a\.yaml' cannot be used: Too many levels of symbolic links$",
         ("run_scenarios", ("loop-a.yaml",), {})),
    Case("config-loop", "a symlink loop as the config.json", ("plan", "loop-a.json"),
         r"params 'loop-a\.json' cannot be read: a symbolic link to no file \(a loop or a missing target\); ",
         _plan("loop-a.json")),
    Case("api-config-nul", "a NUL byte in a config.json path", None,
         r"params 'x\\x00\.json' cannot be read: a path cannot hold a NUL byte; ", _plan("x\0.json")),
    Case("huge-frontier", "a frontier of a million GPUs at seq 1", ("frontier", "7B", "--seq", "1", "--max-gpus",
                                                                   "1000000", "--json"),
         r"the Megatron frontier is drawn up to 250,000 GPUs, .*give a max_gpus of at most 250,000$"),
]

# Issue 22: bounded parsing, outputs that would replace a device or an input, messages naming the
# config's own key (the rest, FIFOs among them: tests/test_hostile_inputs.py).
DIGITS = r"has 5,000 digits; give a whole number of at most 100 digits$"
CASES += [
    Case("config-long-number", "a 5,000-digit hidden_size in a config.json", ("plan", "long.json"),
         rf"hidden_size in config long\.json {DIGITS}", _plan("long.json")),
    Case("catalog-long-number", "a 5,000-digit scaleup_domain in a catalog", ("plan", "7B", "--catalog", "long.yaml"),
         rf"catalog file .*long\.yaml, line 2: scaleup_domain {DIGITS}", _plan("7B", catalog="long.yaml")),
    Case("scenario-long-number", "a 5,000-digit gpus in a scenario", ("run", "longrun.yaml"),
         rf"scenario file longrun\.yaml, line 2: gpus {DIGITS}", ("run_scenarios", ("longrun.yaml",), {})),
    Case("gpus-long-number", "a 40-digit --gpus", ("plan", "7B", "--gpus", "1" * 40),
         rf"Invalid value for '--gpus': 1{{20}}\.\.\. \(40 digits\) is out of range: give {WHOLE_GPUS} "),
    Case("config-key-twice", "a key given twice in a config.json", ("plan", "twice.json"),
         r"config twice\.json: key 'hidden_size' appears twice in one object: give each key once$",
         _plan("twice.json")),
    Case("scenario-key-twice", "a key given twice in a scenario run", ("run", "runtwice.yaml"),
         r"scenario file runtwice\.yaml, line 2: key 'gpu' appears twice \(first on line 2\)$",
         ("run_scenarios", ("runtwice.yaml",), {})),
    Case("catalog-alias-bomb", "a billion-laughs alias bomb in a catalog file", ("plan", "7B", "--catalog", "bomb.yaml"),
         r"catalog file .*bomb\.yaml: its aliases \(\*name\) expand to more than 1,000,000 items",
         _plan("7B", catalog="bomb.yaml")),
    Case("scenario-inline-catalog-bomb", "an alias bomb as a scenario's catalog:", ("run", "bombinline.yaml"),
         r"scenario file bombinline\.yaml: its aliases \(\*name\) expand to more than 100,000,000 items",
         ("run_scenarios", ("bombinline.yaml",), {})),
    Case("scenario-catalog-file-bomb", "an alias bomb in a scenario's catalog file", ("run", "bombfile.yaml"),
         r"scenario file bombfile\.yaml: catalog file .*bomb\.yaml: its aliases \(\*name\) expand to more than "
         r"1,000,000 items", ("run_scenarios", ("bombfile.yaml",), {})),
    Case("scenario-catalog-loop", "a symlink loop as a scenario's catalog", ("run", "loopcatalog.yaml"),
         r"scenario file loopcatalog\.yaml: catalog file '.*loop-a\.yaml' cannot be used: (?:a symbolic link "
         r"loop|Too many levels of symbolic links)$", ("run_scenarios", ("loopcatalog.yaml",), {})),
    Case("catalog-newline-name", "a newline in a catalog's GPU name", ("plan", "7B", "--catalog", "newline.yaml"),
         r"catalog file .*newline\.yaml: GPU 'X1\\necho INJECTED': name: 'X1\\necho INJECTED' holds the control "
         r"character U\+000A: give printable text on one line$", _plan("7B", catalog="newline.yaml")),
    Case("catalog-escape-description", "a terminal escape in a catalog's description",
         ("plan", "7B", "--catalog", "escape.yaml"),
         r"catalog file .*escape\.yaml: GPU 'X1': description: .* holds the control character U\+001B: ",
         _plan("7B", catalog="escape.yaml")),
    Case("catalog-top-level-typo", "gpu: for gpus: beside it in a catalog", ("plan", "7B", "--catalog", "topkey.yaml"),
         r"catalog file .*topkey\.yaml: unknown top-level key 'gpu': did you mean gpus\? valid: gpus, sources$",
         _plan("7B", catalog="topkey.yaml")),
    Case("catalog-name-field", "a GPU entry whose name: differs from its key", ("plan", "7B", "--catalog", "named.yaml"),
         r"catalog file .*named\.yaml: GPU 'X1' gives name 'Y1': a GPU's name is its key under gpus:, so leave name "
         r"out$", _plan("7B", catalog="named.yaml")),
    Case("config-field-named-as-in-file", "a config.json's hidden_size past the limit (named as in the file)",
         ("plan", "wide.json"), r"config wide\.json: hidden_size \(width\): Input should be less than or equal to ",
         _plan("wide.json")),
    Case("config-kv-heads-named-as-in-file", "a config.json whose KV heads do not divide its heads",
         ("plan", "kvheads.json"), r"config kvheads\.json: kv_heads 3 must divide heads 32 .*\(in the config: heads is "
         r"num_attention_heads, kv_heads is num_key_value_heads\)$", _plan("kvheads.json")),
    Case("output-dev-null", "--output /dev/null (a device)", ("plan", "7B", "--output", "/dev/null"),
         r"--output /dev/null is a device, not a regular file: give a file name"),
    Case("output-folder", "--output a folder", ("plan", "7B", "--output", "."),
         r"--output \. is a directory: give a file name$"),
    Case("output-is-catalog", "--output a link to the --catalog file",
         ("plan", "7B", "--catalog", "cat.yaml", "--output", "cat-link.yaml"),
         r"--output cat-link\.yaml is the --catalog file itself: give another file$"),
    Case("plot-is-catalog", "--plot a link to the --catalog file",
         ("plan", "7B", "--catalog", "cat.yaml", "--plot", "cat-link.svg"),
         r"--plot cat-link\.svg is the --catalog file itself: give another file$"),
    Case("output-is-config", "--output a link to the model's config.json",
         ("plan", "typo.json", "--output", "config-link.json"),
         r"--output config-link\.json is the model's config\.json itself: give another file$"),
    Case("output-is-saved-plan", "export --output a link to the saved plan",
         ("export", "plan.json", "--to", "slurm", "--output", "plan-link.json"),
         r"--output plan-link\.json is the saved plan itself: give another file$"),
    Case("output-is-scenario-catalog", "run --output the scenario's catalog file",
         ("run", "withcat.yaml", "--output", "cat-link.yaml"),
         r"--output cat-link\.yaml is the scenario's catalog file itself: give another file$"),
]

CLI_CASES = [c for c in CASES if c.argv is not None]
API_CASES = [c for c in CASES if c.api is not None]


def write_files(folder: Path) -> None:
    for name, text in FILES.items():
        (folder / name).write_text(text, encoding="utf-8")
    for name, target in LINKS.items():
        (folder / name).symlink_to(target)


def command(case: Case) -> str:
    return shlex.join(["apsi", *case.argv])


def table(results: list[tuple[Case, int, str, int]]) -> str:
    """The markdown table: one row per (case, exit code, stderr, stdout line count)."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", "<br>")

    lines = ["| Bad input | Command | Exit | stdout lines | What apsi prints on stderr |",
             "|---|---|---|---|---|"]
    for case, code, err, out_lines in results:
        lines.append(f"| {cell(case.what)} | `{cell(command(case))}` | {code} | {out_lines} | "
                     f"`{cell(err.rstrip(chr(10)))}` |")
    return "\n".join(lines) + "\n"


def scrub(text: str, folder: Path) -> str:
    """Messages name the scratch folder; show it as <dir> so the table does not depend on it."""
    return text.replace(str(folder.resolve()), "<dir>")


START, END = "<!-- table:start -->\n", "<!-- table:end -->\n"
DOC = Path(__file__).resolve().parent.parent / "docs" / "bad-inputs.md"


def replace_table(doc_text: str, new_table: str) -> str:
    head, rest = doc_text.split(START, 1)
    _, tail = rest.split(END, 1)
    return head + START + new_table + END + tail


def table_in(doc_text: str) -> str:
    return doc_text.split(START, 1)[1].split(END, 1)[0]


def run_tree() -> list[tuple[Case, int, str, int]]:
    """Run every CLI case as a process of this work tree's `apsi` (python -m apsi with the tree first
    on the path, whatever is installed), in a scratch folder."""
    base = [sys.executable, "-m", "apsi"]
    root = Path(__file__).resolve().parent.parent
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write_files(folder)
        env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1", "APSI_COLUMNS": "0",
               "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
        for case in CLI_CASES:
            done = subprocess.run([*base, *case.argv], cwd=folder, capture_output=True, text=True, env=env, timeout=60)
            results.append((case, done.returncode, scrub(done.stderr, folder), len(done.stdout.splitlines())))
    return results


if __name__ == "__main__":
    fresh = replace_table(DOC.read_text(encoding="utf-8"), table(run_tree()))
    if "--check" in sys.argv[1:]:  # exit 1 if the table is stale, writing nothing
        if fresh != DOC.read_text(encoding="utf-8"):
            sys.exit(f"{DOC} is stale: run python tests/bad_input_cases.py")
        print(f"{DOC} is current")
    else:
        DOC.write_text(fresh, encoding="utf-8")
        print(f"wrote {DOC}")
