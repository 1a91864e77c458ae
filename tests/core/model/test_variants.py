"""The three variants: each trains, the dense two agree, inputs are checked up front."""

import json
import math
import shutil
from dataclasses import replace

import pytest
import torch

from qwen3_trn_helpers import run
from qwen3_trn_helpers.errors import AssetError, ConfigError
from qwen3_trn_helpers.lessons.logits_parity import (
    fixed_batch,
    parity,
    torchtitan_logits,
    transformers_logits,
)
from qwen3_trn_helpers.model import variants as variants_module
from qwen3_trn_helpers.model.hf_checkpoint import make_random_hf_checkpoint
from qwen3_trn_helpers.model.presets import PRESETS
from qwen3_trn_helpers.model.shapes import TINY, VOCAB_SIZE
from qwen3_trn_helpers.model.variants import VARIANTS, Variant

LN_VOCAB = math.log(VOCAB_SIZE)


def test_parity_fp32_logits(tiny_hf_checkpoint):
    report = parity(tiny_hf_checkpoint)
    assert report.logits_shape == (2, 64, VOCAB_SIZE)
    assert report.worst() <= 1e-4, str(report)


def test_rope_patch_is_what_makes_transformers_v5_correct(tiny_hf_checkpoint, tokenizer_dir):
    """Without our inv_freq patch the HF backend's logits are wrong (RoPE broken)."""
    from qwen3_trn_helpers.training import patches

    tokens = fixed_batch(tokenizer_dir, 32)
    ref = transformers_logits(tiny_hf_checkpoint, tokens)
    with patches.disabled(patches.hf_backend_rope_init):
        broken = torchtitan_logits("transformers_v5", tiny_hf_checkpoint, tokens)
    # Position 0 has no rotation. Without the patch inv_freq is uninitialised memory, so
    # "wrong" may be garbage or NaN (allclose counts NaN as a mismatch, max() would not).
    assert not torch.allclose(broken[:, 1:], ref[:, 1:], atol=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["transformers_v5", "nki_moe"])
def test_cpu_steps_from_random_init(variant, tmp_path):
    result = run(variant, steps=6, out=str(tmp_path / variant), progress=False)
    losses = result.losses
    assert len(losses) == 6 and all(math.isfinite(x) for x in losses)
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.05, losses
    # torchtitan's native init: output std 0.02 -> ~ln V. The HF backend initialises a
    # tied embedding with std dim^-0.5 (logit std ~1, and each input token's own logit
    # large), which starts higher: 12.64 on the tiny shape.
    assert LN_VOCAB - 0.1 < losses[0] < LN_VOCAB + 1.0


@pytest.mark.slow
def test_dense_variants_train_alike_from_same_weights(tiny_hf_checkpoint, tmp_path):
    curves = {
        v: run(v, steps=5, init=str(tiny_hf_checkpoint), out=str(tmp_path / v), progress=False)
        for v in ("native", "transformers_v5")
    }
    a, b = curves["native"].losses, curves["transformers_v5"].losses
    # Same weights, same batches; training computes in bf16 (torchtitan's FSDP default),
    # so the two implementations round differently in the last bf16 bits.
    assert abs(a[0] - b[0]) < 1e-3
    assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < 0.02, (a, b)


def test_causal_attention_agrees_between_native_and_v5(tiny_hf_checkpoint, tmp_path):
    """Plain causal attention (the trn2 default) through both implementations."""
    losses = {
        v: run(
            v,
            steps=1,
            init=str(tiny_hf_checkpoint),
            attention="causal",
            out=str(tmp_path / v),
            progress=False,
        ).losses  # fmt: skip
        for v in ("native", "transformers_v5")
    }
    assert losses["native"] == pytest.approx(losses["transformers_v5"], abs=2e-3)


def test_variant_and_checkpoint_must_match(tiny_hf_checkpoint, tmp_path):
    with pytest.raises(ConfigError, match="needs a Qwen3 MoE model"):
        run("nki_moe", init=str(tiny_hf_checkpoint), out=str(tmp_path / "x"), progress=False)


def test_preset_that_disagrees_with_checkpoint(tmp_path):
    ckpt = make_random_hf_checkpoint(replace(TINY, rope_theta=1e6), tmp_path / "ck")
    with pytest.raises(ConfigError, match=r"rope_theta 5000000.0 != 1000000.0"):
        run(preset="tiny", init=str(ckpt), out=str(tmp_path / "x"), progress=False)


