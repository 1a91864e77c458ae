"""One sample stream for the whole job, whatever its world size: the dataloader of our
own corpora (the embedded one, local files, prepared folders).

Why: torchtitan 0.3.0's ``HuggingFaceTextDataset`` splits the documents by data-parallel
rank (``split_dataset_by_node``: rank r of R packs its own contiguous share) and
checkpoints each rank's position under ``dp_rank_r``; its loader asserts the
data-parallel size is unchanged on load. A job resumed on other ranks (a node lost or
added) could only restart the data order, training again on what it had seen.

Here the packing is global. The documents, in corpus order, are encoded as torchtitan
encodes them (``encode(text, add_bos=True, add_eos=True)``), shifted within each
document (inputs ``doc[:-1]``, labels ``doc[1:]``, positions from 0) and cut every
``seq_len`` tokens: sample i of that one stream is exactly what torchtitan's dataset
yields as its i-th sample on one rank, so a one-rank run trains the same tokens as
before. Samples are dealt in chunks of ``local_batch``: chunk c goes to data-parallel
rank ``c % R``, so step s (global batch G = R x local_batch x accumulation) trains
samples ``[s*G, (s+1)*G)`` on any R that divides it.

The checkpointed state is one record, the same on every rank: the global sample count
at the step's end and where that sample starts in the corpus (epoch, document, tokens
of that document already trained). A document split across a step boundary is resumed
mid-document from that offset, so no token is trained twice or skipped; any world size
resumes from the record.

The cost: every rank walks the whole stream to find its chunks. A prepared folder's
token counts come from its Arrow offsets, so a rank skips other ranks' documents
without reading them; a text corpus is tokenized by every rank (the local corpora this
serves are small; a large one belongs in a prepared folder).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch.utils.data import IterableDataset
from torchtitan.components.dataloader import ParallelAwareDataloader
from torchtitan.components.tokenizer import BaseTokenizer

from ..errors import AssetError, RunFolderError


class DataPlan(Protocol):
    """What the data check reads of a run's Plan (the data layer imports nothing above)."""

    corpus: str
    corpus_streams: bool
    world_size: int
    tp: int


#: the one checkpoint key of this loader's state (``dataloader.global_order``)
STATE_KEY = "global_order"
STATE_VERSION = 1
#: a path: each data-parallel rank r appends "index hash" per sample it yields to PATH.r
SAMPLE_LOG_ENV = "QWEN3_TRN_SAMPLE_LOG"
#: documents a cursor keeps encoded (rounds re-read the one they start in)
RECENT_DOCUMENTS = 4
#: the seed torchtitan reshuffles a map-style corpus with at each new epoch (+ epoch)
RESHUFFLE_SEED = 42

Sample = tuple[dict[str, torch.Tensor], torch.Tensor]


