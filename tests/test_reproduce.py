"""Published weights vs random init, the local published checkpoint, multi-rank runs."""

import json
import math
import subprocess
import sys

import pytest

from qwen3_trn_helpers.published import RECIPE, ensure_local_published
from qwen3_trn_helpers.reproduce import AWS_STEP1
from qwen3_trn_helpers.train import run
from qwen3_trn_helpers.variants import PRESETS

LN_VOCAB = math.log(151936)


def test_cli_reproduce_native(tmp_path):
    out = tmp_path / "rep"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "qwen3_trn_helpers",
            "reproduce",
            "--variant",
            "native",
            "--out",
            str(out),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    by_init = {row["init"]: row for row in summary["summary"]}
    pre, rnd = by_init["pretrained"]["step-1 loss"], by_init["random"]["step-1 loss"]
    assert pre < rnd - 2  # published weights start clearly below random init
    assert abs(rnd - LN_VOCAB) < 0.6
    assert by_init["pretrained"]["AWS step 1"] == AWS_STEP1["pretrained"] == 6.54
    assert by_init["random"]["deviation"] == pytest.approx(rnd - 12.43, abs=1e-3)
    assert len(summary["steps"]) == 10 and summary["steps"][0]["AWS random"] == 12.43
    assert (out / "reproduce.png").read_bytes()[:4] == b"\x89PNG"
    assert "loss pretrained" in proc.stdout and "deviation" in proc.stdout


def test_local_published_checkpoint_is_a_real_hf_checkpoint():
    """transformers itself loads it and agrees with torchtitan's native model."""
    from qwen3_trn_helpers.parity import parity

    folder = ensure_local_published("native", PRESETS["tiny"])
    recipe = json.loads((folder / "qwen3_trn_recipe.json").read_text())
    assert recipe["steps"] == RECIPE["steps"] and recipe["final_loss"] < 9
    assert parity(folder, seq_len=32).worst() <= 1e-4


@pytest.mark.parametrize("variant", ["transformers_v5", "nki_moe"])
def test_pretrained_starts_below_random(variant, tmp_path):
    pre = run(variant, init="pretrained", steps=2, out=tmp_path / "p", progress=False)
    rnd = run(variant, init="random", steps=2, out=tmp_path / "r", progress=False)
    assert pre.losses[0] < rnd.losses[0] - 2, (pre.losses, rnd.losses)


def test_two_ranks_match_one_rank_with_same_global_batch(tmp_path):
    from qwen3_trn_helpers.launch import launch

    two = launch(2, tmp_path / "two", steps=6, local_batch_size=1)
    one = run("native", steps=6, local_batch_size=2, out=tmp_path / "one", progress=False)
    assert [m["step"] for m in two.metrics] == list(range(1, 7))
    assert two.spec.local_batch_size == 1
    worst = max(abs(a - b) for a, b in zip(one.losses, two.losses, strict=True))
    assert worst < 0.3, (one.losses, two.losses)
    assert (tmp_path / "two" / "launch.log").exists()


def test_tensorboard_events_written(tmp_path):
    result = run("native", steps=2, out=tmp_path / "tb", tensorboard=True, progress=False)
    assert list((result.out / "tb").rglob("events.out.tfevents.*"))
