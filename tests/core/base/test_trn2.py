"""Every trn2 decision, resolved for device "neuron" on this CPU (nothing computes there).

Where a check needs Trainium itself, the smoke ladder's rung that covers it is named in
the module it concerns (qwen3_trn_helpers/ops/smoke/).
"""

import dataclasses
import math
import os
import types

import pytest

from qwen3_trn_helpers.device import DEVICES
from qwen3_trn_helpers.errors import ConfigError
from qwen3_trn_helpers.lessons.reproduction import reproduction_specs
from qwen3_trn_helpers.lessons.scaling import (
    trn2_launch_command,
    trn2_plan,
    trn2_torchrun_command,
)
from qwen3_trn_helpers.model.moe_blockwise import kernel_rejects, select_backend
from qwen3_trn_helpers.model.presets import PRESETS
from qwen3_trn_helpers.model.shapes import QWEN3_4B_2507, QWEN3_30B_A3B
from qwen3_trn_helpers.model.variants import VARIANTS
from qwen3_trn_helpers.training.plan import plan_run
from qwen3_trn_helpers.training.spec import RunSpec
from qwen3_trn_helpers.trn2 import Topology


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_reproduce_runs_differ_only_in_init_on_trn2(variant, tmp_path):
    specs = reproduction_specs(RunSpec(variant=variant, out=str(tmp_path)), "neuron")
    plans = {init: plan_run(s, device_type="neuron") for init, s in specs.items()}
    rows = {init: p.summary() for init, p in plans.items()}
    assert rows["pretrained"].pop("init") == "pretrained"
    assert rows["random"].pop("init") == "random"
    assert rows["pretrained"] == rows["random"]  # preset, layout, seq, AC, data, steps...
    full = PRESETS[VARIANTS[variant].trn2_preset]
    assert rows["random"]["preset"] == full.name and rows["random"]["ranks"] == 64
    assert rows["random"]["seq len"] == 4096
    assert rows["random"]["corpus"] == "c4"  # AWS: c4_test, which pip's torchtitan lacks


def test_reproduce_on_cpu_stays_small_and_offline(tmp_path):
    specs = reproduction_specs(RunSpec(out=str(tmp_path)), "cpu")
    plan = plan_run(specs["random"], device_type="cpu")
    assert (plan.preset.name, plan.world_size, plan.corpus) == ("tiny", 1, "embedded")


def test_4b_layout_on_64_ranks():
    plan = trn2_plan("native")
    assert (plan.tp, plan.fsdp, plan.world_size) == (4, 16, 64)
    assert plan.activation_checkpoint == "selective" and plan.attention == "causal"
    moe = trn2_plan("nki_moe")
    assert (moe.tp, moe.fsdp, moe.moe_block_size, moe.activation_checkpoint) == (1, 64, 256, "full")


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_one_rank_runs_on_trn2_use_a_preset_that_fits_one_core(variant):
    """What notebooks train in-process (and through one-rank launches) on trn2."""
    plan = plan_run(RunSpec(variant=variant, steps=1), device_type="neuron")
    assert plan.world_size == 1 and not plan.preset.full_size
    memory = plan.memory()
    assert memory.fits and memory.total_gib - memory.runtime_gib < 2, memory.row()
    two = plan_run(RunSpec(variant=variant, nproc=2, out="runs/x"), device_type="neuron")
    assert not two.preset.full_size  # notebook 04's 2-rank run: still the small preset
    assert two.memory().fits


def test_full_size_preset_on_one_core_is_refused_with_the_fix():
    with pytest.raises(ConfigError, match=r"needs about 7\d\.\d GiB per NeuronCore.*nproc=64"):
        plan_run(RunSpec(preset="4b"), device_type="neuron")


