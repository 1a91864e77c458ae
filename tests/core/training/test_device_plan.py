"""The device is decided once, in planning, and carried as a value; planning finishes
before anything launches; the trainer config reads the Plan alone (issue 33, items 3-4)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from qwen3_trn_helpers import device as device_mod
from qwen3_trn_helpers.device import DEVICES, Device, as_device
from qwen3_trn_helpers.errors import ConfigError
from qwen3_trn_helpers.training.plan import plan_run
from qwen3_trn_helpers.training.spec import RunSpec

PACKAGE = Path(__file__).resolve().parents[3] / "qwen3_trn_helpers"
#: a device name compared as a string (what the Device value replaces)
COMPARISON = re.compile(
    r'(==|!=) "(cpu|neuron|cuda)"|device_type (==|!=|in|not in) |device (==|!=) '
    r'|\.type (==|!=) "(cpu|neuron|cuda)"|in \("neuron"'
)


def test_each_device_knows_its_backends():
    cpu, neuron, cuda = DEVICES["cpu"], DEVICES["neuron"], DEVICES["cuda"]
    assert (cpu.process_group_backend, cpu.compile_backend) == ("gloo", "inductor")
    # TorchNeuron registers "neuron" as its process-group and torch.compile backend
    assert (neuron.process_group_backend, neuron.compile_backend) == ("neuron", "neuron")
    assert (cuda.process_group_backend, cuda.compile_backend) == ("nccl", "inductor")
    assert [d.is_trn2 for d in (cpu, neuron, cuda)] == [False, True, False]
    assert cpu.torch_device.type == "cpu" and cpu.module is device_mod.CPU_DEVICE_MODULE
    toy = as_device("toy")  # a lesson's own accelerator: inductor, not a trn2
    assert isinstance(toy, Device) and not (toy.is_trn2 or toy.is_cpu) and str(toy) == "toy"
    assert as_device(neuron) is neuron and as_device("neuron") is neuron


def test_the_plan_carries_the_device_decided_once():
    trn2 = plan_run(RunSpec(), device_type="neuron")
    assert trn2.device is DEVICES["neuron"] and trn2.device_type == "neuron"
    assert trn2.attention == "causal"  # the device's default, decided in planning
    assert plan_run(RunSpec(), device_type=DEVICES["cpu"]).device is DEVICES["cpu"]


def test_device_strings_are_compared_in_at_most_four_files():
    files = sorted(
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if any(COMPARISON.search(line) for line in p.read_text().splitlines()
               if not line.lstrip().startswith("#"))
    )  # fmt: skip
    assert "device.py" in files and len(files) <= 4, files


def test_a_multi_node_run_without_an_endpoint_fails_in_planning(tmp_path):
    spec = RunSpec(nproc=1, nnodes=2, device="cpu", out=str(tmp_path / "x"))
    with pytest.raises(ConfigError, match="needs rdzv_endpoint=HOST:PORT"):
        plan_run(spec)
    assert plan_run(spec.replace(rdzv_endpoint="10.0.0.5:29500")).nnodes == 2
    assert plan_run(spec, device_type="cpu").nnodes == 2  # planned for other machines


def test_a_class_share_is_read_in_planning(monkeypatch, tmp_path):
    """The share's cores are on the plan, and a run with more ranks than the share is
    refused while planning, before anything launches."""
    monkeypatch.setattr(device_mod, "resolve", lambda requested="auto": DEVICES["neuron"])
    monkeypatch.setenv("QWEN3_TRN_NEURON_CORES", "16-23")
    plan = plan_run(RunSpec(nproc=2, out=str(tmp_path / "a")))
    assert plan.device.is_trn2 and plan.neuron_cores == "16-17"
    monkeypatch.setenv("QWEN3_TRN_NEURON_CORES", "8-8")
    with pytest.raises(ConfigError, match=r"starts 2 ranks but your share .*8-8\) holds 1"):
        plan_run(RunSpec(nproc=2, out=str(tmp_path / "b")))


def test_the_trainer_config_reads_the_plan_alone(tmp_path):
    from qwen3_trn_helpers.training.trainer import trainer_config

    plan = plan_run(RunSpec(steps=3, warmup_steps=7, seed=11, device="cpu", init="pretrained"))
    with pytest.raises(ConfigError, match="with_init_weights"):
        trainer_config(plan, tmp_path)
    folder = tmp_path / "weights"
    config = trainer_config(plan.with_init_folder(folder), tmp_path)
    assert config.checkpoint.initial_load_path == str(folder)
    assert config.lr_scheduler.warmup_steps == 3  # resolved in planning: at most the steps
    assert config.debug.seed == 11
    # the resolved variant and device, not names looked up again
    assert config.qwen3_trn.variant is plan.variant and config.qwen3_trn.device is plan.device


def test_a_cpu_without_bf16_matmul_trains_in_float32(monkeypatch):
    """An AVX2-only CPU multiplies bf16 in torch's scalar loop (87 s a tiny step against
    2.4 s in float32, measured on an AVX2 EPYC): such a CPU's run trains in float32 and
    its summary says so; a CPU with oneDNN's bf16 keeps bf16, and a plan for other
    machines keeps what was asked."""
    monkeypatch.setattr(device_mod, "cpu_has_bf16_matmul", lambda: False)
    plan = plan_run(RunSpec(device="cpu"))
    assert plan.mixed_precision == "float32" and plan.reduce_dtype == "float32"
    assert plan.summary()["mixed precision"] == "float32"
    assert plan_run(RunSpec(device="cpu"), device_type="cpu").mixed_precision == "bfloat16"
    monkeypatch.setattr(device_mod, "cpu_has_bf16_matmul", lambda: True)
    plan = plan_run(RunSpec(device="cpu"))
    assert plan.mixed_precision == "bfloat16" and "mixed precision" not in plan.summary()


def test_the_cpu_peak_is_measured_in_the_dtype_a_run_trains_in(monkeypatch):
    """`qwen3-trn doctor` and the planner's CPU machine time the dtype training uses
    here: timing bf16 on an AVX2-only CPU timed torch's scalar loop (doctor took 257 s
    in CI on 2026-12-02), a rate no run here would meet."""
    import torch

    from qwen3_trn_helpers import cpu_peak

    monkeypatch.setattr(device_mod, "cpu_has_bf16_matmul", lambda: False)
    assert cpu_peak.cpu_training_dtype() is torch.float32
    assert cpu_peak.cpu_matmul_peak(n=64, repeats=1) > 0
    monkeypatch.setattr(device_mod, "cpu_has_bf16_matmul", lambda: True)
    assert cpu_peak.cpu_training_dtype() is torch.bfloat16
