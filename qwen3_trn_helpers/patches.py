"""Every change we make to torchtitan's behaviour at run time, in one place.

Each patch says why it exists, which versions it was written for, is idempotent, and is
applied only when its condition holds. ``tests/test_patches.py`` checks each one works
and fails loudly once upstream no longer needs it, so it can be deleted.

Attention on CPU is not a patch: it is a backend chosen in the model config
(:mod:`qwen3_trn_helpers.attention`).
"""

from __future__ import annotations

import platform
import resource
import sys
from types import SimpleNamespace
from typing import Any

import torch

#: torchtitan releases the patches below were written against and tested with.
TESTED_TORCHTITAN = ("0.3.",)


class CpuDeviceModule:
    """The slice of the ``torch.cuda`` API torchtitan calls, answered for the host CPU.

    Why: torchtitan 0.3.0 picks ``_get_available_device_type() or "cuda"``
    (tools/utils.py), so on a machine with no accelerator it chooses CUDA and dies at
    ``set_device``. ``torch.cpu`` lacks the memory-statistics calls its metrics make.
    Memory figures are the process's peak resident set size (``ru_maxrss``), which
    cannot be reset, so "peak since last step" reads as "peak so far" on CPU.
    """

    set_device = staticmethod(torch.cpu.set_device)
    device_count = staticmethod(torch.cpu.device_count)
    is_available = staticmethod(lambda: True)
    synchronize = staticmethod(lambda *a, **k: None)
    empty_cache = staticmethod(lambda: None)
    reset_peak_memory_stats = staticmethod(lambda *a, **k: None)

    @staticmethod
    def current_device() -> int:
        return 0

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return f"cpu ({platform.processor() or platform.machine()})"

    @staticmethod
    def get_device_properties(device: Any = None) -> SimpleNamespace:
        import os

        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return SimpleNamespace(name="cpu", total_memory=total)

    @staticmethod
    def memory_stats(device: Any = None) -> dict[str, int]:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        return {
            "active_bytes.all.peak": peak,
            "reserved_bytes.all.peak": peak,
            "num_alloc_retries": 0,
            "num_ooms": 0,
        }


CPU_DEVICE_MODULE = CpuDeviceModule()


def torchtitan_picks_cuda_without_gpu() -> bool:
    """The condition for :func:`patch_cpu_device`: torchtitan chose cuda, no GPU exists."""
    from torchtitan.tools import utils

    return not torch.cuda.is_available() and utils.get_device_info()[0] == "cuda"


def patch_cpu_device() -> list[str]:
    """Point torchtitan's module-level ``device_type``/``device_module`` at the CPU.

    torchtitan copies these two names into several modules at import time
    (``from torchtitan.tools.utils import device_type``), so each copy is replaced.
    Call again after importing more torchtitan modules; returns the modules changed.
    """
    import torchtitan.tools.utils  # noqa: F401  (makes sure the globals exist)

    if torch.cuda.is_available():
        return []
    changed = []
    for name, module in list(sys.modules.items()):
        if not name.startswith("torchtitan") or module is None:
            continue
        if getattr(module, "device_type", None) == "cuda":
            module.device_type = "cpu"
            changed.append(name)
        if getattr(module, "device_module", None) is torch.cuda:
            module.device_module = CPU_DEVICE_MODULE
            if name not in changed:
                changed.append(name)
    return changed


def check_torchtitan_version() -> str:
    """The installed torchtitan version; warns when the patches were not tested on it."""
    import warnings
    from importlib import metadata

    version = metadata.version("torchtitan")
    if not version.startswith(TESTED_TORCHTITAN):
        warnings.warn(
            f"qwen3-trn was tested with torchtitan {TESTED_TORCHTITAN}, found {version}; "
            "its CPU patches may be unnecessary or wrong there",
            stacklevel=2,
        )
    return version


def apply_cpu_patches() -> list[str]:
    """All patches the CPU path needs (idempotent; does nothing where a GPU exists)."""
    check_torchtitan_version()
    import torchtitan.trainer  # noqa: F401  (imports the modules that copy device_type)

    return patch_cpu_device()