def test_memory_estimate_terms():
    plan = trn2_plan("native")
    m = plan.memory()
    n = QWEN3_4B_2507.parameter_count()
    assert m.params_gib * 1024**3 == pytest.approx(4 * n / 64)
    assert m.optimizer_gib == pytest.approx(2 * m.params_gib)
    assert m.fsdp_buffers_gib > 0.5  # the 4B's tied embedding gathered (V x d / TP x 8 B)
    assert m.scores_gib == 0  # causal SDPA on Neuron: the fused kernel, no scores kept
    assert m.fits and m.total_gib < m.hbm_gib == 24
    # a document mask sends Neuron's attention down the generic path: L x L per head
    doc = dataclasses.replace(plan, attention="document").memory()
    per_layer = 32 / 4 * 4096 * 4096 * 2 / 1024**3  # heads / TP x S x S x bf16
    assert doc.scores_gib == pytest.approx(per_layer * 36 / 2)  # selective AC keeps half
    # the Neuron runtime's own share: 96 MB microcode x 2 physical cores + 1 GiB assumed
    assert m.runtime_gib == pytest.approx(2 * 96 / 1024 + 1.0)
    assert dataclasses.replace(plan, device=DEVICES["cpu"]).memory().runtime_gib == 0


def test_30b_a3b_plan_fits_in_90_percent_of_a_core():
    plan = trn2_plan("nki_moe")
    moe = plan.memory()
    one_layer_experts = 128 * 3 * 2048 * 768 * 2 / 1024**3  # bf16, kernel layout
    # full checkpointing: one layer's kernel copies, saved activations, kernel gradients
    assert moe.kernel_copies_gib == pytest.approx(one_layer_experts)
    assert moe.kernel_grads_gib == pytest.approx(one_layer_experts)  # 1.21 GB
    # moe_cte's saved outputs: 255 blocks x 256 x (2 x 768 + 2048) x bf16 = 0.47 GB
    assert moe.kernel_saved_gib * 1024**3 == pytest.approx(255 * 256 * (2 * 768 + 2048) * 2)
    assert moe.usable_gib == pytest.approx(0.9 * 24)
    assert plan.reduce_dtype == "bfloat16" and moe.fits, moe.row()
    # with torchtitan's default fp32 gradient reduction it would need more than 90% of
    # HBM (though less than all of it): why the preset reduces in bf16
    fp32 = dataclasses.replace(plan.preset, reduce_dtype="float32")
    wide = dataclasses.replace(plan, preset=fp32).memory()
    assert moe.usable_gib < wide.total_gib < wide.hbm_gib and not wide.fits
    no_ac = dataclasses.replace(plan.preset, activation_checkpoint="none")
    assert not dataclasses.replace(plan, preset=no_ac).memory().fits


def test_30b_a3b_trainer_reduces_gradients_in_bf16(tmp_path):
    from qwen3_trn_helpers.training.trainer import trainer_config

    plan = trn2_plan("nki_moe")
    assert trainer_config(plan, tmp_path).training.mixed_precision_reduce == "bfloat16"
    small = plan_run(RunSpec(variant="nki_moe"), device_type="neuron")  # tiny_moe
    assert trainer_config(small, tmp_path).training.mixed_precision_reduce == "float32"
    with pytest.raises(ConfigError, match=r"23\.\d GiB .* 21\.6 GiB a plan may use"):
        plan_run(plan.spec.replace(mixed_precision="float32"), device_type="neuron")


def test_parameter_counts_match_the_published_models():
    assert QWEN3_4B_2507.parameter_count() == 4_022_468_096
    assert QWEN3_30B_A3B.parameter_count() == 30_532_122_624
    for variant in VARIANTS.values():  # and the models torchtitan / transformers build
        for name in (variant.small_preset,):
            shape = PRESETS[name].shape
            assert variant.parameter_count(shape) == shape.parameter_count()


