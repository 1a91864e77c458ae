"""Presets: a shape, where its weights live, and how it is laid out over devices.

Two presets reproduce AWS's trn2.48xlarge runs at their real size (``4b`` and
``30b-a3b``: 64 ranks, one per logical NeuronCore); two are small enough to train on
one CPU core or one NeuronCore in seconds (``tiny`` and ``tiny_moe``); and ``0.6b`` is
Qwen3-0.6B with its real published weights on one laptop CPU rank (seconds per step,
about 10 GiB), so a learner with a network sees AWS's pretrained-vs-random experiment
with Qwen's own weights. Every number
here is a choice the notebooks explain (04 derives the layouts and the memory they
need). Cheap to import: plain data.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..errors import ConfigError
from .shapes import (
    QWEN3_0_6B,
    QWEN3_1_7B,
    QWEN3_4B_2507,
    QWEN3_8B,
    QWEN3_14B,
    QWEN3_30B_A3B,
    QWEN3_32B,
    QWEN3_235B_A22B,
    TINY,
    TINY_MOE,
    Qwen3Shape,
)


@dataclass(frozen=True)
class Layout:
    """How one run is spread over ranks: torchtitan's parallelism degrees.

    A preset names what it chooses (``tp``); a plan holds the whole layout over its
    world (:meth:`over`): FSDP takes the ranks that TP and the replicas leave, as
    torchtitan's ``data_parallel_shard_degree=-1`` does.
    """

    tp: int = 1  # tensor parallel: each matmul split over this many ranks
    fsdp: int = 0  # ranks one copy is sharded over (0: not laid over a world yet)
    dp_replicate: int = 1  # HSDP: whole sharded copies, one per node (1: plain FSDP)
    ep: int = 1  # expert parallel (MoE): experts split over this many ranks

    def over(self, world: int, dp_replicate: int = 1) -> Layout:
        """This layout on ``world`` ranks in ``dp_replicate`` replicas."""
        fsdp = max(world // (self.tp * dp_replicate), 1)
        return dataclasses.replace(self, fsdp=fsdp, dp_replicate=dp_replicate)

    @property
    def world(self) -> int:
        return self.tp * max(self.fsdp, 1) * self.dp_replicate

    def describe(self, world: int | None = None) -> str:
        """``TP 4 x FSDP 16``, ``HSDP 2 x (FSDP 64)``: the words the notebooks use."""
        laid = self if world is None else self.over(world, self.dp_replicate)
        fsdp = max(laid.fsdp, 1)
        inner = f"TP {laid.tp} x FSDP {fsdp}" if laid.tp > 1 else f"FSDP {fsdp}"
        if laid.ep > 1:
            inner += f", EP {laid.ep}"
        return inner if laid.dp_replicate == 1 else f"HSDP {laid.dp_replicate} x ({inner})"

    __str__ = describe


@dataclass(frozen=True)
class Preset:
    name: str
    shape: Qwen3Shape
    description: str
    hub_id: str | None = None  # published weights for init="pretrained"
    seq_len: int = 256
    world_size: int = 1  # ranks the layout below is meant for
    layout: Layout = field(default_factory=Layout)
    # torchtitan activation checkpointing: "none", "selective" or "full"
    activation_checkpoint: str = "none"
    # torchtitan's ChunkedLossWrapper chunks (1: plain cross-entropy on full logits).
    # Chunking bounds the [seq, vocab] logits in memory but adds a gradient reduction
    # of the 151,936-row output layer per chunk, so only the big MoE preset uses it.
    loss_chunks: int = 1
    moe_block_size: int = 0  # tokens per block of the blockwise MoE experts
    # dtype FSDP reduce-scatters gradients in (torchtitan's training.mixed_precision_reduce;
    # its default float32); used when the run computes in bfloat16
    reduce_dtype: str = "float32"
    corpus: str = "embedded"  # training text (see corpus.py); AWS's runs used C4
    lr: float = 8e-4  # peak learning rate (torchtitan's Qwen3 default; AWS used 3e-4)

    @property
    def full_size(self) -> bool:
        """Meant for a whole trn2.48xlarge, not one core."""
        return self.world_size > 1

    def replicas_across(self, nnodes: int) -> int:
        """Replicas of the model across nodes (HSDP), the trn2 rule for several nodes.

        A full-size preset's layout fills one trn2.48xlarge (TP inside a chip, FSDP over
        the node's 64 cores, on NeuronLink). Across nodes the link is EFA, several times
        slower, so each node keeps one whole sharded copy and the nodes only all-reduce
        gradients once a step: data_parallel_replicate = nnodes. Each rank then holds
        what it holds on one node. A small preset has no node-sized layout: its ranks
        shard one copy over the whole world (FSDP), exactly as the same ranks on one node
        would.
        """
        return nnodes if self.full_size and nnodes > 1 else 1


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            name="tiny",
            shape=TINY,
            description="dense, 4 layers, dim 128, the real 151,936-token vocabulary",
        ),
        Preset(
            name="tiny_moe",
            shape=TINY_MOE,
            description="MoE, 4 layers, 8 experts (top-2), dim 128, the real vocabulary",
            moe_block_size=64,
        ),
        Preset(
            name="0.6b",
            shape=QWEN3_0_6B,
            description="Qwen/Qwen3-0.6B, real weights on one laptop CPU rank (seq 256)",
            hub_id="Qwen/Qwen3-0.6B",
            lr=3e-4,  # AWS's, as for the other published weights
        ),
        Preset(
            name="4b",
            shape=QWEN3_4B_2507,
            description="Qwen/Qwen3-4B-Instruct-2507 on a trn2.48xlarge (64 logical cores)",
            hub_id="Qwen/Qwen3-4B-Instruct-2507",
            seq_len=4096,
            world_size=64,
            layout=Layout(tp=4),
            activation_checkpoint="selective",
            corpus="c4",
            lr=3e-4,
        ),
        Preset(
            name="30b-a3b",
            shape=QWEN3_30B_A3B,
            description="Qwen/Qwen3-30B-A3B (128 experts, top-8) on a trn2.48xlarge",
            hub_id="Qwen/Qwen3-30B-A3B",
            seq_len=4096,
            world_size=64,
            layout=Layout(tp=1),
            activation_checkpoint="full",
            loss_chunks=8,
            moe_block_size=256,
            # FSDP reduce-scatters gradients in bf16: with fp32 the block's gradients
            # cost 6 B per parameter before the reduction instead of 4, and the plan
            # needs 23.4 GiB per core, over the 21.6 (90% of 24) a plan may use; with
            # bf16, 21.1 (notebook 04 derives both). The sharded fp32 gradients and
            # AdamW state stay fp32.
            reduce_dtype="bfloat16",
            corpus="c4",
            lr=3e-4,
        ),
        # The rest of the published family (model/family.py), each with a starting layout
        # for one trn2.48xlarge that the memory model fits (a test checks it); `qwen3-trn
        # plan --model NAME --nnodes N` chooses a faster one, or one for several nodes
        # (235b-a22b needs at least 4: FSDP across nodes, --dp-replicate 1).
        *(
            Preset(
                name=name,
                shape=shape,
                description=f"Qwen/{hub} on a trn2.48xlarge (a starting layout; see plan)",
                hub_id=f"Qwen/{hub}",
                seq_len=4096,
                world_size=64,
                layout=Layout(tp=tp),
                activation_checkpoint=checkpointing,
                loss_chunks=8 if shape.is_moe else 1,
                moe_block_size=256 if shape.is_moe else 0,
                reduce_dtype="bfloat16" if shape.is_moe else "float32",
                corpus="c4",
                lr=3e-4,
            )
            for name, hub, shape, tp, checkpointing in (
                ("1.7b", "Qwen3-1.7B", QWEN3_1_7B, 1, "selective"),
                ("8b", "Qwen3-8B", QWEN3_8B, 4, "selective"),
                ("14b", "Qwen3-14B", QWEN3_14B, 4, "selective"),
                ("32b", "Qwen3-32B", QWEN3_32B, 4, "full"),
                ("235b-a22b", "Qwen3-235B-A22B", QWEN3_235B_A22B, 1, "full"),
            )
        ),
    )
}


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[name]
