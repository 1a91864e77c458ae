"""The exercise solutions shipped with the notebooks run and give sensible answers."""

import importlib.util
import math
from pathlib import Path

SOLUTIONS = Path(__file__).resolve().parents[1] / "notebooks" / "solutions"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, SOLUTIONS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_s00_preflight():
    s00 = load("s00_preflight")
    count, special = s00.exercise_1()
    assert count == 11 and special == ["<|im_start|>", "<|im_end|>"]
    assert s00.exercise_2() == 151936 - 151669


def test_s01_device_registration():
    s01 = load("s01_device_registration")
    assert s01.is_trainium_registered() is False or s01.is_trainium_registered() is True
    err = s01.autocast_error()
    assert 0 < err < 1  # bf16 keeps ~3 significant digits of values ~ +-20


def test_s03_ten_step_run(ten_step_random):
    s03 = load("s03_ten_step_run")
    mean = s03.mean_step_time(ten_step_random.metrics_path)
    assert 0 < mean < ten_step_random.metrics[0]["step_time_s"] * 5
    drop = s03.drop_per_step(ten_step_random.losses)
    assert math.isfinite(drop) and drop < 0


def test_s02_three_variants(tmp_path):
    s02 = load("s02_three_variants")
    blocks, padding = s02.exercise_1()
    assert blocks == 255 and padding == 255 * 256 - 4096 * 8
    assert s02.exercise_2(tmp_path).worst() <= 1e-4
