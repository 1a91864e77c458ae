"""`qwen3-trn data prepare`: a pre-tokenized corpus that trains the same tokens as its
source, refuses damage and another tokenizer, and what job files ask of a corpus."""

from __future__ import annotations

import json
import shutil

import pytest

from qwen3_trn_helpers.cli import main
from qwen3_trn_helpers.data.corpus import embedded_corpus_path, read_documents
from qwen3_trn_helpers.data.prepared import MANIFEST, check_prepared
from qwen3_trn_helpers.ops.data_prepare import prepare


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A JSONL corpus of real text: 12 documents of the embedded corpus."""
    docs = read_documents(embedded_corpus_path())[:12]
    path = tmp_path_factory.mktemp("src") / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    return path


@pytest.fixture(scope="module")
def prepared(source, tmp_path_factory):
    """``source`` prepared through the CLI, in several shards."""
    out = tmp_path_factory.mktemp("prep") / "tokens"
    assert main(["data", "prepare", "--corpus", str(source), "--out", str(out),
                 "--shard-tokens", "8000", "--no-progress"]) == 0  # fmt: skip
    return out


def _batches(config, tokenizer, rank: int, n: int):
    """The first ``n`` batches data-parallel rank ``rank`` of 2 gets from a loader config."""
    loader = config.build(dp_world_size=2, dp_rank=rank, seq_len=64, local_batch_size=2,
                          tokenizer=tokenizer)  # fmt: skip
    out = []
    for (inputs, labels), _ in zip(loader, range(n), strict=False):
        out.append((inputs["input"], inputs["positions"], labels))
    return out


def test_manifest_counts_hashes_and_tokenizer(prepared, source, tokenizer_dir):
    from torchtitan.components.tokenizer import HuggingFaceTokenizer

    manifest = json.loads((prepared / MANIFEST).read_text())
    docs = read_documents(source)
    tok = HuggingFaceTokenizer(tokenizer_path=str(tokenizer_dir))
    expected = sum(len(tok.encode(d, add_bos=True, add_eos=True)) for d in docs)
    assert manifest["documents"] == len(docs) == 12
    assert manifest["tokens"] == expected
    assert len(manifest["shards"]) > 1  # 8,000 tokens a shard
    assert sum(s["tokens"] for s in manifest["shards"]) == expected
    assert sum(s["documents"] for s in manifest["shards"]) == len(docs)
    for shard in manifest["shards"]:
        assert (prepared / shard["file"]).stat().st_size == shard["bytes"]
        assert len(shard["sha256"]) == 64
    assert manifest["tokenizer"]["path"] == str(tokenizer_dir)
    assert manifest["tokenizer"]["eos_id"] == tok.eos_id
    assert manifest["source"] == str(source)
    check_prepared(prepared, tokenizer_dir=tokenizer_dir, hashes=True)  # the folder is whole


def test_prepared_folder_gives_the_same_batches_as_its_source(prepared, source, tokenizer_dir):
    """Through the path `train` takes (plan -> trainer config -> dataloader), each of two
    data-parallel ranks gets the same first batches (inputs, positions, labels) from the
    prepared folder as from the JSONL it was made from."""
    from torchtitan.components.tokenizer import HuggingFaceTokenizer

    from qwen3_trn_helpers.data.global_order import GlobalOrderDataLoader
    from qwen3_trn_helpers.training.plan import plan_run
    from qwen3_trn_helpers.training.spec import RunSpec
    from qwen3_trn_helpers.training.trainer import trainer_config

    configs = {}
    for name, corpus in (("text", source), ("prepared", prepared)):
        plan = plan_run(RunSpec(corpus=str(corpus), device="cpu"))
        assert not plan.corpus_streams  # no network on either
        configs[name] = trainer_config(plan, "unused").dataloader
    assert type(configs["text"]) is type(configs["prepared"]) is GlobalOrderDataLoader.Config
    assert configs["prepared"].dataset == "qwen3_trn_tokens"
    tokenizer = HuggingFaceTokenizer(tokenizer_path=str(tokenizer_dir))
    firsts = []
    for rank in (0, 1):
        text = _batches(configs["text"], tokenizer, rank, 6)
        prep = _batches(configs["prepared"], tokenizer, rank, 6)
        assert len(text) == len(prep) == 6
        for a, b in zip(text, prep, strict=True):
            for x, y in zip(a, b, strict=True):
                assert x.equal(y)
        firsts.append(prep[0][0])
    # (and the ranks read different text: the comparison is not of one constant batch)
    assert not firsts[0].equal(firsts[1])


def test_a_streamed_corpus_needs_a_limit_and_keeps_its_order(tmp_path, source, monkeypatch):
    """A registry corpus that streams (as c4 does from the hub; here a local JSON file
    read by the same streaming loader) is prepared up to --max-documents, in order."""
    from datasets import load_dataset
    from torchtitan.components.tokenizer import HuggingFaceTokenizer
    from torchtitan.hf_datasets import DatasetConfig
    from torchtitan.hf_datasets.text_datasets import DATASETS

    from qwen3_trn_helpers.assets import ensure_tokenizer

    monkeypatch.setitem(DATASETS, "stream_test", DatasetConfig(
        path=str(source),
        loader=lambda p: load_dataset("json", data_files=p, split="train", streaming=True),
        sample_processor=lambda s: s["text"],
    ))  # fmt: skip
    with pytest.raises(Exception, match="--max-documents N or --max-tokens N"):
        prepare("stream_test", tmp_path / "a")
    assert not (tmp_path / "a").exists()  # nothing written for a refused corpus
    manifest = prepare("stream_test", tmp_path / "b", max_documents=5)
    tok = HuggingFaceTokenizer(tokenizer_path=str(ensure_tokenizer()))
    docs = read_documents(source)[:5]
    assert manifest["documents"] == 5
    assert manifest["tokens"] == sum(len(tok.encode(d, add_bos=True, add_eos=True)) for d in docs)
    from qwen3_trn_helpers.data.prepared import load_prepared

    rows = load_prepared(str(tmp_path / "b"))["tokens"]
    assert rows[4] == tok.encode(docs[4], add_bos=True, add_eos=True)


def _train_error(corpus, capsys, *extra) -> str:
    code = main(["train", "--corpus", str(corpus), "--device", "cpu", "--steps", "1",
                 "--no-progress", *extra])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 1
    assert err.startswith("error: ") and "\n" not in err  # one line, no traceback
    return err


def test_damaged_shards_are_one_line_errors(prepared, tmp_path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(prepared, copy)
    shard = copy / json.loads((copy / MANIFEST).read_text())["shards"][1]["file"]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, other bytes
    shard.write_bytes(bytes(data))
    assert "does not match its sha256" in _train_error(copy, capsys)
    shard.write_bytes(bytes(data[:-10]))  # truncated
    assert "bytes, its manifest says" in _train_error(copy, capsys)
    shard.unlink()
    assert "lacks shard" in _train_error(copy, capsys)
    (copy / MANIFEST).write_text("{not json")
    assert "manifest.json is not valid JSON (" in _train_error(copy, capsys)
    (copy / MANIFEST).unlink()  # shards without a manifest: an interrupted prepare
    assert "no manifest.json" in _train_error(copy, capsys)


def test_another_tokenizer_is_refused(tmp_path, tokenizer_dir, capsys):
    source = tmp_path / "two.jsonl"
    source.write_text('{"text": "First document."}\n{"text": "Second one."}\n')
    other = tmp_path / "other-tokenizer"
    shutil.copytree(tokenizer_dir, other)
    spec = json.loads((other / "tokenizer.json").read_text())
    spec["normalizer"] = {"type": "Lowercase"}  # a real difference in the ids it makes
    (other / "tokenizer.json").write_text(json.dumps(spec))
    out = tmp_path / "prepared"
    assert main(["data", "prepare", "--corpus", str(source), "--out", str(out),
                 "--tokenizer", str(other), "--no-progress"]) == 0  # fmt: skip
    err = _train_error(out, capsys)  # the run's default tokenizer is the offline Qwen3
    assert "another tokenizer" in err and "sha256" in err and str(other) in err
    check_prepared(out, tokenizer_dir=other)  # its own tokenizer is accepted


def test_prepare_refuses_a_folder_in_use_and_a_prepared_source(prepared, tmp_path, capsys):
    assert main(["data", "prepare", "--corpus", "embedded", "--out", str(prepared)]) == 1
    assert "not an empty folder" in capsys.readouterr().err
    assert main(["data", "prepare", "--corpus", str(prepared), "--out",
                 str(tmp_path / "x")]) == 1  # fmt: skip
    assert "already prepared" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["slurm", "k8s"])
def test_job_files_need_steps_and_refuse_a_hub_corpus(command, prepared, capsys):
    base = [command, "--nnodes", "2", "--device", "cpu", "--out", "/fsx/r"]
    if command == "k8s":
        base += ["--image", "img"]
    assert main(base) == 1
    err = capsys.readouterr().err
    assert "needs --steps N" in err and err.count("\n") == 1
    assert main([*base, "--steps", "5", "--corpus", "c4"]) == 1
    err = capsys.readouterr().err
    assert "qwen3-trn data prepare" in err and "--allow-hub-corpus" in err
    assert err.count("\n") == 1
    assert main([*base, "--steps", "5", "--corpus", "c4", "--allow-hub-corpus"]) == 0
    assert "c4" in capsys.readouterr().out
    if command == "k8s":  # the pods' path: on the volume they all mount (else refused)
        assert main([*base, "--steps", "5", "--corpus", str(prepared)]) == 1
        assert "is outside the volume every pod mounts at /fsx" in capsys.readouterr().err
        prepared = "/fsx/data/prepared"
    assert main([*base, "--steps", "5", "--corpus", str(prepared)]) == 0
    assert str(prepared) in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.long
def test_training_on_the_prepared_folder_gives_the_losses_of_its_source(prepared, source, tmp_path):
    """End to end, through torchtitan's Trainer: the same 3 steps (tiny preset, random
    init, one seed) on the JSONL and on the folder prepared from it lose the same."""
    from qwen3_trn_helpers import run

    common = dict(steps=3, init="random", device="cpu", seq_len=64, progress=False)
    text = run("native", corpus=str(source), out=str(tmp_path / "text"), **common)
    prep = run("native", corpus=str(prepared), out=str(tmp_path / "prep"), **common)
    assert len(text.losses) == len(prep.losses) == 3
    assert text.losses == prep.losses  # bit for bit: the same batches, the same math
    assert len(set(text.losses)) == 3  # (the steps trained on different batches)
