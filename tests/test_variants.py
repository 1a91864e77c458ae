"""The three variants: each trains, the dense two agree, inputs are checked up front."""

import json
import math
import shutil
from dataclasses import replace

import pytest

from qwen3_trn_helpers.errors import AssetError, ConfigError
from qwen3_trn_helpers.hf_checkpoint import make_random_hf_checkpoint
from qwen3_trn_helpers.parity import parity, torchtitan_logits, transformers_logits
from qwen3_trn_helpers.train import run
from qwen3_trn_helpers.variants import PRESETS, TINY, VARIANTS

LN_VOCAB = math.log(151936)


def test_parity_fp32_logits(tiny_hf_checkpoint):
    report = parity(tiny_hf_checkpoint)
    assert report.logits_shape == (2, 64, 151936)
    assert report.worst() <= 1e-4, str(report)


def test_rope_patch_is_what_makes_transformers_v5_correct(tiny_hf_checkpoint, monkeypatch):
    """Without our inv_freq patch the HF backend's logits are wrong (RoPE broken)."""
    from torchtitan.experiments.transformers_modeling_backend.model import HFTransformerModel

    from qwen3_trn_helpers import patches
    from qwen3_trn_helpers.assets import ensure_tokenizer
    from qwen3_trn_helpers.parity import fixed_batch

    assert patches.hf_rotary_lacks_rope_init_fn()  # still needed with this transformers
    patches.patch_hf_backend_rope_init()
    tokens = fixed_batch(ensure_tokenizer(), 32)
    ref = transformers_logits(tiny_hf_checkpoint, tokens)
    unpatched = HFTransformerModel.init_states.__wrapped__
    monkeypatch.setattr(HFTransformerModel, "init_states", unpatched)
    monkeypatch.setattr(patches, "patch_hf_backend_rope_init", lambda: False)
    broken = torchtitan_logits("transformers_v5", tiny_hf_checkpoint, tokens)
    assert (broken - ref)[:, 1:].abs().max() > 1e-3  # position 0 has no rotation


@pytest.mark.parametrize("variant", ["transformers_v5", "nki_moe"])
def test_ten_cpu_steps_from_random_init(variant, tmp_path):
    result = run(variant, steps=10, out=tmp_path / variant, progress=False)
    losses = result.losses
    assert len(losses) == 10 and all(math.isfinite(x) for x in losses)
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.05, losses
    # torchtitan's native init gives ~ln(vocab); the HF backend initialises embeddings
    # with std 1.0 (initializer_range), which starts higher, as AWS's 12.43 does.
    assert LN_VOCAB - 0.6 < losses[0] < LN_VOCAB + 1.0


def test_dense_variants_train_alike_from_same_weights(tiny_hf_checkpoint, tmp_path):
    curves = {
        v: run(v, steps=10, init=str(tiny_hf_checkpoint), out=tmp_path / v, progress=False)
        for v in ("native", "transformers_v5")
    }
    a, b = curves["native"].losses, curves["transformers_v5"].losses
    # Same weights, same batch; training computes in bf16 (torchtitan's FSDP default),
    # so the two implementations round differently in the last bf16 bits.
    assert abs(a[0] - b[0]) < 1e-3
    assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < 0.02, (a, b)


def test_variant_and_checkpoint_must_match(tiny_hf_checkpoint, tmp_path):
    with pytest.raises(ConfigError, match="needs a Qwen3 MoE model"):
        run("nki_moe", init=str(tiny_hf_checkpoint), out=tmp_path / "x", progress=False)


def test_preset_that_disagrees_with_checkpoint(tmp_path):
    ckpt = make_random_hf_checkpoint(replace(TINY, rope_theta=1e6), tmp_path / "ck")
    with pytest.raises(ConfigError, match=r"rope_theta 5000000.0 != 1000000.0"):
        run(preset="tiny", init=str(ckpt), out=tmp_path / "x", progress=False)


def test_tokenizer_larger_than_model_vocab(tmp_path):
    ckpt = make_random_hf_checkpoint(replace(TINY, vocab_size=1024, n_layers=1), tmp_path / "v")
    with pytest.raises(ConfigError, match="151669 tokens but the model's embedding has 1024"):
        run(init=str(ckpt), out=tmp_path / "x", progress=False)


def test_truncated_safetensors(tiny_hf_checkpoint, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_hf_checkpoint, broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1000])
    with pytest.raises(AssetError, match="truncated"):
        run(init=str(broken), out=tmp_path / "x", progress=False)
    weights.write_bytes(b"\x00" * 16)
    with pytest.raises(AssetError, match="not a readable safetensors file"):
        run(init=str(broken), out=tmp_path / "x", progress=False)


def test_checkpoint_shapes_must_match_its_config(tiny_hf_checkpoint, tmp_path):
    edited = tmp_path / "edited"
    shutil.copytree(tiny_hf_checkpoint, edited)
    cfg = json.loads((edited / "config.json").read_text())
    cfg["intermediate_size"] = 512
    (edited / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(AssetError, match="do not match its config.json: .*mlp"):
        run(init=str(edited), out=tmp_path / "x", progress=False)


def test_presets_are_consistent():
    assert set(VARIANTS) == {"native", "transformers_v5", "nki_moe"}
    assert PRESETS["4b"].shape.rope_theta == 5e6  # 2507, not torchtitan's 4B flavor's 1e6
    for preset in PRESETS.values():
        layout = preset.layout
        fsdp = preset.world_size // layout.tp if layout.fsdp == -1 else layout.fsdp
        assert layout.tp * fsdp == preset.world_size
        s = preset.shape
        assert s.n_heads % layout.tp == 0 and s.n_kv_heads % layout.tp == 0


def test_transformers_v5_runs_leave_transformers_init_alone(tmp_path, monkeypatch):
    """torchtitan's backend patches transformers' init process-wide; we undo it."""
    import contextlib

    from transformers.modeling_utils import PreTrainedModel

    from qwen3_trn_helpers import patches

    original = PreTrainedModel.__dict__["_init_weights"]
    run("transformers_v5", steps=1, out=tmp_path / "kept", progress=False)
    assert PreTrainedModel.__dict__["_init_weights"] is original
    # still needed: without the guard the backend leaves its replacement behind
    guard = patches.keep_transformers_init_global
    monkeypatch.setattr(patches, "keep_transformers_init_global", contextlib.nullcontext)
    with guard():  # the outer guard cleans up after the unguarded run
        run("transformers_v5", steps=1, out=tmp_path / "leaked", progress=False)
        assert PreTrainedModel.__dict__["_init_weights"] is not original
    assert PreTrainedModel.__dict__["_init_weights"] is original
