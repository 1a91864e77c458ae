"""The ladder: the rungs in order, each climbed in its own child process with a timeout,
one line each, and ``smoke.json`` (see the package's docstring for the rungs)."""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ...device import as_device
from .checks import (
    TrainingCheck,
    _checkpoint_cached,
    _hub_online,
    check_training_run,
    full_size_flags,
    training_memory,
)
from .device_memory import device_memory_after_rung, device_memory_before_rung
from .rungs import SKIP

if TYPE_CHECKING:
    from ...training.spec import RunSpec


@dataclass
class Rung:
    name: str
    what: str
    timeout_s: float
    fix: str
    train: tuple[str, ...] = ()  # a training rung: its `qwen3-trn train` flags
    notes: tuple[str, ...] = ()  # what the rung could not check here, said in its reason
    status: str = "not run"
    seconds: float = 0.0
    reason: str = ""
    #: a training rung's memory per rank: the peak measured at each step beside the
    #: plan's estimate by category (training/memory.py), so a thin plan shows on trn2
    memory: dict | None = None


def expectation(rung: Rung, on_neuron: bool) -> TrainingCheck:
    """What a training rung's run must show: its steps, memory, MFU on trn2, data, init."""
    flags = dict(zip(rung.train[::2], rung.train[1::2], strict=False))
    corpus = flags.get("--corpus")
    if corpus is None and flags.get("--preset") == "4b":
        corpus = "c4"  # the preset's own corpus, streamed from the hub
    return TrainingCheck(
        steps=int(flags["--steps"]), mfu=on_neuron, corpus=corpus, init=flags.get("--init")
    )


def _rungs(full_size: bool) -> list[Rung]:
    rungs = [
        Rung("environment", "Neuron tools and packages", 120,
             "activate the Neuron venv and run scripts/setup.sh from it (docs/trn2.md, Install)"),
        Rung("registration", "torch sees `neuron` through PrivateUse1", 300,
             "torch-neuronx 2.14 must be installed in this venv; do not set "
             "TORCH_DEVICE_BACKEND_AUTOLOAD=0"),
        Rung("collectives", "2 ranks: all_reduce and one FSDP2 step", 900,
             "check neuron-ls for other processes holding NeuronCores (shut down notebook "
             "kernels)"),
        Rung("nki_moe_kernel", "NKI MoE op = PyTorch reference (fwd, grads)", 1800,
             "check the nki-library version (moe_cte / blockwise_mm_bwd signatures drift); "
             "--moe-impl grouped_mm avoids the kernels"),
        Rung("spmd_backends", "torchtitan's spmd_backend values at TP 2 on 2 ranks", 2700,
             "pass another one to every run: qwen3-trn train --spmd-backend NAME (the "
             "rung's line names those that work)"),
        Rung("compile", "one tiny step compiled on `neuron`, twice: the cache", 3600,
             "rerun without --compile (eager) to train meanwhile; the rung's log holds "
             "neuronx-cc's error"),
        Rung("tiny_native_2ranks", "tiny native Qwen3, 3 steps on 2 ranks", 1800,
             "read the rung's log; rerun with `qwen3-trn train --debug --verbose`",
             train=("--variant", "native", "--preset", "tiny", "--nproc", "2", "--steps", "3")),
        Rung("tiny_transformers_v5_2ranks", "tiny HF Qwen3 in torchtitan, 3 steps, 2 ranks",
             1800, "read the rung's log; rerun with `qwen3-trn train --debug --verbose`",
             train=("--variant", "transformers_v5", "--preset", "tiny", "--nproc", "2",
                    "--steps", "3")),
    ]  # fmt: skip
    if full_size:
        rungs.append(
            Rung("4b_native_64ranks", "Qwen3-4B layout, 2 steps on 64 ranks", 3600,
                 "the first step compiles for minutes; watch memory with neuron-top",
                 train=("--variant", "native", "--preset", "4b", "--nproc", "64",
                        "--steps", "2"))
        )  # fmt: skip
    return rungs


@dataclass
class Ladder:
    rungs: list[Rung] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(r.status in ("pass", "skip") for r in self.rungs)

    def to_json(self) -> dict:
        return {
            "rungs": [
                {
                    k: v
                    for k, v in asdict(r).items()
                    if k in ("name", "status", "seconds", "reason")
                    or (k == "memory" and v is not None)
                }
                for r in self.rungs
            ]
        }


