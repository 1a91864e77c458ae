"""The cluster tools' verbs of ``qwen3-trn``: plan, dry-run, smoke, slurm, k8s, data,
wheelhouse. Their parsers and what each runs; cli.py (the face over both wings) adds them
beside the course's verbs. ``--help`` and argument errors import nothing heavy."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import fields
from typing import Any

from ..hub import hub_offline
from ..runs.arguments import EXIT_FAILED, _number, _Parser, add_spec_arguments, spec_from_args
from .planner.request import add_plan_parser  # noqa: F401 (cli.py's; beside its values)


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
                        "bus bandwidth per node (default on trn2: 25%% of the node's own "
                        "EFA, from its instance type; none on a CPU)")  # fmt: skip


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
    k8s.add_argument("--pvc", default="fsx-claim", metavar="NAME",
                     help="the PersistentVolumeClaim the pods mount at /fsx, in the job's "
                     "namespace (default: fsx-claim, AWS's samples' name)")  # fmt: skip
    k8s.add_argument("--queue", default=None, metavar="NAME",
                     help="a Kueue LocalQueue that admits the job (the label "
                     "kueue.x-k8s.io/queue-name; then no Volcano gang scheduler)")  # fmt: skip
    return k8s


def add_job_flags(*jobs: argparse.ArgumentParser) -> None:
    """What every job file's command takes (slurm, k8s)."""
    from .jobs.saves import add_save_flags

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
        add_save_flags(job)  # its saves sized to it (ops/jobs/saves.py)
        job.add_argument(
            "--allow-hub-corpus",
            action="store_true",
            help="let every rank of a several-node job stream its corpus from the Hugging "
            "Face hub (default: refused; prepare it on shared storage with "
            "'qwen3-trn data prepare')",
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
    from ..data.prepared import SHARD_TOKENS

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
    prepare.add_argument("--num-proc", type=positive, default=None, metavar="N",
                         help="processes that tokenize in parallel (default: every core this "
                         "process may use)")  # fmt: skip


def _cmd_plan(args: argparse.Namespace) -> int:
    from .planner.report import plan_command
    from .planner.request import PlanRequest

    on_hub = plan_needs_hub(args.measure, args.device, args.machine)
    args.scope.enter_context(hub_offline(not on_hub))
    text, ok = plan_command(PlanRequest.from_args(args))
    print(text)
    return 0 if ok else EXIT_FAILED


def _cmd_dry_run(args: argparse.Namespace) -> int:
    from ..training.metrics_file import strict_json

    args.scope.enter_context(hub_offline())
    from ..tables import Table
    from .dry_run import dry_run

    spec = spec_from_args(args)
    report = dry_run(spec, layers=args.layers)
    if args.json:
        print(strict_json(report.to_json(), indent=2))
    else:
        print(Table(report.rows()))
    return 0 if report.fits else EXIT_FAILED


def _job(args: argparse.Namespace, *, pod_paths: bool = False):
    """The job a job file runs, planned for its nodes (runs/jobs.py)."""
    from .jobs.plan import plan_job, refuse_no_steps
    from .jobs.saves import SaveRequest

    refuse_no_steps(args.steps, args.command)  # (before a spec, which needs a count)
    saves = SaveRequest.from_args(args)  # what was given; the rest is sized to the job
    spec = spec_from_args(args) if not pod_paths else _spec_as_given(args)
    return plan_job(
        spec, command=args.command, allow_hub_corpus=args.allow_hub_corpus,
        pod_paths=pod_paths, saves=saves,
    )  # fmt: skip


def _spec_as_given(args: argparse.Namespace):
    """The spec with its paths as typed: a pod's paths, not this folder's."""
    from ..training.spec import RunSpec

    values = {f.name: getattr(args, f.name) for f in fields(RunSpec) if hasattr(args, f.name)}
    return RunSpec(**values)


def _cmd_slurm(args: argparse.Namespace) -> int:
    from .jobs.plan import slurm_job

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

    from .jobs.k8s_storage_queue import pvc_note
    from .jobs.kubernetes import SHARED_DIR_K8S
    from .jobs.plan import k8s_job

    docs = k8s_job(
        _job(args, pod_paths=True), api=args.api, image=args.image, name=args.name,
        efa=args.efa, namespace=args.namespace, python=args.python, workdir=args.workdir,
        hyperpod=args.hyperpod, pvc=args.pvc, queue=args.queue,
    )  # fmt: skip
    print(yaml.safe_dump_all(docs, sort_keys=False), end="")
    namespace = docs[-1]["metadata"].get("namespace")  # (HyperPod's: kubeflow by default)
    print(pvc_note(args.pvc, namespace, SHARED_DIR_K8S), file=sys.stderr)
    return 0


def _cmd_data(args: argparse.Namespace) -> int:
    import shlex

    from ..data.corpus import is_local
    from .data_prepare import prepare, usable_cores

    # a hub corpus (c4) needs the network here, and only here: the nodes read the folder
    args.scope.enter_context(hub_offline(is_local(args.corpus)))
    manifest = prepare(
        args.corpus,
        args.out,
        tokenizer=args.tokenizer,
        max_documents=args.max_documents,
        max_tokens=args.max_tokens,
        shard_tokens=args.shard_tokens,
        num_proc=args.num_proc or usable_cores(),
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
    from ..training.metrics_file import strict_json
    from .smoke import run_ladder

    across = spec_from_args(args) if args.nnodes > 1 else None  # (its fields: the nodes')
    if args.fabric_floor is not None:  # to every rank of the collectives rung
        from .fabric import FLOOR_ENV

        os.environ[FLOOR_ENV] = f"{args.fabric_floor:g}"
    ladder = run_ladder(
        args.out, full=not args.no_full_size, only=args.rung, echo=not args.json, across=across
    )
    if args.json:
        print(strict_json(ladder.to_json(), indent=2))
    return 0 if ladder.passed else EXIT_FAILED


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


def plan_needs_hub(measure: bool, device: str, machine: str | None) -> bool:
    """Does ``qwen3-trn plan`` download (``--measure`` on trn2 trains its candidates)?"""
    from ..device import as_device

    return measure and as_device(device).is_trn2 and machine in (None, "trn2", "trn2u")


#: the ops verbs and what each runs (cli.py adds them to its own)
OPS_COMMANDS = {
    "dry-run": _cmd_dry_run,
    "plan": _cmd_plan,
    "smoke": _cmd_smoke,
    "slurm": _cmd_slurm,
    "k8s": _cmd_k8s,
    "data": _cmd_data,
    "wheelhouse": _cmd_wheelhouse,
}
