"""Every child process this package starts: one way to start it, stop it, and report it.

Training launches (torchrun and its ranks), the smoke ladder's rungs, the lessons that
must keep a notebook kernel off the Neuron runtime, torchtitan's own entry point and
AWS's fork all run Python in another process. They share three needs, met here once:

- **Nothing outlives a stop.** The child starts in a session of its own, and any way
  this process stops waiting (Ctrl-C, SIGTERM turned into :class:`~..errors.Terminated`,
  a timeout) signals the child's whole process group: torchrun's workers and whatever
  holds NeuronCores end with it. A ``kill -9`` of this process runs no handler, so a
  Python child (``-m`` or ``-c``) runs under runs/lifeline.py's watch of its parent and
  stops itself once orphaned (a SIGKILLed smoke ladder had left its compile rung's
  ``train`` running).
- **Output goes to a file**, never an unread pipe that fills and blocks the child.
- **One error line**: the child's own ``error: ...`` line if it printed one (our CLI
  does), else its last line naming an Error, else its exit status; with the log's path.

:func:`call` runs one of our functions in a child and returns what it returns (pickled),
or raises the error it raised: a notebook on trn2 thus never starts the Neuron runtime.
"""

from __future__ import annotations

import os
import pickle
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import Qwen3TrnError, Terminated, TrainingError
from .neuron_cores import one_process_share_environment


@dataclass
class ChildResult:
    command: list[str]
    returncode: int | None  # None: stopped at its timeout
    pid: int
    seconds: float
    log: Path
    output: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    def error_line(self) -> str:
        """What went wrong, in one line (the child's own words where it gave them)."""
        if self.timed_out:
            return f"no answer within {self.seconds:.0f} s"
        lines = [ln.strip() for ln in self.output.splitlines() if ln.strip()]
        ours = [ln.removeprefix("error: ") for ln in lines if ln.startswith("error: ")]
        if ours:
            return ours[-1]
        errors = [ln for ln in lines if "Error" in ln]
        return errors[-1] if errors else f"exit status {self.returncode}"

    def check(self, what: str) -> ChildResult:
        """Self if the child succeeded; else a TrainingError: ``what``, the line, the log."""
        if not self.ok:
            raise TrainingError(f"{what} failed: {self.error_line()} (log: {self.log})")
        return self