def test_peak_flops_follow_the_logical_core():
    assert Topology(lnc=2).peak_tflops_per_core == 158 and Topology(lnc=2).logical_cores == 64
    assert Topology(lnc=1).peak_tflops_per_core == 79 and Topology(lnc=1).logical_cores == 128
    assert Topology(lnc=1).hbm_gib_per_core == 12


def test_neuron_memory_stats_are_read_nested():
    from qwen3_trn_helpers.training.metrics import neuron_memory_peaks

    recorded = {  # the structure torch-neuronx's memory_stats() returns
        "allocated_bytes": {"current": 3 << 30, "peak": 5 << 30, "allocated": 9, "freed": 4},
        "reserved_bytes": {"current": 0, "peak": 0, "allocated": 0, "freed": 0},
        "active_bytes": {"current": 3 << 30, "peak": 5 << 30, "allocated": 9, "freed": 4},
        "num_alloc_retries": 0,
        "num_ooms": 0,
        "num_tensor_frees": 12,
        "allocation_requests": 40,
    }
    assert neuron_memory_peaks(recorded) == (5 << 30, 5 << 30)
    assert recorded.get("active_bytes.all.peak", -1) == -1  # what torchtitan would read


def test_memory_is_read_on_the_ranks_own_device(monkeypatch):
    """Rank 5 reads device 5's allocator (torch-neuronx keys statistics by device index)."""
    import torch
    import torchtitan.components.metrics as tt_metrics
    from torchtitan.tools import utils

    from qwen3_trn_helpers.training.metrics import rank_memory_monitor

    gib5 = 5 << 30
    recorded = {  # torch-neuronx's nested statistics, device 5 after a step
        5: {
            "allocated_bytes": {"current": 3 << 30, "peak": gib5},
            "reserved_bytes": {"current": 0, "peak": 0},
            "active_bytes": {"current": 3 << 30, "peak": gib5},
            "num_alloc_retries": 0,
            "num_ooms": 0,
        }
    }
    empty = {"allocated_bytes": {"peak": 0}, "active_bytes": {"peak": 0}, "num_ooms": 0}
    module = types.SimpleNamespace(  # the process after set_device(neuron:5)
        current_device=lambda: 5,
        memory_stats=lambda device=None: recorded.get(torch.device(device).index, empty),
        get_device_name=lambda device=None: "NeuronCore-v3",
        get_device_properties=lambda device=None: types.SimpleNamespace(total_memory=24 << 30),
        reset_peak_memory_stats=lambda *a: None,
        empty_cache=lambda: None,
    )
    monkeypatch.setattr(tt_metrics, "device_module", module)
    monkeypatch.setattr(utils, "device_module", module)
    # "privateuseone" is the name torch gives "neuron" before torch-neuronx renames it
    monitor = rank_memory_monitor("privateuseone")
    assert monitor.device.index == 5
    stats = monitor.get_peak_stats()
    assert stats.max_active_gib == 5 and stats.max_reserved_gib == 5


def test_kernel_selector():
    assert kernel_rejects(2048, 768, 256, lnc=2) is None  # Qwen3-30B-A3B
    assert "block size 64" in kernel_rejects(2048, 768, 64, lnc=2)
    assert "H=128 is not a multiple of 512" in kernel_rejects(128, 64, 256, lnc=2)
    assert "I/2" in kernel_rejects(2048, 48, 256, lnc=2)  # 24 is not a multiple of 32
    assert kernel_rejects(2048, 48, 256, lnc=1) is not None
    assert select_backend("auto", "cpu", 2048, 768, 256) == ("reference", None)
    backend, notice = select_backend("auto", "neuron", 128, 64, 64)  # tiny_moe on trn2
    assert backend == "reference" and "PyTorch reference" in notice
    assert select_backend("auto", "neuron", 2048, 768, 256) == ("nki", None)
    assert select_backend("nki", "cpu", 128, 64, 64) == ("nki", None)  # asked for explicitly


