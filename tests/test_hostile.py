"""Hostile and unlucky cases as users meet them: each ends in one clear line, and
nothing already written is lost (issue: reliability, round 3)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from qwen3_trn_helpers import assets, run
from qwen3_trn_helpers.cli import main
from qwen3_trn_helpers.errors import AssetError, ConfigError, RunFolderError, TrainingError
from qwen3_trn_helpers.model.hf_checkpoint import check_hf_checkpoint
from qwen3_trn_helpers.runs.folder import own_run_folder
from qwen3_trn_helpers.training.metrics_file import read_metrics, strict_json, to_record
from qwen3_trn_helpers.training.spec import RunSpec


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert "unexpected" not in err[0]
    return err[0]


def strict_load(text: str):
    """JSON as strict readers parse it: NaN / Infinity are errors."""
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))


# --- paths a user types are relative to where they stand --------------------------------


def test_relative_init_and_out_train(tmp_path, monkeypatch, tiny_hf_checkpoint, capsys):
    shutil.copytree(tiny_hf_checkpoint, tmp_path / "my_ckpt")
    monkeypatch.chdir(tmp_path)
    assert (
        main(["train", "--init", "my_ckpt", "--steps", "1", "--out", "run", "--no-progress"]) == 0
    )
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["spec"]["init"] == str(tmp_path / "my_ckpt") and info["status"] == "completed"


def test_every_path_flag_becomes_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "text.txt").write_text("hello")
    spec = RunSpec(init="ck", out="o", tokenizer="tok", corpus="text.txt").with_absolute_paths()
    assert [spec.init, spec.out, spec.tokenizer, spec.corpus] == [
        str(tmp_path / name) for name in ("ck", "o", "tok", "text.txt")
    ]
    named = RunSpec(corpus="c4", init="pretrained").with_absolute_paths()
    assert (named.corpus, named.init) == ("c4", "pretrained")  # names, not paths
    monkeypatch.setenv("QWEN3_TRN_CACHE", "cache")
    assert assets.cache_dir() == tmp_path / "cache"


# --- a run folder is owned while a run writes it -----------------------------------------


def test_a_live_runs_folder_is_refused_naming_its_owner(tmp_path, capsys):
    out = tmp_path / "live"
    with own_run_folder(out):  # a run in progress (this process stands in for it)
        for extra in (["--overwrite"], ["--resume", "--checkpoint-interval", "1"]):
            assert main(["train", "--steps", "1", "--out", str(out), *extra]) == 1
            line = one_error_line(capsys)
            assert "being written by a run still in progress (pid" in line
            assert f"pid {os.getpid()}" in line
    # the holder gone (however it ended), the folder is free again
    assert main(["train", "--steps", "1", "--out", str(out), "--no-progress"]) == 0


def test_out_is_never_the_current_folder_by_accident(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--out", ""]) == 1
    assert "out is empty" in one_error_line(capsys)
    (tmp_path / "afile").write_text("x")
    assert main(["train", "--out", "afile"]) == 1
    assert "is a file" in one_error_line(capsys)


def test_overwrite_removes_only_a_run_of_ours(tmp_path, capsys):
    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "checkpoint" / "mine.bin").write_text("user data")
    assert main(["train", "--out", str(tmp_path), "--overwrite"]) == 1
    assert "not a qwen3-trn run folder" in one_error_line(capsys)
    assert (tmp_path / "checkpoint" / "mine.bin").exists()


# --- checkpoints: failures as one line, with the step --------------------------------------


def _fail_saves_with(monkeypatch, error: BaseException) -> None:
    def broken_save(*args, **kwargs):
        raise CheckpointException("save failed", {0: (error, None)})

    monkeypatch.setattr(dcp, "save", broken_save)


def test_a_failing_checkpoint_save_names_the_step_and_keeps_the_metrics(tmp_path, monkeypatch):
    _fail_saves_with(monkeypatch, OSError(28, "No space left on device"))
    out = tmp_path / "full-disk"
    with pytest.raises(TrainingError) as failed:
        run(steps=3, checkpoint_interval=2, out=str(out), progress=False)
    message = str(failed.value)
    assert message.startswith("saving the checkpoint of step 2 into")
    assert "No space left on device" in message
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2]
    info = strict_load((out / "run.json").read_text())
    assert info["status"] == "failed" and "No space left" in info["error"]


def test_ctrl_c_during_a_save_is_a_ctrl_c(tmp_path, monkeypatch):
    _fail_saves_with(monkeypatch, KeyboardInterrupt())
    out = tmp_path / "interrupted"
    with pytest.raises(KeyboardInterrupt):
        run(steps=3, checkpoint_interval=1, out=str(out), progress=False)
    assert json.loads((out / "run.json").read_text())["status"] == "interrupted"


@pytest.fixture(scope="module")
def checkpointed(tmp_path_factory) -> Path:
    """A 2-step run with a checkpoint at step 2 (copied by each test that damages it)."""
    out = tmp_path_factory.mktemp("ckpt") / "run"
    run(steps=2, checkpoint_interval=2, out=str(out), progress=False)
    return out


def test_a_damaged_checkpoint_is_found_before_training(tmp_path, checkpointed, capsys):
    out = tmp_path / "run"
    shutil.copytree(checkpointed, out)
    shard = next((out / "checkpoint" / "step-2").glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[:100])  # a copy cut short
    argv = ["train", "--steps", "4", "--checkpoint-interval", "2", "--out", str(out), "--resume"]
    assert main(argv) == 1
    line = one_error_line(capsys)
    assert "is damaged" in line and shard.name in line and "step-2" in line


def test_bytes_changed_inside_a_shard_are_found(tmp_path, checkpointed, capsys):
    out = tmp_path / "run"
    shutil.copytree(checkpointed, out)
    shard = next((out / "checkpoint" / "step-2").glob("*.distcp"))
    assert (shard.parent / (shard.name + ".sha256")).is_file()  # written at save time
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte: same size, same metadata
    shard.write_bytes(bytes(data))
    argv = ["train", "--steps", "4", "--checkpoint-interval", "2", "--out", str(out), "--resume"]
    assert main(argv) == 1
    assert "does not match the sha256 recorded when it was saved" in one_error_line(capsys)


def test_resume_with_other_settings_is_refused_and_run_json_kept(tmp_path, checkpointed, capsys):
    out = tmp_path / "run"
    shutil.copytree(checkpointed, out)
    before = (out / "run.json").read_bytes()
    base = ["train", "--steps", "4", "--checkpoint-interval", "2", "--out", str(out), "--resume"]
    assert main([*base, "--seq-len", "128"]) == 1
    assert "seq len 256 -> 128" in one_error_line(capsys)
    assert main([*base, "--variant", "transformers_v5"]) == 1
    assert "variant 'native' -> 'transformers_v5'" in one_error_line(capsys)
    assert main([*base[:2], "2", *base[3:]]) == 1  # --steps 2: nothing left to train
    assert "pass --steps above it" in one_error_line(capsys)
    assert (out / "run.json").read_bytes() == before


def test_resume_from_a_hugging_face_export_says_what_it_is(tmp_path, capsys):
    out = tmp_path / "export"
    run(steps=1, export_hf=True, out=str(out), progress=False)
    argv = ["train", "--steps", "2", "--checkpoint-interval", "1", "--out", str(out), "--resume"]
    assert main(argv) == 1
    assert "is a Hugging Face export (--export-hf)" in one_error_line(capsys)


# --- numbers: strict JSON, finite input ----------------------------------------------------


def test_non_finite_numbers_never_reach_a_json_file(capsys):
    assert main(["train", "--lr", "inf"]) == 1
    assert "lr must be a positive finite number" in one_error_line(capsys)
    record = to_record(1, {"loss_metrics/global_avg_loss": float("nan"), "grad_norm": 1.0})
    assert strict_load(strict_json(record)) == {"step": 1, "loss": None, "grad_norm": 1.0}
    assert strict_load(strict_json({"x": [float("inf"), 2.0]})) == {"x": [None, 2.0]}


def test_an_overflowing_seed_is_refused(capsys):
    assert main(["train", "--seed", "99999999999999999999"]) == 1
    assert "seed must be between 0 and 2**32 - 1" in one_error_line(capsys)


# --- assets are verified, not just present -------------------------------------------------


def test_a_corrupt_cached_tokenizer_is_rebuilt(tmp_path, monkeypatch, tokenizer_dir, capsys):
    cache = tmp_path / "cache"
    shutil.copytree(assets.cache_dir() / "downloads", cache / "downloads")  # the pinned wheel
    shutil.copytree(tokenizer_dir, cache / tokenizer_dir.name)
    monkeypatch.setenv("QWEN3_TRN_CACHE", str(cache))
    broken = cache / tokenizer_dir.name / "tokenizer.json"
    broken.write_text(broken.read_text()[:1000])  # truncated
    folder = assets.ensure_tokenizer()
    assert "is damaged (tokenizer.json does not match" in capsys.readouterr().err
    assert assets.sha256_of(folder / "tokenizer.json") == assets.sha256_of(
        tokenizer_dir / "tokenizer.json"
    )


def test_an_unreadable_tokenizer_file_names_the_file(tmp_path):
    (tmp_path / "tokenizer.json").write_text('{"version": "1.0", "model": ')
    with pytest.raises(AssetError, match=r"tokenizer.json is not a readable tokenizer"):
        assets.load_tokenizer(tmp_path)


def test_quantized_init_weights_are_refused(tmp_path, tiny_hf_checkpoint):
    import torch
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "int8"
    shutil.copytree(tiny_hf_checkpoint, folder)
    file = next(folder.glob("*.safetensors"))
    tensors = load_file(file)
    tensors = {k: v.to(torch.int8) for k, v in tensors.items()}
    save_file(tensors, file, metadata={"format": "pt"})
    with pytest.raises(AssetError, match="holds I8 weights"):
        check_hf_checkpoint(folder)


def test_a_file_given_as_init_is_named_as_a_file(tiny_hf_checkpoint):
    with pytest.raises(AssetError, match="is a file; --init takes the checkpoint's folder"):
        check_hf_checkpoint(tiny_hf_checkpoint / "config.json")


# --- corpus files ------------------------------------------------------------------------------


def test_corpus_surprises_are_named(tmp_path):
    from qwen3_trn_helpers.corpus import read_documents

    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.jsonl").write_bytes(b'{"text": "caf\\u00e9 \xff bytes"}\n')  # not UTF-8
    assert len(read_documents(folder)) == 1
    (folder / "b.jsonl").write_text('{"text": 42}\n')
    with pytest.raises(AssetError, match=r"b.jsonl:1: 'text' is a int, not a string"):
        read_documents(folder)
    (folder / "b.jsonl").unlink()
    os.mkfifo(folder / "pipe.txt")  # reading it would block forever
    with pytest.raises(AssetError, match="not a regular file"):
        read_documents(folder)


def test_hub_corpus_offline_is_named(capsys):
    assert main(["train", "--corpus", "c4", "--steps", "1", "--out", "unused"]) == 1
    assert "streams from the Hugging Face hub, but offline mode is on" in one_error_line(capsys)


# --- this machine's memory, before anything is built --------------------------------------------


def test_a_run_larger_than_this_machine_is_refused_with_numbers(monkeypatch, capsys, tmp_path):
    from qwen3_trn_helpers.runs import run as run_module

    monkeypatch.setattr(run_module, "available_memory_gib", lambda: 0.25)
    assert main(["train", "--steps", "1", "--out", str(tmp_path)]) == 1
    line = one_error_line(capsys)
    assert "more than the 0.2 GiB free" in line and "--skip-memory-check" in line
    assert not (tmp_path / "run.json").exists()


# --- the loss plot and the terminal ------------------------------------------------------------


def test_a_full_disk_at_the_plot_leaves_no_half_picture(tmp_path, monkeypatch, capsys):
    from qwen3_trn_helpers.lessons import plots

    def no_space(*args, **kwargs):
        Path(args[1]).write_bytes(b"")  # what a full disk leaves behind
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(plots, "save_loss_plot", no_space)
    assert main(["train", "--steps", "1", "--out", str(tmp_path), "--no-progress"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: the run completed and metrics.jsonl holds every step")
    assert not (tmp_path / "loss.png").exists()
    assert json.loads((tmp_path / "run.json").read_text())["status"] == "completed"


def test_an_ascii_terminal_still_gets_a_clean_run(tmp_path):
    """A command that prints a path the terminal cannot show (a run printing its metrics
    path did: "unexpected UnicodeEncodeError" after it completed) escapes it instead.
    Every command prints through the same reconfigured streams (cli.main); `slurm`
    prints the --out path without training, so the check costs a second, not a run."""
    env = dict(os.environ, PYTHONIOENCODING="ascii")
    proc = subprocess.run(
        [sys.executable, "-m", "qwen3_trn_helpers", "slurm", "--nnodes", "2", "--steps", "2",
         "--out", str(tmp_path / "café")],  # a path the terminal cannot print
        capture_output=True, text=True, env=env, timeout=300, errors="replace",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-1500:]
    assert "caf\\xe9" in proc.stdout  # escaped, as the terminal can show it


def test_reproduce_labels_follow_steps(tmp_path):
    from qwen3_trn_helpers.lessons.reproduction import Reproduction
    from qwen3_trn_helpers.runs.folder import RunResult

    runs = {
        init: RunResult(
            out=tmp_path, spec=RunSpec(), metrics=[{"step": s, "loss": 10.0 - s} for s in (1, 2, 3)]
        )
        for init in ("pretrained", "random")
    }
    rows = Reproduction("native", "cpu", runs, tmp_path).summary_rows()
    assert rows[0]["step-3 loss"] == 7.0 and not any("step-10" in k for k in rows[0])


def test_bad_input_raises_config_error_in_python_too():
    with pytest.raises(ConfigError, match="positive finite"):
        RunSpec(lr=float("nan")).validate()
    with pytest.raises(ConfigError, match="resume needs --out"):
        RunSpec(resume=True, checkpoint_interval=1).validate()


# --- round 4 (issue 26): a wheelhouse stays in its folder -------------------------------------


def _fake_house(tmp_path: Path, wheels: dict, assets_: dict) -> Path:
    """A wheelhouse for this Python and machine whose manifest lists what a test wants."""
    from qwen3_trn_helpers import wheelhouse

    house = tmp_path / "house"
    (house / "assets" / "downloads").mkdir(parents=True)
    (house / "wheels").mkdir()
    manifest = {
        "format": wheelhouse.FORMAT, "qwen3_trn": "0", "requirement": "qwen3-trn",
        "target": "here", "python_version": wheelhouse._host_python(),
        "markers": wheelhouse.host_markers(), "command": "", "left_out": {},
        "wheels": wheels, "assets": assets_,
    }  # fmt: skip
    (house / "manifest.json").write_text(json.dumps(manifest))
    return house


@pytest.mark.parametrize(
    "where, name",
    [("asset", "../../evil.sh"), ("asset", "/etc/hostname"), ("wheel", "../x.whl"),
     ("folder", ".."), ("asset", "a\nb")],
)  # fmt: skip
def test_a_wheelhouse_entry_is_a_plain_name_inside_its_folder(
    tmp_path, monkeypatch, capsys, where, name
):
    from qwen3_trn_helpers import wheelhouse

    evil = tmp_path / "evil.sh"
    entry = {"bytes": 3, "sha256": "0" * 64}
    files = {name if where == "asset" else "ok.txt": entry}
    house = _fake_house(
        tmp_path,
        {name: entry} if where == "wheel" else {},
        {name if where == "folder" else "downloads": files},
    )
    (house / "assets" / "evil.sh").write_text("rm")  # what ../ would reach from downloads/
    cache = tmp_path / "a" / "b" / "cache"
    monkeypatch.setenv("QWEN3_TRN_CACHE", str(cache))
    for command in ("verify", "install-assets"):
        assert wheelhouse.main([command, str(house)]) == 1
        line = one_error_line(capsys)
        assert f"{name!r}, which is not a plain file name" in line, line
    assert not evil.exists() and not (tmp_path / "a" / "evil.sh").exists()


def test_installed_assets_never_follow_a_link_out_of_the_cache(tmp_path, monkeypatch, capsys):
    from qwen3_trn_helpers import wheelhouse

    house = _fake_house(tmp_path, {}, {"downloads": {"f.txt": {"bytes": 1, "sha256": "0"}}})
    (house / "assets" / "downloads" / "f.txt").write_text("x")
    cache, outside = tmp_path / "cache", tmp_path / "outside"
    cache.mkdir(), outside.mkdir()
    (cache / "downloads").symlink_to(outside)  # a link planted in the cache
    monkeypatch.setenv("QWEN3_TRN_CACHE", str(cache))
    assert wheelhouse.main(["install-assets", str(house)]) == 1
    assert "outside the cache" in one_error_line(capsys)
    assert not (outside / "f.txt").exists()


# --- round 4: the Python API takes any object, and threads ------------------------------------


@pytest.mark.parametrize(
    "param, value, said",
    [("out", 123, "out must be a str (or None), got int 123"),
     ("steps", "10", "steps must be a int, got str '10'"),
     ("resume", "yes", "resume must be True, False or 'auto'"),
     ("nproc", True, "nproc must be a int, got bool True"),
     ("corpus", ["a.txt"], "corpus must be a str (or None), got list")],
)  # fmt: skip
def test_a_wrong_type_in_the_python_api_names_the_parameter(param, value, said):
    with pytest.raises(ConfigError) as refused:
        run(**{param: value, "progress": False})
    assert said in str(refused.value)


def test_a_second_run_in_the_same_process_is_refused_clearly(tmp_path):
    """Two threads calling run() with different folders failed inside torch; the second
    is now refused in one line while the first trains on and completes."""
    import threading

    training, tried = threading.Event(), threading.Event()

    def on_step(record):
        if record["step"] == 1:
            training.set()
            tried.wait(timeout=120)  # hold the first run mid-training

    thread = threading.Thread(
        target=run, name="first-run",
        kwargs=dict(steps=2, out=str(tmp_path / "a"), progress=False, on_step=on_step),
    )  # fmt: skip
    thread.start()
    try:
        assert training.wait(timeout=300)
        with pytest.raises(ConfigError) as refused:
            run(steps=1, out=str(tmp_path / "b"), progress=False)
    finally:
        tried.set()
        thread.join(timeout=300)
    assert "a run is already in progress in this process (thread 'first-run')" in str(refused.value)
    assert json.loads((tmp_path / "a" / "run.json").read_text())["status"] == "completed"
    assert not (tmp_path / "b").exists()


# --- round 4: no more `unexpected` ---------------------------------------------------------------


def test_a_cache_under_a_file_is_named(tmp_path, monkeypatch, capsys):
    (tmp_path / "afile").write_text("x")
    for cache in ("afile/x", "afile"):
        monkeypatch.setenv("QWEN3_TRN_CACHE", str(tmp_path / cache))
        assert main(["train", "--steps", "1", "--out", str(tmp_path / "run")]) == 1
        line = one_error_line(capsys)
        assert f"{tmp_path / 'afile'} is a file; set QWEN3_TRN_CACHE to a folder" in line
    assert not (tmp_path / "run").exists()


def test_hub_corpus_without_network_is_named_quickly(tmp_path, monkeypatch, capsys):
    """The hub allowed (HF_HUB_OFFLINE=0) but nothing answers: a closed local port stands
    in for a machine without network (no request leaves this machine)."""
    import socket
    import time

    from huggingface_hub import constants

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: connections are refused
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    started = time.monotonic()
    assert main(["train", "--corpus", "c4", "--steps", "1", "--out", str(tmp_path / "r")]) == 1
    line = one_error_line(capsys)
    assert f"corpus 'c4' streams from the Hugging Face hub, but http://127.0.0.1:{port}" in line
    assert "does not answer from this machine" in line
    assert time.monotonic() - started < 20


# --- round 4: no orphan ranks after a kill -9 of the command ------------------------------------


def _processes_naming(text: str) -> list[int]:
    """Live processes whose command line mentions ``text`` (a run folder's path), as
    the multi-node tests look for leftovers: ``pgrep -f`` (Linux and macOS)."""
    found = subprocess.run(["pgrep", "-f", text], capture_output=True, text=True)
    return [int(pid) for pid in found.stdout.split() if int(pid) != os.getpid()]


@pytest.mark.slow
@pytest.mark.long
def test_a_killed_launcher_takes_its_ranks_with_it(tmp_path):
    """kill -9 of `train --nproc 2`: torchrun and both ranks used to train on (parent 1),
    `--overwrite` was accepted meanwhile, and the orphans wrote checkpoints into the new
    run's folder. Now every process of the run is gone within seconds, run.json saying
    so (and until then the folder is refused: the next test)."""
    import signal
    import time

    out = tmp_path / "K"
    cli = subprocess.Popen(
        [sys.executable, "-m", "qwen3_trn_helpers", "train", "--nproc", "2", "--steps", "40",
         "--checkpoint-interval", "5", "--out", str(out), "--no-progress"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 400
        while not (out / "metrics.jsonl").exists() or not (out / "metrics.jsonl").read_text():
            assert cli.poll() is None and time.monotonic() < deadline, "the run never trained"
            time.sleep(0.2)
        cli.kill()  # SIGKILL: nothing of ours runs in the launcher any more
        cli.wait()
        killed = time.monotonic()
        while _processes_naming(str(out)):
            assert time.monotonic() - killed < 60, "torchrun or a rank outlived the launcher"
            time.sleep(0.2)
        gone_s = time.monotonic() - killed
    finally:
        for pid in _processes_naming(str(out)):
            os.kill(pid, signal.SIGKILL)
    steps = sorted(p.name for p in (out / "checkpoint").glob("step-*"))
    time.sleep(2)
    assert sorted(p.name for p in (out / "checkpoint").glob("step-*")) == steps
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "terminated", info["status"]
    assert "the command that launched this run" in (out / "launch.log").read_text()
    print(f"every process gone {gone_s:.1f} s after the kill")


def test_a_folder_is_refused_while_a_rank_of_another_run_holds_it(tmp_path, capsys):
    """What each launched rank holds while it lives (runs/lifeline.py): a shared lock.
    A rank stands in here as a child process holding it; the folder is refused until
    that process is gone, however it ends."""
    from qwen3_trn_helpers.runs.lifeline import RANKS_LOCK

    out = tmp_path / "K"
    out.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR "
         "| os.O_CREAT); fcntl.flock(fd, fcntl.LOCK_SH); print('held', flush=True); "
         "sys.stdin.read()", str(out / RANKS_LOCK)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunFolderError, match="still being written by ranks of an earlier"):
            with own_run_folder(out):
                pass
    finally:
        holder.kill()
        holder.wait()
    with own_run_folder(out):  # the rank gone: the folder is free
        pass


# --- round 4: --overwrite and links ----------------------------------------------------------


def _a_previous_run(folder: Path) -> None:
    folder.mkdir(parents=True)
    (folder / "run.json").write_text('{"status": "completed"}')
    (folder / "metrics.jsonl").write_text('{"step": 1, "loss": 1.0}\n')


def test_overwrite_removes_a_link_not_what_it_points_to(tmp_path):
    from qwen3_trn_helpers.runs.folder import prepare_out_dir

    other = tmp_path / "other-run" / "checkpoint" / "step-5"
    other.mkdir(parents=True)
    (other / ".metadata").write_text("another run's checkpoint")
    out = tmp_path / "run"
    _a_previous_run(out)
    (out / "checkpoint").symlink_to(other.parent)  # survived --overwrite, then was loaded
    (out / "tb").symlink_to(tmp_path / "nowhere")  # a dangling link counts too
    assert prepare_out_dir(out, overwrite=True) == out
    assert sorted(p.name for p in out.iterdir()) == []
    assert (other / ".metadata").read_text() == "another run's checkpoint"


def test_a_failed_removal_is_named_and_leaves_a_folder_overwrite_can_use(
    tmp_path, monkeypatch, capsys
):
    from qwen3_trn_helpers.runs import folder

    out = tmp_path / "run"
    _a_previous_run(out)
    (out / "checkpoint" / "step-5").mkdir(parents=True)

    def refuses(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(folder.shutil, "rmtree", refuses)
    assert main(["train", "--steps", "1", "--out", str(out), "--overwrite"]) == 1
    line = one_error_line(capsys)
    assert f"--overwrite could not remove {out / 'checkpoint'} (Permission denied)" in line
    assert (out / "run.json").exists()  # still a run of ours: the next --overwrite works
    monkeypatch.undo()
    assert folder.prepare_out_dir(out, overwrite=True) == out
    assert not (out / "checkpoint").exists() and not (out / "run.json").exists()


# --- round 4: Ctrl-C during a save on several ranks ---------------------------------------------


def test_ctrl_c_that_surfaces_as_a_write_error_is_still_a_ctrl_c(
    tmp_path, monkeypatch, capsys, request
):
    """With --nproc 2 a Ctrl-C during a save reached rank 0 as DCP's write error (its
    peer had stopped): the terminal said `interrupted`, run.json `failed`. The stop the
    process received decides, whatever error it caused; each rank's run is the same."""
    import signal

    def save_cut_by_ctrl_c(*args, **kwargs):
        try:
            signal.raise_signal(signal.SIGINT)  # the Ctrl-C, swallowed inside a collective
        except KeyboardInterrupt:
            pass
        raise CheckpointException("save failed", {0: (OSError(5, "write failed"), None)})

    monkeypatch.setattr(dcp, "save", save_cut_by_ctrl_c)
    # Ctrl-C as a terminal delivers it: a suite started in the background of a
    # non-interactive shell inherits SIGINT ignored, and the CLI then leaves it so
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, previous))
    out = tmp_path / "run"
    argv = ["train", "--steps", "3", "--checkpoint-interval", "1", "--out", str(out)]
    assert main([*argv, "--no-progress"]) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("interrupted: ")
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "interrupted" and "error" not in info


