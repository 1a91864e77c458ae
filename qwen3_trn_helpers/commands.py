"""What the ``qwen3-trn`` commands do beyond parsing and printing (cli.py).

Each function takes parsed values and returns what the command line prints, so cli.py
holds the parsers and the words on the screen only, and a notebook or test can call
the same steps.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from .errors import RunFolderError
from .runs.folder import RunResult
from .training.spec import RunSpec


def train(spec: RunSpec, *, progress: bool, verbose: bool) -> RunResult:
    """``qwen3-trn train``: one run, launched or trained here, as ``run()`` does.

    A rank torchrun started with ``--neuron-cores`` notes its core first, which it
    claims as its process group starts (runs/neuron_cores.py); ``verbose`` shows
    torchtitan's log.
    """
    from .runs.neuron_cores import confine_rank_to_its_core
    from .runs.reporter import Reporter
    from .runs.run import run
    from .training.ranks import launched_by_torchrun

    if launched_by_torchrun() and spec.neuron_cores is not None:
        confine_rank_to_its_core(spec)  # claimed at init_process_group (class_share.py)
    if verbose:
        from torchtitan.tools.logging import init_logger

        init_logger()
    reporter = Reporter(progress=progress, verbose=verbose, echo_launch=True)
    return run(spec, reporter=reporter)


def save_train_plot(result: RunResult, spec: RunSpec, init: str) -> Path:
    """``loss.png`` in the run folder; a disk that cannot take it is one error line
    (the metrics, already complete, say how to plot them), never half a picture."""
    from .lessons.plots import save_loss_plot

    png = result.out / "loss.png"
    try:
        save_loss_plot(
            {f"{spec.variant} / {init}": result.metrics},
            png,
            title=f"Qwen3 {spec.variant}, {spec.preset or 'default preset'}",
        )
    except OSError as e:
        png.unlink(missing_ok=True)  # never a half-written picture
        raise RunFolderError(
            f"the run completed and metrics.jsonl holds every step, but {png} could not "
            f"be written ({e.strerror or e}); free disk space and plot it from the "
            "metrics (qwen3_trn_helpers.lessons.plots.save_loss_plot)"
        ) from None
    return png


def fork_needs_hub(spec: RunSpec) -> bool:
    """Does ``reproduce --stack torchtitan-neuron`` download (its pretrained weights)?"""
    from .device import resolve
    from .training.plan import plan_run

    return plan_run(spec.replace(init="pretrained"), device_type=resolve(spec.device)).needs_hub


def doctor_notes(on_trainium: bool) -> Iterator[str]:
    """``qwen3-trn doctor``'s paragraphs after the device report, in order, each as it
    is known (a bad class share fails after the paragraphs before it)."""
    from .cpu_peak import cpu_matmul_peak, cpu_training_dtype
    from .runs.neuron_cores import CLASS_SLICE_ENV, with_class_slice
    from .stack import torchtitan_stack
    from .without_triton import PTH_LINE, pth_path, triton_importable

    warning = torchtitan_stack().warning
    if warning:
        yield (f"\nwarning: {warning}")
    share = os.environ.get(CLASS_SLICE_ENV)
    if share:
        first = with_class_slice(RunSpec()).neuron_cores  # a bad share: one error line
        yield (
            f"\nyour share of this trn2: NeuronCores {share} ({CLASS_SLICE_ENV}); a one-rank "
            f"run takes core {first.partition('-')[0]}, an N-rank run the first N"
        )
    if not triton_importable():
        hook = pth_path()
        yield (
            f"\ntriton cannot be imported here (PyPI has Linux wheels only): qwen3-trn, run() and "
            "the notebooks train every variant without it. torchtitan's own entry point "
            f"(python -m torchtitan.train) needs the start-up hook {hook}: "
            + (
                "present"
                if hook.exists()
                else f"missing; scripts/setup.sh writes it ({PTH_LINE.strip()})"
            )
        )
    if not on_trainium:
        gflops = cpu_matmul_peak() / 1e9
        dtype = str(cpu_training_dtype()).removeprefix("torch.")
        yield (
            f"\nmeasured {dtype} matmul peak of this CPU: {gflops:,.0f} GFLOP/s (2048^3, 3 runs"
            + (")" if dtype == "bfloat16" else "; no oneDNN bf16 here, so CPU runs train float32)")
        )
        yield (
            "No Trainium here: the notebooks train the tiny presets on this machine and "
            "explain the trn2 cells; `qwen3-trn dry-run` builds the trn2 layouts on a CPU."
        )
