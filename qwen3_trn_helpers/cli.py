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
from dataclasses import MISSING, fields
from typing import Any

from .assets import hub_offline
from .errors import Qwen3TrnError, Terminated, terminate_on_sigterm

EXIT_USAGE = 2
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143  # 128 + SIGTERM, as a shell reports it


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not argparse's usage dump
        self.exit(EXIT_USAGE, f"error: {message} (see '{self.prog} --help')\n")


def _number(kind: type, least: int | None, text: str):
    """Parse an int or float flag; ``least`` 1 means positive, 0 non-negative."""
    words = {1: "a positive integer", 0: "a non-negative integer", None: "an integer"}
    try:
        value = kind(text)
    except ValueError:
        what = words[least] if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if kind is float and least is not None and not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    if kind is int and least is not None and value < least:
        raise argparse.ArgumentTypeError(f"must be {words[least]}, got {value}")
    return value


def add_spec_arguments(parser: argparse.ArgumentParser, only: Sequence[str] | None = None) -> None:
    """One flag per RunSpec field (or the fields in ``only``), from the field itself."""
    from .training.spec import RunSpec

    for f in fields(RunSpec):
        if only is not None and f.name not in only:
            continue
        meta, flag = f.metadata, "--" + f.name.replace("_", "-")
        help_text = meta.get("help", "")
        default = None if f.default is MISSING else f.default
        if f.type == "bool":
            parser.add_argument(flag, action="store_true", default=default, help=help_text)
            continue
        if "optional_value" in meta:  # --resume, or --resume auto
            word = meta["optional_value"]
            parser.add_argument(
                flag, nargs="?", const=True, default=default, choices=[word], metavar=word,
                help=help_text,
            )  # fmt: skip
            continue
        kwargs: dict[str, Any] = {"default": default, "help": help_text}
        if "choices" in meta:
            kwargs["choices"] = list(meta["choices"])
        if f.type.startswith(("int", "float")):
            kind = int if f.type.startswith("int") else float
            least = 1 if meta.get("positive") else 0 if meta.get("non_negative") else None
            kwargs["type"] = lambda text, k=kind, m=least: _number(k, m, text)
            kwargs["metavar"] = "N" if kind is int else "X"
        if default is not None and "choices" not in meta:
            kwargs["help"] += f" (default: {default})"
        parser.add_argument(flag, **kwargs)


def spec_from_args(args: argparse.Namespace, **extra: Any):
    from .training.spec import RunSpec

    values = {f.name: getattr(args, f.name) for f in fields(RunSpec) if hasattr(args, f.name)}
    return RunSpec(**{**values, **extra}).with_absolute_paths()  # relative to where we stand


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


def add_dry_run_parser(sub: Any, debug: argparse.ArgumentParser) -> None:
    """``qwen3-trn dry-run``: a preset built at full size on fake ranks."""
    dry = sub.add_parser(
        "dry-run",
        parents=[debug],
        help="build a preset at its real size on its simulated ranks (torchtitan's fake "
        "backend: 64 for trn2's, 1 for tiny and 0.6b) on this CPU, one step: parameters and "
        "memory per rank (a one-rank preset: also against this machine's memory)",
    )
    add_spec_arguments(dry, ("variant", "preset", "seq_len", "nproc", "nnodes", "moe_impl",
                             "tp", "dp_replicate", "activation_checkpoint",
                             "local_batch_size", "skip_memory_check"))  # fmt: skip
    dry.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    dry.add_argument(
        "--layers",
        type=lambda t: _number(int, 1, t),
        default=None,
        help="build only this many layers (same layout; a quick check of a big preset)",
    )


def add_smoke_parser(sub: Any, debug: argparse.ArgumentParser) -> None:
    """``qwen3-trn smoke``: the trn2 ladder."""
    smoke = sub.add_parser(
        "smoke",
        parents=[debug],
        help="what a trn2 user runs first: each rung in its own process, pass/fail/skip",
    )
    smoke.add_argument("--json", action="store_true", help="print the rungs as JSON")
    smoke.add_argument("--out", default="smoke", help="folder for smoke.json and run logs")
    smoke.add_argument(
        "--no-full-size", action="store_true", help="skip the 64-rank Qwen3-4B rung (minutes)"
    )
    smoke.add_argument("--rung", action="append", help="climb only this rung (repeatable)")
    # on several nodes (the same command on each): the collectives rung across them
    add_spec_arguments(smoke, ("nnodes", "nproc", "rdzv_endpoint", "rdzv_timeout"))
    add_fabric_floor(smoke)


