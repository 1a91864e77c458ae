"""Which model a run trains and how it is laid out over the run's ranks.

The model's part of planning (training/plan_steps.py ``resolve_model`` asks these in
order): the preset (the named one, else the variant's default here, fitted to a
checkpoint's shape), its context, its layout over the ranks, the batches a layout can
accumulate and the MoE block. Each refuses a value that cannot work in one line naming
the fix. They take plain values, not a RunSpec, so the model layer stays below
training. Cheap to import: plain data.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..device import Device
from ..errors import ConfigError
from .presets import PRESETS, Layout, Preset
from .shapes import Qwen3Shape
from .variants import Variant


def resolve_preset(
    variant: Variant,
    name: str | None,
    init: str,
    device: Device,
    nproc: int,
    shape: Qwen3Shape | None,
) -> Preset:
    """The preset a run uses: the one named ``name``, else the variant's default here.

    On trn2 a run over the full-size preset's ranks (64: a whole trn2.48xlarge) takes
    that preset, the model AWS trained; fewer ranks, anywhere, the small preset that
    fits one core. An ``init`` folder of another ``shape`` keeps the default preset's
    layout, sequence length and checkpointing, and takes the folder's shape.
    """
    if name is not None:
        preset = PRESETS[name]
        if shape is not None and not shape.same_architecture(preset.shape):
            diffs = [d for d in preset.shape.differences(shape) if "max_seq_len" not in d]
            raise ConfigError(
                f"checkpoint {init} does not match preset {preset.name!r}: "
                f"{'; '.join(diffs)}; drop --preset to train with the checkpoint's own "
                "shape, or pick the matching checkpoint"
            )
        return preset
    full = PRESETS[variant.trn2_preset]
    preset = variant.default_preset(full_size=device.is_trn2 and nproc >= full.world_size)
    if shape is None or shape.same_architecture(preset.shape):
        return preset
    tp = preset.layout.tp
    if shape.n_heads % tp or shape.n_kv_heads % tp:
        tp = 1
    return dataclasses.replace(
        preset,
        name=f"{preset.name}, shape of {Path(init).name}",
        shape=shape,
        description=f"the shape of {init}",
        hub_id=None,
        layout=Layout(tp=tp),
        seq_len=min(preset.seq_len, shape.max_seq_len),
    )


def check_seq_len(seq_len: int, shape: Qwen3Shape, source: str) -> None:
    """A sequence within the model's context (``source``: where the shape comes from)."""
    if seq_len > shape.max_seq_len:
        raise ConfigError(
            f"seq_len {seq_len} is beyond the model's context of {shape.max_seq_len} "
            f"tokens ({source}); use a shorter --seq-len"
        )


def resolve_layout(
    preset: Preset,
    shape: Qwen3Shape,
    source: str,
    world: int,
    nnodes: int,
    *,
    tp: int | None,
    dp_replicate: int | None,
) -> Layout:
    """The preset's layout over ``world`` ranks on ``nnodes`` nodes: the replicas (the
    ones asked for, else HSDP across nodes), then the tensor-parallel degree (the one
    asked for, else the preset's where it divides a replica), each dividing what it
    splits."""
    replicas = dp_replicate or preset.replicas_across(nnodes)
    if world % replicas:
        raise ConfigError(
            f"dp_replicate {replicas} must divide the {world} ranks (each replica holds one "
            "sharded copy of the model); use a divisor of the ranks, e.g. the node count"
        )
    tp = tp or (preset.layout.tp if (world // replicas) % preset.layout.tp == 0 else 1)
    if (world // replicas) % tp:
        raise ConfigError(
            f"tensor parallel degree {tp} must divide the {world // replicas} ranks of a "
            "replica; use a divisor (1, 2 or 4 on trn2: one chip's logical cores)"
        )
    if shape.n_heads % tp or shape.n_kv_heads % tp:
        raise ConfigError(
            f"tensor parallel degree {tp} must divide the {shape.n_heads} query and "
            f"{shape.n_kv_heads} key/value heads ({source})"
        )
    return dataclasses.replace(preset.layout, tp=tp).over(world, replicas)


def check_global_batch(layout: Layout, global_batch: int | None, local_batch: int) -> None:
    """A global batch of whole microbatches of every data-parallel rank (gradient
    accumulation runs whole microbatches); None: no accumulation."""
    if global_batch is not None:
        per_microbatch = local_batch * layout.world // layout.tp
        if global_batch % per_microbatch:
            raise ConfigError(
                f"global_batch_size {global_batch} must be a multiple of local "
                f"batch x data-parallel ranks ({per_microbatch}): gradient accumulation "
                "runs whole microbatches"
            )


def moe_block_size(preset: Preset, shape: Qwen3Shape, moe_impl: str, device: Device) -> int:
    """Tokens per block of the blockwise MoE experts (0: not blockwise)."""
    if shape.is_moe and moe_impl == "blockwise":
        return preset.moe_block_size or (256 if device.is_trn2 else 64)
    return 0