def _device_type() -> str:
    from ...device import detect_device_type

    return detect_device_type()


#: what a rung's child runs: a rung's body (ops/smoke/__main__.py)
SMOKE_MODULE = ("-m", "qwen3_trn_helpers.ops.smoke")


def _command(rung: Rung, out: Path, across: RunSpec | None = None) -> list[str]:
    """The child process of a rung: this package, or qwen3-trn train (torchrun inside).
    ``across``: the nodes the collectives rung spans (``nproc`` ranks on each), or one node."""
    if rung.train:
        return [sys.executable, "-m", "qwen3_trn_helpers", "train", *rung.train,
                "--out", str(out / rung.name), "--overwrite", "--no-progress"]  # fmt: skip
    if rung.name == "collectives":
        from ...runs.launch import torchrun

        body = [*SMOKE_MODULE, rung.name]
        if across is None:  # 2 ranks on this node
            return torchrun(body, nproc=2, in_share=True)
        # every rank of every node (64 on a trn2.48xlarge), through the rendezvous a
        # job's training meets
        return torchrun(
            body, nproc=across.nproc, in_share=True, nnodes=across.nnodes,
            rdzv_endpoint=across.rdzv_endpoint, rdzv_timeout=across.rdzv_timeout,
        )  # fmt: skip
    return [sys.executable, *SMOKE_MODULE, rung.name]


def run_ladder(
    out: str | Path = "smoke",
    *,
    full: bool = True,
    only: list[str] | None = None,
    echo=True,
    across: RunSpec | None = None,
) -> Ladder:
    """Climb every rung (or those named in ``only``); write ``out/smoke.json``.

    ``across``: a spec with ``nnodes`` > 1 and its ``rdzv_endpoint``: this node is one of
    several climbing at once, before a job trains on them. Only the collectives rung
    runs, every rank of every node through the job's own kind of rendezvous, so each node says
    whether the fabric between them carries an all_reduce, an all_gather and an FSDP2
    step; its files go to ``out/HOST-PID`` (nodes may share ``out``).
    """
    out = Path(out)
    if across is not None and across.nnodes > 1:
        only = _across_nodes(across, only)
        out = out / f"{socket.gethostname()}-{os.getpid()}"
    else:
        across = None
    out.mkdir(parents=True, exist_ok=True)
    rungs = _rungs(full_size=full)
    if across is not None:
        rungs = [replace(r, fix=ACROSS_FIX) if r.name == "collectives" else r for r in rungs]
    if only:
        unknown = sorted(set(only) - {r.name for r in rungs})
        if unknown:
            from ...errors import ConfigError

            names = ", ".join(r.name for r in rungs)
            raise ConfigError(f"unknown rung {unknown[0]!r}; the rungs are: {names}")
        rungs = [r for r in rungs if r.name in only]
    ladder = Ladder(rungs)
    on_neuron = as_device(_device_type()).is_trn2
    from ...runs.neuron_cores import CLASS_SLICE_ENV

    for rung in ladder.rungs:
        if rung.name == "4b_native_64ranks" and not on_neuron:
            rung.status, rung.reason = "skip", "needs a trn2.48xlarge (64 logical NeuronCores)"
        elif rung.name == "4b_native_64ranks" and os.environ.get(CLASS_SLICE_ENV):
            share = os.environ[CLASS_SLICE_ENV]
            rung.status, rung.reason = (
                "skip",
                (
                    f"needs all 64 logical NeuronCores; your share of this trn2 "
                    f"({CLASS_SLICE_ENV}={share}) is a part of them: climb it on a trn2 of your own"
                ),
            )
        elif rung.name == "4b_native_64ranks":
            from ...model.presets import PRESETS

            online = _hub_online()
            extra, rung.notes = full_size_flags(online, _checkpoint_cached(PRESETS["4b"].hub_id))
            rung.train = (*rung.train, *extra)
            before = device_memory_before_rung()  # (peaks reset: this rung's own)
            _climb(rung, out, on_neuron, online=online)
            if rung.memory is not None:  # what the device itself held, by category
                from ...trn2 import lnc_from_env

                rung.memory["device"] = device_memory_after_rung(before, lnc_from_env())
        else:
            _climb(rung, out, on_neuron, across=across)
        if echo:
            line = f"{rung.status:<5} {rung.name:<28} {rung.seconds:6.1f}s  {rung.reason}"
            print(line + (f"\n      fix: {rung.fix}" if rung.status == "fail" else ""), flush=True)
    from ...training.metrics_file import strict_json

    (out / "smoke.json").write_text(strict_json(ladder.to_json(), indent=2))
    return ladder


