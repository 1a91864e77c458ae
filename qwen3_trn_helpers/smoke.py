"""``qwen3-trn smoke``: the ladder a trn2 user runs first, one rung per child process.

Each rung checks one layer of the stack, in the order things break on a new machine:

1. ``environment``: neuron-ls, torch-neuronx / neuronx-cc / nki versions, triton
   (torchtitan imports it unconditionally), nki-library's MoE kernels importable;
2. ``registration``: PrivateUse1 is named ``neuron``, the device count at the
   configured LNC, ``torch.accelerator``, the process-group backend, torchtitan's device;
3. ``collectives``: 2 ranks, an all_reduce and one FSDP2 step on the device (with
   ``--nnodes N --nproc P --rdzv-endpoint HOST:PORT``, run on every node: every rank of
   every node, the fabric between the nodes with each node's bus bandwidth against a
   floor (runs/fabric.py), and only this rung);
4. ``nki_moe_kernel``: the NKI MoE op against its PyTorch reference, forward and
   gradients, at Qwen3-30B-A3B's expert width with 4 experts and with all 128 of its
   experts (the count the 30b-a3b preset trains with, which no CPU test can reach);
5. ``spmd_backends``: one step of the tiny model at tensor parallel 2 on 2 ranks with
   each of torchtitan 0.3.0's ``parallelism.spmd_backend`` values: which work here;
6. ``compile``: one tiny step compiled with the ``neuron`` backend, then the same step
   again with the same NEFF cache: both times, and whether the second compiled nothing;
7. ``tiny_native_2ranks`` and ``tiny_transformers_v5_2ranks``: 3 training steps of the
   tiny model on 2 ranks through ``qwen3-trn train``;
8. ``4b_native_64ranks``: 2 steps of the real Qwen3-4B layout on all 64 logical cores,
   C4 streamed from the hub and the published checkpoint loaded when the network (or
   the local hub cache) allows, and said so when not.

A training rung passes when its run exits 0 *and* its ``metrics.jsonl`` shows what the
rung claims (:func:`check_training_run`): every step recorded, finite losses, a memory
reading above 0 in every record and, where MFU is measured (trn2), MFU above 0, and
``run.json`` naming the corpus and init the rung asked for.

Every rung runs in its own process with a timeout (a crash or a hang is one failed line,
not a dead ladder) and prints one line: pass, fail or skip, with the reason and the fix.
On a CPU the rungs that apply run (collectives and the tiny runs use gloo) and the
Neuron-only ones are skipped with their reason. ``smoke.json`` records the ladder:
attach it to a bug report.
"""

from __future__ import annotations

import json
import math
import os
import socket
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from .trn2 import PHYSICAL_CORES_PER_CHIP

if TYPE_CHECKING:
    from .training.spec import RunSpec

SKIP = 77  # exit status of a rung that does not apply here (as automake's tests)


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


@dataclass(frozen=True)
class TrainingCheck:
    """What a training rung's run folder must show for the rung to pass."""

    steps: int
    mfu: bool  # MFU is measured (trn2, CUDA); on a CPU it is left out of the records
    corpus: str | None = None  # run.json's resolved corpus, when the rung asked for one
    init: str | None = None  # run.json's init, when the rung asked for one


