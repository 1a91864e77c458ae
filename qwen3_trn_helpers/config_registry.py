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
    """``Trainer.Config`` for a validated spec, with the CPU patches applied if needed."""
    from .assets import resolve_tokenizer
    from .corpus import dataset_args
    from .device import resolve_device
    from .train import trainer_config

    spec.validate()
    device_type = resolve_device(spec.device)
    if device_type == "cpu":
        from .patches import apply_cpu_patches

        apply_cpu_patches()
    return trainer_config(
        spec,
        Path(dump_folder),
        device_type,
        resolve_tokenizer(spec.tokenizer),
        dataset_args(spec.corpus),
    )


def qwen3_trn_tiny_native():
    """Tiny native Qwen3 (real vocab), 10 steps at local batch 1: the CPU walkthrough."""
    return build_config(RunSpec(variant="native", preset="tiny"))
