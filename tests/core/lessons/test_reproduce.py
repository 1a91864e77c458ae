"""Published weights vs random init, and the local published checkpoint.

(Two ranks against one on the same data: notebook 04, executed by nbval.)"""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from qwen3_trn_helpers import run
from qwen3_trn_helpers.lessons import reproduction as reproduce_module
from qwen3_trn_helpers.lessons.logits_parity import parity
from qwen3_trn_helpers.lessons.reproduction import AWS_STEP1
from qwen3_trn_helpers.model.shapes import VOCAB_SIZE
from qwen3_trn_helpers.runs.weights import RECIPE

LN_VOCAB = math.log(VOCAB_SIZE)
pytestmark = pytest.mark.slow


@pytest.mark.long
def test_cli_reproduce_native(tmp_path, published_tiny):
    out = tmp_path / "rep"
    cmd = [sys.executable, "-m", "qwen3_trn_helpers", "reproduce", "--variant", "native",
           "--steps", "3", "--out", str(out), "--no-progress"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    by_init = {row["init"]: row for row in summary["summary"]}
    pre, rnd = by_init["pretrained"]["step-1 loss"], by_init["random"]["step-1 loss"]
    assert pre < rnd - 2  # published weights start clearly below random init
    assert abs(rnd - LN_VOCAB) < 0.1
    assert summary["aws_step1"] == AWS_STEP1  # what the table compares against, recorded
    for init, row in by_init.items():  # each run's step-1 loss next to AWS's, and the gap
        assert row["AWS step 1"] == AWS_STEP1[init]
        assert row["deviation"] == pytest.approx(row["step-1 loss"] - AWS_STEP1[init], abs=1e-3)
    first, *later = summary["steps"]
    assert len(summary["steps"]) == 3 and first["step"] == 1
    assert [first[f"AWS {init}"] for init in AWS_STEP1] == list(AWS_STEP1.values())
    assert all(row[f"AWS {init}"] == "" for row in later for init in AWS_STEP1)  # step 1 only
    assert (out / "reproduce.png").read_bytes()[:4] == b"\x89PNG"
    assert "loss pretrained" in proc.stdout and "deviation" in proc.stdout
    runs = {i: json.loads((out / i / "run.json").read_text()) for i in ("pretrained", "random")}
    resolved = {i: {k: v for k, v in r["resolved"].items() if k != "init"} for i, r in runs.items()}
    assert resolved["pretrained"] == resolved["random"]  # only the initial weights differ


def _prose(text: str) -> str:
    return " ".join(text.replace("*", "").split())


def test_the_prose_states_aws_step1():
    """README, notebook 03 and the module say AWS's numbers: the ones AWS_STEP1 holds."""
    pre, rnd = AWS_STEP1["pretrained"], AWS_STEP1["random"]
    root = Path(__file__).resolve().parents[3]
    readme = _prose((root / "README.md").read_text())
    assert f"gave loss {pre} at step 1 from the published weights and {rnd} from random" in readme
    cells = json.loads((root / "notebooks" / "03_ten_step_run.ipynb").read_text())["cells"]
    notebook = _prose(" ".join("".join(c["source"]) for c in cells))
    assert f"published weights started at loss {pre}; from random initialisation at {rnd}" in (
        notebook
    )
    assert f"step-1 loss {pre} from the published weights and {rnd} from random" in _prose(
        reproduce_module.__doc__
    )


def test_local_published_checkpoint_is_a_real_hf_checkpoint(published_tiny):
    """transformers itself loads it and agrees with torchtitan's native model."""
    recipe = json.loads((published_tiny / "qwen3_trn_recipe.json").read_text())
    assert recipe["steps"] == RECIPE["steps"] and recipe["final_loss"] < 9
    assert parity(published_tiny, seq_len=32).worst() <= 1e-4


@pytest.mark.parametrize(
    ("variant", "checkpoint"),
    [
        ("transformers_v5", "published_tiny"),
        # the MoE checkpoint is pretrained for this check alone: 40 s of CPU on a machine
        # that has not made it before, so it runs in the long step (CI's, after the suite)
        pytest.param("nki_moe", "published_tiny_moe", marks=pytest.mark.long),
    ],
)
def test_pretrained_starts_below_random(variant, checkpoint, tmp_path, request):
    request.getfixturevalue(checkpoint)  # the local checkpoint: found in the cache or made
    pre = run(variant, init="pretrained", steps=2, out=str(tmp_path / "p"), progress=False)
    rnd = run(variant, init="random", steps=2, out=str(tmp_path / "r"), progress=False)
    assert pre.losses[0] < rnd.losses[0] - 2, (pre.losses, rnd.losses)


def test_tensorboard_events_written(tmp_path):
    result = run(steps=2, out=str(tmp_path / "tb"), tensorboard=True, progress=False)
    assert list((result.out / "tb").rglob("events.out.tfevents.*"))


def test_a_launched_runs_export_gets_its_shape_from_its_folder(tmp_path):
    """Every trn2 run is launched, and its result comes from its folder with no plan:
    notebook 03's "what the models say" cell failed there ('NoneType' object has no
    attribute 'shape'; found by the trn2 rehearsal on the test double, issue 45)."""
    import json
    from dataclasses import asdict

    from qwen3_trn_helpers.lessons.generation import exported_folder
    from qwen3_trn_helpers.runs.folder import RunResult
    from qwen3_trn_helpers.training.spec import RunSpec

    spec = RunSpec(preset="tiny", steps=2, out=str(tmp_path / "run"), device="neuron")
    run = tmp_path / "run"
    (run / "checkpoint" / "step-2").mkdir(parents=True)
    (run / "checkpoint" / "step-2" / "model.safetensors").write_bytes(b"weights")
    info = {"status": "completed", "spec": asdict(spec), "resolved": {"device": "neuron"}}
    (run / "run.json").write_text(json.dumps(info))
    result = RunResult(out=run, spec=spec, status="completed")
    assert result.plan is None
    folder = exported_folder(result)
    config = json.loads((folder / "config.json").read_text())
    assert config["hidden_size"] == 128 and (folder / "model.safetensors").exists()
