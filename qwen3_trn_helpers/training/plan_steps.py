"""The steps of ``plan_run`` (training/plan.py) at this layer, in its order: each
resolves one part of a spec against a machine, or refuses it in one line that names the
fix.

plan_run reads top-down: where the ranks run (:func:`launch_world`; the device, and
the cores a ``--neuron-cores`` slice gives them, from the layers below), what a run of
them needs (:func:`check_saving`, :func:`check_launch`, :func:`resolve_attention`),
which model it trains and how it is laid out (:func:`resolve_model`, which asks the
model layer: model/choice.py), then what it reads, how this machine computes and with
which tokenizer (data/corpus.py ``check_corpus``, device.py ``mixed_precision_on``,
assets.py ``run_tokenizer``).

Cheap to import: no torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from ..device import Device
from ..errors import ConfigError
from ..model import choice
from ..model.presets import Layout, Preset
from ..model.shapes import Qwen3Shape
from ..model.variants import Variant
from .ranks import rank_place
from .spec import RunSpec


@dataclass(frozen=True)
class Init:
    """Where a run's first weights come from.

    ``random``; ``published``: the preset's published weights (the hub checkpoint on
    trn2, a locally pretrained one for the small presets), turned into a folder where
    they are used (``runs/weights.with_init_weights``: the plan then holds it);
    ``folder``: a Hugging Face folder.
    """

    kind: str  # "random" | "published" | "folder"
    folder: Path | None = None  # a "folder" init's; published weights' once fetched
    hub_id: str | None = None  # "published": the hub checkpoint (None: made locally)

    @property
    def pending(self) -> bool:
        """Published weights not yet turned into a folder."""
        return self.kind == "published" and self.folder is None

    def __str__(self) -> str:
        return {"random": "random", "published": "pretrained"}.get(self.kind, str(self.folder))


@dataclass(frozen=True)
class Model:
    """The model a run trains, and how: its first weights, preset, shape, sequence
    length, layout over the ranks and MoE block."""

    init: Init
    preset: Preset
    shape: Qwen3Shape
    source: str  # where the shape comes from, for messages ("preset 'tiny'", "checkpoint DIR")
    seq_len: int
    layout: Layout
    moe_block_size: int  # tokens per block of the blockwise MoE experts (0: not blockwise)


def launch_world(spec: RunSpec, here: bool) -> tuple[int, int, tuple[int, int] | None]:
    """(ranks per node, nodes, torchrun's world): a rank torchrun started takes its world
    from torchrun (then the third), not from the spec."""
    launched = rank_place().torchrun_world if here else None  # a rank torchrun started
    nproc, nnodes = launched or (spec.nproc, spec.nnodes)
    return nproc, nnodes, launched


def check_saving(spec: RunSpec, device: Device) -> None:
    """A checkpoint staging the device cannot give."""
    if spec.checkpoint_async == "async_with_pinned_mem" and not device.is_cuda:
        raise ConfigError(
            "--checkpoint-async async_with_pinned_mem stages checkpoints in CUDA's pinned "
            f"memory, which a {device.type} run has none of: pass --checkpoint-async async"
        )


def check_launch(
    spec: RunSpec,
    device: Device,
    nproc: int,
    nnodes: int,
    *,
    here: bool,
    launched: tuple[int, int] | None,
) -> str | None:
    """What a launch needs, checked in planning (one line each, before anything
    starts): a folder for several ranks, a rendezvous endpoint for several nodes; and
    the NeuronCores the ranks take, which it returns: ``--neuron-cores`` (checked where
    the device is resolved: trn2.slice_problem), else a class's share of this trn2 (its
    first ``nproc`` cores)."""
    if here and nproc * nnodes > 1 and spec.out is None:
        raise ConfigError(
            f"a {nproc * nnodes}-rank run needs --out: every rank must write to one folder"
        )
    if here and launched is None and nnodes > 1 and spec.rdzv_endpoint is None:
        raise ConfigError(
            f"a job on {nnodes} nodes needs --rdzv-endpoint HOST:PORT, the same on "
            "every node: an address of one of them (the first) that the others reach"
        )
    if here and device.is_trn2:  # a class's share of this trn2: its first nproc cores
        from .class_share import with_class_slice

        return with_class_slice(spec.replace(nproc=nproc)).neuron_cores
    return spec.neuron_cores


def resolve_attention(spec: RunSpec, device: Device) -> str:
    """The attention a run trains with (``auto``: the device's default), where it runs."""
    attention = device.default_attention if spec.attention == "auto" else spec.attention
    if attention == "flex" and not device.is_cuda:
        raise ConfigError(
            f"attention 'flex' (FlexAttention) trains on CUDA only, not {device.type!r}; use "
            "--attention document or causal"
        )
    if attention == "document" and device.is_trn2 and spec.compile:
        # compiled document attention builds its mask from the document boundaries,
        # whose count differs per batch: a symbolic size (or a recompile per count),
        # and torch-neuronx's backend refuses every graph holding one ("torch-neuronx
        # requires static shapes": its preprocess_graph; AWS's torch.compile reference
        # lists dynamic shapes as unsupported)
        raise ConfigError(
            "--compile with --attention document cannot compile on neuron (the document "
            "count is a dynamic shape; torch-neuronx requires static shapes): use "
            "--attention causal (the trn2 default) or train document attention eagerly"
        )
    return attention


def resolve_model(
    spec: RunSpec,
    variant: Variant,
    device: Device,
    world: tuple[int, int],
    shape: Qwen3Shape | None,
) -> Model:
    """The model a run trains on ``world`` (ranks per node, nodes), as the model layer
    decides it (model/choice.py): the first weights, the preset, the shape (``shape``:
    another one for the preset's layout, checked as a checkpoint's shape is), the
    sequence length, the layout over the ranks and the MoE block."""
    from ..model.hf_checkpoint import check_hf_checkpoint

    folder_shape = None
    if spec.init == "random":
        init = Init("random")
    elif spec.init == "pretrained":
        init = Init("published")  # its preset, and so its hub id, below
    else:
        init = Init("folder", folder=Path(spec.init).expanduser().absolute())
        folder_shape = check_hf_checkpoint(init.folder)
    nproc, nnodes = world
    preset = choice.resolve_preset(variant, spec.preset, spec.init, device, nproc, folder_shape)
    if init.kind == "published":
        init = Init("published", hub_id=preset.hub_id)
    if shape is not None:
        if folder_shape is not None:
            raise ConfigError(
                f"a run from checkpoint {init.folder} trains the checkpoint's shape; plan it "
                "without another shape"
            )
        preset = dataclasses.replace(preset, shape=shape)
    shape = folder_shape or preset.shape
    source = f"checkpoint {init.folder}" if folder_shape else f"preset {preset.name!r}"
    variant.check_shape(shape, source)
    seq_len = spec.seq_len or preset.seq_len
    choice.check_seq_len(seq_len, shape, source)
    layout = choice.resolve_layout(
        preset, shape, source, nproc * nnodes, nnodes, tp=spec.tp, dp_replicate=spec.dp_replicate
    )
    choice.check_global_batch(layout, spec.global_batch_size, spec.local_batch_size)
    moe_block = choice.moe_block_size(preset, shape, spec.moe_impl, device)
    return Model(init, preset, shape, source, seq_len, layout, moe_block)
