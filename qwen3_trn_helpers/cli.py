"""``qwen3-trn``: the command line the README, CI and torchrun use.

The ``train`` flags are generated from :class:`~.training.spec.RunSpec`'s fields, so a
run parameter, its default and its help are written once. Mistakes end in one
``error: ...`` line and a non-zero exit; ``--debug`` (before or after the command) shows
the traceback instead. ``--help`` and argument errors import nothing heavy.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from contextlib import ExitStack
from typing import Any

from .errors import Interrupted, Qwen3TrnError, Terminated, cli_face, terminate_on_sigterm
from .hub import hub_offline
from .ops.cli import (
    OPS_COMMANDS,
    add_data_parser,
    add_dry_run_parser,
    add_job_flags,
    add_k8s_parser,
    add_plan_parser,
    add_slurm_parser,
    add_smoke_parser,
    add_wheelhouse_parser,
)
from .ops.watch import add_watch_parser, cmd_watch
from .runs.arguments import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    _number,
    _Parser,
    add_spec_arguments,
    spec_from_args,
)

#: reproduce takes these run parameters; init is what it varies
REPRODUCE_FIELDS = (
    "variant", "preset", "steps", "seq_len", "corpus", "lr", "seed", "device", "nproc",
    "attention", "out", "overwrite",
)  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    """``qwen3-trn``'s parser: one ``add_*_parser`` function per command, in help order."""
    parser = _Parser(prog="qwen3-trn", description=__doc__.splitlines()[0])
    debug = argparse.ArgumentParser(add_help=False)
    debug.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                       help="show tracebacks")  # fmt: skip
    parser.add_argument("--debug", action="store_true", default=False, help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    quiet = argparse.ArgumentParser(add_help=False)
    quiet.add_argument("--no-progress", action="store_true", help="no progress bar")

    add_train_parser(sub, debug, quiet)
    add_reproduce_parser(sub, debug, quiet)
    add_parity_parser(sub, debug)
    add_dry_run_parser(sub, debug)
    add_plan_parser(sub, debug)
    add_smoke_parser(sub, debug)
    slurm = add_slurm_parser(sub, debug)
    k8s = add_k8s_parser(sub, debug)
    add_data_parser(sub, debug, quiet)
    add_watch_parser(sub, debug)
    add_job_flags(slurm, k8s)
    add_doctor_parser(sub, debug)
    add_assets_parser(sub, debug)
    add_wheelhouse_parser(sub, debug)
    return parser


def add_train_parser(
    sub: Any, debug: argparse.ArgumentParser, quiet: argparse.ArgumentParser
) -> None:
    """``qwen3-trn train``: every RunSpec field as a flag."""
    train = sub.add_parser(
        "train", parents=[debug, quiet], help="train N steps; writes metrics.jsonl and loss.png"
    )
    add_spec_arguments(train)
    train.add_argument("--verbose", action="store_true", help="show torchtitan's log")


def add_reproduce_parser(
    sub: Any, debug: argparse.ArgumentParser, quiet: argparse.ArgumentParser
) -> None:
    """``qwen3-trn reproduce``: AWS's 10-step experiment."""
    repro = sub.add_parser(
        "reproduce",
        parents=[debug, quiet],
        help="10 steps from published weights and from random init, vs AWS's numbers",
    )
    add_spec_arguments(repro, REPRODUCE_FIELDS)
    repro.add_argument(
        "--stack",
        choices=("qwen3-trn", "torchtitan-neuron"),
        default="qwen3-trn",
        help="torchtitan-neuron: run AWS's own Qwen3 configuration from its fork "
        "(aws-neuron/torchtitan-neuron, in the Neuron venv) for the same 10 steps, weights "
        "and data, and show both stacks' step-1 losses",
    )
    repro.add_argument(
        "--brief",
        action="store_true",
        help="three lines instead of the tables: the two step-1 losses, the gap against "
        "AWS's, where the figure and metrics are (scripts/setup.sh's main job)",
    )


def add_parity_parser(sub: Any, debug: argparse.ArgumentParser) -> None:
    """``qwen3-trn parity``: one checkpoint's logits three ways."""
    parity = sub.add_parser(
        "parity",
        parents=[debug],
        help="fp32 logits of one HF Qwen3 folder: transformers vs native vs transformers_v5",
    )
    parity.add_argument("--init", required=True, help="a Hugging Face Qwen3 folder")
    parity.add_argument(
        "--seq-len", type=lambda t: _number(int, 1, t), default=64, help="tokens (default 64)"
    )
    parity.add_argument(
        "--tolerance", type=lambda t: _number(float, 0, t), default=1e-4, help="max |diff|"
    )


def add_doctor_parser(sub: Any, debug: argparse.ArgumentParser) -> None:
    """``qwen3-trn doctor``: what this machine offers."""
    sub.add_parser("doctor", parents=[debug], help="what this machine offers for training")


def add_assets_parser(sub: Any, debug: argparse.ArgumentParser) -> None:
    """``qwen3-trn assets``: the offline tokenizer, corpus and checkpoints."""
    assets = sub.add_parser(
        "assets", parents=[debug], help="build and verify the offline tokenizer and corpus"
    )
    assets.add_argument(
        "--published",
        action="store_true",
        help="also pretrain the local 'published' tiny checkpoints (instructors: before class)",
    )
    assets.add_argument(
        "--download",
        metavar="PRESET",
        action="append",
        help="also download a preset's published weights from the hub (trn2: 4b, 30b-a3b)",
    )


def _cmd_train(args: argparse.Namespace) -> int:
    from .commands import save_train_plot, train
    from .training.ranks import rank

    spec = spec_from_args(args)
    result = train(spec, progress=not args.no_progress, verbose=args.verbose)
    if rank() != 0:
        return 0
    if not result.metrics:  # a node of several without the shared folder rank 0 wrote
        print(
            f"this node's ranks finished; the metrics are in rank 0's node's {result.out} "
            "(this node's folder of that name holds none: it is not shared with rank 0's)"
        )
        return 0
    first, last = result.losses[0], result.losses[-1]
    print(
        f"steps: {len(result.metrics)}  loss: {first:.3f} -> {last:.3f}  wall: {result.wall_s:.1f}s"
    )
    print(f"metrics: {result.metrics_path}")
    if result.status == "stopped":  # asked through OUT/save-and-stop (training/stopping.py)
        print(
            f"stopped: asked to save and stop; checkpoint of step {result.metrics[-1]['step']} "
            "saved, --resume auto continues from it"
        )
    if result.writer:  # on several nodes sharing --out: only rank 0's node
        print(f"plot:    {save_train_plot(result, spec, args.init)}")
    return 0


def _cmd_reproduce(args: argparse.Namespace) -> int:
    from .lessons.reproduction import reproduce
    from .tables import Table

    spec = spec_from_args(args)
    # (each of reproduce's runs turns the hub off itself when it does not need it)
    if args.stack == "torchtitan-neuron":
        from .commands import fork_needs_hub

        args.scope.enter_context(hub_offline(not fork_needs_hub(spec)))
        from .lessons.aws_stack import reproduce_on_fork

        result = reproduce_on_fork(spec)
        print(Table(result["rows"]))
        print(f"\nAWS's fork: --config {result['config']} in {result['python']}")
        print(f"stacks:  {result['stacks_json']}")
        return 0
    rep = reproduce(spec, progress=not args.no_progress)
    if args.brief:
        print("\n".join(rep.brief_lines()))
        return 0
    print(Table(rep.step_rows()))
    print()
    print(Table(rep.summary_rows()))
    print(f"\n{rep.device_type}, {rep.nproc} rank(s), wall {rep.wall_s:.1f}s")
    print(f"figure:  {rep.figure_path}")
    print(f"summary: {rep.out / 'summary.json'}")
    return 0


def _cmd_parity(args: argparse.Namespace) -> int:
    args.scope.enter_context(hub_offline())
    from .lessons.logits_parity import parity

    report = parity(os.path.abspath(os.path.expanduser(args.init)), seq_len=args.seq_len)
    print(report)
    ok = report.worst() <= args.tolerance
    print(f"{'PASS' if ok else 'FAIL'}: worst {report.worst():.3e} vs tolerance {args.tolerance:g}")
    return 0 if ok else EXIT_FAILED


def _cmd_doctor(args: argparse.Namespace) -> int:
    from .commands import doctor_notes
    from .device import device_report

    report = device_report()
    print(report)
    for note in doctor_notes(report.on_trainium):
        print(note)
    return 0


def _cmd_assets(args: argparse.Namespace) -> int:
    from .assets import ensure_tokenizer
    from .data.corpus import embedded_corpus_path, read_documents

    tok = ensure_tokenizer()
    corpus = embedded_corpus_path()
    print(f"tokenizer: {tok}")
    print(f"corpus:    {corpus} ({len(read_documents(corpus))} documents)")
    for name in args.download or []:
        from .model.presets import get_preset
        from .runs.weights import download_checkpoint

        preset = get_preset(name)
        if preset.hub_id is None:
            print(f"{name}: no published weights on the hub (use --published)")
            continue
        print(f"downloaded: {download_checkpoint(preset.hub_id)}")
    if args.published:
        args.scope.enter_context(hub_offline())
        from .model.presets import PRESETS
        from .runs.weights import ensure_local_published

        for name in ("tiny", "tiny_moe"):
            print(f"published: {ensure_local_published(PRESETS[name])}")
    return 0


COMMANDS = {
    "train": _cmd_train,
    "reproduce": _cmd_reproduce,
    "parity": _cmd_parity,
    "doctor": _cmd_doctor,
    "assets": _cmd_assets,
    **OPS_COMMANDS,
    "watch": cmd_watch,
}


def main(argv: Sequence[str] | None = None) -> int:
    with cli_face():  # an error names --flags here; in Python, the arguments (errors.py)
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    for stream in (sys.stdout, sys.stderr):
        # a terminal that cannot show a character (PYTHONIOENCODING=ascii, a C locale)
        # gets an escape for it, never a crash after the run completed
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    skip_collection_at_exit()
    args = build_parser().parse_args(argv)
    try:
        # SIGTERM ends a run as Ctrl-C does, children too; args.scope holds what a command
        # sets for its own duration only (offline mode for the hub)
        with terminate_on_sigterm(), ExitStack() as args.scope:
            return COMMANDS[args.command](args)
    except Qwen3TrnError as e:
        if args.debug:
            raise
        print(f"error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt as e:
        what = "terminated" if isinstance(e, Terminated) else "interrupted"
        # (a launch names what the run folder holds: runs/torchrun.py finalise_after_stop)
        held = e.held if isinstance(e, Interrupted) else None
        held = held or "every completed step is in metrics.jsonl"
        print(f"{what}: {held}", file=sys.stderr)
        if str(e).startswith("stopped by signal"):  # a checkpoint saved on SIGTERM
            print(f"{what}: {e}", file=sys.stderr)
        return EXIT_TERMINATED if isinstance(e, Terminated) else EXIT_INTERRUPTED
    except (SystemExit, GeneratorExit):
        raise
    except BaseException as e:  # a bug or an environment problem we did not foresee
        # (BaseException: torch's CheckpointException is one, and must not escape as a
        # traceback either)
        if args.debug:
            raise
        from .errors import disk_full

        full = disk_full(e)
        if full is not None:  # (a library's error around it: torch's checkpoint writer)
            from .training.metrics_file import free_space

            what = (
                f"writing {full} failed ({free_space(os.path.dirname(full) or '.')} free there)"
                if full
                else "No space left on device"
            )
            print(
                f"error: the disk is full: {what}; free some space, then run the same command "
                "again (what finished is kept)",
                file=sys.stderr,
            )
            return EXIT_FAILED
        # one line, whatever the library's message holds (the traceback: --debug)
        first = next((line for line in str(e).splitlines() if line.strip()), "")
        print(
            f"error: unexpected {type(e).__name__}: {first} (rerun with --debug for the traceback)",
            file=sys.stderr,
        )
        return EXIT_FAILED


def skip_collection_at_exit() -> None:
    """In a process that is the command (``qwen3-trn``, ``python -m qwen3_trn_helpers``),
    not a test or notebook calling :func:`main`: leave the half-million objects torch and
    transformers leave behind to the OS at exit. The interpreter's shutdown otherwise
    runs full garbage collections over them: 5.4-5.7 s of setup's main job went there
    after its last line (2-core AMD EPYC, load 8), 0.9-1.2 s with this. ``gc.freeze`` only
    exempts them from those collections; atexit handlers still run, and this one, made
    first, runs last."""
    import atexit
    import gc
    from pathlib import Path

    if Path(sys.argv[0]).name in ("qwen3-trn", "__main__.py"):
        atexit.register(gc.freeze)


if __name__ == "__main__":
    sys.exit(main())
