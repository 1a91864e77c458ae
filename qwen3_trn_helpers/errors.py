"""Exceptions for mistakes a user can fix.

Every error raised on purpose by this package is a :class:`Qwen3TrnError`, so the CLI can
print one ``error: ...`` line for it (and a notebook a short message) instead of a
traceback from deep inside torchtitan. Each message names what was wrong, the value seen,
and what to do about it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


class Qwen3TrnError(Exception):
    """Base class: a problem with the user's input or environment, not a bug."""


class ConfigError(Qwen3TrnError, ValueError):
    """An argument or config value is invalid (unknown variant, steps <= 0, ...)."""


class AssetError(Qwen3TrnError):
    """A tokenizer, corpus or checkpoint file is missing, corrupt or mismatched."""


class DeviceError(Qwen3TrnError):
    """The requested device is not available on this machine."""


class TrainingError(Qwen3TrnError):
    """Training stopped because the numbers went bad (for example a NaN loss)."""

    def __init__(self, message: str, *, step: int | None = None) -> None:
        super().__init__(message)
        self.step = step


class RunFolderError(Qwen3TrnError):
    """The output folder already holds another run's metrics."""


class NonFiniteLoss(TrainingError):
    """The loss became NaN or infinite; training stopped at that step."""

    def __init__(self, step: int, value: float) -> None:
        super().__init__(
            f"loss became {value} at step {step}; stopped there, metrics.jsonl holds every "
            "step before it. Lower --lr, or check the corpus and the checkpoint",
            step=step,
        )
        self.value = value


class Terminated(KeyboardInterrupt):
    """SIGTERM (``timeout``, Slurm's ``scancel``, Kubernetes) arrived: stop as Ctrl-C does.

    A KeyboardInterrupt, so that every place that ends a run's processes and records
    what finished on Ctrl-C does the same for SIGTERM; run.json then says "terminated".
    """


def disk_full(error: BaseException) -> str | None:
    """The file a full disk (or quota) refused, "" where unnamed, None if that is not
    what ``error`` or an error it came from is. Libraries wrap it (torch's checkpoint
    writer raises its own exception, with the OSError's text inside), so the chain and
    the text are both looked at: a full disk must be one line naming the fix, not an
    "unexpected" error."""
    import errno

    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
            return str(error.filename or "")
        text = str(error)
        if os.strerror(errno.ENOSPC) in text or os.strerror(errno.EDQUOT) in text:
            return ""
        error = error.__cause__ or error.__context__
    return None


#: the stop signals this process received (see :func:`stop_signal`)
_received: list[int] = []


def stop_signal() -> int | None:
    """The first SIGINT/SIGTERM this process received inside :func:`terminate_on_sigterm`.

    Why: a Ctrl-C that lands inside a collective (a checkpoint save on several ranks)
    can surface as another error (DCP's write error on the rank whose peer stopped);
    a run that was asked to stop is "interrupted" whatever error its stop caused."""
    return _received[0] if _received else None


@contextmanager
def terminate_on_sigterm() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` in the main thread while inside (else nothing);
    SIGINT stays a KeyboardInterrupt. Both are remembered (:func:`stop_signal`)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigterm(signum, frame):
        _received.append(signum)
        raise Terminated(f"signal {signum}")

    def on_sigint(signum, frame):
        _received.append(signum)
        if callable(previous_int):
            previous_int(signum, frame)  # Python's default: KeyboardInterrupt
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    previous_int = signal.getsignal(signal.SIGINT)
    if previous_int is signal.SIG_IGN:  # started in the background: leave it ignored
        previous_int = None
    else:
        signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        if previous_int is not None:
            signal.signal(signal.SIGINT, previous_int)
        _received.clear()


#: what a rank, or the launch on a node, says when another node of its job went away
PEER_LOST = (
    "another rank of the job stopped or became unreachable (a node stopped, failed or "
    "lost its network); metrics.jsonl holds every completed step: --resume from the "
    "last checkpoint once every node runs again"
)
