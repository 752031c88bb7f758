"""Writes docs/export-frameworks.md: the versions the exports were read with, and for every preset
and example run x format whether the framework's own code read back the plan (passed), apsi
refused the format in one line (refused, with the line), or the framework arrived at other values
(mismatch: the known export bug that explains it, or the fields).

    python tests/frameworks/report.py > docs/export-frameworks.md

Needs what tests/frameworks/install.sh installs; a framework that is missing is reported as such.
"""

from __future__ import annotations

import platform
import re
import sys
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _package_info(root: Path | None, relative: str) -> str:
    """MAJOR.MINOR.PATCH from a source tree's package_info.py."""
    if root is None:
        return "not installed"
    path = root / relative
    if not path.is_file():
        return "no package_info.py"
    text = path.read_text()
    parts = [re.search(rf"^{k} = (\S+)", text, re.M) for k in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1).strip("'\"") for m in parts if m)


def _origin(name: str) -> str:
    """The source tree's tag and commit: install.sh's NAME.origin, else git, else the tag alone."""
    import subprocess

    root = harness.source_dir(name)
    origin = harness.CACHE / f"{name}.origin"
    if root is not None and root.resolve() == (harness.CACHE / name).resolve() and origin.is_file():
        tag, _, commit = origin.read_text().strip().partition(" ")
        return f"{tag}, commit {commit}"
    if root is not None:
        run = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True)
        if run.returncode == 0:
            return f"{harness.TAGS[name]}, commit {run.stdout.strip()}"
    return harness.TAGS[name]


def versions() -> list[str]:
    lm, mds, mb = (harness.source_dir(n) for n in ("megatron-lm", "megatron-deepspeed", "megatron-bridge"))
    bridge_root = mb / "src" if mb is not None and (mb / "src").is_dir() else mb
    return [
        f"- Python {platform.python_version()}, torch {_version('torch')} (the package registry's CUDA build, run "
        "without a GPU), "
        f"DeepSpeed {_version('deepspeed')}, torchtitan {_version('torchtitan')}, torchao {_version('torchao')}",
        f"- Megatron-LM {_origin('megatron-lm')} (megatron-core "
        f"{_package_info(lm, 'megatron/core/package_info.py')} by its package_info.py): megatron/training/arguments.py parse_args, "
        "validate_args; argument_utils.py core_transformer_config_from_args; "
        "megatron/core/transformer/transformer_block.py get_num_layers_to_build",
        f"- Megatron-DeepSpeed {_origin('megatron-deepspeed')}"
        f"{'' if mds is not None else ' (not installed)'}: megatron/arguments.py parse_args, validate_args; "
        "DeepSpeed's deepspeed.runtime.config.DeepSpeedConfig",
        f"- Megatron-Bridge {_origin('megatron-bridge')} (package_info "
        f"{_package_info(bridge_root, 'megatron/bridge/package_info.py')}; its tags stop at v0.6.0 and the package "
        "registry has 0.3.1 at most, so no 0.6.2 could be had): read as source only (an ast walk of every import, "
        "method call, config field and mixed-precision recipe the export uses, tests/frameworks/check_bridge.py), "
        "since 0.6 needs Transformer Engine and a GPU to import",
        "- Stood in for, and nothing else: the device's compute capability and count (torch.cuda queries), "
        f"Transformer Engine's version ({_stub_te()}) and fused-RoPE kernel's presence for Megatron-Core, "
        "torchtitan's has_cuda_capability for the float8 converter, DeepSpeed's process rank (0) before it asks "
        "the data-parallel size, and the launchers (torchrun, deepspeed, srun, scontrol record their arguments; "
        "tests/frameworks/bin/)",
    ]


def _stub_te() -> str:
    import gpu_stubs

    return gpu_stubs.TE_VERSION


def _cell(o: harness.Outcome) -> str:
    if o.status != "mismatch":
        return o.status
    unexplained, explained = harness.split(o)
    names = [name for name, problems in explained.items() if problems]
    if unexplained:
        names.append("other: " + ", ".join(sorted({p[0].removeprefix("error:") for p in unexplained}))[:80])
    return "mismatch (" + "; ".join(names) + ")"


