"""``qwen3-trn``: the command line the README, CI and torchrun use.

Mistakes end in one ``error: ...`` line and a non-zero exit; ``--debug`` shows the
traceback instead.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from .errors import Qwen3TrnError

EXIT_USAGE = 2
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not argparse's usage dump
        self.exit(EXIT_USAGE, f"error: {message} (see '{self.prog} --help')\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    from .device import DEVICE_TYPES
    from .train import INITS
    from .variants import PRESETS, VARIANTS

    parser = _Parser(prog="qwen3-trn", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    train = sub.add_parser("train", help="train N steps; writes metrics.jsonl and loss.png")
    train.add_argument("--variant", default="native", choices=VARIANTS)
    train.add_argument(
        "--preset",
        default=None,
        choices=list(PRESETS),
        help="model size (default: tiny/tiny_moe off Trainium, 4b/30b-a3b on trn2)",
    )
    train.add_argument("--steps", type=_positive_int, default=10)
    train.add_argument("--local-batch-size", type=_positive_int, default=1)
    train.add_argument(
        "--seq-len",
        type=_positive_int,
        default=None,
        help="tokens per sample (default: the preset's)",
    )
    train.add_argument(
        "--init",
        default="random",
        help=f"{' | '.join(INITS)} | DIR (a Hugging Face Qwen3 folder)",
    )
    train.add_argument("--out", default=None, help="run folder (default: runs/<time>)")
    train.add_argument("--overwrite", action="store_true", help="replace a previous run in --out")
    train.add_argument(
        "--corpus",
        default="embedded",
        help="'embedded', 'c4' (hub, trn2), or a .txt/.jsonl file or folder",
    )
    train.add_argument(
        "--tokenizer",
        default=None,
        help="folder with tokenizer.json (default: offline Qwen3 tokenizer)",
    )
    train.add_argument("--lr", type=_positive_float, default=8e-4)
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--device", default="auto", choices=DEVICE_TYPES)
    train.add_argument(
        "--tensorboard",
        action="store_true",
        help="also log to TensorBoard (torchtitan's metrics option)",
    )
    train.add_argument(
        "--moe-impl",
        default="blockwise",
        choices=["blockwise", "grouped_mm"],
        help="nki_moe experts: blockwise (NKI algorithm) or torchtitan's grouped_mm",
    )
    train.add_argument(
        "--nproc",
        type=_positive_int,
        default=1,
        help="ranks to launch through torchrun (trn2: 64, one per logical NeuronCore)",
    )
    train.add_argument(
        "--checkpoint-interval",
        type=int,
        default=0,
        help="save a torchtitan checkpoint every N steps (for --resume)",
    )
    train.add_argument(
        "--resume", action="store_true", help="continue the run in --out from its latest checkpoint"
    )
    train.add_argument("--no-progress", action="store_true")
    train.add_argument("--verbose", action="store_true", help="show torchtitan's log")

    repro = sub.add_parser(
        "reproduce", help="10 steps from published weights and from random, vs AWS's numbers"
    )
    repro.add_argument("--variant", default="native", choices=VARIANTS)
    repro.add_argument("--steps", type=_positive_int, default=10)
    repro.add_argument("--out", default=None, help="folder (default: runs/<time>)")
    repro.add_argument("--overwrite", action="store_true")
    repro.add_argument("--device", default="auto", choices=DEVICE_TYPES)
    repro.add_argument(
        "--nproc",
        type=_positive_int,
        default=None,
        help="ranks per run (default: 64 on trn2, 1 elsewhere)",
    )
    repro.add_argument("--no-progress", action="store_true")

    parity = sub.add_parser(
        "parity", help="compare fp32 logits of one HF Qwen3 folder: transformers, native, v5"
    )
    parity.add_argument("--init", required=True, help="a Hugging Face Qwen3 folder")
    parity.add_argument("--seq-len", type=_positive_int, default=64)
    parity.add_argument("--tolerance", type=_positive_float, default=1e-4)

    sub.add_parser("doctor", help="print what this machine offers for training")
    sub.add_parser("assets", help="build and verify the offline tokenizer and corpus")
    return parser


def _launch_train(args: argparse.Namespace) -> int:
    """``train --nproc N``: re-run this command on N ranks through torchrun."""
    import subprocess

    from .launch import shell_command, torchrun_command

    argv = args.argv
    i = argv.index("train")
    rest = [a for a in argv[i + 1 :]]
    j = next(k for k, a in enumerate(rest) if a == "--nproc" or a.startswith("--nproc="))
    del rest[j : j + (1 if "=" in rest[j] else 2)]
    cmd = torchrun_command(args.nproc, rest)
    print(f"launching: {shell_command(cmd)}", flush=True)
    return subprocess.call(cmd)


def _cmd_train(args: argparse.Namespace) -> int:
    from .plots import save_loss_plot
    from .train import is_rank0, run

    if args.nproc > 1 and "LOCAL_RANK" not in os.environ:
        if args.out is None:
            print(
                "error: --nproc needs --out (every rank must write to one folder)", file=sys.stderr
            )
            return EXIT_USAGE
        return _launch_train(args)
    if args.verbose:
        from torchtitan.tools.logging import init_logger

        init_logger()
    result = run(
        args.variant,
        preset=args.preset,
        steps=args.steps,
        local_batch_size=args.local_batch_size,
        seq_len=args.seq_len,
        init=args.init,
        out=args.out,
        overwrite=args.overwrite,
        corpus=args.corpus,
        tokenizer=args.tokenizer,
        lr=args.lr,
        seed=args.seed,
        device=args.device,
        tensorboard=args.tensorboard,
        moe_impl=args.moe_impl,
        checkpoint_interval=args.checkpoint_interval,
        resume=args.resume,
        progress=not args.no_progress,
        verbose=args.verbose,
    )
    if not is_rank0():
        return 0
    png = save_loss_plot(
        {f"{args.variant} / {args.init}": result.metrics},
        result.out / "loss.png",
        title=f"Qwen3 {args.variant}, {result.flavor}",
    )
    first, last = result.losses[0], result.losses[-1]
    print(
        f"steps: {len(result.metrics)}  loss: {first:.3f} -> {last:.3f}  wall: {result.wall_s:.1f}s"
    )
    print(f"metrics: {result.metrics_path}")
    print(f"plot:    {png}")
    return 0


def _cmd_doctor(args: argparse.Namespace) -> int:
    from .device import device_report

    report = device_report()
    print(report)
    if not report.on_trainium:
        print(
            "\nNo Trainium here: notebooks run the tiny CPU preset; the trn2 cells "
            "explain what they would do and skip."
        )
    return 0


def _cmd_assets(args: argparse.Namespace) -> int:
    from .assets import ensure_tokenizer
    from .corpus import embedded_corpus_path, read_documents

    tok = ensure_tokenizer()
    corpus = embedded_corpus_path()
    print(f"tokenizer: {tok}")
    print(f"corpus:    {corpus} ({len(read_documents(corpus))} documents)")
    return 0


def _cmd_reproduce(args: argparse.Namespace) -> int:
    from .reproduce import reproduce
    from .tables import Table

    rep = reproduce(
        args.variant,
        steps=args.steps,
        out=args.out,
        device=args.device,
        nproc=args.nproc,
        overwrite=args.overwrite,
        progress=not args.no_progress,
    )
    print(Table(rep.step_rows()))
    print()
    print(Table(rep.summary_rows()))
    print(f"\n{rep.device_type}, {rep.nproc} rank(s), wall {rep.wall_s:.1f}s")
    print(f"figure:  {rep.figure_path}")
    print(f"summary: {rep.out / 'summary.json'}")
    return 0


def _cmd_parity(args: argparse.Namespace) -> int:
    from .parity import parity

    report = parity(args.init, seq_len=args.seq_len)
    print(report)
    ok = report.worst() <= args.tolerance
    print(f"{'PASS' if ok else 'FAIL'}: worst {report.worst():.3e} vs tolerance {args.tolerance:g}")
    return 0 if ok else EXIT_FAILED


COMMANDS = {
    "train": _cmd_train,
    "reproduce": _cmd_reproduce,
    "parity": _cmd_parity,
    "doctor": _cmd_doctor,
    "assets": _cmd_assets,
}


def _wants_hub_weights(args: argparse.Namespace) -> bool:
    """Published weights from the hub: a hub preset, or any pretrained run on trn2."""
    if args.command == "reproduce":
        from .device import neuron_available

        return neuron_available()
    if args.command != "train" or args.init != "pretrained":
        return False
    from .variants import PRESETS

    if args.preset is not None:
        return PRESETS[args.preset].hub_id is not None
    from .device import neuron_available

    return neuron_available()


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    from .corpus import HUB_DATASETS

    if getattr(args, "corpus", None) not in HUB_DATASETS and not _wants_hub_weights(args):
        # Offline unless the user asked for something that lives on the hub; without
        # this a missing local file turns into ~50 s of hub retries.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        return COMMANDS[args.command](args)
    except Qwen3TrnError as e:
        if args.debug:
            raise
        print(f"error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("interrupted: every completed step is in metrics.jsonl", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as e:  # a bug or an environment problem we did not foresee
        if args.debug:
            raise
        print(
            f"error: unexpected {type(e).__name__}: {e} (rerun with --debug for the traceback)",
            file=sys.stderr,
        )
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
