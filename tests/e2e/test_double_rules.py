"""The test double's own rules, in this process: each as its torch-neuronx source says.

These check the double, not our code: the device rules after ``init_process_group``
(NeuronDevice.cpp:189-236), ``set_device`` and ``get_device_properties`` by PyTorch index,
the NEFF cache's layout and stale lock, ``neuronx-cc`` through PATH, and the ``neuron``
process group's reductions. (Our code against them: test_torch_neuronx_double.py and
test_trn2_rehearsal.py.)
"""

from __future__ import annotations

import fcntl
import os
from datetime import timedelta
from types import SimpleNamespace

import pytest
import torch
from fake_torch_neuronx import compiler, device_module, neff_cache

#: what the double's runtime setup writes into this process's environment
RUNTIME_VARS = ("NEURON_RT_VISIBLE_CORES", "NEURON_RT_ROOT_COMM_ID")


@pytest.fixture
def device_state():
    """The double's process-wide device state and the variables its runtime setup
    writes, put back after the test (monkeypatch restores only what it set)."""
    saved = dict(device_module.STATE)
    variables = {var: os.environ.get(var) for var in RUNTIME_VARS}
    yield device_module.STATE
    device_module.STATE.clear()
    device_module.STATE.update(saved)
    for var, value in variables.items():
        if value is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = value


def _initialised(state, local_rank: int, local_world_size: int, monkeypatch) -> None:
    """As torch-neuronx's runtime setup leaves a rank (backend.py:216-218, :302-303)."""
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", str(local_rank))
    state.update(local_world_size=local_world_size, start=local_rank, runtime=True)


def test_before_init_the_devices_are_the_visible_cores(device_state, monkeypatch):
    monkeypatch.delenv("NEURON_RT_VISIBLE_CORES", raising=False)
    monkeypatch.setenv("FAKE_TORCH_NEURONX_CHIPS", "16")
    module = device_module.NeuronDeviceModule()
    assert module.device_count() == 64  # 16 chips x 8 cores at LNC 2
    module.set_device(5)
    assert module.current_device() == 5 and device_module.vnc_id(5) == 5
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "9")  # one core: device 0 only
    assert module.device_count() == 1
    with pytest.raises(ValueError, match=r"^Invalid device id: 1. Valid range is 0 to 0$"):
        module.set_device(1)


def test_after_init_only_neuron_local_rank_may_hold_memory(device_state, monkeypatch):
    """Rank 1 of 2: device_count is 2 (test_multi_device_with_distributed.py:59-60);
    index 0 and index 2 are refused in torch-neuronx's words (NeuronDevice.cpp:198-207,
    :185-188 of the test)."""
    _initialised(device_state, 1, 2, monkeypatch)
    module = device_module.NeuronDeviceModule()
    assert module.device_count() == 2 and module.current_device() == 1
    assert device_module.vnc_id(1) == 0
    with pytest.raises(ValueError) as refused:
        device_module.vnc_id(0)
    assert str(refused.value) == (
        "Attempted to access device that doesn't attach to this process, received 0 "
        "expected to be equal or greater than 1"
    )
    out_of_range = r"^Device index 2 is out of range. Valid range is 0 to 1$"
    with pytest.raises(ValueError, match=out_of_range):
        device_module.vnc_id(2)
    with pytest.raises(ValueError, match="Valid range is 1 to 1 for this process"):
        module.set_device(0)  # NeuronDevice.cpp:128-134
    module.set_device(1)


def test_device_properties_by_pytorch_index(device_state, monkeypatch, capsys):
    """NeuronBindings.cpp:389-400: the raw index reaches the runtime, which knows this
    process's one core as 0: neuron:1 on rank 1 reads 0 bytes (N11), neuron:0 the core."""
    _initialised(device_state, 1, 2, monkeypatch)
    module = device_module.NeuronDeviceModule()
    assert module.get_device_properties("neuron:1").total_memory == 0
    assert "Falling back to total_memory=0" in capsys.readouterr().err
    assert module.get_device_properties(None).total_memory == 0  # the current device: 1
    whole = SimpleNamespace(type="neuron", index=None)  # torch.device("neuron")
    assert module.get_device_properties(whole).total_memory == 24 * 2**30  # index 0
    with pytest.raises(ValueError, match=r"^Invalid device id: 2$"):
        module.get_device_properties(2)
    assert module.get_device_properties(0).name == "trn2"


def test_neuronx_cc_is_found_through_path(tmp_path, monkeypatch):
    """NeuronCompiler.cpp:157-159, :178-190: execvp, exit 127 when not found."""
    from fake_torch_neuronx.install import write_compiler

    monkeypatch.setattr(compiler, "COMPILED", set())
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(RuntimeError, match=r"^Command failed \(neuronx-cc compilation\) with"):
        compiler.compiled_for("aten::mm")
    monkeypatch.setenv("PATH", str(write_compiler(tmp_path / "bin").parent))
    compiler.compiled_for("aten::mm")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    compiler.compiled_for("aten::mm")  # compiled once: its NEFF is read, no compiler run


