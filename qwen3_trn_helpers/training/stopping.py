"""Stop at a step's end with a checkpoint: on SIGTERM, or when asked to save and stop.

Why: a preempted or requeued job (Slurm's ``scontrol requeue``, its preemption, a
Kubernetes pod's eviction) is sent SIGTERM and, a grace time later, SIGKILL. Raising at
once (what Ctrl-C does) loses every step since the last periodic checkpoint. While a
run that saves checkpoints trains, SIGTERM instead only records the request; the
trainer checks it at the end of each step, all ranks agree (one small all-reduce: the
signal may reach the ranks of a job in different steps), the step's checkpoint is saved
and the run ends as "terminated". The requeued or restarted command, run with
``--resume auto``, continues from that step.

That grace is short: torchrun stops its workers 30 s after its own SIGTERM (torch's
``elastic/multiprocessing/api.py``, ``PContext.close(timeout=30)``) and Slurm's
``KillWait`` defaults to 30 s (slurm.conf), so on SIGTERM only a save that fits in
~30 s survives. A checkpoint of Qwen3-4B with AdamW is ~48 GB and of 30B-A3B ~370 GB:
they need the time-limit warning instead (``#SBATCH --signal=B:USR1@LEAD``). The job
script turns that warning into a **save-and-stop request**: it creates
:data:`STOP_FILE` in the run folder (shared storage every rank sees); rank 0 looks for
it at each step's end, the same all-reduce tells every rank, the step is saved, and
every rank exits cleanly (status 0, run.json ``stopped``), so torchrun restarts
nothing and the script requeues the job. A user can do the same by hand
(``touch OUT/save-and-stop``). How long a save takes, and so how early the warning must
come, is :func:`signal_lead_s`.

Cheap to import (the job files use it): no torch at module level.
"""

from __future__ import annotations

import math
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import note_stop, stop_error

#: in a run folder: ask the run to save its current step and stop cleanly
STOP_FILE = "save-and-stop"

#: a checkpoint's bytes per parameter: fp32 weights (FSDP2's master copy) and AdamW's
#: two fp32 moments (training/memory.py); the dataloader and scheduler add kilobytes
CHECKPOINT_BYTES_PER_PARAMETER = 4 + 8

#: MB/s an FSx for Lustre file system writes, as AWS's own samples provision it:
#: awsome-distributed-training's ParallelCluster prerequisites template creates 1,200
#: GiB of PERSISTENT_2 at 250 MB/s/TiB; FSx's throughput is storage (TiB) x that
#: per-unit figure, and a write runs at the lower of its network and disk throughput,
#: both that figure for PERSISTENT_2 (FSx for Lustre User Guide, "Performance
#: characteristics of SSD and HDD storage classes", "Managing throughput capacity").
#: A bigger or faster file system saves faster: the lead time below is then generous.
FSX_SAMPLE_WRITE_MB_S = 1200 / 1024 * 250  # 293 MB/s
#: a save's estimate is multiplied by this: other jobs write to the same file system,
#: and burst credits run out (FSx bursts reads, not writes, above the baseline)
SAVE_SAFETY = 1.5
#: seconds on top of the save for the step in flight when the warning comes, the
#: ranks' exit and the requeue (a trn2 step of the full-size presets takes seconds)
STOP_MARGIN_S = 120
#: the least warning a job file asks for (what it asked for before any size was known)
MIN_SIGNAL_LEAD_S = 300
#: Slurm accepts at most this lead (sbatch --signal: 0 to 65535 seconds)
MAX_SIGNAL_LEAD_S = 65535
#: torchtitan's own collective timeout after the first step (comm.train_timeout_seconds)
TORCHTITAN_TRAIN_TIMEOUT_S = 100


def checkpoint_bytes(parameters: int) -> int:
    """Bytes of a training checkpoint of a model with ``parameters`` parameters."""
    return parameters * CHECKPOINT_BYTES_PER_PARAMETER


def save_seconds(nbytes: int, write_mb_s: float = FSX_SAMPLE_WRITE_MB_S) -> float:
    """Seconds every rank together needs to write ``nbytes`` at ``write_mb_s``."""
    if write_mb_s <= 0:
        raise ValueError(f"write throughput must be positive, got {write_mb_s}")
    return nbytes / (write_mb_s * 1e6)


