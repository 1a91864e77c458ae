"""The tokenizer a run builds: torchtitan's own, parsed once per process.

torchtitan 0.3.0 builds the tokenizer from ``Trainer.Config.tokenizer``
(``config.tokenizer.build(tokenizer_path=config.hf_assets_path)``), and its
``HuggingFaceTokenizer`` parses Qwen3's tokenizer.json anew each time (18.7 MB: 151,643
tokens, 294,166 merges): 0.7 s of a 2-step tiny run's 1.9 s on a 2-core Zen 4, paid by
every run a notebook kernel or test worker starts after its first. Our trainer config
names :class:`ReusedTokenizer` in that field instead: the same class, which hands out
the ``Tokenizer`` the process parsed last while tokenizer.json and tokenizer_config.json
are the same files, unchanged (real path, inode, size, modification time).
torchtitan's only change to the parsed object, adding the config's special tokens where
they are missing, finds them present the second time, so it is as a fresh load leaves it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from torchtitan.components.tokenizer import HuggingFaceTokenizer

#: the last tokenizer.json parsed in this process: (its files' identity, the Tokenizer)
_LOADED: list[tuple[tuple[Any, ...], Any]] = []


def tokenizer_files_identity(folder: str) -> tuple[Any, ...] | None:
    """What says the folder's tokenizer files are the ones parsed before (None: no
    tokenizer.json there)."""
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
    """torchtitan's ``HuggingFaceTokenizer``, reusing the process's last parse."""

    @dataclass(kw_only=True, slots=True)
    class Config(HuggingFaceTokenizer.Config):
        pass

    def _load_tokenizer_from_path(self, tokenizer_path: str) -> Any:
        identity = tokenizer_files_identity(tokenizer_path)
        if identity is not None and _LOADED and _LOADED[0][0] == identity:
            return _LOADED[0][1]
        tokenizer = super()._load_tokenizer_from_path(tokenizer_path)
        if identity is not None:
            _LOADED[:] = [(identity, tokenizer)]
        return tokenizer
