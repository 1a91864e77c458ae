"""Hostile and unlucky cases, round 5 (issue 32, items 1, 2, 5, 6, 8 and 9): run folders
that never mix or lose steps, a full disk, a working folder that holds a file named like
a dataset, names Kubernetes accepts, and wheelhouse manifests that are someone's data.
Each ends in one line naming the file, the setting or the fix."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from qwen3_trn_helpers import run
from qwen3_trn_helpers.cli import main
from qwen3_trn_helpers.errors import RunFolderError, TrainingError
from qwen3_trn_helpers.training import metrics_file
from qwen3_trn_helpers.training.checkpoint import SETTINGS_FILE
from qwen3_trn_helpers.training.metrics_file import (
    keep_steps_before,
    read_metrics,
    scan_metrics,
    write_atomically,
)


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert "unexpected" not in err[0]
    return err[0]


def steps_in(out: Path) -> list[int]:
    return [r["step"] for r in read_metrics(out / "metrics.jsonl")]


@pytest.fixture(scope="module")
def checkpointed(tmp_path_factory) -> Path:
    """A 2-step run at the tiny preset's 256 tokens, checkpoint at step 2 (copied by
    each test that damages it)."""
    out = tmp_path_factory.mktemp("round5") / "run"
    run(steps=2, checkpoint_interval=2, out=str(out), progress=False)
    return out


def resume_argv(out: Path, *extra: str, steps: int = 3) -> list[str]:
    return ["train", "--steps", str(steps), "--checkpoint-interval", "2", "--out", str(out),
            "--resume", "--no-progress", *extra]  # fmt: skip


# --- 1. an unreadable run.json never turns the resume check off ---------------------------

#: what the probe did to run.json: each one had resumed a 256-token run at 64 silently
DAMAGES = {
    "garbage": lambda p: p.write_text("garbage\n"),
    "missing": lambda p: p.unlink(),
    "truncated": lambda p: p.write_bytes(p.read_bytes()[:40]),
    "binary": lambda p: p.write_bytes(bytes(range(256))),
    "a JSON list": lambda p: p.write_text("[]"),
}


def test_each_checkpoint_records_the_settings_it_was_trained_with(checkpointed):
    record = json.loads((checkpointed / "checkpoint" / "step-2" / SETTINGS_FILE).read_text())
    saved = json.loads((checkpointed / "run.json").read_text())
    assert record["resolved"]["seq len"] == saved["resolved"]["seq len"] == 256
    for key in ("init", "seed", "warmup_steps", "mixed_precision"):
        assert record["spec"][key] == saved["spec"][key], key


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_run_json_is_checked_against_the_checkpoint(
    damage, tmp_path, checkpointed, capsys
):
    out = tmp_path / "run"
    shutil.copytree(checkpointed, out)
    DAMAGES[damage](out / "run.json")
    before = (out / "run.json").read_bytes() if (out / "run.json").exists() else None
    assert main(resume_argv(out, "--seq-len", "64")) == 1
    line = one_error_line(capsys)
    assert (
        "seq len 256 -> 64 (" in line
        and "; the settings saved with the checkpoint at step 2)" in line
    )
    after = (out / "run.json").read_bytes() if (out / "run.json").exists() else None
    assert after == before and steps_in(out) == [1, 2]  # refused before anything changed


def test_a_checkpoint_without_settings_and_no_run_json_is_refused(tmp_path, checkpointed, capsys):
    out = tmp_path / "run"
    shutil.copytree(checkpointed, out)
    (out / "checkpoint" / "step-2" / SETTINGS_FILE).unlink()  # an older qwen3-trn's checkpoint
    (out / "run.json").write_text("garbage")
    for auto in ([], ["--resume", "auto"]):
        assert main([*resume_argv(out), *auto]) == 1
        line = one_error_line(capsys)
        assert "run.json is not valid JSON (cut short or overwritten)" in line, line
        assert f"records no settings ({SETTINGS_FILE})" in line
        assert "Put the run's run.json back, or start a new run (--overwrite" in line
    (out / "run.json").unlink()
    assert main(resume_argv(out)) == 1
    assert "run.json is missing" in (line := one_error_line(capsys)) and "a new --out" in line
    assert steps_in(out) == [1, 2] and not (out / "run.json").exists()


def test_a_resume_with_the_same_settings_goes_on_and_writes_run_json_anew(
    tmp_path, checkpointed, capsys
):
    out = tmp_path / "run"
    shutil.copytree(checkpointed, out)
    (out / "run.json").unlink()
    assert main(resume_argv(out)) == 0
    note = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("note: ")]
    assert note == [
        f"note: {out / 'run.json'} is missing; the settings saved with the checkpoint at step 2 "
        "match this resume's; run.json is written anew"
    ]
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "completed" and info["resolved"]["seq len"] == 256
    assert info["resumed_from_step"] == 2 and steps_in(out) == [1, 2, 3]


def test_resume_auto_after_the_last_step_with_a_damaged_run_json_is_one_line(
    tmp_path, checkpointed, capsys
):
    """(It read run.json as the finished run's record: `unexpected JSONDecodeError`.)"""
    out = tmp_path / "run"
    shutil.copytree(checkpointed, out)
    (out / "run.json").write_text("{")
    assert main([*resume_argv(out, steps=2), "--resume", "auto"]) == 1
    err = capsys.readouterr().err
    assert "pass --steps above it" in err and "unexpected" not in err


# --- 2. metrics.jsonl keeps every valid record ------------------------------------------------


def _line(step: int) -> bytes:
    return json.dumps({"step": step, "loss": 10.0 - step}).encode() + b"\n"


def test_every_valid_record_is_read_whatever_lies_between(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(
        _line(1) + b"garbage{{{\n" + _line(2) + b"\xff\xfe not utf-8\n" + _line(3)
        + b"[]\n" + b'{"step": "4"}\n' + _line(5) + b'{"step": 6, "lo'
    )  # fmt: skip
    records, unreadable = scan_metrics(path)
    assert [r["step"] for r in records] == [1, 2, 3, 5]
    assert unreadable == [2, 4, 6, 7, 9]
    keep_steps_before(path, 4)  # a resume from step 3: the valid lines before it, cleanly
    assert scan_metrics(path) == ([{"step": s, "loss": 10.0 - s} for s in (1, 2, 3)], [])


@pytest.mark.parametrize(
    "bad",
    [b"garbage{{{\n", b"\xff\xfe\xfd\n", b'{"step": 2, "lo\n'],
    ids=["garbage", "not UTF-8", "cut short"],
)
def test_a_bad_line_loses_no_step_on_resume_and_is_named(bad, tmp_path, checkpointed, capsys):
    """`garbage{{{` between steps 1 and 2 had left 1, 3 after a resume (step 2 deleted);
    a non-UTF-8 line ended `unexpected UnicodeDecodeError`."""
    out = tmp_path / "run"
    shutil.copytree(checkpointed, out)
    lines = (out / "metrics.jsonl").read_bytes().splitlines(keepends=True)
    (out / "metrics.jsonl").write_bytes(lines[0] + bad + lines[1])
    assert main(resume_argv(out)) == 0
    notes = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("note: ")]
    assert len(notes) == 1, notes
    assert "holds 1 unreadable line (line 2: not a JSON step record), dropped now" in notes[0]
    assert "has no line" not in notes[0]
    assert steps_in(out) == [1, 2, 3]
    assert scan_metrics(out / "metrics.jsonl")[1] == []  # the file is clean again


def test_a_file_cut_short_then_resumed_later_names_the_missing_steps(
    tmp_path, checkpointed, capsys
):
    out = tmp_path / "run"
    shutil.copytree(checkpointed, out)
    (out / "metrics.jsonl").write_bytes(b'{"step": 1, "lo')  # cut inside its first line
    assert main(resume_argv(out)) == 0
    note = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("note: ")]
    assert len(note) == 1 and "has no line for steps 1-2, though the checkpoint" in note[0]
    assert "and holds 1 unreadable line (line 1" in note[0]
    assert steps_in(out) == [3]


