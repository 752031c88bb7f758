"""The GPU queries the frameworks' argument code makes, answered as the plan's GPU would, so that
it runs on a machine without one. Owns nothing else: parsing, validation and configuration stay
the frameworks' own code.

- torch.cuda.get_device_properties / get_device_capability / device_count: Megatron-LM's
  validate_args asks the device's compute capability (megatron/training/utils get_device_arch_version,
  e.g. for the FP8 recipe and the flex dispatcher).
- Transformer Engine's version and its fused RoPE kernel: Transformer Engine needs a GPU and cannot be installed here, but
  every GPU launch of Megatron has it; TransformerConfig refuses fused RoPE and FP8 without it
  (megatron.core.utils.get_te_version caches it in _te_version; TransformerConfig.__post_init__
  looks for rope_utils.fused_apply_rotary_pos_emb). Answered as TE_VERSION and a kernel that
  raises if it is ever called.
"""

from __future__ import annotations

import contextlib
import os
from types import SimpleNamespace

TE_VERSION = "2.9.0"
"""The Transformer Engine release the stand-in reports (a 2.x release, as Megatron-Core 0.19 expects)."""

CAPABILITY = {"A100": (8, 0), "H100": (9, 0), "H200": (9, 0), "H20": (9, 0), "GH200": (9, 0), "B200": (10, 0),
              "GB200": (10, 0), "B300": (10, 3), "GB300": (10, 3), "MI300X": (9, 4), "MI355X": (9, 5)}
"""CUDA compute capability of each GPU family (NVIDIA's CUDA GPUs table); MI parts report gfx9."""


def _capability() -> tuple[int, int]:
    gpu = os.environ.get("APSI_GPU", "H100").upper()
    for name in sorted(CAPABILITY, key=len, reverse=True):
        if gpu.startswith(name):
            return CAPABILITY[name]
    return (9, 0)


def install() -> None:
    """Stand in for the device queries (only those)."""
    import torch

    def properties(device=None):
        major, minor = _capability()
        return SimpleNamespace(major=major, minor=minor, name=os.environ.get("APSI_GPU", "H100"),
                               total_memory=80 * 2**30, multi_processor_count=132)

    torch.cuda.get_device_properties = properties
    torch.cuda.get_device_capability = lambda device=None: _capability()
    torch.cuda.device_count = lambda: int(os.environ.get("LOCAL_WORLD_SIZE", "8"))


def _kernel(*args, **kwargs):
    raise RuntimeError("a Transformer Engine GPU kernel stood in for by tests/frameworks/gpu_stubs.py was called")


def install_transformer_engine() -> None:
    """Megatron-Core's view of Transformer Engine as a GPU install has it: its version and the
    fused RoPE kernel's presence."""
    from packaging.version import Version

    import megatron.core.models.common.embeddings.rope_utils as rope_utils
    import megatron.core.utils as utils

    utils._te_version = Version(TE_VERSION)
    if rope_utils.fused_apply_rotary_pos_emb is None:
        rope_utils.fused_apply_rotary_pos_emb = _kernel


def install_torchtitan() -> None:
    """torchtitan's device-capability query (torchtitan/tools/utils.py has_cuda_capability, asked by
    the float8 converter), answered for the plan's GPU wherever torchtitan imported it."""
    import importlib
    import sys

    for name in ("torchtitan.tools.utils", "torchtitan.components.quantization.float8", "torchtitan.models.llama3",
                 "torchtitan.models.deepseek_v3", "torchtitan.models.qwen3"):
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    import torchtitan.tools.utils as utils

    original = utils.has_cuda_capability

    def has_cuda_capability(major: int, minor: int) -> bool:
        return _capability() >= (major, minor) and not os.environ.get("APSI_GPU", "").upper().startswith("MI")

    for module in list(sys.modules.values()):
        if getattr(module, "has_cuda_capability", None) is original:
            setattr(module, "has_cuda_capability", has_cuda_capability)
