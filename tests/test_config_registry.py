"""Our presets load through torchtitan's own ConfigManager (its --module/--config path)."""

from torchtitan.config import ConfigManager

from qwen3_trn_helpers.attention import DocumentMaskedSDPA


def test_torchtitan_config_manager_loads_our_registry():
    config = ConfigManager().parse_args(
        [
            "--module",
            "qwen3_trn_helpers",
            "--config",
            "qwen3_trn_tiny_native",
            "--training.steps",
            "3",
        ]
    )
    assert config.training.steps == 3 and config.training.local_batch_size == 1
    model = config.model_spec.model
    assert model.vocab_size == 151936 and len(model.layers) == 4
    assert isinstance(model.layers[0].attention.inner_attention, DocumentMaskedSDPA.Config)
    assert config.model_spec.model.layers[0].attention.rope.theta == 5e6