# --- 6. a full disk names the file and the free space ---------------------------------------


def _full_disk_for(monkeypatch, name: str, after: int = 0) -> None:
    """os.write into a file called ``name`` fails with ENOSPC (half the bytes written
    first, as a disk filling mid-write does) once ``after`` writes into it succeeded."""
    real_write, done = os.write, [0]

    def write(fd: int, data) -> int:
        try:
            target = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            target = ""
        if target == name:
            done[0] += 1
            if done[0] > after:
                real_write(fd, bytes(data)[: len(data) // 2])
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs Linux's /proc")
def test_a_full_disk_while_writing_metrics_is_one_line_and_keeps_the_steps(
    tmp_path, monkeypatch, capsys
):
    _full_disk_for(monkeypatch, "metrics.jsonl", after=1)  # step 2's line fails
    out = tmp_path / "run"
    assert main(["train", "--steps", "3", "--out", str(out), "--no-progress"]) == 1
    line = one_error_line(capsys)
    assert line.startswith(f"error: writing {out / 'metrics.jsonl'} failed (No space left")
    assert " free there): it holds every step before step 2; free some space" in line
    assert (out / "metrics.jsonl").read_bytes().endswith(b"\n")  # the torn half cut off
    assert scan_metrics(out / "metrics.jsonl") == (read_metrics(out / "metrics.jsonl"), [])
    assert steps_in(out) == [1]
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "failed" and "No space left" in info["error"]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs Linux's /proc")
def test_a_full_disk_while_writing_run_json_keeps_the_old_one(tmp_path, monkeypatch):
    path = tmp_path / "run.json"
    path.write_text('{"status": "running"}')
    _full_disk_for(monkeypatch, ".run.json.tmp")
    with pytest.raises(RunFolderError) as refused:
        write_atomically(path, '{"status": "completed"}')
    assert str(refused.value).startswith(f"writing {path} failed (No space left on device; ")
    assert "run.json keeps what it held" in str(refused.value)
    assert path.read_text() == '{"status": "running"}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]  # no temporary left


def test_free_space_is_said_in_units():
    assert metrics_file.free_space("/").split()[1] in ("B", "KiB", "MiB", "GiB")
    assert metrics_file.free_space("/no/such/folder") == "unknown"


@pytest.fixture
def tiny_disk(tmp_path):
    """A 1 MiB tmpfs (root only: skipped elsewhere), unmounted after the test."""
    where = tmp_path / "disk"
    where.mkdir()
    try:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)],
            capture_output=True, text=True,
        )  # fmt: skip
    except OSError as e:
        pytest.skip(f"mount: {e}")
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()})")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)


