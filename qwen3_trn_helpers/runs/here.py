"""``run_here(plan)``: one run in this process, from its folder to its last metrics line.

What ``run()`` does for one CPU/GPU rank, and what every rank torchrun starts does. It
plans the run, settles the run folder (runs/folder.py), writes ``run.json``, trains in
a :func:`~..training.trainer.trainer_session`, shows progress, and records how the run
ended. Training itself (data, optimiser, LR schedule, checkpoints, metrics) is
torchtitan's.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from ..errors import ConfigError, Terminated, stop_signal
from ..training.metrics_file import read_metrics
from ..training.ranks import launched_by_torchrun, rank, world_size
from ..training.spec import Plan
from .folder import (
    RunResult,
    check_resume,
    new_out_dir,
    own_run_folder,
    prepare_out_dir,
    prepare_resume_dir,
    resumes_at_other_world,
    step_reporter,
    write_manifest,
)


def check_hub_reachable(plan: Plan) -> None:
    """A run that streams its text from the hub cannot start in offline mode: say so now,
    not after a minute of retries deep inside the dataloader."""
    from ..corpus import is_local

    offline = os.environ.get("HF_HUB_OFFLINE", "0").lower() not in ("", "0", "false")
    if offline and not is_local(plan.corpus) and not Path(plan.corpus).suffix:
        raise ConfigError(
            f"corpus {plan.corpus!r} streams from the Hugging Face hub, but offline mode is "
            "on (HF_HUB_OFFLINE=1); unset it, or train on --corpus embedded or a local "
            ".txt/.jsonl file or folder"
        )
    if not is_local(plan.corpus) and not Path(plan.corpus).suffix:
        _check_hub_answers(plan.corpus)


def _check_hub_answers(corpus: str, timeout_s: float = 10.0) -> None:
    """One request to the hub before anything is built: without network the dataset
    library retried for 30 s and then failed deep inside as a bare ConnectionError."""
    import httpx
    from huggingface_hub import constants, get_session

    try:
        get_session().head(constants.ENDPOINT, timeout=timeout_s, follow_redirects=True)
    except httpx.HTTPError as e:
        raise ConfigError(
            f"corpus {corpus!r} streams from the Hugging Face hub, but {constants.ENDPOINT} "
            f"does not answer from this machine ({type(e).__name__}: {e}); check the "
            "network (or HF_ENDPOINT / the proxy settings), or train on --corpus embedded or "
            "a local .txt/.jsonl file or folder"
        ) from None


def run_here(
    plan: Plan,
    *,
    progress: bool = True,
    verbose: bool = False,
    label: str | None = None,
    on_step: Callable[[dict[str, Any]], None] | None = None,
) -> RunResult:
    """Train a planned run (``plan_run``) in this process; its per-step metrics.

    Writes ``out/metrics.jsonl`` (a line per completed step, flushed at once) and
    ``out/run.json`` (the resolved settings and how the run ended). Raises a
    :class:`~qwen3_trn_helpers.errors.Qwen3TrnError` for anything the user can fix,
    before the run folder is touched; Ctrl-C stops after writing what finished.
    """
    spec = plan.spec
    check_hub_reachable(plan)

    rank0 = rank() == 0
    launched = launched_by_torchrun()
    # who writes the folder holds it: here, or (one node) the launching parent, or (several
    # nodes, one shared folder) the job's rank 0
    owner = rank0 and (not launched or spec.nnodes > 1)
    out = new_out_dir(spec.out) if rank0 else Path(spec.out or "runs/_nonzero_rank")
    if launched:  # stop with the launching command; hold a one-node folder while alive
        from .lifeline import bind_rank

        bind_rank(out, hold_folder=spec.nnodes == 1 and spec.out is not None)
    with own_run_folder(out) if owner else nullcontext():
        return _run_in_folder(out, plan, rank0, launched, progress, verbose, label, on_step)


def _run_in_folder(
    out: Path,
    plan: Plan,
    rank0: bool,
    launched: bool,
    progress: bool,
    verbose: bool,
    label: str | None,
    on_step: Callable[[dict[str, Any]], None] | None,
) -> RunResult:
    """:func:`run_here`, once the run folder is ours."""
    from ..training.trainer import trainer_session

    spec = plan.spec
    resumed_from = 0
    reshard = False
    if spec.resume:
        out, resumed_from = prepare_resume_dir(out)
        # before run.json says anything new; each rank hashes its share of the shards
        check_resume(out, resumed_from, plan, share=(rank(), world_size()))
        data_ranks = plan.world_size // plan.tp  # torchtitan's dp degree
        reshard = resumes_at_other_world(out, resumed_from, data_ranks, echo=rank0)
    elif rank0:
        out = prepare_out_dir(out, spec.overwrite)
    result = RunResult(out=out, spec=spec, plan=plan)

    def manifest(status: str, **extra: Any) -> None:
        if rank0:
            write_manifest(out, status, plan, launched=launched, **extra)

    manifest("running")
    desc = label or f"{spec.variant}/{Path(spec.init).name}"
    step_done, close_bar = step_reporter(
        spec.steps, desc, progress and rank0, on_step, initial=resumed_from
    )

    started = time.perf_counter()
    error = None
    try:
        with trainer_session(plan, out, verbose=verbose, skip_dataloader_state=reshard) as trainer:
            if trainer.metrics_processor.jsonl is not None:
                trainer.metrics_processor.jsonl.on_step = step_done
            trainer.train()
    except KeyboardInterrupt as e:
        result.status = "terminated" if isinstance(e, Terminated) else "interrupted"
        raise
    except BaseException as e:
        stopped = stop_signal()  # a stop that surfaced as another error is still a stop
        if stopped is not None:
            result.status = "terminated" if stopped == signal.SIGTERM else "interrupted"
            raise (Terminated if stopped == signal.SIGTERM else KeyboardInterrupt)() from None
        result.status, error = "failed", f"{type(e).__name__}: {e}"
        raise
    finally:
        result.wall_s = time.perf_counter() - started
        close_bar()
        if rank0 and (out / "metrics.jsonl").exists():
            result.metrics = read_metrics(out / "metrics.jsonl")
        manifest(
            result.status,
            steps_completed=len(result.metrics),
            resumed_from_step=resumed_from,
            wall_s=round(result.wall_s, 3),
            **({"error": error} if result.status == "failed" else {}),
        )
    return result
