"""Checks a notebook runs first: Python, packages, hardware, offline assets.

Each check says what to do when it fails, so the first cell of the walkthrough either
passes or tells the student exactly which command to run.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from importlib import metadata

#: package -> (version prefix we tested, what to run when it is missing)
REQUIRED = {
    "torch": ("2.14", "on CPU: pip install -e '.[cpu]'; on trn2: use the Neuron venv"),
    "torchtitan": ("0.3.0", "pip install -e ."),
    "transformers": ("5.", "pip install -e ."),
    "tokenizers": ("0.", "pip install -e ."),
    "safetensors": ("", "pip install -e ."),
    "matplotlib": ("", "pip install -e ."),
    "ipywidgets": ("8.", "pip install -e ."),
    "tqdm": ("", "pip install -e ."),
}


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True

    @property
    def status(self) -> str:
        return "ok" if self.ok else ("MISSING" if self.required else "not here")


def _package_check(package: str, prefix: str, fix: str) -> Check:
    try:
        version = metadata.version(package)
    except metadata.PackageNotFoundError:
        return Check(package, False, "not installed", fix)
    ok = version.startswith(prefix)
    detail = version if ok else f"{version} (tested with {prefix}*)"
    return Check(package, ok, detail, "" if ok else fix)


def check_environment(build_assets: bool = True) -> list[Check]:
    """Run every check; ``build_assets`` also builds the offline tokenizer if needed."""
    checks = [
        Check(
            "python",
            sys.version_info >= (3, 11),
            sys.version.split()[0],
            "use Python 3.11+ (the trn2 Neuron venv has 3.12)",
        )
    ]
    checks += [_package_check(p, v, fix) for p, (v, fix) in REQUIRED.items()]

    from ..device import device_report

    report = device_report()
    neuron_version = report.torch_neuronx
    checks.append(
        Check(
            "torch-neuronx",
            neuron_version is not None,
            neuron_version or "absent: CPU path (tiny models, offline assets)",
            "on trn2: activate /opt/aws_neuronx_venv_torch_neuronx_2_14_0 (docs/trn2.md)",
            required=False,
        )
    )
    # never required: where it cannot be installed, torchtitan's import of it is stood
    # in for (without_triton.py); the detail says which of the two this machine is
    checks.append(Check("triton", True, report.triton, required=False))
    from ..without_triton import entry_point_ready, pth_path, triton_importable

    # what `python -m torchtitan.train` (notebook 02's entry-point cell, torchrun's ranks)
    # needs where triton is absent: the start-up hook scripts/setup.sh writes. The
    # notebook's cell runs without it; a terminal command needs it.
    checks.append(
        Check(
            "torchtitan entry point",
            entry_point_ready(),
            "triton present: nothing needed"
            if triton_importable()
            else (f"start-up hook in place ({pth_path().name})" if entry_point_ready()
                  else "triton absent and no start-up hook: notebook 02 still runs it, "
                  "`python -m torchtitan.train` typed in a terminal stops at `import triton`"),
            "run scripts/setup.sh, or: python -c \"from qwen3_trn_helpers import "
            "without_triton as w; w.write_pth()\"",
            required=False,
        )
    )  # fmt: skip
    checks.append(
        Check(
            "device",
            True,
            f"{report.device_type} ({report.device_name}) x{report.device_count}",
        )
    )
    if build_assets:
        from ..assets import ensure_tokenizer

        try:
            checks.append(Check("offline tokenizer", True, str(ensure_tokenizer())))
        except Exception as e:  # shown in the table with its fix, not raised
            checks.append(Check("offline tokenizer", False, str(e), "run: qwen3-trn assets"))
    return checks


def missing(checks: list[Check]) -> list[Check]:
    return [c for c in checks if c.required and not c.ok]


def checks_table(checks: list[Check]):
    """The checks as a table (HTML in Jupyter, text elsewhere)."""
    from ..tables import Table

    return Table(
        [{"check": c.name, "status": c.status, "detail": c.detail, "fix": c.fix} for c in checks]
    )
