"""The command line's run flags, written once: one flag per :class:`~..training.spec.RunSpec`
field (its default and help from the field), parsed back into a spec; the parser that
ends a mistake in one line; the exit codes. Both CLI wings use it (cli.py, ops/cli.py).
Cheap to import: the spec loads when a parser is built."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import MISSING, fields
from typing import Any

EXIT_USAGE = 2


EXIT_FAILED = 1


EXIT_INTERRUPTED = 130


EXIT_TERMINATED = 143  # 128 + SIGTERM, as a shell reports it


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not argparse's usage dump
        self.exit(EXIT_USAGE, f"error: {message} (see '{self.prog} --help')\n")


def _number(kind: type, least: int | None, text: str):
    """Parse an int or float flag; ``least`` 1 means positive, 0 non-negative."""
    words = {1: "a positive integer", 0: "a non-negative integer", None: "an integer"}
    try:
        value = kind(text)
    except ValueError:
        what = words[least] if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if kind is float and least is not None and not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    if kind is int and least is not None and value < least:
        raise argparse.ArgumentTypeError(f"must be {words[least]}, got {value}")
    return value


def add_spec_arguments(parser: argparse.ArgumentParser, only: Sequence[str] | None = None) -> None:
    """One flag per RunSpec field (or the fields in ``only``), from the field itself."""
    from ..training.spec import RunSpec

    for f in fields(RunSpec):
        if only is not None and f.name not in only:
            continue
        meta, flag = f.metadata, "--" + f.name.replace("_", "-")
        help_text = meta.get("help", "")
        default = None if f.default is MISSING else f.default
        if f.type == "bool":
            parser.add_argument(flag, action="store_true", default=default, help=help_text)
            continue
        if "optional_value" in meta:  # --resume, or --resume auto
            word = meta["optional_value"]
            parser.add_argument(
                flag, nargs="?", const=True, default=default, choices=[word], metavar=word,
                help=help_text,
            )  # fmt: skip
            continue
        kwargs: dict[str, Any] = {"default": default, "help": help_text}
        if "choices" in meta:
            kwargs["choices"] = list(meta["choices"])
        if f.type.startswith(("int", "float")):
            kind = int if f.type.startswith("int") else float
            least = 1 if meta.get("positive") else 0 if meta.get("non_negative") else None
            kwargs["type"] = lambda text, k=kind, m=least: _number(k, m, text)
            kwargs["metavar"] = "N" if kind is int else "X"
        if default is not None and "choices" not in meta:
            kwargs["help"] += f" (default: {default})"
        parser.add_argument(flag, **kwargs)


def spec_from_args(args: argparse.Namespace, **extra: Any):
    from ..training.spec import RunSpec

    values = {f.name: getattr(args, f.name) for f in fields(RunSpec) if hasattr(args, f.name)}
    return RunSpec(**{**values, **extra}).with_absolute_paths()  # relative to where we stand
