"""Exceptions for mistakes a user can fix.

Every error raised on purpose by this package is a :class:`Qwen3TrnError`, so the CLI can
print one ``error: ...`` line for it (and a notebook a short message) instead of a
traceback from deep inside torchtitan. Each message names what was wrong, the value seen,
and what to do about it.
"""

from __future__ import annotations

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


class Interrupted(KeyboardInterrupt):
    """A stop (Ctrl-C; SIGTERM is :class:`Terminated`) that says what the run folder
    holds, when the process that caught it knows: ``held``, the terminal's last line (a
    launch names the steps metrics.jsonl holds and the checkpoint; None: not known)."""

    def __init__(self, *args: object, held: str | None = None) -> None:
        super().__init__(*args)
        self.held = held


class Terminated(Interrupted):
    """SIGTERM (``timeout``, Slurm's ``scancel``, Kubernetes) arrived: stop as Ctrl-C does.

    A KeyboardInterrupt, so that every place that ends a run's processes and records
    what finished on Ctrl-C does the same for SIGTERM; run.json then says "terminated".
    """


#: the stop signals this process received (see :func:`stop_signal`)
_received: list[int] = []


def stop_signal() -> int | None:
    """The first SIGINT/SIGTERM this process received inside :func:`terminate_on_sigterm`,
    or that a run's stop request recorded (:func:`note_stop`).

    Why: a Ctrl-C that lands inside a collective (a checkpoint save on several ranks)
    can surface as another error (DCP's write error on the rank whose peer stopped), and
    a SIGTERM during a first compiled step as a compile error naming the compile cache
    (its compiler processes got the signal too); a run that was asked to stop is
    "interrupted" or "terminated" whatever error its stop caused."""
    return _received[0] if _received else None


def note_stop(signum: int) -> None:
    """Remember a stop signal that a handler other than :func:`terminate_on_sigterm`'s
    took (training/stopping.py's, which saves a checkpoint first), for
    :func:`stop_signal`."""
    _received.append(signum)


def forget_stops() -> None:
    """Forget the stop signals seen so far: a new run in this process starts unstopped
    (a notebook kernel trains again after a stopped run)."""
    _received.clear()


def stop_error(signum: int | None) -> KeyboardInterrupt:
    """What a stop by ``signum`` raises: :class:`Terminated` for SIGTERM, else a
    KeyboardInterrupt (Ctrl-C, or a stop that reached this rank from another)."""
    import signal

    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


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
