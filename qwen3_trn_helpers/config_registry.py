"""Our presets as torchtitan config-registry entries, for torchtitan's own entry point.

torchtitan's ``ConfigManager`` accepts a fully qualified ``--module`` and imports its
``config_registry``, so the same configurations that ``run()`` builds can be trained
with no helper code in the loop:

    python -m torchtitan.train --module qwen3_trn_helpers --config qwen3_trn_tiny_native

(under torchrun on trn2 likewise). tyro flags such as ``--training.steps 20`` override
fields as for torchtitan's own configs. ``scripts/bench_overhead.py`` uses this to time
our helper against torchtitan's entry point on one configuration.
"""

from __future__ import annotations

from pathlib import Path

from .train import RunSpec


def build_config(spec: RunSpec, dump_folder: str = "./outputs"):
    """``Trainer.Config`` for a spec, with the patches its variant and device need."""
    from .patches import apply_variant_patches, patch_cpu_device
    from .train import plan_run, trainer_config

    plan = plan_run(spec)
    apply_variant_patches(spec.variant, plan.device_type)
    config = trainer_config(plan, Path(dump_folder))
    if plan.device_type == "cpu":
        patch_cpu_device()
    return config


def qwen3_trn_tiny_native():
    """Tiny native Qwen3 (real vocab), 10 steps at local batch 1: the CPU walkthrough."""
    return build_config(RunSpec(variant="native", preset="tiny"))


def qwen3_trn_tiny_transformers_v5():
    """The same tiny model through the Hugging Face Transformers v5 backend."""
    return build_config(RunSpec(variant="transformers_v5", preset="tiny"))


def qwen3_trn_tiny_nki_moe():
    """Tiny Qwen3 MoE with blockwise experts (PyTorch reference off Trainium)."""
    return build_config(RunSpec(variant="nki_moe", preset="tiny_moe"))
