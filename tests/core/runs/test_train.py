"""The walkthrough's 10-step run, and inputs checked before anything trains."""

import json
import math

import pytest

from qwen3_trn_helpers import run
from qwen3_trn_helpers.errors import AssetError, ConfigError, RunFolderError
from qwen3_trn_helpers.model.shapes import VOCAB_SIZE

LN_VOCAB = math.log(VOCAB_SIZE)


def test_random_init_starts_near_ln_vocab(ten_step_random):
    # torchtitan's init: tied output layer std 0.02, so logits have std 0.02 * sqrt(128)
    # = 0.23 and the expected loss is ln V + 0.23^2 / 2 = 11.957
    assert ten_step_random.losses[0] == pytest.approx(LN_VOCAB + 0.0256, abs=0.05)


def test_loss_falls_over_ten_steps(ten_step_random):
    losses = ten_step_random.losses
    assert len(losses) == 10
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.1, losses


def test_metrics_file_has_one_line_per_step(ten_step_random):
    lines = ten_step_random.metrics_path.read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["step"] for r in records] == list(range(1, 11))
    for r in records:
        assert {"loss", "grad_norm", "tokens_per_s", "step_time_s", "lr"} <= r.keys()
        assert r["tokens_per_s"] > 0 and r["step_time_s"] > 0
    assert "mfu_pct" not in records[0]  # meaningless without a chip's peak FLOPs
    manifest = json.loads((ten_step_random.out / "run.json").read_text())
    assert manifest["status"] == "completed" and manifest["steps_completed"] == 10
    assert manifest["resolved"]["preset"] == "tiny"
    assert manifest["resolved"]["attention"] == "document"


def test_second_run_in_same_process_reproduces_the_first(ten_step_random, tmp_path):
    import gc

    from torchtitan.tools.utils import GarbageCollection

    GarbageCollection(gc_freq=1000)  # what torchtitan's Trainer makes: the collector off
    assert not gc.isenabled()  # (if this fails, torchtitan stopped; the trainer's
    gc.enable()  # callback that turns it back on at close can go)
    again = run("native", steps=3, out=str(tmp_path / "again"), progress=False)
    assert again.losses == pytest.approx(ten_step_random.losses[:3], abs=1e-5)
    assert gc.isenabled()  # a kernel that trained still collects reference cycles


def test_out_folder_with_a_previous_run_is_refused(ten_step_random):
    with pytest.raises(RunFolderError, match="already holds a run"):
        run("native", steps=1, out=str(ten_step_random.out), progress=False)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"variant": "gpt2"}, "unknown variant 'gpt2'"),
        ({"preset": "huge"}, "unknown preset 'huge'"),
        ({"steps": 0}, "steps must be a positive integer"),
        ({"local_batch_size": -1}, "local_batch_size must be a positive integer"),
        ({"seq_len": 0}, "seq_len must be a positive integer"),
        ({"lr": 0.0}, "lr must be a positive finite number"),
        ({"seq_len": 10**6}, "beyond the model's context"),
        ({"attention": "flex"}, "FlexAttention.*CUDA only"),
        ({"nproc": 2}, "2-rank run needs out: every rank"),
        ({"stpes": 3}, "unknown run parameter 'stpes'"),
    ],
)
def test_bad_arguments_fail_before_training(kwargs, message, tmp_path):
    kwargs = {"out": str(tmp_path / "x"), **kwargs} if "nproc" not in kwargs else kwargs
    with pytest.raises(ConfigError, match=message):
        run(**{"progress": False, **kwargs})
    assert not (tmp_path / "x").exists()


def test_init_folder_missing_is_a_clear_error(tmp_path):
    with pytest.raises(AssetError, match="checkpoint folder .* does not exist"):
        run(init=str(tmp_path / "nope"), out=str(tmp_path / "x"), progress=False)
    assert not (tmp_path / "x").exists()
