"""The ``0.6b`` preset: Qwen/Qwen3-0.6B with real weights on one laptop CPU rank.

Never the hub: the shape is checked against torchtitan's own "0.6B" flavor and the
published parameter count, ``--init pretrained`` is checked to ask the hub for
Qwen/Qwen3-0.6B (the download itself replaced), and a same-shaped checkpoint made
here trains 2 steps only when QWEN3_TRN_TEST_0_6B=1 (about 13 GB of memory, which a
shared 2-core CI box does not reliably have).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from qwen3_trn_helpers.errors import AssetError, ConfigError
from qwen3_trn_helpers.model.presets import PRESETS
from qwen3_trn_helpers.model.shapes import QWEN3_0_6B, QWEN3_4B_2507
from qwen3_trn_helpers.model.variants import VARIANTS, native_model_config
from qwen3_trn_helpers.training.plan import plan_run
from qwen3_trn_helpers.training.spec import RunSpec


def _fingerprint(config) -> str:
    return re.sub(r" at 0x[0-9a-f]+", "", repr(config))  # functions compare by name


def test_shape_is_torchtitans_own_0_6b_flavor():
    """torchtitan wrote its "0.6B" flavor from Qwen3-0.6B's config.json: ours builds the
    identical model config (the 4B is the control: it differs in rope_theta, 5e6 vs 1e6)."""
    from torchtitan.models.qwen3 import qwen3_configs

    ours = _fingerprint(native_model_config(QWEN3_0_6B))
    assert ours == _fingerprint(qwen3_configs["0.6B"](attn_backend="flex"))
    assert _fingerprint(native_model_config(QWEN3_4B_2507)) != _fingerprint(
        qwen3_configs["4B"](attn_backend="flex")
    )


def test_parameter_count_is_the_published_0_6b():
    """0.6B in all, 0.44B without the (tied) embedding, as the model card says."""
    n = QWEN3_0_6B.parameter_count()
    assert n == 596_049_920
    assert round((n - QWEN3_0_6B.vocab_size * QWEN3_0_6B.dim) / 1e9, 2) == 0.44
    for name in ("native", "transformers_v5"):
        assert VARIANTS[name].parameter_count(QWEN3_0_6B) == n


def test_plan_is_one_cpu_rank_at_a_laptop_sequence_length():
    preset = PRESETS["0.6b"]
    assert preset.hub_id == "Qwen/Qwen3-0.6B" and not preset.full_size
    for variant in ("native", "transformers_v5"):
        plan = plan_run(RunSpec(variant=variant, preset="0.6b"), device_type="cpu")
        assert (plan.world_size, plan.seq_len, plan.corpus) == (1, 256, "embedded")
        memory = plan.memory()
        assert 10 < memory.total_gib < 12  # fp32 weights, grads, AdamW: 16 B x 0.6 B + more
    with pytest.raises(ConfigError, match="needs a Qwen3 MoE model, but preset '0.6b'"):
        plan_run(RunSpec(variant="nki_moe", preset="0.6b"), device_type="cpu")


def test_pretrained_asks_the_hub_for_qwen3_0_6b(monkeypatch, tmp_path):
    from qwen3_trn_helpers.runs import weights as hub
    from qwen3_trn_helpers.runs import weights as published

    asked = []
    monkeypatch.setattr(
        hub, "download_checkpoint", lambda repo, cached_only=False: asked.append(repo) or tmp_path
    )
    plan = plan_run(RunSpec(preset="0.6b", init="pretrained"), device_type="cpu")
    assert plan.init.hub_id == "Qwen/Qwen3-0.6B" and plan.needs_hub
    assert published.init_folder(plan) == tmp_path and asked == ["Qwen/Qwen3-0.6B"]


def test_offline_pretrained_is_one_clear_error():
    """Tests run with HF_HUB_OFFLINE=1: nothing is downloaded, the fix is named."""
    from qwen3_trn_helpers.runs.weights import init_folder

    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    plan = plan_run(RunSpec(preset="0.6b", init="pretrained"), device_type="cpu")
    with pytest.raises(AssetError, match="could not get Qwen/Qwen3-0.6B .*HF_HUB_OFFLINE"):
        init_folder(plan)


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("QWEN3_TRN_TEST_0_6B") != "1",
    reason="trains Qwen3-0.6B (about 13 GB); set QWEN3_TRN_TEST_0_6B=1",
)
def test_a_same_shaped_checkpoint_trains_two_steps(tmp_path):
    """A random Qwen3-0.6B saved by transformers in bf16 (as the hub's), loaded through
    --init DIR --preset 0.6b exactly as the downloaded one would be."""
    import torch
    from transformers import AutoModelForCausalLM

    from qwen3_trn_helpers.model.hf_checkpoint import check_hf_checkpoint

    torch.manual_seed(1)
    model = AutoModelForCausalLM.from_config(QWEN3_0_6B.hf_config()).to(torch.bfloat16)
    model.save_pretrained(tmp_path / "ckpt")
    del model
    assert check_hf_checkpoint(tmp_path / "ckpt") == QWEN3_0_6B
    cmd = [sys.executable, "-m", "qwen3_trn_helpers", "train", "--preset", "0.6b", "--init",
           str(tmp_path / "ckpt"), "--steps", "2", "--out", str(tmp_path / "run"),
           "--no-progress"]  # fmt: skip
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    print(f"0.6b, 2 steps: {time.monotonic() - started:.0f} s")
    lines = Path(tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2


def test_reproduce_with_the_0_6b_preset_asks_the_hub_first(tmp_path):
    """Notebook 03's "with a network" command, offline: one error line naming the model,
    at once (the pretrained run resolves first; nothing trains)."""
    cmd = [sys.executable, "-m", "qwen3_trn_helpers", "reproduce", "--preset", "0.6b",
           "--out", str(tmp_path / "rep")]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "error: could not get Qwen/Qwen3-0.6B from the hub (LocalEntryNotFoundError); "
        "HF_HUB_OFFLINE is set: unset it to download, or download once elsewhere and pass "
        "--init DIR"
    ]


@pytest.mark.parametrize("variant", ["native", "transformers_v5"])
def test_a_tied_checkpoint_that_also_stores_lm_head_loads(variant, tmp_path, tiny_hf_checkpoint):
    """Qwen's tied checkpoints may store lm_head.weight besides the embedding (torchtune
    #2861 reports it for the non-Base Qwen3 models): a folder laid out so, at the tiny
    shape, loads and trains through --init as the downloaded Qwen3-0.6B would."""
    import shutil

    from safetensors.torch import load_file, save_file

    folder = tmp_path / "with-lm-head"
    shutil.copytree(tiny_hf_checkpoint, folder)
    (weights,) = folder.glob("*.safetensors")
    tensors = load_file(weights)
    assert "lm_head.weight" not in tensors  # transformers leaves the tied copy out
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].clone()
    save_file(tensors, weights, metadata={"format": "pt"})
    from qwen3_trn_helpers import run

    result = run(variant, steps=1, init=str(folder), out=tmp_path / "run", progress=False)
    plain = run(variant, steps=1, init=str(tiny_hf_checkpoint), out=tmp_path / "plain",
                progress=False)  # fmt: skip
    assert result.losses == pytest.approx(plain.losses, abs=1e-6)  # the same weights
