"""The transformers backend's trainer under our run scope, for the transformers_v5 variant.

A module of its own so that only a process training that variant imports the backend
and, through it, transformers (about 1 s of a process's start on a 2-core Zen 4):
training/trainer.py names it in ``VARIANT_PARTS`` and imports it when asked for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..stack import collector_paused
from .plan import Plan
from .run_scope import RunOptions, _RunScope

with collector_paused():  # transformers' modules stay: no full collections meanwhile
    from torchtitan.experiments.transformers_modeling_backend.configs import (
        TransformersBackendConfig,
    )
    from torchtitan.experiments.transformers_modeling_backend.trainer import (
        HFTransformerTrainer,
    )


class Qwen3TrnHFTrainer(_RunScope, HFTransformerTrainer):
    """The transformers backend's trainer, for the transformers_v5 variant."""

    @dataclass(kw_only=True, slots=True)
    class Config(TransformersBackendConfig):
        qwen3_trn: RunOptions = field(default_factory=RunOptions)

    @classmethod
    def backend_fields(cls, plan: Plan) -> dict[str, Any]:
        """``hf_model``: the backend builds its model from a config.json, the initial
        checkpoint's, else one written for the plan's shape."""
        from ..model.hf_checkpoint import cached_hf_config

        return {"hf_model": str(plan.init_dir or cached_hf_config(plan.shape))}
