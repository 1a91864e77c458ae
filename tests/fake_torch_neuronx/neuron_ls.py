"""``neuron-ls`` of Neuron 2.33: ``-j`` / ``--json-output`` prints a list with one object
per chip; ``nc_count`` is the logical cores at the current LNC (4 at LNC 2 on trn2); the
release knows no ``--output-format`` (added in 2.34) and exits non-zero on it (Neuron
2.33 neuron-ls user guide; the 2.34 end-of-support notice for -j)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .device_module import PHYSICAL_CORES_PER_CHIP


def devices(chips: int, lnc: int = 2) -> list[dict]:
    return [
        {
            "neuron_device": d,
            "bdf": f"{0x10 + d:02x}:00.0",
            "connected_to": [(d - 1) % chips, (d + 1) % chips],
            "nc_count": PHYSICAL_CORES_PER_CHIP // lnc,
            "memory_size": 96 * 2**30,
            "neuron_processes": [],
        }
        for d in range(chips)
    ]


def write_tool(bin_dir: Path, *, chips: int) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    tool = bin_dir / "neuron-ls"
    tool.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r})\n"
        "from fake_torch_neuronx.neuron_ls import devices\n"
        "args = sys.argv[1:]\n"
        "if args in (['-j'], ['--json-output']):\n"
        "    lnc = int(os.environ.get('NEURON_LOGICAL_NC_CONFIG', '2'))\n"
        f"    print(json.dumps(devices({chips}, lnc), indent=2))\n"
        "    sys.exit(0)\n"
        "print(f'neuron-ls: error: unrecognized arguments: {\" \".join(args)}', file=sys.stderr)\n"
        "sys.exit(2)\n"
    )
    tool.chmod(0o755)
    return tool


if __name__ == "__main__":  # (for a reader: what the tool prints)
    print(json.dumps(devices(16), indent=2))
