"""``run(...)``: the one way a run starts, from Python, the notebooks and the CLI.

    from qwen3_trn_helpers import run
    result = run("native", steps=10, init="random")
    result.losses, result.metrics_path

Keyword arguments are RunSpec fields (the same as ``qwen3-trn train``'s flags);
``run(spec)`` takes a whole RunSpec. A run reads spec -> plan -> execute: the spec is
planned once (every input checked, the memory fit included, before anything starts or
is written), then trains in this process, or, for several ranks, several nodes and on
trn2, through torchrun in child processes.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import fields
from typing import Any

from ..errors import ConfigError
from ..training.plan import Plan, available_memory_gib, memory_fit, plan_run
from ..training.spec import RunSpec
from .folder import RunResult
from .reporter import Reporter
from .weights import with_init_weights


def make_spec(variant: str | None = None, **params: Any) -> RunSpec:
    """A checked RunSpec, with a clear error for a misspelt or mistyped parameter."""
    names = {f.name for f in fields(RunSpec)}
    unknown = sorted(set(params) - names)
    if unknown:
        raise ConfigError(
            f"unknown run parameter {unknown[0]!r}; the parameters are: {', '.join(sorted(names))}"
        )
    # folders may come as pathlib.Path; the spec holds text (it is written to run.json)
    params = {k: os.fspath(v) if isinstance(v, os.PathLike) else v for k, v in params.items()}
    return RunSpec(variant=variant, **params).with_absolute_paths()


def run(
    variant: str | RunSpec | None = None,
    *,
    progress: bool = True,
    verbose: bool = False,
    label: str | None = None,
    on_step: Callable[[dict[str, Any]], None] | None = None,
    reporter: Reporter | None = None,
    **params: Any,
) -> RunResult:
    """Train and return a :class:`~.folder.RunResult` (losses, metrics, run folder).

    ``variant`` is a variant name with the spec's fields as keywords (``run("native",
    steps=10)``; None: the variant the preset implies, nki_moe for an MoE preset, else
    native), or a whole :class:`RunSpec`. ``progress``, ``verbose``, ``label`` and
    ``on_step`` say how the run shows itself (or a whole ``reporter``). One rank on a
    CPU or GPU trains in this process (runs/here.py); several ranks, several nodes, and
    any run on trn2 go through torchrun (runs/torchrun.py).
    """
    if isinstance(variant, RunSpec):
        if params:
            raise ConfigError(
                f"run(spec) takes no further run parameters ({', '.join(sorted(params))}); "
                "put them into the spec: spec.replace(...)"
            )
        spec = variant.with_absolute_paths()
    else:
        spec = make_spec(variant, **params)
    reporter = reporter or Reporter(progress, verbose, label, on_step)
    with _one_run_at_a_time():
        return execute(plan_run(spec), reporter)


#: held while a run() is in progress in this process; see _one_run_at_a_time
_RUNNING = threading.Lock()
_running_in: list[str] = []


@contextmanager
def _one_run_at_a_time() -> Iterator[None]:
    """A second ``run()`` while one is in progress in this process is refused.

    Why: a run owns process-wide state (torch.distributed's default process group, the
    device's memory statistics, signal handlers, torchtitan's logging); two threads
    training at once failed deep inside torch. Several runs at once are several
    processes (``qwen3-trn train`` in each, or ``nproc``/``nnodes``)."""
    if not _RUNNING.acquire(blocking=False):
        where = _running_in[0] if _running_in else "another thread"
        raise ConfigError(
            f"a run is already in progress in this process ({where}); one process trains "
            "one run at a time: wait for it to finish, or start the second run in its own "
            "process (qwen3-trn train ...)"
        )
    _running_in[:] = [f"thread {threading.current_thread().name!r}"]
    try:
        yield
    finally:
        _running_in.clear()
        _RUNNING.release()


def execute(plan: Plan, reporter: Reporter) -> RunResult:
    """Train a planned run here or through torchrun, the hub off unless it needs it.

    A CPU run whose estimate exceeds this machine's free memory is refused first, with
    the numbers: without this a full-size preset on a laptop dies minutes later in an
    allocation error, or takes the machine into swap. The process that starts a run asks
    it (and the hub) once; a launch's ranks do not ask again: by the time a rank asked,
    the ranks that started before it had taken their share of the very memory it counts.
    """
    from ..hub import hub_offline
    from ..training.ranks import launched_by_torchrun

    launcher = not launched_by_torchrun()  # (a launch's ranks: their launcher asked)
    if launcher:
        check_hub_answers(plan)
    check_compile_cache_first(plan)
    if launcher:  # this machine's free memory (a trn2 core's HBM: checked in planning)
        fit = memory_fit(plan, available_memory_gib())
        if plan.device.is_trn2 and fit.warning:
            print(f"warning: {fit.warning}", file=sys.stderr, flush=True)
        if fit.problem and not plan.spec.skip_memory_check:
            raise ConfigError(fit.problem)
    with hub_offline(not plan.needs_hub):
        # published weights: downloaded (or made) once, here; launched ranks find them
        # in the cache
        plan = with_init_weights(plan, reporter.progress)
        if not launches(plan):
            from .here import run_here

            return run_here(plan, reporter)
        from .torchrun import run_with_torchrun

        return run_with_torchrun(plan, reporter)


def check_compile_cache_first(plan: Plan) -> None:
    """The compile cache a run uses, checked before anything imports torch._dynamo:
    importing it makes inductor's cache folder (torch 2.14, torch/_dynamo/package.py), so
    a cache that is a file failed there with a bare FileExistsError, even uncompiled."""
    from ..training.compile import check_compile_cache, compile_cache_folder, use_package_caches

    for step in ("the user's", "the package's"):  # (importing torch._inductor makes it)
        if step == "the package's" and plan.spec.compile:
            use_package_caches(plan.device)
        cache = compile_cache_folder(plan.device)
        if cache is not None:
            check_compile_cache(*cache)


def warn_thin_slack(plan: Plan) -> None:
    """One ``warning:`` line on stderr when a trn2 plan leaves under 1 GiB per core."""
    warning = memory_fit(plan).warning
    if warning:
        print(f"warning: {warning}", file=sys.stderr, flush=True)


def launches(plan: Plan) -> bool:
    """Whether a run goes through torchrun rather than training in this process.

    Several ranks always do; on trn2 one rank does too, so that the Neuron runtime
    starts (and keeps its NeuronCores) in a child, never in a long-lived notebook
    kernel. A process torchrun started trains in place.
    """
    from ..training.ranks import launched_by_torchrun

    return not launched_by_torchrun() and (plan.world_size > 1 or plan.device.is_trn2)


def http_errors(session: object) -> tuple[type[BaseException], ...]:
    """What a failed request through the hub's session raises: httpx's ``HTTPError``
    (huggingface_hub 1.x) and the ``HTTPError`` of the session's own library
    (huggingface_hub 2.x's client is ``httpx2.Client``, whose errors are not httpx's)."""
    import httpx

    errors: list[type[BaseException]] = [httpx.HTTPError]
    library = sys.modules.get(type(session).__module__.partition(".")[0])
    own = getattr(library, "HTTPError", None)
    if isinstance(own, type) and issubclass(own, BaseException) and own not in errors:
        errors.append(own)
    return tuple(errors)


def check_hub_answers(plan: Plan, timeout_s: float = 10.0) -> None:
    """A run that streams its text from the hub asks the hub once, before anything is
    built: offline, or without network, the dataset library retried for 30 s and then
    failed deep inside as a bare ConnectionError."""
    if not plan.corpus_streams:
        return
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() not in ("", "0", "false"):
        raise ConfigError(  # now, not after a minute of retries inside the dataloader
            f"corpus {plan.corpus!r} streams from the Hugging Face hub, but offline mode is "
            "on (HF_HUB_OFFLINE=1); unset it, or train on --corpus embedded or a local "
            ".txt/.jsonl file or folder"
        )
    from huggingface_hub import constants, get_session

    session = get_session()
    try:
        session.head(constants.ENDPOINT, timeout=timeout_s, follow_redirects=True)
    except http_errors(session) as e:
        raise ConfigError(
            f"corpus {plan.corpus!r} streams from the Hugging Face hub, but "
            f"{constants.ENDPOINT} does not answer from this machine ({type(e).__name__}: "
            f"{e}); check the network (or HF_ENDPOINT / the proxy settings), or train on "
            "--corpus embedded or a local .txt/.jsonl file or folder"
        ) from None