class DocumentCursor:
    """Reads a map-style corpus document by document, epoch after epoch.

    Epoch 0 is the corpus order; epoch e > 0 is the permutation torchtitan's reloop
    takes (``Dataset.shuffle(seed=42 + e)``), of the whole corpus, not of a rank's share.
    ``lengths``: each row's token count when known without reading the row (a prepared
    folder), so skipping a document costs nothing.
    """

    def __init__(
        self,
        data: Any,
        encode: Callable[[Any], list[int]],
        *,
        infinite: bool,
        lengths: np.ndarray | None = None,
    ) -> None:
        self.data, self.encode, self.infinite, self.lengths = data, encode, infinite, lengths
        self.epoch, self.index = 0, 0
        self._order: np.ndarray | None = None
        # the last documents encoded: each round goes back to the document its first
        # sample starts in, which is usually one just read (a long one spans many rounds)
        self._recent: OrderedDict[int, list[int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self.data)

    def state(self) -> dict[str, int]:
        """Where the next document is read from."""
        return {"epoch": self.epoch, "index": self.index}

    def load(self, state: dict[str, int]) -> None:
        epoch, self.index = int(state["epoch"]), int(state["index"])
        if epoch != self.epoch:  # (a permutation of a large corpus is worth keeping)
            self.epoch, self._order = epoch, reshuffled(len(self), epoch)

    def next(self, tokens: bool = True) -> tuple[int, list[int] | None] | None:
        """(token count, token ids) of the next document, advancing past it; the ids are
        None when ``tokens`` is false and the count is known without them. None at the
        end of a finite corpus."""
        if self.index >= len(self):
            if not self.infinite or len(self) == 0:
                return None
            self.epoch, self.index = self.epoch + 1, 0
            self._order = reshuffled(len(self), self.epoch)
        row = int(self._order[self.index]) if self._order is not None else self.index
        self.index += 1
        if not tokens and self.lengths is not None:
            return int(self.lengths[row]), None
        ids = self._recent.get(row)
        if ids is None:
            ids = self._recent[row] = self.encode(self.data[row])
            if len(self._recent) > RECENT_DOCUMENTS:
                self._recent.popitem(last=False)
        return len(ids), ids


def reshuffled(n: int, epoch: int) -> np.ndarray | None:
    """The row order of ``epoch``: None (corpus order) for epoch 0, else the permutation
    ``datasets.Dataset.shuffle(seed=42 + epoch)`` applies (tests check they agree)."""
    if epoch == 0:
        return None
    return np.random.default_rng(RESHUFFLE_SEED + epoch).permutation(n)


class GlobalPacker:
    """The job's one stream of ``seq_len``-token samples, read from a cursor.

    Its position (:meth:`position`) is where the next sample starts: the global sample
    count, the cursor's place before the document that sample starts in, and how many of
    that document's input tokens earlier samples took.
    """

    def __init__(self, cursor: DocumentCursor, seq_len: int) -> None:
        self.cursor, self.seq_len = cursor, seq_len
        self.sample = 0
        self._doc_state = cursor.state()  # the cursor before the current document
        self._doc_len: int | None = None  # the current document's token count (None: none)
        self._doc: list[int] | None = None  # its ids, once read
        self._offset = 0  # its input tokens already packed (or, with no document, to skip)
        self._epoch_with_tokens = 0  # the last epoch a document with tokens came from

    def position(self) -> dict[str, Any]:
        cursor = self._doc_state if self._doc_len is not None else self.cursor.state()
        return {"sample": self.sample, "cursor": dict(cursor), "offset": self._offset}

    def seek(self, position: dict[str, Any]) -> None:
        self.cursor.load(position["cursor"])
        self.sample = int(position["sample"])
        self._doc_state = self.cursor.state()
        self._doc_len, self._doc, self._offset = None, None, int(position["offset"])

    def take(self) -> Sample | None:
        """The next sample (inputs and positions, labels); None when a finite corpus ends."""
        got = self._advance(self.seq_len, collect=True)
        if got is None:
            return None
        inputs, labels, positions = got
        return (
            {"input": torch.LongTensor(inputs), "positions": torch.LongTensor(positions)},
            torch.LongTensor(labels),
        )

    def skip(self, samples: int) -> bool:
        """Pass over ``samples`` samples (other ranks' chunks); False if the corpus ended."""
        return all(self._advance(self.seq_len, collect=False) is not None for _ in range(samples))

    def _open(self, want_tokens: bool) -> bool:
        self._doc_state = self.cursor.state()
        got = self.cursor.next(tokens=want_tokens)
        if got is None:
            return False
        self._doc_len, self._doc = got
        if self._doc_len > 1:
            self._epoch_with_tokens = self.cursor.epoch
        elif self.cursor.epoch > self._epoch_with_tokens + 1:  # a whole epoch, no tokens
            raise AssetError("the corpus holds no tokens to train on; give it some text")
        return True

    def _advance(self, count: int, collect: bool) -> tuple[list, list, list] | None:
        inputs: list[int] = []
        labels: list[int] = []
        positions: list[int] = []
        while count > 0:
            if self._doc_len is None and not self._open(want_tokens=collect):
                return None
            usable = max(self._doc_len - 1, 0)  # inputs doc[:-1], labels doc[1:]
            take = min(count, usable - self._offset)
            if collect and take > 0:
                if self._doc is None:  # counted while skipping; now its ids are needed
                    self.cursor.load(self._doc_state)
                    self._doc = self.cursor.next(tokens=True)[1]
                start = self._offset
                inputs += self._doc[start : start + take]
                labels += self._doc[start + 1 : start + 1 + take]
                # torchtitan's positions restart at 0 in each document and at each
                # sample's start (its _normalize_positions)
                positions += range(take)
            self._offset += max(take, 0)
            count -= max(take, 0)
            if self._offset >= usable:
                self._doc_len, self._doc, self._offset = None, None, 0
        self.sample += 1
        return inputs, labels, positions


class GlobalOrderDataset(IterableDataset):
    """Data-parallel rank ``rank`` of ``ranks``'s share of the global stream: chunks of
    ``local_batch`` samples, chunk c to rank ``c % ranks``.

    State (:meth:`order_state`) is kept at the start of the current round (one chunk for
    every rank) plus how many samples of its own chunk this rank has yielded: at a
    step's end that count is 0 on every rank, and the record is the same everywhere.
    """

    def __init__(self, packer: GlobalPacker, *, rank: int, ranks: int, local_batch: int) -> None:
        self.packer, self.rank, self.ranks, self.local_batch = packer, rank, ranks, local_batch
        self._round = packer.position()
        self._taken = 0
        log = os.environ.get(SAMPLE_LOG_ENV)
        self._log = Path(f"{log}.{rank}") if log else None

    def __iter__(self) -> Iterator[Sample]:
        while True:
            self.packer.seek(self._round)
            self.packer.skip(self.rank * self.local_batch)
            first = self.packer.sample  # the global index of this rank's chunk
            chunk = []
            for _ in range(self.local_batch):
                sample = self.packer.take()
                if sample is None:
                    break
                chunk.append(sample)
            full = len(chunk) == self.local_batch
            if full:
                self.packer.skip((self.ranks - 1 - self.rank) * self.local_batch)
            next_round = self.packer.position()
            for k in range(self._taken, len(chunk)):
                # the state moves before the yield: a checkpoint taken once this sample
                # is consumed (the generator suspended here) must already count it
                if k + 1 == self.local_batch:
                    self._round, self._taken = next_round, 0
                else:
                    self._taken = k + 1
                if self._log is not None:
                    self._record(first + k, chunk[k])
                yield chunk[k]
            if not full:
                return  # a finite corpus ran out (torchtitan's "run out of data")

    def _record(self, index: int, sample: Sample) -> None:
        """One line per sample handed to training: its global index and a hash of its
        input tokens (``QWEN3_TRN_SAMPLE_LOG``: which samples a run trained, for checks)."""
        digest = hashlib.sha256(sample[0]["input"].numpy().tobytes()).hexdigest()[:16]
        with open(self._log, "a") as f:
            f.write(f"{index} {digest}\n")

    def order_state(self) -> dict[str, Any]:
        return {"version": STATE_VERSION, "round": self._round, "taken": self._taken,
                "ranks": self.ranks, "local_batch": self.local_batch,
                "seq_len": self.packer.seq_len}  # fmt: skip

    def load_order_state(self, state: dict[str, Any]) -> None:
        if state.get("version") != STATE_VERSION:
            raise RunFolderError(
                f"the checkpoint's data position is in format {state.get('version')}, this "
                f"qwen3-trn reads {STATE_VERSION}; start a new run (--overwrite)"
            )
        if state["taken"] and (state["ranks"], state["local_batch"]) != (
            self.ranks,
            self.local_batch,
        ):
            raise RunFolderError(
                "the checkpoint was saved in the middle of a step, which cannot move to "
                "another data-parallel size or local batch; resume on "
                f"{state['ranks']} data-parallel ranks at local batch {state['local_batch']}"
            )
        if state["seq_len"] != self.packer.seq_len:
            raise RunFolderError(
                f"the checkpoint's samples are {state['seq_len']} tokens and this run's "
                f"{self.packer.seq_len}: resume with --seq-len {state['seq_len']}, or "
                "start a new run (--overwrite)"
            )
        self._round, self._taken = state["round"], int(state["taken"])


class GlobalOrderDataLoader(ParallelAwareDataloader):
    """torchtitan's dataloader over the global stream (registry datasets of our own).

    Built by torchtitan's Trainer like ``HuggingFaceTextDataLoader`` (same Config fields,
    same arguments); its state is one record under ``global_order``, the same on every
    rank, instead of one per data-parallel rank.
    """

    @dataclass(kw_only=True, slots=True)
    class Config(ParallelAwareDataloader.Config):
        dataset: str = "qwen3_trn_text"
        infinite: bool = True
        """Whether to loop the dataset (reshuffled each epoch, as torchtitan does)"""

    def __init__(
        self,
        config: Config,
        *,
        dp_world_size: int,
        dp_rank: int,
        tokenizer: BaseTokenizer,
        seq_len: int,
        local_batch_size: int,
        snapshot_every_n_steps: int | None = 1,
        **kwargs: Any,
    ) -> None:
        if config.num_workers:
            raise AssetError(
                "the global data order reads in the training process: leave the "
                "dataloader's num_workers at 0"
            )
        cursor = document_cursor(config.dataset, config.dataset_path, tokenizer, config.infinite)
        dataset = GlobalOrderDataset(
            GlobalPacker(cursor, seq_len),
            rank=dp_rank,
            ranks=dp_world_size,
            local_batch=local_batch_size,
        )
        super().__init__(
            dataset,
            dp_rank=dp_rank,
            dp_world_size=dp_world_size,
            num_workers=config.num_workers,
            persistent_workers=config.persistent_workers,
            pin_memory=config.pin_memory,
            prefetch_factor=config.prefetch_factor,
            snapshot_every_n_steps=snapshot_every_n_steps,
            batch_size=local_batch_size,
        )

    def state_dict(self) -> dict[str, Any]:
        # JSON text: DCP stores it as one object, written once (the same on every rank)
        return {STATE_KEY: json.dumps(self.dataset.order_state())}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict:  # (empty: nothing saved yet, as torchtitan's loader allows)
            self.dataset.load_order_state(json.loads(state_dict[STATE_KEY]))


def document_cursor(
    dataset: str, dataset_path: str | None, tokenizer: BaseTokenizer, infinite: bool
) -> DocumentCursor:
    """A cursor over a registry dataset of ours, encoding rows as torchtitan does."""
    from torchtitan.hf_datasets.text_datasets import DATASETS

    from .corpus import register_datasets
    from .prepared import DATASET_NAME
    from .prepared_loader import StoredTokenIds, token_counts

    register_datasets()  # (a Config built without corpus.dataset_args)
    entry = DATASETS[dataset]  # (what torchtitan's dataset looks up, as it does)
    sample_processor = entry.sample_processor
    data = entry.loader(dataset_path or entry.path)
    encoder = StoredTokenIds(tokenizer) if dataset == DATASET_NAME else tokenizer
    lengths = token_counts(data) if dataset == DATASET_NAME else None

    def encode(row: Any) -> list[int]:
        return encoder.encode(sample_processor(row), add_bos=True, add_eos=True)

    return DocumentCursor(data, encode, infinite=infinite, lengths=lengths)


#: our registry datasets, map-style by construction (corpus.register_datasets)
GLOBAL_ORDER_DATASETS = ("qwen3_trn_text", "qwen3_trn_tokens")


def loader_for(dataset: str) -> type:
    """The dataloader class a run on ``dataset`` (a registry name) uses: the global
    order for our own corpora; torchtitan's per-rank loader for any other registry
    dataset (``c4`` streams from the hub: every rank reading all of it would multiply
    the download by the data-parallel size; prepare it for shared storage instead)."""
    if dataset in GLOBAL_ORDER_DATASETS:
        return GlobalOrderDataLoader
    from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataLoader

    return HuggingFaceTextDataLoader


def saved_data_order(step_dir: Path) -> str | int | None:
    """How a checkpoint holds its data position: ``"global"`` (this module's record),
    the number of data-parallel ranks of torchtitan's per-rank state, or None (none
    recorded, or not a DCP checkpoint). Read from its metadata, the same on every rank."""
    from torch.distributed.checkpoint import FileSystemReader

    try:
        keys = FileSystemReader(str(step_dir)).read_metadata().state_dict_metadata
    except Exception:  # not a DCP checkpoint (an HF export): nothing to compare
        return None
    if f"dataloader.{STATE_KEY}" in keys:
        return "global"
    ranks = [k for k in keys if k.startswith("dataloader.dp_rank_")]
    return len(ranks) or None


def data_position_kept(step_dir: Path, plan: DataPlan, *, echo: bool) -> bool:
    """Whether a resume from ``step_dir`` loads the checkpoint's data position (False:
    the data order restarts, said once on stderr when ``echo``).

    A global record loads at any world size. torchtitan's per-rank state (a corpus
    streamed from a hub, or a checkpoint written before the global order) loads only
    into the same loader at the same data-parallel size (torchtitan asserts it).
    """
    import sys

    from .corpus import dataset_args

    dataset = dataset_args(plan.corpus, streams=plan.corpus_streams)[0]
    data_ranks = plan.world_size // plan.tp  # torchtitan's data-parallel degree
    saved = saved_data_order(step_dir)
    global_now = loader_for(dataset) is GlobalOrderDataLoader
    if saved is None or saved == ("global" if global_now else data_ranks):
        return True
    if saved == "global" or global_now:
        why = (
            "its data position was saved by another dataloader (a checkpoint from before "
            "the global data order, or another kind of corpus)"
        )
    else:
        why = (
            f"it was written by {saved} data-parallel ranks and this run has {data_ranks}; "
            "a corpus streamed from a hub keeps one position per rank, which torchtitan "
            "0.3.0 cannot move to another size (a prepared folder, `qwen3-trn data "
            "prepare`, resumes at any size)"
        )
    if echo:
        print(
            f"note: resuming from {step_dir.name}, the data order restarts from the "
            f"beginning: {why}; model and optimizer state are resharded",
            file=sys.stderr,
            flush=True,
        )
    return False
