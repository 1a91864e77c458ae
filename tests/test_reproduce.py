"""Published weights vs random init, the local published checkpoint, multi-rank runs."""

import json
import math
import subprocess
import sys

import pytest

from qwen3_trn_helpers import run
from qwen3_trn_helpers.lessons.parity import parity
from qwen3_trn_helpers.lessons.reproduce import AWS_STEP1
from qwen3_trn_helpers.model.shapes import VOCAB_SIZE
from qwen3_trn_helpers.training.published import RECIPE

LN_VOCAB = math.log(VOCAB_SIZE)
pytestmark = pytest.mark.slow


def test_cli_reproduce_native(tmp_path, published_tiny):
    out = tmp_path / "rep"
    cmd = [sys.executable, "-m", "qwen3_trn_helpers", "reproduce", "--variant", "native",
           "--out", str(out), "--no-progress"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    by_init = {row["init"]: row for row in summary["summary"]}
    pre, rnd = by_init["pretrained"]["step-1 loss"], by_init["random"]["step-1 loss"]
    assert pre < rnd - 2  # published weights start clearly below random init
    assert abs(rnd - LN_VOCAB) < 0.1
    assert by_init["pretrained"]["AWS step 1"] == AWS_STEP1["pretrained"] == 6.54
    assert by_init["random"]["deviation"] == pytest.approx(rnd - 12.43, abs=1e-3)
    assert len(summary["steps"]) == 10 and summary["steps"][0]["AWS random"] == 12.43
    assert (out / "reproduce.png").read_bytes()[:4] == b"\x89PNG"
    assert "loss pretrained" in proc.stdout and "deviation" in proc.stdout
    runs = {i: json.loads((out / i / "run.json").read_text()) for i in ("pretrained", "random")}
    resolved = {i: {k: v for k, v in r["resolved"].items() if k != "init"} for i, r in runs.items()}
    assert resolved["pretrained"] == resolved["random"]  # only the initial weights differ


def test_local_published_checkpoint_is_a_real_hf_checkpoint(published_tiny):
    """transformers itself loads it and agrees with torchtitan's native model."""
    recipe = json.loads((published_tiny / "qwen3_trn_recipe.json").read_text())
    assert recipe["steps"] == RECIPE["steps"] and recipe["final_loss"] < 9
    assert parity(published_tiny, seq_len=32).worst() <= 1e-4


@pytest.mark.parametrize("variant", ["transformers_v5", "nki_moe"])
def test_pretrained_starts_below_random(variant, tmp_path, published_tiny, published_tiny_moe):
    pre = run(variant, init="pretrained", steps=2, out=str(tmp_path / "p"), progress=False)
    rnd = run(variant, init="random", steps=2, out=str(tmp_path / "r"), progress=False)
    assert pre.losses[0] < rnd.losses[0] - 2, (pre.losses, rnd.losses)


def test_two_ranks_equal_one_rank_on_the_same_data(tmp_path, tiny_hf_checkpoint):
    """FSDP over 2 gloo ranks at batch 1 = 1 rank at batch 2, batch for batch.

    Both start from one checkpoint: torchtitan's random init draws differently on a
    1-rank and a 2-rank mesh."""
    from qwen3_trn_helpers.lessons.scaling import matched_corpora

    one_rank, two_ranks = matched_corpora(tmp_path / "data", samples=6)
    common = dict(steps=6, init=str(tiny_hf_checkpoint), progress=False)
    two = run(nproc=2, corpus=str(two_ranks), out=str(tmp_path / "two"), **common)
    one = run(local_batch_size=2, corpus=str(one_rank), out=str(tmp_path / "one"), **common)
    assert [m["step"] for m in two.metrics] == list(range(1, 7))
    assert two.spec.local_batch_size == 1 and two.spec.nproc == 2
    assert one.losses[0] == pytest.approx(two.losses[0], abs=1e-5)  # same weights, same data
    worst = max(abs(a - b) for a, b in zip(one.losses, two.losses, strict=True))
    assert worst < 2e-3, (one.losses, two.losses)  # bf16 noise (1.5e-4 seen), not data
    assert (tmp_path / "two" / "launch.log").exists()


def test_tensorboard_events_written(tmp_path):
    result = run(steps=2, out=str(tmp_path / "tb"), tensorboard=True, progress=False)
    assert list((result.out / "tb").rglob("events.out.tfevents.*"))