def test_tokenizer_larger_than_model_vocab(tmp_path):
    ckpt = make_random_hf_checkpoint(replace(TINY, vocab_size=1024, n_layers=1), tmp_path / "v")
    with pytest.raises(ConfigError, match="151669 tokens but the model's embedding has 1024"):
        run(init=str(ckpt), out=str(tmp_path / "x"), progress=False)


def test_truncated_safetensors(tiny_hf_checkpoint, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_hf_checkpoint, broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1000])
    with pytest.raises(AssetError, match="truncated"):
        run(init=str(broken), out=str(tmp_path / "x"), progress=False)
    weights.write_bytes(b"\x00" * 16)
    with pytest.raises(AssetError, match="not a readable safetensors file"):
        run(init=str(broken), out=str(tmp_path / "x"), progress=False)


def test_checkpoint_shapes_must_match_its_config(tiny_hf_checkpoint, tmp_path):
    edited = tmp_path / "edited"
    shutil.copytree(tiny_hf_checkpoint, edited)
    cfg = json.loads((edited / "config.json").read_text())
    cfg["intermediate_size"] = 512
    (edited / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(AssetError, match="do not match its config.json: .*mlp"):
        run(init=str(edited), out=str(tmp_path / "x"), progress=False)


def test_the_registry_holds_every_variant_class_under_its_name():
    """Derived from model/variants.py itself: each Variant class it defines is registered."""
    classes = {
        c
        for c in vars(variants_module).values()
        if isinstance(c, type) and issubclass(c, Variant) and c is not Variant
    }
    assert {type(v) for v in VARIANTS.values()} == classes
    assert [key for key, v in VARIANTS.items() if key != v.name] == []


def test_training_gives_every_variant_one_trainer_and_its_patches():
    """training/trainer.py's VARIANT_PARTS covers the registry, with patch objects."""
    from qwen3_trn_helpers.training import patches
    from qwen3_trn_helpers.training.run_scope import _RunScope
    from qwen3_trn_helpers.training.trainer import VARIANT_PARTS, variant_parts

    assert set(VARIANT_PARTS) == {type(v) for v in VARIANTS.values()}  # none missing or stale
    for variant in VARIANTS.values():
        parts = variant_parts(variant)
        assert issubclass(parts.trainer, _RunScope), variant.name
        assert all(patches.PATCHES[p.name] is p for p in parts.patches), variant.name
        assert not set(parts.patches) & set(patches.RUN_PATCHES), variant.name
    unknown = type("Unregistered", (Variant,), {})
    with pytest.raises(ConfigError, match="'x' .Unregistered. has no trainer"):
        variant_parts(unknown(**{**vars(VARIANTS["native"]), "name": "x"}))


def test_only_the_transformers_variant_imports_transformers(monkeypatch):
    """training/trainer.py, imported afresh with transformers unavailable, gives the
    native trainer; the transformers_v5 one (training/hf_trainer.py) is what needs it."""
    import importlib
    import sys

    import qwen3_trn_helpers.training as training

    monkeypatch.setattr(training, "trainer", training.trainer)  # restored afterwards
    again = ("qwen3_trn_helpers.training.trainer", "qwen3_trn_helpers.training.hf_trainer",
             "torchtitan.experiments.transformers_modeling_backend", "transformers.")  # fmt: skip
    for name in [m for m in sys.modules if m.startswith(again) or m == "transformers"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers fails
    fresh = importlib.import_module("qwen3_trn_helpers.training.trainer")
    assert fresh.variant_parts(VARIANTS["native"]).trainer is fresh.Qwen3TrnTrainer
    with pytest.raises(ImportError):
        fresh.variant_parts(VARIANTS["transformers_v5"]).trainer  # noqa: B018


def test_presets_are_consistent():
    assert PRESETS["4b"].shape.rope_theta == 5e6  # 2507, not torchtitan's 4B flavor's 1e6
    for preset in PRESETS.values():
        tp, s = preset.layout.tp, preset.shape
        assert preset.world_size % tp == 0
        assert s.n_heads % tp == 0 and s.n_kv_heads % tp == 0
    for variant in VARIANTS.values():
        assert PRESETS[variant.small_preset].shape.is_moe == variant.moe
        assert PRESETS[variant.trn2_preset].shape.is_moe == variant.moe
