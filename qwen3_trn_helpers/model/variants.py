"""The three ways this course runs Qwen3 in torchtitan: one registry, one object each.

A :class:`Variant` says what it is, which presets it trains by default (a small one for
a single core, the real model for a whole trn2.48xlarge), whether it is dense or MoE,
how to build its torchtitan model spec, and how to get logits from its model for the
parity check. Which trainer runs it and which compatibility patches its model needs
are training code, above this layer: ``training/trainer.py`` maps each variant class to
them (``VARIANT_PARTS``). Nothing else in the package compares variant names
(tests/core/project/test_architecture.py).

Importing this module is cheap; torchtitan and transformers load when a method needs
them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from .presets import PRESETS, Preset
from .shapes import Qwen3Shape, native_model_config


@dataclass(frozen=True)
class Variant:
    name: str
    summary: str
    moe: bool
    small_preset: str  # what one rank trains (CPU, a notebook, one NeuronCore)
    trn2_preset: str  # the real model on a whole trn2.48xlarge
    off_trainium: str
    on_trainium: str

    def default_preset(self, full_size: bool) -> Preset:
        return PRESETS[self.trn2_preset if full_size else self.small_preset]

    def check_shape(self, shape: Qwen3Shape, source: str) -> None:
        """A dense checkpoint cannot run as an MoE variant, nor the other way round."""
        if self.moe and not shape.is_moe:
            raise ConfigError(
                f"variant {self.name!r} needs a Qwen3 MoE model, but {source} is dense; use "
                "--variant native or transformers_v5, or an MoE checkpoint (Qwen3-30B-A3B)"
            )
        if not self.moe and shape.is_moe:
            raise ConfigError(
                f"variant {self.name!r} is for dense Qwen3, but {source} is an MoE model "
                f"({shape.n_experts} experts); use --variant nki_moe"
            )

    def model_spec(self, shape: Qwen3Shape, flavor: str, attention: str):
        """torchtitan's ``ModelSpec`` for ``shape``, assembled as its own registries do."""
        raise NotImplementedError

    def overrides(self, attention: str, moe_block_size: int, moe_impl: str) -> list[Any]:
        """torchtitan ``--override.imports`` entries that swap in our modules."""
        return []

    def loss_config(self, shape: Qwen3Shape, loss_chunks: int):
        from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss

        ce = CrossEntropyLoss.Config(global_vocab_size=shape.vocab_size)
        if loss_chunks <= 1:
            return ce  # the model applies its output layer; plain cross-entropy
        return ChunkedLossWrapper.Config(num_chunks=loss_chunks, loss_fn=ce)

    def logits(self, model, tokens):
        """Logits [B, L, V] of a trainer's model (float32 weights) for token ids [B, L]."""
        raise NotImplementedError

    def parameter_count(self, shape: Qwen3Shape) -> int:
        """Parameters of the model this variant builds, counted on the meta device."""
        import torch

        with torch.device("meta"):
            model = self.meta_model(shape)
        return sum(p.numel() for p in model.parameters())  # a tied pair counts once

    def meta_model(self, shape: Qwen3Shape):
        return native_model_config(shape).build()


class TorchtitanQwen3(Variant):
    """torchtitan.models.qwen3: its model, parallelisation and HF state-dict adapter."""

    def model_spec(self, shape: Qwen3Shape, flavor: str, attention: str):
        from torchtitan.components.optimizer import register_moe_load_balancing_hook
        from torchtitan.distributed.pipeline_parallel import pipeline_llm
        from torchtitan.models.qwen3 import Qwen3StateDictAdapter, parallelize_qwen3
        from torchtitan.protocols.model_spec import ModelSpec

        return ModelSpec(
            name="qwen3",
            flavor=flavor,
            model=native_model_config(shape),
            parallelize_fn=parallelize_qwen3,
            pipelining_fn=pipeline_llm,
            post_optimizer_build_fn=register_moe_load_balancing_hook,
            state_dict_adapter=Qwen3StateDictAdapter,
        )

    def overrides(self, attention: str, moe_block_size: int, moe_impl: str) -> list[Any]:
        from .attention import OVERRIDES

        return [OVERRIDES[attention]] if attention in OVERRIDES else []

    def logits(self, model, tokens):
        import torch

        positions = torch.arange(tokens.shape[1], device=tokens.device).expand_as(tokens)
        masks = None
        if model.config.first_attention is not None:
            inner = model.config.first_attention.inner_attention
            from torchtitan.models.common.attention import FlexAttention, VarlenAttention

            if isinstance(inner, FlexAttention.Config | VarlenAttention.Config):
                masks = model.get_attention_masks(positions=positions)
        model._skip_lm_head = False  # a chunked loss would have fused lm_head into itself
        return model(tokens, attention_masks=masks, positions=positions)


class BlockwiseMoE(TorchtitanQwen3):
    """torchtitan's Qwen3 MoE with the routed experts computed blockwise."""

    def overrides(self, attention: str, moe_block_size: int, moe_impl: str) -> list[Any]:
        entries = super().overrides(attention, moe_block_size, moe_impl)
        if moe_impl == "blockwise":
            from .moe_blockwise import OVERRIDE

            entries.append((OVERRIDE, {"block_size": moe_block_size, "backend": "auto"}))
        return entries


