"""The global data order (data/global_order.py): one sample stream for the whole
job, dealt to the ranks; a one-rank run trains torchtitan's own samples, and a resume
at another world size goes on from the global sample count with none twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from qwen3_trn_helpers.data.corpus import embedded_corpus_path, read_documents

SEQ = 48


@pytest.fixture(scope="module")
def tokenizer(tokenizer_dir):
    from torchtitan.components.tokenizer import HuggingFaceTokenizer

    from qwen3_trn_helpers.data.corpus import register_datasets

    register_datasets()  # (torchtitan's loader, built here for comparison, needs them)
    return HuggingFaceTokenizer(tokenizer_path=str(tokenizer_dir))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Seven documents of real text of very different lengths (a few tokens to several
    samples), so samples start mid-document and epochs wrap within a test."""
    docs = read_documents(embedded_corpus_path())
    texts = [docs[0][:400], "Short.", docs[1][:90], docs[2][:1200], "x", docs[3][:300],
             docs[4][:60]]  # fmt: skip
    path = tmp_path_factory.mktemp("corpus") / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return path


@pytest.fixture(scope="module")
def prepared(corpus, tmp_path_factory) -> Path:
    from qwen3_trn_helpers.ops.data_prepare import prepare

    out = tmp_path_factory.mktemp("prep") / "tokens"
    prepare(str(corpus), out, shard_tokens=300)  # several shards
    return out


def loader(tokenizer, *, rank=0, ranks=1, local_batch=1, dataset="qwen3_trn_text", path=None):
    from qwen3_trn_helpers.data.global_order import GlobalOrderDataLoader

    config = GlobalOrderDataLoader.Config(dataset=dataset, dataset_path=str(path))
    return config.build(dp_world_size=ranks, dp_rank=rank, tokenizer=tokenizer, seq_len=SEQ,
                        local_batch_size=local_batch)  # fmt: skip


def rows(batch) -> list[tuple]:
    """A batch's samples as (inputs, positions, labels) tuples of ints."""
    inputs, labels = batch
    return [
        (tuple(i.tolist()), tuple(p.tolist()), tuple(lab.tolist()))
        for i, p, lab in zip(inputs["input"], inputs["positions"], labels, strict=True)
    ]


def steps_of(loaders, accumulation: int, steps: int) -> list[list[tuple]]:
    """The samples each step trains: every rank's microbatches, in rank order (a step's
    samples as a set is what matters; the order within it follows the chunks)."""
    iters = [iter(ld) for ld in loaders]
    out = []
    for _ in range(steps):
        step = []
        for _ in range(accumulation):
            for it in iters:
                step += rows(next(it))
        out.append(sorted(step))
    return out


def test_one_rank_trains_torchtitans_own_samples_across_epochs(corpus, tokenizer):
    """Inputs, positions and labels of 40 samples (several epochs of this corpus, so
    mid-document cuts and the reshuffle of later epochs) equal torchtitan's dataset on
    one rank: an uninterrupted one-rank run trains the tokens it trained before."""
    from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataLoader

    theirs = HuggingFaceTextDataLoader.Config(dataset="qwen3_trn_text", dataset_path=str(corpus))
    theirs = theirs.build(dp_world_size=1, dp_rank=0, tokenizer=tokenizer, seq_len=SEQ,
                          local_batch_size=1)  # fmt: skip
    ours = loader(tokenizer, path=corpus)
    a = [rows(b)[0] for b, _ in zip(theirs, range(40), strict=False)]
    b = [rows(b)[0] for b, _ in zip(ours, range(40), strict=False)]
    assert a == b
    assert ours.dataset.packer.cursor.epoch >= 3  # the comparison crossed epochs


def test_reshuffle_matches_datasets_shuffle():
    from datasets import Dataset

    from qwen3_trn_helpers.data.global_order import reshuffled

    data = Dataset.from_dict({"i": list(range(50))})
    for epoch in (1, 2, 7):
        assert data.shuffle(seed=42 + epoch)["i"] == reshuffled(50, epoch).tolist()


