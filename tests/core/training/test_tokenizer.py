"""The tokenizer a run builds (training/tokenizer.py): torchtitan's, parsed once per
process (with planning's parse), through torchtitan's own ``Trainer.Config.tokenizer``
field."""

import pytest
from torchtitan.components.tokenizer import HuggingFaceTokenizer

from qwen3_trn_helpers.training import tokenizer as reuse
from qwen3_trn_helpers.training.tokenizer import ReusedTokenizer


@pytest.fixture
def parsed(monkeypatch) -> list[str]:
    """Each tokenizer.json parsed, by torchtitan's tokenizer module or by ours
    (assets.load_tokenizer), in order; nothing parsed before the test is reused."""
    import tokenizers
    import torchtitan.components.tokenizer as tt_tokenizer
    from tokenizers import Tokenizer

    from qwen3_trn_helpers import assets

    seen: list[str] = []

    class Counting:
        @staticmethod
        def from_file(path: str) -> Tokenizer:
            seen.append(path)
            return Tokenizer.from_file(path)

    monkeypatch.setattr(tt_tokenizer, "Tokenizer", Counting)
    monkeypatch.setattr(tokenizers, "Tokenizer", Counting)  # assets imports it per call
    monkeypatch.setattr(reuse, "_HANDED", {})
    assets._parsed_tokenizer.cache_clear()
    return seen


def test_torchtitan_alone_parses_the_tokenizer_for_every_build(tokenizer_dir, parsed):
    # If this fails, torchtitan keeps its parse: training/tokenizer.py can go.
    for _ in range(2):
        HuggingFaceTokenizer.Config().build(tokenizer_path=str(tokenizer_dir))
    assert len(parsed) == 2


def test_planning_and_the_trainer_parse_once(tmp_path, parsed):
    """Planning checks the vocabulary with the parse the trainer's tokenizer then uses."""
    from qwen3_trn_helpers.training.plan import plan_run
    from qwen3_trn_helpers.training.spec import RunSpec

    plan = plan_run(RunSpec())
    assert len(parsed) == 1
    built = ReusedTokenizer.Config().build(tokenizer_path=str(plan.tokenizer_dir))
    assert len(parsed) == 1 and built.get_vocab_size() == 151_669


def test_the_run_config_names_the_reused_tokenizer(tmp_path):
    from qwen3_trn_helpers.training.plan import plan_run
    from qwen3_trn_helpers.training.spec import RunSpec
    from qwen3_trn_helpers.training.trainer import trainer_config

    for variant in ("native", "transformers_v5", "nki_moe"):
        config = trainer_config(plan_run(RunSpec(variant=variant)), tmp_path / variant)
        assert isinstance(config.tokenizer, ReusedTokenizer.Config), variant


def test_a_reused_tokenizer_is_what_a_fresh_load_gives(tokenizer_dir, tmp_path, parsed):
    fresh = HuggingFaceTokenizer(tokenizer_path=str(tokenizer_dir))
    parsed.clear()
    text = "def train(steps: int) -> None:  # Qwen3 on Trainium2 <|im_end|>"
    build = ReusedTokenizer.Config().build
    first = build(tokenizer_path=str(tokenizer_dir))
    second = build(tokenizer_path=str(tokenizer_dir))
    assert len(parsed) == 1 and second.tokenizer is first.tokenizer
    for tok in (first, second):
        assert tok.encode(text, add_bos=True, add_eos=True) == fresh.encode(
            text, add_bos=True, add_eos=True
        )
        assert (tok.bos_id, tok.eos_id, tok.get_vocab_size()) == (
            fresh.bos_id, fresh.eos_id, fresh.get_vocab_size()
        )  # fmt: skip
    # other files, or the same files changed: parsed again
    copy = tmp_path / "tokenizer"
    copy.mkdir()
    for f in tokenizer_dir.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    build(tokenizer_path=str(copy))
    config = copy / "tokenizer_config.json"
    config.write_text(config.read_text() + "\n")
    build(tokenizer_path=str(copy))
    assert len(parsed) == 3
