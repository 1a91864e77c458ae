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
the model registry (model/variants.py) to training code. Six additions, all made in ``__init__`` and
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

import gc
import math
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..stack import collector_paused

with collector_paused():  # the stack's modules stay: no full collections while they import
    import torch
    from torchtitan.experiments.graph_trainer.trainer import GraphTrainer
    from torchtitan.trainer import Trainer

from ..device import DEVICES, Device
from ..errors import PEER_LOST, AssetError, ConfigError, NonFiniteLoss, TrainingError
from ..model.variants import VARIANTS, BlockwiseMoE, TorchtitanQwen3, TransformersV5, Variant
from . import patches
from .compile import (
    cache_fault,
    check_compile_cache,
    compile_cache_folder,
    keep_dynamo_settings,
    short_cache_warnings,
    static_shapes,
    use_package_caches,
)
from .host_memory import keep_freed_memory_while_training, release_freed_memory
from .patches import Patch
from .plan import Plan
from .stopping import StopRequest
from .tokenizer import ReusedTokenizer


@dataclass(kw_only=True, slots=True)
class RunOptions:
    """What our trainer needs to know beyond torchtitan's own config."""

    variant: Variant = field(default_factory=lambda: VARIANTS["native"])
    """The plan's variant (model/variants.py): its parts (:data:`VARIANT_PARTS`) decide
    the trainer's compatibility patches."""

    device: Device = field(default_factory=lambda: DEVICES["cpu"])
    """The plan's device (neuron, cuda or cpu)."""

    settings: dict[str, Any] = field(default_factory=dict)
    """The run's resolved settings, compared across every rank at start
    (:func:`~.ranks.check_same_versions`): nodes started differently stop at once."""


#: what a collective says when the rank at the other end is gone (gloo's words; the
#: Neuron and NCCL backends raise torch's DistError types)
_LOST_PEER = ("Connection closed by peer", "Connection reset by peer", "remote worker")


def lost_peer(error: BaseException) -> bool:
    """Whether a failed step failed because another rank of the job went away."""
    import torch.distributed as dist

    return isinstance(error, dist.DistError) or any(w in str(error) for w in _LOST_PEER)


def peer_lost_message(error_text: str) -> str:
    """:data:`PEER_LOST`, naming the node the lost rank ran on where the error tells."""
    from .ranks import lost_node

    node = lost_node(error_text)
    if node is None:
        return PEER_LOST
    return PEER_LOST.replace(
        "(a node stopped, failed or lost its network)",
        f"({node} stopped, failed or lost its network)",
    )


