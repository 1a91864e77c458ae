"""``qwen3-trn data prepare``: tokenize any corpus ``train`` takes into a prepared folder
(the format is data/prepared.py's), reading the source through the same torchtitan
registry entry the dataloader uses, so the folder holds the tokens a run on the source
trains on.

Two things make it fit a real corpus and a shared file system:

- ``num_proc`` worker processes tokenize chunks of documents in parallel, each through
  torchtitan's own ``HuggingFaceTokenizer.encode`` (so the ids are the dataloader's),
  and this process writes their results in the source's order (:func:`encoded`);
- the folder is taken under a lock for the whole prepare, and each shard is written
  under a temporary name until the manifest lands (:func:`new_folder`): two prepares
  into one new ``--out`` cannot both succeed and mix their shards, and an interrupted
  one leaves no file that looks like a shard of a corpus.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..assets import tokenizer_identity
from ..checksums import sha256_of
from ..data.corpus import dataset_args, is_local
from ..data.prepared import (
    DATASET_NAME,
    ENCODE,
    FORMAT,
    MANIFEST,
    PARTIAL_SUFFIX,
    SHARD_TOKENS,
    VERSION,
)
from ..errors import AssetError, ConfigError
from ..files import check_output_folder, lock_folder

#: held (flock) by the prepare writing a folder, for its whole life
LOCK_FILE = ".prepare.lock"
OWNER_FILE = ".prepare.owner"  # who holds it, for the message a second prepare reads
#: documents a worker tokenizes per task (big enough that sending them costs little)
CHUNK_DOCUMENTS = 256
#: chunks in flight per worker: the source is read only this far ahead of the writer
#: (a streamed hub corpus is read as far as needed, never to its end)
CHUNKS_AHEAD = 4


def usable_cores() -> int:
    """The cores this process may run on (a Slurm or container limit counts)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # (macOS)
        return os.cpu_count() or 1


def source_documents(corpus: str) -> Iterator[str]:
    """The documents of any corpus ``train`` takes, in the order its dataloader reads
    them: through the same torchtitan registry entry (loader and sample processor)."""
    from torchtitan.hf_datasets.text_datasets import DATASETS

    name, path = dataset_args(corpus)  # a bad corpus fails here, not at the first read
    if name == DATASET_NAME:
        raise ConfigError(
            f"corpus {corpus} is already prepared (it holds {MANIFEST}); train on it with "
            "--corpus, or prepare its source again"
        )
    entry = DATASETS[name]
    return (entry.sample_processor(sample) for sample in entry.loader(path or entry.path))


def _refuse_used(out: Path, *ours: str) -> None:
    if out.exists() and (not out.is_dir() or any(p.name not in ours for p in out.iterdir())):
        raise ConfigError(
            f"--out {out} exists and is not an empty folder; choose a new folder (a "
            "prepared corpus is never written over another)"
        )


@contextmanager
def new_folder(out: Path) -> Iterator[None]:
    """Hold ``out``, an empty or new folder, for one prepare; refuse it in one line when
    it holds anything, or another prepare holds it.

    The lock is the kernel's (``flock``, through filelock, as run folders are held:
    runs/folder.py): it goes when its process does, however that ends. The folder is
    looked at again once held: a prepare that waited for the lock finds the other's
    shards. A prepare that fails here takes its temporary shards with it, and the
    folder too if it made it.
    """
    _refuse_used(out, LOCK_FILE, OWNER_FILE)  # (held by another: said below)
    made = not out.exists()
    try:
        lock, owner = lock_folder(out, LOCK_FILE, OWNER_FILE)
    except OSError as e:
        raise ConfigError(f"cannot write --out {out} ({e.strerror or e}); choose a folder "
                          "you can write to") from None  # fmt: skip
    if lock is None:
        raise ConfigError(
            f"--out {out} is being written by another data prepare ({owner}); wait for it "
            "to end, or choose another folder"
        )
    try:
        _refuse_used(out, LOCK_FILE, OWNER_FILE)
        (out / OWNER_FILE).write_text(f"pid {os.getpid()} on {socket.gethostname()}\n")
        yield
    except BaseException:
        for partial in out.glob(f".*{PARTIAL_SUFFIX}"):
            partial.unlink(missing_ok=True)
        raise
    finally:
        (out / OWNER_FILE).unlink(missing_ok=True)
        (out / LOCK_FILE).unlink(missing_ok=True)  # (still held: the fd keeps the lock)
        lock.release()
        if made and not any(out.iterdir()):
            out.rmdir()


