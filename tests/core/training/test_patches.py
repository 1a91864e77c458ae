"""Each patch: still needed (fails once upstream fixes it), works, and is undone after.

Every patch in ``patches.PATCHES`` has a ``test_<name>_is_still_needed`` here
(:func:`test_every_patch_has_a_still_needed_test`), and so does the gloo SUM switch.
"""

import importlib.metadata
import json
import os
import subprocess
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import pytest
import torch

from qwen3_trn_helpers import device, run
from qwen3_trn_helpers.model.variants import VARIANTS
from qwen3_trn_helpers.torchtitan_internals import TESTED_TORCHTITAN, hf_backend_attention
from qwen3_trn_helpers.training import patches

cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="patch applies without a GPU")


def test_written_for_this_torchtitan():
    assert importlib.metadata.version("torchtitan").startswith(TESTED_TORCHTITAN)


def test_every_patch_has_a_still_needed_test():
    assert set(patches.PATCHES) >= {p.name for p in patches.RUN_PATCHES}
    for name, patch in patches.PATCHES.items():
        assert patch.name == name and patch.__doc__ and "Why:" in patch.__doc__, name
        assert callable(globals().get(f"test_{name}_is_still_needed")), name


def test_disabled_names_a_patch_or_takes_one():
    with pytest.raises(KeyError, match="no patch named 'nope'; the patches are torchtitan_on"):
        with patches.disabled("nope"):
            pass
    with patches.disabled(patches.hf_backend_sdpa), patches.disabled("keep_transformers_init"):
        skipped = os.environ[patches.DISABLED_ENV].split(",")
        assert skipped == ["hf_backend_sdpa", "keep_transformers_init"]
    assert patches.DISABLED_ENV not in os.environ


# --- torchtitan_on_cpu ------------------------------------------------------------------


@cpu_only
def test_torchtitan_on_cpu_is_still_needed():
    # If this fails, torchtitan no longer falls back to "cuda" on a CPU host:
    # delete torchtitan_on_cpu (and device.CpuDeviceModule if nothing else uses it).
    assert patches.torchtitan_device_type() == "cuda"
    assert patches.torchtitan_on_cpu.needed("cpu", 1)
    assert not patches.torchtitan_on_cpu.needed("cuda", 1)


@cpu_only
def test_cpu_device_patch_reaches_every_copy_and_is_undone():
    import torchtitan.components.metrics as metrics
    import torchtitan.distributed.utils as dist_utils
    import torchtitan.tools.utils as tt_utils

    with patches.torchtitan_on_cpu() as changed:
        assert {"torchtitan.tools.utils", "torchtitan.components.metrics"} <= set(changed)
        for module in (tt_utils, metrics, dist_utils):
            assert module.device_type == "cpu"
            assert module.device_module is device.CPU_DEVICE_MODULE
        from torchtitan.components.metrics import DeviceMemoryMonitor

        stats = DeviceMemoryMonitor("cpu").get_peak_stats()
        assert 0 < stats.max_reserved_gib
    for module in (tt_utils, metrics, dist_utils):
        assert module.device_type == "cuda" and module.device_module is torch.cuda


def test_cpu_peak_memory_is_in_bytes_and_absent_resource_reads_zero(monkeypatch):
    """ru_maxrss is KiB on Linux, bytes on macOS; Windows has no ``resource`` module."""
    status = Path("/proc/self/status")
    if status.exists():
        rss_kib = next(int(ln.split()[1]) for ln in status.read_text().splitlines()
                       if ln.startswith("VmRSS:"))  # fmt: skip
        peak = device.CPU_DEVICE_MODULE.memory_stats()["active_bytes.all.peak"]
        assert 0.9 * rss_kib * 1024 <= peak < 64 * 2**30  # (the kernel updates it lazily)
    monkeypatch.setitem(sys.modules, "resource", None)
    assert device.CPU_DEVICE_MODULE.memory_stats()["active_bytes.all.peak"] == 0


# --- no_end_of_run_sleep ----------------------------------------------------------------


def test_no_end_of_run_sleep_is_still_needed():
    # If this fails, Trainer.train no longer sleeps 2 s at the end: delete no_end_of_run_sleep.
    assert patches.trainer_sleeps_at_end()  # torchtitan 0.3.0: time.sleep(2) on rank 0
    assert patches.no_end_of_run_sleep.needed("cpu", 1)
    assert not patches.no_end_of_run_sleep.needed("cpu", 2)  # other ranks: keep the sleep
    import torchtitan.trainer as trainer_module

    with patches.no_end_of_run_sleep():
        start = time.monotonic()
        trainer_module.time.sleep(2)  # what Trainer.train calls
        assert time.monotonic() - start < 1.0
        assert trainer_module.time.perf_counter is time.perf_counter  # the rest is time's
        assert time.sleep is not trainer_module.time.sleep  # the time module is untouched
    assert trainer_module.time is time


