"""A notebook's scratch folder: gone when its kernel shuts down, or at the next run.

The notebooks train, save checkpoints and export weights into a folder of their own. A
bare ``tempfile.mkdtemp`` is never removed: each run of notebook 03 left 309 MB in
/tmp on a CPU (two 10-step runs with their checkpoints and Hugging Face exports; on
trn2 the same cell exports two 4B models), and 32 runs of the course here had left
10 GB when the disk filled. Two ways out, because kernels end in two ways:

- a kernel that exits (JupyterLab's "Shut Down Kernel", a restart, the site build)
  removes its folder itself: a ``tempfile.TemporaryDirectory`` cleans up at exit;
- a kernel killed outright (nbval stops its kernels that way, so do a crash and
  ``kill -9``) cannot, so the folder's name carries the kernel's pid, and the next
  scratch folder of the same notebook removes those whose process is gone.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from ..runs.lifeline import process_alive

#: the open scratch folders of this process: held here, so that a notebook that keeps
#: only the Path does not lose its folder when the object would be collected
_OPEN: list[tempfile.TemporaryDirectory] = []


def _prefix(notebook: str) -> str:
    return f"qwen3-trn-{notebook}-"


def sweep_orphans(notebook: str, root: Path | None = None) -> list[Path]:
    """Remove ``notebook``'s scratch folders left by kernels that no longer run (this
    user's, in the system's temporary folder); the folders removed."""
    root = Path(root or tempfile.gettempdir())
    prefix, removed = _prefix(notebook), []
    for folder in root.glob(prefix + "*"):
        pid = folder.name[len(prefix) :].split("-", 1)[0]
        try:
            ours = folder.is_dir() and not folder.is_symlink()
            ours = ours and folder.stat().st_uid == os.getuid()
        except OSError:
            continue
        if ours and pid.isdigit() and not process_alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def scratch_folder(notebook: str) -> Path:
    """A new empty folder for ``notebook``'s runs (``qwen3-trn-<notebook>-<pid>-XXXX`` in
    the system's temporary folder), removed with everything in it when the kernel exits
    or, if it was killed, by the notebook's next run."""
    sweep_orphans(notebook)
    folder = tempfile.TemporaryDirectory(
        prefix=f"{_prefix(notebook)}{os.getpid()}-", ignore_cleanup_errors=True
    )
    _OPEN.append(folder)
    return Path(folder.name)
