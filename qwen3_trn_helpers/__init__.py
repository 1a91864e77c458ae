"""Helpers for the qwen3-trn notebooks: train Qwen3 with torchtitan, on trn2 or a CPU.

    from qwen3_trn_helpers import run
    result = run("native", steps=10)

Importing it is cheap; torch, torchtitan and transformers load when a function needs
them. Two wings. The course core, bottom up: ``device``/``assets`` (where we run, the
tokenizer), ``data/`` (the text: corpora, prepared folders, one global sample order),
``model/`` (shapes, presets, the three variants), ``training/`` (what torchtitan builds:
the run spec and plan, the trainer, patches, metrics, memory), ``runs/`` (how a run
executes: in this process or through torchrun, its folder, child processes, weights).
The cluster tools, ``ops/`` (planner, smoke ladder, Slurm and Kubernetes jobs, fabric
check, dry run, data prepare, wheelhouse), sit on the core and the core never imports
them. ``lessons/`` (what the notebooks show) and ``cli``/``config_registry`` are the faces
on top (tests/core/project/test_architecture.py holds the order).
"""

from __future__ import annotations

from . import without_triton
from .faces import lazy_face

# before anything of ours imports torchtitan: where triton cannot be installed (macOS,
# Windows) torchtitan 0.3.0's import of it is stood in for (without_triton.py)
without_triton.install()

__version__ = "0.2.0"

#: the package's face (the notebooks import from here and from ``.lessons`` only): each
#: name and the module that defines it, imported when first asked for
EXPORTS = {
    "blockwise_experts": "model.moe_blockwise",
    "detect_device_type": "device",
    "device_report": "device",
    "dry_run": "ops.dry_run",
    "ensure_tokenizer": "assets",
    "FIRST_ADDED_ID": "assets",
    "make_random_hf_checkpoint": "model.hf_checkpoint",
    "patches": "training.patches",
    "plan_run": "training.plan",
    "PRESETS": "model.presets",
    "pytorchjob_manifest": "ops.jobs.kubernetes",
    "QWEN3_ADDED_TOKENS": "assets",
    "RECIPE": "runs.weights",
    "read_metrics": "training.metrics_file",
    "registration_facts": "device",
    "run": "runs.run",
    "RunSpec": "training.spec",
    "slurm_script": "ops.jobs.slurm",
    "TINY": "model.shapes",
    "Topology": "trn2",
    "trainer_config": "training.trainer",
    "variant_table": "model.variants",
    "VOCAB_SIZE": "model.shapes",
}
__all__ = sorted(EXPORTS)


__getattr__, __dir__ = lazy_face(__name__, EXPORTS)
