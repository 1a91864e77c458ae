"""Import torchtitan where triton cannot be installed (macOS, Windows): a named accommodation.

Why: torchtitan 0.3.0 imports triton unconditionally, though none of our runs uses it:
``models/common/__init__`` -> ``decoder`` -> ``moe`` -> ``token_dispatcher`` ->
``distributed/minimal_async_ep`` (``__init__`` -> ``api``) -> ``kernels``, whose first
lines are ``import triton``. Those kernels serve only MinimalAsyncEP, an expert-parallel
token exchange over CUDA symmetric memory. PyPI's triton has Linux wheels only, and
torch requires it only on Linux, so on a Mac or Windows ``import torchtitan.train``,
``torchtitan.models.qwen3`` and ``run()`` stop with ``ModuleNotFoundError: triton``.

What: when (and only when) triton cannot be found and torchtitan is 0.3.x, an import
hook (a ``sys.meta_path`` finder, Python's documented mechanism, PEP 451) answers the
import of ``torchtitan.distributed.minimal_async_ep.kernels`` with a stand-in module
holding exactly the names ``api.py`` imports from it; each raises
:class:`TritonUnavailable` if it is ever called. No Triton kernel ever runs on a CPU,
and we deliberately do *not* fake a ``triton`` module: torch and transformers ask
whether triton is importable to choose their own code paths, and must keep hearing
"no". :func:`install` removes nothing and is reversible (:func:`uninstall`).

Where it takes effect: ``import qwen3_trn_helpers`` installs the hook (every entry of
ours: ``run()``, the CLI, each launched rank). ``python -m torchtitan.train --module
qwen3_trn_helpers`` imports torchtitan *before* our config registry, so there the
hook must come from a ``.pth`` file that Python's ``site`` runs at start-up:
``scripts/setup.sh`` writes :data:`PTH_LINE` into the venv where triton is missing
(``tests/core/base/test_without_triton.py`` runs torchtitan's entry point that way).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import logging
import sys
from pathlib import Path
from types import ModuleType

#: the torchtitan module whose only problem is ``import triton`` at its top
KERNELS_MODULE = "torchtitan.distributed.minimal_async_ep.kernels"
#: the names torchtitan 0.3.0's ``minimal_async_ep/api.py`` imports from it
KERNEL_NAMES = (
    "copy_full_counts_to_peers_kernel",
    "copy_rows_to_peers_kernel",
    "expand_topk_grad_kernel",
    "fill_combine_metadata_kernel",
    "fill_dispatch_metadata_kernel",
    "invert_flat_indices_kernel",
    "reduce_topk_slots_kernel",
    "topk_scores_grad_kernel",
)
#: the torchtitan versions this was written for (checked when the import happens)
FOR_TORCHTITAN = ("0.3.",)
#: the line scripts/setup.sh writes into ``qwen3_trn_without_triton.pth``
PTH_LINE = "import qwen3_trn_helpers.without_triton as _m; _m.install()\n"


class TritonUnavailable(RuntimeError):
    """A Triton kernel of torchtitan's was called where triton is not installed."""


def triton_importable() -> bool:
    """True when ``import triton`` would find a module (never imports it)."""
    try:
        return importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):
        return False


def triton_version() -> str | None:
    """The installed triton's version, or None where it is absent."""
    from importlib import metadata

    if not triton_importable():
        return None
    try:
        return metadata.version("triton")
    except metadata.PackageNotFoundError:
        return "unknown"


def _needed() -> bool:
    """Triton is missing and torchtitan is a version whose kernels module imports it."""
    from importlib import metadata

    if triton_importable():
        return False
    try:
        return metadata.version("torchtitan").startswith(FOR_TORCHTITAN)
    except metadata.PackageNotFoundError:
        return False


def _unavailable(name: str):
    def kernel(*args, **kwargs):
        raise TritonUnavailable(
            f"torchtitan called its Triton kernel {name} (MinimalAsyncEP, CUDA expert "
            "parallelism), but triton is not installed here; qwen3-trn only stood in for "
            "torchtitan's import of it. Expert parallelism needs a Linux GPU with triton"
        )

    kernel.__name__ = kernel.__qualname__ = name
    return kernel


