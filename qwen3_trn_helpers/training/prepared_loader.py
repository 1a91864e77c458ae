"""The dataloader for a prepared (pre-tokenized) corpus: torchtitan's own text loader,
fed token ids instead of text.

torchtitan's ``HuggingFaceTextDataset`` calls ``tokenizer.encode(text, add_bos=True,
add_eos=True)`` on what the registry's sample processor returns, then packs, shards by
data-parallel rank and checkpoints its position. A prepared folder's sample processor
returns the ids ``data prepare`` stored (made by that very call), so the loader hands
the dataset a tokenizer whose ``encode`` returns them unchanged; everything else is
torchtitan's, and the batches are those of a run on the source text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torchtitan.components.tokenizer import BaseTokenizer
from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataLoader


class StoredTokenIds:
    """A tokenizer whose ``encode`` takes a document's stored ids and returns them."""

    def __init__(self, tokenizer: BaseTokenizer) -> None:
        self._tokenizer = tokenizer

    def encode(self, ids: list[int], **_: Any) -> list[int]:
        # (add_bos/add_eos were applied when the folder was prepared: prepared.ENCODE)
        return list(ids)

    def __getattr__(self, name: str) -> Any:  # eos_id, decode, ... from the real one
        return getattr(self._tokenizer, name)


class PreparedTextDataLoader(HuggingFaceTextDataLoader):
    """``HuggingFaceTextDataLoader`` over a prepared folder (dataset ``qwen3_trn_tokens``)."""

    @dataclass(kw_only=True, slots=True)
    class Config(HuggingFaceTextDataLoader.Config):
        pass

    def __init__(self, config: Config, *, tokenizer: BaseTokenizer, **kwargs: Any) -> None:
        super().__init__(config, tokenizer=StoredTokenIds(tokenizer), **kwargs)
