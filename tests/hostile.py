"""What the hostile tests (tests/hostile/) ask of every failure, and the probe they run.

Every failure is one error line, JSON a strict reader parses, and no process of the run
left behind. The probe (issue 50, item 5) is a table of :class:`Case` rows by surface
(CLI arguments, files, signals, jobs), each run through the command line as a user
would and sorted into one of :data:`OUTCOMES`; the suite prints the count of each, so
they can be compared from round to round (tests/conftest.py), and

    python tests/hostile.py [--python PY] [--pythonpath DIR]

runs every row in its own process against any checkout (``--pythonpath``: an older
one's folder) and prints each row's line and the counts.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert "unexpected" not in err[0]
    return err[0]


def strict_load(text: str):
    """JSON as strict readers parse it: NaN / Infinity are errors."""
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))


def _processes_naming(text: str) -> list[int]:
    """Live processes whose command line mentions ``text`` (a run folder's path), as
    the multi-node tests look for leftovers: ``pgrep -f`` (Linux and macOS)."""
    found = subprocess.run(["pgrep", "-f", text], capture_output=True, text=True)
    return [int(pid) for pid in found.stdout.split() if int(pid) != os.getpid()]


# --- the probe --------------------------------------------------------------------------------

#: what the probe counts, in the order it prints them: the first two are what every row
#: should end in; each of the others is a fault
OUTCOMES = (
    "one-line error", "clean exit", "traceback", "unexpected", "hang", "orphan",
    "lost or mixed data", "injection",
)  # fmt: skip
SURFACES = ("arguments", "files", "signals", "jobs")
#: the user property a probe row records its outcome under ("surface|outcome")
PROPERTY = "hostile"
#: a row that runs longer than this has hung (a FIFO read, a model of a million layers)
HANG_S = 120.0


class Fixtures(dict):
    """The probe's shared inputs by name, each built under ``root`` on first use (a
    worker that runs no resume row never trains the run they resume)."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root

    def __missing__(self, name: str) -> Path:
        self[name] = BUILDERS[name](self.root / name, self)
        return self[name]


def _hf(where: Path, fixtures: Fixtures) -> Path:
    from qwen3_trn_helpers.model.hf_checkpoint import make_random_hf_checkpoint
    from qwen3_trn_helpers.model.shapes import TINY

    return make_random_hf_checkpoint(TINY, where, seed=1)


def _tokenizer(where: Path, fixtures: Fixtures) -> Path:
    from qwen3_trn_helpers.assets import ensure_tokenizer

    return ensure_tokenizer()


def _text(where: Path, fixtures: Fixtures) -> Path:
    where.mkdir(parents=True)
    (where / "docs.jsonl").write_text(
        "".join(json.dumps({"text": f"Document {i}: Qwen3 on Trainium."}) + "\n" for i in range(8))
    )
    return where / "docs.jsonl"


def _run(where: Path, fixtures: Fixtures) -> Path:
    """A 2-step run at the tiny preset's 256 tokens, checkpointed at step 2."""
    from qwen3_trn_helpers import run

    run(steps=2, checkpoint_interval=2, out=str(where), progress=False)
    return where


def _prepared(where: Path, fixtures: Fixtures) -> Path:
    from qwen3_trn_helpers.ops.data_prepare import prepare

    prepare(str(fixtures["text"]), where)
    return where


def _wheelhouse(where: Path, fixtures: Fixtures) -> Path:
    """A small but complete wheelhouse for this machine and Python (no pip: one fake
    wheel and one asset, each with its true size and sha256)."""
    from qwen3_trn_helpers.ops import wheelhouse as wh

    (where / "wheels").mkdir(parents=True)
    (where / "assets" / "tok").mkdir(parents=True)
    wheel = where / "wheels" / "qwen3_trn-0.1-py3-none-any.whl"
    wheel.write_bytes(b"wheel")
    asset = where / "assets" / "tok" / "tokenizer.json"
    asset.write_text("{}")

    def entry(p: Path) -> dict:
        return {"bytes": p.stat().st_size, "sha256": wh.sha256_of(p)}

    manifest = {
        "format": wh.FORMAT, "qwen3_trn": "0.1", "commit": None, "requirement": "qwen3-trn",
        "target": wh._host_name(), "markers": wh.host_markers(),
        "python_version": wh._host_python(), "torch_index": None, "left_out": {},
        "command": "", "wheels": {wheel.name: entry(wheel)},
        "assets": {"tok": {asset.name: entry(asset)}},
    }  # fmt: skip
    (where / "manifest.json").write_text(json.dumps(manifest))
    return where


BUILDERS: dict[str, Callable[[Path, Fixtures], Path]] = {
    "hf": _hf, "tokenizer": _tokenizer, "text": _text, "run": _run, "prepared": _prepared,
    "wheelhouse": _wheelhouse,
}  # fmt: skip


