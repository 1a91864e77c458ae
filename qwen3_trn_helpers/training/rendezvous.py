"""Where ranks meet: a free port, and the environment of a one-rank process group.

torchtitan initialises ``torch.distributed`` from the variables torchrun sets (RANK,
LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). A notebook cell or a plain
``python -m torchtitan.train`` is not launched by torchrun, so for those we provide the
variables of a one-rank group and remove them again afterwards.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager

RENDEZVOUS_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launched_by_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


@contextmanager
def scoped_environ(**values: str) -> Iterator[None]:
    """Set environment variables for the duration; the previous values come back."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextmanager
def one_rank_environment() -> Iterator[bool]:
    """The rendezvous variables of a one-rank group, unless torchrun already set them.

    Yields whether this process was launched by torchrun.
    """
    if launched_by_torchrun():
        yield True
        return
    one_rank = dict(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1")
    with scoped_environ(**one_rank, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port())):
        yield False