def check_training_run(run_dir: str | Path, expect: TrainingCheck) -> tuple[bool, str]:
    """(passed, one line): does ``run_dir`` show the checks the rung claims?

    A run that exits 0 has not yet shown that memory and MFU are read on this device
    (torchtitan writes 0 when its memory monitor reads another device's statistics), nor
    that it trained on the data and weights it was asked for; this reads them back.
    """
    from .training.metrics_file import read_metrics

    run_dir = Path(run_dir)
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return False, f"no {path}"
    records = read_metrics(path)
    if len(records) != expect.steps:
        return False, f"{len(records)} of {expect.steps} steps recorded in {path}"
    for r in records:
        step = r.get("step")
        loss = r.get("loss")
        if not isinstance(loss, int | float) or not math.isfinite(loss):
            return False, f"step {step}: loss {loss!r} is not a finite number"
        memory = r.get("memory_gib")
        if not isinstance(memory, int | float) or not memory > 0:
            return False, f"step {step}: memory_gib {memory!r}, expected a reading above 0"
        if expect.mfu:
            mfu = r.get("mfu_pct")
            if not isinstance(mfu, int | float) or not mfu > 0:
                return False, f"step {step}: mfu_pct {mfu!r}, expected a reading above 0"
    manifest: dict = {}
    if expect.corpus or expect.init:
        try:
            manifest = json.loads((run_dir / "run.json").read_text())
        except (OSError, json.JSONDecodeError):
            return False, f"no readable {run_dir / 'run.json'}"
    resolved = manifest.get("resolved", {})
    if expect.corpus and resolved.get("corpus") != expect.corpus:
        return False, (
            f"run.json says corpus {resolved.get('corpus')!r}, the rung asked for {expect.corpus!r}"
        )
    # `pretrained` is resolved to the folder of published weights before training, and
    # run.json records that folder as init_dir: the checkpoint every rank loaded
    if expect.init == "pretrained" and not manifest.get("init_dir"):
        return (
            False,
            "run.json names no checkpoint folder (init_dir), the rung asked for pretrained",
        )
    if expect.init not in (None, "pretrained") and resolved.get("init") != expect.init:
        return (
            False,
            f"run.json says init {resolved.get('init')!r}, the rung asked for {expect.init!r}",
        )
    last = records[-1]
    said = f"{len(records)} steps, loss {records[0]['loss']:.3f} -> {last['loss']:.3f}"
    said += f", memory {max(r['memory_gib'] for r in records):.2f} GiB"
    if expect.mfu:
        said += f", MFU {min(r['mfu_pct'] for r in records):.1f}%"
    return True, said


def training_memory(run_dir: Path) -> dict | None:
    """A training rung's memory per rank: measured peak per step (metrics.jsonl, the
    device's allocator) and the plan's estimate by category, or None if unreadable."""
    from .training.metrics_file import read_metrics
    from .training.plan import plan_run
    from .training.spec import RunSpec

    try:
        info = json.loads((run_dir / "run.json").read_text())
        records = read_metrics(run_dir / "metrics.jsonl")
        spec = RunSpec(**info["spec"])
        plan = plan_run(spec, device_type=info["resolved"]["device"])
    except Exception:  # a rung that failed early: its own line says why
        return None
    return {
        "measured_peak_gib_per_step": [r.get("memory_gib") for r in records],
        "estimated_gib": plan.memory().row(),
    }


#: sysfs's root: the one seam tests use to point the readers below at a fake tree
#: (tests/fake_torch_neuronx/sysfs.py); never changed outside tests
SYSFS_ROOT = Path("/sys")
#: the Neuron driver's counters, one ``neuron_core`` folder per *physical* core (8 per
#: trn2 chip): device memory by category, each a folder with ``present`` and ``peak``
#: bytes (aws-neuron-driver neuron_sysfs_metrics.c, drivers 2.24 and 2.28; Neuron sysfs
#: user guide). The Neuron 2.33 guide says driver 2.31 moved sysfs nodes: where they
#: are not found the reading is null with the reason.
NEURON_COUNTERS = "devices/virtual/neuron_device/neuron*/neuron_core*/stats/memory_usage/device_mem"
#: the driver's version (``MODULE_VERSION`` in aws-neuron-driver neuron_module.c)
DRIVER_VERSION_FILE = "module/neuron/version"


def _core_counters(root: Path) -> dict[tuple[int, int], Path]:
    """(chip, physical core) -> its device_mem folder."""
    found = {}
    for folder in root.glob(NEURON_COUNTERS):
        core_dir = folder.parents[2]
        try:
            chip = int(core_dir.parent.name.removeprefix("neuron"))
            core = int(core_dir.name.removeprefix("neuron_core"))
        except ValueError:
            continue
        found[(chip, core)] = folder
    return found


