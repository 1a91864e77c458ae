"""``plan_run``: a RunSpec resolved against a machine, once, into typed parts.

A :class:`Plan` holds objects, not names: the :class:`~..model.variants.Variant`, the
:class:`~..model.presets.Preset` and its shape, the whole
:class:`~..model.presets.Layout` over the run's ranks, the device, the :class:`Init`
and the sequence length, attention, corpus and tokenizer a run uses, so nothing
downstream looks a name up again. Planning reads files (a checkpoint's config, the
tokenizer) but never trains, never writes a run folder and never changes the spec.

Every check that can refuse a run before anything starts is a named step of plan_run,
asked top-down, each in the layer that knows its part: where the ranks run (the device,
a --neuron-cores slice: trn2.slice_problem), what the run needs and which model it
trains (training/plan_steps.py, which asks the model layer: model/choice.py), what it
reads (data/corpus.check_corpus) and with which tokenizer (assets.run_tokenizer). The
one memory rule lives here (:func:`memory_fit_problem`: a NeuronCore's HBM, checked
when a trn2 run is planned, and a CPU's free memory, checked where a run starts on it).

Cheap to import: no torch.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

from ..assets import run_tokenizer
from ..data.corpus import check_corpus
from ..device import Device, as_device
from ..errors import ConfigError
from ..model.presets import PRESETS, Layout, Preset
from ..model.shapes import Qwen3Shape
from ..model.variants import VARIANTS, Variant
from ..trn2 import RUN_HBM_SHARE, slice_problem
from .plan_steps import (
    Init,
    check_launch,
    check_saving,
    launch_world,
    resolve_attention,
    resolve_model,
)
from .spec import RunSpec
from .trn2_choices import default_spmd_backend, plan_lines


@dataclass(frozen=True)
class Plan:
    """A spec resolved against a machine: device, model, layout, data. Nothing built."""

    spec: RunSpec  # as given (run.json records it; the nodes compare its flags)
    variant: Variant
    device: Device
    preset: Preset
    shape: Qwen3Shape
    layout: Layout  # over the whole world: tp x fsdp x dp_replicate
    nproc: int  # ranks per node (a launched rank: torchrun's LOCAL_WORLD_SIZE)
    nnodes: int
    init: Init
    seq_len: int
    attention: str
    corpus: str
    corpus_streams: bool  # a hub dataset, streamed (else the embedded text or local files)
    lr: float
    moe_block_size: int
    tokenizer_dir: Path | None  # None only in plans resolved for another machine
    neuron_cores: str | None  # the NeuronCores the ranks confine to (a class share's too)
    mixed_precision: str  # the spec's, but float32 on a CPU without bf16 matrix products
    # (the spec's other training values, steps to export_hf, are read from the spec)

    @property
    def spmd_backend(self) -> str:
        """The spec's SPMD backend; ``auto``: what AWS's TorchTitan pages document on trn2,
        upstream's default elsewhere (training/trn2_choices.py)."""
        if self.spec.spmd_backend == "auto":
            return default_spmd_backend(self.device, self.variant)
        return self.spec.spmd_backend

    @property
    def warmup_steps(self) -> int:
        """The spec's warm-up, at most its ``steps``."""
        return min(self.spec.warmup_steps, self.spec.steps)

    @property
    def device_type(self) -> str:
        """The device's name (what run.json and the tables show)."""
        return self.device.type

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes

    @property
    def tp(self) -> int:
        return self.layout.tp

    @property
    def fsdp(self) -> int:
        return self.layout.fsdp

    @property
    def dp_replicate(self) -> int:
        return self.layout.dp_replicate

    @property
    def init_dir(self) -> Path | None:
        """The folder the first weights load from: a ``folder`` init's, or the one
        published weights were turned into (:meth:`with_init_folder`); None: random."""
        return self.init.folder

    def with_init_folder(self, folder: Path | None) -> Plan:
        """This plan with its published weights turned into ``folder`` (where a run
        uses them: ``runs/weights.with_init_weights``); the trainer then loads them
        from the plan alone."""
        if folder is None or self.init.folder == Path(folder):
            return self
        return dataclasses.replace(self, init=dataclasses.replace(self.init, folder=Path(folder)))

    @property
    def layout_reason(self) -> str:
        if self.spec.tp is not None or self.spec.dp_replicate is not None:
            return "the layout asked for (--tp / --dp-replicate, e.g. qwen3-trn plan's choice)"
        return layout_reason(self.preset, self.nnodes)

    @property
    def activation_checkpoint(self) -> str:
        return self.spec.activation_checkpoint or self.preset.activation_checkpoint

    @property
    def loss_chunks(self) -> int:
        return self.preset.loss_chunks

    @property
    def reduce_dtype(self) -> str:
        """The gradient reduce-scatter dtype: the preset's, fp32 when the run is fp32."""
        return self.preset.reduce_dtype if self.mixed_precision == "bfloat16" else "float32"

    @property
    def data_parallel(self) -> str:
        """``simple_fsdp`` for a compiled native run on neuron, else ``fsdp2``.

        AWS's TorchTitan-on-Neuron best practices: "With TorchTitan, use SimpleFSDP for
        torch.compile work" (shared/RESEARCH_TRN2.md). Only the layout the CPU comparison
        covers (tests/e2e/test_simple_fsdp.py: FSDP alone, no tensor parallel, no HSDP
        across nodes): with TP, graph_trainer parallelises with its own
        ``spmd_backend`` (``partial_dtensor``), not the one the run was given.
        """
        from ..model.variants import TorchtitanQwen3

        native = type(self.variant) is TorchtitanQwen3  # (not its MoE subclass)
        compiled_on_neuron = self.spec.compile and self.device.is_trn2
        fsdp_only = self.tp == 1 and self.dp_replicate == 1
        return "simple_fsdp" if native and compiled_on_neuron and fsdp_only else "fsdp2"

    @property
    def needs_hub(self) -> bool:
        """Does this run download from the Hugging Face hub (weights or text)?"""
        return self.corpus_streams or (self.init.pending and self.init.hub_id is not None)

    def with_layout(self, **degrees: int) -> Plan:
        """This plan with other parallel degrees (``plan.with_layout(tp=8)``): a what-if
        for the memory lessons, the world laid out again (FSDP takes what is left).

        A layout no run could train is refused here, as planning refuses it: the memory
        arithmetic of a TP that does not divide the heads would be numbers without a
        warning (notebook 04's exercise 1 asks for TP 16 on a model of 8 key/value heads).
        """
        call = f"with_layout({', '.join(f'{k}={v!r}' for k, v in degrees.items())})"
        unknown = sorted(set(degrees) - {"tp", "dp_replicate"})
        if unknown:
            raise ConfigError(f"{call}: {', '.join(unknown)} is not a degree it sets; pass tp "
                              "or dp_replicate (FSDP takes the ranks they leave)")  # fmt: skip
        for name, value in degrees.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{call}: {name} must be a positive integer")
        layout = dataclasses.replace(self.layout, **degrees)
        world, replicas, tp = self.world_size, layout.dp_replicate, layout.tp
        if world % replicas:
            raise ConfigError(f"{call}: dp_replicate {replicas} must divide the plan's {world} "
                              "ranks")  # fmt: skip
        heads = math.gcd(self.shape.n_heads, self.shape.n_kv_heads)
        fitting = [t for t in range(1, heads + 1) if heads % t == 0 and world // replicas % t == 0]
        if tp not in fitting:
            raise ConfigError(
                f"{call}: tp {tp} must divide the {world // replicas} ranks of a replica and "
                f"the model's {self.shape.n_heads} query and {self.shape.n_kv_heads} key/value "
                f"heads; use tp={', '.join(map(str, fitting))}"
            )
        return dataclasses.replace(self, layout=layout.over(world, replicas))

    def memory(self, lnc: int | None = None):
        """Per-rank memory estimate of this plan (training/memory.py), at ``lnc``
        (default: this machine's, else trn2's 2)."""
        from ..trn2 import Topology, lnc_from_env
        from .memory import estimate_memory

        topology = Topology(lnc or lnc_from_env())
        on_neuron = self.device.is_trn2
        return estimate_memory(
            self.shape,
            world=self.world_size // self.dp_replicate,  # each replica shards one copy
            tp=self.tp,
            seq_len=self.seq_len,
            local_batch=self.spec.local_batch_size,
            activation_checkpoint=self.activation_checkpoint,
            loss_chunks=self.loss_chunks,
            scores_materialised=on_neuron and self.attention == "document",
            moe_kernel_copies=on_neuron and self.moe_block_size > 0,
            moe_block_size=self.moe_block_size,
            reduce_bytes=2 if self.reduce_dtype == "bfloat16" else 4,
            runtime_gib=topology.runtime_reserved_gib if on_neuron else 0.0,
            hbm_gib=topology.hbm_gib_per_core,
        )

    def summary(self) -> dict[str, object]:
        """The resolved settings, as a table row (notebooks and run.json show it)."""
        return {
            "variant": self.variant.name,
            "preset": self.preset.name,
            "device": self.device_type,
            "ranks": self.world_size,
            "nodes": self.nnodes,
            "layout": str(self.layout),
            "seq len": self.seq_len,
            "local batch": self.spec.local_batch_size,
            "activation checkpointing": self.activation_checkpoint,
            "attention": self.attention,
            "loss chunks": self.loss_chunks,
            "corpus": self.corpus,
            "init": self.spec.init,
            "steps": self.spec.steps,
            "lr": self.lr,
            # only where it differs from what was asked (a CPU without bf16 matmul)
            **(
                {"mixed precision": self.mixed_precision}
                if self.mixed_precision != self.spec.mixed_precision
                else {}
            ),
            **plan_lines(self),  # trn2: the choices AWS's documents decide
        }


def layout_reason(preset: Preset, nnodes: int) -> str:
    """One sentence: why this layout on this many nodes (the plan's "why")."""
    if preset.replicas_across(nnodes) == 1:
        if nnodes == 1:
            return "one node: the preset's own layout"
        return (
            f"{preset.name} has no per-node layout: FSDP over all ranks, as on one node "
            "with as many ranks"
        )
    why = (
        f"HSDP: {nnodes} replicas across nodes (gradients all-reduced over EFA once a "
        "step), the one-node layout inside each node (NeuronLink); each rank holds what "
        "it holds on one node"
    )
    if preset.shape.is_moe:
        why += (
            "; not expert parallelism: torchtitan 0.3.0's EP dispatches tokens with "
            "all-to-all in every MoE layer (over EFA, across nodes) and runs its own "
            "grouped experts, not the NKI blockwise kernel, and FSDP over one node "
            "already fits the 128 experts"
        )
    return why


def on_trn2(spec: RunSpec) -> RunSpec:
    """``spec`` as a trn2.48xlarge runs it: the named preset (else the variant's
    full-size one) on that preset's ranks per node, unless ``nproc`` names them.

    The one statement of "which preset on how many ranks" for trn2 (reproduce, the dry
    run and the scaling lessons all ask it here).
    """
    preset = PRESETS[spec.preset or VARIANTS[spec.variant].trn2_preset]
    return spec.replace(
        preset=preset.name, nproc=spec.nproc if spec.nproc > 1 else preset.world_size
    )


@dataclass(frozen=True)
class MemoryFit:
    """What the one memory rule says of a plan on one machine."""

    problem: str | None  # the refusal, with the numbers and the fix (None: it fits)
    warning: str | None  # it fits a NeuronCore with under 1 GiB to spare (None: room enough)


def memory_fit(plan: Plan, free_gib: float | None = None) -> MemoryFit:
    """The one memory rule: what a plan's ranks on one machine need against what it has.

    A NeuronCore may fill ``trn2.RUN_HBM_SHARE`` of its HBM with what the estimate counts;
    a CPU's ranks on this machine share its free memory (``free_gib``: None where
    unknown).
    """
    memory = plan.memory()
    if plan.device.is_trn2:
        if memory.fits:
            return MemoryFit(None, memory.slack_warning())
        preset = plan.preset
        if preset.world_size > plan.world_size // plan.dp_replicate:
            fix = (
                f"launch it on {preset.world_size} ranks (--nproc {preset.world_size}, as "
                "reproduce does), or train a smaller preset in this process"
            )
        else:
            fix = (
                "shorten --seq-len or use activation checkpointing, or let `qwen3-trn plan "
                f"--model {preset.name} --nnodes N` find a layout that fits"
            )
        return MemoryFit(
            f"preset {preset.name!r} on {plan.world_size} rank(s) needs about "
            f"{memory.total_gib:.1f} GiB per NeuronCore, more than the "
            f"{memory.usable_gib:.1f} GiB a plan may use ({RUN_HBM_SHARE:.0%} of its "
            f"{memory.hbm_gib:.0f} GiB): {fix}",
            None,
        )
    if not plan.device.is_cpu or free_gib is None or memory.total_gib * plan.nproc <= free_gib:
        return MemoryFit(None, None)
    need = memory.total_gib * plan.nproc
    return MemoryFit(
        f"preset {plan.preset.name!r} needs about {need:.1f} GiB on this machine "
        f"({plan.nproc} rank(s) x {memory.total_gib:.1f} GiB: weights, gradients, AdamW "
        f"state, activations), more than the {free_gib:.1f} GiB free; train a small preset "
        "(--preset tiny), or pass --skip-memory-check to try anyway",
        None,
    )


def memory_fit_problem(plan: Plan, free_gib: float | None = None) -> str | None:
    """:func:`memory_fit`'s refusal, with the numbers and the fix, or None."""
    return memory_fit(plan, free_gib).problem


def available_memory_gib() -> float | None:
    """This machine's free memory (Linux's MemAvailable), or None where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


def plan_run(
    spec: RunSpec, *, device_type: Device | str | None = None, shape: Qwen3Shape | None = None
) -> Plan:
    """Resolve and check every input; raises a Qwen3TrnError naming the fix.

    ``device_type`` resolves the plan for another machine: ``plan_run(spec,
    device_type="neuron")`` on a laptop shows what a trn2 would run (preset, layout,
    memory) without touching any device; its tokenizer is not resolved and this
    machine's free memory is not asked. ``shape`` builds the preset's layout with
    another model shape (fewer layers for a quick dry run, other widths in a lesson);
    it is checked as a checkpoint's shape is. A rank torchrun started takes its world
    (ranks per node, nodes) from torchrun, not from the spec.

    Planned here, a run that will launch is checked as the launch would (a rendezvous
    endpoint for several nodes; the NeuronCores of a class's share, which the plan
    holds), so a bad value fails in one line before anything starts.
    """
    from ..device import mixed_precision_on, resolve

    here = device_type is None
    nproc, nnodes, launched = launch_world(spec, here)
    # where: this machine's device (or another's), and the cores a slice gives the ranks
    device = resolve(spec.device) if here else as_device(device_type)
    # how this machine computes (another machine's precision is its business)
    mixed_precision = (
        mixed_precision_on(device, spec.mixed_precision) if here else spec.mixed_precision
    )
    if spec.neuron_cores is not None:
        problem = slice_problem(
            spec.neuron_cores, nproc, on_trn2=device.is_trn2, device_type=device.type
        )
        if problem:
            raise ConfigError(problem)
    # what the run needs, then which model it trains (the model layer decides)
    check_saving(spec, device)
    neuron_cores = check_launch(spec, device, nproc, nnodes, here=here, launched=launched)
    attention = resolve_attention(spec, device)
    variant = VARIANTS[spec.variant]
    model = resolve_model(spec, variant, device, (nproc, nnodes), shape)
    # what it reads (its shards hashed in the launcher, not in each rank, once per run
    # folder: data/verified.py)
    launcher = here and launched is None
    corpus = check_corpus(
        spec.corpus or model.preset.corpus,
        named=spec.corpus is not None,
        hashes=launcher,
        record_in=spec.out if launcher else None,
        reread=spec.verify_data,
    )
    # with which tokenizer (another machine's: its business)
    tokenizer_dir = None
    if here:
        tokenizer_dir = run_tokenizer(
            spec.tokenizer,
            checkpoint=model.init.folder,
            vocab_size=model.shape.vocab_size,
            model=model.source,
            prepared=None if corpus.tokenizer is None else (corpus.name, corpus.tokenizer),
        )
    plan = Plan(
        spec=spec,
        variant=variant,
        device=device,
        preset=model.preset,
        shape=model.shape,
        layout=model.layout,
        nproc=nproc,
        nnodes=nnodes,
        init=model.init,
        seq_len=model.seq_len,
        attention=attention,
        corpus=corpus.name,
        corpus_streams=corpus.streams,
        lr=spec.lr or model.preset.lr,
        moe_block_size=model.moe_block_size,
        tokenizer_dir=tokenizer_dir,
        neuron_cores=neuron_cores,
        mixed_precision=mixed_precision,
    )
    # (a CPU's free memory is asked where a run starts: run())
    if device.is_trn2 and not spec.skip_memory_check:
        problem = memory_fit_problem(plan)
        if problem:
            raise ConfigError(problem)
    return plan