def test_launch_commands_for_trn2():
    cmd = trn2_launch_command("nki_moe")
    # the preset implies the variant (an MoE preset fits nki_moe only)
    assert cmd.startswith("NEURON_LOGICAL_NC_CONFIG=2 qwen3-trn train --preset 30b-a3b")
    assert "--variant" not in cmd and "--nproc 64" in cmd and "--init pretrained" in cmd
    torchrun = trn2_torchrun_command("nki_moe")
    assert "python -m torch.distributed.run --standalone --nnodes=1 --nproc-per-node=64" in torchrun
    assert "--nproc " not in torchrun  # torchrun would take it for its --nproc-per-node
    from qwen3_trn_helpers.runs.launch import FRESH_STORE_EACH_ROUND, rank_environment

    env = rank_environment(plan_run(RunSpec(nproc=64, out="x"), device_type="neuron"))
    assert env["NEURON_LOGICAL_NC_CONFIG"] in ("1", "2")
    # torch-neuronx gives each rank its core (NEURON_RT_VISIBLE_CORES = LOCAL_RANK) when
    # it builds the process group; setting it here would break torchtitan's device index
    added = set(env) - set(os.environ)
    # (and the compiled-graph cache, one folder for every launch: training/compile.py;
    # torchrun's store a fresh one each restart round: runs/launch.py; the NEFF cache
    # lock's timeout: training/compile.py)
    neuron = {"NEURON_LOGICAL_NC_CONFIG", "TORCH_NEURONX_NEFF_CACHE_DIR",
              "TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT"}  # fmt: skip
    assert added - set(FRESH_STORE_EACH_ROUND) <= neuron
    assert env.items() >= FRESH_STORE_EACH_ROUND.items()


def test_ranks_never_inherit_visible_cores(monkeypatch, capsys):
    """torch-neuronx sets NEURON_RT_VISIBLE_CORES = LOCAL_RANK only when it is unset."""
    from qwen3_trn_helpers.runs.launch import rank_environment

    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "0-63")
    env = rank_environment(plan_run(RunSpec(nproc=64, out="x"), device_type="neuron"))
    assert "NEURON_RT_VISIBLE_CORES" not in env
    assert "NEURON_RT_VISIBLE_CORES=0-63 is not passed" in capsys.readouterr().err
    cpu = plan_run(RunSpec(nproc=2, out="x"), device_type="cpu")
    assert rank_environment(cpu)["NEURON_RT_VISIBLE_CORES"]


class _RuntimeStarted(AssertionError):
    pass


def test_device_report_does_not_start_the_neuron_runtime(monkeypatch, tmp_path):
    """A stand-in torch.neuron whose runtime-starting calls fail: the report must not
    make them (torch-neuronx refuses init_process_group once the runtime is up)."""
    import torch

    from qwen3_trn_helpers import device

    def started(*args, **kwargs):
        raise _RuntimeStarted("the notebook process started the Neuron runtime")

    module = types.SimpleNamespace(
        is_available=lambda: True,
        device_count=lambda: 64,
        get_device_properties=started,
        init=started,
        memory_stats=started,
    )
    monkeypatch.setattr(torch, "neuron", module, raising=False)
    monkeypatch.setattr(device, "privateuse1_backend_name", lambda: "neuron")
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: False)
    tool = tmp_path / "neuron-ls"
    tool.write_text(
        "#!/bin/sh\necho '["
        + ",".join(
            f'{{"neuron_device": {i}, "nc_count": 4, "logical_neuroncore_config": 2}}'
            for i in range(16)
        )
        + "]'\n"
    )
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.delenv("NEURON_LOGICAL_NC_CONFIG", raising=False)
    report = device.device_report()
    assert report.device_type == "neuron" and report.device_count == 64
    assert report.neuron_chips == 16 and report.logical_nc_config.startswith("2")