def stand_in_module() -> ModuleType:
    """The module imported as :data:`KERNELS_MODULE` where triton is absent."""
    module = ModuleType(KERNELS_MODULE, "qwen3-trn stand-in: triton is not installed here")
    for name in KERNEL_NAMES:
        setattr(module, name, _unavailable(name))
    module.QWEN3_TRN_STAND_IN = True
    return module


class _Loader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return stand_in_module()

    def exec_module(self, module: ModuleType) -> None:
        return None


class StandInFinder(importlib.abc.MetaPathFinder):
    """Serves :data:`KERNELS_MODULE` from :func:`stand_in_module` when triton is absent."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        """A spec for the stand-in, for the one module and only where triton is absent."""
        if fullname != KERNELS_MODULE or not _needed():
            return None  # every other import, and this one where triton exists, as usual
        return importlib.machinery.ModuleSpec(fullname, _Loader(), origin="qwen3-trn stand-in")


def installed() -> bool:
    """True when the hook is on ``sys.meta_path``."""
    return any(isinstance(f, StandInFinder) for f in sys.meta_path)


class _TritonNotFoundNoise(logging.Filter):
    """Drops torch's "triton not found; flop counting will not work for triton kernels"
    (``torch/utils/flop_counter.py``, at import on a CUDA build of torch without
    triton): no Triton kernel runs in this course, so every run would print noise."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("triton not found")


def install() -> None:
    """Put the hook first on ``sys.meta_path`` (once), and filter torch's warning about
    the missing triton. Cheap: it checks nothing yet."""
    if not installed():
        sys.meta_path.insert(0, StandInFinder())
        logging.getLogger("torch.utils.flop_counter").addFilter(_TritonNotFoundNoise())


def uninstall() -> None:
    """Remove the hook (a module it already served stays imported)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, StandInFinder)]


def stood_in() -> bool:
    """True when torchtitan's kernels module in this process is our stand-in."""
    module = sys.modules.get(KERNELS_MODULE)
    return bool(getattr(module, "QWEN3_TRN_STAND_IN", False))


PTH_NAME = "qwen3_trn_without_triton.pth"


def pth_path() -> Path:
    """Where the start-up hook for torchtitan's own entry point lives in this environment."""
    import sysconfig

    return Path(sysconfig.get_paths()["purelib"]) / PTH_NAME


def write_pth() -> Path | None:
    """Write (triton absent) or remove (triton present) the start-up hook; its path or None.

    Called by scripts/setup.sh after installing, so that ``python -m torchtitan.train
    --module qwen3_trn_helpers`` (and torchrun's ranks running it) imports torchtitan with
    the hook already in place: Python's ``site`` executes a ``.pth`` line that starts
    with ``import`` at every interpreter start-up, before any user code.
    """
    path = pth_path()
    if triton_importable():
        path.unlink(missing_ok=True)
        return None
    path.write_text(PTH_LINE)
    return path


def entry_point_ready() -> bool:
    """Whether ``python -m torchtitan.train --module qwen3_trn_helpers`` starts here as
    typed: triton importable, or the start-up hook in this environment."""
    return triton_importable() or pth_path().is_file()


def entry_point_argv(module_args: list[str]) -> list[str]:
    """The interpreter arguments that run ``python -m torchtitan.train ARGS`` here.

    Where the start-up hook is missing (a Mac set up without scripts/setup.sh), the
    child runs the hook's own line first and then torchtitan's module as ``-m`` would
    (``runpy.run_module`` with ``alter_sys``), so the same torchtitan ``main()`` runs;
    elsewhere, exactly ``-m torchtitan.train``."""
    if entry_point_ready():
        return ["-m", "torchtitan.train", *module_args]
    code = (
        PTH_LINE.strip() + "; import runpy, sys; sys.argv[0] = 'torchtitan.train'; "
        "runpy.run_module('torchtitan.train', run_name='__main__', alter_sys=True)"
    )
    return ["-c", code, *module_args]


def triton_summary() -> str:
    """One line for ``doctor`` and notebook 00: triton's version, or what its absence means."""
    version = triton_version()
    if version is not None:
        return version
    return (
        "absent: fine for this course (only torchtitan's CUDA expert-parallel kernels use "
        "it; qwen3-trn stands in for their import, nothing of ours runs Triton)"
    )
