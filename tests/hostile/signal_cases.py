"""Signals, by surface (issue 50 item 4, issue 51): the table's rows and how each runs.

Each row starts ``qwen3-trn train`` at 1 or 2 ranks, waits for a moment of the run
(starting up, inside a step, inside a checkpoint save, inside the first compile), sends
the command SIGINT, SIGTERM or SIGKILL as a terminal, a scheduler or the out-of-memory
killer would, and checks what is left: no process of the run; run.json's status true
(``interrupted``, ``terminated``; a one-rank command killed outright cannot write it, and
the next command that reads the folder says so); metrics.jsonl whole, every line strict
JSON and the steps from 1 without a gap. Further rows send a signal to one rank or to
torchrun instead (issue 51: a lost rank named as lost), where terminal and run.json must
say the same.

The moments are made certain by hooks the ranks load as ``sitecustomize`` (:data:`HOOKS`):
a marker file when the moment begins, and a pause inside it long enough for the signal
to land there. The rows run in test_signals.py (one rank), test_signals_two_ranks.py and
test_lost_ranks.py: three files, so that the ``long`` step's two workers share them. Every
row is ``long`` (several processes, 30-150 s each on 2 cores); the table's cost is in
docs/testing.md.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from hostile import _processes_naming, strict_load

#: loaded by every process of the run (``sitecustomize`` on PYTHONPATH): at the moment
#: MARK_AT names, touch ``MARK_DIR/<moment>.<rank>`` and pause, so the signal lands inside
HOOKS = """
import os
moment = os.environ.get("MARK_AT")
if moment and os.environ.get("MARK_DIR"):
    import time
    from pathlib import Path

    def mark():
        rank = os.environ.get("RANK", "0")
        (Path(os.environ["MARK_DIR"]) / f"{moment}.{rank}").touch()

    if moment == "save":  # inside DCP's write of the checkpoint's shards
        from torch.distributed.checkpoint import filesystem

        real_write = filesystem._FileSystemWriter.write_data

        def write_data(self, *args, **kwargs):
            mark()
            time.sleep(10)
            return real_write(self, *args, **kwargs)

        filesystem._FileSystemWriter.write_data = write_data
    elif moment == "step":  # inside step 3's forward and backward
        import torchtitan.trainer

        real_step = torchtitan.trainer.Trainer.forward_backward_step

        def forward_backward_step(self, *args, **kwargs):
            if self.step == 3:
                mark()
                time.sleep(10)
            return real_step(self, *args, **kwargs)

        torchtitan.trainer.Trainer.forward_backward_step = forward_backward_step
    elif moment == "compile":  # inductor compiling the first graph
        import torch._inductor.compile_fx as compile_fx

        real_compile = compile_fx.compile_fx

        def compile_fx_marked(*args, **kwargs):
            mark()
            return real_compile(*args, **kwargs)

        compile_fx.compile_fx = compile_fx_marked
