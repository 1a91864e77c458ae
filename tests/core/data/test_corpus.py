import json

import pytest

from qwen3_trn_helpers.data import corpus
from qwen3_trn_helpers.errors import AssetError


def test_embedded_corpus_is_real_text():
    docs = corpus.read_documents(corpus.embedded_corpus_path())
    assert len(docs) > 50
    assert sum(len(d) for d in docs) > 300_000  # enough for hundreds of 256-token steps
    assert any("JSON" in d for d in docs)


def test_local_txt_jsonl_and_folder(tmp_path):
    (tmp_path / "a.txt").write_text("first document")
    lines = [json.dumps({"text": "second"}), "", json.dumps({"text": "third"})]
    (tmp_path / "b.jsonl").write_text("\n".join(lines))
    assert corpus.read_documents(tmp_path / "a.txt") == ["first document"]
    assert corpus.read_documents(tmp_path) == ["first document", "second", "third"]


@pytest.mark.parametrize(
    "content, message",
    [("", "holds no text"), ("   \n", "holds no text"), ("{not json", "1 is not valid JSON")],
)
def test_bad_corpus_files(tmp_path, content, message):
    path = tmp_path / "c.jsonl"
    path.write_text(content)
    with pytest.raises(AssetError, match=message):
        corpus.read_documents(path)


def test_missing_corpus(tmp_path):
    with pytest.raises(AssetError, match="does not exist"):
        corpus.dataset_args(tmp_path / "missing.txt")


def test_registered_with_torchtitan(tmp_path):
    from torchtitan.hf_datasets.text_datasets import DATASETS

    (tmp_path / "a.txt").write_text("hello")
    name, path = corpus.dataset_args(tmp_path / "a.txt")
    assert name in DATASETS and path == str(tmp_path / "a.txt")
    assert corpus.dataset_args("c4") == ("c4", None)  # torchtitan's own hub entry