def test_a_ctrl_c_on_any_rank_of_a_failed_save_is_a_ctrl_c():
    from qwen3_trn_helpers.training.checkpoint import _interrupted

    write_error = (OSError(5, "write failed"), None)
    assert _interrupted(CheckpointException("x", {0: write_error, 1: (KeyboardInterrupt(), None)}))
    assert not _interrupted(CheckpointException("x", {0: write_error}))


#: makes a step of DCP's checkpoint save slow, as a large checkpoint on a slow disk is: a
#: rank touches ``saving.RANK`` in SLOW_SAVE_DIR as the step (SLOW_SAVE_AT: every rank's
#: ``write_data``, or rank 0's ``finish``, which writes .metadata while the others wait
#: in a collective) begins, waits, then does it for real (the checkpoint is DCP's own).
#: Loaded by the ranks as sitecustomize.
_SLOW_SAVE = """
import os
if os.environ.get("SLOW_SAVE_DIR") and "RANK" in os.environ:
    import time
    from pathlib import Path
    from torch.distributed.checkpoint import filesystem

    name = os.environ["SLOW_SAVE_AT"]
    real = getattr(filesystem._FileSystemWriter, name)

    def slow(self, *args, **kwargs):
        (Path(os.environ["SLOW_SAVE_DIR"]) / f"saving.{os.environ['RANK']}").touch()
        time.sleep(30)
        return real(self, *args, **kwargs)

    setattr(filesystem._FileSystemWriter, name, slow)
"""


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.parametrize("at, inside", [("write_data", 2), ("finish", 1)])
def test_ctrl_c_during_a_two_rank_save_says_interrupted(tmp_path, at, inside):
    """Ctrl-C while both ranks of `train --nproc 2` write a checkpoint: run.json said
    `failed` with DCP's write error (the terminal `interrupted`). Both now say
    `interrupted`, metrics.jsonl holds complete lines, and no process of the run is left."""
    import signal
    import time

    hooks, saving = tmp_path / "hooks", tmp_path / "saving"
    hooks.mkdir()
    saving.mkdir()
    (hooks / "sitecustomize.py").write_text(_SLOW_SAVE)
    path = os.pathsep.join(filter(None, [str(hooks), os.environ.get("PYTHONPATH")]))
    out = tmp_path / "run"
    cli = subprocess.Popen(
        [sys.executable, "-m", "qwen3_trn_helpers", "train", "--nproc", "2", "--steps", "6",
         "--checkpoint-interval", "2", "--out", str(out), "--no-progress"],
        env={**os.environ, "PYTHONPATH": path, "SLOW_SAVE_DIR": str(saving), "SLOW_SAVE_AT": at},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 400
        while len(list(saving.glob("saving.*"))) < inside:  # the ranks inside the save
            assert cli.poll() is None and time.monotonic() < deadline, cli.stderr.read()
            time.sleep(0.2)
        cli.send_signal(signal.SIGINT)  # what a terminal's Ctrl-C sends the command
        _, stderr = cli.communicate(timeout=120)
    finally:
        for pid in _processes_naming(str(out)):
            os.kill(pid, signal.SIGKILL)
    assert cli.returncode == 130, stderr[-3000:]
    assert stderr.strip().splitlines()[-1].startswith("interrupted:"), stderr[-3000:]
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "interrupted" and "error" not in info, info
    records = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2], records  # the save of step 2 was cut
    assert info["steps_completed"] == 2
    for line in (out / "metrics.jsonl").read_text().splitlines():
        strict_load(line)
    assert not _processes_naming(str(out))
    assert not (out / "checkpoint" / "step-2" / ".metadata").exists()  # never completed