"""


@dataclass(frozen=True)
class Case:
    ranks: int
    signal: signal.Signals
    moment: str  # startup | step | save | compile
    to: str = "command"  # who gets the signal: the command, rank0, rank1 or torchrun

    @property
    def name(self) -> str:
        target = "" if self.to == "command" else f"-to-{self.to}"
        return f"{self.ranks}rank-{self.signal.name}-{self.moment}{target}"


SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)
MOMENTS = ("startup", "step", "save", "compile")
#: every signal to the command, at every moment, at 1 and 2 ranks (issue 50 item 4)
COMMAND_CASES = [Case(r, s, m) for r in (1, 2) for s in SIGNALS for m in MOMENTS]
#: one process of the run lost, the command untouched (issue 51)
LOST_CASES = [
    Case(2, signal.SIGKILL, "save", to="rank1"),
    Case(2, signal.SIGTERM, "step", to="rank0"),
    Case(2, signal.SIGKILL, "step", to="torchrun"),
    Case(2, signal.SIGSTOP, "step", to="rank1"),  # (the collective timeout: 100 s)
]


@dataclass
class Ended:
    returncode: int
    stderr: str
    out: Path
    seconds: float


def start(case: Case, tmp_path: Path) -> tuple[subprocess.Popen, Path, Path]:
    hooks, marks, out = tmp_path / "hooks", tmp_path / "marks", tmp_path / "run"
    hooks.mkdir()
    marks.mkdir()
    (hooks / "sitecustomize.py").write_text(HOOKS)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(hooks), os.environ.get("PYTHONPATH")])),
        "MARK_DIR": str(marks),
        "MARK_AT": case.moment,
        # a first compile: an empty cache of its own
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
    }
    cmd = [sys.executable, "-m", "qwen3_trn_helpers", "train", "--steps", "6",
           "--checkpoint-interval", "2", "--out", str(out), "--no-progress",
           *(["--nproc", "2"] if case.ranks == 2 else []),
           *(["--compile"] if case.moment == "compile" else [])]  # fmt: skip
    cli = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
        # Ctrl-C as a terminal delivers it (a suite started in the background inherits
        # SIGINT ignored, and the command then leaves it so)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    return cli, out, marks


def reached(case: Case, out: Path, marks: Path) -> bool:
    if case.moment == "startup":  # the folder claimed, run.json written, no step yet
        return (out / "run.json").exists() and not (out / "metrics.jsonl").exists()
    return any(marks.glob(f"{case.moment}.*"))


def target(case: Case, cli: subprocess.Popen) -> int:
    """The pid the signal goes to: the command, one of its ranks, or its torchrun."""
    if case.to == "command":
        return cli.pid
    torchrun = int(subprocess.run(["pgrep", "-P", str(cli.pid)], capture_output=True,
                                  text=True).stdout.split()[0])  # fmt: skip
    if case.to == "torchrun":
        return torchrun
    for pid in subprocess.run(["pgrep", "-P", str(torchrun)], capture_output=True,
                              text=True).stdout.split():  # fmt: skip
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        if f"RANK={case.to[4:]}".encode() in environ:
            return int(pid)
    raise AssertionError(f"no {case.to} among torchrun's children")


def run_case(case: Case, tmp_path: Path) -> Ended:
    cli, out, marks = start(case, tmp_path)
    try:
        deadline = time.monotonic() + 600
        while not reached(case, out, marks):
            if cli.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{case.name}: the moment never came\n{cli.stderr.read()}")
            time.sleep(0.05)
        sent = time.monotonic()
        if case.signal == signal.SIGINT and case.to == "command":
            os.killpg(cli.pid, signal.SIGINT)  # a terminal's Ctrl-C: its foreground group
        else:
            os.kill(target(case, cli), case.signal)  # a scheduler, `timeout`, the OOM killer
        _, stderr = cli.communicate(timeout=300)
        ended = Ended(cli.returncode, stderr, out, time.monotonic() - sent)
        gone = time.monotonic() + 60  # (after SIGKILL of the command: the ranks' lifeline)
        while _processes_naming(str(out)) and time.monotonic() < gone:
            time.sleep(0.2)
        return ended
    finally:
        for pid in _processes_naming(str(out)):
            os.kill(pid, signal.SIGKILL)
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)


def metrics_whole(out: Path) -> list[int]:
    """The steps metrics.jsonl holds: every line strict JSON, from step 1 without a gap."""
    path = out / "metrics.jsonl"
    if not path.exists():
        return []
    steps = [strict_load(line)["step"] for line in path.read_text().splitlines()]
    assert steps == list(range(1, len(steps) + 1)), steps
    return steps


#: the status a stop of the command leaves, and the command's exit status
EXPECTED = {
    signal.SIGINT: ("interrupted", 130),
    signal.SIGTERM: ("terminated", 143),
    signal.SIGKILL: ("terminated", -signal.SIGKILL),  # (several ranks: their lifeline)
}


def check_command_case(case: Case, tmp_path: Path) -> None:
    """A signal to the command: nothing left, run.json true, metrics.jsonl whole."""
    ended = run_case(case, tmp_path)
    out = ended.out
    left = _processes_naming(str(out))
    assert not left, f"{case.name}: {len(left)} processes of the run left"
    steps = metrics_whole(out)
    status, code = EXPECTED[case.signal]
    assert ended.returncode == code, (case.name, ended.returncode, ended.stderr[-2000:])
    if case.signal != signal.SIGKILL:
        last = ended.stderr.strip().splitlines()[-1]
        assert last.startswith(f"{status}: "), (case.name, ended.stderr[-2000:])
    info = json.loads((out / "run.json").read_text())
    if case.signal == signal.SIGKILL and info["status"] == "running":
        # nothing of the command ran, and on one rank nothing else could write it (two
        # ranks write it as they stop: their watch records a stop they cannot finish):
        # run.json says `running`, and the next command that reads the folder says so
        assert case.ranks == 1, case.name
        again = subprocess.run(
            [sys.executable, "-m", "qwen3_trn_helpers", "train", "--out", str(out)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert again.returncode == 1 and len(again.stderr.strip().splitlines()) == 1
        assert "says `running`, but no process holds" in again.stderr
        assert "was killed before it could record its end" in again.stderr
        return
    assert info["status"] == status, (case.name, info.get("status"), info.get("error"))
    assert "error" not in info, info["error"]
    assert info["steps_completed"] == len(steps), (info["steps_completed"], steps)


#: what run.json and the terminal say when one process of the run is lost
LOST = {
    ("rank1", signal.SIGKILL): ("failed", "rank 1 (pid ", "was killed by SIGKILL"),
    ("rank0", signal.SIGTERM): ("terminated", "rank 0 (pid ", "was sent SIGTERM from outside"),
    ("torchrun", signal.SIGKILL): ("failed", "torchrun (pid ", "was killed by SIGKILL; its ranks"),
    ("rank1", signal.SIGSTOP): ("failed", "rank 1 (pid ", "was stopped (SIGSTOP"),
}


def check_lost_case(case: Case, tmp_path: Path) -> None:
    """One process lost: the terminal and run.json say the same line, naming it."""
    ended = run_case(case, tmp_path)
    out = ended.out
    assert not _processes_naming(str(out))
    metrics_whole(out)
    status, who, what = LOST[case.to, case.signal]
    line = ended.stderr.strip().splitlines()[-1]
    word = "error" if status == "failed" else status
    assert line.startswith(f"{word}: {who}") and what in line, (case.name, ended.stderr[-3000:])
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == status, (case.name, info)
    said = info["error"] if status == "failed" else info["stopped"]
    assert line.endswith(said), (line, said)
    assert info["lost_rank"]["signal"] == case.signal.name
