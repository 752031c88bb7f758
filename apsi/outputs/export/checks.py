"""What a saved plan must be before apsi exports or compares it: the rules a fresh plan keeps.

Owns check_plan(plan), which read_plan (apsi.outputs.export) applies after the JSON has passed the Plan
model: a plan read back from `apsi plan --json` may have been edited by hand, and what it says
goes into launch scripts. Every string in it must be printable (no newline, carriage return, NUL,
other C0 or C1 control, DEL, line or paragraph separator: a name written into a script or its
comments can then never start a line of its own); every number finite; the framework, precision
and optimizer names apsi's own; the degrees whole numbers of at least 1 that multiply to the
plan's GPUs (gpus = tp x pp x cp x dp, Layout); the batch, micro-batches and steps the ones the
degrees and tokens give; and under a framework its own legal-layout rules (its check_training and
check_layout, as evaluate() applies them: apsi.training.frameworks.evaluate), the split one of its splits
with every rank's layers their sum, the recomputed modules and the settings its knobs. The first
broken rule is one InputError naming the field and what would be valid. Also owns the text
helpers every export uses to write a plan's strings: comment_text (for a comment line) and
py_string (a Python string literal).
"""

from __future__ import annotations

import math
from typing import Any

from apsi.errors import ApsiError, InputError, brief

LARGEST = 10**18
"""The largest token, sequence, step or batch count a saved plan may hold: far past any run (15.6T
tokens is 1.56e13), small enough that a message prints it whole."""
PREFIX = "not a valid apsi plan"
"""How every refusal of check_plan opens (read_plan's other refusals say "not an apsi plan")."""


def unprintable(text: str) -> int | None:
    """The index of the first character of `text` that is not printable (str.isprintable: the C0
    and C1 controls, DEL, the line and paragraph separators, format characters such as the
    bidirectional overrides, and every space but the ASCII one), or None when every one is."""
    if text.isprintable():
        return None
    return next(i for i, ch in enumerate(text) if not ch.isprintable())


def comment_text(text: str) -> str:
    """`text` for one comment line: each character that is not printable written as Python's
    escape for it (a newline as \\n, NUL as \\x00, U+2028 as \\u2028), so that nothing in it
    starts a new line of a script or of a Python file; printable text is unchanged."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def py_string(text: str) -> str:
    """`text` as a double-quoted Python string literal: backslash and double quote escaped, and
    each character that is not printable as its escape (ast.literal_eval gives `text` back). An
    ordinary name reads as it is: "meta-llama/Llama-3.1-8B"."""
    body = "".join("\\" + ch if ch in '\\"' else ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
    return f'"{body}"'


def docstring_text(text: str) -> str:
    """`text` inside a triple-quoted docstring: py_string's escapes without its quotes."""
    return py_string(text)[1:-1]


def field_path(path: tuple[Any, ...]) -> str:
    """A field's dotted path, itself printable (a key of a hand-edited plan may hold anything)."""
    return comment_text(brief(".".join(str(p) for p in path), 120).strip("'\"")) or "the document"