class _RunScope:
    """Mixin for a torchtitan trainer: patches, process group and failures of one run."""

    def __init__(self, config) -> None:
        from .ranks import one_rank_environment, world_size

        options: RunOptions = config.qwen3_trn
        self._scope = ExitStack()
        self._local_losses: list[torch.Tensor] = []
        #: set by the caller (runs/here.py) for a run that saves checkpoints
        self.stop_request: StopRequest | None = None
        self.stopped_at: int | None = None  # the step a requested stop saved and ended at
        try:
            if gc.isenabled():  # torchtitan's GarbageCollection turns it off for good
                self._scope.callback(gc.enable)
            launched = self._scope.enter_context(one_rank_environment())
            self._owns_process_group = not launched
            world = world_size()
            parts = variant_parts(options.variant)
            self._scope.enter_context(patches.run_patches(parts.patches, options.device, world))
            self._compiles = config.compile.enable  # --compile, or torchtitan's --compile.enable
            if self._compiles:
                use_package_caches(options.device)
                cache = compile_cache_folder(options.device)
                if cache is not None:  # a folder that cannot work: one line, now
                    check_compile_cache(*cache)
                    self._scope.enter_context(short_cache_warnings(cache[1]))
                self._scope.enter_context(keep_dynamo_settings())
                self._scope.enter_context(static_shapes(options.device))
            super().__init__(config)  # type: ignore[call-arg]
            # each checkpoint records the settings: a resume is checked against them
            # even when run.json is lost (runs/folder.py: check_resume)
            self.checkpointer.run_settings = options.settings  # type: ignore[attr-defined]
            if options.device.is_cpu and world > 1:
                force_sum_reduction_for_gloo(self.model_parts)
        except BaseException:
            self._teardown()
            raise

    @classmethod
    def backend_fields(cls, plan: Plan) -> dict[str, Any]:
        """Config fields only this trainer's ``Config`` has (torchtitan's Trainer: none)."""
        return {}

    def init_distributed(self):
        """torchtitan's process group, then: every rank runs the same software."""
        from .ranks import check_same_versions

        parallel_dims = super().init_distributed()  # type: ignore[misc]
        if self.config.comm.mode == "default":  # type: ignore[attr-defined]
            check_same_versions(self.config.qwen3_trn.settings)  # type: ignore[attr-defined]
        return parallel_dims

    def post_dataloading_process(self, input_dict, labels):
        """torchtitan's batch preparation; compiled, the document count made symbolic."""
        inputs, labels, extra = super().post_dataloading_process(input_dict, labels)  # type: ignore[misc]
        if self._compiles:
            from ..model.attention import mark_document_count_dynamic

            mark_document_count_dynamic(extra.get("attention_masks"))
        return inputs, labels, extra

    def forward_backward_step(self, **kwargs: Any) -> torch.Tensor:
        loss = super().forward_backward_step(**kwargs)  # type: ignore[misc]
        self._local_losses.append(loss.detach())
        return loss

    def should_continue_training(self) -> bool:
        return self.stopped_at is None and super().should_continue_training()  # type: ignore[misc]

    def _stop_if_requested(self) -> None:
        """At a step's end: if any rank was told to stop, save this step and end."""
        if self.stop_request is None:
            return
        if self.stop_request.agree(getattr(self, "device", None)):
            self.stopped_at = self.step  # type: ignore[attr-defined]
            self.checkpointer.save_now = True  # type: ignore[attr-defined]

    def train_step(self, data_iterator) -> None:
        self._local_losses = []
        try:
            super().train_step(data_iterator)  # type: ignore[misc]
            self._stop_if_requested()
        except Exception as e:
            cache = compile_cache_folder(self.config.qwen3_trn.device) if self._compiles else None  # type: ignore[attr-defined]
            fault = cache_fault(e, cache[1]) if cache is not None else None
            if fault is not None:
                raise AssetError(fault) from None
            if not isinstance(e, RuntimeError):
                raise
            if lost_peer(e):
                raise TrainingError(
                    f"step {self.step}: {peer_lost_message(str(e))}",  # type: ignore[attr-defined]
                    step=self.step,  # type: ignore[attr-defined]
                ) from None
            value = self._non_finite_value()
            if value is None:
                raise
            raise NonFiniteLoss(self.step, value) from None  # type: ignore[attr-defined]

    def _non_finite_value(self) -> float | None:
        """The local loss when it (or, from another rank, the weights) is not finite."""
        if self._local_losses:
            local = float(torch.stack([x.float() for x in self._local_losses]).sum())
            if not math.isfinite(local):
                return local
        for part in self.model_parts:  # type: ignore[attr-defined]
            for p in part.parameters():
                data = p.to_local() if hasattr(p, "to_local") else p
                if not torch.isfinite(data).all():
                    return float("nan")
        return None

    def close(self) -> None:
        try:
            super().close()  # type: ignore[misc]
        finally:
            self._teardown()

    def _teardown(self) -> None:
        import torch.distributed as dist

        if getattr(self, "_owns_process_group", False) and dist.is_initialized():
            dist.destroy_process_group()
        if getattr(self, "_compiles", False):
            # dynamo's in-memory code cache holds this run's graphs, guarded on its model;
            # a notebook or test that trains again would pile up recompiles until dynamo's
            # limit silently runs blocks eager. Inductor's on-disk cache stays.
            torch._dynamo.reset()
        self._scope.close()


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
    so training keeps this table; the run-wide patches (``patches.RUN_PATCHES``) come on
    top of ``patches``.
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


#: each registry class -> its parts; every variant of model.variants.VARIANTS has one
#: (tests/unit/model/test_variants.py)
VARIANT_PARTS: dict[type[Variant], VariantParts] = {
    TorchtitanQwen3: VariantParts(lambda: Qwen3TrnTrainer, (patches.tie_embedding_before_fsdp,)),
    BlockwiseMoE: VariantParts(lambda: Qwen3TrnTrainer, (patches.tie_embedding_before_fsdp,)),
    TransformersV5: VariantParts(
        _hf_trainer,
        (patches.hf_backend_rope_init, patches.hf_backend_sdpa, patches.keep_transformers_init),
    ),
}


def variant_parts(variant: Variant) -> VariantParts:
    """The trainer class and patches of ``variant`` (a registry entry)."""
    parts = VARIANT_PARTS.get(type(variant))
    if parts is None:
        raise ConfigError(
            f"variant {variant.name!r} ({type(variant).__name__}) has no trainer: add its "
            "class to VARIANT_PARTS in qwen3_trn_helpers/training/trainer.py"
        )
    return parts