def _read_bytes(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def neuron_driver_version(root: Path | None = None) -> str | None:
    """The loaded Neuron driver's version, or None without one."""
    try:
        return ((root or SYSFS_ROOT) / DRIVER_VERSION_FILE).read_text().strip() or None
    except OSError:
        return None


def _reset_peak(path: Path) -> None:
    path.write_text("0\n")


def reset_device_memory_peaks(root: Path | None = None) -> bool:
    """Write 0 to every ``peak`` (as torch-neuronx's own tests do before measuring):
    a peak otherwise persists from the driver's load, earlier jobs included. False
    where there is nothing to reset or a write is refused (root owns the counters)."""
    folders = _core_counters(root or SYSFS_ROOT)
    peaks = [c / "peak" for f in folders.values() for c in f.iterdir() if (c / "peak").exists()]
    try:
        for peak in peaks:
            _reset_peak(peak)
    except OSError:
        return False
    return bool(peaks)


def device_memory_totals(root: Path | None = None) -> dict[str, float] | None:
    """Each category's ``present`` bytes summed over every core, in GiB (None: no counters)."""
    totals: dict[str, int] = {}
    for folder in _core_counters(root or SYSFS_ROOT).values():
        for category in folder.iterdir():
            value = _read_bytes(category / "present")
            if value is not None:
                totals[category.name] = totals.get(category.name, 0) + value
    return {k: round(v / 2**30, 3) for k, v in sorted(totals.items())} or None


def device_memory_peaks(root: Path | None = None, lnc: int = 2) -> dict[str, float] | None:
    """Each category's peak in GiB on the busiest *logical* core, or None without counters.

    The driver counts per physical core; a rank owns one logical core, which at LNC 2
    is two physical ones (logical core ``chip * 8 / lnc + core // lnc``), so a logical
    core's peak is the sum of its physical cores' peaks: an upper bound (the two need
    not peak at once), comparable with the plan's per-rank estimate.
    """
    per_logical: dict[tuple[int, str], int] = {}
    for (chip, core), folder in _core_counters(root or SYSFS_ROOT).items():
        logical = chip * (PHYSICAL_CORES_PER_CHIP // lnc) + core // lnc
        for category in folder.iterdir():
            value = _read_bytes(category / "peak")
            if value is not None:
                key = (logical, category.name)
                per_logical[key] = per_logical.get(key, 0) + value
    peaks: dict[str, int] = {}
    for (_, category), value in per_logical.items():
        peaks[category] = max(peaks.get(category, 0), value)
    return {name: round(b / 2**30, 3) for name, b in sorted(peaks.items())} or None


def device_memory_before_rung(root: Path | None = None) -> dict:
    """Before the 64-rank rung: the peaks reset where writable, else the totals held now."""
    root = root or SYSFS_ROOT
    before: dict = {"driver": neuron_driver_version(root), "peaks_reset": False}
    if reset_device_memory_peaks(root):
        before["peaks_reset"] = True
    else:
        before["totals_before_gib"] = device_memory_totals(root)
    return before


def device_memory_after_rung(before: dict, lnc: int, root: Path | None = None) -> dict:
    """What the device held during the rung, by category, per logical core; null with
    the reason where the driver shows no counters."""
    root = root or SYSFS_ROOT
    reading = {**before, "lnc": lnc}
    peaks = device_memory_peaks(root, lnc)
    reading["peak_gib_per_logical_core_by_category"] = peaks
    if peaks is None:
        reading["reason"] = (
            f"no device-memory counters under {root / NEURON_COUNTERS.split('/neuron*')[0]} "
            f"(driver {before.get('driver') or 'not loaded'}): not a trn2, or a driver whose "
            "sysfs tree moved them (Neuron 2.33 guide: driver 2.31 moved sysfs nodes)"
        )
    elif not before["peaks_reset"]:
        reading["totals_after_gib"] = device_memory_totals(root)
        reading["reason"] = (
            "peaks not reset (the counters are not writable here: run the ladder as root "
            "to reset them): they may be an earlier job's; totals before and after beside them"
        )
    return reading


def full_size_flags(
    online: bool, checkpoint_cached: bool
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(extra train flags, notes) of ``4b_native_64ranks`` for what this machine reaches.

    The rung checks what ``reproduce`` needs: C4 streamed from the hub (the 4b preset's
    corpus) and the published Qwen3-4B checkpoint loaded on 64 ranks. Offline it falls
    back to the embedded corpus and random init and says which checks it did not make.
    """
    flags: list[str] = []
    notes: list[str] = []
    if not online:
        flags += ["--corpus", "embedded"]
        notes.append("C4 not checked (no network: HF_HUB_OFFLINE or the hub unreachable)")
    if online or checkpoint_cached:
        flags += ["--init", "pretrained"]
    else:
        flags += ["--init", "random"]
        notes.append("checkpoint load not checked (not in the hub cache and no network)")
    return tuple(flags), tuple(notes)


def _hub_online() -> bool:
    """Can this machine reach the Hugging Face hub? (False whenever HF_HUB_OFFLINE is set.)"""
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0"):
        return False
    import urllib.request

    try:
        urllib.request.urlopen("https://huggingface.co/api/status", timeout=10)  # noqa: S310
    except Exception:  # any failure: treat as offline, and the rung says so
        return False
    return True


def _checkpoint_cached(repo_id: str) -> bool:
    """Is the checkpoint's config in the local hub cache? (Never touches the network.)"""
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:
        return False


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
             "activate the Neuron venv and run scripts/setup.sh from it (README, On Trainium)"),
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
            Rung(
                "4b_native_64ranks",
                "Qwen3-4B layout, 2 steps on 64 ranks",
                3600,
                "the first step compiles for minutes; watch memory with neuron-top",
                train=(
                    "--variant",
                    "native",
                    "--preset",
                    "4b",
                    "--nproc",
                    "64",
                    "--steps",
                    "2",
                ),
            )  # fmt: skip
        )
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
    from .device import detect_device_type

    return detect_device_type()


def _python() -> list[str]:
    return [sys.executable, "-m", "qwen3_trn_helpers.smoke"]


def _command(rung: Rung, out: Path, across: RunSpec | None = None) -> list[str]:
    """The child process of a rung: this module, or qwen3-trn train (torchrun inside).
    ``across``: the nodes the collectives rung spans (``nproc`` ranks on each), or one node."""
    if rung.train:
        return [sys.executable, "-m", "qwen3_trn_helpers", "train", *rung.train,
                "--out", str(out / rung.name), "--overwrite", "--no-progress"]  # fmt: skip
    if rung.name == "collectives":
        if across is None:
            where, nproc = ["--standalone"], 2
        else:  # torchrun's c10d rendezvous, as a job's training launch meets
            where = [f"--nnodes={across.nnodes}", "--rdzv-backend=c10d",
                     f"--rdzv-endpoint={across.rdzv_endpoint}",
                     f"--rdzv-conf=join_timeout={across.rdzv_timeout}"]  # fmt: skip
            nproc = across.nproc  # every rank of every node (64 on a trn2.48xlarge)
        return [sys.executable, "-m", "torch.distributed.run", *where,
                f"--nproc-per-node={nproc}", *_share(nproc), "-m", "qwen3_trn_helpers.smoke",
                rung.name]  # fmt: skip
    return [*_python(), rung.name]


def _share(nproc: int) -> list[str]:
    """torchrun flags that keep a raw torchrun's ranks in the class's share (if any)."""
    from .runs.neuron_cores import share_torchrun_prefix

    return share_torchrun_prefix(nproc)


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
            from .errors import ConfigError

            names = ", ".join(r.name for r in rungs)
            raise ConfigError(f"unknown rung {unknown[0]!r}; the rungs are: {names}")
        rungs = [r for r in rungs if r.name in only]
    ladder = Ladder(rungs)
    on_neuron = _device_type() == "neuron"
    from .runs.neuron_cores import CLASS_SLICE_ENV

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
            from .model.presets import PRESETS

            online = _hub_online()
            extra, rung.notes = full_size_flags(online, _checkpoint_cached(PRESETS["4b"].hub_id))
            rung.train = (*rung.train, *extra)
            before = device_memory_before_rung()  # (peaks reset: this rung's own)
            _climb(rung, out, on_neuron, online=online)
            if rung.memory is not None:  # what the device itself held, by category
                from .trn2 import lnc_from_env

                rung.memory["device"] = device_memory_after_rung(before, lnc_from_env())
        else:
            _climb(rung, out, on_neuron, across=across)
        if echo:
            line = f"{rung.status:<5} {rung.name:<28} {rung.seconds:6.1f}s  {rung.reason}"
            print(line + (f"\n      fix: {rung.fix}" if rung.status == "fail" else ""), flush=True)
    from .training.metrics_file import strict_json

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
    from .errors import ConfigError
    from .runs.rendezvous import check_endpoint_reachable_by_all

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
    from .runs.child import run_child
    from .runs.lifeline import watched
    from .runs.neuron_cores import neuron_rank_environment, one_process_share_environment

    log = out / f"{rung.name}.log"
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    if not online:  # only the full-size rung streams C4 and downloads the checkpoint
        env.setdefault("HF_HUB_OFFLINE", "1")
    if on_neuron:  # the same logical-core size training launches use
        env = neuron_rank_environment(env)
        if not rung.train and rung.name not in ("collectives", "spmd_backends"):
            # one process: the share's first core, not every core it sees
            env = one_process_share_environment(env)
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
        from .runs.torchrun import missing_nodes_message

        rung.status = "fail"  # (this node came, at least)
        rung.reason = missing_nodes_message(across, 1) + f" (log: {log})"
    else:
        rung.status = "fail"
        said = [ln for ln in lines if ln.startswith(("error:", "fail:"))] or lines[-1:]
        rung.reason = (said[-1] if said else f"exit status {proc.returncode}") + f" (log: {log})"


# --- the rungs' bodies, run in child processes -------------------------------------


def _skip(reason: str) -> None:
    print(f"skip: {reason}")
    sys.exit(SKIP)


def _torchtitan_line() -> str:
    """torchtitan's version and folder, and a warning when AWS's fork is installed too."""
    from .stack import torchtitan_stack

    stack = torchtitan_stack()
    line = f"torchtitan {stack.version} from {stack.location}"
    return line + (f"; warning: {stack.warning}" if stack.warning else "")


def rung_environment() -> None:
    import shutil
    from importlib import metadata, util

    missing = []
    if util.find_spec("triton") is None:
        missing.append("triton (torchtitan 0.3.0 imports it)")
    titan = _torchtitan_line()
    if shutil.which("neuron-ls") is None:
        if missing:
            print(f"fail: missing {', '.join(missing)}: pip install triton")
            sys.exit(1)
        _skip(f"no neuron-ls: not a Neuron machine (triton present; {titan})")
    versions = {}
    for package in ("torch-neuronx", "neuronx-cc", "nki"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            missing.append(package)
    for module in (
        "nkilib.core.moe.moe_cte.moe_cte",
        "nkilib.experimental.moe.bwd.blockwise_mm_backward",
    ):
        try:
            __import__(module)
        except Exception as e:  # ImportError, or a kernel module failing at import
            missing.append(f"{module} ({type(e).__name__})")
    if shutil.which("neuronx-cc") is None:  # torch-neuronx looks the compiler up on PATH
        missing.append(
            "neuronx-cc on PATH (activate the Neuron venv, or rerun scripts/setup.sh from it)"
        )
    from .device import neuron_ls_query

    chips, how = neuron_ls_query()
    if not chips:
        missing.append(how if chips is None else f"{how}: no devices listed")
    if missing:
        print(f"fail: missing {'; '.join(missing)}; {titan}")
        sys.exit(1)
    listed = ", ".join(f"{k} {v}" for k, v in versions.items())
    print(f"ok: {len(chips)} chips ({how}); {listed}; triton and nki-library MoE kernels "
          f"import; {titan}")  # fmt: skip


def expected_device_count(chips: int, lnc: int, environ) -> tuple[int, str]:
    """(count, why): what ``torch.neuron.device_count()`` must say in this process.

    torch-neuronx counts the *visible* logical cores (``nrt_get_visible_vnc_count``,
    NeuronDevice.cpp): those ``NEURON_RT_VISIBLE_CORES`` names (a class's share gives
    the one-process rung the share's first core), else every core at the LNC.
    """
    from .runs.neuron_cores import CLASS_SLICE_ENV

    visible = environ.get("NEURON_RT_VISIBLE_CORES")
    if visible:
        count = 0
        for part in visible.split(","):
            first, _, last = part.strip().partition("-")
            count += int(last or first) - int(first) + 1
        share = environ.get(CLASS_SLICE_ENV)
        whose = f"the first core of your share {CLASS_SLICE_ENV}={share}" if share else "named"
        return count, f"NEURON_RT_VISIBLE_CORES={visible}: {whose}"
    return chips * PHYSICAL_CORES_PER_CHIP // lnc, f"{chips} chips at LNC {lnc}"


def rung_registration() -> None:
    import torch
    import torch.distributed as dist

    from .device import privateuse1_backend_name

    name = privateuse1_backend_name()
    if name != "neuron":
        _skip(f"PrivateUse1 backend is {name!r}: torch-neuronx is not loaded here")
    problems = []
    count = torch.neuron.device_count()  # type: ignore[attr-defined]
    from .device import neuron_ls
    from .trn2 import lnc_from_env

    chips = len(neuron_ls() or [])  # 16 on a trn2.48xlarge, 1 on a trn2.3xlarge
    expected, why = expected_device_count(chips, lnc_from_env(), os.environ)
    if count != expected:
        problems.append(f"{count} devices, expected {expected} ({why})")
    if str(torch.accelerator.current_accelerator()) not in ("neuron", "neuron:0"):
        problems.append(f"torch.accelerator is {torch.accelerator.current_accelerator()}")
    backend = dist.Backend.default_device_backend_map.get("neuron")
    if backend != "neuron":
        problems.append(f"process-group backend for neuron is {backend!r}")
    from torchtitan.tools import utils

    if utils.device_type != "neuron":
        problems.append(f"torchtitan chose {utils.device_type!r}")
    if problems:
        print(f"fail: {'; '.join(problems)}")
        sys.exit(1)
    print(f"ok: {count} neuron devices, process group 'neuron', torchtitan on neuron")


def rung_collectives() -> None:
    """Under torchrun, 2 ranks (or one per node): all_reduce, one FSDP2 step of a small
    MLP, all_gather; the first rank of each node says so, naming its node."""
    import gc

    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    from .device import detect_device_type
    from .training.ranks import end_process_groups

    device_type = detect_device_type()
    backend = (
        "gloo" if device_type == "cpu" else dist.Backend.default_device_backend_map.get(device_type)
    )
    dist.init_process_group(backend=backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    if device_type == "cpu":
        device = torch.device("cpu")
    else:  # after init_process_group each rank owns one device, index LOCAL_RANK (or
        # its only one, in a class's share: NEURON_RT_VISIBLE_CORES names one core)
        seen = getattr(torch, device_type).device_count()
        device = torch.device(device_type, int(os.environ.get("LOCAL_RANK", "0")) % seen)
    x = torch.full((4,), float(rank + 1), device=device)
    dist.all_reduce(x)
    expected = world * (world + 1) / 2
    if not torch.allclose(x.cpu(), torch.full((4,), expected)):
        print(f"fail: all_reduce gave {x.cpu().tolist()}, expected {expected}")
        sys.exit(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    model.to(device)
    fully_shard(model)
    # as torchtitan trains: it normalises the loss itself and sets FSDP's divide factor
    # to 1, so gradients are reduce-scattered with PREMUL_SUM (distributed/fsdp.py)
    model.set_gradient_divide_factor(1.0)
    if device_type == "cpu":
        model.set_force_sum_reduction_for_comms(True)  # gloo has no PREMUL_SUM
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = torch.randn(8, 64, device=device)
    loss = model(data).pow(2).mean()
    loss.backward()
    optimizer.step()
    # the step reached every rank's shard: after it, the ranks' losses agree and are finite
    after = model(data).pow(2).mean().detach().reshape(1)
    gathered = [torch.zeros_like(after) for _ in range(world)]
    dist.all_gather(gathered, after)
    nodes = int(os.environ.get("GROUP_WORLD_SIZE", "1"))
    fabric_ok, fabric = True, ""
    if nodes > 1:  # every rank of every node: each node's bus bandwidth, against a floor
        from .runs.fabric import check_here

        fabric_ok, fabric = check_here(device, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    # Every rank done with its collectives, and the sharded model freed, before the
    # process group goes: destroyed right after the all_gather with the model alive, a
    # gloo rank aborted at exit in 3-4 of 12 runs here ("terminate called without an
    # active exception", after the checks had passed); with a barrier, or the model
    # freed first, in none of 10 and 22. Even so the group's C++ threads outlive it: the
    # process then leaves without interpreter shutdown (training/ranks.py leave).
    del model, optimizer, loss
    gc.collect()
    end_process_groups()  # then the process leaves without interpreter shutdown (below)
    values = [g.item() for g in gathered]
    if not all(math.isfinite(v) and v == values[0] for v in values):
        print(f"fail: after one FSDP2 step the ranks' losses differ or are not finite: {values}")
        sys.exit(1)
    node = os.environ.get("GROUP_RANK", "0")
    where = f"node {node} of {nodes} ({socket.gethostname()}): " if nodes > 1 else ""
    if not fabric_ok:  # every rank of the node fails; its first one says why
        if int(os.environ.get("LOCAL_RANK", "0")) == 0:
            print(f"fail: {where}{fabric}")
        sys.exit(1)
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        said = f"{world} ranks on {device_type} ({backend}): all_reduce and an FSDP2 step"
        print(f"ok: {where}{said}" + (f"; {fabric}" if fabric else ""))


def _nki_vs_reference(experts: int, top_k: int, tokens: int = 256) -> tuple[float, str]:
    """(largest relative error, its tensor): NKI op vs reference, forward and gradients,
    at Qwen3-30B-A3B's expert width (H 2048, I 768) and block size 256, for ``tokens``
    tokens (4,096, the preset's sequence, gives the block count training launches)."""
    import torch

    from .model.moe_blockwise import blockwise_experts_reference, blockwise_mapping
    from .model.nki_moe import blockwise_experts_nki

    torch.manual_seed(0)
    T, H, I, E, K, B = tokens, 2048, 768, experts, top_k, 256  # noqa: E741 (the kernel's names)
    ids = torch.stack([torch.randperm(E)[:K] for _ in range(T)])
    scores = torch.softmax(torch.randn(T, K), -1)
    pos, b2e = blockwise_mapping(ids, E, B)
    aff = torch.zeros(T + 1, E).scatter(1, ids, scores)
    x = torch.cat([torch.randn(T, H) * 0.1, torch.zeros(1, H)])
    gate_up = torch.randn(E, H, 2, I) * 0.02
    down = torch.randn(E, I, H) * 0.02
    results = []
    for fn, dev in ((blockwise_experts_reference, "cpu"), (blockwise_experts_nki, "neuron")):
        inputs = [t.to(dev, torch.bfloat16).requires_grad_() for t in (x, aff, gate_up, down)]
        out = fn(*inputs, pos.to(dev), b2e.to(dev), B)
        out.float().pow(2).sum().backward()
        results.append([out.float().cpu()] + [t.grad.float().cpu() for t in inputs])
    names = ("output", "d_hidden", "d_affinities", "d_gate_up", "d_down")
    errors = []
    for name, ref, got in zip(names, *results, strict=True):
        scale = ref.abs().max().item() or 1.0
        errors.append(((ref - got).abs().max().item() / scale, name))
    return max(errors)


def rung_nki_moe_kernel() -> None:
    """The NKI op against the reference: 4 experts (top-2), then Qwen3-30B-A3B's 128
    experts (top-8), the count the 30b-a3b preset trains with, at 256 tokens and at the
    preset's 4,096 (the real block count: 255 blocks of 256)."""
    from .device import detect_device_type

    if detect_device_type() != "neuron":
        _skip("needs a NeuronCore (the NKI kernels run only on Trainium)")
    worst = 0.0
    for experts, top_k, tokens in ((4, 2, 256), (128, 8, 256), (128, 8, 4096)):
        err, name = _nki_vs_reference(experts, top_k, tokens)
        if err > 2e-2:
            print(f"fail: {experts} experts, top-{top_k}, {tokens} tokens: {name} differs "
                  f"from the reference by {err:.2e} (relative)")  # fmt: skip
            sys.exit(1)
        worst = max(worst, err)
    print(f"ok: NKI MoE = reference within {worst:.1e} (relative, bf16), fwd and grads, "
          "4 and 128 experts, 256 and 4,096 tokens")  # fmt: skip


def spmd_backend_command(backend: str, out: Path) -> list[str]:
    """One step of the tiny native model at tensor parallel 2 on 2 ranks, through
    torchtitan's own entry point (our config registry), with ``backend``.

    TP is where the backends differ (torchtitan 0.3.0's Qwen3 parallelize and loss
    branch on it), and the 4b preset trains at TP 4, so the rung uses TP, not FSDP alone.
    """
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc-per-node=2", *_share(2), "-m", "torchtitan.train",
            "--module", "qwen3_trn_helpers",
            "--config", "qwen3_trn_tiny_native", "--training.steps", "1",
            "--parallelism.tensor_parallel_degree", "2",
            "--parallelism.spmd_backend", backend, "--dump_folder", str(out / backend)]  # fmt: skip


def summarize_backends(results: dict[str, tuple[bool, str]], default: str) -> tuple[bool, str]:
    """(passed, line) of the spmd_backends rung: passes when the default backend works."""
    works = [b for b, (ok, _) in results.items() if ok]
    fails = [f"{b} ({why})" for b, (ok, why) in results.items() if not ok]
    line = f"work here: {', '.join(works) or 'none'}"
    if fails:
        line += f"; fail: {'; '.join(fails)}"
    if default in works:
        return True, f"{line}; our default {default!r} works"
    if works:
        return False, f"{line}; our default {default!r} does not: pass --spmd-backend {works[0]}"
    return False, f"{line}; none works: read the rung's log"


def rung_spmd_backends() -> None:
    """Each spmd_backend in turn (one child torchrun each); says which work here."""
    import tempfile

    from .runs.child import run_child
    from .training.spec import SPMD_BACKENDS, RunSpec

    out = Path(tempfile.mkdtemp(prefix="qwen3-trn-spmd-"))
    results: dict[str, tuple[bool, str]] = {}
    for backend in SPMD_BACKENDS:
        proc = run_child(spmd_backend_command(backend, out), timeout=900)
        print(f"--- {backend}: exit status {proc.returncode}\n{proc.output[-9000:]}",
              file=sys.stderr)  # fmt: skip
        results[backend] = (proc.ok, "" if proc.ok else proc.error_line()[:160])
    default = RunSpec().spmd_backend
    passed, line = summarize_backends(results, default)
    print(("ok: " if passed else "fail: ") + line)
    sys.exit(0 if passed else 1)


#: the compile rung's sequence: NKI flash attention, which AWS's compile path exists
#: for, applies only when the sequence is a multiple of 512 and head_dim at most 128
#: (the tiny preset's is 32); the tiny preset's own 256 never reaches it
COMPILE_RUNG_SEQ_LEN = 512


def compile_step_command(out: Path) -> list[str]:
    """One step of the tiny native model, compiled, on one rank (``qwen3-trn train``),
    at a shape that meets NKI flash attention's conditions (causal attention, the trn2
    default: no mask, which the kernel refuses)."""
    return [sys.executable, "-m", "qwen3_trn_helpers", "train", "--preset", "tiny",
            "--seq-len", str(COMPILE_RUNG_SEQ_LEN), "--attention", "causal",
            "--steps", "1", "--compile", "--nproc", "1", "--out", str(out), "--overwrite",
            "--no-progress"]  # fmt: skip


def count_neffs(folder: Path) -> int:
    """Compiled graphs (NEFF files) in TorchNeuron's cache folder."""
    return sum(1 for _ in folder.rglob("*.neff")) if folder.is_dir() else 0


def rung_compile() -> None:
    """The same compiled step twice, with a fresh NEFF cache: the second reads it."""
    import tempfile

    from .runs.child import run_child
    from .training.compile import NEFF_CACHE_VAR, compile_backend

    if _device_type() != "neuron":
        _skip(
            f"needs the neuron device (backend {compile_backend('neuron')!r}); on this "
            f"machine --compile uses {compile_backend(_device_type())!r} "
            "(tests/test_compile.py checks it)"
        )
    out = Path(tempfile.mkdtemp(prefix="qwen3-trn-compile-"))
    env = {**os.environ, NEFF_CACHE_VAR: str(out / "neff-cache")}
    times, neffs = [], []
    for attempt in ("first", "second"):
        proc = run_child(compile_step_command(out / attempt), env=env, timeout=1700)
        print(f"--- {attempt}: exit status {proc.returncode}\n{proc.output[-9000:]}",
              file=sys.stderr)  # fmt: skip
        if not proc.ok:
            print(f"fail: {attempt} compiled step: {proc.error_line()[:200]}")
            sys.exit(1)
        times.append(proc.seconds)
        neffs.append(count_neffs(out / "neff-cache"))
    hit = neffs[1] == neffs[0] and neffs[0] > 0
    line = (
        f"first {times[0]:.1f} s ({neffs[0]} NEFFs compiled), second {times[1]:.1f} s "
        f"({'cache hit: no new NEFF' if hit else f'{neffs[1] - neffs[0]} new NEFFs'})"
    )
    print(("ok: " if hit else "fail: ") + line)
    sys.exit(0 if hit else 1)


RUNG_BODIES = {
    "environment": rung_environment,
    "registration": rung_registration,
    "collectives": rung_collectives,
    "nki_moe_kernel": rung_nki_moe_kernel,
    "spmd_backends": rung_spmd_backends,
    "compile": rung_compile,
}


def climb_here(name: str) -> int:
    """Run one rung's body in this process; its exit status (a body says fail with
    ``sys.exit(1)``, skip with ``sys.exit(SKIP)``)."""
    try:
        RUNG_BODIES[name]()
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return 0


if __name__ == "__main__":
    code = climb_here(sys.argv[1])
    if sys.argv[1] == "collectives":  # its process group's threads must not meet exit
        from .training.ranks import leave

        leave(code)
    sys.exit(code)
