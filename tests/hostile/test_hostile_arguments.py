"""Hostile input, as users type it: paths relative to where they stand, numbers that
are not finite or too large, wrong types through the Python API, corpora and caches
that are not what they seem, a run larger than this machine, a folder named like a
dataset where the user stands. Each ends in one clear line before anything is built."""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest
from hostile import one_error_line, strict_load

from qwen3_trn_helpers import assets, run
from qwen3_trn_helpers.cli import main
from qwen3_trn_helpers.errors import AssetError, ConfigError
from qwen3_trn_helpers.training.metrics_file import strict_json, to_record
from qwen3_trn_helpers.training.spec import RunSpec

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


# --- corpus files ------------------------------------------------------------------------------


def test_corpus_surprises_are_named(tmp_path):
    from qwen3_trn_helpers.data.corpus import read_documents

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


def test_bad_input_raises_config_error_in_python_too():
    with pytest.raises(ConfigError, match="positive finite"):
        RunSpec(lr=float("nan")).validate()
    with pytest.raises(ConfigError, match="resume needs out:"):
        RunSpec(resume=True, checkpoint_interval=1).validate()


# --- the Python API takes any object, and threads ------------------------------------


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


# --- no more `unexpected` ---------------------------------------------------------------


def test_a_cache_under_a_file_is_named(tmp_path, monkeypatch, capsys):
    (tmp_path / "afile").write_text("x")
    for cache in ("afile/x", "afile"):
        monkeypatch.setenv("QWEN3_TRN_CACHE", str(tmp_path / cache))
        assert main(["train", "--steps", "1", "--out", str(tmp_path / "run")]) == 1
        line = one_error_line(capsys)
        assert f"{tmp_path / 'afile'} is a file; set QWEN3_TRN_CACHE to a folder" in line
    assert not (tmp_path / "run").exists()


def test_a_failed_hub_request_is_caught_whichever_http_library_the_hub_uses(monkeypatch):
    """huggingface_hub 1.x's session is httpx's; 2.x's is httpx2's, whose errors are not
    httpx's (a refused connection came out as "unexpected ConnectError" on Python 3.12)."""
    import types

    import httpx

    from qwen3_trn_helpers.runs.run import http_errors

    library = types.ModuleType("otherhttp")

    class HTTPError(Exception):
        pass

    class Client:
        pass

    library.HTTPError = HTTPError
    Client.__module__ = "otherhttp._client"
    monkeypatch.setitem(sys.modules, "otherhttp", library)
    assert http_errors(Client()) == (httpx.HTTPError, HTTPError)
    assert http_errors(httpx.Client()) == (httpx.HTTPError,)


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


# --- a preset's corpus never reads the working folder --------------------------------------


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
