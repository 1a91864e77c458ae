"""The one place a torchtitan ``Trainer`` is configured and built.

:func:`trainer_config` turns a :class:`~.spec.Plan` into a ``Trainer.Config`` written
like the entries of torchtitan's own config registries; :func:`build_trainer` builds
it. Every path that trains or loads a model goes through here: ``run()``, the parity
check, the dry run, the training panel, multi-rank launches, and torchtitan's own entry
point (``torchrun -m torchtitan.train --module qwen3_trn_helpers --config ...``), which
calls ``config.build()`` itself.

Our trainers are torchtitan's (``Trainer``, and the transformers backend's
``HFTransformerTrainer``, in training/hf_trainer.py); which one a variant trains with,
and which patches its model needs, is :data:`VARIANT_PARTS`, the one place training maps
the model registry (model/variants.py) to training code. Each is subclassed under our
run scope (training/run_scope.py), which makes six additions, all in ``__init__`` and
undone in ``close()``:

- the compatibility patches the run needs (training/patches.py), entered as one
  reversible scope, so nothing outlives the run;
- CPython's cyclic garbage collector back on at close, where it was on: torchtitan's
  ``GarbageCollection`` turns it off for the process (collecting every
  ``gc_freq`` steps itself, so ranks do not stall at random steps) and never back, and a
  notebook kernel that had trained once collected no reference cycle again;
- a one-rank process group when not launched by torchrun (a notebook, or a plain
  ``python -m torchtitan.train``), torn down on close;
- FSDP's gradient reduction switched to SUM when several CPU ranks use gloo;
- a non-finite loss raised as :class:`~qwen3_trn_helpers.errors.NonFiniteLoss` with
  its step, recognised from the loss tensor itself rather than torchtitan's message;
- with ``--compile`` (torchtitan's ``compile.enable``), the compile cache pointed at the
  package cache folder, and dynamo's in-memory graphs dropped on close
  (training/compile.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..stack import collector_paused

with collector_paused():  # the stack's modules stay: no full collections while they import
    from torchtitan.experiments.graph_trainer.trainer import GraphTrainer
    from torchtitan.trainer import Trainer

from ..errors import ConfigError
from ..model.variants import BlockwiseMoE, TorchtitanQwen3, TransformersV5, Variant
from .host_memory import keep_freed_memory_while_training, release_freed_memory
from .patches import Patch
from .plan import Plan
from .run_scope import VARIANT_PATCHES, RunOptions, _RunScope, variant_patches
from .tokenizer import ReusedTokenizer


class Qwen3TrnTrainer(_RunScope, Trainer):
    """torchtitan's Trainer for the native and nki_moe variants."""

    @dataclass(kw_only=True, slots=True)
    class Config(Trainer.Config):
        qwen3_trn: RunOptions = field(default_factory=RunOptions)


class Qwen3TrnGraphTrainer(_RunScope, GraphTrainer):
    """torchtitan's GraphTrainer (SimpleFSDP, the whole model compiled): the compiled
    path on neuron (training/simple_fsdp.py says why)."""

    @dataclass(kw_only=True, slots=True)
    class Config(GraphTrainer.Config):
        qwen3_trn: RunOptions = field(default_factory=RunOptions)


@dataclass(frozen=True)
class VariantParts:
    """What training adds to a registry variant: its trainer class and its patches.

    The model registry (model/variants.py) sits below training and cannot name either,
    so training keeps this table; the patches are training/run_scope.py's
    ``VARIANT_PATCHES``, and the run-wide ones (``patches.RUN_PATCHES``) come on top.
    """

    trainer_class: Callable[[], type[_RunScope]]
    patches: tuple[Patch, ...]

    @property
    def trainer(self) -> type[_RunScope]:
        """The trainer class, imported when first asked for: the transformers backend's
        brings transformers (about 1 s), which a process training another variant (each
        rank of a native run) never needs."""
        return self.trainer_class()


def _hf_trainer() -> type[_RunScope]:
    from .hf_trainer import Qwen3TrnHFTrainer

    return Qwen3TrnHFTrainer


#: each registry class -> its trainer class (imported on use)
_TRAINERS: dict[type[Variant], Callable[[], type[_RunScope]]] = {
    TorchtitanQwen3: lambda: Qwen3TrnTrainer,
    BlockwiseMoE: lambda: Qwen3TrnTrainer,
    TransformersV5: _hf_trainer,
}

#: each registry class -> its parts; every variant of model.variants.VARIANTS has one
#: (tests/core/model/test_variants.py)
VARIANT_PARTS: dict[type[Variant], VariantParts] = {
    cls: VariantParts(_TRAINERS[cls], found) for cls, found in VARIANT_PATCHES.items()
}


def variant_parts(variant: Variant) -> VariantParts:
    """The trainer class and patches of ``variant`` (a registry entry)."""
    variant_patches(variant)  # an unknown variant: one line, naming the tables
    return VARIANT_PARTS[type(variant)]


def activation_checkpoint_config(kind: str):
    """torchtitan's AC policy by name (none for the small presets)."""
    from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC

    return {"none": None, "selective": SelectiveAC.Config(), "full": FullAC.Config()}[kind]


