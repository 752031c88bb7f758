"""The package's own error type: mistakes a user can make.

Every error a user can cause (a bad size, an unknown GPU, a layout that cannot be built,
a model that fits on no cluster) raises a subclass of `ApsiError`, which is a `ValueError`.
The CLI prints its message as one line and exits 2. Anything else is a bug.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class ApsiError(ValueError):
    """A problem with the user's input; the message names it and what would be valid."""


class InputError(ApsiError):
    """An input value is malformed or out of range."""


class UnknownNameError(ApsiError):
    """A name (GPU, optimizer, precision, recompute level) is not one of the choices."""


class LayoutError(ApsiError):
    """A pinned layout cannot be built, or no layout fits memory."""


ALIASES = {
    **dict.fromkeys(("tensor_parallel", "tensor_parallel_size", "tensor_model_parallel_size", "tp_size"), "tp"),
    **dict.fromkeys(("pipeline_parallel", "pipeline_parallel_size", "pipeline_model_parallel_size", "pp_size"), "pp"),
    **dict.fromkeys(("data_parallel", "data_parallel_size", "dp_size"), "dp"),
    **dict.fromkeys(("context_parallel", "context_parallel_size", "cp_size"), "cp"),
    **dict.fromkeys(("expert_parallel", "expert_parallel_size", "expert_model_parallel_size", "ep_size"), "ep"),
    **dict.fromkeys(("expert_tensor_parallel_size", "etp_size"), "etp"),
    **dict.fromkeys(("virtual_pipeline_model_parallel_size", "virtual_pipeline", "virtual_stages"), "vpp"),
    **dict.fromkeys(("micro_batch_size", "mbs"), "micro_batch"),
    **dict.fromkeys(("global_batch_size", "gbs"), "batch"),
    **dict.fromkeys(("seq_length", "seq_len", "sequence_length", "max_seq_len"), "seq"),
    **dict.fromkeys(("num_layers", "num_hidden_layers", "n_layers"), "layers"),
    **dict.fromkeys(("hidden_size", "d_model"), "width"),
    **dict.fromkeys(("num_attention_heads", "n_heads"), "heads"),
    **dict.fromkeys(("num_query_groups", "num_key_value_heads", "n_kv_heads"), "kv_heads"),
    "serve": "kind",
}
"""Other tools' names for apsi's (Megatron's arguments, Hugging Face's config fields, a scenario's
`serve:` for `kind: serve`): a name among them is suggested as its apsi name, where that is a
choice, before the nearest spelling (`tensor_parallel` is tp, not sequence_parallel)."""


def did_you_mean(name: object, choices: Iterable[str]) -> str:
    """"did you mean X? " for the choice `name` is another tool's name for (ALIASES), else the
    nearest in spelling, or "" when none is near."""
    lowered = {c.lower(): c for c in choices}
    key = str(name).lower().lstrip("-").replace("-", "_")
    alias = ALIASES.get(key)
    if alias is not None and alias in lowered:
        return f"did you mean {lowered[alias]}{': serve' if key == 'serve' else ''}? "
    near = difflib.get_close_matches(str(name).lower(), list(lowered), n=1, cutoff=0.4)
    return f"did you mean {lowered[near[0]]}? " if near else ""


def unknown(kind: str, name: object, choices: Iterable[str]) -> UnknownNameError:
    """An error for `name` not in `choices` (whatever was given: it is shown by brief()),
    suggesting the nearest valid name."""
    options = list(choices)
    return UnknownNameError(f"unknown {kind} {brief(name)}: {did_you_mean(name, options)}valid: {', '.join(options)}")


def brief(value: object, limit: int = 80) -> str:
    """repr(value) cut to `limit` characters, for messages: a message never repeats a whole input
    (a scenario's alias bomb, a megabyte path); repr is only taken of what is small enough to
    print, so a huge container is named by its kind and size instead."""
    if isinstance(value, (list, tuple, dict, set)) and len(value) > 20:
        return f"<a {type(value).__name__} of {len(value):,} items>"
    if isinstance(value, (list, tuple, dict)) and _deep(value, 3):
        return f"<a nested {type(value).__name__}>"
    if isinstance(value, int) and value.bit_length() > 300:
        # Past 4,300 digits repr() itself fails (sys.get_int_max_str_digits); 300 bits is some 90.
        return f"<a whole number of some {int(value.bit_length() * 0.30103) + 1:,} digits>"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _deep(value: object, depth: int) -> bool:
    """Whether `value` nests containers more than `depth` levels (its repr could be huge)."""
    if depth <= 0:
        return isinstance(value, (list, tuple, dict))
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
    return any(_deep(v, depth - 1) for v in items)
