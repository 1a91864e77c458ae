"""A file's sha256, the one way every checksum here is taken.

Pinned wheels and the tokenizer's vocabulary (assets.py), prepared corpora's shards
(prepared.py), checkpoint shards (training/checkpoint.py) and a workshop wheelhouse's
manifest (wheelhouse.py) are all checked with it. Standard library only: setup.sh runs
``python -m qwen3_trn_helpers.ops.wheelhouse`` before the package's dependencies exist.
"""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_of(path: Path) -> str:
    """The hex sha256 of the file at ``path``, read in chunks (any size)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
