"""Exceptions for mistakes a user can fix.

Every error raised on purpose by this package is a :class:`Qwen3TrnError`, so the CLI can
print one ``error: ...`` line for it (and a notebook a short message) instead of a
traceback from deep inside torchtitan. Each message names what was wrong, the value seen,
and what to do about it.
"""

from __future__ import annotations

import contextvars
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager


class Qwen3TrnError(Exception):
    """Base class: a problem with the user's input or environment, not a bug.

    A message names a run option the way the command line does (``--out``, ``--resume
    auto``); shown in Python (a notebook, ``run(...)``), it names the argument instead
    (``out``, ``resume="auto"``): see :func:`in_python_words`. ``args[0]`` keeps the
    command line's words, which a child process prints for its parent to raise again."""

    def __str__(self) -> str:
        text = super().__str__()
        return text if _CLI_FACE.get() else in_python_words(text)


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


# ------------------------------------------------ an option's name, on either face

#: whether this process (or this part of it) answers as the command line: cli.main sets
#: it for its duration; anything else (a notebook, a script calling run()) is Python
_CLI_FACE: contextvars.ContextVar[bool] = contextvars.ContextVar("qwen3_trn_cli", default=False)
#: flag -> (the Python argument, whether it stands alone as True, the words it takes as a
#: value); filled by the
#: modules that own the options (training/spec.py: every RunSpec field), so this module
#: needs none of them
_OPTIONS: dict[str, tuple[str, bool, tuple[str, ...]]] = {}
#: a flag and the word after it; a code span or a command example is left as written
_KEPT = re.compile(r"`[^`]*`|qwen3-trn [^`)\"';]*")
_FLAG = re.compile(
    r"(?<![\w-])--([a-z][a-z0-9-]*)(?![\w=])(?: (?P<word>[^\s,;:)(]+?)(?=[.]?(?:[\s,;:)]|$)))?"
)
_NUMBER = re.compile(r"-?\d[\d_]*(\.\d+)?(e-?\d+)?")


def register_options(options: Mapping[str, tuple[str, bool, tuple[str, ...]]]) -> None:
    """Options messages may name: ``{"--out": ("out", False, ()), "--overwrite":
    ("overwrite", True, ()), "--resume": ("resume", False, ("auto",))}``."""
    _OPTIONS.update(options)


@contextmanager
def cli_face() -> Iterator[None]:
    """Errors shown inside name options as the command line does (``--overwrite``)."""
    token = _CLI_FACE.set(True)
    try:
        yield
    finally:
        _CLI_FACE.reset(token)


def in_python_words(message: str) -> str:
    """``message`` with each registered ``--flag`` as the Python argument it is: a switch
    as ``overwrite=True``, a flag with a value as ``resume="auto"`` or
    ``checkpoint_interval=N``, a flag named alone as its bare name (``out``). Flags of
    other tools, code spans and ``qwen3-trn ...`` examples stay as they are."""

    def argument(match: re.Match[str]) -> str:
        known = _OPTIONS.get(f"--{match[1]}")
        if known is None:
            return match[0]
        name, switch, choices = known
        word = match["word"]
        rest = f" {word}" if word is not None else ""
        bare = word.strip("'\"") if word is not None else None
        if bare is not None and bare in choices:
            return f'{name}="{bare}"'
        if switch:  # a flag that stands alone (--overwrite; --resume without auto)
            return f"{name}=True{rest}"
        if word is None:
            return name
        if _NUMBER.fullmatch(word) or (word.isupper() and any(c.isalpha() for c in word)):
            return f"{name}={word}"  # a number, or a placeholder such as N or HOST:PORT
        if "/" in word or word[:1] in "'\"":
            return f'{name}="{bare}"'
        return name + rest

    out, at = [], 0
    for kept in _KEPT.finditer(message):
        out += [_FLAG.sub(argument, message[at : kept.start()]), kept[0]]
        at = kept.end()
    out.append(_FLAG.sub(argument, message[at:]))
    return "".join(out)