def trainer_config(
    plan: Plan,
    out: str | Path,
    *,
    comm_mode: str = "default",
    metrics_file: str = "metrics.jsonl",
    skip_dataloader_state: bool = False,
    data_parallel: str | None = None,
):
    """The ``Trainer.Config`` for a plan, shaped like torchtitan's registry entries.

    Every run value comes from the plan: what planning resolved (model, layout, data,
    device, warm-up), and the training values no machine changes from the spec it holds
    (``plan.spec``: steps, batch sizes, seed, checkpointing); the first weights load from
    ``plan.init_dir``
    (published weights: once ``runs/weights.with_init_weights`` put their folder there).

    ``comm_mode="fake_backend"`` is torchtitan's dry-run mode (ops/dry_run.py);
    ``metrics_file=""`` writes no metrics.jsonl. ``skip_dataloader_state`` resumes
    without the checkpoint's data position, where it cannot load
    (``global_order.data_position_kept``: torchtitan's per-rank state of a streamed
    corpus at another data-parallel size); our corpora's one global position loads
    at any world size.
    ``data_parallel``: ``fsdp2`` or ``simple_fsdp`` (a :class:`Qwen3TrnGraphTrainer`
    config, training/simple_fsdp.py); None: the plan's choice.
    """
    from torchtitan.components.optimizer import default_adamw
    from torchtitan.config import CommConfig, DebugConfig, ParallelismConfig, TrainingConfig
    from torchtitan.config.override import OverrideConfig

    from ..assets import ensure_tokenizer
    from ..data.corpus import dataset_args
    from ..data.global_order import loader_for
    from .checkpoint import Qwen3TrnCheckpointManager
    from .compile import compile_config
    from .lr_schedule import lr_scheduler_config
    from .metrics import Qwen3TrnMetrics

    if plan.init.pending:
        raise ConfigError(
            "init='pretrained' must be turned into a checkpoint folder before training: "
            "plan = qwen3_trn_helpers.runs.weights.with_init_weights(plan)"
        )
    init_dir = str(plan.init_dir) if plan.init_dir else None
    variant = plan.variant
    # this layer's parts first (the trainer class, what every node must agree on, the
    # checkpointing and compile policies), then the model's and the data's from below
    trainer = variant_parts(variant).trainer
    settings = same_on_every_node(plan)
    activation_checkpoint = activation_checkpoint_config(plan.activation_checkpoint)
    compile_ = compile_config(plan.spec.compile, plan.device)
    timeouts = save_timeouts(plan)  # collectives wait longer than a save takes
    backend = trainer.backend_fields(plan)
    schedule = lr_scheduler_config(plan.warmup_steps)
    dataset, dataset_path = dataset_args(plan.corpus, streams=plan.corpus_streams)
    loader = loader_for(dataset)  # our corpora: one sample order at any world size
    saves = bool(plan.spec.checkpoint_interval or plan.spec.export_hf)
    kwargs: dict[str, Any] = dict(
        model_spec=variant.model_spec(plan.shape, plan.preset.name, plan.attention),
        hf_assets_path=str(plan.tokenizer_dir or ensure_tokenizer()),
        tokenizer=ReusedTokenizer.Config(),  # parsed once per process (training/tokenizer.py)
        dump_folder=str(out),
        metrics=Qwen3TrnMetrics.Config(
            log_freq=1,
            enable_tensorboard=plan.spec.tensorboard,
            disable_color_printing=True,
            jsonl_file=metrics_file,
        ),
        dataloader=loader.Config(dataset=dataset, dataset_path=dataset_path),
        optimizer=default_adamw(lr=plan.lr),
        lr_scheduler=schedule,
        training=TrainingConfig(
            local_batch_size=plan.spec.local_batch_size,
            global_batch_size=plan.spec.global_batch_size or -1,  # -1: no accumulation
            seq_len=plan.seq_len,
            steps=plan.spec.steps,
            mixed_precision_param=plan.mixed_precision,
            mixed_precision_reduce=plan.reduce_dtype,
        ),
        parallelism=ParallelismConfig(
            data_parallel_replicate_degree=plan.dp_replicate,  # HSDP across nodes
            tensor_parallel_degree=plan.tp,
            # explicit, not torchtitan's default: no public record shows any value on
            # Neuron, so it is a run parameter and the smoke ladder tries each
            spmd_backend=plan.spmd_backend,
        ),
        checkpoint=Qwen3TrnCheckpointManager.Config(
            enable=bool(init_dir or saves),
            load_only=not saves,
            interval=plan.spec.checkpoint_interval or 10**9,
            initial_load_path=init_dir,
            initial_load_in_hf=init_dir is not None,
            # torchtitan's default (True) warns on every run without an initial load
            initial_load_model_only=init_dir is not None,
            last_save_model_only=plan.spec.export_hf,
            last_save_in_hf=plan.spec.export_hf,
            exclude_from_loading=["dataloader"] if skip_dataloader_state else [],
            async_mode=plan.spec.checkpoint_async,  # --checkpoint-async
            keep_latest_k=plan.spec.keep_checkpoints,  # --keep-checkpoints
        ),
        activation_checkpoint=activation_checkpoint,
        compile=compile_,
        # collectives wait longer than any save of this model takes (training/stopping.py)
        comm=CommConfig(trace_buf_size=0, mode=comm_mode, **timeouts),
        debug=DebugConfig(seed=plan.spec.seed),
        override=OverrideConfig(
            imports=variant.overrides(plan.attention, plan.moe_block_size, plan.spec.moe_impl)
        ),
        loss=variant.loss_config(plan.shape, plan.loss_chunks),
        qwen3_trn=RunOptions(
            variant=variant,
            device=plan.device,
            settings=settings,
            hang_timeout=plan.spec.hang_timeout,
            watch_every=plan.spec.watch_every,
        ),
    )
    config = trainer.Config(**kwargs, **backend)
    if (data_parallel or plan.data_parallel) == "simple_fsdp":
        from .simple_fsdp import graph_trainer_fields

        return Qwen3TrnGraphTrainer.Config(**graph_trainer_fields(config))
    return config