# --- the transformers backend -----------------------------------------------------------


def test_hf_backend_rope_init_is_still_needed():
    # If this fails, transformers' rotary module keeps rope_init_fn again and torchtitan's
    # backend recomputes inv_freq itself: delete hf_backend_rope_init.
    # (tests/core/model/test_variants.py shows the wrong logits without it.)
    assert patches.hf_rotary_lacks_rope_init_fn()
    assert patches.hf_backend_rope_init.needed("cpu", 1)


@cpu_only
def test_hf_backend_sdpa_is_still_needed():
    """What the backend registers for HF attention cannot train on a CPU.

    If this fails, FlexAttention has a CPU backward: hf_backend_sdpa is then needed off
    CUDA only where the Neuron compiler cannot lower FlexAttention (check on trn2), and
    can be narrowed to ``neuron`` or deleted.
    """
    backend = hf_backend_attention()
    flex = backend.module._flex_attention_torchtitan  # what the backend registers
    from torch.nn.attention.flex_attention import create_block_mask

    b, h, s, d = 1, 2, 128, 16
    q, k, v = (torch.randn(b, h, s, d, requires_grad=True) for _ in range(3))
    mask = create_block_mask(lambda b, h, q, kv: q >= kv, b, None, s, s, device="cpu")
    with pytest.raises(NotImplementedError, match="FlexAttention does not support backward on CPU"):
        out, _ = flex(torch.nn.Module(), q, k, v, mask, scaling=d**-0.5)
        out.sum().backward()
    assert patches.hf_backend_sdpa.needed("cpu", 1) and patches.hf_backend_sdpa.needed("neuron", 8)
    assert not patches.hf_backend_sdpa.needed("cuda", 1)


def test_sdpa_patch_routes_the_backend_name_to_sdpa_and_back():
    """Through transformers' public interface: the name HF's attention looks up."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    backend = hf_backend_attention()
    name, own = backend.implementation_name, backend.module._flex_attention_torchtitan
    before = ALL_ATTENTION_FUNCTIONS.get(name, own)
    with patches.hf_backend_sdpa():
        # what Qwen3Attention.forward calls
        assert ALL_ATTENTION_FUNCTIONS.get_interface(name, None) is sdpa_attention_forward
        assert backend.module._flex_attention_torchtitan is sdpa_attention_forward
    assert ALL_ATTENTION_FUNCTIONS.get_interface(name, None) is before
    assert before is own  # what the backend registers (or nothing was registered yet)
    assert backend.module._flex_attention_torchtitan is own


def test_transformers_v5_runs_leave_transformers_alone(tmp_path):
    """A CPU run trains through SDPA, and afterwards transformers is as it was."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, PreTrainedModel

    backend = hf_backend_attention()
    original = PreTrainedModel.__dict__["_init_weights"]
    result = run("transformers_v5", steps=1, out=str(tmp_path / "kept"), progress=False)
    assert len(result.losses) == 1  # a backward on the CPU: SDPA, not FlexAttention
    assert PreTrainedModel.__dict__["_init_weights"] is original
    # the backend's attention name is its own function again (the run's config built
    # registered it; the SDPA routing ended with the run)
    registered = ALL_ATTENTION_FUNCTIONS.get_interface(backend.implementation_name, None)
    assert registered is backend.module._flex_attention_torchtitan


def test_keep_transformers_init_is_still_needed(tmp_path):
    # If this fails, torchtitan's backend no longer replaces transformers' init process-
    # wide: delete keep_transformers_init.
    from transformers.modeling_utils import PreTrainedModel

    original = PreTrainedModel.__dict__["_init_weights"]
    with patches.keep_transformers_init():  # this outer guard cleans up afterwards
        with patches.disabled("keep_transformers_init"):
            run("transformers_v5", steps=1, out=str(tmp_path / "leaked"), progress=False)
        assert PreTrainedModel.__dict__["_init_weights"] is not original
    assert PreTrainedModel.__dict__["_init_weights"] is original


# --- torchtitan's Qwen3 decoder ---------------------------------------------------------


