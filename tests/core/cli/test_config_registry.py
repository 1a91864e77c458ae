"""torchtitan's own entry point runs every configuration, and writes the same metrics."""

import json
import subprocess
import sys

import pytest
from torchtitan.config import ConfigManager

from qwen3_trn_helpers import config_registry
from qwen3_trn_helpers.model.attention import DocumentMaskedSDPA
from qwen3_trn_helpers.model.variants import VARIANTS
from qwen3_trn_helpers.training.hf_trainer import Qwen3TrnHFTrainer
from qwen3_trn_helpers.training.trainer import Qwen3TrnTrainer

CONFIGS = [name for name in dir(config_registry) if name.startswith("qwen3_trn_")]


def parse(*args):
    return ConfigManager().parse_args(["--module", "qwen3_trn_helpers", *args])


def test_registry_has_the_small_and_the_trn2_configuration_of_every_variant(monkeypatch):
    """One configuration per (variant, preset) pair that a variant trains: its small
    preset and its trn2 preset; a new variant without its configurations fails here."""
    monkeypatch.setattr(config_registry, "build_config", lambda variant, preset: (variant, preset))
    built = {name: getattr(config_registry, name)() for name in CONFIGS}
    expected = [(v.name, p) for v in VARIANTS.values() for p in (v.small_preset, v.trn2_preset)]
    assert sorted(built.values()) == sorted(expected)
    for name, (variant, _preset) in built.items():
        assert name.endswith("_" + variant), name  # --config names the variant it trains


def test_tyro_overrides_and_the_attention_override():
    config = parse("--config", "qwen3_trn_tiny_native", "--training.steps", "3")
    assert config.training.steps == 3 and config.training.local_batch_size == 1
    assert isinstance(config, Qwen3TrnTrainer.Config)
    assert config.override.imports == ["qwen3_trn_helpers.model.attention.document_sdpa"]
    assert config.metrics.jsonl_file == "metrics.jsonl"
    model = config.model_spec.model
    assert model.vocab_size == 151936 and len(model.layers) == 4
    assert config.model_spec.model.layers[0].attention.rope.theta == 5e6
    # torchtitan applies the override when the trainer is built:
    from torchtitan.config.override import apply_overrides

    apply_overrides(config.override, config)
    assert isinstance(model.layers[0].attention.inner_attention, DocumentMaskedSDPA.Config)


def test_trn2_configurations_at_64_ranks(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "64")
    # the precision a trn2 plan keeps: bf16 as asked (this CPU may lack bf16 matmul,
    # where a run here trains in float32: test_device_plan.py)
    from qwen3_trn_helpers import device

    monkeypatch.setattr(device, "cpu_has_bf16_matmul", lambda: True)
    native = parse("--config", "qwen3_trn_4b_native")
    assert native.parallelism.tensor_parallel_degree == 4 and native.training.seq_len == 4096
    assert native.dataloader.dataset == "c4"
    v5 = parse("--config", "qwen3_trn_4b_transformers_v5")
    assert isinstance(v5, Qwen3TrnHFTrainer.Config)
    moe = parse("--config", "qwen3_trn_30b_a3b_nki_moe")
    (target, kwargs), *_ = [e for e in moe.override.imports if isinstance(e, tuple)]
    assert target.endswith("blockwise_experts") and kwargs["block_size"] == 256
    assert moe.parallelism.tensor_parallel_degree == 1
    assert moe.training.mixed_precision_reduce == "bfloat16"  # the plan that fits a core
    assert native.training.mixed_precision_reduce == "float32"  # torchtitan's default


@pytest.mark.slow
def test_torchtitan_entry_point_writes_the_same_metrics(ten_step_random, tmp_path):
    """Under torchrun, as torchtitan's docs launch it (notebook 02 runs the plain
    ``python -m torchtitan.train`` form and checks the same)."""
    prefix = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1"]
    cmd = [*prefix, "-m", "torchtitan.train", "--module", "qwen3_trn_helpers",
           "--config", "qwen3_trn_tiny_native", "--training.steps", "3",
           "--dump_folder", str(tmp_path)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[Override] qwen3_trn_helpers.model.attention.document_sdpa" in proc.stdout + proc.stderr
    records = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3]
    ours = ten_step_random.losses[:3]  # qwen3-trn's run of the same configuration
    assert [r["loss"] for r in records] == pytest.approx(ours, abs=1e-5)
