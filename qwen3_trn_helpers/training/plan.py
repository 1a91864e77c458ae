"""``plan_run``: a RunSpec resolved against a machine, once, into typed parts.

A :class:`Plan` holds objects, not names: the :class:`~..model.variants.Variant`, the
:class:`~..model.presets.Preset` and its shape, the whole
:class:`~..model.presets.Layout` over the run's ranks, the device, the :class:`Init`
and the sequence length, attention, corpus and tokenizer a run uses, so nothing
downstream looks a name up again. Planning reads files (a checkpoint's config, the
tokenizer) but never trains, never writes a run folder and never changes the spec.

Every check that can refuse a run before anything starts lives here, and the one
memory rule (:func:`memory_fit_problem`: a NeuronCore's HBM, checked when a trn2 run is
planned, and a CPU's free memory, checked where a run starts on it).

Cheap to import: no torch.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

from ..device import Device, as_device
from ..errors import ConfigError
from ..model.presets import PRESETS, Layout, Preset
from ..model.shapes import Qwen3Shape
from ..model.variants import VARIANTS, Variant
from ..trn2 import PLANNING_HEADROOM
from .spec import RunSpec
from .trn2_choices import default_spmd_backend, plan_lines


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
    # the spec's training values, as the trainer uses them
    steps: int
    warmup_steps: int  # at most ``steps``
    local_batch_size: int
    global_batch_size: int | None  # None: no gradient accumulation
    mixed_precision: str
    seed: int
    compile: bool
    spmd_backend: str
    moe_impl: str
    tensorboard: bool
    checkpoint_interval: int | None
    checkpoint_async: str  # torchtitan's checkpoint.async_mode
    keep_checkpoints: int  # torchtitan's checkpoint.keep_latest_k
    export_hf: bool

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
        compiled_on_neuron = self.compile and self.device.is_trn2
        fsdp_only = self.tp == 1 and self.dp_replicate == 1
        return "simple_fsdp" if native and compiled_on_neuron and fsdp_only else "fsdp2"

    @property
    def needs_hub(self) -> bool:
        """Does this run download from the Hugging Face hub (weights or text)?"""
        return self.corpus_streams or (self.init.pending and self.init.hub_id is not None)

    def with_layout(self, **degrees: int) -> Plan:
        """This plan with other parallel degrees (``plan.with_layout(tp=8)``): a what-if
        for the memory lessons, the world laid out again."""
        layout = dataclasses.replace(self.layout, **degrees)
        return dataclasses.replace(self, layout=layout.over(self.world_size, layout.dp_replicate))

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
            local_batch=self.local_batch_size,
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
            "local batch": self.local_batch_size,
            "activation checkpointing": self.activation_checkpoint,
            "attention": self.attention,
            "loss chunks": self.loss_chunks,
            "corpus": self.corpus,
            "init": self.spec.init,
            "steps": self.steps,
            "lr": self.lr,
            # only where it differs from what was asked (a CPU without bf16 matmul)
            **(
                {"mixed precision": self.mixed_precision}
                if self.mixed_precision != self.spec.mixed_precision
                else {}
            ),
            **plan_lines(self),  # trn2: the choices AWS's documents decide
        }


def _mixed_precision_here(spec: RunSpec, device: Device) -> str:
    """The run's mixed precision on this machine: bf16 as asked, except on a CPU whose
    bf16 matrix products have no hardware path (device.cpu_has_bf16_matmul: 35x slower
    than float32 there), which trains in float32; the plan's summary then says so."""
    from ..device import cpu_has_bf16_matmul

    if device.is_cpu and spec.mixed_precision == "bfloat16" and not cpu_has_bf16_matmul():
        return "float32"
    return spec.mixed_precision


def resolve_preset(
    spec: RunSpec, variant: Variant, device: Device, nproc: int, shape: Qwen3Shape | None
) -> Preset:
    """The preset a run uses: the named one, else the variant's default here.

    On trn2 a run over the full-size preset's ranks (64: a whole trn2.48xlarge) takes
    that preset, the model AWS trained; fewer ranks, anywhere, the small preset that
    fits one core. An ``init`` folder of another shape keeps the default preset's
    layout, sequence length and checkpointing, and takes the folder's shape.
    """
    if spec.preset is not None:
        preset = PRESETS[spec.preset]
        if shape is not None and not shape.same_architecture(preset.shape):
            diffs = [d for d in preset.shape.differences(shape) if "max_seq_len" not in d]
            raise ConfigError(
                f"checkpoint {spec.init} does not match preset {preset.name!r}: "
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
        name=f"{preset.name}, shape of {Path(spec.init).name}",
        shape=shape,
        description=f"the shape of {spec.init}",
        hub_id=None,
        layout=Layout(tp=tp),
        seq_len=min(preset.seq_len, shape.max_seq_len),
    )


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