# --- tokenizing, in this process or in workers -------------------------------------

_encoder = None  # a worker's tokenizer (made once per worker process)


def _start_worker(tokenizer_dir: str) -> None:
    global _encoder
    from torchtitan.components.tokenizer import HuggingFaceTokenizer

    _encoder = HuggingFaceTokenizer(tokenizer_path=tokenizer_dir)


def _encode_chunk(texts: list[str]):
    """A chunk's ids as one Arrow column (``list<int32>``, a row per document): it
    crosses from a worker as a few buffers, and the writer copies it whole, so what is
    left to this process per token is a memory copy."""
    import pyarrow as pa

    assert _encoder is not None
    return pa.array([_encoder.encode(text, **ENCODE) for text in texts], pa.list_(pa.int32()))


def _chunks(documents: Iterable[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for text in documents:
        chunk.append(text)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def encoded(documents: Iterable[str], tokenizer_dir: Path, num_proc: int) -> Iterator[Any]:
    """The documents' ids, ``tokenizer.encode(text, add_bos=True, add_eos=True)`` as
    torchtitan's dataset calls it, in the source's order: one Arrow column per chunk of
    :data:`CHUNK_DOCUMENTS` documents.

    ``num_proc`` 1: here. More: that many worker processes, each with its own tokenizer,
    take the chunks; at most :data:`CHUNKS_AHEAD` per worker are in flight, so the
    source is read only that far ahead and memory stays flat. Workers are forked where
    that is safe (Linux: torch and the tokenizer are imported here already, so they
    start at once), spawned elsewhere.
    """
    if num_proc <= 1:
        _start_worker(str(tokenizer_dir))
        yield from map(_encode_chunk, _chunks(documents, CHUNK_DOCUMENTS))
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    method = "fork" if sys.platform.startswith("linux") else "spawn"
    with ProcessPoolExecutor(
        num_proc,
        mp_context=multiprocessing.get_context(method),
        initializer=_start_worker,
        initargs=(str(tokenizer_dir),),
    ) as pool:
        pending: deque = deque()
        try:
            for chunk in _chunks(documents, CHUNK_DOCUMENTS):
                pending.append(pool.submit(_encode_chunk, chunk))
                if len(pending) >= num_proc * CHUNKS_AHEAD:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:  # stopped early (--max-tokens) or failed: drop what is still queued
            for future in pending:
                future.cancel()


# --- the prepare ---------------------------------------------------------------------


def prepare(
    corpus: str,
    out: str | Path,
    *,
    tokenizer: str | Path | None = None,
    max_documents: int | None = None,
    max_tokens: int | None = None,
    shard_tokens: int = SHARD_TOKENS,
    num_proc: int = 1,
    progress: bool = False,
) -> dict[str, Any]:
    """Tokenize ``corpus`` into ``out`` (a new folder) and return the manifest.

    ``max_documents`` / ``max_tokens`` stop early (after the document that reaches the
    count); a corpus streamed from the hub (c4 holds 365 M documents) needs one.
    ``num_proc``: worker processes that tokenize (:func:`encoded`).
    """
    from ..assets import resolve_tokenizer

    if not is_local(corpus) and max_documents is None and max_tokens is None:
        raise ConfigError(
            f"corpus {corpus!r} streams from the hub without end; pass --max-documents N "
            "or --max-tokens N (a run needs steps x global batch x seq_len tokens)"
        )
    if num_proc < 1:
        raise ConfigError(f"--num-proc must be 1 or more, got {num_proc}")
    out = check_output_folder(out, "--out")  # (a file, a device, a name too long: files.py)
    tokenizer_dir = resolve_tokenizer(tokenizer)
    documents = source_documents(corpus)  # (a bad corpus fails before --out exists)
    with new_folder(out):
        ids = encoded(documents, tokenizer_dir, num_proc)
        try:
            shards, n_docs, n_toks = _write_shards(
                ids, out, max_documents=max_documents, max_tokens=max_tokens,
                shard_tokens=shard_tokens, progress=progress,
            )  # fmt: skip
        finally:
            ids.close()  # the workers end here, also after an early stop
        if not n_docs:
            raise AssetError(f"corpus {corpus!r} yielded no documents; nothing was prepared")
        manifest = {
            "format": FORMAT,
            "version": VERSION,
            "source": str(corpus),
            "tokenizer": {"path": str(tokenizer_dir), **tokenizer_identity(tokenizer_dir)},
            "encode": ENCODE,
            "documents": n_docs,
            "tokens": n_toks,
            "shards": shards,
        }
        for shard in shards:  # every shard whole: their own names, then the manifest
            os.replace(out / _partial(shard["file"]), out / shard["file"])
        tmp = out / f".{MANIFEST}{PARTIAL_SUFFIX}"
        tmp.write_text(json.dumps(manifest, indent=2) + "\n")
        os.replace(tmp, out / MANIFEST)  # last, and whole: a folder with it is complete
    return manifest


def _partial(name: str) -> str:
    """A shard's name while it is written: hidden, and not ``tokens-*.arrow``."""
    return f".{name}{PARTIAL_SUFFIX}"


def _write_shards(
    chunks: Iterable[Any],
    out: Path,
    *,
    max_documents: int | None,
    max_tokens: int | None,
    shard_tokens: int,
    progress: bool,
) -> tuple[list[dict[str, Any]], int, int]:
    """Write the chunks' documents into shards under their temporary names; (each
    shard's entry, documents, tokens). A shard ends after the document that reaches
    ``shard_tokens``, the prepare after the one that reaches a limit."""
    import numpy as np
    import pyarrow as pa
    from datasets import Features, Sequence, Value
    from datasets.arrow_writer import ArrowWriter

    features = Features({"tokens": Sequence(Value("int32"))})
    shards: list[dict[str, Any]] = []
    writer: ArrowWriter | None = None
    shard_docs = shard_toks = n_docs = n_toks = 0

    def close_shard() -> None:
        nonlocal writer
        assert writer is not None
        writer.finalize()
        writer.close()
        file = out / _partial(shards[-1]["file"])
        shards[-1].update(
            documents=shard_docs, tokens=shard_toks, bytes=file.stat().st_size,
            sha256=sha256_of(file),
        )  # fmt: skip
        writer = None

    def first_reaching(cumulative: np.ndarray, start: int, limit: int) -> int:
        """How many documents, from here, up to the first that brings the count to
        ``limit`` (all of them when none does)."""
        hit = np.flatnonzero(start + cumulative >= limit)
        return int(hit[0]) + 1 if hit.size else len(cumulative)

    bar = None
    try:
        for chunk in chunks:
            if progress and bar is None:  # (after the first: workers start before its thread)
                from tqdm.auto import tqdm

                bar = tqdm(unit=" docs", desc="tokenizing")
            lengths = chunk.value_lengths().to_numpy(zero_copy_only=False)
            at, done = 0, False
            while at < len(chunk) and not done:
                if writer is None:
                    shards.append({"file": f"tokens-{len(shards):05d}.arrow"})
                    path = out / _partial(shards[-1]["file"])
                    writer = ArrowWriter(features=features, path=str(path))
                    shard_docs = shard_toks = 0
                cumulative = np.cumsum(lengths[at:])
                take = first_reaching(cumulative, shard_toks, shard_tokens)
                if max_documents:
                    take = min(take, max_documents - n_docs)
                if max_tokens:
                    take = min(take, first_reaching(cumulative, n_toks, max_tokens))
                writer.write_table(pa.table({"tokens": chunk.slice(at, take)}))
                tokens = int(cumulative[take - 1])
                shard_docs, shard_toks = shard_docs + take, shard_toks + tokens
                n_docs, n_toks, at = n_docs + take, n_toks + tokens, at + take
                if bar is not None:
                    bar.update(take)
                if shard_toks >= shard_tokens:
                    close_shard()
                done = bool(max_documents and n_docs >= max_documents) or bool(
                    max_tokens and n_toks >= max_tokens
                )
            if done:
                break
        if writer is not None:
            close_shard()
    finally:
        if bar is not None:
            bar.close()
    return shards, n_docs, n_toks
