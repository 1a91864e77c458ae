"""Each patch: still needed (fails once upstream fixes it), works, and is undone after."""

import contextlib
import importlib.metadata

import pytest
import torch

from qwen3_trn_helpers import run
from qwen3_trn_helpers.model.variants import VARIANTS
from qwen3_trn_helpers.torchtitan_internals import TESTED_TORCHTITAN
from qwen3_trn_helpers.training import patches

cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="patch applies without a GPU")


def test_written_for_this_torchtitan():
    assert importlib.metadata.version("torchtitan").startswith(TESTED_TORCHTITAN)


@cpu_only
def test_cpu_device_patch_is_still_needed():
    # If this fails, torchtitan no longer falls back to "cuda" on a CPU host:
    # delete torchtitan_on_cpu and CpuDeviceModule.
    assert patches.torchtitan_device_type() == "cuda"


@cpu_only
def test_cpu_device_patch_reaches_every_copy_and_is_undone():
    import torchtitan.components.metrics as metrics
    import torchtitan.distributed.utils as dist_utils
    import torchtitan.tools.utils as tt_utils

    with patches.torchtitan_on_cpu() as changed:
        assert {"torchtitan.tools.utils", "torchtitan.components.metrics"} <= set(changed)
        for module in (tt_utils, metrics, dist_utils):
            assert module.device_type == "cpu"
            assert module.device_module is patches.CPU_DEVICE_MODULE
        from torchtitan.components.metrics import DeviceMemoryMonitor

        stats = DeviceMemoryMonitor("cpu").get_peak_stats()
        assert 0 < stats.max_reserved_gib
    for module in (tt_utils, metrics, dist_utils):
        assert module.device_type == "cuda" and module.device_module is torch.cuda


def test_end_of_run_sleep_is_still_there_and_skipped(tmp_path):
    assert patches.trainer_sleeps_at_end()  # torchtitan 0.3.0: time.sleep(2) on rank 0
    import torchtitan.trainer as trainer_module

    with patches.no_end_of_run_sleep():
        assert trainer_module.time.sleep(2) is None  # returns at once
    assert trainer_module.time.sleep is __import__("time").sleep


def test_rope_patch_is_still_needed():
    # If this fails, transformers' rotary module keeps rope_init_fn again and torchtitan's
    # backend recomputes inv_freq itself: delete hf_backend_rope_init.
    assert patches.hf_rotary_lacks_rope_init_fn()


def test_transformers_v5_runs_leave_transformers_alone(tmp_path, monkeypatch):
    """The backend patches transformers' init process-wide; our scope undoes it."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, PreTrainedModel

    original = PreTrainedModel.__dict__["_init_weights"]
    run("transformers_v5", steps=1, out=str(tmp_path / "kept"), progress=False)
    assert PreTrainedModel.__dict__["_init_weights"] is original
    # the SDPA routing of the backend's attention name ended with the run
    registered = ALL_ATTENTION_FUNCTIONS._global_mapping.get("flex_torchtitan")
    assert registered is not sdpa_attention_forward
    # still needed: without the guard the backend leaves its replacement behind
    monkeypatch.setitem(
        patches.VARIANT_PATCHES, "keep_transformers_init", lambda d: contextlib.nullcontext()
    )
    with patches.keep_transformers_init():  # this outer guard cleans up afterwards
        run("transformers_v5", steps=1, out=str(tmp_path / "leaked"), progress=False)
        assert PreTrainedModel.__dict__["_init_weights"] is not original
    assert PreTrainedModel.__dict__["_init_weights"] is original


@pytest.mark.parametrize("variant", ["native", "nki_moe"])
def test_tied_embedding_is_one_fsdp_parameter(variant, tmp_path):
    """torchtitan 0.3.0 shards the tied table as 2 FSDP parameters; the patch makes it 1.

    If the unpatched count becomes 1, torchtitan ties before sharding itself: delete
    tie_embedding_before_fsdp (and its version gate).
    """
    from qwen3_trn_helpers.training.spec import RunSpec, plan_run
    from qwen3_trn_helpers.training.trainer import build_trainer

    assert "tie_embedding_before_fsdp" in VARIANTS[variant].patches
    assert patches.torchtitan_unties_before_fsdp()
    plan = plan_run(RunSpec(variant=variant, steps=1))
    assert plan.shape.tie_embeddings  # tiny and tiny_moe tie, as Qwen3-4B does
    counts = {}
    for name, scope in (
        ("unpatched", patches.disabled("tie_embedding_before_fsdp")),
        ("patched", contextlib.nullcontext()),
    ):
        with scope:
            trainer = build_trainer(plan, tmp_path / name, metrics_file="")
            try:
                model = trainer.model_parts[0]
                assert model.tok_embeddings.weight is model.lm_head.weight
                counts[name] = patches.fsdp_table_parameters(trainer.model_parts)
            finally:
                trainer.close()
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


def test_cpu_peak_memory_is_in_bytes_and_absent_resource_reads_zero(monkeypatch):
    """ru_maxrss is KiB on Linux, bytes on macOS; Windows has no ``resource`` module."""
    import sys
    from pathlib import Path

    status = Path("/proc/self/status")
    if status.exists():
        rss_kib = next(int(ln.split()[1]) for ln in status.read_text().splitlines()
                       if ln.startswith("VmRSS:"))  # fmt: skip
        peak = patches.CPU_DEVICE_MODULE.memory_stats()["active_bytes.all.peak"]
        assert 0.9 * rss_kib * 1024 <= peak < 64 * 2**30  # (the kernel updates it lazily)
    monkeypatch.setitem(sys.modules, "resource", None)
    assert patches.CPU_DEVICE_MODULE.memory_stats()["active_bytes.all.peak"] == 0
