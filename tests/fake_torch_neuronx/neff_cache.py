"""The NEFF cache as torch-neuronx lays it out: ``<cache>/<hash>/<hash>.neff``, the
folder TORCH_NEURONX_NEFF_CACHE_DIR (default /tmp/neff_cache), written through a
temporary file and a rename, under a file lock that another process compiling the
same graph waits on for TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT seconds (1200 by
default) before it gives up (torch-neuronx NEFF cache source; Neuron 2.33
compiler-artifacts page: the cache is NFS-safe)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import time
from pathlib import Path

DEFAULT_DIR = "/tmp/neff_cache"
DEFAULT_LOCK_TIMEOUT_S = 1200.0


class NeffCacheLockTimeout(RuntimeError):
    pass


def cache_dir() -> Path:
    return Path(os.environ.get("TORCH_NEURONX_NEFF_CACHE_DIR", DEFAULT_DIR))


def lock_timeout_s() -> float:
    return float(os.environ.get("TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT", DEFAULT_LOCK_TIMEOUT_S))


def graph_hash(gm, example_inputs) -> str:
    shapes = [(tuple(t.shape), str(t.dtype)) for t in example_inputs if hasattr(t, "shape")]
    return hashlib.sha256(f"{gm.code}\n{shapes}".encode()).hexdigest()[:32]


def compile_into_cache(gm, example_inputs) -> Path:
    """The graph's NEFF: read when cached, else "compiled" (written) under the lock.

    ``FAKE_TORCH_NEURONX_COMPILE_SECONDS`` stands for neuronx-cc's time (a 4B model's
    first compile takes tens of minutes), held under the lock as the real compile is.
    """
    key = graph_hash(gm, example_inputs)
    folder = cache_dir() / key
    neff = folder / f"{key}.neff"
    if neff.exists():
        return neff
    folder.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + lock_timeout_s()
    with open(folder / f"{key}.lock", "w") as lock:
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise NeffCacheLockTimeout(
                        f"timed out after {lock_timeout_s():.0f} s waiting for the NEFF cache "
                        f"lock of {folder} (TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT)"
                    ) from None
                time.sleep(0.05)
        if not neff.exists():  # another process may have written it while we waited
            time.sleep(float(os.environ.get("FAKE_TORCH_NEURONX_COMPILE_SECONDS", "0")))
            tmp = folder / f".{key}.neff.{os.getpid()}.tmp"
            tmp.write_bytes(b"NEFF (fake_torch_neuronx)\n" + gm.code.encode())
            tmp.rename(neff)
    return neff