def default_attention(device: Device | str) -> str:
    """Plain causal on trn2 (AWS's choice), FlexAttention on CUDA, document-masked SDPA on CPU."""
    return as_device(device).default_attention


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


def memory_fit_problem(plan: Plan, free_gib: float | None = None) -> str | None:
    """The one memory rule: what a plan's ranks on one machine need against what it has.

    A NeuronCore may fill ``trn2.PLANNING_HEADROOM`` of its HBM with what the estimate counts;
    a CPU's ranks on this machine share its free memory (``free_gib``: None where
    unknown). Returns the refusal, with the numbers and the fix, or None.
    """
    memory = plan.memory()
    if plan.device.is_trn2:
        if memory.fits:
            return None
        preset = plan.preset
        if preset.world_size > plan.world_size // plan.dp_replicate:
            fix = (
                f"launch it on {preset.world_size} ranks (--nproc {preset.world_size}, as "
                "reproduce does), or train a smaller preset in this process"
            )
        else:
            fix = (
                "shorten --seq-len or use activation checkpointing, or let `qwen3-trn plan "
                f"--model {preset.name} --nodes N` find a layout that fits"
            )
        return (
            f"preset {preset.name!r} on {plan.world_size} rank(s) needs about "
            f"{memory.total_gib:.1f} GiB per NeuronCore, more than the "
            f"{memory.usable_gib:.1f} GiB a plan may use ({PLANNING_HEADROOM:.0%} of its "
            f"{memory.hbm_gib:.0f} GiB): {fix}"
        )
    if not plan.device.is_cpu or free_gib is None or memory.total_gib * plan.nproc <= free_gib:
        return None
    need = memory.total_gib * plan.nproc
    return (
        f"preset {plan.preset.name!r} needs about {need:.1f} GiB on this machine "
        f"({plan.nproc} rank(s) x {memory.total_gib:.1f} GiB: weights, gradients, AdamW "
        f"state, activations), more than the {free_gib:.1f} GiB free; train a small preset "
        "(--preset tiny), or pass --skip-memory-check to try anyway"
    )


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