def test_mps_laptop_trains_on_the_cpu(monkeypatch):
    import torch

    from qwen3_trn_helpers import device

    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda: torch.device("mps"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device.resolve_device("auto") == "cpu"
    assert "'mps'" in device.device_note() and "CPU" in device.device_note()


def test_mps_choice_of_torchtitan_is_pointed_at_the_cpu(monkeypatch):
    """torchtitan picks "mps" on a Mac at import; a CPU run points every copy at the CPU."""
    from torchtitan.tools import utils

    from qwen3_trn_helpers.training import patches

    fake_mps = types.SimpleNamespace(set_device=lambda *a: None)
    monkeypatch.setattr(utils, "device_type", "mps")
    monkeypatch.setattr(utils, "device_module", fake_mps)
    with patches.torchtitan_on_cpu() as changed:
        assert "torchtitan.tools.utils" in changed
        assert utils.device_type == "cpu" and utils.device_module is patches.CPU_DEVICE_MODULE
    assert utils.device_type == "mps" and utils.device_module is fake_mps


def test_c4_on_trn2_is_a_hub_dataset_and_turns_offline_mode_off():
    spec = RunSpec(nproc=64, out="x")
    assert plan_run(spec, device_type="neuron").needs_hub
    assert not plan_run(spec, device_type="cpu").needs_hub
    local = plan_run(RunSpec(init="pretrained"), device_type="cpu")
    assert local.needs_hub is False  # the local checkpoint


def test_lnc_from_env(monkeypatch):
    from qwen3_trn_helpers.trn2 import lnc_from_env

    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "1")
    assert lnc_from_env() == 1
    assert select_backend("auto", "neuron", 2048, 96, 256)[0] == "nki"  # I/1 = 96: fine
    monkeypatch.delenv("NEURON_LOGICAL_NC_CONFIG")
    assert lnc_from_env() == 2
    assert select_backend("auto", "neuron", 2048, 96, 256)[0] == "reference"  # I/2 = 48
    assert math.isclose(trn2_plan("native").memory(lnc=1).hbm_gib, 12)


def test_one_rank_on_trn2_still_trains_in_a_child(monkeypatch):
    """The Neuron runtime keeps its cores until its process exits: never the kernel's."""
    from qwen3_trn_helpers.runs.run import launches

    monkeypatch.delenv("RANK", raising=False)  # not one of torchrun's ranks
    assert launches(plan_run(RunSpec(), device_type="neuron"))
    assert not launches(plan_run(RunSpec(), device_type="cpu"))
    assert launches(plan_run(RunSpec(nproc=2, out="x"), device_type="cpu"))


class _RecordingWrap:
    """Stands in for torch_neuronx.nki_hop.wrap_nki: records what the adapter hands it
    (the kernel, the grid, every argument) and returns zeros of the kernel's output
    shapes. No kernel math runs: that is the trn2 rung's job."""

    def __init__(self, outputs):
        self.outputs = outputs
        self.calls = []

    def __call__(self, kernel):
        wrap = self

        class Wrapped:
            def __getitem__(self, grid):
                def launch(*args, **kwargs):
                    wrap.calls.append({"kernel": kernel, "grid": grid, "args": args,
                                       "kwargs": kwargs})  # fmt: skip
                    return list(wrap.outputs)  # the bridge may hand back a list

                return launch

        return Wrapped()


def _moe_inputs(T=8, H=16, I=8, E=4, K=2, B=4):  # noqa: E741 (the kernels' names)
    from qwen3_trn_helpers.model.moe_blockwise import blockwise_mapping
    from qwen3_trn_helpers.model.nki_moe import kernel_inputs

    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    ids = torch.stack([torch.randperm(E)[:K] for _ in range(T)])
    pos, b2e = blockwise_mapping(ids, E, B)
    aff = torch.zeros(T + 1, E).scatter(1, ids, torch.rand(T, K))
    x = torch.randn(T + 1, H)
    return kernel_inputs(x, aff, torch.randn(E, H, 2, I), torch.randn(E, I, H), pos, b2e)


