"""Stop at a step's end with a checkpoint when the job is told to stop (SIGTERM).

Why: a preempted or requeued job (Slurm's ``scontrol requeue``, its preemption, the
signal it sends ahead of the time limit through the batch script, Kubernetes evicting
a pod) is sent SIGTERM and, a grace time later, SIGKILL. Raising at once (what Ctrl-C
does) loses every step since the last periodic checkpoint. While a run that saves
checkpoints trains, SIGTERM instead only records the request; the trainer checks it at
the end of each step, all ranks agree (one small all-reduce: the signal may reach the
ranks of a job in different steps), the step's checkpoint is saved and the run ends as
"terminated". The requeued or restarted command, run with ``--resume auto``, continues
from that step. If the grace time is shorter than a step and a save, SIGKILL ends the
run and the last periodic checkpoint is where it continues.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class StopRequest:
    """Set by the signal handler; read by the trainer at each step's end."""

    def __init__(self) -> None:
        self.signal: int | None = None

    @property
    def requested(self) -> bool:
        return self.signal is not None

    @contextmanager
    def on_sigterm(self) -> Iterator[StopRequest]:
        """SIGTERM records a stop request while inside (main thread only; else nothing)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return

        def handler(signum, frame):
            self.signal = signum

        previous = signal.signal(signal.SIGTERM, handler)
        try:
            yield self
        finally:
            signal.signal(signal.SIGTERM, previous)


def agreed(local: bool, device: str | None = None) -> bool:
    """Whether any rank of the job asked to stop (every rank gets the same answer)."""
    import torch
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return local
    flag = torch.tensor([1.0 if local else 0.0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.SUM)
    return bool(flag.item() > 0)