#: the collectives rung's fix on several nodes: what stands between them, not the cores
ACROSS_FIX = (
    "start the same `qwen3-trn smoke --nnodes N --rdzv-endpoint HOST:PORT` on every node; "
    "let the nodes reach each other on every port (on EFA: a security group that allows "
    "all traffic from itself); then check neuron-ls for processes holding NeuronCores"
)


def _across_nodes(across: RunSpec, only: list[str] | None) -> list[str]:
    """The rungs a node of several climbs (the collectives), once the endpoint is fit."""
    from ...errors import ConfigError
    from ...runs.rendezvous import check_endpoint_reachable_by_all

    if across.rdzv_endpoint is None:
        raise ConfigError(
            f"smoke on {across.nnodes} nodes needs --rdzv-endpoint HOST:PORT, the same on "
            "every node: an address of one of them (the first) that the others reach"
        )
    across.validate()
    check_endpoint_reachable_by_all(across.rdzv_endpoint)
    if only and set(only) != {"collectives"}:
        raise ConfigError(
            "with --nnodes the ladder climbs only the collectives rung, across the nodes; "
            "climb the other rungs on each node without --nnodes"
        )
    return ["collectives"]


def _climb(
    rung: Rung,
    out: Path,
    on_neuron: bool,
    online: bool = False,
    across: RunSpec | None = None,
) -> None:
    from ...runs.child import run_child
    from ...runs.launch import child_environment
    from ...runs.lifeline import watched

    log = out / f"{rung.name}.log"
    # one thread per process unless set; on trn2 the same Neuron settings (logical-core
    # size) training launches use, and a one-process rung takes the share's first core
    # only, not every core it sees; only the full-size rung streams C4 and downloads
    # the checkpoint
    env = child_environment(
        neuron=on_neuron, threads=1, offline=not online,
        one_process=not rung.train and rung.name not in ("collectives", "spmd_backends"),
    )  # fmt: skip
    # a timeout, Ctrl-C or SIGTERM stops the rung's whole process group (torchrun's
    # workers, whatever holds NeuronCores) before the ladder goes on or stops
    timeout = rung.timeout_s + (across.rdzv_timeout if across else 0)  # (waits for the nodes)
    # under a watch of this process (runs/lifeline.py): a ladder killed outright, even
    # while its nodes still meet, takes torchrun and the rung's ranks with it
    cmd = watched(_command(rung, out, across))
    proc = run_child(cmd, log=log, env=env, timeout=timeout)
    rung.seconds = proc.seconds
    if proc.timed_out:
        rung.status, rung.reason = "fail", f"no answer within {timeout:.0f} s (log: {log})"
        return
    text = proc.output
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if proc.returncode == 0 and rung.train:
        passed, said = check_training_run(out / rung.name, expectation(rung, on_neuron))
        rung.memory = training_memory(out / rung.name)
        rung.status = "pass" if passed else "fail"
        rung.reason = "; ".join((said, *rung.notes)) + ("" if passed else f" (log: {log})")
    elif proc.returncode == 0:
        rung.status = "pass"
        said = [ln.removeprefix("ok:").strip() for ln in lines if ln.startswith(("ok:", "steps:"))]
        rung.reason = said[-1] if said else ""
    elif proc.returncode == SKIP or any(ln.startswith("skip:") for ln in lines):
        rung.status = "skip"
        said = [ln for ln in lines if ln.startswith("skip:")]
        rung.reason = said[-1][5:].strip() if said else "does not apply here"
    elif across is not None and "RendezvousTimeoutError" in text:
        from ...runs.torchrun import missing_nodes_message

        rung.status = "fail"  # (this node came, at least)
        rung.reason = missing_nodes_message(across, 1, proc.seconds) + f" (log: {log})"
    else:
        rung.status = "fail"
        said = [ln for ln in lines if ln.startswith(("error:", "fail:"))] or lines[-1:]
        rung.reason = (said[-1] if said else f"exit status {proc.returncode}") + f" (log: {log})"
