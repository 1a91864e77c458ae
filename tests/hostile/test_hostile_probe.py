"""The hostile probe as a test (issue 50, item 5): one table of what users and bad copies
do to the command line, by surface (CLI arguments, files, signals, jobs), each row run
as a user would and counted (tests/conftest.py prints the counts after the run).

Rows that only refuse run in this process (fast); rows that train, launch or take a
signal run in their own process (``long``), where a hang is killed and a leftover
process counted. Rows that train skip the memory check: the probe is about the files
and the signals, not about what else the machine runs meanwhile.
``python tests/hostile.py`` runs every row in its own process against any checkout, for
the counts before and after a change.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from hostile import CONTENTS, NESTED, Case, copy_of, plant, probe

# --- arguments ---------------------------------------------------------------------------------

LONG_NAME = "x" * 300


def _train(out: str, *extra: str) -> list[str]:
    return ["train", "--steps", "1", "--out", out, "--no-progress", *extra]


def _prepare(out: str) -> list[str]:
    return ["data", "prepare", "--corpus", "embedded", "--out", out, "--no-progress"]


def _a_file(d: Path) -> Path:
    (d / "afile").write_text("x")
    return d / "afile"


ARGUMENTS = [
    Case("arguments", "train --out: a name of 300 bytes",
         lambda d, f: _train(str(d / LONG_NAME)), says="longer than the 255 bytes"),
    Case("arguments", "train --out: bytes that are not UTF-8",
         lambda d, f: _train(os.fsdecode(bytes(d) + b"/run\xff\xfe")), says="not UTF-8"),
    Case("arguments", "train --out /dev/null",
         lambda d, f: _train("/dev/null"), says="is a character device, not a folder"),
    Case("arguments", "train --out under /dev/full",
         lambda d, f: _train("/dev/full/run"), says="/dev/full, above --out"),
    Case("arguments", "train --out under a file",
         lambda d, f: _train(str(_a_file(d) / "run")), says="is a file, not a folder"),
    Case("arguments", "data prepare --out: a name of 300 bytes",
         lambda d, f: _prepare(str(d / LONG_NAME)), says="longer than the 255 bytes"),
    Case("arguments", "data prepare --out: bytes that are not UTF-8",
         lambda d, f: _prepare(os.fsdecode(bytes(d) + b"/p\xff")), says="not UTF-8"),
    Case("arguments", "data prepare --out under /dev/full",
         lambda d, f: _prepare("/dev/full/x"), says="/dev/full, above --out"),
    Case("arguments", "data prepare --out a file",
         lambda d, f: _prepare(str(_a_file(d))), says="--out"),
    Case("arguments", "wheelhouse DIR /dev/full",
         lambda d, f: ["wheelhouse", "/dev/full"], says="is a character device, not a folder"),
    Case("arguments", "wheelhouse DIR: bytes that are not UTF-8",
         lambda d, f: ["wheelhouse", os.fsdecode(bytes(d) + b"/w\xff")], says="not UTF-8"),
    Case("arguments", "wheelhouse DIR: a name of 300 bytes",
         lambda d, f: ["wheelhouse", str(d / LONG_NAME)], says="longer than the 255 bytes"),
    Case("arguments", "train --lr inf",
         lambda d, f: _train(str(d / "run"), "--lr", "inf"), says="lr must be a positive"),
    Case("arguments", "train --seed 2**70",
         lambda d, f: _train(str(d / "run"), "--seed", str(2**70)), says="seed must be"),
    Case("arguments", "train --steps 0",
         lambda d, f: ["train", "--steps", "0"], says="positive integer"),
    Case("arguments", "train --init a file",
         lambda d, f: _train(str(d / "run"), "--init", str(f["hf"] / "config.json")),
         says="is a file; --init takes the checkpoint's folder"),
    Case("arguments", "train --corpus c4, offline",
         lambda d, f: _train(str(d / "run"), "--corpus", "c4"), says="offline mode is on"),
    Case("arguments", "dry-run --layers 1000000",
         lambda d, f: ["dry-run", "--preset", "4b", "--layers", "1000000"],
         says="--layers must be an integer from 1 to 512"),
    Case("arguments", "plan --model /dev/zero",
         lambda d, f: ["plan", "--model", "/dev/zero"], says="/dev/zero is a character device"),
]  # fmt: skip

# --- files: config.json values ---------------------------------------------------------------

#: what the probe put into a config.json, and the words of the line it gets now
CONFIG_VALUES = {
    "num_hidden_layers 1000000": ({"num_hidden_layers": 1_000_000, "layer_types": None},
                                  "num_hidden_layers must be an integer from 1 to 512"),
    "num_hidden_layers -3": ({"num_hidden_layers": -3, "layer_types": None},
                             "num_hidden_layers must be an integer from 1 to 512"),
    'vocab_size "abc"': ({"vocab_size": "abc"}, "vocab_size must be an integer"),
    "hidden_size 256.5": ({"hidden_size": 256.5}, "hidden_size must be an integer"),
    "5 heads over 2 KV heads": ({"num_attention_heads": 5},
                                "num_attention_heads 5 must be a multiple of"),
    "head_dim 0": ({"head_dim": 0}, "head_dim must be an integer from 2 to 1,024"),
    "rope_theta 0": ({"rope_parameters": {"rope_type": "default", "rope_theta": 0.0}},
                     "rope_theta must be a number above 1"),
}  # fmt: skip


def _config(d: Path, f, changes: dict) -> Path:
    folder = copy_of(f["hf"], d / "ckpt")
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(changes)
    (folder / "config.json").unlink()  # (a hard link to the fixture's: replaced, not written)
    (folder / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if v is not None}))
    return folder


CONFIGS = [
    case
    for name, (changes, says) in CONFIG_VALUES.items()
    for case in (
        Case("files", f"config.json {name}: train --init",
             lambda d, f, c=changes: _train(str(d / "run"), "--init", str(_config(d, f, c))),
             says=says),
        Case("files", f"config.json {name}: plan --model",
             lambda d, f, c=changes: ["plan", "--model", str(_config(d, f, c) / "config.json")],
             says=says),
    )
]  # fmt: skip

# --- files: every file the package reads, each content a bad copy leaves -----------------------


def _resume(d: Path, f, name: str, content: str, *extra: str) -> list[str]:
    """The checkpointed run, with ``name`` (in its folder) made ``content``."""
    out = copy_of(f["run"], d / "run")
    plant(out / name, content, line=name.endswith(".jsonl"))
    return ["train", "--steps", "3", "--checkpoint-interval", "2", "--out", str(out),
            "--resume", "--no-progress", *extra]  # fmt: skip


def _settings(d: Path, f, content: str) -> list[str]:
    argv = _resume(d, f, "checkpoint/step-2/qwen3-trn-settings.json", content)
    (d / "run" / "run.json").unlink()
    return argv


def _tokenizer(d: Path, f, name: str, content: str) -> list[str]:
    folder = d / "tok"
    folder.mkdir()
    for file in ("tokenizer.json", "tokenizer_config.json"):
        (folder / file).write_bytes((f["tokenizer"] / file).read_bytes())
    plant(folder / name, content)
    return _train(str(d / "run"), "--tokenizer", str(folder))


def _corpus(d: Path, f, name: str, content: str) -> list[str]:
    return _train(str(d / "run"), "--corpus", str(plant(d / name, content, line=True)))


def _prepared(d: Path, f, content: str) -> list[str]:
    folder = copy_of(f["prepared"], d / "prepared")
    plant(folder / "manifest.json", content)
    return _train(str(d / "run"), "--corpus", str(folder))


def _house(d: Path, f, content: str) -> list[str]:
    house = copy_of(f["wheelhouse"], d / "house")
    plant(house / "manifest.json", content)
    return ["verify", str(house)]


def _metrics_kept(d: Path) -> str | None:
    """A resume over damaged metrics keeps steps 1-2 where they were readable and adds
    step 3, in a file every strict reader parses."""
    from qwen3_trn_helpers.training.metrics_file import scan_metrics

    records, unreadable = scan_metrics(d / "run" / "metrics.jsonl")
    steps = [r["step"] for r in records]
    return None if not unreadable and steps and steps[-1] == 3 else "lost or mixed data"


#: (file, how a row reaches it, the line's words, contents that are not refused: what
#: they end in instead)
READERS = {
    "run.json": (lambda d, f, c: _resume(d, f, "run.json", c, "--seq-len", "64"),
                 "seq len 256 -> 64 (", {}),
    "metrics.jsonl": (lambda d, f, c: _resume(d, f, "metrics.jsonl", c, "--skip-memory-check"),
                      "metrics.jsonl is ",
                      dict.fromkeys(("nested", "empty", "binary", "truncated"), "clean exit")),
    "a checkpoint's settings": (_settings, "records no settings", {}),
    "config.json": (lambda d, f, c: _train(str(d / "run"), "--init", str(
                        _planted_config(d, f, c))), "config.json", {}),
    "a plan's model file": (lambda d, f, c: ["plan", "--model", str(
                                plant(d / "model.json", c))], "model.json", {}),
    "tokenizer.json": (lambda d, f, c: _tokenizer(d, f, "tokenizer.json", c),
                       "tokenizer.json", {}),
    "tokenizer_config.json": (lambda d, f, c: _tokenizer(d, f, "tokenizer_config.json", c),
                              "tokenizer_config.json", {}),
    "a corpus's .jsonl": (lambda d, f, c: _corpus(d, f, "docs.jsonl", c), "docs.jsonl", {}),
    "a corpus's .txt": (lambda d, f, c: _corpus(d, f, "docs.txt", c), "docs.txt",
                        dict.fromkeys(("nested", "binary", "truncated"), None)),
    "a prepared corpus's manifest": (_prepared, "manifest.json", {}),
    "a wheelhouse manifest": (_house, "manifest.json", {}),
}  # fmt: skip


def _planted_config(d: Path, f, content: str) -> Path:
    folder = copy_of(f["hf"], d / "ckpt")
    plant(folder / "config.json", content)
    return folder


FILES = [
    Case("files", f"{file}: {content}", lambda d, f, b=build, c=content: b(d, f, c),
         expect=others.get(content) or "one-line error",
         says="" if content in others else says,
         module="qwen3_trn_helpers.ops.wheelhouse" if "wheelhouse" in file else "qwen3_trn_helpers",
         check=_metrics_kept if others.get(content) else None,
         marks=(pytest.mark.slow, pytest.mark.long) if others.get(content) else ())
    for file, (build, says, others) in READERS.items()
    for content in CONTENTS
    if others.get(content, "") is not None  # (a .txt of any bytes is text to train on)
]  # fmt: skip

# --- signals -------------------------------------------------------------------------------------


def _stopped_run(status: str):
    def check(d: Path) -> str | None:
        from qwen3_trn_helpers.training.metrics_file import scan_metrics

        info = json.loads((d / "run" / "run.json").read_text())
        records, unreadable = scan_metrics(d / "run" / "metrics.jsonl")
        ok = info["status"] == status and not unreadable
        return None if ok and info["steps_completed"] == len(records) else "lost or mixed data"

    return check


SIGNALS = [
    Case("signals", f"{name} mid-step, {ranks} rank(s)",
         lambda d, f, r=ranks: ["train", "--steps", "200", "--nproc", str(r), "--out",
                                str(d / "run"), "--no-progress", "--skip-memory-check"],
         expect="clean exit", stop=(signum, "step"), check=_stopped_run(status),
         marks=(pytest.mark.slow, pytest.mark.long))
    for name, signum, status, ranks in (
        ("SIGINT", signal.SIGINT, "interrupted", 1),
        ("SIGTERM", signal.SIGTERM, "terminated", 1),
        ("SIGTERM", signal.SIGTERM, "terminated", 2),
    )
]  # fmt: skip

# --- jobs ----------------------------------------------------------------------------------------

#: what a shell would run if a value were pasted into a job file as code
SHELL = "a b$(touch PWNED1)`touch PWNED2`'q\"; touch PWNED3;#"


def _slurm(d: Path, f) -> list[str]:
    box = d / SHELL
    box.mkdir()
    (box / f"{SHELL}.jsonl").write_text('{"text": "a document"}\n')
    out, corpus = box / f"out {SHELL}", box / f"{SHELL}.jsonl"
    return ["slurm", "--nnodes", "2", "--device", "cpu", "--steps", "2",
            "--out", str(out), "--corpus", str(corpus)]  # fmt: skip


def _script_runs_nothing(d: Path) -> str | None:
    """The printed script, run by bash with Slurm's commands stubbed, runs no value."""
    script = (d / "stdout").read_text()
    bin_dir = d / "bin"
    bin_dir.mkdir()
    for name in ("scontrol", "getent", "srun"):
        (bin_dir / name).write_text("#!/bin/bash\necho 127.0.0.1 node1\n")
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "7",
           "SLURM_JOB_NODELIST": "node[1-2]"}  # fmt: skip
    subprocess.run(["bash", "-c", script], cwd=d, env=env, capture_output=True, timeout=60)
    return "injection" if list(d.rglob("PWNED*")) else None