def _fill(disk: Path) -> None:
    """Take every free byte of ``disk``."""
    with open(disk / "filler", "ab", buffering=0) as f:
        for size in (1 << 16, 1 << 12, 1 << 8, 1):
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError:
                pass


def test_a_run_into_a_full_disk_is_one_line_naming_run_json(tiny_disk, capsys):
    """A real ENOSPC before the first step: run.json's write names the file."""
    _fill(tiny_disk)
    out = tiny_disk / "run"
    assert main(["train", "--steps", "1", "--out", str(out), "--no-progress"]) == 1
    line = one_error_line(capsys)
    assert line.startswith(f"error: writing {out / 'run.json'} failed (No space left on device")
    assert "0 B free there" in line and not (out / "run.json").exists()


@pytest.mark.slow
@pytest.mark.long
def test_a_disk_that_fills_during_a_run_keeps_every_step_before(tiny_disk, capsys):
    """A real ENOSPC mid-run: the disk filled after step 1, metrics.jsonl fails when its
    lines first need another page of the tmpfs (about step 17)."""
    out = tiny_disk / "run"

    def fill(record):
        if record["step"] == 1:
            _fill(tiny_disk)

    with pytest.raises(TrainingError) as failed:
        run(steps=40, seq_len=64, out=str(out), progress=False, on_step=fill)
    message, step = str(failed.value), failed.value.step
    assert message.startswith(f"writing {out / 'metrics.jsonl'} failed (No space left on device")
    assert "0 B free there" in message and f"every step before step {step}" in message
    assert 2 < step < 40 and steps_in(out) == list(range(1, step))
    assert (out / "metrics.jsonl").read_bytes().endswith(b"\n")
    assert json.loads((out / "run.json").read_text())["status"] == "running"  # (no room)


# --- 5. a preset's corpus never reads the working folder --------------------------------------


@pytest.mark.parametrize("what", ["folder", "file", "earlier --out"])
def test_a_c4_in_the_working_folder_leaves_trn2_presets_alone(what, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    if what == "folder":
        (tmp_path / "c4").mkdir()
    elif what == "file":
        (tmp_path / "c4").write_text("")
    else:
        (tmp_path / "c4").mkdir()
        (tmp_path / "c4" / "run.json").write_text("{}")
    job = ["--nnodes", "2", "--device", "neuron", "--preset", "4b", "--steps", "2",
           "--allow-hub-corpus"]  # fmt: skip
    assert main(["slurm", *job, "--out", str(tmp_path / "r")]) == 0, capsys.readouterr().err
    assert "--corpus" not in capsys.readouterr().out  # the preset's, decided on the nodes
    argv = ["k8s", *job, "--out", "/fsx/r", "--image", "img"]
    assert main(argv) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert main(["plan", "--model", "4b", "--json"]) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)


