"""Pre-tokenized corpora for shared storage: ``qwen3-trn data prepare`` writes one,
``train --corpus DIR`` reads it.

Why: a job of 128 to 1,024 ranks that streams c4 from the Hugging Face hub makes every
rank a hub client, and compute subnets often have no internet at all; AWS's trn2
samples read pre-tokenized data from FSx instead. Tokenizing once, on one machine with
network, also takes the tokenizer out of every rank's start-up.

A prepared folder::

    manifest.json       what the folder holds (written last: no manifest, no corpus)
    tokens-00000.arrow  Arrow stream files, one row per document, column ``tokens``

Each row is exactly what torchtitan's ``HuggingFaceTextDataset`` gets from
``tokenizer.encode(text, add_bos=True, add_eos=True)`` for that document, and the rows
keep the source's document order. So a run on the folder packs, shards across
data-parallel ranks and checkpoints its position with torchtitan's own dataset code, on
the same tokens as a run on the source: the folder is one more entry in torchtitan's
dataset registry (corpus.py), read through ``training/prepared_loader.py``.

The manifest records each shard's size and sha256, the document and token counts, and
the tokenizer's identity (tokenizer.json's sha256 and the BOS/EOS ids torchtitan
derives); a damaged shard or another tokenizer is a one-line error before training.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import AssetError, ConfigError

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


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def tokenizer_identity(folder: str | Path) -> dict[str, Any]:
    """What makes two tokenizers produce the same ids: tokenizer.json's bytes and the
    BOS/EOS ids torchtitan's tokenizer derives (from tokenizer_config.json too)."""
    folder = Path(folder).absolute()
    # (a run plans more than once: remembered while the files stay as they were)
    stamps = tuple(
        (p.stat().st_mtime_ns, p.stat().st_size) if p.exists() else None
        for p in (folder / "tokenizer.json", folder / "tokenizer_config.json")
    )
    return dict(_identity(str(folder), stamps))


@functools.lru_cache(maxsize=8)
def _identity(folder: str, stamps: tuple) -> tuple[tuple[str, Any], ...]:
    from torchtitan.components.tokenizer import HuggingFaceTokenizer

    tokenizer = HuggingFaceTokenizer(tokenizer_path=folder)
    return (
        ("sha256", sha256_file(Path(folder) / "tokenizer.json")),
        ("vocab_size", tokenizer.get_vocab_size()),
        ("bos_id", tokenizer.bos_id),
        ("eos_id", tokenizer.eos_id),
    )


def source_documents(corpus: str) -> Iterator[str]:
    """The documents of any corpus ``train`` takes, in the order its dataloader reads
    them: through the same torchtitan registry entry (loader and sample processor)."""
    from torchtitan.hf_datasets.text_datasets import DATASETS

    from .corpus import dataset_args

    name, path = dataset_args(corpus)  # a bad corpus fails here, not at the first read
    if name == DATASET_NAME:
        raise ConfigError(
            f"corpus {corpus} is already prepared (it holds {MANIFEST}); train on it with "
            "--corpus, or prepare its source again"
        )
    entry = DATASETS[name]
    return (entry.sample_processor(sample) for sample in entry.loader(path or entry.path))


def _empty_folder(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(
            f"--out {out} exists and is not an empty folder; choose a new folder (a "
            "prepared corpus is never written over another)"
        )
    out.mkdir(parents=True, exist_ok=True)


def prepare(
    corpus: str,
    out: str | Path,
    *,
    tokenizer: str | Path | None = None,
    max_documents: int | None = None,
    max_tokens: int | None = None,
    shard_tokens: int = SHARD_TOKENS,
    progress: bool = False,
) -> dict[str, Any]:
    """Tokenize ``corpus`` into ``out`` (a new folder) and return the manifest.

    ``max_documents`` / ``max_tokens`` stop early (after the document that reaches the
    count); a corpus streamed from the hub (c4 holds 365 M documents) needs one.
    """
    from datasets import Features, Sequence, Value
    from datasets.arrow_writer import ArrowWriter
    from torchtitan.components.tokenizer import HuggingFaceTokenizer

    from .assets import resolve_tokenizer
    from .corpus import is_local

    if not is_local(corpus) and max_documents is None and max_tokens is None:
        raise ConfigError(
            f"corpus {corpus!r} streams from the hub without end; pass --max-documents N "
            "or --max-tokens N (a run needs steps x global batch x seq_len tokens)"
        )
    out = Path(out).expanduser().absolute()
    tokenizer_dir = resolve_tokenizer(tokenizer)
    documents = source_documents(corpus)  # (a bad corpus fails before --out exists)
    _empty_folder(out)
    encoder = HuggingFaceTokenizer(tokenizer_path=str(tokenizer_dir))
    features = Features({"tokens": Sequence(Value("int32"))})

    shards: list[dict[str, Any]] = []
    writer: ArrowWriter | None = None
    shard_docs = shard_toks = n_docs = n_toks = 0

    def close_shard() -> None:
        nonlocal writer
        assert writer is not None
        writer.finalize()
        writer.close()
        file = out / shards[-1]["file"]
        shards[-1].update(
            documents=shard_docs, tokens=shard_toks, bytes=file.stat().st_size,
            sha256=sha256_file(file),
        )  # fmt: skip
        writer = None

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(unit=" docs", desc="tokenizing")
    for text in documents:
        if writer is None:
            shards.append({"file": f"tokens-{len(shards):05d}.arrow"})
            writer = ArrowWriter(features=features, path=str(out / shards[-1]["file"]))
            shard_docs = shard_toks = 0
        ids = encoder.encode(text, **ENCODE)
        writer.write({"tokens": ids})
        shard_docs, shard_toks = shard_docs + 1, shard_toks + len(ids)
        n_docs, n_toks = n_docs + 1, n_toks + len(ids)
        if bar is not None:
            bar.update()
        if shard_toks >= shard_tokens:
            close_shard()
        if (max_documents and n_docs >= max_documents) or (max_tokens and n_toks >= max_tokens):
            break
    if writer is not None:
        close_shard()
    if bar is not None:
        bar.close()
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
    tmp = out / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(tmp, out / MANIFEST)  # last, and whole: a folder with it is complete
    return manifest


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
        if hashes and sha256_file(file) != shard["sha256"]:
            raise AssetError(
                f"shard {file} does not match its sha256 in {MANIFEST}: the copy is "
                f"damaged; copy it again or prepare again ({PREPARE_HINT})"
            )
    if tokenizer_dir is not None:
        want, have = manifest["tokenizer"], tokenizer_identity(tokenizer_dir)
        differs = [k for k in ("sha256", "bos_id", "eos_id") if want.get(k) != have[k]]
        if differs:
            raise ConfigError(
                f"prepared corpus {folder} was tokenized with another tokenizer than this "
                f"run's {tokenizer_dir} ({', '.join(differs)} differ; it was prepared with "
                f"{want.get('path')}): train with --tokenizer set to that one, or prepare "
                f"the corpus again with --tokenizer {tokenizer_dir}"
            )
    return manifest


def load_prepared(path: str):
    """The registry loader: the shards as one memory-mapped ``datasets.Dataset``, in
    document order (map-style, so torchtitan splits it by data-parallel rank exactly
    as it splits a local text corpus)."""
    from datasets import Dataset, concatenate_datasets

    manifest = check_prepared(path)  # sizes: cheap enough for every rank
    folder = Path(path).expanduser()
    parts = [Dataset.from_file(str(folder / shard["file"])) for shard in manifest["shards"]]
    return parts[0] if len(parts) == 1 else concatenate_datasets(parts)
