"""The exercise solutions shipped with the notebooks run and give the answers they claim."""

import importlib.util
import math
from pathlib import Path

import pytest

SOLUTIONS = Path(__file__).resolve().parents[1] / "notebooks" / "solutions"
LN_VOCAB = math.log(151936)


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, SOLUTIONS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_s00_preflight():
    s00 = load("s00_preflight")
    count, special, with_number = s00.exercise_1()
    assert count == 11 and special == ["<|im_start|>", "<|im_end|>"] and with_number == 21
    shares = s00.exercise_2()
    assert shares["tiny"] == pytest.approx(0.961, abs=1e-3)
    assert shares["4b"] == pytest.approx(0.0967, abs=1e-4)


def test_s01_device_registration():
    s01 = load("s01_device_registration")
    last = s01.exercise_1()
    assert last["_get_available_device_type()"] is None  # registered, not available
    assert last["torchtitan would pick"] == "cuda" and last["tensor.is_toydev exists"]
    err = s01.exercise_2()
    assert 0.01 < err < 0.3  # bf16: 8 mantissa bits of entries ~8


@pytest.mark.long
@pytest.mark.slow
def test_s02_three_variants(tmp_path, tiny_hf_checkpoint):
    s02 = load("s02_three_variants")
    report = s02.exercise_1(tiny_hf_checkpoint).max_abs_diff
    assert report["native vs transformers"] <= 1e-4
    # "not <=": uninitialised memory may even hold NaNs, which must count as a failure
    assert not report["transformers_v5 vs transformers"] <= 1e-3
    assert not report["native vs transformers_v5"] <= 1e-3
    times = s02.exercise_2(tmp_path)
    assert times["padding"] == pytest.approx(1 - 512 / 960)
    assert times["blockwise"] > 0 and times["grouped_mm"] > 0
    assert times["padding_flops_share"] < 0.01  # why the two barely differ at this size
    assert s02.exercise_3() == 5


@pytest.mark.slow
def test_s03_ten_step_run(tmp_path, ten_step_random, published_tiny):
    s03 = load("s03_ten_step_run")
    first, last = s03.exercise_1(ten_step_random.metrics_path)
    assert first == pytest.approx(math.exp(ten_step_random.losses[0]))
    assert last < first  # it did learn something in 10 steps
    seen, unseen = s03.exercise_2(tmp_path)
    assert seen < unseen  # memorised text scores better than held-out text
    losses = s03.exercise_3(tmp_path, steps=4)
    assert len(losses) == 4 and all(math.isfinite(x) for x in losses)
    assert losses[0] == pytest.approx(ten_step_random.losses[0], abs=1e-5)  # before any update


def test_s04_scaling_to_trn2():
    s04 = load("s04_scaling_to_trn2")
    rows = s04.exercise_1()
    assert rows[2]["activations"] > rows[4]["activations"] > rows[8]["activations"]
    assert rows[2]["params"] == rows[4]["params"] == rows[8]["params"]
    layout, lnc1, lnc2 = s04.exercise_2()
    assert layout == "TP 4 x FSDP 32" and lnc1["total GiB"] < lnc1["HBM GiB"] == 12
    assert lnc1["params"] == pytest.approx(lnc2["params"] / 2, abs=0.01)  # 128-way shards
    assert lnc1["activations"] == lnc2["activations"]
    by_hand, generated = s04.exercise_3()
    assert by_hand == generated


def test_s05_several_nodes():
    s05 = load("s05_several_nodes")
    nodes = s05.exercise_1()
    assert (nodes["ranks"], nodes["replicas"]) == (256, 4)
    assert nodes["total GiB"] == pytest.approx(nodes["one node GiB"])  # same per rank


@pytest.mark.long
@pytest.mark.slow
def test_answer_key_is_what_the_solutions_compute(tmp_path, ten_step_random):
    """The instructor's key (notebooks/README.md) is rendered from the solutions' own
    results; a number typed by hand, or a solution that changed, fails here."""
    from qwen3_trn_helpers import run

    key = load("answer_key")
    pretrained = run("native", steps=10, init="pretrained", out=tmp_path / "pre", progress=False)
    metrics = {"random": ten_step_random.metrics_path, "pretrained": pretrained.metrics_path}
    diff = key.differences(key.in_readme(key.README.read_text()), key.render(metrics))
    assert not diff, (
        "notebooks/README.md's answer key differs from what the solutions compute "
        "(run: python notebooks/solutions/answer_key.py):\n" + "\n".join(diff)
    )


def test_answer_key_comparison_catches_a_stale_number():
    """The tolerance absorbs another CPU's last decimal, not a wrong answer."""
    key = load("answer_key")
    assert not key.differences("| 03 | loss 8.386 -> 7.757 |", "| 03 | loss 8.384 -> 7.760 |")
    assert key.differences("| 04 | total 8.8, 4.9 GiB |", "| 04 | total 9.96, 6.04 GiB |")
    assert key.differences("| 03 | the random one |", "| 03 | the pretrained one |")
