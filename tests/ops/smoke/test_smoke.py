"""The smoke ladder on a CPU: what applies runs, the Neuron rungs skip with their reason."""

import json
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.slow


def test_ladder_on_a_cpu(tmp_path):
    # (the 2-rank training rungs run `qwen3-trn train --nproc 2`, which notebook 04 runs)
    rungs = ["environment", "registration", "collectives", "nki_moe_kernel", "compile",
             "4b_native_64ranks"]  # fmt: skip
    cmd = [sys.executable, "-m", "qwen3_trn_helpers", "smoke", "--json", "--out", str(tmp_path)]
    for rung in rungs:
        cmd += ["--rung", rung]
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    wall = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    ladder = json.loads(proc.stdout)
    assert ladder == json.loads((tmp_path / "smoke.json").read_text())
    status = {r["name"]: r["status"] for r in ladder["rungs"]}
    assert list(status) == rungs
    assert status == {
        "environment": "skip",  # no neuron-ls here
        "registration": "skip",  # PrivateUse1 is not "neuron" here
        "collectives": "pass",  # 2 gloo ranks
        "nki_moe_kernel": "skip",
        # the neuron backend; the CPU's inductor is tests/core/training/test_compile.py's
        "compile": "skip",
        "4b_native_64ranks": "skip",
    }
    reasons = {r["name"]: r["reason"] for r in ladder["rungs"]}
    assert "not a Neuron machine" in reasons["environment"]
    assert "torchtitan 0.3.0 from " in reasons["environment"]  # which torchtitan, where
    assert "torch-neuronx is not loaded" in reasons["registration"]
    assert "2 ranks on cpu (gloo)" in reasons["collectives"]
    assert "needs the neuron device (backend 'neuron')" in reasons["compile"]
    assert "--compile uses 'inductor'" in reasons["compile"]
    # each rung that ran a child process records that child's time and leaves its log;
    # the full-size rung is skipped by the ladder itself, before any child starts
    seconds = {r["name"]: r["seconds"] for r in ladder["rungs"]}
    in_a_child = [name for name in rungs if name != "4b_native_64ranks"]
    for name in in_a_child:
        assert seconds[name] > 0, name
        assert (tmp_path / f"{name}.log").read_text().startswith("$ "), name
    assert seconds["4b_native_64ranks"] == 0 and not (tmp_path / "4b_native_64ranks.log").exists()
    # the rungs ran one after another inside this call (seconds are rounded to 0.1 s)
    assert sum(seconds.values()) <= wall + 0.05 * len(rungs)


def test_unknown_rung_is_one_error_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "qwen3_trn_helpers", "smoke", "--rung", "warp", "--out",
         str(tmp_path)], capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1 and proc.stderr.startswith("error: unknown rung 'warp'")
