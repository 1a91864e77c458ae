"""What every one of our trainers adds to torchtitan's: one run's scope.

:class:`_RunScope` is the mixin of each trainer class (training/trainer.py's, and the
transformers backend's in training/hf_trainer.py): the additions training/trainer.py's
docstring lists, made in ``__init__`` and undone in ``close()``. The compatibility
patches a variant's model needs are :data:`VARIANT_PATCHES` (training/patches.py says
why each exists); which trainer class trains a variant is training/trainer.py's
``VARIANT_PARTS``, which builds on this table.
"""

from __future__ import annotations

import gc
import math
import re
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, field
from typing import Any

from ..stack import collector_paused

with collector_paused():  # the stack's modules stay: no full collections while they import
    import torch

from ..device import DEVICES, Device
from ..errors import (
    PEER_LOST,
    AssetError,
    ConfigError,
    NonFiniteLoss,
    TrainingError,
    stop_error,
    stop_signal,
)
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
from .heartbeat import RankWatch
from .neuron_faults import neuron_fault
from .patches import Patch
from .plan import Plan
from .stopping import StopRequest
from .watchdog import UNWATCHED_STEPS

#: each registry class -> the patches its model needs; every variant of
#: model.variants.VARIANTS has an entry (tests/core/model/test_variants.py). The
#: run-wide patches (``patches.RUN_PATCHES``) come on top.
VARIANT_PATCHES: dict[type[Variant], tuple[Patch, ...]] = {
    TorchtitanQwen3: (patches.tie_embedding_before_fsdp,),
    BlockwiseMoE: (patches.tie_embedding_before_fsdp,),
    TransformersV5: (
        patches.hf_backend_rope_init, patches.hf_backend_sdpa, patches.keep_transformers_init
    ),
}  # fmt: skip


def variant_patches(variant: Variant) -> tuple[Patch, ...]:
    """The patches ``variant``'s model needs (a registry entry)."""
    found = VARIANT_PATCHES.get(type(variant))
    if found is None:
        raise ConfigError(
            f"variant {variant.name!r} ({type(variant).__name__}) has no trainer: add its "
            "class to VARIANT_PATCHES in qwen3_trn_helpers/training/run_scope.py and "
            "VARIANT_PARTS in qwen3_trn_helpers/training/trainer.py"
        )
    return found


@dataclass(kw_only=True, slots=True)
class RunOptions:
    """What our trainer needs to know beyond torchtitan's own config."""

    variant: Variant = field(default_factory=lambda: VARIANTS["native"])
    """The plan's variant (model/variants.py): it decides the trainer's compatibility
    patches (:data:`VARIANT_PATCHES`)."""

    device: Device = field(default_factory=lambda: DEVICES["cpu"])
    """The plan's device (neuron, cuda or cpu)."""

    settings: dict[str, Any] = field(default_factory=dict)
    """The run's resolved settings, compared across every rank at start
    (:func:`~.ranks.check_same_versions`): nodes started differently stop at once."""

    hang_timeout: int = 0
    """Seconds a training step may take on a rank torchrun started (0: no watchdog;
    training/watchdog.py)."""

    watch_every: int = 0
    """Rank 0 logs the per-node step times every N steps (training/heartbeat.py)."""


#: what a collective says when the rank at the other end is gone (gloo's words; the
#: Neuron and NCCL backends raise torch's DistError types)