def _table(rows: list[tuple[str, list[harness.Outcome]]], columns: list[str]) -> list[str]:
    out = ["| | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for name, outcomes in rows:
        out.append(f"| {name} | " + " | ".join(_cell(o) for o in outcomes) + " |")
    return out


def main() -> None:
    preset_ids = harness.preset_ids()
    example_ids = harness.example_ids()
    harness.prepare(preset_ids + example_ids)
    outcomes = {cid: harness.outcome(cid) for cid in preset_ids + example_ids}
    forms = [f if f != "slurm" else f"slurm-{fw}" for f, fw in harness.FORMS]

    lines = ["# apsi's exports read by the frameworks' own code", "",
             "Generated by `python tests/frameworks/report.py > docs/export-frameworks.md` after "
             "`bash tests/frameworks/install.sh`; the same checks are `python -m pytest tests/test_export_frameworks.py` "
             "(skipped where the frameworks are not installed, as in CI). Every preset is planned under each "
             "format's framework (slurm under each framework; " + ", ".join(
                 f"{k} {', '.join(f'{a}={b}' for a, b in v.items())}" for k, v in harness.PRESET_OPTIONS.items())
             + f", the others tokens={harness.DEFAULT_TOKENS}), and every run of examples/*.yaml as its file plans "
             "it. An export either is refused by apsi in one line, or its launch goes through the framework's code "
             "and every value that code arrives at is compared with the plan's JSON (tests/frameworks/harness.py: "
             "degrees, micro and global batch, layers per stage and virtual stage, recomputation, the model's "
             "shape, RoPE base, dropout, precision, MoE routing).", "", "## Versions", ""]
    lines += versions()
    counts: dict[str, int] = {}
    for cid, o in outcomes.items():
        counts[o.status] = counts.get(o.status, 0) + 1
    lines += ["", "## Summary", "",
              f"{len(outcomes)} exports: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + ".", "",
              "## Export bugs the frameworks' code shows", ""]
    if harness.KNOWN_BUGS:
        lines += ["| bug | cases | known before these checks | what the framework does |", "|---|---|---|---|"]
    else:
        lines.append("None known (harness.KNOWN_BUGS is empty): every export the frameworks read passed.")
    for bug in harness.KNOWN_BUGS:
        shown = sum(1 for o in outcomes.values() if o.status == "mismatch" and harness.split(o)[1].get(bug.name))
        lines.append(f"| {bug.name} | {shown} | {'yes' if bug.elsewhere else 'no (found here)'} | "
                     f"{bug.reason.removeprefix('export bug: ')} |")
    other = {cid: harness.split(o)[0] for cid, o in outcomes.items() if o.status == "mismatch" and harness.split(o)[0]}
    lines += ["", f"Differences no listed bug explains: {len(other)} exports" + (":" if other else ".")]
    for cid, problems in other.items():
        lines.append(f"- {cid}: " + "; ".join(
            f"{f.removeprefix('error:')}: {g}" if f.startswith("error:") else f"{f} plan {w!r}, framework {g!r}"
            for f, w, g in problems[:6]))

    rejected: dict[str, set[str]] = {}
    for cid, o in outcomes.items():
        for field, _, message in o.problems:
            if field.startswith("error:"):
                where = {"megatron": "Megatron-LM", "mds": "Megatron-DeepSpeed / DeepSpeed",
                         "torchtitan": "torchtitan", "bridge": "Megatron-Bridge source"}[harness.kind_of(cid)]
                text = re.sub(r"\b\d{2,}\b", "N", str(message).removeprefix("pretrain_gpt.py: error: "))
                # Python sets print in hash order: sorted, so that the page is the same on every run.
                text = re.sub(r"\{('[^']*'(?:, '[^']*')*)\}",
                              lambda m: "{" + ", ".join(sorted(m.group(1).split(", "))) + "}", text)
                rejected.setdefault(f"{where}, {field.removeprefix('error:')}: {text}", set()).add(cid)
    lines += ["", "## What the frameworks' code said", "",
              "Each distinct error, with how many exports it stopped (numbers of two or more digits shown as N):", ""]
    for text, cids in sorted(rejected.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        lines.append(f"- {len(cids)} x {text}")
    if not rejected:
        lines.append("Nothing: no export was stopped.")
    lines += ["", "## Presets", ""]
    from apsi.inputs.presets import presets

    keys = list(presets()) + list(harness.PINNED)
    rows = [(key, [outcomes[f"{key}/{form}"] for form in forms]) for key in keys]
    lines += _table(rows, forms)
    lines += ["", "## Examples", ""]
    from apsi.outputs.export import FORMATS

    runs: dict[str, list[harness.Outcome]] = {}
    for cid in example_ids:
        run = cid.rsplit("/", 1)[0]
        runs.setdefault(run, []).append(outcomes[cid])
    lines += _table(list(runs.items()), list(FORMATS))
    refusals: dict[str, list[str]] = {}
    for cid, o in outcomes.items():
        if o.status == "refused":
            line = re.sub(r"^[^:]+\.yaml(?: \(line \d+\))?: [^:]+: ", "", o.case.refused or "")
            refusals.setdefault(line, []).append(cid)
    lines += ["", "## Refusals (apsi's one line)", ""]
    for line, refused in sorted(refusals.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        lines.append(f"- {len(refused)} x \"{line}\" (e.g. {refused[0]})")
    lines += _unmapped_flavours(outcomes)
    print("\n".join(lines))


def _unmapped_flavours(outcomes: dict[str, harness.Outcome]) -> list[str]:
    """Presets the torchtitan export refuses for want of a flavour although torchtitan has a model
    package of that family (its models/_supported_models; the family is the config's model_type)."""
    try:
        from torchtitan.models import _supported_models
    except ImportError:
        return []
    from apsi.inputs.presets import presets

    found = []
    for key, preset in presets().items():
        family = str(preset.config.get("model_type", "")).split("_")[0]
        o = outcomes.get(f"{key}/torchtitan")
        if o is not None and o.status == "refused" and "no model flavour" in (o.case.refused or "") \
                and family in _supported_models:
            found.append(f"{key} (torchtitan/models/{family})")
    if not found:
        return []
    return ["", "## torchtitan model packages the export does not use", "",
            "The torchtitan export refuses these presets for want of a flavour, although torchtitan "
            f"{_version('torchtitan')} ships a model package of their family: " + ", ".join(found) + "."]


if __name__ == "__main__":
    main()