# --- round 4: one settings check across nodes ---------------------------------------------------

_RANK_CHECK = """
import os, sys, json
import torch.distributed as dist
from qwen3_trn_helpers.errors import ConfigError
from qwen3_trn_helpers.training.ranks import check_same_versions
dist.init_process_group("gloo", timeout=__import__("datetime").timedelta(seconds=30))
try:
    check_same_versions(json.loads(sys.argv[1]))
    print("agreed")
except ConfigError as e:
    print(f"error: {e}")
dist.destroy_process_group()
"""


@pytest.mark.slow
@pytest.mark.long
def test_nodes_started_with_other_settings_stop_naming_the_setting(tmp_path):
    """Node B with --seq-len 64 against node A's default trained silently (tokens_seen
    disagreed with run.json). The check the ranks already make for library versions now
    compares each node's resolved settings too: every rank stops with the same line."""
    from qwen3_trn_helpers.training.ranks import free_port

    port = free_port()
    a = {"variant": "native", "seq len": 256, "--out": "/shared/run"}
    b = {**a, "seq len": 64}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RANK_CHECK, json.dumps(settings)],
            env={
                **os.environ,
                "RANK": str(r),
                "WORLD_SIZE": "2",
                "GROUP_RANK": str(r),
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        for r, settings in enumerate((a, b))
    ]
    outputs = [p.communicate(timeout=120)[0].strip().splitlines()[-1] for p in procs]
    assert outputs[0] == outputs[1], outputs  # every rank says the same
    assert "different run settings: seq len is 64 on node 1" in outputs[0]
    assert "and 256 on node 0" in outputs[0]


