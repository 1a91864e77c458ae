"""``qwen3-trn data prepare``: tokenize any corpus ``train`` takes into a prepared folder
(the format is prepared.py's), reading the source through the same torchtitan registry
entry the dataloader uses, so the folder holds the tokens a run on the source trains on.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
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
    SHARD_TOKENS,
    VERSION,
)
from ..errors import AssetError, ConfigError


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

    from ..assets import resolve_tokenizer

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
            sha256=sha256_of(file),
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
