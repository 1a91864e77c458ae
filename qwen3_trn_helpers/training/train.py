"""``train(spec)``: one run in this process, from its folder to its last metrics line.

What the notebooks call (through ``run()``), and what every rank runs under torchrun.
It plans the run, prepares the run folder, writes ``run.json``, builds the trainer
(training/trainer.py), shows progress, and records how the run ended. Training itself
(data, optimiser, LR schedule, checkpoints, metrics) is torchtitan's.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, RunFolderError, Terminated
from .metrics_file import read_metrics
from .rendezvous import launched_by_torchrun, rank
from .spec import Plan, RunSpec, plan_run

#: what a run writes into its folder (a new run with --overwrite removes them all)
RUN_FILES = ("metrics.jsonl", "run.json", "loss.png", "launch.log")
RUN_FOLDERS = ("checkpoint", "tb")


@dataclass
class RunResult:
    out: Path
    spec: RunSpec
    metrics: list[dict[str, Any]] = field(default_factory=list)
    status: str = "completed"
    wall_s: float = 0.0
    plan: Plan | None = None
    #: (host, pid) of the torchrun agent that started rank 0 (None: not launched)
    agent: tuple[str, int] | None = None
    #: whether this process writes the run's own files (loss.png); on several nodes,
    #: only the one whose torchrun started rank 0
    writer: bool = True

    @property
    def metrics_path(self) -> Path:
        return self.out / "metrics.jsonl"

    @property
    def losses(self) -> list[float]:
        return [m["loss"] for m in self.metrics]

    @classmethod
    def from_folder(cls, out: str | Path) -> RunResult:
        """A finished run read back from its folder (run.json and metrics.jsonl)."""
        out = Path(out)
        info = json.loads((out / "run.json").read_text())
        metrics = read_metrics(out / "metrics.jsonl") if (out / "metrics.jsonl").exists() else []
        return cls(
            out=out,
            spec=RunSpec(**info["spec"]),
            metrics=metrics,
            status=info["status"],
            wall_s=info.get("wall_s", 0.0),
            agent=tuple(info["agent"]) if info.get("agent") else None,
        )


def latest_checkpoint_step(out: str | Path) -> int:
    """The newest *complete* checkpoint under ``out/checkpoint`` (0 if none).

    Complete as torchtitan's loader judges it (``CheckpointManager._find_load_step``):
    a ``step-N`` folder holding DCP's ``.metadata`` or a safetensors index. A folder
    left half-written by an interrupted save does not count.
    """
    steps = []
    for folder in (Path(out) / "checkpoint").glob("step-*"):
        match = re.fullmatch(r"step-(\d+)", folder.name)
        complete = (folder / ".metadata").is_file() or (
            folder / "model.safetensors.index.json"
        ).is_file()
        if match and complete:
            steps.append(int(match.group(1)))
    return max(steps, default=0)


def prepare_resume_dir(out: str | Path | None) -> tuple[Path, int]:
    """The run folder to resume and the step of its newest complete checkpoint.

    Steps after that checkpoint were trained by the interrupted run and will be trained
    again; their metrics lines are dropped when the resumed run logs its first step
    (training/metrics.py), so none appears twice.
    """
    if out is None:
        raise ConfigError("resume needs --out: the folder of the run to continue")
    out = Path(out)
    step = latest_checkpoint_step(out)
    if step == 0:
        raise RunFolderError(
            f"nothing to resume in {out}: it has no complete checkpoint/step-N folder; run "
            "with --checkpoint-interval N to save checkpoints"
        )
    return out, step


def prepare_out_dir(out: str | Path | None, overwrite: bool = False) -> Path:
    """A folder for this run's files that holds no other run's metrics or checkpoints.

    torchtitan resumes from the newest checkpoint in its dump folder, so ``overwrite``
    removes an earlier run's checkpoints too: the new run starts fresh.
    """
    if out is None:
        base = Path("runs") / time.strftime("%Y%m%d-%H%M%S")
        out, n = base, 1
        while Path(out).exists():
            n += 1
            out = Path(f"{base}-{n}")
    out = Path(out)
    previous = [name for name in RUN_FILES[:2] + RUN_FOLDERS if (out / name).exists()]
    if previous:
        if not overwrite:
            raise RunFolderError(
                f"{out} already holds a run ({', '.join(previous)}); pass a new --out "
                "folder, or --overwrite to replace it"
            )
        for name in RUN_FILES:
            (out / name).unlink(missing_ok=True)
        for name in RUN_FOLDERS:
            shutil.rmtree(out / name, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    return out


def checkpoint_data_ranks(step_dir: Path) -> int | None:
    """How many data-parallel ranks wrote a checkpoint's dataloader state (None: unknown).

    Read from the checkpoint's own DCP metadata, the same on every rank, so every
    rank of a resumed run takes the same decision.
    """
    from torch.distributed.checkpoint import FileSystemReader

    try:
        keys = FileSystemReader(str(step_dir)).read_metadata().state_dict_metadata
    except Exception:  # not a DCP checkpoint (an HF export): nothing to compare
        return None
    ranks = [k for k in keys if k.startswith("dataloader.dp_rank_")]
    return len(ranks) or None


def resumes_at_other_world(out: Path, step: int, data_ranks: int, *, echo: bool) -> bool:
    """Whether the checkpoint at ``step`` had another data-parallel size (nodes lost or
    added, another --nproc).

    Model and optimizer state reshard on load (torch's distributed checkpoint); the
    data position cannot in torchtitan 0.3.0 (it asserts the size is unchanged), so
    the resumed run says so once and starts its data from the beginning.
    """
    saved = checkpoint_data_ranks(out / "checkpoint" / f"step-{step}")
    if saved is None or saved == data_ranks:
        return False
    if echo:
        print(
            f"note: the checkpoint at step {step} was written by {saved} data-parallel "
            f"ranks and this run has {data_ranks}: model and optimizer state are "
            "resharded, the data order restarts (torchtitan 0.3.0 cannot reshard its "
            "dataloader state)",
            file=sys.stderr,
            flush=True,
        )
    return True


@contextmanager
def quiet_torchtitan(verbose: bool) -> Iterator[None]:
    """Hide torchtitan's INFO/WARNING log and known CPU-only noise unless ``verbose``.

    torchtitan logs through the root logger; on a CPU it warns about things that are
    expected there (no lspci, no peak-FLOPs table entry, no CUDA graphs).
    """
    if verbose:
        yield
        return
    import logging
    import warnings

    # the root logger (torchtitan's), and DTensor's advice on flattening TP x FSDP
    # gradient-norm reductions, which torchtitan's clipping triggers at every step
    loggers = [logging.getLogger(), logging.getLogger("torch.distributed.tensor._redistribute")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            for message in (
                "DTensor random operators",
                r"DTensor manual_seed\(\) may not have complete support on cpu",
                "'set_vital' is deprecated",
                "In CPU autocast, but the target dtype is not supported",
                # torch's own FSDP2 still calls these; nothing for a user to change
                r"`torch.distributed.(reduce_scatter_tensor|all_gather_into_tensor)` is "
                "deprecated",
            ):
                warnings.filterwarnings("ignore", message=message)
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def release_freed_memory() -> None:
    """Give the memory a finished run freed back to the operating system (glibc only).

    A run frees its model, gradients and optimizer state, but glibc keeps freed heap
    pages mapped for reuse, fragmented across threads' arenas: a notebook kernel or
    test worker that trains again and again grows by hundreds of MiB a run (measured:
    4.1 GiB after tests/test_variants.py, 1.0 GiB with a trim after each test) and can
    be killed for memory it does not use. ``malloc_trim`` returns those pages.
    """
    import ctypes
    import gc
    import sys

    if not sys.platform.startswith("linux"):
        return
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc (musl): nothing to trim this way
        pass


def step_reporter(
    steps: int,
    desc: str,
    progress: bool,
    on_step: Callable[[dict[str, Any]], None] | None,
    initial: int = 0,
) -> tuple[Callable[[dict[str, Any]], None], Callable[[], None]]:
    """(called with each step's record, called at the end): a tqdm bar and ``on_step``."""
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=steps, initial=initial, desc=desc, unit="step")

    def step_done(record: dict[str, Any]) -> None:
        if bar is not None:
            bar.set_postfix(loss=f"{record['loss']:.3f}")
            bar.update(1)
        if on_step is not None:
            on_step(record)

    return step_done, (bar.close if bar is not None else lambda: None)


def train(
    spec: RunSpec,
    *,
    progress: bool = True,
    verbose: bool = False,
    label: str | None = None,
    on_step: Callable[[dict[str, Any]], None] | None = None,
) -> RunResult:
    """Train one planned run in this process and return its per-step metrics.

    Writes ``out/metrics.jsonl`` (a line per completed step, flushed at once) and
    ``out/run.json`` (the resolved settings and how the run ended). Raises a
    :class:`~qwen3_trn_helpers.errors.Qwen3TrnError` for anything the user can fix,
    before the run folder is touched; Ctrl-C stops after writing what finished.
    """
    plan = plan_run(spec)  # every input is checked before anything is written
    from .trainer import build_trainer

    rank0 = rank() == 0
    launched = launched_by_torchrun()
    resumed_from = 0
    reshard = False
    if spec.resume:
        out, resumed_from = prepare_resume_dir(spec.out)
        data_ranks = plan.world_size // plan.tp  # torchtitan's dp degree
        reshard = resumes_at_other_world(out, resumed_from, data_ranks, echo=rank0)
    elif not rank0:
        out = Path(spec.out or "runs/_nonzero_rank")
    else:
        out = prepare_out_dir(spec.out, spec.overwrite)
    result = RunResult(out=out, spec=spec, plan=plan)

    def write_manifest(status: str, **extra: Any) -> None:
        if rank0:
            info = {
                "status": status,
                "spec": asdict(spec),
                "resolved": plan.summary(),
                "shape": asdict(plan.shape),
                "init_dir": str(plan.init_dir) if plan.init_dir else None,
                "layout_reason": plan.layout_reason,
                # the torchrun agent that started this rank: its node writes loss.png
                "agent": [socket.gethostname(), os.getppid()] if launched else None,
                **extra,
            }
            (out / "run.json").write_text(json.dumps(info, indent=2))

    write_manifest("running")
    desc = label or f"{spec.variant}/{Path(spec.init).name}"
    step_done, close_bar = step_reporter(
        spec.steps, desc, progress and rank0, on_step, initial=resumed_from
    )

    started = time.perf_counter()
    try:
        with quiet_torchtitan(verbose):
            trainer = build_trainer(plan, out, skip_dataloader_state=reshard)
            try:
                if trainer.metrics_processor.jsonl is not None:
                    trainer.metrics_processor.jsonl.on_step = step_done
                trainer.train()
            finally:
                trainer.close()
                del trainer
                release_freed_memory()
    except KeyboardInterrupt as e:
        result.status = "terminated" if isinstance(e, Terminated) else "interrupted"
        raise
    except BaseException:
        result.status = "failed"
        raise
    finally:
        result.wall_s = time.perf_counter() - started
        close_bar()
        if rank0 and (out / "metrics.jsonl").exists():
            result.metrics = read_metrics(out / "metrics.jsonl")
        write_manifest(
            result.status,
            steps_completed=len(result.metrics),
            resumed_from_step=resumed_from,
            wall_s=round(result.wall_s, 3),
        )
    return result
