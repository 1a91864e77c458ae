"""The package's two faces (``qwen3_trn_helpers`` and ``qwen3_trn_helpers.lessons``):
names imported from their modules on first use, so importing a face stays cheap."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any


def lazy_face(
    package: str, exports: dict[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module's ``__getattr__`` and ``__dir__`` for ``exports`` (name -> module, relative
    to ``package``); a name its module does not define but that is the module's own
    name exports the module (``patches``)."""

    def getattr_(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        where = exports[name]
        module = import_module(where if where.startswith(".") else f".{where}", package)
        if not hasattr(module, name) and where.rsplit(".", 1)[-1] == name:
            return module  # the module itself, exported under its own name
        return getattr(module, name)

    def dir_() -> list[str]:
        return sorted([*import_module(package).__dict__, *exports])

    return getattr_, dir_