def _k8s(d: Path, f, *extra: str) -> list[str]:
    return ["k8s", "--nnodes", "2", "--device", "cpu", "--steps", "2", "--out", "/fsx/runs/x",
            "--image", "img", *extra]  # fmt: skip


JOBS = [
    Case("jobs", "slurm: shell in every value", _slurm, expect="clean exit",
         check=_script_runs_nothing),
    Case("jobs", "slurm --out: a newline",
         lambda d, f: ["slurm", "--nnodes", "2", "--device", "cpu", "--steps", "2",
                       "--out", str(d / "r\ntouch PWNED\n#")],
         says="--out holds a control character"),
    Case("jobs", "k8s --name: not a Kubernetes name",
         lambda d, f: _k8s(d, f, "--name", "Qwen3;rm"), says="not a name Kubernetes accepts"),
    Case("jobs", "k8s --out: off the shared volume",
         lambda d, f: ["k8s", "--nnodes", "2", "--device", "cpu", "--steps", "2",
                       "--out", "/fsx/../etc/x", "--image", "img"],
         says="--out must be on the shared volume"),
    Case("jobs", "k8s --image: empty",
         lambda d, f: _k8s(d, f, "--image", " "), says="--image is empty"),
]  # fmt: skip

CASES = [*ARGUMENTS, *CONFIGS, *FILES, *SIGNALS, *JOBS]


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_the_probe(case: Case, tmp_path, hostile_fixtures, record_property):
    """Each row ends as it should: one line naming the problem, or a clean run; never
    a traceback, an `unexpected`, a hang, a leftover process, lost data or an injection."""
    apart = case.stop is not None or "long" in {m.name for m in case.marks}
    probe(case, tmp_path / "case", hostile_fixtures, record_property, apart=apart)


def test_the_table_covers_each_surface_and_each_bad_content():
    assert {c.surface for c in CASES} == {"arguments", "files", "signals", "jobs"}
    named = {c.name for c in CASES}
    for file in READERS:
        assert {f"{file}: fifo", f"{file}: /dev/zero", f"{file}: empty"} <= named, file
    assert len(NESTED) == 200_000  # 100,000 levels deep