def add_fabric_floor(parser: argparse.ArgumentParser) -> None:
    """The fabric check's floor (smoke's collectives rung across nodes; a Slurm job's)."""
    parser.add_argument("--fabric-floor", type=lambda t: _number(float, 0, t), default=None,
                        metavar="GB_S", help="the fabric check's floor: GB/s of all-reduce "
                        "bus bandwidth per node (default: 25%% of trn2's 3.2 Tbps EFA on "
                        "trn2, none on a CPU)")  # fmt: skip


def add_slurm_parser(sub: Any, debug: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``qwen3-trn slurm``: a Slurm batch script (any train flag)."""
    slurm = sub.add_parser(
        "slurm",
        parents=[debug],
        help="print a Slurm batch script that trains on --nnodes nodes (any train flag)",
    )
    add_spec_arguments(slurm)
    slurm.add_argument(
        "--container-image",
        default=None,
        metavar="IMAGE",
        help="run every node's steps in this image with Pyxis (srun --container-image; "
        "docker/Dockerfile's image, named as enroot does: REGISTRY#NAME:TAG)",
    )
    add_fabric_floor(slurm)
    return slurm


def add_k8s_parser(sub: Any, debug: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``qwen3-trn k8s``: Kubernetes manifests (any train flag)."""
    k8s = sub.add_parser(
        "k8s",
        parents=[debug],
        help="print a Kubeflow TrainJob (or PyTorchJob) as YAML that trains on --nnodes pods "
        "(any train flag)",
    )
    add_spec_arguments(k8s)
    k8s.add_argument(
        "--image", required=True, help="container image with this package and its stack"
    )
    k8s.add_argument("--name", default=None, help="the job's name (default: qwen3-trn-VARIANT)")
    k8s.add_argument(
        "--namespace", default=None, help="the namespace (default: kubectl's current one)"
    )
    k8s.add_argument(
        "--api",
        choices=("trainjob", "pytorchjob"),
        default="trainjob",
        help="trainjob: Kubeflow Trainer v2 (a TrainingRuntime and its TrainJob; what a plain "
        "EKS cluster installs); pytorchjob: the v1 training operator's (SageMaker HyperPod's)",
    )
    k8s.add_argument(
        "--efa",
        type=lambda t: _number(int, 0, t),
        default=None,
        metavar="N",
        help="EFA interfaces each trn2 pod requests (default: 16, all of a trn2.48xlarge's)",
    )
    k8s.add_argument(
        "--hyperpod",
        action="store_true",
        help="(--api pytorchjob) SageMaker HyperPod's job auto-resume: ml.trn2.48xlarge, "
        "its health selector and annotations, namespace kubeflow or hyperpod-*",
    )
    return k8s


def add_job_flags(*jobs: argparse.ArgumentParser) -> None:
    """What every job file's command takes (slurm, k8s)."""
    for job in jobs:
        python_default = (
            "this Python" if job.prog.endswith("slurm") else "python on the image's PATH"
        )
        job.add_argument("--workdir", default=None, metavar="DIR",
                         help="the folder the job runs in on the cluster (default: this "
                         "folder for slurm, the image's for k8s)")  # fmt: skip
        job.add_argument("--python", default=None, metavar="PATH",
                         help=f"the cluster's Python (default: {python_default})")  # fmt: skip
        # a job file states its length: no silent default of a few steps on a cluster
        job.set_defaults(steps=None)
        job.add_argument(
            "--allow-hub-corpus",
            action="store_true",
            help="let every rank of a several-node job stream its corpus from the Hugging "
            "Face hub (default: refused; prepare it on shared storage with "
            "'qwen3-trn data prepare')",
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


def add_wheelhouse_parser(sub: Any, debug: argparse.ArgumentParser) -> None:
    """``qwen3-trn wheelhouse``: every wheel a laptop needs offline."""
    house = sub.add_parser(
        "wheelhouse",
        parents=[debug],
        help="prepare DIR with every wheel and asset a laptop needs to set up offline "
        "(then: scripts/setup.sh --wheelhouse DIR)",
    )
    house.add_argument("dir", metavar="DIR", help="the folder to fill (a USB stick, a share)")
    house.add_argument(
        "--target",
        choices=["linux-x86_64", "linux-aarch64", "macos-arm64"],
        default=None,
        help="the laptops' platform (default: this machine's)",
    )
    house.add_argument(
        "--python-version", default=None, help="the laptops' Python, e.g. 3.11 (default: this)"
    )
    house.add_argument(
        "--extras",
        default="cpu,notebooks",
        help="qwen3-trn's extras to include (default: cpu,notebooks; '' for none)",
    )
    house.add_argument(
        "--cpu-torch",
        action="store_true",
        help="Linux: PyTorch's CPU-only torch from its own index (no CUDA libraries)",
    )
    house.add_argument(
        "--torch-index", default=None, help="the index for --cpu-torch (a mirror of it)"
    )
    house.add_argument(
        "--skip",
        action="append",
        default=[],
        metavar="PACKAGE",
        help="leave out a package the laptops already have (e.g. torch) and what only it needs",
    )
    house.add_argument(
        "--no-published",
        action="store_true",
        help="leave out the local 'published' checkpoints (laptops then pretrain them, ~1.5 min)",
    )


def add_data_parser(
    sub: Any, debug: argparse.ArgumentParser, quiet: argparse.ArgumentParser
) -> None:
    """``qwen3-trn data prepare``: a pre-tokenized corpus for shared storage (prepared.py)."""
    from .prepared import SHARD_TOKENS

    positive = lambda t: _number(int, 1, t)  # noqa: E731
    data = sub.add_parser("data", parents=[debug], help="corpora for cluster jobs")
    verbs = data.add_subparsers(dest="data_command", required=True, parser_class=_Parser)
    prepare = verbs.add_parser(
        "prepare",
        parents=[debug, quiet],
        help="tokenize a corpus into shards with a manifest (sizes, sha256, tokenizer) "
        "that 'train --corpus DIR' reads without network",
    )
    prepare.add_argument("--corpus", required=True,
                         help="any corpus train takes: embedded, a .txt/.jsonl file or folder, "
                         "or a torchtitan dataset such as c4 (on a machine with network)",
                         )  # fmt: skip
    prepare.add_argument("--out", required=True, help="a new folder (on shared storage)")
    prepare.add_argument("--tokenizer", default=None,
                         help="folder with tokenizer.json (default: the offline Qwen3, as train)",
                         )  # fmt: skip
    prepare.add_argument("--max-documents", type=positive, default=None, metavar="N",
                         help="stop after N documents (a hub corpus needs this or --max-tokens)",
                         )  # fmt: skip
    prepare.add_argument("--max-tokens", type=positive, default=None, metavar="N",
                         help="stop after the document that reaches N tokens")  # fmt: skip
    prepare.add_argument("--shard-tokens", type=positive, default=SHARD_TOKENS, metavar="N",
                         help=f"tokens per shard file (default {SHARD_TOKENS:,}: ~1 GiB)",
                         )  # fmt: skip


def add_plan_parser(sub: Any, debug: argparse.ArgumentParser) -> None:
    """``qwen3-trn plan``: the layout planner's flags (planner/)."""
    positive = lambda t: _number(int, 1, t)  # noqa: E731
    plan = sub.add_parser(
        "plan",
        parents=[debug],
        help="which layout for a Qwen3 on N trn2 nodes: every one that fits in memory, "
        "ranked by an estimated step time, and the command that trains the best",
    )
    plan.add_argument("--model", required=True,
                      help="Qwen3-0.6B, -1.7B, -4B, -8B, -14B, -32B, -30B-A3B, -235B-A22B, "
                      "a preset name, or a Hugging Face config.json (Qwen3, Qwen3-MoE, "
                      "Llama, Mixtral)")  # fmt: skip
    plan.add_argument("--nodes", type=positive, default=1,
                      help="nodes (instances) of --machine")  # fmt: skip
    from .planner.cost import MACHINES

    plan.add_argument("--machine", choices=tuple(MACHINES), default=None,
                      help="what to plan for (default: trn2, or cpu with --device cpu): "
                      + "; ".join(f"{k}: {v}" for k, v in MACHINES.items()))  # fmt: skip
    plan.add_argument(
        "--layout",
        default=None,
        help="evaluate this one layout instead of searching: fsdp=N,tp=N,"
        "dp_replicate=N,cp=1,pp=1,ep=1,ac=none|selective|full,local_batch=N",
    )
    plan.add_argument(
        "--compile",
        action="store_true",
        help="estimate a torch.compile'd run (its own fitted efficiency)",
    )
    plan.add_argument("--global-batch-tokens", type=positive, default=None,
                      help="tokens per optimizer step, held fixed (gradient accumulation "
                      "makes it up; default: one sequence per rank)")  # fmt: skip
    plan.add_argument("--seq-len", type=positive, default=None,
                      help="tokens per sequence (default: the preset's)")  # fmt: skip
    plan.add_argument("--local-batch-size", type=positive, default=None,
                      help="fix the local batch (default: try 1, 2, 4, 8)")  # fmt: skip
    plan.add_argument("--device", choices=("neuron", "cpu"), default="neuron",
                      help="plan for trn2 nodes (default) or for this CPU's ranks "
                      "(the mechanism, where there is no Trainium)")  # fmt: skip
    plan.add_argument("--nproc", type=positive, default=None, help="--device cpu: ranks")
    plan.add_argument("--top", type=positive, default=5, help="rows shown (default 5)")
    plan.add_argument("--json", action="store_true", help="one JSON object instead of tables")
    plan.add_argument("--verify", action="store_true",
                      help="dry-run the best layout at full width with torchtitan's fake "
                      "backend and compare its sharded state with the estimate")  # fmt: skip
    plan.add_argument("--verify-layers", type=positive, default=1,
                      help="blocks the --verify dry run builds (default 1)")  # fmt: skip
    plan.add_argument("--measure", action="store_true",
                      help="train the top candidates a few steps on this machine's device "
                      "and rank them by measured tokens/s")  # fmt: skip
    plan.add_argument("--measure-top", type=positive, default=2,
                      help="candidates --measure trains (default 2)")  # fmt: skip
    plan.add_argument("--steps", type=positive, default=3,
                      help="steps per measured candidate (default 3; the first warms up)",
                      )  # fmt: skip


def _cmd_plan(args: argparse.Namespace) -> int:
    from .commands import plan_needs_hub
    from .planner.report import plan_command

    on_hub = plan_needs_hub(args.measure, args.device, args.machine)
    args.scope.enter_context(hub_offline(not on_hub))
    text, ok = plan_command(args)
    print(text)
    return 0 if ok else EXIT_FAILED


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


def _cmd_dry_run(args: argparse.Namespace) -> int:
    from .training.metrics_file import strict_json

    args.scope.enter_context(hub_offline())
    from .runs.dry_run import dry_run
    from .tables import Table

    spec = spec_from_args(args)
    report = dry_run(spec, layers=args.layers)
    if args.json:
        print(strict_json(report.to_json(), indent=2))
    else:
        print(Table(report.rows()))
    return 0 if report.fits else EXIT_FAILED


def _job(args: argparse.Namespace, *, pod_paths: bool = False):
    """The job a job file runs, planned for its nodes (runs/jobs.py)."""
    from .runs.jobs import plan_job, refuse_no_steps

    refuse_no_steps(args.steps, args.command)  # (before a spec, which needs a count)
    spec = spec_from_args(args) if not pod_paths else _spec_as_given(args)
    return plan_job(
        spec, command=args.command, allow_hub_corpus=args.allow_hub_corpus, pod_paths=pod_paths
    )


def _spec_as_given(args: argparse.Namespace):
    """The spec with its paths as typed: a pod's paths, not this folder's."""
    from .training.spec import RunSpec

    values = {f.name: getattr(args, f.name) for f in fields(RunSpec) if hasattr(args, f.name)}
    return RunSpec(**values)


def _cmd_slurm(args: argparse.Namespace) -> int:
    from .runs.jobs import slurm_job

    print(
        slurm_job(
            _job(args), container_image=args.container_image, python=args.python,
            workdir=args.workdir, fabric_floor=args.fabric_floor,
        ),
        end="",
    )  # fmt: skip
    return 0


def _cmd_k8s(args: argparse.Namespace) -> int:
    import yaml

    from .runs.jobs import k8s_job

    docs = k8s_job(
        _job(args, pod_paths=True), api=args.api, image=args.image, name=args.name,
        efa=args.efa, namespace=args.namespace, python=args.python, workdir=args.workdir,
        hyperpod=args.hyperpod,
    )  # fmt: skip
    print(yaml.safe_dump_all(docs, sort_keys=False), end="")
    return 0


def _cmd_data(args: argparse.Namespace) -> int:
    import shlex

    from .corpus import is_local
    from .data_prepare import prepare

    # a hub corpus (c4) needs the network here, and only here: the nodes read the folder
    args.scope.enter_context(hub_offline(is_local(args.corpus)))
    manifest = prepare(
        args.corpus,
        args.out,
        tokenizer=args.tokenizer,
        max_documents=args.max_documents,
        max_tokens=args.max_tokens,
        shard_tokens=args.shard_tokens,
        progress=not args.no_progress,
    )
    out = os.path.abspath(os.path.expanduser(args.out))
    print(
        f"prepared: {out}  {manifest['documents']:,} documents, {manifest['tokens']:,} "
        f"tokens in {len(manifest['shards'])} shard(s)"
    )
    tokenizer = manifest["tokenizer"]
    print(f"tokenizer: {tokenizer['path']} (sha256 {tokenizer['sha256'][:12]})")
    print(f"train on it: qwen3-trn train --corpus {shlex.quote(out)} ...")
    return 0


def _cmd_smoke(args: argparse.Namespace) -> int:
    from .smoke import run_ladder
    from .training.metrics_file import strict_json

    across = spec_from_args(args) if args.nnodes > 1 else None  # (its fields: the nodes')
    if args.fabric_floor is not None:  # to every rank of the collectives rung
        from .runs.fabric import FLOOR_ENV

        os.environ[FLOOR_ENV] = f"{args.fabric_floor:g}"
    ladder = run_ladder(
        args.out, full=not args.no_full_size, only=args.rung, echo=not args.json, across=across
    )
    if args.json:
        print(strict_json(ladder.to_json(), indent=2))
    return 0 if ladder.passed else EXIT_FAILED


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
    from .corpus import embedded_corpus_path, read_documents

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


def _cmd_wheelhouse(args: argparse.Namespace) -> int:
    import shlex
    from pathlib import Path

    from .wheelhouse import build

    build(
        Path(args.dir),
        target=args.target,
        python_version=args.python_version,
        extras=[e for e in args.extras.split(",") if e.strip()],
        cpu_torch=args.cpu_torch or bool(args.torch_index),
        torch_index=args.torch_index,
        skip=args.skip,
        published=not args.no_published,
        command=shlex.join(["qwen3-trn", "wheelhouse", *sys.argv[2:]])
        if sys.argv[1:2] == ["wheelhouse"]
        else "",
    )
    print(f"next, on each laptop (no network needed): scripts/setup.sh --wheelhouse {args.dir}")
    return 0


COMMANDS = {
    "train": _cmd_train,
    "reproduce": _cmd_reproduce,
    "parity": _cmd_parity,
    "dry-run": _cmd_dry_run,
    "plan": _cmd_plan,
    "smoke": _cmd_smoke,
    "slurm": _cmd_slurm,
    "k8s": _cmd_k8s,
    "data": _cmd_data,
    "doctor": _cmd_doctor,
    "assets": _cmd_assets,
    "wheelhouse": _cmd_wheelhouse,
}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    for stream in (sys.stdout, sys.stderr):
        # a terminal that cannot show a character (PYTHONIOENCODING=ascii, a C locale)
        # gets an escape for it, never a crash after the run completed
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
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
        held = getattr(e, "files_line", None) or "every completed step is in metrics.jsonl"
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
        print(
            f"error: unexpected {type(e).__name__}: {e} (rerun with --debug for the traceback)",
            file=sys.stderr,
        )
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
