"""Helpers for the qwen3-trn notebooks: train Qwen3 with torchtitan, on trn2 or a CPU.

The package reads as the pipeline: ``device``/``assets``/``corpus`` (where we run, the
tokenizer, the text), ``model/`` (shapes, presets, the three variants), ``training/``
(the run spec, the trainer, runs and launches), ``lessons/`` (what the notebooks show),
and ``cli``/``config_registry`` at the top. Importing it is cheap; torch, torchtitan and
transformers load when a function needs them.

    from qwen3_trn_helpers import run
    result = run("native", steps=10)
"""

from __future__ import annotations

from . import without_triton

# before anything of ours imports torchtitan: where triton cannot be installed (macOS,
# Windows) torchtitan 0.3.0's import of it is stood in for (without_triton.py)
without_triton.install()

__version__ = "0.2.0"
__all__ = ["RunSpec", "run"]


def __getattr__(name: str):
    if name == "run":
        from .runs.run import run

        return run
    if name == "RunSpec":
        from .training.spec import RunSpec

        return RunSpec
    raise AttributeError(f"module 'qwen3_trn_helpers' has no attribute {name!r}")
