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

import json
from pathlib import Path
from typing import Any

from ..assets import check_same_tokenizer
from ..checksums import sha256_of
from ..errors import AssetError

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


def is_prepared(path: str | Path) -> bool:
    """A folder ``data prepare`` wrote (it has the manifest)."""
    path = Path(path).expanduser()
    return path.is_dir() and (path / MANIFEST).is_file()


def refuse_incomplete(path: str | Path) -> None:
    """Shards without a manifest (an interrupted prepare, a partial copy): say so,
    rather than "holds no text" from the text-corpus reader."""
    path = Path(path).expanduser()
    if path.is_dir() and not (path / MANIFEST).exists() and any(path.glob("tokens-*.arrow")):
        raise AssetError(
            f"{path} holds prepared shards but no {MANIFEST}: the prepare was interrupted "
            f"or the copy is incomplete; copy the whole folder or prepare again ({PREPARE_HINT})"
        )


def read_manifest(folder: str | Path) -> dict[str, Any]:
    """The manifest of a prepared folder, its format checked; one-line errors."""
    folder = Path(folder).expanduser()
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        ok = manifest.get("format") == FORMAT and isinstance(manifest.get("shards"), list)
    except (OSError, ValueError, AttributeError) as e:
        raise AssetError(
            f"{folder / MANIFEST} cannot be read ({e.__class__.__name__}); prepare the "
            f"corpus again ({PREPARE_HINT})"
        ) from None
    if not ok:
        raise AssetError(
            f"{folder / MANIFEST} is not a qwen3-trn prepared corpus; prepare it again "
            f"({PREPARE_HINT})"
        )
    if manifest.get("version") != VERSION:
        raise AssetError(
            f"{folder} was prepared in format version {manifest.get('version')}, this "
            f"qwen3-trn reads version {VERSION}; prepare it again ({PREPARE_HINT})"
        )
    return manifest


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


def check_shards(folder: Path, manifest: dict[str, Any], *, hashes: bool = False) -> None:
    """Every shard ``manifest`` lists is in ``folder`` at its size (``hashes``: and its
    sha256), or one line names the first that is not."""
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
        if hashes and sha256_of(file) != shard["sha256"]:
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
