"""``qwen3-trn dry-run``: a trn2 layout at its real size, simulated in one CPU process.

torchtitan 0.3.0 has a fake communication backend for dry runs (``CommConfig.mode =
"fake_backend"``, world size from ``NGPU``): collectives return without moving data, so
one process can play rank 0 of a 64-rank job. We plan the run exactly as for trn2
(``plan_run(..., device_type="neuron")``: preset, TP/FSDP, activation checkpointing,
attention, MoE block size), build torchtitan's Trainer for it on the CPU, materialise
rank 0's shards of the real Qwen3-4B or Qwen3-30B-A3B, and run one optimizer step at a
short sequence length. Then we measure what rank 0 holds (parameters, gradients, AdamW
state) and put it beside the estimate trn2 planning uses (training/memory.py).

The losses of a fake-backend step mean nothing (the collectives moved no data); the
shapes, placements and byte counts are exact. Nothing here runs on, or pretends to be,
a NeuronCore.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any
from unittest.mock import patch

from ..model.presets import PRESETS
from ..training.memory import GIB, MemoryEstimate
from ..training.plan import Plan, on_trn2, plan_run
from ..training.spec import RunSpec
from ..trn2 import RUN_HBM_SHARE

#: tokens per sequence of the simulated step (activations are estimated at the preset's)
DRY_RUN_SEQ_LEN = 128

#: what ``--json`` holds, besides the estimate by term and the verdicts
JSON_FIELDS = (
    "variant", "preset", "layers", "world_size", "tp", "fsdp", "nnodes", "dp_replicate",
    "layout", "layout_reason", "seq_len", "step_seq_len", "params_total", "params_per_rank",
    "bytes_per_rank", "estimated_state_gib", "estimated_other_gib", "activations_gib",
    "hbm_gib", "build_s", "step_s", "shards", "reduce_dtype", "fsdp_table_params",
    "machine_gib",
)  # fmt: skip


@dataclass
class DryRunReport:
    """What rank 0 of a trn2 layout holds, measured, beside the plan and its estimate.

    The layout, preset and sequence length are the plan's (``plan``, resolved for
    device ``"neuron"``) and the estimate is the plan's own; the report adds only what
    the simulated step measured.
    """

    plan: Plan  # what a trn2 runs: device "neuron", the whole world
    estimate: MemoryEstimate  # training/memory.py at the preset's sequence length
    step_seq_len: int  # what the simulated step ran
    params_total: int
    params_per_rank: int
    bytes_per_rank: int  # measured: rank 0's parameters + gradients + optimizer state
    build_s: float
    step_s: float
    shards: list[dict[str, Any]] = field(default_factory=list)
    # measured: FSDP parameters with the vocabulary's rows (a tied table: 1, which
    # torchtitan 0.3.0 alone makes 2, training/patches.py; untied: embedding + output)
    fsdp_table_params: int = 0
    # a one-rank preset (tiny, 0.6b) is also meant for a laptop: this machine's memory
    machine_gib: float | None = None

    # the plan's and the estimate's figures under the names the table and --json use
    variant = property(lambda self: self.plan.variant.name)
    preset = property(lambda self: self.plan.preset.name)
    layers = property(lambda self: self.plan.shape.n_layers)
    world_size = property(lambda self: self.plan.world_size)
    tp = property(lambda self: self.plan.tp)
    fsdp = property(lambda self: self.plan.fsdp)
    nnodes = property(lambda self: self.plan.nnodes)
    dp_replicate = property(lambda self: self.plan.dp_replicate)
    layout = property(lambda self: str(self.plan.layout))
    layout_reason = property(lambda self: self.plan.layout_reason)
    seq_len = property(lambda self: self.plan.seq_len)
    reduce_dtype = property(lambda self: self.plan.reduce_dtype)
    estimated_state_gib = property(lambda self: self.estimate.sharded_state_gib)
    estimated_other_gib = property(
        lambda self: self.estimate.total_gib - self.estimate.sharded_state_gib
    )
    activations_gib = property(lambda self: self.estimate.activations_gib)
    hbm_gib = property(lambda self: self.estimate.hbm_gib)

    @property
    def measured_state_gib(self) -> float:
        return self.bytes_per_rank / GIB

    @property
    def total_gib(self) -> float:
        """Measured sharded state + the estimate's other terms."""
        return self.measured_state_gib + self.estimated_other_gib

    @property
    def table_gather_gib(self) -> float:
        """bf16 bytes FSDP all-gathers for the vocabulary table per gather, on this rank's
        TP shard: one copy per FSDP parameter holding it (also what it reduce-scatters)."""
        shape = self.plan.shape
        return self.fsdp_table_params * shape.vocab_size * shape.dim / self.tp * 2 / GIB

    @property
    def usable_gib(self) -> float:
        """What a plan may use: 90% of the core's HBM (training/memory.py)."""
        return self.hbm_gib * RUN_HBM_SHARE

    @property
    def fits(self) -> bool:
        return self.total_gib <= self.usable_gib

    @property
    def fits_machine(self) -> bool | None:
        """For a one-rank preset: whether one CPU rank of it fits this machine's memory."""
        return None if self.machine_gib is None else self.total_gib < self.machine_gib

    def to_json(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in JSON_FIELDS}
        data["estimate"] = self.estimate.row()
        data.update(
            measured_state_gib=round(self.measured_state_gib, 3),
            total_gib=round(self.total_gib, 2),
            usable_gib=round(self.usable_gib, 2),
            table_gather_gib=round(self.table_gather_gib, 3),
            fits=self.fits,
            fits_machine=self.fits_machine,
        )
        return data

    def rows(self) -> list[dict[str, object]]:
        return [
            {"": "preset / variant", "value": f"{self.preset} / {self.variant}"},
            {"": "layers", "value": self.layers},
            {"": "ranks (simulated)", "value": self.world_size},
            {"": "nodes", "value": self.nnodes},
            {"": "layout", "value": self.layout},
            {"": "parameters, whole model", "value": self.params_total},
            {"": "parameters on rank 0", "value": self.params_per_rank},
            {"": "params+grads+AdamW, measured GiB", "value": round(self.measured_state_gib, 3)},
            {"": "params+grads+AdamW, estimated GiB", "value": round(self.estimated_state_gib, 3)},
            {
                "": f"activations at seq {self.seq_len}, estimated GiB",
                "value": round(self.activations_gib, 2),
            },  # fmt: skip
            {"": "total per rank GiB (measured + estimated)", "value": round(self.total_gib, 2)},
            {"": "HBM per logical core GiB", "value": self.hbm_gib},
            {"": "usable by a plan (90% of HBM) GiB", "value": round(self.usable_gib, 2)},
            {"": "fits", "value": self.fits},
            {"": "FSDP parameters of vocabulary rows", "value": self.fsdp_table_params},
            *(
                [
                    {"": "this machine's memory GiB", "value": round(self.machine_gib, 1)},
                    {"": "fits this machine (one CPU rank)", "value": self.fits_machine},
                ]
                if self.machine_gib is not None
                else []
            ),
            {"": "build / one step, s", "value": f"{self.build_s:.1f} / {self.step_s:.1f}"},
        ]


