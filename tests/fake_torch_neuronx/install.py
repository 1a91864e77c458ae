"""Put the double where a process finds it the way it finds torch-neuronx: a
distribution on the path (entry points), a ``neuron-ls`` on PATH, a sysfs tree.

Returns the environment a test hands to the processes it starts; nothing is installed
into the venv, and a process started without that environment never sees the double.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from . import neuron_ls, sysfs

TESTS_DIR = Path(__file__).resolve().parent.parent
#: the variables the double reads (named for it, so nothing of a user's matches)
CHIPS_VAR = "FAKE_TORCH_NEURONX_CHIPS"
NODE_ADDR_VAR = "FAKE_TORCH_NEURONX_NODE_ADDR"  # the node's own address (see process_group)
RECORD_VAR = "FAKE_TORCH_NEURONX_RECORD"  # a folder the double writes what it saw into

ENTRY_POINTS = """\
[torch.backends]
fake_torch_neuronx = fake_torch_neuronx.registration:autoload

[torch_dynamo_backends]
neuron = fake_torch_neuronx.dynamo_backend:neuron_backend
"""


def write_distribution(site: Path) -> Path:
    """A dist-info whose entry points torch reads at import (as torch-neuronx's)."""
    info = site / "fake_torch_neuronx-2.14.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: fake-torch-neuronx\nVersion: 2.14.0\n"
    )
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return site


def write_compiler(bin_dir: Path) -> Path:
    """A ``neuronx-cc`` stub: torch-neuronx only has to find it through PATH (compiler.py);
    the double compiles nothing with it."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    tool = bin_dir / "neuronx-cc"
    tool.write_text(f"#!{sys.executable}\nprint('neuronx-cc (fake_torch_neuronx): a stub')\n")
    tool.chmod(0o755)
    return tool


def install(
    root: Path, *, chips: int = 16, record: Path | None = None, compiler_on_path: bool = True
) -> dict[str, str]:
    """The double under ``root`` (site/, bin/neuron-ls, bin/neuronx-cc, sys/); the
    environment to use.

    ``chips``: Trainium2 chips of the pretend instance (16: a trn2.48xlarge). The
    environment starts from this process's and puts the double first on PYTHONPATH.
    ``compiler_on_path``: False leaves ``neuronx-cc`` out of ``bin/`` (a test puts it
    where setup links it instead).
    """
    site = write_distribution(root / "site")
    bin_dir = root / "bin"
    neuron_ls.write_tool(bin_dir, chips=chips)
    if compiler_on_path:
        write_compiler(bin_dir)
    sysfs.build(root / "sys", chips=chips)
    env = dict(os.environ)
    paths = [str(TESTS_DIR), str(site), *filter(None, [env.get("PYTHONPATH")])]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PATH"] = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), env["PATH"]])
    env[CHIPS_VAR] = str(chips)
    if record is not None:
        record.mkdir(parents=True, exist_ok=True)
        env[RECORD_VAR] = str(record)
    return env
