"""The compilation cache as torch-neuronx keeps it for dynamo graphs and eager operators.

- The NEFFs: ``<cache>/<key[0:2]>/<key[2:4]>/<key>.neff`` (PersistentCacheBackend.cpp:
  61-65), the folder ``TORCH_NEURONX_NEFF_CACHE_DIR`` or ``/tmp/neff_cache`` (:22-28),
  written through a temporary file and a rename (:108-...); shared storage is fine.
- The lock a compile holds: ``<local>/locks/<key>.lock`` (CompilationCache.cpp:617-621),
  ``<local>`` being ``TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR`` or ``/tmp/local_cache``
  (:41-58): on the node's own disk ("to avoid NFS locking issues"), one folder for every
  Linux user of the node. The lock file is opened read-write with mode 0666 less the
  umask (FileLock.cpp:90-94), so with the usual umask 022 a second user cannot open
  the first one's lock and its compile fails ("Failed to open lock file ...").
- A process finding the lock held retries until ``TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT``
  seconds (1200 by default, FileLock.h:16, FileLock.cpp:49-66), then *breaks* the lock as
  stale (removes the file, takes a new one, FileLock.cpp:141-167) and compiles itself:
  nothing fails, the same graph is compiled twice. After taking the lock it looks in the
  cache again (CompilationCache.cpp:527-554): another process may have written the NEFF.

(NKI kernels compiled through ``torch_neuronx/kernels`` use another layout,
``<cache>/<hash>/<hash>.neff`` with ``<local>/.../compile.lock``, compiler_subprocess.py;
the double compiles no NKI kernel.)
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import sys
import time
from pathlib import Path

DEFAULT_DIR = "/tmp/neff_cache"
DEFAULT_LOCAL_DIR = "/tmp/local_cache"
DEFAULT_LOCK_TIMEOUT_S = 1200.0


def cache_dir() -> Path:
    return Path(os.environ.get("TORCH_NEURONX_NEFF_CACHE_DIR") or DEFAULT_DIR)


def local_cache_dir() -> Path:
    return Path(os.environ.get("TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR") or DEFAULT_LOCAL_DIR)


def lock_timeout_s() -> float:
    value = os.environ.get("TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT", "")
    try:
        seconds = float(value)
    except ValueError:  # FileLock.cpp:58-61: an invalid value warns; the default holds
        return DEFAULT_LOCK_TIMEOUT_S
    return seconds if seconds > 0 else DEFAULT_LOCK_TIMEOUT_S


def graph_key(gm, example_inputs) -> str:
    shapes = [(tuple(t.shape), str(t.dtype)) for t in example_inputs if hasattr(t, "shape")]
    return hashlib.sha256(f"{gm.code}\n{shapes}".encode()).hexdigest()[:40]


def neff_path(key: str) -> Path:
    """PersistentCacheBackend.cpp:61-65: two levels of two-letter folders."""
    return cache_dir() / key[:2] / key[2:4] / f"{key}.neff"


def lock_path(key: str) -> Path:
    return local_cache_dir() / "locks" / f"{key}.lock"


def _take_lock(path: Path):
    """FileLock::Acquire (FileLock.cpp:107-181): retry, then break a stale lock."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as e:  # FileLock.cpp:90-94
        raise RuntimeError(f"Failed to open lock file: {path} ({e.strerror})") from None
    deadline = time.monotonic() + lock_timeout_s()
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:  # :141-160: remove it and take a new one
                print(f"WARNING Lock acquisition timed out, breaking stale lock path={path}",
                      file=sys.stderr)  # fmt: skip
                os.close(fd)
                path.unlink(missing_ok=True)
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            time.sleep(0.05)


def compile_into_cache(gm, example_inputs) -> Path:
    """The graph's NEFF: read when cached, else compiled (``neuronx-cc`` through PATH)
    and written under the lock, after a second look once the lock is held.

    ``FAKE_TORCH_NEURONX_COMPILE_SECONDS`` stands for neuronx-cc's time (a 4B model's
    first compile takes tens of minutes), held under the lock as the real compile is.
    """
    from .compiler import compiled_for

    key = graph_key(gm, example_inputs)
    neff = neff_path(key)
    if neff.exists():
        return neff
    fd = _take_lock(lock_path(key))
    try:
        if not neff.exists():  # CompilationCache.cpp:527-554
            compiled_for(f"graph {key}")
            time.sleep(float(os.environ.get("FAKE_TORCH_NEURONX_COMPILE_SECONDS", "0")))
            neff.parent.mkdir(parents=True, exist_ok=True)
            tmp = neff.parent / f".tmp.{os.getpid()}"
            tmp.write_bytes(b"NEFF (fake_torch_neuronx)\n" + gm.code.encode())
            tmp.rename(neff)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    return neff