def signal_lead_s(nbytes: int, write_mb_s: float = FSX_SAMPLE_WRITE_MB_S) -> int:
    """How many seconds before the time limit a job must be warned to save ``nbytes``.

    The save with :data:`SAVE_SAFETY`, plus :data:`STOP_MARGIN_S`, rounded up to a
    whole minute, at least :data:`MIN_SIGNAL_LEAD_S` and at most what Slurm accepts.
    """
    needed = save_seconds(nbytes, write_mb_s) * SAVE_SAFETY + STOP_MARGIN_S
    lead = math.ceil(needed / 60) * 60
    return min(max(lead, MIN_SIGNAL_LEAD_S), MAX_SIGNAL_LEAD_S)


def collective_timeout_s(nbytes: int, write_mb_s: float = FSX_SAMPLE_WRITE_MB_S) -> int:
    """A collective timeout no save of ``nbytes`` trips.

    torchtitan lowers every process group's timeout to ``comm.train_timeout_seconds``
    (100 s) after the first step; a synchronous save ends in a collective (rank 0
    gathers every rank's write results before writing ``.metadata``), so the ranks that
    finish writing first wait there for the slowest: a save longer than the timeout
    would fail the job. Twice the estimate and a minute, never below torchtitan's 100 s.
    """
    return max(TORCHTITAN_TRAIN_TIMEOUT_S, math.ceil(2 * save_seconds(nbytes, write_mb_s) + 60))


class StopRequest:
    """Set by the signal handler or the stop file; read by the trainer at each step's end.

    ``stop_file``: the run folder's :data:`STOP_FILE`, looked for by the rank given it
    (rank 0); None on the other ranks, which learn of it through :meth:`agree`.
    """

    def __init__(self, stop_file: Path | None = None) -> None:
        self.signal: int | None = None
        self.stop_file = stop_file
        #: whether stopping now loses no step (none trained in this process yet: set by
        #: the caller, runs/here.py): a signal then stops at once instead of at the end
        #: of a step that may take minutes to compile
        self.nothing_to_save: Callable[[], bool] | None = None
        #: after :meth:`agree` said stop: asked through the stop file (a clean stop),
        #: not by a signal (the job is being torn down)
        self.clean = False

    @property
    def requested(self) -> bool:
        return self.signal is not None

    def asked_by_file(self) -> bool:
        """Whether the stop file exists (a stat on shared storage, once a step)."""
        return self.stop_file is not None and self.stop_file.exists()

    def agree(self, device: str | None = None) -> bool:
        """Whether any rank was asked to stop; every rank gets the same answer, and
        ``clean`` says whether only the stop file asked (no rank got a signal)."""
        by_signal, by_file = agreed((self.requested, self.asked_by_file()), device)
        self.clean = by_file and not by_signal
        return by_signal or by_file

    def consume(self) -> None:
        """Remove the stop file once its request is done (the next run must not stop)."""
        if self.stop_file is not None:
            self.stop_file.unlink(missing_ok=True)

    @contextmanager
    def on_sigterm(self) -> Iterator[StopRequest]:
        """SIGTERM records a stop request while inside (main thread only; else nothing)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return

        def handler(signum, frame):
            self.signal = signum
            note_stop(signum)  # a step this signal breaks fails as a stop (errors.stop_signal)
            if self.nothing_to_save is not None and self.nothing_to_save():
                raise stop_error(signum)  # (a first step, compiling: nothing to save yet)

        previous = signal.signal(signal.SIGTERM, handler)
        try:
            yield self
        finally:
            signal.signal(signal.SIGTERM, previous)


def agreed(local: tuple[bool, ...], device: str | None = None) -> tuple[bool, ...]:
    """For each flag: whether any rank of the job set it (one all-reduce for all)."""
    import torch
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return local
    flags = torch.tensor([1.0 if x else 0.0 for x in local], device=device)
    dist.all_reduce(flags, op=dist.ReduceOp.SUM)
    return tuple(bool(x > 0) for x in flags.tolist())
