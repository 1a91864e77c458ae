"""A stop signal wins over any cause found after it (issue 51, item 1).

SIGTERM of `train --nproc 2 --compile` in its first compiled step reached each rank while
inductor compiled: the compiler's processes got the signal too, and the step failed with
an error naming the compile cache. With ``--checkpoint-interval`` the rank's SIGTERM
handler (training/stopping.py) only recorded the request, so the failed step was taken
for a damaged cache: run.json said ``failed: the compile cache ... holds a damaged entry
...; delete the folder`` in 2 of 4 tries while the terminal said ``terminated``.
"""

from __future__ import annotations

import os
import signal
from types import SimpleNamespace

import pytest

from qwen3_trn_helpers.device import DEVICES
from qwen3_trn_helpers.errors import (
    AssetError,
    Terminated,
    forget_stops,
    stop_signal,
    terminate_on_sigterm,
)
from qwen3_trn_helpers.training.run_scope import _RunScope
from qwen3_trn_helpers.training.stopping import StopRequest


class _CompileKilled:
    """torchtitan's train_step as it fails when the compiler's processes were killed:
    the error names a file in the compile cache (inductor's own words)."""

    cache = ""

    def train_step(self, data_iterator) -> None:
        raise RuntimeError(
            f"CppCompileError: C++ compile error\nCommand: g++ {self.cache}/ab/cab.cpp "
            "-shared -fPIC -o ...\nOutput: g++: fatal error: Killed signal terminated program"
        )


class _Trainer(_RunScope, _CompileKilled):
    pass


@pytest.fixture
def trainer(tmp_path, monkeypatch):
    """A run scope around that failing step, as a compiled CPU run has it."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    made = _Trainer.__new__(_Trainer)
    made.cache = str(tmp_path / "inductor")
    made._local_losses, made._compiles, made.step = [], True, 1
    made._watch, made._steps_run = None, 0  # a notebook's run: no heartbeat, no watchdog
    made.config = SimpleNamespace(qwen3_trn=SimpleNamespace(device=DEVICES["cpu"]))
    made.stop_request = StopRequest()
    forget_stops()
    yield made
    forget_stops()


def test_a_compile_error_without_a_stop_is_still_named_a_cache_fault(trainer):
    with pytest.raises(AssetError, match="compile cache .* holds a damaged entry"):
        trainer.train_step(iter(()))


def test_sigterm_recorded_by_the_stop_request_wins_over_the_cache_fault(trainer):
    """The run saves checkpoints, so SIGTERM only records a stop request; the step it
    broke is a stop (``terminated``), not a damaged compile cache (before: AssetError)."""
    with trainer.stop_request.on_sigterm():
        os.kill(os.getpid(), signal.SIGTERM)
        assert trainer.stop_request.requested and stop_signal() == signal.SIGTERM
        with pytest.raises(Terminated):
            trainer.train_step(iter(()))


def test_sigint_seen_by_the_cli_wins_over_the_cache_fault(trainer, request):
    """Ctrl-C swallowed inside the compile (a library's ``except``) is still a Ctrl-C."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, previous))
    with terminate_on_sigterm():
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            pass  # (what the compile did with it)
        with pytest.raises(KeyboardInterrupt) as caught:
            trainer.train_step(iter(()))
    assert not isinstance(caught.value, Terminated)


def test_a_new_run_forgets_an_earlier_runs_stop():
    """A notebook kernel that trains again after a stopped run: the stop was that run's."""
    from qwen3_trn_helpers.errors import note_stop

    note_stop(signal.SIGTERM)
    assert stop_signal() == signal.SIGTERM
    forget_stops()
    assert stop_signal() is None


# --- a rank stopped (SIGSTOP): named where the collective times out ----------------------


def _proc(tmp_path, pid: int, state: str, parent: int, rank: str):
    entry = tmp_path / str(pid)
    entry.mkdir(parents=True)
    (entry / "stat").write_text(f"{pid} (python (x)) {state} {parent} 1 1 0 -1\n")
    (entry / "environ").write_bytes(f"LOCAL_RANK={rank}\0RANK={rank}\0".encode())


def test_a_stopped_rank_beside_this_one_is_found(tmp_path):
    import socket

    from qwen3_trn_helpers.training.ranks import stopped_ranks

    _proc(tmp_path, 4242, "T", os.getppid(), "1")  # stopped, torchrun's: found
    _proc(tmp_path, 4243, "S", os.getppid(), "2")  # sleeping: fine
    _proc(tmp_path, 4244, "T", os.getppid() + 1, "3")  # stopped, another parent's
    assert stopped_ranks(tmp_path) == [f"rank 1 (pid 4242 on {socket.gethostname()})"]


def test_a_collective_that_timed_out_names_the_stopped_rank(trainer, monkeypatch):
    """SIGSTOP of rank 1: rank 0 failed 100 s later with gloo's raw "Timed out waiting
    100000ms for recv operation to complete" (`unexpected RuntimeError`)."""
    from qwen3_trn_helpers.errors import TrainingError
    from qwen3_trn_helpers.training import ranks

    monkeypatch.setattr(ranks, "stopped_ranks", lambda: ["rank 1 (pid 4242 on node-a)"])
    trainer._compiles = False

    def timed_out(self, data_iterator):
        raise RuntimeError(
            "[gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 100000ms for recv "
            "operation to complete"
        )

    monkeypatch.setattr(_CompileKilled, "train_step", timed_out)
    with pytest.raises(TrainingError) as failed:
        trainer.train_step(iter(()))
    assert str(failed.value).startswith(
        "step 1: rank 1 (pid 4242 on node-a) is stopped (state T: kill -STOP"
    )
    assert "waited 100 s for it in a collective" in str(failed.value)


# --- SIGTERM before any step trained: nothing to save, so no wait ------------------------


def test_sigterm_before_any_step_trained_stops_at_once():
    """A run that saves checkpoints stops at a step's end on SIGTERM; in its first
    compiled step that end was minutes of compiling away (340 s on a loaded 2-core CPU,
    past a scheduler's 30 s grace), with nothing to save. Before any forward and backward
    completed, SIGTERM now stops at once; after, it still waits to save the step."""
    stop = StopRequest()
    trained = []
    stop.nothing_to_save = lambda: not trained
    forget_stops()
    try:
        with stop.on_sigterm():
            with pytest.raises(Terminated):
                os.kill(os.getpid(), signal.SIGTERM)
            trained.append(1)
            os.kill(os.getpid(), signal.SIGTERM)  # recorded: the step's end saves it
            assert stop.requested
    finally:
        forget_stops()
