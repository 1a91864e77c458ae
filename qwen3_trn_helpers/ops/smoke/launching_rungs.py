"""The bodies of the rungs that launch runs of their own: ``spmd_backends`` (one torchrun
of torchtitan's own entry point per backend) and ``compile`` (the same compiled step
twice, with one NEFF cache).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .rungs import _skip


def spmd_backend_command(backend: str, out: Path) -> list[str]:
    """One step of the tiny native model at tensor parallel 2 on 2 ranks, through
    torchtitan's own entry point (our config registry), with ``backend``.

    TP is where the backends differ (torchtitan 0.3.0's Qwen3 parallelize and loss
    branch on it), and the 4b preset trains at TP 4, so the rung uses TP, not FSDP alone.
    """
    from ...runs.launch import torchrun

    titan = ["-m", "torchtitan.train", "--module", "qwen3_trn_helpers",
             "--config", "qwen3_trn_tiny_native", "--training.steps", "1",
             "--parallelism.tensor_parallel_degree", "2", "--parallelism.spmd_backend",
             backend, "--dump_folder", str(out / backend)]  # fmt: skip
    return torchrun(titan, nproc=2, in_share=True)


def summarize_backends(results: dict[str, tuple[bool, str]], default: str) -> tuple[bool, str]:
    """(passed, line) of the spmd_backends rung: passes when the default backend works."""
    works = [b for b, (ok, _) in results.items() if ok]
    fails = [f"{b} ({why})" for b, (ok, why) in results.items() if not ok]
    line = f"work here: {', '.join(works) or 'none'}"
    if fails:
        line += f"; fail: {'; '.join(fails)}"
    if default in works:
        return True, f"{line}; our default {default!r} works"
    if works:
        return False, f"{line}; our default {default!r} does not: pass --spmd-backend {works[0]}"
    return False, f"{line}; none works: read the rung's log"


def rung_spmd_backends() -> None:
    """Each spmd_backend in turn (one child torchrun each); says which work here."""
    import tempfile

    from ...runs.child import run_child
    from ...training.spec import SPMD_BACKENDS

    out = Path(tempfile.mkdtemp(prefix="qwen3-trn-spmd-"))
    results: dict[str, tuple[bool, str]] = {}
    for backend in SPMD_BACKENDS:
        proc = run_child(spmd_backend_command(backend, out), timeout=900)
        print(f"--- {backend}: exit status {proc.returncode}\n{proc.output[-9000:]}",
              file=sys.stderr)  # fmt: skip
        results[backend] = (proc.ok, "" if proc.ok else proc.error_line()[:160])
    from ...device import DEVICES, detect_device_type
    from ...training.trn2_choices import default_spmd_backend

    default = default_spmd_backend(DEVICES.get(detect_device_type(), DEVICES["cpu"]))
    passed, line = summarize_backends(results, default)
    print(("ok: " if passed else "fail: ") + line)
    sys.exit(0 if passed else 1)


#: the compile rung's sequence: NKI flash attention, which AWS's compile path exists
#: for, applies only when the sequence is a multiple of 512 and head_dim at most 128
#: (the tiny preset's is 32); the tiny preset's own 256 never reaches it
COMPILE_RUNG_SEQ_LEN = 512


def compile_step_command(out: Path) -> list[str]:
    """One step of the tiny native model, compiled, on one rank (``qwen3-trn train``),
    at a shape that meets NKI flash attention's conditions (causal attention, the trn2
    default: no mask, which the kernel refuses)."""
    return [sys.executable, "-m", "qwen3_trn_helpers", "train", "--preset", "tiny",
            "--seq-len", str(COMPILE_RUNG_SEQ_LEN), "--attention", "causal",
            "--steps", "1", "--compile", "--nproc", "1", "--out", str(out), "--overwrite",
            "--no-progress"]  # fmt: skip


def count_neffs(folder: Path) -> int:
    """Compiled graphs (NEFF files) in TorchNeuron's cache folder."""
    return sum(1 for _ in folder.rglob("*.neff")) if folder.is_dir() else 0


def rung_compile() -> None:
    """The same compiled step twice, with a fresh NEFF cache: the second reads it."""
    import tempfile

    from ...device import as_device, detect_device_type
    from ...runs.child import run_child
    from ...training.compile import NEFF_CACHE_VAR, compile_backend

    device_type = detect_device_type()
    if not as_device(device_type).is_trn2:
        _skip(
            f"needs the neuron device (backend {compile_backend('neuron')!r}); on this "
            f"machine --compile uses {compile_backend(device_type)!r} "
            "(tests/core/training/test_compile.py checks it)"
        )
    out = Path(tempfile.mkdtemp(prefix="qwen3-trn-compile-"))
    env = {**os.environ, NEFF_CACHE_VAR: str(out / "neff-cache")}
    times, neffs = [], []
    for attempt in ("first", "second"):
        proc = run_child(compile_step_command(out / attempt), env=env, timeout=1700)
        print(f"--- {attempt}: exit status {proc.returncode}\n{proc.output[-9000:]}",
              file=sys.stderr)  # fmt: skip
        if not proc.ok:
            print(f"fail: {attempt} compiled step: {proc.error_line()[:200]}")
            sys.exit(1)
        times.append(proc.seconds)
        neffs.append(count_neffs(out / "neff-cache"))
    hit = neffs[1] == neffs[0] and neffs[0] > 0
    line = (
        f"first {times[0]:.1f} s ({neffs[0]} NEFFs compiled), second {times[1]:.1f} s "
        f"({'cache hit: no new NEFF' if hit else f'{neffs[1] - neffs[0]} new NEFFs'})"
    )
    print(("ok: " if hit else "fail: ") + line)
    sys.exit(0 if hit else 1)
