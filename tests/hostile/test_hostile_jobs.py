"""Job files take every user value as data (issue 26, items 1 and 10's k8s part), and
name only what Kubernetes accepts.

A `#SBATCH` line is a bash comment, so a value holding a newline would end it and run
what follows; every other shell character must reach the training command unchanged
and run nothing. Kubernetes' shared volume is checked after `..` is resolved; a name or
namespace Kubernetes would refuse is refused here, in one line, before any YAML."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from hostile import one_error_line

from qwen3_trn_helpers.cli import main

#: what a shell would run if a value were pasted into the script as code
HOSTILE = "a b$(touch PWNED1)`touch PWNED2`'q\"; touch PWNED3;#"


def slurm_argv(tmp_path: Path, **values: str) -> list[str]:
    argv = ["slurm", "--nnodes", "2", "--device", "cpu", "--steps", "2"]
    for flag, value in {"out": str(tmp_path / "runs" / "x"), **values}.items():
        argv += [f"--{flag}", value]
    return argv


@pytest.mark.parametrize("flag", ["out", "corpus", "tokenizer", "init", "the working folder"])
def test_a_control_character_in_any_value_is_refused_naming_it(flag, tmp_path, monkeypatch, capsys):
    bad = str(tmp_path / "runs\ntouch PWNED\n#")
    if flag == "the working folder":
        os.makedirs(bad)
        monkeypatch.chdir(bad)
        argv = slurm_argv(tmp_path)
    else:
        argv = slurm_argv(tmp_path, **{flag: bad})
    assert main(argv) == 1
    line = one_error_line(capsys)
    name = flag if flag == "the working folder" else f"--{flag}"
    assert line.startswith(f"error: {name} holds a control character"), line
    assert capsys.readouterr().out == ""  # no script printed
    for tab in ("\t", "\r", "\x1b[2J"):
        assert main(slurm_argv(tmp_path, out=str(tmp_path / f"o{tab}x"))) == 1
        assert one_error_line(capsys).startswith("error: --out holds a control character")


def stubbed_slurm(tmp_path: Path) -> dict[str, str]:
    """PATH with scontrol, getent and srun stubs; srun writes each argument on a line."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stubs = {
        "scontrol": '[ "$1 $2" = "show hostnames" ] && echo node1; '
        '[ "$1 $2" = "show node" ] && echo "NodeName=node1 NodeAddr=127.0.0.1"; true',
        "getent": "echo 127.0.0.1 STREAM",
        "srun": 'for a in "$@"; do printf "%s\\0" "$a"; done >> "$CALLS"; '
        'printf "\\n\\0" >> "$CALLS"',
    }
    for name, body in stubs.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "CALLS": str(tmp_path / "calls"), "SLURM_JOB_ID": "7",
            "SLURM_JOB_NODELIST": "node[1-2]"}  # fmt: skip


def test_shell_characters_in_every_value_are_data(
    tmp_path, monkeypatch, capsys, tiny_hf_checkpoint, tokenizer_dir
):
    """$(...), backticks, quotes and ; in --out, --corpus, --init, --tokenizer and the
    working folder: the script passes bash -n, runs (Slurm stubbed) without running any
    of them, makes the folder by its exact name and hands srun each value unchanged."""
    box = tmp_path / HOSTILE
    box.mkdir()
    corpus = box / f"{HOSTILE}.txt"
    corpus.write_text("Qwen3 on Trainium.\n\nA second document for the corpus.\n")
    init, tokenizer = box / f"init {HOSTILE}", box / f"tok {HOSTILE}"
    shutil.copytree(tiny_hf_checkpoint, init)
    shutil.copytree(tokenizer_dir, tokenizer)
    out = box / f"out {HOSTILE}"
    monkeypatch.chdir(box)  # the working folder
    argv = slurm_argv(
        tmp_path, out=str(out), corpus=str(corpus), init=str(init), tokenizer=str(tokenizer)
    )
    assert main(argv) == 0, capsys.readouterr().err
    script = capsys.readouterr().out
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    (tmp_path / "job.sbatch").write_text(script)
    done = subprocess.run(
        ["bash", str(tmp_path / "job.sbatch")], cwd=tmp_path, env=stubbed_slurm(tmp_path),
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert not [p for p in tmp_path.rglob("PWNED*")], "a value ran as a command"
    assert out.is_dir()  # made by the script, by its exact name
    calls = (tmp_path / "calls").read_text().split("\n\0")
    check, fabric, train = (c.split("\0")[:-1] for c in calls[:3])
    assert fabric[fabric.index("-m") + 1 :][:4] == ["qwen3_trn_helpers", "smoke", "--nnodes", "2"]
    assert {str(box), str(out), str(corpus), str(init), str(tokenizer)} <= set(check)
    pairs = dict(zip(train, train[1:], strict=False))
    assert pairs["--out"] == str(out) and pairs["--corpus"] == str(corpus)
    assert pairs["--init"] == str(init) and pairs["--tokenizer"] == str(tokenizer)


def test_k8s_out_is_checked_after_dot_dot_and_image_must_be_named(capsys):
    base = ["k8s", "--nnodes", "2", "--device", "cpu", "--steps", "2"]
    assert main([*base, "--out", "/fsx/../etc/x", "--image", "img"]) == 1
    line = one_error_line(capsys)
    assert line.startswith("error: --out must be on the shared volume every pod mounts at /fsx")
    assert "(as /etc/x)" in line
    for image in ("", "  "):
        assert main([*base, "--out", "/fsx/runs/x", "--image", image]) == 1
        assert one_error_line(capsys) == (
            "error: --image is empty: name the container image (registry/name:tag)"
        )
    assert main([*base, "--out", "/fsx/runs/../runs/x", "--image", "img"]) == 0


def test_a_plan_with_under_a_gib_of_slack_warns(capsys):
    """30b-a3b on one trn2 leaves 0.47 GiB per core on an assumed runtime share: said."""
    # (room for its 366 GB checkpoints stated: the disk's own warning is tests/ops/jobs/
    # test_saves.py's)
    argv = ["slurm", "--nnodes", "2", "--device", "neuron", "--preset", "30b-a3b",
            "--out", "/fsx/r", "--steps", "2", "--allow-hub-corpus", "--storage-free-gb",
            "5000"]  # fmt: skip
    assert main(argv) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: the plan leaves 0.47 GiB per NeuronCore")
    assert main(["slurm", "--nnodes", "2", "--device", "neuron", "--preset", "4b",
                 "--out", "/fsx/r", "--steps", "2", "--allow-hub-corpus",
                 "--storage-free-gb", "5000"]) == 0  # fmt: skip
    assert capsys.readouterr().err == ""  # 4b: 15 GiB of room, nothing to say


# --- Kubernetes names and pod paths --------------------------------------------------------

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
