"""The tokenizer a run builds: torchtitan's own, parsed once per process.

torchtitan 0.3.0 builds the tokenizer from ``Trainer.Config.tokenizer``
(``config.tokenizer.build(tokenizer_path=config.hf_assets_path)``), and its
``HuggingFaceTokenizer`` parses Qwen3's tokenizer.json anew each time (18.7 MB: 151,643
tokens, 294,166 merges): 0.7 s of a 2-step tiny run's 1.9 s on a 2-core Zen 4, paid by
every run a notebook kernel or test worker starts after its first. Planning the run had
parsed the same file a moment before, for its vocabulary check (assets.load_tokenizer):
0.6 s more in every process that trains (each torchrun rank, each CLI command).

Our trainer config names :class:`ReusedTokenizer` in that field instead: the same
class, whose ``Tokenizer`` is the process's one parse of the file
(:func:`~qwen3_trn_helpers.assets.load_tokenizer`, re-read when tokenizer.json changes).
torchtitan's only change to the parsed object is adding the special tokens
tokenizer_config.json names where they are missing; Qwen3's are all there, so the
object stays as a fresh load leaves it (tests/core/training/test_tokenizer.py). Where a
folder's tokenizer_config.json changed since its tokenizer was handed out (real path,
inode, size, modification time), the run parses afresh, as torchtitan would.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from torchtitan.components.tokenizer import HuggingFaceTokenizer

from ..assets import load_tokenizer

#: each tokenizer.json handed to torchtitan in this process (its identity) -> the
#: identity of the tokenizer_config.json it was handed out with
_HANDED: dict[tuple[Any, ...], tuple[Any, ...]] = {}


def tokenizer_files_identity(folder: str) -> tuple[Any, ...] | None:
    """What says the folder's tokenizer files are the ones parsed before (None: no
    tokenizer.json there): (tokenizer.json's, tokenizer_config.json's)."""
    identity: list[Any] = []
    for name in ("tokenizer.json", "tokenizer_config.json"):
        path = os.path.realpath(os.path.join(folder, name))
        try:
            st = os.stat(path)
        except OSError:
            if name == "tokenizer.json":
                return None
            identity.append((path, None))
            continue
        identity.append((path, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(identity)


class ReusedTokenizer(HuggingFaceTokenizer):
    """torchtitan's ``HuggingFaceTokenizer``, on the process's one parse of the file."""

    @dataclass(kw_only=True, slots=True)
    class Config(HuggingFaceTokenizer.Config):
        pass

    def _load_tokenizer_from_path(self, tokenizer_path: str) -> Any:
        identity = tokenizer_files_identity(tokenizer_path)
        if identity is None:  # torchtitan's own error for a folder without one
            return super()._load_tokenizer_from_path(tokenizer_path)
        tokenizer_json, config = identity
        if _HANDED.setdefault(tokenizer_json, config) != config:
            return super()._load_tokenizer_from_path(tokenizer_path)
        return load_tokenizer(tokenizer_path)