#: gloo's words when a collective's peer never answered (torch 2.14: unbound_buffer.cc,
#: "Timed out waiting 100000ms for recv operation to complete")
_TIMED_OUT = "Timed out waiting"
_LOST_PEER = ("Connection closed by peer", "Connection reset by peer", "remote worker", _TIMED_OUT)


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
        self._watch: RankWatch | None = None  # a launched rank's heartbeat and watchdog
        self._steps_run = 0
        self._trained_here = False  # whether a step completed in this process
        try:
            if gc.isenabled():  # torchtitan's GarbageCollection turns it off for good
                self._scope.callback(gc.enable)
            launched = self._scope.enter_context(one_rank_environment())
            self._owns_process_group = not launched
            world = world_size()
            variant = variant_patches(options.variant)
            self._scope.enter_context(patches.run_patches(variant, options.device, world))
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
            # even when run.json is lost (training/resume.py: check_resume)
            self.checkpointer.run_settings = options.settings  # type: ignore[attr-defined]
            if options.device.is_cpu and world > 1:
                force_sum_reduction_for_gloo(self.model_parts)
            if launched and config.comm.mode == "default":
                self._watch = rank_watch(config.dump_folder, options)
        except BaseException as e:
            self._teardown()
            fault = neuron_fault(e) if options.device.is_trn2 else None
            if fault is not None:  # torch-neuronx's refusal: one line with the fix
                raise TrainingError(fault) from None
            raise

    @classmethod
    def backend_fields(cls, plan: Plan) -> dict[str, Any]:
        """Config fields only this trainer's ``Config`` has (torchtitan's Trainer: none)."""
        return {}

    def init_distributed(self):
        """torchtitan's process group (a rank of a class's share claims its NeuronCore
        first, class_share.py), then: every rank runs the same software."""
        from .class_share import claim_rank_core
        from .ranks import check_same_versions

        claim_rank_core()
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
        self._trained_here = True  # (compiled, the first one took the compile)
        return loss

    def nothing_trained(self) -> bool:
        """Whether no forward and backward completed in this process: a stop now loses
        nothing (the run started fresh or from a checkpoint), so SIGTERM need not wait
        for the step's end (training/stopping.py), which in a first compiled step is
        minutes of compiling away (340 s on a loaded 2-core CPU)."""
        return not self._trained_here

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
        step: int = self.step  # type: ignore[attr-defined]
        # (the watchdog skips a process's first steps, which compile: UNWATCHED_STEPS)
        unwatched = self._steps_run < UNWATCHED_STEPS
        watched = self._watch.step(step, watched=not unwatched) if self._watch else None
        try:
            with watched or nullcontext():
                if self._watch is not None:  # (stamps when the step's batch is in hand)
                    data_iterator = self._watch.batches(data_iterator)
                super().train_step(data_iterator)  # type: ignore[misc]
                # the count over every rank, for the checkpoint this step may save
                self.checkpointer.tokens_seen = self.metrics_processor.tokens_seen  # type: ignore[attr-defined]
                self._stop_if_requested()
            self._steps_run += 1
        except Exception as e:
            stopped = stop_signal()
            if stopped is not None:
                # a stop wins over any cause found after it: SIGTERM in a first compiled
                # step also kills the compiler's processes, whose error names the compile
                # cache, which is not damaged (a scancel must not send a user to delete it)
                raise stop_error(stopped) from None
            cache = compile_cache_folder(self.config.qwen3_trn.device) if self._compiles else None  # type: ignore[attr-defined]
            fault = cache_fault(e, cache[1]) if cache is not None else None
            if fault is not None:
                raise AssetError(fault) from None
            fault = neuron_fault(e) if self.config.qwen3_trn.device.is_trn2 else None  # type: ignore[attr-defined]
            if fault is not None:
                raise TrainingError(f"step {self.step}: {fault}", step=self.step) from None  # type: ignore[attr-defined]
            if not isinstance(e, RuntimeError):
                raise
            if _TIMED_OUT in str(e):
                raise TrainingError(self._timed_out_message(str(e)), step=self.step) from None  # type: ignore[attr-defined]
            if lost_peer(e):
                raise TrainingError(
                    f"step {self.step}: {peer_lost_message(str(e))}",  # type: ignore[attr-defined]
                    step=self.step,  # type: ignore[attr-defined]
                ) from None
            value = self._non_finite_value()
            if value is None:
                raise
            raise NonFiniteLoss(self.step, value) from None  # type: ignore[attr-defined]

    def _timed_out_message(self, error_text: str) -> str:
        """A collective that timed out: the rank that never came, where one is stopped."""
        from .ranks import stopped_ranks

        waited = re.search(r"Timed out waiting (\d+)ms", error_text)
        seconds = f"{int(waited.group(1)) / 1000:.0f} s" if waited else "its timeout"
        stopped = stopped_ranks()
        who = (
            f"{' and '.join(stopped)} is stopped (state T: kill -STOP, or Ctrl-Z or a "
            "debugger there), and this rank"
            if stopped
            else "another rank stopped answering (it is stopped, hung or lost its network); "
            "this rank"
        )
        return (
            f"step {self.step}: {who} waited {seconds} for it in a collective; metrics.jsonl "  # type: ignore[attr-defined]
            "holds every completed step: --resume from the last checkpoint"
        )

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """torchtitan's train state (step, this rank's token count), then the count over
        every rank that the checkpoint recorded: the first rank of the loss mesh holds it
        and the others start at 0, so torchtitan's sum over the ranks at each step is
        right at any data-parallel size (it restored one rank's count on every rank)."""
        super().load_state_dict(state_dict)  # type: ignore[misc]
        seen = self.checkpointer.tokens_loaded()  # type: ignore[attr-defined]
        if seen is None:
            return  # (an older checkpoint: torchtitan's own count)
        dims = self.parallel_dims  # type: ignore[attr-defined]
        mesh = dims.get_optional_mesh("loss") if dims.dp_cp_enabled else None
        first = mesh is None or mesh.get_local_rank() == 0
        self.ntokens_seen = seen if first else 0
        self.metrics_processor.tokens_seen = seen  # type: ignore[attr-defined]

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

        if getattr(self, "_watch", None) is not None:
            self._watch.close()
            self._watch = None

        if getattr(self, "_owns_process_group", False) and dist.is_initialized():
            dist.destroy_process_group()
        if getattr(self, "_compiles", False):
            # dynamo's in-memory code cache holds this run's graphs, guarded on its model;
            # a notebook or test that trains again would pile up recompiles until dynamo's
            # limit silently runs blocks eager. Inductor's on-disk cache stays.
            torch._dynamo.reset()
        self._scope.close()


def rank_watch(out: str, options: RunOptions) -> RankWatch:
    """This rank's file in ``OUT/ranks`` and its watchdog (training/heartbeat.py)."""
    from .ranks import rank_place

    place = rank_place()
    return RankWatch(out, rank=place.rank, world=place.world_size, node=place.node,
                     hang_s=options.hang_timeout, watch_every=options.watch_every)  # fmt: skip


def force_sum_reduction_for_gloo(model_parts: list[torch.nn.Module]) -> int:
    """Make FSDP2 reduce gradients with SUM, the only reduction gloo offers.

    Why: torchtitan 0.3.0 normalises the loss by the global token count and so sets
    FSDP's gradient divide factor to 1 (``disable_fsdp_gradient_division``); FSDP2
    (torch 2.14) then reduce-scatters with ``ReduceOp.PREMUL_SUM(1.0)``, which NCCL (and
    Neuron's backend) implement and gloo does not ("Cannot use ReduceOp.PREMUL_SUM with
    Gloo"). FSDP2's public ``set_force_sum_reduction_for_comms`` switches to SUM followed
    by the same (x1) scaling: identical gradients. Only for CPU runs with more than one
    rank; a call on the built model, not a patch of anyone's code, and
    tests/core/training/test_patches.py fails once gloo or FSDP2 no longer needs it.
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
