"""Every file the package reads, read through files.py (issue 50, item 1): each reader
given a FIFO, /dev/zero, JSON nested 100,000 deep, an empty file, binary bytes and a
copy cut short. Each refuses in one line naming the file (and what to do), or passes
the file over as its caller designs (a damaged metrics line, a calibration that cannot
be read); none waits, reads without end or raises from inside a library."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from hostile import CONTENTS, NESTED, plant

from qwen3_trn_helpers.errors import Qwen3TrnError
from qwen3_trn_helpers.files import (
    MAX_DEPTH,
    UnreadableFile,
    check_regular,
    parse_json,
    read_json,
    read_lines,
    read_text,
)

#: a reader stuck on a FIFO this long has hung (the FIFO is then opened to free it)
WAIT_S = 30.0


def _reading(call: Callable[[], object], folder: Path) -> object:
    """``call()``; a FIFO in ``folder`` it still waits on after :data:`WAIT_S` is opened
    and closed (so a regression fails here instead of stopping the suite)."""
    fifos = [p for p in folder.rglob("*") if p.is_fifo()]
    hung = threading.Event()

    def free() -> None:
        hung.set()
        for fifo in fifos:
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass

    watchdog = threading.Timer(WAIT_S, free)
    watchdog.start()
    try:
        return call()
    finally:
        watchdog.cancel()
        assert not hung.is_set(), "the reader waited on a FIFO"


# --- each reader: how to reach it, and what it does with a bad file ----------------------------


def _run_record(d: Path, content: str):
    from qwen3_trn_helpers.runs.folder import read_run_record

    plant(d / "run.json", content)
    return lambda: read_run_record(d)


def _finished_run(d: Path, content: str):
    from qwen3_trn_helpers.runs.folder import RunResult

    plant(d / "run.json", content)
    return lambda: RunResult.from_folder(d)


def _metrics(d: Path, content: str):
    from qwen3_trn_helpers.training.metrics_file import scan_metrics

    plant(d / "metrics.jsonl", content, line=True)
    return lambda: scan_metrics(d / "metrics.jsonl")


def _settings(d: Path, content: str):
    from qwen3_trn_helpers.training.checkpoint import SETTINGS_FILE, read_run_settings

    plant(d / SETTINGS_FILE, content)
    return lambda: read_run_settings(d)


def _stop_record(d: Path, content: str):
    from qwen3_trn_helpers.errors import Terminated
    from qwen3_trn_helpers.runs.torchrun import finalise_after_stop

    plant(d / "run.json", content)
    return lambda: finalise_after_stop(d, Terminated(), None)


def _config(d: Path, content: str):
    from qwen3_trn_helpers.model.shapes import Qwen3Shape

    plant(d / "config.json", content)
    return lambda: Qwen3Shape.from_hf_config(d)


def _checkpoint_folder(d: Path, content: str):
    from qwen3_trn_helpers.model.hf_checkpoint import check_hf_checkpoint

    plant(d / "model.safetensors", content)
    return lambda: check_hf_checkpoint(d)


def _plan_model(d: Path, content: str):
    from qwen3_trn_helpers.ops.planner.models import load_model

    plant(d / "model.json", content)
    return lambda: load_model(str(d / "model.json"))


def _tokenizer_folder(name: str):
    def make(d: Path, content: str):
        from qwen3_trn_helpers.assets import ensure_tokenizer, load_tokenizer, resolve_tokenizer

        for file in ("tokenizer.json", "tokenizer_config.json"):
            (d / file).write_bytes((ensure_tokenizer() / file).read_bytes())
        plant(d / name, content)
        return lambda: load_tokenizer(resolve_tokenizer(str(d)))

    return make


def _checksums(d: Path, content: str):
    from qwen3_trn_helpers.assets import CHECKSUMS, damaged_files

    plant(d / CHECKSUMS, content)
    return lambda: damaged_files(str(d), (0, 0))


def _corpus(d: Path, content: str):
    from qwen3_trn_helpers.data.corpus import read_documents

    plant(d / "docs.jsonl", content, line=True)
    return lambda: read_documents(d / "docs.jsonl")


def _prepared(d: Path, content: str):
    from qwen3_trn_helpers.data.prepared import read_manifest

    plant(d / "manifest.json", content)
    return lambda: read_manifest(d)


def _wheelhouse(d: Path, content: str):
    from qwen3_trn_helpers.ops.wheelhouse_manifest import read_manifest

    plant(d / "manifest.json", content)
    return lambda: read_manifest(d)


def _calibration(d: Path, content: str):
    from qwen3_trn_helpers.ops.planner.machines import apply_calibration, get_machine

    plant(d / "calibration.json", content)  # (the test points QWEN3_TRN_CALIBRATION here)
    machine = get_machine("trn2")
    return lambda: (apply_calibration(machine) == machine) or "calibration applied"


def _smoke_run(d: Path, content: str):
    from qwen3_trn_helpers.ops.smoke.checks import training_memory

    plant(d / "run.json", content)
    return lambda: training_memory(d)


def _save_log(d: Path, content: str):
    from qwen3_trn_helpers.training.save_log import SAVE_LOG, measured_write_mb_s

    plant(d / "checkpoint" / SAVE_LOG, content, line=True)
    return lambda: measured_write_mb_s(d)


def _summary(d: Path, content: str):
    from qwen3_trn_helpers.lessons.aws_stack import ours_step1

    plant(d / "summary.json", content)
    return lambda: ours_step1(d)


REFUSED = "refused"
#: reader -> (how to reach it, what it ends in: REFUSED (one line naming the file), or
#: a check of what it returns, for readers that pass a bad file over by design)
READERS: dict[str, tuple[Callable, object]] = {
    "run.json (the resume check)": (_run_record, lambda r: r[0] is None and "run.json " in r[1]),
    "run.json (a finished run)": (_finished_run, REFUSED),
    "run.json (after a stop)": (_stop_record, lambda r: r == "no step completed; no metrics.jsonl"),
    "run.json (smoke's check)": (_smoke_run, lambda r: r is None),
    "metrics.jsonl": (_metrics, "metrics"),
    "a checkpoint's settings": (_settings, lambda r: r is None),
    "config.json": (_config, REFUSED),
    "model.safetensors (a checkpoint's weights)": (_checkpoint_folder, REFUSED),
    "model.json (a plan's model)": (_plan_model, REFUSED),
    "tokenizer.json": (_tokenizer_folder("tokenizer.json"), REFUSED),
    "tokenizer_config.json": (_tokenizer_folder("tokenizer_config.json"), REFUSED),
    "checksums.json (the tokenizer's)": (_checksums, lambda r: "checksums.json" in r),
    "docs.jsonl (a corpus)": (_corpus, REFUSED),
    "manifest.json (a prepared corpus's)": (_prepared, REFUSED),
    "manifest.json (a wheelhouse's)": (_wheelhouse, REFUSED),
    "calibration.json (the planner's)": (_calibration, lambda r: r is True),
    "summary.json (reproduce's)": (_summary, lambda r: r == {}),
    "the checkpoint saves' log (the save timings)": (_save_log, lambda r: r is None),
}  # fmt: skip

#: what a metrics file's bad content is: refused (not a file to read), or lines passed
#: over (counted as unreadable, every valid line kept)
METRICS = {"fifo": REFUSED, "/dev/zero": REFUSED, "empty": ([], [])}


@pytest.mark.parametrize(
    "reader, content",
    [(r, c) for r in READERS for c in CONTENTS
     # (a weights file's bytes are safetensors' to judge: tests/hostile/test_hostile_assets.py)
     if not r.startswith("model.safetensors") or c in ("fifo", "/dev/zero")],
)  # fmt: skip
def test_each_reader_with_each_bad_file(reader, content, tmp_path, monkeypatch, tokenizer_dir):
    monkeypatch.setenv("QWEN3_TRN_CALIBRATION", str(tmp_path / "calibration.json"))
    if reader.startswith("model.safetensors"):
        from qwen3_trn_helpers.model.hf_checkpoint import make_random_hf_checkpoint
        from qwen3_trn_helpers.model.shapes import TINY

        make_random_hf_checkpoint(TINY, tmp_path, seed=1)
    make, expect = READERS[reader]
    call = make(tmp_path, content)
    if expect == "metrics":
        expect = METRICS.get(content, lambda r: r[0] == [] and r[1])  # (lines passed over)
    if expect == REFUSED:
        with pytest.raises(Qwen3TrnError) as refused:
            _reading(call, tmp_path)
        said = str(refused.value)
        assert "\n" not in said and "Traceback" not in said, said
        assert reader.split()[0] in said, said  # (the file's name)
    else:
        returned = _reading(call, tmp_path)
        assert expect(returned) if callable(expect) else returned == expect, returned


# --- files.py itself -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content, said",
    [("fifo", "is a named pipe (FIFO), not a regular file"),
     ("/dev/zero", "is a character device, not a regular file"),
     ("nested", "nests JSON deeper than the 64 levels read (hundreds of levels or more)"),
     ("empty", "is empty (cut short or never written)"),
     ("binary", "is not UTF-8 text (byte 128 is 0x80: binary or damaged)"),
     ("truncated", "is not valid JSON (Expecting ',' delimiter at line 1 column 9): cut short or")],
)  # fmt: skip
def test_one_line_says_which_file_what_is_wrong_and_what_to_do(content, said, tmp_path):
    path = tmp_path / "x.json"
    path.write_text('{"a": [1, 2, 3]}')
    plant(path, content)
    with pytest.raises(UnreadableFile) as refused:
        _reading(lambda: read_json(path, limit=1 << 20, fix="copy it again"), tmp_path)
    line = str(refused.value)
    assert line.startswith(f"{path} {said}") and line.endswith("; copy it again"), line


def test_folders_sockets_sizes_and_kinds_are_named(tmp_path):
    import socket

    with pytest.raises(UnreadableFile, match="is a folder, not a file; fix"):
        read_text(tmp_path, limit=10, fix="fix")
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(tmp_path / "sock"))
        with pytest.raises(UnreadableFile, match="is a socket, not a regular file"):
            read_text(tmp_path / "sock", limit=10, fix="fix")
    (tmp_path / "big.json").write_text("[" + "1," * 600 + "1]")
    with pytest.raises(
        UnreadableFile, match=r"is 1\.2 KiB, larger than such a file ever is \(1 KiB\)"
    ):
        read_json(tmp_path / "big.json", limit=1024, fix="fix")
    (tmp_path / "list.json").write_text("[1]")
    with pytest.raises(UnreadableFile, match="holds a JSON list, not an object"):
        read_json(tmp_path / "list.json", limit=1024, fix="fix")
    assert read_json(tmp_path / "list.json", limit=1024, fix="fix", want=None) == [1]
    with pytest.raises(UnreadableFile) as missing:
        check_regular(tmp_path / "nope", limit=None, fix="fix")
    assert missing.value.missing and str(missing.value).endswith("nope does not exist; fix")


def test_nesting_is_refused_past_the_stated_depth_only():
    deep = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert parse_json(deep, "x", "fix") == eval(deep)  # exactly 64 levels: read
    with pytest.raises(UnreadableFile, match=r"deeper than the 64 levels read \(65 levels\)"):
        parse_json("[" + deep + "]", "x", "fix")
    with pytest.raises(UnreadableFile, match="hundreds of levels or more"):
        parse_json(NESTED, "x", "fix")


def test_lines_longer_than_their_limit_are_not_read_whole(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_bytes(b'{"step": 1}\n' + b"x" * 5000 + b'\n{"step": 2}\n' + b"y" * 70)
    lines = list(read_lines(path, fix="fix", line_limit=64))
    assert lines == [(1, b'{"step": 1}\n'), (2, None), (3, b'{"step": 2}\n'), (4, None)]
