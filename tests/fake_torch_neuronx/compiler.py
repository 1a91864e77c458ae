"""``neuronx-cc``, as torch-neuronx runs it: a program found through PATH.

torch-neuronx compiles each graph (and, in eager mode, each operator the first time it
runs) by running ``neuronx-cc`` with ``execvp`` (NeuronCompiler.cpp:29, :157-159, :235-
256): PATH is searched in the compiling process's own environment, and where the program
is not found the child exits 127 (``kExitExecvpFailed``, :41) and the compile raises
"Command failed (neuronx-cc compilation) with exit code 127" (:178-190), rethrown to the
caller unchanged (CompilationCache.cpp:499-502). The double's ``neuronx-cc`` is a stub
script (install.py) that only has to be found.
"""

from __future__ import annotations

import shutil

#: operators (and graphs) this process has compiled: later runs read the NEFF
COMPILED: set[str] = set()

COMMAND_FAILED = "Command failed (neuronx-cc compilation) with exit code 127"


def compiled_for(what: str) -> None:
    """Compile ``what`` the first time: ``neuronx-cc`` must be on this process's PATH."""
    if what in COMPILED:
        return
    if shutil.which("neuronx-cc") is None:
        raise RuntimeError(COMMAND_FAILED)
    COMPILED.add(what)
