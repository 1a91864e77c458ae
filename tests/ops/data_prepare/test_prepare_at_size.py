"""`data prepare` at real size: tokenizing in worker processes gives the same folder,
byte for byte, as one process (issue 46, item 4), and two prepares into one new --out
cannot both succeed and mix their shards (issue 51, item 2)."""

from __future__ import annotations

import json
import threading

import pytest
from torchtitan.hf_datasets import DatasetConfig
from torchtitan.hf_datasets.text_datasets import DATASETS

from qwen3_trn_helpers.cli import main
from qwen3_trn_helpers.data.corpus import embedded_corpus_path, read_documents
from qwen3_trn_helpers.data.prepared import MANIFEST, check_prepared
from qwen3_trn_helpers.errors import ConfigError
from qwen3_trn_helpers.ops import data_prepare
from qwen3_trn_helpers.ops.data_prepare import LOCK_FILE, OWNER_FILE, prepare


@pytest.fixture(scope="module")
def docs() -> list[str]:
    return read_documents(embedded_corpus_path())[:40]


@pytest.fixture(scope="module")
def source(docs, tmp_path_factory):
    path = tmp_path_factory.mktemp("src") / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    return path


def _listed(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_workers_write_the_same_bytes_as_one_process(source, tmp_path, monkeypatch):
    # small chunks: documents of one shard come from several workers' answers
    monkeypatch.setattr(data_prepare, "CHUNK_DOCUMENTS", 3)
    made = {}
    for procs in (1, 2):
        out = tmp_path / f"procs-{procs}"
        assert main(["data", "prepare", "--corpus", str(source), "--out", str(out),
                     "--shard-tokens", "20000", "--num-proc", str(procs),
                     "--no-progress"]) == 0  # fmt: skip
        made[procs] = json.loads((out / MANIFEST).read_text())["shards"]
        # the folder holds the manifest and its shards, nothing of the prepare's own
        assert _listed(out) == sorted([MANIFEST, *(s["file"] for s in made[procs])])
    assert len(made[1]) > 1 and made[1] == made[2]  # names, sizes, counts and sha256


def test_an_early_stop_ends_the_workers_and_keeps_the_order(source, docs, tmp_path, monkeypatch):
    from torchtitan.components.tokenizer import HuggingFaceTokenizer

    from qwen3_trn_helpers.assets import ensure_tokenizer

    monkeypatch.setattr(data_prepare, "CHUNK_DOCUMENTS", 2)
    manifest = prepare(str(source), tmp_path / "five", max_documents=5, num_proc=2)
    tok = HuggingFaceTokenizer(tokenizer_path=str(ensure_tokenizer()))
    assert manifest["documents"] == 5
    assert manifest["tokens"] == sum(len(tok.encode(d, add_bos=True, add_eos=True))
                                     for d in docs[:5])  # fmt: skip


def test_two_prepares_into_one_new_folder_never_both_succeed(source, docs, tmp_path, monkeypatch):
    """The race the hostile probe found: prepare A has made the folder and not yet
    written a shard when prepare B looks; before, B found it empty, wrote its corpus,
    and A then wrote its shards and manifest over B's (both exit 0)."""
    reading, go_on = threading.Event(), threading.Event()

    def slow_source(_path):
        reading.set()
        go_on.wait(60)  # A holds its folder, no shard written yet
        yield from ({"text": d} for d in docs[:6])

    monkeypatch.setitem(DATASETS, "slow_test", DatasetConfig(
        path="unused", loader=slow_source, sample_processor=lambda s: s["text"],
    ))  # fmt: skip
    out = tmp_path / "corpus"
    first: dict = {}

    def prepare_a() -> None:
        try:
            first["manifest"] = prepare("slow_test", out, max_documents=6, num_proc=1)
        except Exception as e:  # (reported below)
            first["error"] = e

    a = threading.Thread(target=prepare_a)
    a.start()
    assert reading.wait(60)
    try:
        with pytest.raises(ConfigError, match="being written by another data prepare"):
            prepare(str(source), out, num_proc=1)
    finally:
        go_on.set()
        a.join(120)
    assert "error" not in first, first
    assert first["manifest"]["source"] == "slow_test" and first["manifest"]["documents"] == 6
    check_prepared(out, hashes=True)  # A's corpus, whole
    assert LOCK_FILE not in _listed(out) and OWNER_FILE not in _listed(out)
    # and once A is done, the folder is a corpus: never written over
    with pytest.raises(ConfigError, match="not an empty folder"):
        prepare(str(source), out, num_proc=1)


def test_a_failed_prepare_leaves_nothing_and_a_killed_one_no_shard_name(
    source, docs, tmp_path, monkeypatch, capsys
):
    def failing_source(_path):
        yield from ({"text": d} for d in docs[:4])
        raise OSError("the source's disk went away")

    monkeypatch.setitem(DATASETS, "failing_test", DatasetConfig(
        path="unused", loader=failing_source, sample_processor=lambda s: s["text"],
    ))  # fmt: skip
    out = tmp_path / "failed"
    with pytest.raises(OSError, match="went away"):
        prepare("failing_test", out, max_documents=10, shard_tokens=500, num_proc=1)
    assert not out.exists()  # it made the folder, and took it back with its shards
    # a prepare killed outright (no cleanup) leaves shards under their temporary names
    # only: a run on the folder names what happened
    killed = tmp_path / "killed"
    killed.mkdir()
    (killed / ".tokens-00000.arrow.partial").write_bytes(b"\0" * 64)
    code = main(["train", "--corpus", str(killed), "--device", "cpu", "--steps", "1",
                 "--no-progress"])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 1 and "\n" not in err
    assert f"{killed} holds prepared shards but no {MANIFEST}" in err