def _torchrun_world() -> tuple[int, int] | None:
    """(ranks per node, nodes) as torchrun told this process, or None if it did not."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return None
    world = int(os.environ["WORLD_SIZE"])
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    return per_node, max(world // per_node, 1)


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
    starts): a folder for several ranks, a rendezvous endpoint for several nodes, and
    the NeuronCores the ranks take (``--neuron-cores``, else a class's share of this
    trn2: its first ``nproc`` cores), which it returns."""
    if here and nproc * nnodes > 1 and spec.out is None:
        raise ConfigError(
            f"a {nproc * nnodes}-rank run needs --out: every rank must write to one folder"
        )
    if here and launched is None and nnodes > 1 and spec.rdzv_endpoint is None:
        raise ConfigError(
            f"a job on {nnodes} nodes needs --rdzv-endpoint HOST:PORT, the same on "
            "every node: an address of one of them (the first) that the others reach"
        )
    neuron_cores = spec.neuron_cores
    if here and device.is_trn2:  # a class's share of this trn2: its first nproc cores
        from .class_share import with_class_slice

        neuron_cores = with_class_slice(spec.replace(nproc=nproc)).neuron_cores
    if spec.neuron_cores is not None:
        if not device.is_trn2:
            raise ConfigError(
                f"neuron_cores {spec.neuron_cores} chooses NeuronCores on a trn2, but this "
                f"run trains on {device.type!r}; drop --neuron-cores (or run it on trn2)"
            )
        from ..trn2 import core_slice

        cores = core_slice(spec.neuron_cores)  # (a valid slice: the spec checked its text)
        if len(cores) != nproc:
            raise ConfigError(
                f"neuron_cores {spec.neuron_cores} holds {len(cores)} cores but the run "
                f"starts {nproc} rank(s) per node, one core each: give "
                f"{cores.start}-{cores.start + nproc - 1} or --nproc {len(cores)}"
            )
    return neuron_cores


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
    from ..assets import resolve_tokenizer, tokenizer_vocab_size
    from ..data.corpus import EMBEDDED, EMBEDDED_PRETRAIN, is_local, read_documents
    from ..data.prepared import check_prepared, is_prepared, refuse_incomplete
    from ..device import resolve
    from ..model.hf_checkpoint import check_hf_checkpoint

    here = device_type is None
    device = resolve(spec.device) if here else as_device(device_type)
    variant = VARIANTS[spec.variant]
    if spec.checkpoint_async == "async_with_pinned_mem" and not device.is_cuda:
        raise ConfigError(
            "--checkpoint-async async_with_pinned_mem stages checkpoints in CUDA's pinned "
            f"memory, which a {device.type} run has none of: pass --checkpoint-async async"
        )
    launched = _torchrun_world() if here else None  # a rank torchrun started
    nproc, nnodes = launched or (spec.nproc, spec.nnodes)

    folder_shape = None
    if spec.init == "random":
        init = Init("random")
    elif spec.init == "pretrained":
        init = Init("published")  # its preset, and so its hub id, below
    else:
        init = Init("folder", folder=Path(spec.init).expanduser().absolute())
        folder_shape = check_hf_checkpoint(init.folder)
    preset = resolve_preset(spec, variant, device, nproc, folder_shape)
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
    if seq_len > shape.max_seq_len:
        raise ConfigError(
            f"seq_len {seq_len} is beyond the model's context of {shape.max_seq_len} "
            f"tokens ({source}); use a shorter --seq-len"
        )
    world = nproc * nnodes
    replicas = spec.dp_replicate or preset.replicas_across(nnodes)
    if world % replicas:
        raise ConfigError(
            f"dp_replicate {replicas} must divide the {world} ranks (each replica holds one "
            "sharded copy of the model); use a divisor of the ranks, e.g. the node count"
        )
    tp = spec.tp or (preset.layout.tp if (world // replicas) % preset.layout.tp == 0 else 1)
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
    layout = dataclasses.replace(preset.layout, tp=tp).over(world, replicas)

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

    corpus = spec.corpus or preset.corpus
    embedded = corpus in (EMBEDDED, EMBEDDED_PRETRAIN)
    # the preset's default names a dataset (c4), never a file or folder where the user
    # stands: a folder named c4 there had broken plan, dry-run and the job files
    explicit = spec.corpus is not None
    local = not embedded and explicit and is_local(corpus)
    prepared = explicit and is_prepared(corpus)
    if prepared:  # a damaged copy: one line now (each shard's sha256 below, once a node)
        check_prepared(corpus)
    elif local or (not embedded and explicit and ("/" in corpus or Path(corpus).suffix)):
        refuse_incomplete(corpus)
        read_documents(corpus)  # a clear error now (missing, empty), not in the dataloader

    tokenizer_dir = None
    if here:
        tok_source = spec.tokenizer
        if tok_source is None and init.folder is not None:
            if (init.folder / "tokenizer.json").exists():
                tok_source = str(init.folder)
        tokenizer_dir = resolve_tokenizer(tok_source)
        if prepared:  # its ids are this tokenizer's; hashes in the launcher, not per rank
            check_prepared(corpus, tokenizer_dir=tokenizer_dir, hashes=launched is None)
        n_tokens = tokenizer_vocab_size(tokenizer_dir)
        if n_tokens > shape.vocab_size:
            raise ConfigError(
                f"the tokenizer in {tokenizer_dir} has {n_tokens} tokens but the model's "
                f"embedding has {shape.vocab_size} rows ({source}); ids past "
                f"{shape.vocab_size - 1} would index out of range: use the model's own "
                "tokenizer or a model with a larger vocabulary"
            )

    moe_block = 0
    if shape.is_moe and spec.moe_impl == "blockwise":
        moe_block = preset.moe_block_size or (256 if device.is_trn2 else 64)

    neuron_cores = check_launch(spec, device, nproc, nnodes, here=here, launched=launched)

    if spec.global_batch_size is not None:
        per_microbatch = spec.local_batch_size * layout.world // layout.tp
        if spec.global_batch_size % per_microbatch:
            raise ConfigError(
                f"global_batch_size {spec.global_batch_size} must be a multiple of local "
                f"batch x data-parallel ranks ({per_microbatch}): gradient accumulation "
                "runs whole microbatches"
            )
    plan = Plan(
        spec=spec,
        variant=variant,
        device=device,
        preset=preset,
        shape=shape,
        layout=layout,
        nproc=nproc,
        nnodes=nnodes,
        init=init,
        seq_len=seq_len,
        attention=attention,
        corpus=corpus,
        corpus_streams=not (embedded or local),
        lr=spec.lr or preset.lr,
        moe_block_size=moe_block,
        tokenizer_dir=tokenizer_dir,
        neuron_cores=neuron_cores,
        steps=spec.steps,
        warmup_steps=min(spec.warmup_steps, spec.steps),
        local_batch_size=spec.local_batch_size,
        global_batch_size=spec.global_batch_size,
        mixed_precision=_mixed_precision_here(spec, device) if here else spec.mixed_precision,
        seed=spec.seed,
        compile=spec.compile,
        spmd_backend=(
            default_spmd_backend(device, variant)
            if spec.spmd_backend == "auto"
            else spec.spmd_backend
        ),
        moe_impl=spec.moe_impl,
        tensorboard=spec.tensorboard,
        checkpoint_interval=spec.checkpoint_interval,
        checkpoint_async=spec.checkpoint_async,
        keep_checkpoints=spec.keep_checkpoints,
        export_hf=spec.export_hf,
    )
    # (a CPU's free memory is asked where a run starts: run())
    if device.is_trn2 and not spec.skip_memory_check:
        problem = memory_fit_problem(plan)
        if problem:
            raise ConfigError(problem)
    return plan
