"""The framework knobs, each declared once: name, kind, domain, default, frameworks, help, label.

Owns the list of layout knobs and framework settings a question may give beyond the run itself
(tp, pp, dp and recompute, which the reference arithmetic has too, then cp, ep, ..., the
framework's own settings such as tp_overlap). Everything else follows from it: the CLI's
options and their help (apsi.cli.options), the scenario keys (apsi.api.scenarios), the keywords
plan(), evaluate() and frontier() accept and how each value is checked (apsi.inputs.question.check_knobs),
which knobs each framework module has (its KNOBS and MEMORY_KNOBS), the Layout line's words for a
setting (apsi.outputs.text) and the plan's framework_knobs in JSON and CSV. A new knob is one entry in
KNOBS, plus the model code that uses it (docs/method.md, "Adding a knob").

Plain data, no imports beyond the standard library: `apsi --help` reads it without loading
pydantic.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

Kind = Literal["degree", "level", "modules", "flag", "choice"]

MEGATRON, TORCHTITAN, DEEPSPEED = "megatron", "torchtitan", "deepspeed"
MAX_COUNT = 1_000_000
"""The largest degree (apsi.inputs.question.MAX_GPUS_LIMIT; tests/test_knobs.py checks the two agree)."""
MAX_STAGES = 100_000
"""The largest pp and vpp (apsi.model.architecture.MAX_LAYERS; checked likewise)."""
ALL = (MEGATRON, TORCHTITAN, DEEPSPEED)


class Knob(NamedTuple):
    name: str
    """The keyword (plan(name=...)), the scenario key and the JSON field; the CLI's --kebab-case."""
    kind: Kind
    """degree: a whole number the search chooses unless pinned (from `low` to `high`); level: the
    recomputation level; modules: a list of recomputed modules; flag: true or false; choice: one
    of `choices`."""
    help: str
    """The CLI's help and the schema's description, without the frameworks (added from them)."""
    frameworks: tuple[str, ...]
    """The frameworks that have it, besides the reference arithmetic's own (tp, pp, dp, recompute)."""
    reference: bool = False
    """Whether the reference arithmetic has it too."""
    low: int = 1
    high: int = MAX_COUNT
    """A degree's range."""
    choices: tuple[str, ...] = ()
    """A choice's values, the first the default."""
    setting: bool = False
    """A framework setting rather than a degree: kept as given, passed to the framework's memory()
    and the step time with the layout, and reported in Plan.framework_knobs."""
    carried: bool = False
    """A degree the framework's memory() takes as given (torchtitan's dp_replicate)."""
    label: str = ""
    """How the plan's Layout line names a setting that is given and not false ("{}": its value)."""
    what: str = ""
    """The value's name in a refusal ("gradient dtype"); the knob's name by default."""
    on: tuple[str, ...] = ()
    """The frameworks under which a flag not given is true (flag_value); false elsewhere."""
    group: str = ""
    """The `--help` section it is listed in (apsi.cli.options.SectionedCommand, as Megatron's
    argument groups): by default "Layout" for a degree or the recomputation, "Framework settings"
    for a setting (group_of)."""


def group_of(k: Knob) -> str:
    """The `--help` section of knob `k`: its group, else by its kind."""
    return k.group or ("Framework settings" if k.setting else "Layout")