def _local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def _mesh_dims(p) -> str:
    """The DTensor's mesh dimensions as "(name size, ...)", matching its placements."""
    mesh = getattr(p, "device_mesh", None)
    if mesh is None:
        return "-"
    names = mesh.mesh_dim_names or tuple(f"dim{i}" for i in range(mesh.ndim))
    return "(" + ", ".join(f"{n} {k}" for n, k in zip(names, mesh.shape, strict=True)) + ")"


def measure_rank_state(trainer) -> tuple[int, int, int, list[dict[str, Any]]]:
    """(parameters of the whole model, parameters on this rank, bytes of params + grads +
    optimizer state on this rank, a few parameters' placements and local shapes)."""
    total = local = nbytes = 0
    shards = []
    for part in trainer.model_parts:
        for name, p in part.named_parameters():
            total += p.numel()
            data = _local(p)
            local += data.numel()
            nbytes += data.numel() * data.element_size()
            if p.grad is not None:
                g = _local(p.grad)
                nbytes += g.numel() * g.element_size()
            if len(shards) < 6 and ("layers.0." in name or "tok_embeddings" in name):
                shards.append(
                    {
                        # the activation-checkpoint wrapper's level adds nothing here
                        "parameter": name.replace("_checkpoint_wrapped_module.", ""),
                        "global shape": tuple(p.shape),
                        # one placement per mesh dimension, in this order
                        "mesh dims": _mesh_dims(p),
                        "placements": str(getattr(p, "placements", "-")),
                        "local shape": tuple(data.shape),
                    }
                )
    for optimizer in trainer.optimizers.optimizers:
        for state in optimizer.state.values():
            for value in state.values():
                if hasattr(value, "numel") and value.numel() > 1:
                    v = _local(value)
                    nbytes += v.numel() * v.element_size()
    return total, local, nbytes, shards