class TransformersV5(Variant):
    """The Hugging Face Qwen3 module inside torchtitan's transformers backend."""

    def model_spec(self, shape: Qwen3Shape, flavor: str, attention: str):
        from torchtitan.components.optimizer import register_moe_load_balancing_hook
        from torchtitan.experiments.transformers_modeling_backend import (
            HFTransformerModel,
            HFTransformerStateDictAdapter,
            TitanModelConfig,
            parallelize_hf_transformers,
            pipeline_hf_transformers,
        )
        from torchtitan.protocols.model_spec import ModelSpec

        # Every number comes from the config.json the trainer config names (hf_model).
        # Attention is the backend's own switch: causal, or causal within each packed
        # document ("block_causal"); off CUDA a named patch runs it through SDPA.
        mask = "block_causal" if attention == "document" else "causal"
        return ModelSpec(
            name="transformers_modeling_backend",
            flavor=flavor,
            model=HFTransformerModel.Config(model_config=TitanModelConfig(attn_mask_type=mask)),
            parallelize_fn=parallelize_hf_transformers,
            pipelining_fn=pipeline_hf_transformers,
            post_optimizer_build_fn=register_moe_load_balancing_hook,
            state_dict_adapter=HFTransformerStateDictAdapter,
        )

    def loss_config(self, shape: Qwen3Shape, loss_chunks: int):
        from torchtitan.components.loss import CrossEntropyLoss

        # as torchtitan's own transformers-backend registry: the backend fills in the
        # vocabulary size from config.json
        return CrossEntropyLoss.Config()

    def logits(self, model, tokens):
        import torch

        positions = torch.arange(tokens.shape[1], device=tokens.device).expand_as(tokens)
        model._skip_lm_head = False
        return model(tokens, positions=positions)

    def meta_model(self, shape: Qwen3Shape):
        from transformers import Qwen3ForCausalLM

        return Qwen3ForCausalLM(shape.hf_config())


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        TorchtitanQwen3(
            name="native",
            summary="torchtitan's own Qwen3 (torchtitan.models.qwen3)",
            moe=False,
            small_preset="tiny",
            trn2_preset="4b",
            off_trainium="torchtitan Qwen3; attention through SDPA (document-masked)",
            on_trainium="the same model on `neuron`, plain causal SDPA; TP/FSDP by torchtitan",
        ),
        TransformersV5(
            name="transformers_v5",
            summary="the Hugging Face Transformers v5 Qwen3 inside torchtitan "
            "(experiments.transformers_modeling_backend)",
            moe=False,
            small_preset="tiny",
            trn2_preset="4b",
            off_trainium="HF Qwen3 module in torchtitan; HF's SDPA attention",
            on_trainium="the same HF module on `neuron`; torchtitan applies FSDP/TP to it",
        ),
        BlockwiseMoE(
            name="nki_moe",
            summary="Qwen3 MoE with blockwise expert matmuls (NKI kernels on Trainium, "
            "their PyTorch reference elsewhere)",
            moe=True,
            small_preset="tiny_moe",
            trn2_preset="30b-a3b",
            off_trainium="torchtitan Qwen3 MoE; experts: blockwise PyTorch reference",
            on_trainium="experts on nki-library kernels (moe_cte forward, blockwise_mm_bwd "
            "backward) where the shape meets their constraints",
        ),
    )
}


def get_variant(name: str) -> Variant:
    if name not in VARIANTS:
        raise ConfigError(f"unknown variant {name!r}; choose one of {', '.join(VARIANTS)}")
    return VARIANTS[name]


def torchtitan_variant(shape: Qwen3Shape) -> Variant:
    """The variant that trains ``shape`` with torchtitan's own Qwen3 model (dense or MoE).

    What makes a checkpoint every variant of that architecture can load (the local
    "published" weights): torchtitan's model and its Hugging Face state-dict adapter.
    """
    fitting = [
        v for v in VARIANTS.values() if isinstance(v, TorchtitanQwen3) and v.moe == shape.is_moe
    ]
    if len(fitting) != 1:
        kind = "MoE" if shape.is_moe else "dense"
        found = [v.name for v in fitting]
        raise ConfigError(f"expected one torchtitan-model variant for a {kind} shape: {found}")
    return fitting[0]


def variant_table() -> list[dict[str, object]]:
    """One row per variant: its small and trn2 presets, sizes, and where things run."""
    rows = []
    for v in VARIANTS.values():
        small, trn2 = PRESETS[v.small_preset], PRESETS[v.trn2_preset]
        rows.append(
            {
                "variant": v.name,
                "what": v.summary,
                "one-core preset": small.name,
                "params": v.parameter_count(small.shape),
                "trn2 preset": trn2.name,
                "trn2 params": v.parameter_count(trn2.shape),
                "experts (top-k)": (
                    f"{trn2.shape.n_experts} ({trn2.shape.top_k})" if v.moe else "-"
                ),
                "trn2 layout": trn2.layout.describe(trn2.world_size),
                "off Trainium": v.off_trainium,
                "on Trainium": v.on_trainium,
            }
        )
    return rows