def _check_handed(call, kernel, grid):
    import torch

    assert call["kernel"] is kernel and call["kwargs"] == {}
    assert call["grid"] == grid and isinstance(call["grid"], tuple)
    for arg in call["args"]:
        assert isinstance(arg, torch.Tensor) or (isinstance(arg, int) and hash(arg) == arg)
    floats = {
        a.dtype for a in call["args"] if isinstance(a, torch.Tensor) and a.is_floating_point()
    }
    assert floats == {torch.bfloat16}  # one float dtype for every tensor


@pytest.mark.parametrize("lnc", ["2", "1"])
def test_nki_launch_forward_hands_the_wrapper_tensors_and_the_lnc_grid(monkeypatch, lnc):
    import torch

    from qwen3_trn_helpers.model import nki_moe

    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", lnc)
    inputs = _moe_inputs()
    hidden, aff, gate_up, down, pos, b2e = inputs
    assert aff.shape == (9 * 4, 1) and b2e.shape[1] == 1
    assert pos.dtype == b2e.dtype == torch.int32
    kernel = object()  # the trace-mode moe_cte wrapper on trn2
    wrap = _RecordingWrap([torch.zeros(9, 16), torch.zeros(1), torch.zeros(1)])
    out = nki_moe.launch_forward(wrap, kernel, inputs, block_size=4)
    assert isinstance(out, tuple) and len(out) == 3
    (call,) = wrap.calls
    _check_handed(call, kernel, (int(lnc),))
    assert call["args"][:6] == inputs and call["args"][6] == 4


def test_nki_launch_backward_hands_nki_librarys_order(monkeypatch):
    import torch

    from qwen3_trn_helpers.model import nki_moe

    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "2")
    hidden, aff, gate_up, down, pos, b2e = _moe_inputs()
    acts_T, acts = torch.ones(3, dtype=torch.bfloat16), torch.ones(5, dtype=torch.bfloat16)
    d_out = torch.randn(16, 9, dtype=torch.bfloat16).t()  # not contiguous
    kernel = object()  # nki-library's blockwise_mm_bwd on trn2
    wrap = _RecordingWrap([hidden, aff, gate_up, down])
    saved = (hidden, aff, gate_up, down, pos, b2e, acts_T, acts)
    grads = nki_moe.launch_backward(wrap, kernel, saved, d_out, 4)
    assert len(grads) == 4
    (call,) = wrap.calls
    _check_handed(call, kernel, (2,))
    args = call["args"]
    assert args[:6] == (hidden, aff, gate_up, down, acts_T, acts)
    assert args[6] is pos and args[7] is b2e and args[9] == 4
    assert args[8].is_contiguous() and torch.equal(args[8], d_out)


def test_nki_launch_refuses_an_unhashable_argument():
    from dataclasses import dataclass

    from qwen3_trn_helpers.errors import ConfigError
    from qwen3_trn_helpers.model import nki_moe

    @dataclass
    class Spec:  # as nki-library's MoECTESpec: a mutable dataclass, unhashable
        implementation: int = 1

    wrap = _RecordingWrap([])
    with pytest.raises(ConfigError, match="argument 1 is a Spec, which .* cannot hash"):
        nki_moe.launch(wrap, object(), *_moe_inputs()[:1], Spec())
    with pytest.raises(ConfigError, match="argument 0 is a list"):
        nki_moe.launch(wrap, object(), [1, 2])
    assert wrap.calls == []


def test_nki_launch_refuses_a_tuple_holding_a_list():
    from qwen3_trn_helpers.errors import ConfigError
    from qwen3_trn_helpers.model import nki_moe

    with pytest.raises(ConfigError, match=r"argument 0 \(tuple\) is not hashable"):
        nki_moe.launch(_RecordingWrap([]), object(), (1, [2]))