def copy_of(source: Path, to: Path) -> Path:
    """A copy of the folder ``source`` whose files are hard links (a checkpoint's 250 MB
    copied for each row would be gigabytes): what a run writes replaces files (atomic
    renames, new checkpoint folders), never writes into one, so the source stays whole."""
    import shutil

    shutil.copytree(source, to, copy_function=os.link)
    return to


#: hostile contents of a file, each as a user (or a bad copy) leaves it
CONTENTS = ("fifo", "/dev/zero", "nested", "empty", "binary", "truncated")
#: a JSON document nested 100,000 deep
NESTED = "[" * 100_000 + "]" * 100_000


def plant(path: Path, content: str, *, line: bool = False) -> Path:
    """Make ``path`` (which may hold the good file) one of :data:`CONTENTS`; ``line``:
    it is a JSON-lines file, whose lines are what is nested or cut."""
    good = path.read_bytes() if path.is_file() else b'{"text": "a document"}\n'
    if path.exists() or path.is_symlink():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    if content == "fifo":
        os.mkfifo(path)
    elif content == "/dev/zero":
        path.symlink_to("/dev/zero")
    elif content == "nested":
        path.write_text('{"text": ' + NESTED + "}\n" if line else NESTED)
    elif content == "empty":
        path.write_bytes(b"")
    elif content == "binary":
        path.write_bytes(bytes(range(256)) * 64)
    elif content == "truncated":
        path.write_bytes(good[: max(1, len(good) // 2)].rstrip(b"\n"))
    else:
        raise ValueError(content)
    return path


@dataclass(frozen=True)
class Case:
    """One row of the probe: what a user does, and what it must end in."""

    surface: str
    name: str
    #: (the row's own empty folder, the fixtures) -> the command's arguments
    build: Callable[[Path, Fixtures], list[str]]
    expect: str = "one-line error"
    #: words the error line holds ("{dir}": the row's folder)
    says: str = ""
    #: what ``python -m`` runs (the wheelhouse check runs before the package is installed)
    module: str = "qwen3_trn_helpers"
    #: (signal, after what) for the signals surface: "step" (the first metrics line)
    stop: tuple[int, str] | None = None
    #: after the command: a fault it left in the row's folder, as an outcome (None: none)
    check: Callable[[Path], str | None] | None = None
    #: pytest marks (``slow``, ``long``) for rows that train or launch
    marks: tuple = ()

    @property
    def id(self) -> str:
        return f"{self.surface}: {self.name}"

    def param(self):
        return pytest.param(self, id=self.id, marks=self.marks)


@dataclass
class Result:
    code: int | None
    err: str
    out: str
    seconds: float
    hung: bool = False
    orphans: int = 0


def error_lines(err: str) -> list[str]:
    """stderr without notes, warnings and argparse's usage lines."""
    lines = []
    for line in err.strip().splitlines():
        if line.startswith(("note: ", "warning: ", "usage: ", " ")) or not line.strip():
            continue
        lines.append(line)
    return lines


def outcome_of(case: Case, result: Result, folder: Path) -> str:
    """Which of :data:`OUTCOMES` ``result`` is (the worst fault first)."""
    try:  # (what the row left cannot even be read: that is the fault)
        fault = case.check(folder) if case.check is not None else None
    except (OSError, ValueError, KeyError, TypeError):
        fault = "lost or mixed data"
    if fault == "injection":
        return fault
    if result.hung:
        return "hang"
    if result.orphans:
        return "orphan"
    if fault is not None:
        return fault
    if "Traceback (most recent call last)" in result.err:
        return "traceback"
    lines = error_lines(result.err)
    stopped = (
        result.code in (130, 143)
        and lines
        and lines[-1].startswith(("terminated: ", "interrupted: "))
    )
    if result.code == 0 or stopped:
        return "clean exit"
    said = lines[0] if len(lines) == 1 else ""
    if said.startswith("error: ") or ": error: " in said:  # (argparse: "prog: error: ...")
        return "unexpected" if "unexpected" in said else "one-line error"
    return "unexpected"


def _unblock(paths: list[Path]) -> None:
    """Open each FIFO for writing and close it: a reader stuck opening it reads nothing."""
    for path in paths:
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass


def run_here(case: Case, argv: list[str], folder: Path) -> Result:
    """``argv`` through the module's ``main`` in this process (fast: nothing to import
    again). A FIFO the command still waits on after :data:`HANG_S` is opened and closed
    by a watchdog, so a regression fails as a hang instead of stopping the suite."""
    import importlib

    main = importlib.import_module(case.module + (".cli" if case.module.count(".") == 0 else ""))
    fifos = [p for p in folder.rglob("*") if p.is_fifo()]
    hung = threading.Event()
    watchdog = threading.Timer(HANG_S, lambda: (hung.set(), _unblock(fifos)))
    watchdog.daemon = True
    err, out, started = io.StringIO(), io.StringIO(), time.monotonic()
    watchdog.start()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                code = main.main(argv)
            except SystemExit as e:  # argparse
                code = e.code if isinstance(e.code, int) else 1
            except BaseException:
                import traceback

                code = 1
                print(traceback.format_exc(), file=sys.stderr)
    finally:
        watchdog.cancel()
    seconds = time.monotonic() - started
    return Result(code, err.getvalue(), out.getvalue(), seconds, hung=hung.is_set())


def run_apart(
    case: Case, argv: list[str], folder: Path, *, python: str = sys.executable,
    env: dict[str, str] | None = None, timeout: float = HANG_S,
) -> Result:  # fmt: skip
    """``python -m MODULE argv`` in its own session: killed as hung after ``timeout``;
    a stop signal sent as ``case.stop`` says; what names ``folder`` afterwards is an
    orphan (killed, and counted)."""
    started = time.monotonic()
    proc = subprocess.Popen(
        [python, "-m", case.module, *argv], env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True, cwd=folder,
    )  # fmt: skip
    hung = False
    try:
        if case.stop is not None:
            signum, when = case.stop
            metrics = folder / "run" / "metrics.jsonl"
            while proc.poll() is None and time.monotonic() - started < timeout:
                if when == "start" or (metrics.exists() and metrics.stat().st_size):
                    proc.send_signal(signum)
                    break
                time.sleep(0.1)
        out, err = proc.communicate(timeout=max(1.0, timeout - (time.monotonic() - started)))
    except subprocess.TimeoutExpired:
        hung = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    time.sleep(0.5 if case.stop else 0)
    leftovers = _processes_naming(str(folder))
    for pid in leftovers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
    seconds = time.monotonic() - started
    return Result(code, err, out, seconds, hung=hung, orphans=len(leftovers))


def probe(case: Case, folder: Path, fixtures: Fixtures, record, *, apart: bool) -> str:
    """Run one row (here or in its own process) and return its outcome, recorded for
    the counts; a row whose outcome is not its expected one fails, naming both."""
    folder.mkdir(parents=True, exist_ok=True)
    argv = case.build(folder, fixtures)
    result = run_apart(case, argv, folder) if apart else run_here(case, argv, folder)
    (folder / "stdout").write_text(result.out)  # (a job file, for the row's check)
    outcome = outcome_of(case, result, folder)
    record(PROPERTY, f"{case.surface}|{outcome}")
    lines = error_lines(result.err)
    assert outcome == case.expect, (outcome, result.code, result.err[-2000:])
    if case.says:
        assert lines and case.says.format(dir=folder) in lines[-1], lines
    return outcome


def counts_table(rows: list[str]) -> str:
    """The counts of recorded ``surface|outcome`` rows, by surface, as a text table."""
    counts = Counter(tuple(r.split("|", 1)) for r in rows)
    surfaces = [s for s in SURFACES if any(k[0] == s for k in counts)]
    width = max(len(o) for o in OUTCOMES)
    head = f"{'':{width}}  " + "  ".join(f"{s:>9}" for s in [*surfaces, "all"])
    lines = [head]
    for outcome in OUTCOMES:
        row = [counts[(s, outcome)] for s in surfaces]
        lines.append(f"{outcome:{width}}  " + "  ".join(f"{n:>9}" for n in [*row, sum(row)]))
    return "\n".join(lines)


# --- the whole table against any checkout ----------------------------------------------------


@dataclass
class _Recorder:
    rows: list[str] = field(default_factory=list)

    def __call__(self, name: str, value: str) -> None:
        self.rows.append(value)


def _all_cases() -> list[Case]:
    sys.path.insert(0, str(Path(__file__).parent / "hostile"))
    import test_hostile_probe

    return test_hostile_probe.CASES


def main(argv: list[str] | None = None) -> int:
    """Every probe row, each in its own process, with ``--python`` and ``--pythonpath``
    (another checkout); prints each row's outcome and last line, then the counts."""
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--pythonpath", default=None, help="a checkout to run instead")
    parser.add_argument("--wheelhouse-module", default=None, help="its wheelhouse module")
    parser.add_argument("-k", default="", help="only rows whose id holds this")
    parser.add_argument("--timeout", type=float, default=HANG_S, help="seconds before a hang")
    args = parser.parse_args(argv)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    if args.pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [args.pythonpath, env.get("PYTHONPATH")]))
    recorder = _Recorder()
    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        fixtures = Fixtures(Path(tmp) / "fixtures")
        for i, case in enumerate(c for c in _all_cases() if args.k in c.id):
            if args.wheelhouse_module and case.module.endswith(".wheelhouse"):
                case = Case(**{**case.__dict__, "module": args.wheelhouse_module})
            folder = Path(tmp) / f"case-{i}"
            folder.mkdir()
            result = run_apart(case, case.build(folder, fixtures), folder, python=args.python,
                               env=env, timeout=args.timeout)  # fmt: skip
            (folder / "stdout").write_text(result.out)
            outcome = outcome_of(case, result, folder)
            recorder("", f"{case.surface}|{outcome}")
            last = (error_lines(result.err) or [""])[-1]
            print(f"{case.id} | {outcome} | {result.seconds:.1f} s | {last[:300]}", flush=True)
    print(counts_table(recorder.rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