def dry_run(
    spec: RunSpec,
    *,
    layers: int | None = None,
    step_seq_len: int = DRY_RUN_SEQ_LEN,
    isolate: bool | None = None,
) -> DryRunReport:
    """Build ``spec``'s trn2 configuration on the CPU, rank 0 of its world, and step once.

    The run is the one a trn2 would make of ``spec`` (:func:`~..training.spec.on_trn2`:
    the named preset, else the variant's full-size one, on its ranks per node; the
    one-rank presets, tiny and 0.6b, on one NeuronCore, and the report also sets the
    total beside this machine's memory, since those presets train on a laptop's CPU
    too); ``spec.nnodes`` nodes of those (HSDP across them) make the world. ``layers``
    keeps the layout but builds fewer layers (a quick check of the 30B-A3B layout). On
    trn2 (or with ``isolate=True``) the dry run happens in a child process, so a
    notebook kernel never builds a trainer itself.
    """
    from ..model.config_check import within
    from ..runs import child

    if layers is not None:  # (1,000,000 layers had built for minutes without a word)
        within("num_hidden_layers", layers, "--layers")
    if child.isolated(isolate):
        return child.call(dry_run, spec, layers=layers, step_seq_len=step_seq_len, isolate=False)
    from ..training.patches import fsdp_table_parameters
    from ..training.trainer import trainer_session

    spec = on_trn2(spec.replace(out=spec.out or "runs/dry-run", steps=1))
    shape = None
    if layers is not None:
        shape = dataclasses.replace(PRESETS[spec.preset].shape, n_layers=layers)
    trn2 = plan_run(spec, device_type="neuron", shape=shape)  # what a trn2.48xlarge runs
    estimate = trn2.memory()
    # The same run on this CPU, planned as such: same preset, layout, checkpointing and
    # attention; the embedded corpus instead of C4 (no hub), a short step.
    # (a dry run launches nothing: planning's launch checks, an endpoint for several
    # nodes and a folder for several ranks, get placeholders no process ever uses)
    here = plan_run(
        spec.replace(
            device="cpu", seq_len=step_seq_len, corpus="embedded", attention=trn2.attention,
            rdzv_endpoint=spec.rdzv_endpoint or "dry-run.invalid:29500",
            out=spec.out or "dry-run",
        ),
        shape=shape,
    )  # fmt: skip
    with patch.dict(os.environ, NGPU=str(trn2.world_size)), tempfile.TemporaryDirectory() as out:
        started = time.perf_counter()
        # one step of rank 0's shard: glibc's defaults (kept freed memory would double the
        # 30B-A3B dry run's peak, 4.2 -> 9.3 GB, and save nothing; training/host_memory.py)
        with trainer_session(
            here, out, comm_mode="fake_backend", metrics_file="", keep_freed_memory=False
        ) as trainer:
            built = time.perf_counter()
            trainer.train()
            stepped = time.perf_counter()
            total, local, nbytes, shards = measure_rank_state(trainer)
            table_params = fsdp_table_parameters(trainer.model_parts)
    return DryRunReport(
        plan=trn2,
        estimate=estimate,
        step_seq_len=step_seq_len,
        params_total=total,
        params_per_rank=local,
        bytes_per_rank=nbytes,
        build_s=built - started,
        step_s=stepped - built,
        shards=shards,
        fsdp_table_params=table_params,
        machine_gib=None if trn2.preset.full_size else machine_memory_gib(),
    )


def machine_memory_gib() -> float | None:
    """This machine's physical memory (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB
    except (ValueError, OSError, AttributeError):
        return None