def save_timeouts(plan: Plan) -> dict[str, int]:
    """torchtitan's collective timeouts, raised above what a save of ``plan``'s model
    takes (a save ends in a collective: a multi-minute save must not trip torchtitan's
    100 s, set after the first step; training/stopping.py collective_timeout_s)."""
    from .stopping import checkpoint_bytes, collective_timeout_s

    if not plan.spec.checkpoint_interval:
        return {}
    timeout = collective_timeout_s(checkpoint_bytes(plan.shape.parameter_count()))
    return {"train_timeout_seconds": timeout, "init_timeout_seconds": max(300, timeout)}


#: spec fields that may differ between the nodes of one job (each node's own business)
PER_NODE = ("device", "neuron_cores", "skip_memory_check", "overwrite", "nproc", "nnodes",
            "rdzv_endpoint", "rdzv_timeout", "verify_data", "hang_timeout",
            "watch_every")  # fmt: skip


def same_on_every_node(plan: Plan) -> dict[str, Any]:
    """What every rank of a job must agree on: the resolved plan (preset, sequence
    length, variant, ...), then each flag as given, named as the user knows them."""
    from dataclasses import asdict

    settings: dict[str, Any] = {k: v for k, v in plan.summary().items() if k != "steps"}
    for name, value in asdict(plan.spec).items():
        if name not in PER_NODE:
            settings["--" + name.replace("_", "-")] = value
    return settings


def build_trainer(plan: Plan, out: str | Path, **options: Any) -> Trainer:
    """A built torchtitan trainer for ``plan``, writing into ``out``; call ``close()``.

    ``options`` go to :func:`trainer_config`.
    """
    return trainer_config(plan, out, **options).build()


@contextmanager
def trainer_session(
    plan: Plan,
    out: str | Path,
    *,
    verbose: bool = False,
    keep_freed_memory: bool = True,
    **options: Any,
) -> Iterator[Trainer]:
    """A built trainer for the ``with`` block, closed and its memory freed after it.

    The one lifetime every user of a trainer shares (a run, the parity check, the
    initial-loss lesson, the dry run): torchtitan's log quieted while it lives, then
    ``close()`` (patches undone, process group torn down) and the freed memory given
    back, however the block ends. On the host, freed memory stays in the heap for the
    next step while it lives (training/host_memory.py: a CPU step about twice as fast),
    unless ``keep_freed_memory`` is false (one step of a large model: nothing to reuse,
    and the kept blocks fragment the heap). ``options`` go to :func:`trainer_config`.
    """
    with (
        quiet_torchtitan(verbose),
        keep_freed_memory_while_training(plan.device.is_cpu and keep_freed_memory),
    ):
        trainer = build_trainer(plan, out, **options)
        try:
            yield trainer
        finally:
            trainer.close()
            del trainer
            release_freed_memory()


@contextmanager
def quiet_torchtitan(verbose: bool) -> Iterator[None]:
    """Hide torchtitan's INFO/WARNING log and known CPU-only noise unless ``verbose``.

    torchtitan logs through the root logger; on a CPU it warns about things that are
    expected there (no lspci, no peak-FLOPs table entry, no CUDA graphs).
    """
    if verbose:
        yield
        return
    import logging
    import warnings

    # the root logger (torchtitan's), and DTensor's advice on flattening TP x FSDP
    # gradient-norm reductions, which torchtitan's clipping triggers at every step
    loggers = [logging.getLogger(), logging.getLogger("torch.distributed.tensor._redistribute")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            for message in (
                "DTensor random operators",
                r"DTensor manual_seed\(\) may not have complete support on cpu",
                "'set_vital' is deprecated",
                "In CPU autocast, but the target dtype is not supported",
                # torch's LR scheduler, as a resume loads its state (torchtitan's call)
                "To get the last learning rate computed by the scheduler",
                # torch's own FSDP2 still calls these; nothing for a user to change
                r"`torch.distributed.(reduce_scatter_tensor|all_gather_into_tensor)` is "
                "deprecated",
            ):
                warnings.filterwarnings("ignore", message=message)
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)
