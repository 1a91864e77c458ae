"""Which torchtitan this process trains with, and whether AWS's fork is installed too.

The package trains with upstream torchtitan 0.3.0. On trn2 the project's ``.venv`` also
reads the Neuron venv's packages, where AWS's fork (aws-neuron/torchtitan-neuron) may be
installed; the device report, ``qwen3-trn doctor`` and the ladder's ``environment`` rung
say which one is imported and warn when the other is shadowed. Nothing is imported to
find out: the import system and the installed distributions are asked.

Importing the stack is the largest part of a process's start, so it is imported with
the cyclic garbage collector paused (:func:`collector_paused`).
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata


def installed_version(package: str) -> str | None:
    """The installed version of a distribution, or None when it is not installed."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


@dataclass(frozen=True)
class TorchtitanStack:
    """Which torchtitan this process imports, and whether AWS's fork is also installed.

    We train with upstream torchtitan 0.3.0 from this project's ``.venv``. On trn2 that
    venv also reads the Neuron venv's packages (scripts/setup.sh), where a user may have
    installed AWS's fork (aws-neuron/torchtitan-neuron: its own ``torchtitan`` plus the
    ``torchtitan_neuron`` module). Our ``.venv`` comes first on ``sys.path``, so the fork's
    ``torchtitan`` is shadowed: worth one line, never silence.
    """

    version: str | None
    location: str | None
    fork: str | None  # where AWS's fork is installed, if it is

    @property
    def warning(self) -> str | None:
        if self.fork is None:
            return None
        return (
            f"AWS's torchtitan fork is installed ({self.fork}); this process imports "
            f"torchtitan {self.version} from {self.location}, which shadows it: qwen3-trn "
            "runs upstream 0.3.0 (docs/trn2.md, Notes on the Neuron stack)"
        )


def find_torchtitan_fork(paths: list[str] | None = None) -> str | None:
    """Where aws-neuron/torchtitan-neuron is installed on ``paths`` (default: sys.path).

    Looks for the fork's own module (``torchtitan_neuron``) or its distribution (named
    ``torchtitan-neuron``, or ``torchtitan`` with a ``+neuron`` version, as its
    0.2.2+neuron.1), without importing anything.
    """
    from pathlib import Path

    for entry in paths if paths is not None else sys.path:
        folder = Path(entry or ".")
        if not folder.is_dir():
            continue
        if (folder / "torchtitan_neuron").is_dir():
            return str(folder / "torchtitan_neuron")
        for dist in metadata.distributions(path=[str(folder)]):
            name = (dist.metadata.get("Name") or "").lower().replace("_", "-")
            version = dist.version or ""
            if name == "torchtitan-neuron" or (name == "torchtitan" and "neuron" in version):
                return f"{name} {version} in {folder}"
    return None


def torchtitan_stack(paths: list[str] | None = None) -> TorchtitanStack:
    """The torchtitan this interpreter imports (version, folder) and the fork, if any."""
    from importlib.util import find_spec

    spec = find_spec("torchtitan")  # top-level: found, not imported
    location = None
    if spec is not None and spec.origin:
        from pathlib import Path

        location = str(Path(spec.origin).parent)
    return TorchtitanStack(installed_version("torchtitan"), location, find_torchtitan_fork(paths))


@contextmanager
def collector_paused() -> Iterator[None]:
    """CPython's cyclic garbage collector off for a block of imports, then as it was.

    torch, torchtitan and transformers are about 4,000 modules, which leave some
    600,000 objects that live as long as the process. While they pile up, CPython starts
    full collections that walk all of them and free nothing: 8 during an 8.4 s import
    of the trainer, 1.4 s of it (2-core Zen 4). Paused, the collector walks them once,
    at its next full collection. Every process that trains pays the import: a notebook
    kernel, each torchrun rank, each CLI command. Cycles made meanwhile are collected at
    the collector's next run.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
