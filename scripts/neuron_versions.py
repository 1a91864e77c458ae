"""The Neuron venv's versions, for scripts/setup.sh: the gate, then the pins.

Run by setup.sh with the Neuron venv's own interpreter, before the course's venv exists,
so it imports nothing of the package (and runs on the Python the DLAMI ships).

- The gate: this course needs Neuron SDK 2.33 or later (AWS, "What is TorchTitan
  Neuron?", support matrix: Neuron SDK 2.33.0, PyTorch 2.14.0, torch-neuronx 2.14.3.0;
  Neuron 2.33.0 component release notes: Neuron Compiler 2.28.7631.0). An older venv
  would otherwise get torchtitan 0.3.0 installed on top of it silently and fail later,
  deep inside a run. One line names what is there and what to install; exit status 2.
- The pins (stdout, one ``name==version`` a line): torch and torch-neuronx, and numpy,
  so that what the course installs (pandas, matplotlib ...) never replaces the Neuron
  venv's numpy (pandas would otherwise pull numpy 2 ahead of a venv built on 1.x).
"""

from __future__ import annotations

import re
import sys
from importlib import metadata

#: (distribution, the oldest version the course runs on, what it is called in the line)
NEEDED = (
    ("torch", "2.14", "torch 2.14"),
    ("torch-neuronx", "2.14.3", "torch-neuronx 2.14.3.0 or later"),
    ("neuronx-cc", "2.28.7631", "neuronx-cc 2.28.7631.0 or later"),
)
#: what `torch` must not be newer than (the Neuron build the SDK pins, major.minor)
TORCH_SERIES = "2.14"
PINNED = ("torch", "torch-neuronx", "numpy")
FIX = (
    "install Neuron SDK 2.33 or later and run setup from its venv (the DLAMI's "
    "/opt/aws_neuronx_venv_torch_neuronx_2_14*, or pip install torch-neuronx neuronx-cc "
    "from https://pip.repos.neuron.amazonaws.com)"
)


def release(version: str) -> tuple[int, ...]:
    """The leading numbers of a version ("2.14.3.0+abc" -> (2, 14, 3, 0))."""
    found = re.match(r"\d+(\.\d+)*", version.strip())
    return tuple(int(p) for p in found.group(0).split(".")) if found else ()


def installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def problems(versions: dict[str, str | None]) -> list[str]:
    """What falls short of the gate, each as "name version" (or "name missing")."""
    found = []
    for name, oldest, _ in NEEDED:
        have = versions.get(name)
        if have is None:
            found.append(f"{name} missing")
        elif release(have) < release(oldest):
            found.append(f"{name} {have}")
        elif name == "torch" and release(have)[:2] != release(TORCH_SERIES):
            found.append(f"{name} {have} (the SDK's is {TORCH_SERIES})")
    return found


def gate_line(versions: dict[str, str | None]) -> str | None:
    """One line when this venv is older than the course needs, else None."""
    short = problems(versions)
    if not short:
        return None
    needs = ", ".join(label for _, _, label in NEEDED)
    return (
        f"error: this Neuron venv has {', '.join(short)}: the course needs Neuron SDK 2.33 "
        f"or later ({needs}); {FIX}"
    )


def main() -> int:
    versions = {name: installed(name) for name, _, _ in NEEDED}
    line = gate_line(versions)
    if line:
        print(line, file=sys.stderr)
        return 2
    for name in PINNED:
        have = installed(name)
        if have is not None:
            print(f"{name}=={have}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
