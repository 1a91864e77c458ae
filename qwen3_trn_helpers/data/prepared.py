"""Pre-tokenized corpora for shared storage: ``train --corpus DIR`` reads one (this
module: its format, checks and loader), ``qwen3-trn data prepare`` writes one
(data_prepare.py, which reads the source through corpus.py: apart, so corpus.py can
serve a prepared folder without an import circle).

Why: a job of 128 to 1,024 ranks that streams c4 from the Hugging Face hub makes every
rank a hub client, and compute subnets often have no internet at all; AWS's trn2
samples read pre-tokenized data from FSx instead. Tokenizing once, on one machine with
network, also takes the tokenizer out of every rank's start-up.

A prepared folder::

    manifest.json       what the folder holds (written last: no manifest, no corpus)
    tokens-00000.arrow  Arrow stream files, one row per document, column ``tokens``

Each row is exactly what torchtitan's ``HuggingFaceTextDataset`` gets from
``tokenizer.encode(text, add_bos=True, add_eos=True)`` for that document, and the rows
keep the source's document order. So a run on the folder packs, deals samples to
data-parallel ranks and checkpoints its position as a run on the source does, on the
same tokens: the folder is one more entry in torchtitan's dataset registry (corpus.py),
read by ``data/global_order.py`` through ``data/prepared_loader.py``.

The manifest records each shard's size and sha256, the document and token counts, and
the tokenizer's identity (tokenizer.json's sha256 and the BOS/EOS ids torchtitan
derives); a damaged shard or another tokenizer is a one-line error before training.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..assets import check_same_tokenizer
from ..checksums import sha256_of
from ..errors import AssetError
from ..files import MiB, read_json
from .verified import shards_to_hash

MANIFEST = "manifest.json"
FORMAT = "qwen3-trn-tokens"
VERSION = 1
#: the registry name a prepared folder is served under (corpus.register_datasets)
DATASET_NAME = "qwen3_trn_tokens"
#: a new shard starts after this many tokens (int32: about 1 GiB a shard)
SHARD_TOKENS = 2**28
#: what torchtitan's HuggingFaceTextDataset asks of the tokenizer for every document
ENCODE = {"add_bos": True, "add_eos": True}

PREPARE_HINT = "qwen3-trn data prepare --corpus CORPUS --out DIR"
#: a shard (and the manifest) while ``data prepare`` writes it: ``.NAME.partial``
PARTIAL_SUFFIX = ".partial"


def is_prepared(path: str | Path) -> bool:
    """A folder ``data prepare`` wrote (it has the manifest)."""
    path = Path(path).expanduser()
    return path.is_dir() and os.path.lexists(path / MANIFEST)  # (read_manifest names a pipe)


def refuse_incomplete(path: str | Path) -> None:
    """Shards without a manifest (an interrupted prepare, a partial copy): say so,
    rather than "holds no text" from the text-corpus reader."""
    path = Path(path).expanduser()
    shards = ("tokens-*.arrow", f".tokens-*.arrow{PARTIAL_SUFFIX}")
    if (
        path.is_dir()
        and not (path / MANIFEST).exists()
        and any(any(path.glob(pattern)) for pattern in shards)
    ):
        raise AssetError(
            f"{path} holds prepared shards but no {MANIFEST}: the prepare is still running, "
            "was interrupted, or the copy is incomplete; copy the whole folder or prepare "
            f"again ({PREPARE_HINT})"
        )


def read_manifest(folder: str | Path) -> dict[str, Any]:
    """The manifest of a prepared folder, its format checked; one-line errors."""
    folder = Path(folder).expanduser()
    fix = f"prepare the corpus again ({PREPARE_HINT})"
    manifest = read_json(folder / MANIFEST, limit=64 * MiB, fix=fix)
    shards = manifest.get("shards")
    if manifest.get("format") != FORMAT or not isinstance(shards, list):
        raise AssetError(f"{folder / MANIFEST} is not a qwen3-trn prepared corpus; {fix}")
    if manifest.get("version") != VERSION:
        raise AssetError(
            f"{folder} was prepared in format version {manifest.get('version')}, this "
            f"qwen3-trn reads version {VERSION}; prepare it again ({PREPARE_HINT})"
        )
    if not shards:  # (torchtitan had: "Unable to concatenate an empty list of datasets")
        raise AssetError(f"{folder / MANIFEST} lists no shards: it holds no documents; {fix}")
    wrong = [str(s)[:60] for s in shards if not _shard_entry(s)]
    if wrong or not isinstance(manifest.get("tokenizer"), dict):
        what = f"the shard entry {wrong[0]!r}" if wrong else "its tokenizer entry"
        raise AssetError(f"{folder / MANIFEST} is damaged ({what} is not data prepare's); {fix}")
    return manifest


def _shard_entry(shard: Any) -> bool:
    """A shard entry as data prepare writes it: a plain file name in the folder (never a
    path out of it), its size and sha256."""
    if not isinstance(shard, dict):
        return False
    name, size = shard.get("file"), shard.get("bytes")
    return (
        isinstance(name, str) and Path(name).name == name and name not in ("", ".", "..")
        and isinstance(size, int) and not isinstance(size, bool) and size >= 0
        and isinstance(shard.get("sha256"), str)
    )  # fmt: skip


def check_prepared(
    folder: str | Path,
    *,
    tokenizer_dir: str | Path | None = None,
    hashes: bool = False,
) -> dict[str, Any]:
    """Refuse a damaged or mismatched prepared folder with one line; return its manifest.

    Sizes always (cheap); ``hashes`` re-reads every shard for its sha256 (once per node
    at start-up, not on every rank); ``tokenizer_dir``: the tokenizer the run uses must
    be the one the folder was tokenized with.
    """
    folder = Path(folder).expanduser()
    manifest = read_manifest(folder)
    check_shards(folder, manifest, hashes=hashes)
    if tokenizer_dir is not None:
        check_same_tokenizer(tokenizer_dir, manifest["tokenizer"], folder)
    return manifest


def check_shards(
    folder: Path,
    manifest: dict[str, Any],
    *,
    hashes: bool = False,
    record_in: str | Path | None = None,
    reread: bool = False,
) -> None:
    """Every shard ``manifest`` lists is in ``folder`` at its size (``hashes``: and its
    sha256), or one line names the first that is not.

    ``hashes`` reads the shards whose files changed since the record in the run folder
    ``record_in`` was written, every one without it or with ``reread``
    (``--verify-data``; data/verified.py)."""
    for shard in manifest["shards"]:
        file = folder / shard["file"]
        if not file.is_file():
            raise AssetError(
                f"prepared corpus {folder} lacks shard {shard['file']} (its manifest lists "
                f"it); copy the whole folder, or prepare it again ({PREPARE_HINT})"
            )
        size = file.stat().st_size
        if size != shard["bytes"]:
            raise AssetError(
                f"shard {file} is {size} bytes, its manifest says {shard['bytes']}: the "
                f"copy is damaged or incomplete; copy it again or prepare again ({PREPARE_HINT})"
            )
    if not hashes:
        return
    with shards_to_hash(folder, manifest["shards"], record_in, reread=reread) as todo:
        for shard in todo:
            file = folder / shard["file"]
            if sha256_of(file) != shard["sha256"]:
                raise AssetError(
                    f"shard {file} does not match its sha256 in {MANIFEST}: the copy is "
                    f"damaged; copy it again or prepare again ({PREPARE_HINT})"
                )


def load_prepared(path: str):
    """The registry loader: the shards as one memory-mapped ``datasets.Dataset``, in
    document order (map-style, like a local text corpus, so the dataloader reads any
    document, and its token count, by index)."""
    from datasets import Dataset, concatenate_datasets

    manifest = check_prepared(path)  # sizes: cheap enough for every rank
    folder = Path(path).expanduser()
    parts = [Dataset.from_file(str(folder / shard["file"])) for shard in manifest["shards"]]
    return parts[0] if len(parts) == 1 else concatenate_datasets(parts)
