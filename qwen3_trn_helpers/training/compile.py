"""``--compile``: torchtitan's ``compile`` section for a run, and where compiled code is cached.

torchtitan 0.3.0 compiles each ``TransformerBlock`` with ``torch.compile(fullgraph=True)``
and, separately, the loss (``CompileConfig.components``: ``model``, ``loss``). We only
choose the backend per device and point the compilers' caches at folders that outlive a
run:

- CPU (and CUDA): ``inductor``, PyTorch's default backend. Dynamo captures each block's
  forward as an FX graph, AOTAutograd derives its backward, and inductor generates fused
  C++/OpenMP kernels (Triton on CUDA). Its on-disk caches (FX graph cache, AOTAutograd
  cache, compiled kernels) live in ``TORCHINDUCTOR_CACHE_DIR``, which we set to the
  package cache folder (``~/.cache/qwen3-trn/inductor``) unless the user set it, so a
  second identical run loads the compiled code instead of generating it.
- trn2: ``neuron``, TorchNeuron's TorchDynamo backend. AWS's "torch.compile backend
  reference" (Neuron 2.33, torch/compile/reference-torch-compile): ``backend: 'neuron'.
  Explicitly set, or auto-selected when running on a Neuron device``; the
  TorchTitan-on-Neuron pages run eager first, then ``--compile.enable --compile.backend
  neuron``. Each captured graph is lowered through StableHLO to ``neuronx-cc`` and becomes
  one NEFF; its cache folder is ``TORCH_NEURONX_NEFF_CACHE_DIR`` (Neuron 2.33, "What are
  Neuron Compiler artifacts?"; NFS-compatible), set for every rank by
  runs/neuron_cores.py. Not run on a trn2 by this package's tests.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..device import Device, as_device

#: what torchtitan compiles: every TransformerBlock, and the loss
COMPONENTS = ("model", "loss")

#: inductor's cache folder variable (torch/_inductor/runtime/cache_dir_utils.py)
INDUCTOR_CACHE_VAR = "TORCHINDUCTOR_CACHE_DIR"

#: TorchNeuron's persistent NEFF cache folder (Neuron 2.33 compiler-artifacts page)
NEFF_CACHE_VAR = "TORCH_NEURONX_NEFF_CACHE_DIR"
#: How long a process waits on the compile lock while another compiles the same graph:
#: 1200 s by default, after which torch-neuronx breaks the lock as stale and compiles
#: the graph itself (FileLock.h:16, FileLock.cpp:141-167). On trn2 the 64 ranks of a
#: node compile the same graphs and wait on one compile; a full-size first compile can
#: outlast 20 minutes, and 63 ranks then compiling it again at once would take the
#: host's memory, so every rank gets the 64-rank smoke rung's own limit (3600 s) unless
#: the user set another value
NEFF_CACHE_LOCK_TIMEOUT_VAR = "TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT"
NEFF_CACHE_LOCK_TIMEOUT_S = 3600
#: where torch-neuronx keeps its compile locks: node-local, ``/tmp/local_cache`` by
#: default (CompilationCache.cpp:41-58, :617-621), one folder for every Linux user of
#: the node, whose lock files another user cannot open (FileLock.cpp:90-94: mode 0666
#: less the umask). Every rank we start gets a folder of its user's own
#: (:func:`neff_local_cache_dir`) unless the user chose one.
NEFF_LOCAL_CACHE_VAR = "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR"


def compile_backend(device: Device | str) -> str:
    """The ``torch.compile`` backend a run on ``device`` uses (``Device.compile_backend``:
    "neuron" from AWS Neuron 2.33's torch.compile backend reference, else inductor)."""
    return as_device(device).compile_backend


def compile_config(enable: bool, device: Device):
    """torchtitan's ``CompileConfig`` for a run (disabled: torchtitan's default)."""
    from torchtitan.config import CompileConfig

    if not enable:
        return CompileConfig()
    return CompileConfig(enable=True, components=list(COMPONENTS), backend=device.compile_backend)


def inductor_cache_dir() -> Path:
    """The package's inductor cache folder (``<package cache>/inductor``)."""
    from ..assets import cache_dir

    return cache_dir() / "inductor"


def neff_cache_dir() -> Path:
    """The package's NEFF cache folder on a one-node trn2 (``<package cache>/neff``)."""
    from ..assets import cache_dir

    return cache_dir() / "neff"


def neff_local_cache_dir() -> Path:
    """This user's node-local folder for torch-neuronx's compile locks (the temporary
    folder, as torch-neuronx's own default, with the user's id in its name)."""
    import tempfile

    return Path(tempfile.gettempdir()) / f"qwen3-trn-{os.getuid()}-neuron-local"


def _torchs_default(var: str) -> str | None:
    """The value torch itself writes into ``var`` (inductor records its default folder in
    the environment the first time it looks, so "set" does not mean "the user chose")."""
    if var != INDUCTOR_CACHE_VAR:
        return None
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    return os.path.abspath(default_cache_dir())


def use_package_caches(
    device: Device, environ: dict[str, str] | os._Environ | None = None
) -> dict[str, str]:
    """Point the compile cache of ``device`` at the package cache folder.

    Inductor's everywhere but trn2, the NEFF cache on trn2; only where the user did not
    choose a folder. Inductor reads its variable each time it looks for the cache, so
    setting it before a run compiles is enough; child processes (torchrun's ranks)
    inherit it. Returns what was set.
    """
    environ = os.environ if environ is None else environ
    var, folder = (
        (NEFF_CACHE_VAR, neff_cache_dir)
        if device.is_trn2
        else (INDUCTOR_CACHE_VAR, inductor_cache_dir)
    )
    if environ.get(var) and environ[var] != _torchs_default(var):
        return {}
    environ[var] = str(folder())
    return {var: environ[var]}


def compile_cache_folder(device: Device) -> tuple[str, Path] | None:
    """The compile cache a run on ``device`` uses: (its variable, its folder), once
    :func:`use_package_caches` (or the user) set it; None where nothing set it."""
    var = NEFF_CACHE_VAR if device.is_trn2 else INDUCTOR_CACHE_VAR
    return (var, Path(os.environ[var]).expanduser()) if os.environ.get(var) else None


def check_compile_cache(var: str, folder: Path) -> None:
    """Refuse, in one line naming the folder and the fix, a compile cache that cannot
    work, before anything compiles (as the package checks its assets).

    Why: inductor met a cache folder replaced by a file with ``FileExistsError`` and a
    read-only one with ``InductorError: OSError ... Read-only file system``, each deep
    inside the first compiled step, with neither the folder nor the fix named.
    """
    import tempfile

    from ..errors import AssetError

    elsewhere = f"or set {var} to another folder"
    for path in (folder, *folder.parents):
        if path.exists() or path.is_symlink():
            if not path.is_dir():
                raise AssetError(
                    f"the compile cache {folder} cannot be a folder: {path} is a file, not "
                    f"a folder; delete it (rm {path}) {elsewhere}"
                )
            break
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-check-", dir=folder)
        os.close(fd)
        os.unlink(probe)
        for entry in folder.iterdir():  # inductor writes into these (fxgraph, aotautograd...)
            if entry.is_dir() and not os.access(entry, os.W_OK | os.X_OK):
                raise PermissionError(13, "Permission denied", str(entry))
            if entry.name in CACHE_SUBFOLDERS and not entry.is_dir():
                raise FileExistsError(17, "a file where a folder belongs", str(entry))
    except OSError as e:
        where = e.filename or folder
        raise AssetError(
            f"the compile cache {folder} cannot be written ({e.strerror}: {where}); make it "
            f"writable, delete it (rm -r {folder}) {elsewhere}"
        ) from None


#: the named folders inductor makes in its cache (torch 2.14, seen after a compiled tiny
#: run; beside them, one folder per two-letter hash prefix holding compiled kernels)
CACHE_SUBFOLDERS = ("fxgraph", "aotautograd", "locks")


def cache_fault(error: BaseException, folder: Path) -> str | None:
    """One line for an error that a damaged entry of the compile cache ``folder`` caused
    (inductor names the entry's path: ``Failed to import /.../inductor/xx/yy.py``); None
    for any other error."""
    seen, chain = set(), error
    while chain is not None and id(chain) not in seen:
        seen.add(id(chain))
        text = str(chain)
        if str(folder) in text:
            first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
            return (
                f"the compile cache {folder} holds a damaged entry ({type(chain).__name__}: "
                f"{first[:300]}); delete the folder (rm -r {folder}) and run again: the "
                "next run compiles afresh"
            )
        chain = chain.__cause__ or chain.__context__
    return None


#: dynamo settings torchtitan 0.3.0's ``apply_compile`` sets for the whole process
DYNAMO_SETTINGS = ("capture_scalar_outputs", "skip_fwd_side_effects_in_bwd_under_checkpoint")


def keep_dynamo_settings():
    """A scope that puts back, on exit, the dynamo settings a compiled run changes.

    torchtitan's ``apply_compile`` sets them process-wide (``capture_scalar_outputs =
    True``: ``.item()`` is traced instead of breaking the graph); a notebook that
    compiles anything after a compiled run would otherwise see dynamo behave otherwise.
    """
    import torch._dynamo.config as dynamo_config

    return dynamo_config.patch({name: getattr(dynamo_config, name) for name in DYNAMO_SETTINGS})


def static_shapes(device: Device):
    """A scope in which dynamo never makes a size symbolic by itself, on neuron.

    By default dynamo recompiles a graph whose input size changed with that size made
    symbolic (``automatic_dynamic_shapes``); torch-neuronx's backend refuses any
    symbolic size ("torch-neuronx requires static shapes"), so on neuron a new size
    must be a new static graph instead, as AWS's gpt_oss example sets
    (``torch._dynamo.config.automatic_dynamic_shapes = False``). Elsewhere: no change.
    """
    import contextlib

    import torch._dynamo.config as dynamo_config

    if not device.is_trn2:
        return contextlib.nullcontext()
    return dynamo_config.patch(automatic_dynamic_shapes=False)


@contextmanager
def short_cache_warnings(folder: Path) -> Iterator[None]:
    """Inductor's warning for a cache entry it cannot read (random bytes in an FX graph
    entry) as one line naming the folder, instead of a traceback per graph; inductor
    compiles that graph again, so the run goes on."""
    import logging

    def shorten(record: logging.LogRecord) -> bool:
        if str(record.msg).startswith("fx graph cache unable to load"):
            reason = record.exc_info[1] if record.exc_info else None
            record.msg = (
                f"the compile cache {folder} holds an entry that cannot be read "
                f"({type(reason).__name__ if reason else 'unreadable'}); compiling that graph "
                f"again (rm -r {folder} if this repeats)"
            )
            record.args, record.exc_info, record.exc_text = (), None, None
        return True

    logger = logging.getLogger("torch._inductor.codecache")
    logger.addFilter(shorten)
    try:
        yield
    finally:
        logger.removeFilter(shorten)
