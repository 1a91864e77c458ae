"""Launched ranks live no longer than the command that launched them, and hold its folder.

``qwen3-trn train --nproc 2`` (or ``run(nproc=2)`` in a notebook) starts torchrun, which
starts the ranks. A ``kill -9`` of that command leaves torchrun and the ranks running
(reparented to init): they trained on, and wrote checkpoints into a folder a new run had
meanwhile been given, because the folder's lock went with the killed command. Two
mechanisms, both plain POSIX, so Linux and macOS alike (Linux's PR_SET_PDEATHSIG has no
macOS counterpart, and would fire on the death of torchrun's thread, not the launcher):

- **A parent watch.** The launcher puts its pid into each rank's environment
  (:data:`LAUNCHER_ENV`); every rank checks about twice a second that the launcher and
  its own parent (torchrun) are still there. When either is gone, local rank 0 sends
  SIGTERM to torchrun (which stops every other rank, as on a Ctrl-C, and exits) and
  every rank to itself, so run.json says ``terminated``.
- **A lock every rank holds.** Each rank of a one-node run holds a shared ``flock`` on
  :data:`RANKS_LOCK` in the run folder for its whole life; a writer about to take the
  folder over (a new run, ``--overwrite``, ``--resume``) first takes it exclusively,
  which the kernel refuses while any rank of an earlier run lives.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

from ..errors import RunFolderError

#: the launching process's pid, as each launched rank sees it
LAUNCHER_ENV = "QWEN3_TRN_LAUNCHER_PID"
#: held shared by every live rank of a one-node run (see the module's docstring)
RANKS_LOCK = ".qwen3-trn.ranks.lock"
POLL_S = 0.5

_held: list[int] = []  # this process's shared lock (kept open until it exits)


def launcher_environment(env: dict[str, str]) -> dict[str, str]:
    """``env`` for torchrun and its ranks: names this process as their launcher."""
    return {**env, LAUNCHER_ENV: str(os.getpid())}


def process_alive(pid: int) -> bool:
    """Whether a process with ``pid`` exists (ours or another user's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def bind_rank(out: Path | None, *, hold_folder: bool) -> None:
    """In a launched rank: hold ``out`` (shared) while this rank lives, then stop this rank
    and its torchrun as soon as the launcher or torchrun is gone.

    The lock comes first and the launcher check second: a rank that starts after its
    launcher died, while a new run may already hold the folder, stops before it writes.
    """
    launcher = os.environ.get(LAUNCHER_ENV)
    if hold_folder and out is not None and not _held:
        _held.append(_lock(Path(out), shared=True, blocking=True))
    if not launcher or not launcher.isdigit():
        return  # started by hand (torchrun ... qwen3-trn train): nothing to watch
    launcher_pid, torchrun_pid = int(launcher), os.getppid()
    if not process_alive(launcher_pid):
        _stop(launcher_pid, torchrun_pid)
    threading.Thread(
        target=_watch, args=(launcher_pid, torchrun_pid), name="qwen3-trn-lifeline", daemon=True
    ).start()


def _watch(launcher_pid: int, torchrun_pid: int) -> None:
    while process_alive(launcher_pid) and os.getppid() == torchrun_pid:
        time.sleep(POLL_S)
    _stop(launcher_pid, torchrun_pid)


def _stop(launcher_pid: int, torchrun_pid: int) -> None:
    """SIGTERM to torchrun (it stops the other ranks) and to this rank."""
    print(
        f"error: the command that launched this run (pid {launcher_pid}) is gone; stopping "
        "this run's ranks",
        file=sys.stderr,
        flush=True,
    )
    # one rank tells torchrun (twice would interrupt its own shutdown); each stops itself
    from ..training.ranks import rank_place

    first = rank_place().local_rank == 0
    if first and os.getppid() == torchrun_pid and torchrun_pid > 1:
        try:
            os.kill(torchrun_pid, signal.SIGTERM)
        except OSError:
            pass
    os.kill(os.getpid(), signal.SIGTERM)
    if threading.current_thread() is not threading.main_thread():
        time.sleep(20)  # the main thread stuck in a collective never ran its handler
        os._exit(128 + signal.SIGTERM)


def _lock(folder: Path, *, shared: bool, blocking: bool) -> int:
    """An open descriptor of ``folder``/RANKS_LOCK with a flock taken on it."""
    import fcntl

    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / RANKS_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    mode = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if blocking else fcntl.LOCK_NB)
    try:
        fcntl.flock(fd, mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_no_live_ranks(folder: Path) -> None:
    """Refuse ``folder`` while a rank of an earlier run still holds it (the caller
    holds the folder's own lock, so no new rank of another run can start meanwhile)."""
    try:
        fd = _lock(folder, shared=False, blocking=False)
    except BlockingIOError:
        raise RunFolderError(
            f"{folder} is still being written by ranks of an earlier run whose launching "
            "command is gone; they stop within seconds: run again then, or choose another "
            "--out"
        ) from None
    except ImportError:  # no flock (native Windows): nothing to check
        return
    os.close(fd)


def watched(command: list[str]) -> list[str]:
    """``python -m MODULE ARGS`` or ``python -c CODE ARGS`` run under a watch of this
    process: killed outright (``kill -9``), we take the child along, even torchrun while
    its nodes still meet, before any rank exists to notice. Only this interpreter's
    commands: another one (the Neuron venv's, which runs AWS's fork) lacks this package.
    Anything else, or a command already watched, is returned as it is."""
    if (
        len(command) < 3
        or command[0] != sys.executable
        or command[1] not in ("-m", "-c")
        or command[2] == __name__
    ):
        return command
    python, flag, target, *args = command
    if flag == "-m":
        return [python, "-m", __name__, target, *args]
    return [python, "-m", __name__, "-c", target, *args]


def _main() -> None:
    """``python -m qwen3_trn_helpers.runs.lifeline MODULE ARGS`` (or ``-c CODE ARGS``):
    run MODULE (or CODE) as ``python -m`` (``-c``) would, and SIGTERM it (then exit)
    once its parent is gone."""
    import runpy

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(POLL_S)
        os.kill(os.getpid(), signal.SIGTERM)  # torchrun stops its ranks on SIGTERM
        time.sleep(10)
        os._exit(128 + signal.SIGTERM)  # stuck in C++ (a store that never answers)

    threading.Thread(target=watch, name="qwen3-trn-lifeline", daemon=True).start()
    if sys.argv[1] == "-c":
        code = sys.argv[2]
        sys.argv = ["-c", *sys.argv[3:]]
        exec(compile(code, "<string>", "exec"), {"__name__": "__main__"})  # noqa: S102
        return
    module = sys.argv[1]
    sys.argv = [module, *sys.argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    _main()
