"""Which installer scripts/setup.sh uses for the package index: uv, told what pip is told.

Installing the CPU stack (206 distributions, 6.6 GB unpacked) took pip about 80 s of a
2-core box's 120 s setup, one wheel after another; uv, pinned below and bootstrapped by
pip into the venv, fetched and unpacked the same set (compared with ``pip freeze``) in
26-28 s from an empty cache. A faster install that quietly ignored a user's pip
configuration would be worse than a slow one: a company mirror, a CA bundle or a
constraints file would stop applying, and what gets installed would change. So
setup.sh hands ``pip config list`` (every configuration file and ``PIP_*`` variable,
as pip itself merges them) to :func:`uv_options`, which turns each setting uv can honour
into uv's option and refuses every other setting by name: setup then installs with pip,
as before, and says why in one line.

Standard library only: setup.sh runs ``python -m qwen3_trn_helpers.ops.installer`` before the
package's dependencies exist. Only the default install uses it (PyPI's torch); the Neuron
venv's constrained install, ``--cpu-torch`` and a wheelhouse stay on pip.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Sequence

#: the uv setup.sh bootstraps (``pip install uv==...``), pinned like every dependency
UV_REQUIREMENT = "uv==0.13.9"

#: pip's sections that apply to ``pip install``, lowest precedence first (pip's own
#: order: ``global``, then the command's section, then ``PIP_*`` variables, shown by
#: ``pip config list`` as ``:env:``)
SECTIONS = ("global", "install", ":env:")

#: settings that change how pip talks or prints, not what it installs (``config-file``
#: only chose the files whose settings are already in the list)
NO_EFFECT = frozenset({
    "cache-dir", "config-file", "default-timeout", "disable-pip-version-check",
    "no-cache-dir", "no-color", "no-input", "progress-bar", "quiet", "retries",
    "root-user-action", "timeout", "verbose", "no-warn-script-location",
})  # fmt: skip

#: settings that hold several values, separated by white space (pip's list options)
LISTS = frozenset({"extra-index-url", "find-links", "constraint", "trusted-host"})

_LINE = re.compile(r"^(?P<section>:env:|[A-Za-z0-9_-]+)\.(?P<key>[A-Za-z0-9_-]+)=(?P<value>.*)$")


class UsePip(Exception):
    """pip's configuration holds a setting uv would not honour the same way."""


def pip_settings(config_list: str) -> dict[str, str]:
    """The settings ``pip install`` sees, from ``pip config list``'s output.

    Each line reads ``section.key='value'`` (pip prints the value's repr). Keys are
    normalised as pip does (``find_links`` is ``find-links``); a later section overrides
    an earlier one in :data:`SECTIONS` order.
    """
    found: dict[str, dict[str, str]] = {section: {} for section in SECTIONS}
    for line in config_list.splitlines():
        if not line.strip():
            continue
        match = _LINE.match(line.strip())
        if match is None:
            raise UsePip(f"a line of pip's configuration setup cannot read ({line.strip()!r})")
        section, key = match["section"], match["key"].replace("_", "-")
        if section not in found:  # another command's section (download, wheel, ...)
            continue
        try:
            value = ast.literal_eval(match["value"])
        except (ValueError, SyntaxError):
            raise UsePip(f"pip's setting {section}.{key} is not a quoted value") from None
        found[section][key] = str(value)
    merged: dict[str, str] = {}
    for section in SECTIONS:
        merged.update(found[section])
    return merged


def _true(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


def uv_options(settings: dict[str, str]) -> list[str]:
    """uv's options for pip's settings; :class:`UsePip` names the first one it lacks.
    Each option is one argument, ``--flag=value``; an empty setting adds nothing.

    ``--index-strategy unsafe-best-match`` always: pip takes the newest matching version
    from all its indexes and find-links folders together, where uv's default stops at
    the first index that has the package at all.
    """
    options = ["--index-strategy=unsafe-best-match"]
    flags = {
        "index-url": "--index-url",
        "extra-index-url": "--extra-index-url",
        "find-links": "--find-links",
        "constraint": "--constraint",
        "cert": "--cert",
        "trusted-host": "--allow-insecure-host",
    }
    for key, value in settings.items():
        if key in NO_EFFECT:
            continue
        if key in flags:
            # setup.sh reads one option a line: each value is glued to its flag (never an
            # argument of its own, so never a package to install) and holds no line break
            values = value.split() if key in LISTS else [value.strip()] if value.strip() else []
            if any("\n" in item or "\r" in item for item in values):
                raise UsePip(f"pip's setting {key} holds a line break")
            options += [f"{flags[key]}={item}" for item in values]
        elif key == "no-index":
            if _true(value):
                options.append("--no-index")
        elif key == "pre":
            if _true(value):
                options.append("--prerelease=allow")
        else:
            raise UsePip(f"pip's configuration sets {key}, which setup does not pass to uv")
    return options


def main(argv: Sequence[str] | None = None) -> int:
    """For scripts/setup.sh: ``uv-options`` reads ``pip config list`` on standard input.

    Prints uv's options, one a line, and exits 0; or prints why pip must install (one
    line, also on standard output: setup.sh reads one stream) and exits 3.
    ``requirement`` prints :data:`UV_REQUIREMENT`.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["requirement"]:
        print(UV_REQUIREMENT)
        return 0
    if args != ["uv-options"]:
        print("usage: python -m qwen3_trn_helpers.ops.installer uv-options|requirement",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        options = uv_options(pip_settings(sys.stdin.read()))
    except UsePip as e:
        print(e)
        return 3
    print("\n".join(options))
    return 0


if __name__ == "__main__":
    sys.exit(main())