@pytest.mark.parametrize("world", [(1, 2), (2, 1), (2, 3), (3, 1)])
def test_a_resume_at_another_world_size_continues_the_global_order(corpus, tokenizer, world):
    """Global batch 6 at local batch 1: the steps of an uninterrupted run on ``before``
    ranks equal those of a run stopped after 3 steps and resumed from its state on
    ``after`` ranks (accumulation making up the global batch); no sample twice."""
    before, after = world
    reference = steps_of([loader(tokenizer, rank=r, ranks=before, path=corpus)
                          for r in range(before)], 6 // before, 7)  # fmt: skip
    first = [loader(tokenizer, rank=r, ranks=before, path=corpus) for r in range(before)]
    head = steps_of(first, 6 // before, 3)
    states = [ld.state_dict() for ld in first]
    assert all(s == states[0] for s in states)  # one record, the same on every rank
    assert json.loads(states[0]["global_order"])["round"]["sample"] == 18
    resumed = [loader(tokenizer, rank=r, ranks=after, path=corpus) for r in range(after)]
    for ld in resumed:
        ld.load_state_dict(states[0])
    tail = steps_of(resumed, 6 // after, 4)
    assert head + tail == reference
    flat = [s for step in head + tail for s in step]
    assert len(flat) == 42 and len(set(flat)) == len(set(s for st in reference for s in st))


def test_the_steps_do_not_depend_on_the_rank_count(corpus, tokenizer):
    """Step s trains the same samples on 1, 2 or 3 ranks at one global batch."""
    runs = [
        steps_of([loader(tokenizer, rank=r, ranks=n, path=corpus) for r in range(n)], 6 // n, 4)
        for n in (1, 2, 3)
    ]
    assert runs[0] == runs[1] == runs[2]
    flat = [s for step in runs[0] for s in step]
    assert len(set(flat)) > 12  # (real samples, not one repeated constant)


def test_torchtitans_own_loader_cannot_resume_at_another_world_size(corpus, tokenizer):
    """Why the global order exists: torchtitan 0.3.0's per-rank state refuses to load at
    another data-parallel size (and a rank's state would be the wrong data anyway)."""
    from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataLoader

    config = HuggingFaceTextDataLoader.Config(dataset="qwen3_trn_text", dataset_path=str(corpus))
    two = config.build(dp_world_size=2, dp_rank=0, tokenizer=tokenizer, seq_len=SEQ,
                       local_batch_size=1)  # fmt: skip
    next(iter(two))
    one = config.build(dp_world_size=1, dp_rank=0, tokenizer=tokenizer, seq_len=SEQ,
                       local_batch_size=1)  # fmt: skip
    with pytest.raises(AssertionError, match="dataloader resharding is not supported"):
        one.load_state_dict(two.state_dict())


def test_a_prepared_folder_skips_without_reading_and_gives_the_same_samples(
    corpus, prepared, tokenizer
):
    """Two ranks on the prepared folder get the text corpus's samples; the folder's
    token counts come from Arrow offsets (each row's length, without reading it)."""
    from qwen3_trn_helpers.data.prepared import DATASET_NAME, load_prepared
    from qwen3_trn_helpers.data.prepared_loader import token_counts

    data = load_prepared(str(prepared))
    assert token_counts(data).tolist() == [len(r) for r in data["tokens"]]
    text = steps_of([loader(tokenizer, rank=r, ranks=2, path=corpus) for r in (0, 1)], 1, 12)
    prep = steps_of([loader(tokenizer, rank=r, ranks=2, path=prepared, dataset=DATASET_NAME)
                     for r in (0, 1)], 1, 12)  # fmt: skip
    assert text == prep


def test_a_resume_mid_step_at_another_size_is_refused(corpus, tokenizer):
    from qwen3_trn_helpers.errors import RunFolderError

    two = loader(tokenizer, ranks=2, local_batch=2, path=corpus)
    next(iter(two.dataset))  # one sample of a microbatch: a save inside a step (never
    state = two.state_dict()  # torchtitan's, which saves between steps)
    assert json.loads(state["global_order"])["taken"] == 1
    two_again = loader(tokenizer, ranks=2, local_batch=2, path=corpus)
    two_again.load_state_dict(state)  # the same shape resumes
    one = loader(tokenizer, ranks=1, local_batch=2, path=corpus)
    with pytest.raises(RunFolderError, match="middle of a step"):
        one.load_state_dict(state)
    other_seq = json.loads(state["global_order"]) | {"taken": 0, "seq_len": 99}
    with pytest.raises(RunFolderError, match="seq_len=99"):
        one.load_state_dict({"global_order": json.dumps(other_seq)})


def _checkpoint(folder: Path, keys: dict) -> Path:
    import torch.distributed.checkpoint as dcp

    dcp.save(keys, checkpoint_id=str(folder))
    return folder


def test_which_checkpoints_keep_their_data_position(corpus, tmp_path, capsys):
    """Our corpora's global record loads at any world size; torchtitan's per-rank state
    (a streamed corpus, or a checkpoint from before the global order) restarts the data
    at another size or in another loader, with one note naming why."""
    from qwen3_trn_helpers.data.global_order import data_position_kept, saved_data_order
    from qwen3_trn_helpers.training.plan import plan_run
    from qwen3_trn_helpers.training.spec import RunSpec

    plan = plan_run(RunSpec(corpus=str(corpus), device="cpu"))
    ours = _checkpoint(tmp_path / "step-2", {"dataloader.global_order": "{}"})
    old = _checkpoint(tmp_path / "step-4", {"dataloader.dp_rank_0": b"x",
                                            "dataloader.dp_rank_1": b"y"})  # fmt: skip
    assert saved_data_order(ours) == "global" and saved_data_order(old) == 2
    assert saved_data_order(tmp_path / "nothing") is None
    assert data_position_kept(ours, plan, echo=True)
    assert capsys.readouterr().err == ""
    assert not data_position_kept(old, plan, echo=True)
    note = capsys.readouterr().err.strip()
    assert note.startswith("note: resuming from step-4, the data order restarts")
    assert "another dataloader" in note and "\n" not in note


def test_a_streamed_corpus_restarts_only_at_another_size(tmp_path, capsys, monkeypatch):
    from torchtitan.hf_datasets import DatasetConfig
    from torchtitan.hf_datasets.text_datasets import DATASETS

    from qwen3_trn_helpers.data import global_order
    from qwen3_trn_helpers.training.plan import plan_run
    from qwen3_trn_helpers.training.spec import RunSpec

    monkeypatch.setitem(DATASETS, "stream_test", DatasetConfig(path="", loader=None,
                                                               sample_processor=None))  # fmt: skip
    plan = plan_run(RunSpec(corpus="stream_test", device="cpu"))
    one = _checkpoint(tmp_path / "step-2", {"dataloader.dp_rank_0": b"x"})
    assert global_order.data_position_kept(one, plan, echo=True)  # 1 rank then, 1 now
    two = _checkpoint(tmp_path / "step-4", {"dataloader.dp_rank_0": b"x",
                                            "dataloader.dp_rank_1": b"y"})  # fmt: skip
    assert not global_order.data_position_kept(two, plan, echo=True)
    note = capsys.readouterr().err.strip()
    assert "written by 2 data-parallel ranks and this run has 1" in note
    assert "qwen3-trn data prepare" in note


# --- the real trainer: `train --resume` at another world size -----------------------------


def _train(*args: str, log: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "QWEN3_TRN_SAMPLE_LOG": str(log)}
    cmd = [sys.executable, "-m", "qwen3_trn_helpers", "train", "--no-progress", "--device",
           "cpu", "--global-batch-size", "2", "--checkpoint-interval", "2", *args]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc


def _trained(log: Path) -> list[tuple[int, str]]:
    """(global index, token hash) of every sample the run's ranks handed to training."""
    lines = [ln.split() for f in sorted(log.parent.glob(log.name + ".*"))
             for ln in f.read_text().splitlines()]  # fmt: skip
    return sorted((int(i), h) for i, h in lines)


@pytest.mark.slow
@pytest.mark.long
def test_train_resumed_on_one_rank_continues_a_two_rank_run(tmp_path):
    """Steps 1-2 on 2 ranks, then `--resume` on 1 rank for steps 3-4 (global batch 2):
    the samples trained are those of an uninterrupted one-rank run, none twice, and the
    step-4 checkpoints hold the same data position."""
    whole, split = tmp_path / "whole", tmp_path / "split"
    _train("--steps", "4", "--out", str(whole), log=tmp_path / "whole.log")
    _train("--nproc", "2", "--steps", "2", "--out", str(split), log=tmp_path / "split.log")
    resumed = _train("--steps", "4", "--out", str(split), "--resume", log=tmp_path / "split.log")
    assert "data order restarts" not in resumed.stderr
    reference = _trained(tmp_path / "whole.log")
    assert [i for i, _ in reference] == list(range(8))  # 4 steps x 2 samples
    assert len({h for _, h in reference}) == 8  # eight different samples
    assert _trained(tmp_path / "split.log") == reference  # same samples, none twice
    positions = []
    for out in (whole, split):
        import torch.distributed.checkpoint as dcp

        state: dict = {"dataloader.global_order": ""}
        dcp.load(state, checkpoint_id=str(out / "checkpoint" / "step-4"))
        positions.append(json.loads(state["dataloader.global_order"])["round"])
    assert positions[0] == positions[1] and positions[0]["sample"] == 8
