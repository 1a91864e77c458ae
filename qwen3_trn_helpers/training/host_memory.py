"""The host's heap while a CPU run trains, and after it (glibc's malloc; Linux only).

Why this exists: a CPU training step allocates and frees the same large tensors every
step (the tiny preset's logits alone are 256 x 151,936 floats, 156 MB). glibc serves
every block over 32 MiB with its own ``mmap`` and unmaps it on ``free``, so the next
step faults the same pages in again, zeroed by the kernel: measured on a 2-core Zen 4,
a 10-step tiny native run faulted 3.0 million pages, 7.6 s of system time against
16.9 s of user time, and stepped at about 1.1 s. Kept in the heap instead
(:func:`keep_freed_memory_while_training`), the same run faulted 0.54 million pages and
trained about twice as fast (12.8 s -> 5.6-6.9 s for the 10 steps), with the same
losses, for a higher peak (2.3 GB resident against 1.95 GB).
torch's CPU allocator has no cache of its own to do this (its caching allocator is
mobile-only); the usual advice is jemalloc or tcmalloc through
``LD_PRELOAD``, which a notebook kernel cannot take after it started, so we ask glibc
itself through ``mallopt``, for the run only.

After the run, :func:`release_freed_memory` gives what it freed back to the system.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

# glibc's malloc.h: mallopt's parameter numbers, and the defaults we restore after a run
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
DEFAULT_TRIM_THRESHOLD, DEFAULT_MMAP_MAX = 128 * 1024, 65536
#: free heap kept at the top during a run: above any step's working set at our sizes
TRIM_THRESHOLD_WHILE_TRAINING = 2**31 - 1


def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None  # musl


def user_tuned_malloc() -> bool:
    """Whether the user set glibc's malloc tunables themselves (theirs win)."""
    return any(k.startswith("MALLOC_") for k in os.environ) or "malloc" in os.environ.get(
        "GLIBC_TUNABLES", ""
    )


@contextmanager
def keep_freed_memory_while_training(enabled: bool = True) -> Iterator[bool]:
    """Inside the block, glibc keeps freed memory in the heap for the next step to
    reuse (no ``mmap`` per large block, no trimming); glibc's defaults after it.

    Yields whether it changed anything: not off Linux/glibc, not when ``enabled`` is
    false (a run on an accelerator, whose tensors live in its own allocator) and not
    when the user tuned malloc through the environment.
    """
    libc = _glibc() if enabled and not user_tuned_malloc() else None
    if libc is None:
        yield False
        return
    libc.mallopt(M_MMAP_MAX, 0)
    libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_WHILE_TRAINING)
    try:
        yield True
    finally:
        libc.mallopt(M_MMAP_MAX, DEFAULT_MMAP_MAX)
        libc.mallopt(M_TRIM_THRESHOLD, DEFAULT_TRIM_THRESHOLD)


def release_freed_memory() -> None:
    """Give the memory a finished run freed back to the operating system (glibc only).

    A run frees its model, gradients and optimizer state, but glibc keeps freed heap
    pages mapped for reuse, fragmented across threads' arenas: a notebook kernel or
    test worker that trains again and again grows by hundreds of MiB a run (measured:
    4.1 GiB after tests/core/model/test_variants.py, 1.0 GiB with a trim after each test) and can
    be killed for memory it does not use. ``malloc_trim`` returns those pages.
    """
    import gc

    libc = _glibc()
    if libc is None:
        return
    gc.collect()
    libc.malloc_trim(0)