def stop_process_group(
    proc: subprocess.Popen, grace_s: float = 30, first: signal.Signals = signal.SIGTERM
) -> None:
    """Stop a child started in its own session and everything it started.

    torchrun's workers (and the Neuron runtime's hold on their NeuronCores) outlive a
    kill of torchrun alone; signalling the whole process group ends them too. ``first``
    is the signal the group sees (SIGINT after a Ctrl-C, so a run's run.json says
    "interrupted"), then SIGKILL for whatever is left after ``grace_s``.
    """
    if proc.poll() is not None:
        return
    for sig, wait_s in ((first, grace_s), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def run_child(
    command: Sequence[str],
    *,
    log: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    while_running: Callable[[subprocess.Popen], None] | None = None,
    grace_s: float = 30,
) -> ChildResult:
    """Run ``command`` to its end (or its timeout); its output lands in ``log``.

    ``while_running(proc)`` is called about every 0.2 s (and once more at the end): a
    launch reads metrics.jsonl there to report steps as they come. Whatever interrupts
    the wait stops the child's whole process group first, then propagates.
    """
    from .lifeline import watched

    command = watched([os.fspath(c) for c in command])
    if log is None:
        fd, name = tempfile.mkstemp(prefix="qwen3-trn-child-", suffix=".log")
        os.close(fd)
        log = Path(name)
    started = time.monotonic()
    with open(log, "w") as out:
        out.write(f"$ {shlex.join(command)}\n")
        out.flush()
        proc = subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        timed_out = False
        try:
            while True:
                done = proc.poll() is not None
                if while_running is not None:
                    while_running(proc)
                if done:
                    break
                if timeout is not None and time.monotonic() - started > timeout:
                    timed_out = True
                    stop_process_group(proc, grace_s=grace_s)
                    break
                time.sleep(0.2)
        except BaseException as e:
            ctrl_c = isinstance(e, KeyboardInterrupt) and not isinstance(e, Terminated)
            stop_process_group(
                proc, grace_s=grace_s, first=signal.SIGINT if ctrl_c else signal.SIGTERM
            )
            raise
    return ChildResult(
        command=command,
        returncode=None if timed_out else proc.returncode,
        pid=proc.pid,
        seconds=round(time.monotonic() - started, 1),
        log=log,
        output=log.read_text(errors="replace"),
    )


_CALL = """
import importlib, pickle, sys
with open(sys.argv[1], "rb") as f:
    module, name, args, kwargs = pickle.load(f)
try:
    outcome = (True, getattr(importlib.import_module(module), name)(*args, **kwargs))
except BaseException as e:
    import traceback
    try:
        pickle.dumps(e)
        error = e
    except Exception:
        error = RuntimeError(f"{type(e).__name__}: {e}")
    outcome = (False, (error, traceback.format_exc()))
with open(sys.argv[2], "wb") as f:
    pickle.dump(outcome, f)
"""


def call(
    function: Callable[..., Any],
    *args: Any,
    timeout: float = 3600,
    env: dict[str, str] | None = None,
    **kwargs: Any,
) -> Any:
    """``function(*args, **kwargs)`` in a child Python process: its value, or its error.

    A module-level function of ours, with picklable arguments and result (dataclasses
    and dicts are): the child imports it by name. Our own errors come back as they are
    (a ConfigError stays a ConfigError with its message); a crash without one becomes a
    TrainingError naming the function, the line and the log. ``env``: the child's
    environment (default: this one). A class's share of a trn2 gives the child the
    share's first NeuronCore.
    """
    what = f"{function.__module__}.{function.__qualname__}"
    with tempfile.TemporaryDirectory(prefix="qwen3-trn-call-") as tmp:
        request, reply = Path(tmp) / "call.pkl", Path(tmp) / "reply.pkl"
        with open(request, "wb") as f:
            pickle.dump((function.__module__, function.__qualname__, args, kwargs), f)
        env = one_process_share_environment(dict(os.environ if env is None else env))
        result = run_child(
            [sys.executable, "-c", _CALL, str(request), str(reply)],
            log=Path(tmp) / "child.log", env=env, timeout=timeout,
        )  # fmt: skip
        if not reply.exists():
            tail = "\n".join(result.output.splitlines()[-12:])
            raise TrainingError(
                f"{what} failed in its child process: {result.error_line()}\n{tail}"
            )
        with open(reply, "rb") as f:
            succeeded, value = pickle.load(f)
    if succeeded:
        return value
    error, trace = value
    if isinstance(error, (Qwen3TrnError, KeyboardInterrupt)):
        raise error
    raise TrainingError(f"{what} failed in its child process:\n{trace.rstrip()}")


def isolated(isolate: bool | None) -> bool:
    """``isolate`` if given; else whether this process sees Neuron (so: only on trn2).

    A few lessons build a torchtitan Trainer on the CPU inside the notebook (parity, the
    initial loss, the dry run). On trn2 the kernel has torch-neuronx loaded, and anything
    touching a NeuronCore there would start the Neuron runtime, which keeps every core
    until the kernel exits and makes torch-neuronx refuse later process groups; so there
    those functions run through :func:`call`.
    """
    if isolate is not None:
        return isolate
    from ..device import neuron_available

    return neuron_available()


def kernel_holds_no_neuroncore() -> bool:
    """True unless neuron-ls lists this process among those holding NeuronCores."""
    from ..device import neuron_ls

    pid = os.getpid()
    for device in neuron_ls() or []:
        if any(p.get("pid") == pid for p in device.get("neuron_processes") or []):
            return False
    return True
