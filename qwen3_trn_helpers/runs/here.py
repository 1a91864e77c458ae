"""``run_here(plan)``: one run in this process, from its folder to its last metrics line.

What ``run()`` does for one CPU/GPU rank, and what every rank torchrun starts does. It
claims the run folder (runs/folder.py ``claim``), writes ``run.json``, trains in
a :func:`~..training.trainer.trainer_session`, shows progress, and records how the run
ended. Training itself (data, optimiser, LR schedule, checkpoints, metrics) is
torchtitan's.
"""

from __future__ import annotations

import signal
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from ..errors import RunFolderError, Terminated, forget_stops, stop_error, stop_signal
from ..training.metrics_file import read_metrics
from ..training.plan import Plan
from ..training.ranks import launched_by_torchrun, rank
from .folder import Claim, RunResult, claim
from .lifeline import agent_pid
from .lost_rank import say_received
from .manifest import write_manifest
from .reporter import Reporter


def run_here(plan: Plan, reporter: Reporter | None = None) -> RunResult:
    """Train a planned run (``plan_run``) in this process; its per-step metrics.

    Writes ``out/metrics.jsonl`` (a line per completed step, flushed at once) and
    ``out/run.json`` (the resolved settings and how the run ended). Raises a
    :class:`~qwen3_trn_helpers.errors.Qwen3TrnError` for anything the user can fix,
    before the run folder is touched; Ctrl-C stops after writing what finished.
    The first weights come from ``plan.init_dir`` (``runs.weights.with_init_weights``).
    """
    reporter = reporter or Reporter()
    init_dir = plan.init_dir

    # the folder named, held and settled (runs/folder.py): rank 0 writes it
    with claim(plan) as taken:
        if taken.settled.finished:
            return RunResult.from_folder(taken.out)  # a requeue or restart after the last step
        reporter = reporter if rank() == 0 else reporter.quiet()
        return _train_in_folder(taken, plan, reporter, launched_by_torchrun(), init_dir)


def _train_in_folder(
    taken: Claim, plan: Plan, reporter: Reporter, launched: bool, init_dir: Path | None
) -> RunResult:
    """:func:`run_here`, once the run folder is ours and settled: train, record."""
    from ..training.stopping import STOP_FILE, StopRequest
    from ..training.trainer import trainer_session

    spec, rank0, out = plan.spec, rank() == 0, taken.out
    resumed_from, reshard = taken.settled.resumed_from, taken.settled.reshard
    result = RunResult(out=out, spec=spec, plan=plan)
    desc = f"{plan.variant.name}/{Path(str(plan.init)).name}"
    step_done, close_bar = reporter.steps(spec.steps, desc, initial=resumed_from)

    # what a resume changed (--allow-change) and noted: run.json keeps it with the run
    resumes = taken.settled.resume.run_json() if taken.settled.resume else {}

    def manifest(status: str, **extra: Any) -> None:
        if rank0:
            write_manifest(
                out, status, plan, launched=launched, init_dir=init_dir,
                agent=agent_pid() if launched else None,
                **resumes, **extra,
            )  # fmt: skip

    started = time.perf_counter()
    error = None
    # a run that saves checkpoints saves one more on SIGTERM, or when asked through
    # OUT/save-and-stop, which rank 0 looks for (training/stopping.py)
    forget_stops()  # (a stop of an earlier run in this process is not this run's)
    stop = StopRequest(out / STOP_FILE if rank0 else None)
    try:  # from here on, however the run ends, the bar closes and run.json says how
        manifest("running")
        with (
            trainer_session(
                plan, out, verbose=reporter.verbose,
                skip_dataloader_state=reshard,
            ) as trainer,
            stop.on_sigterm() if spec.checkpoint_interval else nullcontext(),
        ):  # fmt: skip
            if trainer.metrics_processor.jsonl is not None:
                trainer.metrics_processor.jsonl.on_step = step_done
            trainer.stop_request = stop if spec.checkpoint_interval else None
            stop.nothing_to_save = trainer.nothing_trained  # (then SIGTERM stops at once)
            trainer.train()
            if trainer.stopped_at is not None and stop.clean:
                # asked to save and stop (a job's time limit is near): every rank leaves
                # cleanly, so torchrun restarts nothing; the job script requeues
                result.status = "stopped"
                if rank0:
                    stop.consume()
            elif trainer.stopped_at is not None:
                raise Terminated(
                    f"stopped by signal {stop.signal or 'on another rank'}: checkpoint of "
                    f"step {trainer.stopped_at} saved; --resume auto continues from it"
                )
    except KeyboardInterrupt as e:
        result.status = "terminated" if isinstance(e, Terminated) else "interrupted"
        if launched:  # (the launcher names the rank that got the signal: runs/lost_rank.py)
            say_received(stop_signal())
        raise
    except BaseException as e:
        stopped = stop_signal()  # a stop that surfaced as another error is still a stop
        if stopped is not None:
            result.status = "terminated" if stopped == signal.SIGTERM else "interrupted"
            if launched:
                say_received(stopped)
            raise stop_error(stopped) from None
        result.status, error = "failed", f"{type(e).__name__}: {e}"
        raise
    finally:
        result.wall_s = time.perf_counter() - started
        close_bar()
        if rank0 and (out / "metrics.jsonl").exists():
            result.metrics = read_metrics(out / "metrics.jsonl")
        try:
            manifest(
                result.status,
                steps_completed=len(result.metrics),
                resumed_from_step=resumed_from,
                wall_s=round(result.wall_s, 3),
                **({"error": error} if result.status == "failed" else {}),
            )
        except RunFolderError:
            # a full disk that failed the run fails this write too: the run's own error
            # (naming the file and the free space) is the one line to show
            if result.status == "completed":
                raise
    return result