def _walk(value: Any, path: tuple[Any, ...] = ()):
    """Every (path, leaf) of a dumped plan, dict keys included as string leaves."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield (*path, key), key
            yield from _walk(item, (*path, key))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _walk(item, (*path, i))
    else:
        yield path, value


def _check_values(plan) -> None:
    """Every string printable, every number finite."""
    for path, value in _walk(plan.model_dump()):
        if isinstance(value, str):
            at = unprintable(value)
            if at is not None:
                raise InputError(f"{PREFIX}: {field_path(path)} holds the character {repr(value[at])[1:-1]} at "
                                 f"position {at + 1}, which is not printable: names and words a plan carries into "
                                 "launch files must be printable text (letters, digits, spaces, punctuation)")
        elif isinstance(value, float) and not math.isfinite(value):
            raise InputError(f"{PREFIX}: {field_path(path)} is {value}: a plan's figures are finite numbers")


def _check_names(plan) -> None:
    from apsi.catalog import PRECISIONS
    from apsi.errors import did_you_mean
    from apsi.training.frameworks import FRAMEWORKS
    from apsi.model.arithmetic import OPTIMIZER_BYTES

    for field, value, valid in (("framework", plan.framework, FRAMEWORKS), ("precision", plan.precision, PRECISIONS),
                                ("optimizer", plan.optimizer, tuple(OPTIMIZER_BYTES))):
        if value not in valid:
            raise InputError(f"{PREFIX}: {field} {brief(value)} is not one of apsi's: "
                             f"{did_you_mean(value, valid)}valid: {', '.join(valid)}")
    if plan.model.source not in ("size", "shape", "preset", "config"):
        raise InputError(f"{PREFIX}: model.source {brief(plan.model.source)} is not one of apsi's: valid: size, "
                         "shape, preset, config")


def _shown(value: int) -> str:
    """A whole number for a message: with its thousands, or its digits counted when it is huge."""
    return f"{value:,}" if abs(value) <= LARGEST else f"a number of {len(str(abs(value))):,} digits"


def _check_counts(plan) -> None:
    """Degrees, GPUs, nodes, batch and steps: whole numbers that agree with one another."""
    from apsi.inputs import knobs

    lay = plan.layout
    whole = [("gpus", plan.gpus), ("nodes", plan.nodes), ("seq", plan.seq), ("tokens", plan.tokens),
             ("steps", plan.steps), ("batch_sequences", plan.batch_sequences), ("batch_tokens", plan.batch_tokens)]
    whole += [(f"layout.{k}", getattr(lay, k)) for k in ("tp", "pp", "cp", "dp", "ep", "etp", "vpp", "dp_replicate",
                                                          "micro_batch_sequences")]
    for field, value in whole:
        high = (knobs.MAX_STAGES if field in ("layout.pp", "layout.vpp") else knobs.MAX_COUNT
                if field == "gpus" or field.startswith("layout.") else LARGEST)
        if not 1 <= value <= high:
            raise InputError(f"{PREFIX}: {field} is {_shown(value)}: it is a whole number from 1 to {high:,}")
    if not 0 <= lay.zero <= 3:
        raise InputError(f"{PREFIX}: layout.zero is {_shown(lay.zero)}: a ZeRO stage is 0, 1, 2 or 3")
    product = lay.tp * lay.pp * lay.cp * lay.dp
    if product != plan.gpus:
        raise InputError(f"{PREFIX}: tp {lay.tp:,} x pp {lay.pp:,} x cp {lay.cp:,} x dp {lay.dp:,} = {product:,} GPUs, "
                         f"but gpus is {plan.gpus:,}: a plan's degrees multiply to its GPUs")
    if plan.nodes > plan.gpus:
        raise InputError(f"{PREFIX}: nodes {plan.nodes:,} exceeds the {plan.gpus:,} GPUs: valid: 1 to {plan.gpus:,}")
    if plan.batch_tokens != plan.batch_sequences * plan.seq:
        raise InputError(f"{PREFIX}: batch_tokens {plan.batch_tokens:,} is not batch_sequences "
                         f"{plan.batch_sequences:,} x seq {plan.seq:,} = {plan.batch_sequences * plan.seq:,}")
    if plan.steps != -(-plan.tokens // plan.batch_tokens):
        raise InputError(f"{PREFIX}: steps {plan.steps:,} is not the tokens over the batch, rounded up: "
                         f"{plan.tokens:,} / {plan.batch_tokens:,} -> {-(-plan.tokens // plan.batch_tokens):,}")
    ratio = plan.batch_sequences / (lay.micro_batch_sequences * lay.dp)
    if not math.isclose(lay.micro_batches_per_replica, ratio, rel_tol=1e-9):
        raise InputError(f"{PREFIX}: layout.micro_batches_per_replica {lay.micro_batches_per_replica:g} is not "
                         f"batch_sequences / (micro_batch_sequences x dp) = {plan.batch_sequences:,} / "
                         f"({lay.micro_batch_sequences:,} x {lay.dp:,}) = {ratio:g}")
    if lay.micro_batch != lay.micro_batch_sequences:
        raise InputError(f"{PREFIX}: layout.micro_batch {lay.micro_batch:,} is not micro_batch_sequences "
                         f"{lay.micro_batch_sequences:,} (the same number under the knob's name)")


def _check_model(plan) -> None:
    m, a = plan.model, plan.model.architecture
    if a is None:
        return
    for field in ("layers", "width", "heads"):
        if getattr(m, field) != getattr(a, field):
            raise InputError(f"{PREFIX}: model.{field} {_shown(getattr(m, field))} is not the architecture's "
                             f"{getattr(a, field):,} (model.architecture.{field})")
    if plan.framework != "reference":
        # Under a framework the count is the architecture's (apsi.inputs.modelspec.placed): a field
        # edited by hand (model.architecture.ffn) would launch a model the plan never sized.
        from apsi.model.counting import count_parameters

        counted = count_parameters(a).total.total
        if m.params != counted:
            raise InputError(f"{PREFIX}: model.params {_shown(m.params)} is not the count of model.architecture, "
                             f"{counted:,}: a plan's architecture and its count are one model (plan it again)")


def _check_figures(plan) -> None:
    """The figures a fresh plan never gives negative or contradicting each other: days, memory,
    GPU-hours, cost and energy at least 0, and `fits` what the memory says."""
    for field in ("days", "memory_per_gpu_gib", "gpu_hours", "cost_usd", "energy_mwh", "target_days"):
        value = getattr(plan, field, None)
        if value is not None and value < 0:
            raise InputError(f"{PREFIX}: {field} {brief(value)} is negative: give the plan's own, at least 0")
    if plan.fits != (plan.memory_per_gpu_gib <= plan.memory.usable_gib):
        raise InputError(f"{PREFIX}: fits {plan.fits} but memory_per_gpu_gib {plan.memory_per_gpu_gib:,.1f} is "
                         f"{'over' if plan.fits else 'within'} memory.usable_gib {plan.memory.usable_gib:,.1f}")


def _check_framework(plan) -> None:
    """The framework's own rules, as evaluate() applies them to a fresh plan."""
    from apsi.inputs import knobs
    from apsi.training.frameworks import framework_module
    from apsi.model.memory import RECOMPUTE_MODULES

    fw = framework_module(plan.framework)
    lay, a = plan.layout, plan.model.architecture
    given = dict(plan.framework_knobs)
    settings = [k for k in knobs.of(plan.framework) if knobs.BY_NAME[k].setting]
    for key, value in given.items():
        if key not in settings:
            raise InputError(f"{PREFIX}: framework_knobs.{field_path((key,))} is not a {fw.TITLE} setting: valid: "
                             f"{', '.join(settings) or 'none'}")
        knob = knobs.BY_NAME[key]
        if knob.kind == "flag" and not isinstance(value, bool):
            raise InputError(f"{PREFIX}: framework_knobs.{key} is {brief(value)}: it is true or false")
        if knob.kind == "choice" and value not in knob.choices:
            raise InputError(f"{PREFIX}: framework_knobs.{key} is {brief(value)}: valid: {', '.join(knob.choices)}")
    modules = list(lay.recompute_modules)
    if modules and not (lay.recompute == "selective" and "recompute_modules" in fw.KNOBS):
        raise InputError(f"{PREFIX}: layout.recompute_modules {brief(modules)} with recompute {lay.recompute} under "
                         f"{plan.framework}: the modules are Megatron's selective recomputation's; valid: []")
    for module in modules:
        if module not in RECOMPUTE_MODULES:
            raise InputError(f"{PREFIX}: layout.recompute_modules holds {brief(module)}: valid: "
                             f"{', '.join(RECOMPUTE_MODULES)}")
    if len(set(modules)) != len(modules):
        raise InputError(f"{PREFIX}: layout.recompute_modules {brief(modules)} repeats a module")
    if lay.dp_replicate != 1 and "dp_replicate" not in fw.KNOBS:
        raise InputError(f"{PREFIX}: layout.dp_replicate {lay.dp_replicate:,} under {plan.framework}: HSDP replicas "
                         "are torchtitan's; valid: 1")
    if lay.tp > 1 and isinstance(given.get("sequence_parallel"), bool) and given["sequence_parallel"] != \
            lay.sequence_parallel:
        raise InputError(f"{PREFIX}: layout.sequence_parallel {lay.sequence_parallel} is not the plan's setting "
                         f"framework_knobs.sequence_parallel {given['sequence_parallel']}")
    if a is None:
        return
    try:
        fw.check_training(plan.precision, plan.optimizer, {**given, "zero": lay.zero})
        memory_knobs = {k: given[k] for k in fw.MEMORY_KNOBS if k in given}
        if "dp_replicate" in fw.MEMORY_KNOBS:
            memory_knobs["dp_replicate"] = lay.dp_replicate
        if "sequence_parallel" in fw.MEMORY_KNOBS and lay.tp > 1:
            memory_knobs["sequence_parallel"] = lay.sequence_parallel
        fw.check_layout(a, tp=lay.tp, pp=lay.pp, cp=lay.cp, ep=lay.ep, etp=lay.etp, dp=lay.dp, vpp=lay.vpp,
                        micro_batch=lay.micro_batch_sequences, seq=plan.seq, batch_sequences=plan.batch_sequences,
                        zero=lay.zero, **memory_knobs)
    except ApsiError as err:
        raise InputError(f"{PREFIX}: its layout breaks {fw.TITLE}'s rules: {err}") from None
    if plan.framework == "reference":
        return
    split = tuple(lay.virtual_stage_layers)
    options = fw.splits(a.layers, lay.pp, lay.vpp, a.mtp_layers)
    if not options:
        try:
            options = (fw.split_layers(a.layers, lay.pp, lay.vpp, a.mtp_layers),)
        except ApsiError as err:
            raise InputError(f"{PREFIX}: its layout breaks {fw.TITLE}'s rules: {err}") from None
    if split not in options:
        shown = "; ".join(str(list(x)) for x in options[:4]) + ("; ..." if len(options) > 4 else "")
        raise InputError(f"{PREFIX}: layout.virtual_stage_layers {brief(list(split))} is not one of {fw.TITLE}'s "
                         f"splits of {a.layers} layers over pp {lay.pp} x vpp {lay.vpp}: valid: {shown}")
    ranks = list(fw.rank_layers(split, lay.pp))
    if list(lay.stage_layers) != ranks:
        raise InputError(f"{PREFIX}: layout.stage_layers {brief(list(lay.stage_layers))} is not each rank's layers "
                         f"of the split: valid: {ranks}")
    mem = plan.memory
    if not 0 <= mem.peak_stage < lay.pp or (mem.stages_gib and len(mem.stages_gib) != lay.pp):
        raise InputError(f"{PREFIX}: memory.peak_stage {_shown(mem.peak_stage)} and memory.stages_gib "
                         f"({len(mem.stages_gib)} stages) do not fit pp {lay.pp:,}: valid: a stage of 0 to "
                         f"{lay.pp - 1:,} and {lay.pp:,} stages")


def check_plan(plan, words: bool = True):
    """`plan` (a Plan read from its JSON) if it keeps the rules a fresh plan keeps, else an
    InputError naming the first field that breaks one and what would be valid. words=False
    leaves its strings unchecked (export_config, whose formats escape or quote them: a fresh
    plan's GPU or folder name may hold any character its catalog or file system allows)."""
    if words:
        _check_values(plan)
    _check_names(plan)
    _check_counts(plan)
    _check_model(plan)
    _check_figures(plan)
    _check_framework(plan)
    return plan
