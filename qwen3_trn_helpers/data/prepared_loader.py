"""Reading a prepared (pre-tokenized) corpus: torchtitan's encoding, already done.

torchtitan's ``HuggingFaceTextDataset`` calls ``tokenizer.encode(text, add_bos=True,
add_eos=True)`` on what the registry's sample processor returns. A prepared folder's
sample processor returns the ids ``data prepare`` stored (made by that very call), so
the dataloader (data/global_order.py) reads it through a tokenizer whose
``encode`` returns them unchanged, and the batches are those of a run on the source
text. Its token counts come from the Arrow offsets, without reading a token, so a rank
passes over other ranks' documents for free.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from torchtitan.components.tokenizer import BaseTokenizer


class StoredTokenIds:
    """A tokenizer whose ``encode`` takes a document's stored ids and returns them."""

    def __init__(self, tokenizer: BaseTokenizer) -> None:
        self._tokenizer = tokenizer

    def encode(self, ids: list[int], **_: Any) -> list[int]:
        # (add_bos/add_eos were applied when the folder was prepared: prepared.ENCODE)
        return list(ids)

    def __getattr__(self, name: str) -> Any:  # eos_id, decode, ... from the real one
        return getattr(self._tokenizer, name)


def token_counts(data: Any) -> np.ndarray:
    """Each row's token count of a prepared ``datasets.Dataset`` (column ``tokens``),
    from the list offsets of its memory-mapped Arrow table: no token is read."""
    import pyarrow.compute as pc

    if getattr(data, "_indices", None) is not None:  # (a selection: count what it holds)
        return np.array([len(row) for row in data["tokens"]], dtype=np.int64)
    column = data.data.column("tokens")
    return pc.list_value_length(column).to_numpy(zero_copy_only=False).astype(np.int64)