def test_the_settings_compared_name_each_flag(tmp_path):
    from qwen3_trn_helpers.training.plan import plan_run
    from qwen3_trn_helpers.training.ranks import settings_mismatch
    from qwen3_trn_helpers.training.trainer import same_on_every_node

    def report(node, **changes):
        spec = RunSpec(out=str(tmp_path), **changes)
        return {"node": node, "host": "h", "settings": same_on_every_node(plan_run(spec))}

    assert settings_mismatch([report(0), report(1)]) is None
    assert settings_mismatch([report(0), report(1, skip_memory_check=True)]) is None
    line = settings_mismatch([report(0), report(1, variant="transformers_v5")])
    assert "variant is 'transformers_v5' on node 1 (h) and 'native' on node 0" in line
    other_out = {"node": 1, "host": "h", "settings": {**report(1)["settings"], "--out": "/b"}}
    assert "--out is '/b' on node 1" in settings_mismatch([report(0), other_out])


# --- round 4: misleading or silent ----------------------------------------------------------------


def test_a_resume_over_a_cut_metrics_file_says_so(tmp_path, checkpointed, capsys):
    out = tmp_path / "run"
    shutil.copytree(checkpointed, out)
    lines = (out / "metrics.jsonl").read_text().splitlines()
    (out / "metrics.jsonl").write_text(lines[0] + "\n")  # cut to step 1; checkpoint at 2
    argv = ["train", "--steps", "3", "--checkpoint-interval", "2", "--out", str(out), "--resume"]
    assert main([*argv, "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "has no line for step 2, though the checkpoint at step 2 trained it" in err
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1, 3]


# --- round 4: an endpoint answered by another service -------------------------------------------


@pytest.mark.slow
@pytest.mark.long
def test_an_endpoint_answered_by_another_service_ends_in_one_line(tmp_path, capsys):
    """An HTTP server on the rendezvous port: the launch hung over 150 s after torchrun
    had failed (our own count of joined nodes blocked on the HTTP server) and left
    torchrun behind. Now it ends when torchrun does, in one line, with nothing left."""
    import http.server
    import threading
    import time

    class Quiet(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):  # its own log is not the launch's terminal
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    out = tmp_path / "never"
    started = time.monotonic()
    try:
        code = main(["train", "--nnodes", "2", "--rdzv-endpoint", f"127.0.0.1:{port}",
                     "--rdzv-timeout", "15", "--out", str(out), "--no-progress"])  # fmt: skip
    finally:
        server.shutdown()
    took = time.monotonic() - started
    assert code == 1
    line = one_error_line(capsys)
    assert f"something that is not torchrun's rendezvous answers at 127.0.0.1:{port}" in line
    # the timeout, the start-up margin (15 s), the stop; generous: 2 cores, shared
    assert took < 15 + 15 + 60, took
    assert not _processes_naming(str(out))
    print(f"ended {took:.1f} s after the start")


def test_torchrun_is_watched_while_the_nodes_still_meet(tmp_path):
    """Before its ranks exist nothing else would stop torchrun when the launcher is
    killed (it waited out --rdzv-timeout, 600 s by default): it runs under a watch of
    its parent. Here the watched module is http.server and its parent a shell."""
    import time

    marker = str(tmp_path / "watched")
    shell = subprocess.Popen(
        ["bash", "-c", f'"{sys.executable}" -m qwen3_trn_helpers.runs.lifeline http.server '
         f'0 --bind 127.0.0.1 --directory "{marker}" & wait'],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not _processes_naming(marker):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        time.sleep(1)
        shell.kill()  # kill -9 of the launcher
        shell.wait()
        killed = time.monotonic()
        while _processes_naming(marker):
            assert time.monotonic() - killed < 15, "the watched module outlived its parent"
            time.sleep(0.2)
    finally:
        for pid in _processes_naming(marker):
            os.kill(pid, 9)


# --- round 4: nodes started with another --nnodes -----------------------------------------------


def test_launch_settings_are_compared_as_data(tmp_path):
    """Each node's launch settings, as the watch reads them back from torchrun's store:
    the first difference, with both values and the other node's host, in one line that
    shows nothing another node wrote as terminal control characters."""
    from qwen3_trn_helpers.runs.rendezvous import everyone_read, launch_mismatch

    def entry(index, seen, host="a", **settings):
        given = {"--nnodes": 2, "--nproc": 1, **settings}
        return {"index": index, "seen": seen, "host": host, "pid": 7, "settings": given}

    same = [entry(1, 2), entry(2, 1, host="b")]
    assert launch_mismatch(1, same) is None and launch_mismatch(2, same) is None
    other = [entry(1, 2), entry(2, 2, host="evil\x1b[2J\nhost", **{"--nnodes": "3\n$(x)"})]
    line = launch_mismatch(1, other)
    assert line.startswith("--nnodes differs between nodes: 2 here (a), ")
    assert "on evil?[2J?host (launch pid 7)" in line and "\n" not in line and "\x1b" not in line
    assert launch_mismatch(2, other).startswith("--nnodes differs between nodes: 3?$(x) here")
    assert everyone_read(1, other) and not everyone_read(1, [entry(1, 2), entry(2, 1)])


def test_every_torchrun_setting_is_compared_between_nodes():
    """What each node publishes is every setting torchrun takes that the ranks cannot
    compare: a node started with another --max-restarts gives up while the others wait
    for a round it never joins; that, too, stops every node with one line."""
    from qwen3_trn_helpers.runs.rendezvous import launch_mismatch
    from qwen3_trn_helpers.runs.torchrun import launch_settings
    from qwen3_trn_helpers.training.plan import plan_run
    from qwen3_trn_helpers.training.spec import RunSpec

    def settings(**fields):
        spec = RunSpec(nnodes=2, rdzv_endpoint="10.0.0.1:29400", out="runs/x",
                       resume="auto", checkpoint_interval=5, **fields)  # fmt: skip
        return launch_settings(plan_run(spec, device_type="cpu"))

    mine = settings(max_restarts=3)
    assert set(mine) == {"--nnodes", "--nproc", "--max-restarts", "--rdzv-timeout"}
    entries = [
        {"index": 1, "seen": 2, "host": "a", "pid": 1, "settings": mine},
        {"index": 2, "seen": 2, "host": "b", "pid": 2, "settings": settings(max_restarts=0)},
    ]
    assert launch_mismatch(1, entries).startswith("--max-restarts differs between nodes: 3 here")
    entries[1]["settings"] = settings(max_restarts=3, rdzv_timeout=60)
    assert launch_mismatch(2, entries).startswith("--rdzv-timeout differs between nodes: 60 here")


def test_launch_settings_go_through_a_real_store():
    """Against a TCPStore as torchrun hosts it: each node gets its own number, reads
    every entry, and records how many it has read."""
    from datetime import timedelta

    from torch.distributed import TCPStore

    from qwen3_trn_helpers.runs.rendezvous import publish_launch, read_launches
    from qwen3_trn_helpers.training.ranks import free_port

    port = free_port()
    host = TCPStore("127.0.0.1", port, is_master=True, timeout=timedelta(seconds=5))
    endpoint = f"127.0.0.1:{port}"
    first = publish_launch(endpoint, '{"host": "a", "pid": 1, "settings": {"--nnodes": 3}}')
    second = publish_launch(endpoint, '{"host": "b", "pid": 2, "settings": {"--nnodes": 2}}')
    assert (first, second) == (1, 2)
    host.set("qwen3-trn.launch.3", "not an entry")  # something else wrote a key: skipped
    host.add("qwen3-trn.launch.count", 1)
    entries = read_launches(endpoint, first)
    assert [(e["index"], e["host"], e["seen"]) for e in entries] == [(1, "a", 3), (2, "b", 0)]
    assert read_launches(f"127.0.0.1:{free_port()}", 1) is None  # no store: nothing read
    del host


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.parametrize("other", [2, 4], ids=["forms-a-group-of-2", "never-forms"])
def test_nodes_started_with_another_nnodes_all_stop_naming_it(tmp_path, other):
    """`--nnodes 3` on one node against `--nnodes 2` on another: torchrun formed a group
    of 2 and both trained as 2 nodes, silently (or, against --nnodes 4, both waited out
    --rdzv-timeout and blamed a missing node). Now each node's launch publishes its
    settings in torchrun's store and every node stops within a minute, naming the flag
    and both values, with nothing left running."""
    import socket
    import time

    from qwen3_trn_helpers.training.ranks import free_port

    out = tmp_path / "run"
    port = free_port()
    agents = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "qwen3_trn_helpers",
                "train",
                "--no-progress",
                "--nnodes",
                str(nnodes),
                "--rdzv-endpoint",
                f"127.0.0.1:{port}",
                "--rdzv-timeout",
                "120",
                "--steps",
                "20",
                "--out",
                str(out),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for nnodes in (3, other)
    ]
    try:  # from the moment torchrun's store listens (torch's start alone takes a minute
        # on 2 shared cores): before, both waited out --rdzv-timeout or trained
        listening = None
        deadline = time.monotonic() + 300
        while any(agent.poll() is None for agent in agents) and time.monotonic() < deadline:
            if listening is None:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                    listening = time.monotonic()
                except OSError:
                    pass
            time.sleep(0.5)
        took = time.monotonic() - (listening or deadline)
        errors = [agent.communicate(timeout=10)[1] for agent in agents]
    finally:
        for agent in agents:
            agent.kill()
    assert [agent.returncode for agent in agents] == [1, 1], errors
    lines = [err.strip().splitlines()[-1] for err in errors]
    assert lines[0].startswith("error: --nnodes differs between nodes: 3 here "), lines
    assert f", {other} on " in lines[0], lines
    assert lines[1].startswith(f"error: --nnodes differs between nodes: {other} here "), lines
    assert ", 3 on " in lines[1], lines
    assert not any("Traceback" in err for err in errors)
    assert took < 60, took
    assert not _processes_naming(str(out))
    assert not (out / "metrics.jsonl").exists() or not read_metrics(out / "metrics.jsonl")
    print(f"both nodes stopped {took:.1f} s after torchrun's store listened")


def test_the_rendezvous_state_torch_writes_is_read():
    """torch 2.14's rendezvous state holds timezone-aware deadlines: the restricted
    unpickler refused datetime.timezone, so the count of joined nodes was never read
    (the launch said "nothing answered" with a node waiting there)."""
    import io
    import pickle
    from datetime import UTC, datetime

    from torch.distributed.elastic.rendezvous import dynamic_rendezvous as dr

    from qwen3_trn_helpers.runs.rendezvous import _RendezvousStateOnly

    state = dr._RendezvousState()
    for n in range(2):
        node = dr._NodeDesc(f"node{n}", 100 + n, 0)
        state.participants[node] = n
        state.last_heartbeats[node] = datetime.now(UTC)
    state.deadline = datetime.now(UTC)
    read = _RendezvousStateOnly(io.BytesIO(pickle.dumps(state))).load()
    assert len(read.participants) == 2
    with pytest.raises(pickle.UnpicklingError, match="system is not part of a rendezvous state"):
        _RendezvousStateOnly(io.BytesIO(pickle.dumps(__import__("os").system))).load()
