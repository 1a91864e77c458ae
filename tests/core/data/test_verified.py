"""A prepared corpus is hashed once per run folder, not at every start of every node
(issue 46, item 4): a requeued job skips the shards whose files did not change, a
changed one is hashed again, ``--verify-data`` hashes all, and nodes that start
together hash once."""

from __future__ import annotations

import json
import os
import threading

import pytest

from qwen3_trn_helpers.data import prepared as prepared_module
from qwen3_trn_helpers.data.corpus import check_corpus, embedded_corpus_path, read_documents
from qwen3_trn_helpers.data.prepared import MANIFEST
from qwen3_trn_helpers.data.verified import RECORD
from qwen3_trn_helpers.errors import AssetError
from qwen3_trn_helpers.ops.data_prepare import prepare
from qwen3_trn_helpers.training.plan import plan_run
from qwen3_trn_helpers.training.spec import RunSpec


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    docs = read_documents(embedded_corpus_path())[:12]
    source = tmp_path_factory.mktemp("src") / "docs.jsonl"
    source.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    out = tmp_path_factory.mktemp("prep") / "tokens"
    prepare(str(source), out, shard_tokens=8000, num_proc=1)
    return out


@pytest.fixture
def hashed(monkeypatch) -> list[str]:
    """The shard files hashed, in order."""
    seen: list[str] = []
    real = prepared_module.sha256_of

    def counting(path):
        seen.append(path.name)
        return real(path)

    monkeypatch.setattr(prepared_module, "sha256_of", counting)
    return seen


def _shards(corpus) -> list[str]:
    return [s["file"] for s in json.loads((corpus / MANIFEST).read_text())["shards"]]


def test_a_run_folder_hashes_each_shard_once_until_its_file_changes(corpus, tmp_path, hashed):
    shards = _shards(corpus)
    assert len(shards) > 1
    spec = RunSpec(corpus=str(corpus), device="cpu", out=str(tmp_path / "run"))
    plan_run(spec)  # the first start: every shard
    assert hashed == shards and (tmp_path / "run" / RECORD).is_file()
    hashed.clear()
    plan_run(spec)  # a requeue, a restart: none
    assert hashed == []
    plan_run(spec.replace(verify_data=True))  # asked for: every one again
    assert hashed == shards
    hashed.clear()
    # a shard rewritten with the very same bytes and its old times put back: its
    # change time moved (no one can set it back), so it is hashed again, alone
    target = corpus / shards[1]
    before = target.stat()
    target.write_bytes(target.read_bytes())
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    plan_run(spec)
    assert hashed == [shards[1]]
    hashed.clear()
    plan_run(spec.replace(out=str(tmp_path / "other")))  # another run folder: its own record
    assert hashed == shards


def test_damage_after_the_record_is_found_by_its_change_time(corpus, tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    for entry in corpus.iterdir():
        (copy / entry.name).write_bytes(entry.read_bytes())
    run = tmp_path / "run"
    check_corpus(str(copy), named=True, hashes=True, record_in=run)
    shard = copy / _shards(copy)[0]
    data, times = bytearray(shard.read_bytes()), shard.stat()
    data[len(data) // 2] ^= 0xFF  # same size; same modification time put back
    shard.write_bytes(bytes(data))
    os.utime(shard, ns=(times.st_atime_ns, times.st_mtime_ns))
    with pytest.raises(AssetError, match="does not match its sha256"):
        check_corpus(str(copy), named=True, hashes=True, record_in=run)
    with pytest.raises(AssetError, match="does not match its sha256"):  # and stays refused
        check_corpus(str(copy), named=True, hashes=True, record_in=run)


def test_nodes_starting_together_hash_once(corpus, tmp_path, hashed):
    """Two launches of one job (one run folder on shared storage) plan at once: the
    first holds the record's lock while it hashes, the second then finds the record."""
    run = tmp_path / "run"
    run.mkdir()
    errors: list[BaseException] = []

    def node() -> None:
        try:
            check_corpus(str(corpus), named=True, hashes=True, record_in=run)
        except BaseException as e:  # (reported below)
            errors.append(e)

    threads = [threading.Thread(target=node) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == [] and hashed == _shards(corpus)