KNOBS: tuple[Knob, ...] = (
    Knob("tp", "degree", "Pin tensor parallelism.", ALL, reference=True),
    Knob("pp", "degree", "Pin pipeline stages.", ALL, reference=True, high=MAX_STAGES),
    Knob("vpp", "degree", "Pin virtual pipeline stages per rank.", (MEGATRON, TORCHTITAN), high=MAX_STAGES),
    Knob("cp", "degree", "Pin context parallelism.", (MEGATRON, TORCHTITAN)),
    Knob("ep", "degree", "Pin expert parallelism.", (MEGATRON, TORCHTITAN)),
    Knob("etp", "degree", "Pin expert tensor parallelism: under megatron a divisor of the experts' FFN, "
         "under torchtitan 1 or tp.", (MEGATRON, TORCHTITAN)),
    Knob("dp", "degree", "Pin data parallelism.", ALL, reference=True),
    Knob("dp_replicate", "degree", "Pin torchtitan's HSDP replicas, dp / dp_replicate sharding each.", (TORCHTITAN,),
         carried=True),
    Knob("micro_batch", "degree", "Pin sequences per micro-batch (default 1; any: 1, 2 and 4 searched).", ALL),
    Knob("recompute", "level", "Pin recomputation: none, selective or full.", ALL, reference=True),
    Knob("recompute_modules", "modules", "With --recompute selective: the modules recomputed, comma-separated, of "
         "core_attn, mla_up_proj, layernorm, mlp, moe, moe_act; default core_attn.", (MEGATRON,)),
    # Megatron-DeepSpeed's --recompute-granularity selective re-runs the attention core alone (its
    # megatron/arguments.py has no --recompute-modules): DeepSpeed has the level, not the modules.
    Knob("zero", "degree", "Pin the ZeRO stage: deepspeed 0-3, megatron 0 or 1, its distributed optimizer.",
         (MEGATRON, DEEPSPEED), low=0, high=3),
    Knob("grad_dtype", "choice", "Gradient buffers: fp32, Megatron's default, or bf16.", (MEGATRON,),
         choices=("fp32", "bf16"), setting=True, label="{} gradients", what="gradient dtype"),
    Knob("moments_dtype", "choice", "Adam's moments: fp32, the default, or bf16.", (MEGATRON,),
         choices=("fp32", "bf16"), setting=True, label="{} Adam moments", what="optimizer moments dtype"),
    Knob("fp8_param_gather", "flag", "true: FP8 primary weights, no bf16 copy, under fp8.", (MEGATRON,), setting=True,
         label="FP8 param gather"),
    Knob("tp_overlap", "flag", "true: TP collectives overlapped with GEMMs, --tp-comm-overlap.", (MEGATRON,),
         setting=True, label="TP overlap"),
    Knob("ep_overlap", "flag", "true: EP all-to-all overlapped with another micro-batch, the EP A2A overlap.",
         (MEGATRON,), setting=True, label="EP overlap"),
    Knob("sequence_parallel", "flag", "true: sequence parallelism with TP, the norms' and linear inputs' "
         "activations split over tp, all-gathers and reduce-scatters in place of all-reduces (same bytes); default "
         "true under megatron and torchtitan, false under deepspeed (Megatron-DeepSpeed's --sequence-parallel is "
         "off unless given).", ALL, setting=True, on=(MEGATRON, TORCHTITAN)),
    Knob("compile", "flag", "true: the model under torch.compile (compile.enable), as torchtitan's benchmarks ran it; "
         "false: eager, some 14% slower on their bf16 rows (TT-BENCH). Default true.", (TORCHTITAN,), setting=True,
         on=(TORCHTITAN,), label="torch.compile"),
    Knob("dispatcher", "choice", "EP token dispatcher: alltoall (default) or flex, DeepEP or HybridEP sending a "
         "token once per node.", (MEGATRON,), choices=("alltoall", "flex"), setting=True, label="{} EP dispatcher",
         what="EP token dispatcher"),
    Knob("cp_comm_type", "choice", "Context parallelism's K and V exchange: p2p (default), a ring hidden under the "
         "attention, or all_gather, gathered before it and exposed (Llama 3's), --cp-comm-type.", (MEGATRON,),
         choices=("p2p", "all_gather"), setting=True, label="CP {}", what="CP communication type"),
)
BY_NAME: dict[str, Knob] = {k.name: k for k in KNOBS}

REFERENCE_KNOBS: tuple[str, ...] = tuple(k.name for k in KNOBS if k.reference)
"""The knobs the reference arithmetic has too (tp, pp, dp, recompute)."""
FRAMEWORK_KNOBS: tuple[str, ...] = tuple(k.name for k in KNOBS if not k.reference)
"""Knobs only a framework other than the reference has."""
SETTINGS: tuple[str, ...] = tuple(k.name for k in KNOBS if k.setting)
"""The frameworks' own settings beyond the layout's degrees."""
FLAGS: tuple[str, ...] = tuple(k.name for k in KNOBS if k.kind == "flag")
"""Knobs that take true or false."""


def flag_value(name: str, framework: str, given: dict[str, object]) -> bool:
    """The flag `name` under `framework`: as `given` (a layout or the pins) holds it, else its
    default there (true under the frameworks of the knob's `on`)."""
    value = given.get(name)
    return framework in BY_NAME[name].on if value is None else bool(value)


def of(framework: str) -> tuple[str, ...]:
    """The knobs `framework` has, in KNOBS' order (its module's KNOBS)."""
    return tuple(k.name for k in KNOBS if framework in k.frameworks)


def carried(framework: str) -> tuple[str, ...]:
    """The knobs `framework`'s memory() takes as given, with the layout (its MEMORY_KNOBS)."""
    return tuple(k.name for k in KNOBS if framework in k.frameworks and (k.setting or k.carried))


def help_text(k: Knob) -> str:
    """The knob's help with the frameworks that have it (the CLI's, the schema's)."""
    if k.reference or set(k.frameworks) == set(ALL):
        return k.help
    return f"{k.help.rstrip('.')} ({', '.join(k.frameworks)})."