@pytest.mark.slow
def test_a_c4_folder_leaves_the_dry_run_alone(tmp_path, monkeypatch, capsys):
    """(In this process: a child would add only its start.)"""
    from qwen3_trn_helpers.cli import main

    (tmp_path / "c4").mkdir()
    monkeypatch.chdir(tmp_path)
    assert main(["dry-run", "--preset", "4b", "--layers", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["world_size"] == 64


def test_a_preset_default_is_the_dataset_even_where_a_c4_folder_lies(tmp_path, monkeypatch):
    from qwen3_trn_helpers.data.corpus import dataset_args
    from qwen3_trn_helpers.training.plan import plan_run
    from qwen3_trn_helpers.training.spec import RunSpec

    monkeypatch.chdir(tmp_path)
    (tmp_path / "c4").mkdir()
    plan = plan_run(RunSpec(preset="4b", nproc=64), device_type="neuron")
    assert (plan.corpus, plan.corpus_streams) == ("c4", True)
    assert dataset_args(plan.corpus, streams=plan.corpus_streams) == ("c4", None)


# --- 8. Kubernetes names and pod paths --------------------------------------------------------

K8S = ["k8s", "--nnodes", "2", "--device", "cpu", "--steps", "2", "--out", "/fsx/runs/x",
       "--image", "img"]  # fmt: skip


@pytest.mark.parametrize(
    "name, why",
    [
        ("a\nb", "not a name Kubernetes accepts"),
        ("qwen3-trn-\u00e9t\u00e9", "not a name Kubernetes accepts"),
        ("qwen'3", "not a name Kubernetes accepts"),
        ('qwen"3', "not a name Kubernetes accepts"),
        ("Qwen3", "not a name Kubernetes accepts"),
        ("x" * 80, "has 80 characters; Kubernetes takes at most"),
        ("-qwen3", "not a name Kubernetes accepts"),
        ("qwen3-", "not a name Kubernetes accepts"),
        ("3qwen", "not a name Kubernetes accepts"),
        ("", "not a name Kubernetes accepts"),
    ],
)
def test_a_name_kubernetes_refuses_is_refused_here(name, why, capsys):
    for api in ("trainjob", "pytorchjob"):
        assert main([*K8S, "--api", api, f"--name={name}"]) == 1
        assert why in one_error_line(capsys)
        assert capsys.readouterr().out == ""


def test_names_at_the_limits_and_the_namespace_reach_every_object(capsys):
    import pytorchjob_schema

    assert main([*K8S, "--api", "pytorchjob", "--name", "q" * 63, "--namespace", "ml-1"]) == 0
    (job,) = yaml.safe_load_all(capsys.readouterr().out)
    assert job["metadata"] == {"name": "q" * 63, "namespace": "ml-1"}
    pytorchjob_schema.validate_pytorchjob(job)
    # a TrainJob's JobSet names its Job NAME-node-0, itself at most 63 characters
    assert main([*K8S, "--name", "q" * 57]) == 1
    assert "has 57 characters; Kubernetes takes at most 56" in one_error_line(capsys)
    assert main([*K8S, "--name", "q" * 56, "--namespace", "0team"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["metadata"]["namespace"] for d in docs] == ["0team", "0team"]
    for namespace in ("Team", "team_a", "a" * 64, "t\u00eam"):
        assert main([*K8S, "--namespace", namespace]) == 1
        assert "--namespace" in one_error_line(capsys)


def test_trainjob_manifests_with_a_namespace_pass_the_schema(capsys):
    import trainjob_schema

    assert main([*K8S, "--namespace", "ml"]) == 0
    runtime, job = yaml.safe_load_all(capsys.readouterr().out)
    trainjob_schema.validate_trainer_object(runtime)
    trainjob_schema.validate_trainer_object(job)


def test_pod_paths_are_not_looked_for_here(capsys):
    """--corpus /fsx/... and --init /fsx/... had to exist on the machine writing the
    manifest; the pods read them."""
    paths = ["--corpus", "/fsx/data/text.jsonl", "--init", "/fsx/ckpt/qwen3",
             "--tokenizer", "/fsx/tok"]  # fmt: skip
    for api in ("trainjob", "pytorchjob"):
        assert main([*K8S, "--api", api, *paths]) == 0, capsys.readouterr().err
        command = yaml.safe_load_all(capsys.readouterr().out)
        text = json.dumps(list(command))
        for value in paths[1::2]:
            assert value in text
    assert main([*K8S, "--corpus", "data/text.jsonl"]) == 1
    line = one_error_line(capsys)
    assert "--corpus 'data/text.jsonl' names a path in the job's pods" in line
    assert "absolute (for example /fsx/...)" in line


# --- 9. wheelhouse manifests are data: every fault one line -----------------------------------


def _wheelhouse(tmp_path: Path) -> tuple[Path, dict]:
    """A small but complete wheelhouse for this machine and Python (no pip: one fake
    wheel and one asset, each with its true size and sha256)."""
    from qwen3_trn_helpers.ops import wheelhouse as wh

    house = tmp_path / "house"
    (house / "wheels").mkdir(parents=True)
    (house / "assets" / "tok").mkdir(parents=True)
    wheel = house / "wheels" / "qwen3_trn-0.1-py3-none-any.whl"
    wheel.write_bytes(b"wheel")
    asset = house / "assets" / "tok" / "tokenizer.json"
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
    (house / "manifest.json").write_text(json.dumps(manifest))
    return house, manifest


def _verify(house: Path) -> subprocess.CompletedProcess:
    """What setup.sh runs, in a fresh interpreter."""
    return subprocess.run(
        [sys.executable, "-m", "qwen3_trn_helpers.ops.wheelhouse", "verify", str(house)],
        capture_output=True, text=True,
    )  # fmt: skip


def test_a_good_wheelhouse_verifies(tmp_path):
    house, _ = _wheelhouse(tmp_path)
    done = _verify(house)
    assert done.returncode == 0 and done.stdout.splitlines()[0] == "qwen3-trn==0.1", done.stderr


def _drop(key):
    def change(m):
        del m[key]

    return change


MANIFEST_FAULTS = {
    "no python_version": (_drop("python_version"), "has no 'python_version'"),
    "no markers": (_drop("markers"), "has no 'markers'"),
    "no requirement": (_drop("requirement"), "has no 'requirement'"),
    "python_version a number": (
        lambda m: m.update(python_version=3.11),
        "'python_version' is not a version",
    ),
    "markers a list": (lambda m: m.update(markers=[]), "'markers' is not an object"),
    "a wheel entry a string": (
        lambda m: m["wheels"].update({next(iter(m["wheels"])): "x"}),
        "the entry for wheels/qwen3_trn-0.1-py3-none-any.whl is not an object",
    ),
    "an asset entry a list": (
        lambda m: m["assets"]["tok"].update({"tokenizer.json": []}),
        "the entry for assets/tok/tokenizer.json is not an object",
    ),
    "bytes a string": (
        lambda m: m["assets"]["tok"]["tokenizer.json"].update(bytes="2"),
        "the entry for assets/tok/tokenizer.json is not an object with its bytes",
    ),
    "left_out a list": (lambda m: m.update(left_out=["torch"]), "'left_out' is not what"),
}


@pytest.mark.parametrize("fault", MANIFEST_FAULTS)
def test_every_manifest_fault_is_one_line(fault, tmp_path):
    house, manifest = _wheelhouse(tmp_path)
    change, words = MANIFEST_FAULTS[fault]
    change(manifest)
    (house / "manifest.json").write_text(json.dumps(manifest))
    done = _verify(house)
    err = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(err) == 1 and err[0].startswith("error: "), done.stderr
    assert words in err[0] and "Traceback" not in done.stderr


def test_a_manifest_that_is_not_an_object_is_one_line(tmp_path):
    house, _ = _wheelhouse(tmp_path)
    for text in ("[]", '"x"', "\udcff"):
        (house / "manifest.json").write_bytes(text.encode("utf-8", "surrogateescape"))
        done = _verify(house)
        assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.parametrize("where", ["asset", "asset folder", "wheels folder"])
def test_a_link_in_the_wheelhouse_is_refused(where, tmp_path, monkeypatch):
    """An asset that was a link to any readable file passed verify (its checksum is
    the target's)."""
    from qwen3_trn_helpers.ops import wheelhouse as wh

    monkeypatch.setenv("QWEN3_TRN_CACHE", str(tmp_path / "cache"))
    house, manifest = _wheelhouse(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    if where == "asset":
        asset = house / "assets" / "tok" / "tokenizer.json"
        (tmp_path / "secret").write_bytes(asset.read_bytes())  # same bytes: checksum passes
        asset.unlink()
        asset.symlink_to(tmp_path / "secret")
        link = asset
    else:
        folder = house / ("assets/tok" if where == "asset folder" else "wheels")
        shutil.move(folder, elsewhere)
        folder.symlink_to(elsewhere)
        link = folder
    done = _verify(house)
    assert done.returncode == 1, done.stdout
    assert done.stderr.strip() == (
        f"error: {link} is a symbolic link; a wheelhouse holds plain files and folders: "
        f"copy it again without links, or rebuild it: qwen3-trn wheelhouse {house}"
    )
    with pytest.raises(wh.WheelhouseError, match="is a symbolic link"):
        wh.install_assets(house) if where != "wheels folder" else wh.verify(house)