def test_neff_cache_layout_and_a_stale_lock_broken(tmp_path, monkeypatch, capsys):
    """<cache>/ab/cd/<key>.neff and <local>/locks/<key>.lock; a lock held past the
    timeout is broken and the graph compiled (FileLock.cpp:141-167), not an error."""
    from fake_torch_neuronx.install import write_compiler

    monkeypatch.setenv("PATH", str(write_compiler(tmp_path / "bin").parent))
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR", str(tmp_path / "local"))
    monkeypatch.delenv("TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT", raising=False)
    assert neff_cache.lock_timeout_s() == 1200
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT", "bad")  # warns; default
    assert neff_cache.lock_timeout_s() == 1200
    gm = torch.fx.symbolic_trace(torch.nn.ReLU())
    inputs = [torch.zeros(2)]
    key = neff_cache.graph_key(gm, inputs)
    lock = tmp_path / "local" / "locks" / f"{key}.lock"
    lock.parent.mkdir(parents=True)
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another process's compile, stuck
        monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT", "0.2")
        neff = neff_cache.compile_into_cache(gm, inputs)
    assert "breaking stale lock" in capsys.readouterr().err
    assert neff == tmp_path / "cache" / key[:2] / key[2:4] / f"{key}.neff" and neff.exists()
    assert neff_cache.compile_into_cache(gm, inputs) == neff  # a hit: no lock, no compile


def test_the_neuron_process_group_reduces_as_torch_neuronx_does(device_state, monkeypatch):
    """One rank, in this process: PREMUL_SUM scales then sums (utils.py:72-85), AVG
    divides, the group is named as torch names it (backend.py:486-494)."""
    import torch.distributed as dist
    from fake_torch_neuronx import process_group

    for var in ("NEURON_RT_VISIBLE_CORES", "NEURON_RT_ROOT_COMM_ID", "MASTER_ADDR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    monkeypatch.setattr(process_group, "_WORLD_SIZE", None)
    device_state.update(local_world_size=-1, start=-1, runtime=False)
    store = dist.HashStore()
    group = process_group.create_neuron_process_group(store, 0, 1, timedelta(seconds=30))
    assert group.getBackendName() == "neuron" and os.environ["NEURON_RT_VISIBLE_CORES"] == "0"
    assert device_state["start"] == 0 and device_state["runtime"] is True
    group._set_group_name("g")
    assert group.group_name == "g"
    x = torch.tensor([2.0, 4.0])
    opts = dist.AllreduceOptions()
    opts.reduceOp = dist._make_nccl_premul_sum(0.5)
    group.allreduce([x], opts).wait()
    assert x.tolist() == [1.0, 2.0]
    opts = dist.AllreduceOptions()
    opts.reduceOp = dist.ReduceOp.AVG
    group.allreduce([x], opts).wait()
    assert x.tolist() == [1.0, 2.0]
    # a second first group, the runtime already started: backend.py:293-295's assert
    monkeypatch.setattr(process_group, "_WORLD_SIZE", None)
    with pytest.raises(AssertionError, match="should not be initialized before the init"):
        process_group.create_neuron_process_group(store, 0, 1, timedelta(seconds=30))


def test_one_core_per_process_in_a_process_group(device_state, monkeypatch):
    """backend.py:310-312: a rank seeing two cores is refused."""
    import torch.distributed as dist
    from fake_torch_neuronx import process_group

    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "0-1")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    monkeypatch.delenv("NEURON_RT_ROOT_COMM_ID", raising=False)
    monkeypatch.setattr(process_group, "_WORLD_SIZE", None)
    device_state.update(local_world_size=-1, start=-1, runtime=False)
    with pytest.raises(AssertionError, match="more than one device per process"):
        process_group.create_neuron_process_group(dist.HashStore(), 0, 1, timedelta(seconds=30))


def test_a_device_context_still_reaches_torch_tensor_with_the_cpu_fallback(tmp_path):
    """The double's ``torch.tensor`` wrapper (index-less ``neuron``: the current device)
    must leave torch's device context working: transformers asks ``torch.tensor([])``
    whether it builds on meta, and with the wrapper in torch's set of factories instead
    of ``torch.tensor`` it read CPU, initialised the rotary buffers on meta and left them
    zero (the rehearsal's notebook 02 parity, off by 0.4)."""
    import subprocess
    import sys

    from fake_torch_neuronx.install import install

    env = {**install(tmp_path), "FAKE_TORCH_NEURONX_CPU_FALLBACK": "1"}
    code = (
        "import torch\n"
        "assert torch.tensor([0.0], device='neuron').device.type == 'neuron'\n"
        "with torch.device('meta'):\n"
        "    print(torch.tensor([]).device, torch.as_tensor([1.0]).device)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["meta", "meta"]