def force_sum_reduction_for_gloo(model_parts: list[torch.nn.Module]) -> int:
    """Make FSDP2 reduce gradients with SUM, the only reduction gloo offers.

    Why: torchtitan 0.3.0 normalises the loss by the global token count and so sets
    FSDP's gradient divide factor to 1 (``disable_fsdp_gradient_division``); FSDP2
    (torch 2.14) then reduce-scatters with ``ReduceOp.PREMUL_SUM(1.0)``, which NCCL (and
    Neuron's backend) implement and gloo does not ("Cannot use ReduceOp.PREMUL_SUM with
    Gloo"). FSDP2's public ``set_force_sum_reduction_for_comms`` switches to SUM followed
    by the same (x1) scaling: identical gradients. Only for CPU runs with more than one
    rank; a call on the built model, not a patch of anyone's code, and
    tests/unit/training/test_patches.py fails once gloo or FSDP2 no longer needs it.
    Returns the FSDP modules changed.
    """
    from torch.distributed.fsdp import FSDPModule

    count = 0
    for part in model_parts:
        for module in part.modules():
            if isinstance(module, FSDPModule):
                module.set_force_sum_reduction_for_comms(True)
                count += 1
    return count


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

    Every run value comes from the plan as planning resolved it (the spec is read only
    whole, for what the nodes compare); the first weights load from ``plan.init_dir``
    (published weights: once ``runs/weights.with_init_weights`` put their folder there).

    ``comm_mode="fake_backend"`` is torchtitan's dry-run mode (runs/dry_run.py);
    ``metrics_file=""`` writes no metrics.jsonl. ``skip_dataloader_state`` resumes
    without the checkpoint's data position, where it cannot load
    (``global_order.data_position_kept``: torchtitan's per-rank state of a streamed
    corpus at another data-parallel size); our corpora's one global position loads
    at any world size.
    ``data_parallel``: ``fsdp2`` or ``simple_fsdp`` (a :class:`Qwen3TrnGraphTrainer`
    config, training/simple_fsdp.py); None: the plan's choice.
    """
    from torchtitan.components.optimizer import LRSchedulersContainer, default_adamw
    from torchtitan.config import CommConfig, DebugConfig, ParallelismConfig, TrainingConfig
    from torchtitan.config.override import OverrideConfig

    from ..assets import ensure_tokenizer
    from ..corpus import dataset_args
    from .checkpoint import Qwen3TrnCheckpointManager
    from .compile import compile_config
    from .global_order import loader_for
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
    compile_ = compile_config(plan.compile, plan.device)
    backend = trainer.backend_fields(plan)
    dataset, dataset_path = dataset_args(plan.corpus, streams=plan.corpus_streams)
    loader = loader_for(dataset)  # our corpora: one sample order at any world size
    saves = bool(plan.checkpoint_interval or plan.export_hf)
    kwargs: dict[str, Any] = dict(
        model_spec=variant.model_spec(plan.shape, plan.preset.name, plan.attention),
        hf_assets_path=str(plan.tokenizer_dir or ensure_tokenizer()),
        tokenizer=ReusedTokenizer.Config(),  # parsed once per process (training/tokenizer.py)
        dump_folder=str(out),
        metrics=Qwen3TrnMetrics.Config(
            log_freq=1,
            enable_tensorboard=plan.tensorboard,
            disable_color_printing=True,
            jsonl_file=metrics_file,
        ),
        dataloader=loader.Config(dataset=dataset, dataset_path=dataset_path),
        optimizer=default_adamw(lr=plan.lr),
        lr_scheduler=LRSchedulersContainer.Config(
            warmup_steps=plan.warmup_steps,
            decay_ratio=0.8,
            decay_type="linear",
            min_lr_factor=0.0,
        ),
        training=TrainingConfig(
            local_batch_size=plan.local_batch_size,
            global_batch_size=plan.global_batch_size or -1,  # -1: no accumulation
            seq_len=plan.seq_len,
            steps=plan.steps,
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
            interval=plan.checkpoint_interval or 10**9,
            initial_load_path=init_dir,
            initial_load_in_hf=init_dir is not None,
            # torchtitan's default (True) warns on every run without an initial load
            initial_load_model_only=init_dir is not None,
            last_save_model_only=plan.export_hf,
            last_save_in_hf=plan.export_hf,
            exclude_from_loading=["dataloader"] if skip_dataloader_state else [],
            async_mode=plan.checkpoint_async,  # --checkpoint-async
            keep_latest_k=plan.keep_checkpoints,  # --keep-checkpoints
        ),
        activation_checkpoint=activation_checkpoint,
        compile=compile_,
        # collectives wait longer than any save of this model takes (training/stopping.py)
        comm=CommConfig(trace_buf_size=0, mode=comm_mode, **save_timeouts(plan)),
        debug=DebugConfig(seed=plan.seed),
        override=OverrideConfig(
            imports=variant.overrides(plan.attention, plan.moe_block_size, plan.moe_impl)
        ),
        loss=variant.loss_config(plan.shape, plan.loss_chunks),
        qwen3_trn=RunOptions(variant=variant, device=plan.device, settings=settings),
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

    if not plan.checkpoint_interval:
        return {}
    timeout = collective_timeout_s(checkpoint_bytes(plan.shape.parameter_count()))
    return {"train_timeout_seconds": timeout, "init_timeout_seconds": max(300, timeout)}


#: spec fields that may differ between the nodes of one job (each node's own business)
PER_NODE = ("device", "neuron_cores", "skip_memory_check", "overwrite", "nproc", "nnodes",
            "rdzv_endpoint", "rdzv_timeout")  # fmt: skip


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