@pytest.mark.parametrize("variant", ["native", "nki_moe"])
def test_tie_embedding_before_fsdp_is_still_needed(variant, tmp_path):
    """torchtitan 0.3.0 shards the tied table as 2 FSDP parameters; the patch makes it 1.

    If the unpatched count becomes 1, torchtitan ties before sharding itself: delete
    tie_embedding_before_fsdp (and its version gate).
    """
    from qwen3_trn_helpers.training.plan import plan_run
    from qwen3_trn_helpers.training.spec import RunSpec
    from qwen3_trn_helpers.training.trainer import trainer_session, variant_parts

    assert patches.tie_embedding_before_fsdp in variant_parts(VARIANTS[variant]).patches
    assert patches.torchtitan_unties_before_fsdp()
    plan = plan_run(RunSpec(variant=variant, steps=1))
    assert plan.shape.tie_embeddings  # tiny and tiny_moe tie, as Qwen3-4B does
    counts = {}
    for name, disabled in (("unpatched", True), ("patched", False)):
        with patches.disabled("tie_embedding_before_fsdp") if disabled else nullcontext():
            with trainer_session(plan, tmp_path / name, metrics_file="") as trainer:
                model = trainer.model_parts[0]
                assert model.tok_embeddings.weight is model.lm_head.weight
                counts[name] = patches.fsdp_table_parameters(trainer.model_parts)
    assert counts == {"unpatched": 2, "patched": 1}
    import torchtitan.models.qwen3.parallelize as parallelize
    from torchtitan.distributed.fsdp import apply_fsdp_to_decoder

    assert parallelize.apply_fsdp_to_decoder is apply_fsdp_to_decoder  # undone on close


def test_tied_embedding_patch_keeps_the_losses(tmp_path):
    """Same fp32 losses with the table sharded once as with torchtitan's two copies."""
    fp32 = dict(steps=3, mixed_precision="float32", progress=False)
    with patches.disabled("tie_embedding_before_fsdp"):
        before = run("native", out=str(tmp_path / "before"), **fp32).losses
    after = run("native", out=str(tmp_path / "after"), **fp32).losses
    assert after == pytest.approx(before, abs=1e-6)


# --- several CPU ranks: FSDP's reduction on gloo (training/run_scope.py) ---------------

#: one of two gloo ranks: an FSDP2 backward as torchtitan sets it up, without and with
#: force_sum_reduction_for_gloo, against an unsharded model on both ranks' data
GLOO_RANK = """
import json, sys
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torchtitan.distributed.fsdp import disable_fsdp_gradient_division

from qwen3_trn_helpers.training.ranks import end_process_groups, leave
from qwen3_trn_helpers.training.run_scope import force_sum_reduction_for_gloo

rank, world, store = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)


def model(switched):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    fully_shard(m)
    disable_fsdp_gradient_division(m)  # as torchtitan does: it normalises the loss itself
    return m, force_sum_reduction_for_gloo([m]) if switched else 0


def data(r):
    return torch.randn(4, 8, generator=torch.Generator().manual_seed(r))


out = {}
unswitched, _ = model(switched=False)
try:
    unswitched(data(rank)).sum().backward()
    out["unswitched"] = "ok"
except RuntimeError as e:
    out["unswitched"] = str(e).splitlines()[0]
sharded, out["switched_modules"] = model(switched=True)
sharded(data(rank)).sum().backward()
torch.manual_seed(0)
reference = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
sum(reference(data(r)).sum() for r in range(world)).backward()
out["max_grad_error"] = max(
    (p.grad.full_tensor() - q.grad).abs().max().item()
    for p, q in zip(sharded.parameters(), reference.parameters(), strict=True)
)
print(json.dumps(out))
# End as the package's ranks end (training/ranks.py ``leave``): FSDP2 keeps gloo's C++
# threads alive past destroy_process_group, and interpreter shutdown then aborted this
# rank after it had printed its result (SIGABRT, 1 run in ~30 on a loaded machine; CI).
end_process_groups()
leave(0)
"""


@pytest.mark.long
@pytest.mark.slow  # two gloo ranks in child processes
def test_force_sum_reduction_for_gloo_is_still_needed(tmp_path):
    """Two gloo ranks: torchtitan's FSDP setup fails without the switch, and is exact with it.

    If the unswitched backward succeeds, gloo has PREMUL_SUM or FSDP2/torchtitan no
    longer asks for it: delete force_sum_reduction_for_gloo (training/run_scope.py).
    """
    script = tmp_path / "rank.py"
    script.write_text(GLOO_RANK)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[3])}
    ranks = [
        subprocess.Popen(
            [sys.executable, str(script), str(r), "2", str(tmp_path / "store")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for r in range(2)
    ]
    results = []
    for proc in ranks:
        stdout, stderr = proc.communicate(timeout=240)
        assert proc.returncode == 0, stderr[-2000:]
        results.append(json.loads(stdout.strip().splitlines()[-1]))
    for result in results:
        assert result["unswitched"] == "Cannot use ReduceOp.PREMUL_SUM with Gloo", (
            f"{result}: FSDP2 on gloo trains without the switch now; "
            "delete force_sum_reduction_for_gloo"
        )
        assert result["switched_modules"] == 1 and result["max_grad_error"] < 1e-6, result
