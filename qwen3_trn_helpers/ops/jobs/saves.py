"""How often a job saves a checkpoint and how many it keeps, from what a save costs.

A fixed "every 100 steps, keep 10" fits neither the disk nor the clock at full size:
on the FSx the job files assume (293 MB/s, 1.2 TiB) a synchronous save of Qwen3-4B
takes 165 s, 44% of the wall time at a ~2 s step, and ten checkpoints of Qwen3-30B-A3B
are 3.7 TB. So a job's defaults come from its own figures:

- the checkpoint: 12 bytes per parameter (fp32 weights and AdamW's two moments;
  training/stopping.py ``checkpoint_bytes``);
- the storage's write rate: stated (``--storage-mb-s``), else measured (the run
  folder's own earlier saves, training/save_log.py), else AWS's sample FSx for Lustre
  (1,200 GiB of PERSISTENT_2 at 250 MB/s/TiB: training/stopping.py);
- its free space: stated (``--storage-free-gb``), else measured here (statvfs of the
  run folder's file system, with the run's own checkpoints counted as room) where that
  folder's file system is visible, else the sample FSx's 1,200 GiB;
- the step time: measured (the run folder's metrics.jsonl), else the planner's
  estimate for the job's layout (ops/planner/cost.py); none on a CPU job;
- the job's mean time between failures: its nodes' (``--node-mtbf-hours`` each, by
  default :data:`NODE_MTBF_H`, from Llama 3's published interruptions) divided by
  their number.

The interval is Young/Daly's optimum (Young 1974, "A first order approximation to the
optimum checkpoint interval"; Daly 2006, "A higher order estimate of the optimum
checkpoint interval for restart dumps", first order: sqrt(2 C M) - C for a save of C
seconds and a mean time between failures M), in whole steps. C is the synchronous
write's time in both modes: an asynchronous save blocks training only for its staging
copy (not measured on trn2), but it must finish before the next one starts (torchtitan
waits for it), so the interval never falls below the write; sizing it as if the save
blocked is the longer, safer choice. The saves are asynchronous (torchtitan's
``checkpoint.async_mode=async``: DCP's async_save on a gloo group, staging through the
writer's CPU copy, nothing device-specific in it; ``async_with_pinned_mem`` needs CUDA)
unless ``--checkpoint-async`` says otherwise.

Keep-k: as many as :data:`DISK_SHARE` of the free space holds with one more being
written (torchtitan deletes the oldest only after a save), at most torchtitan's own
default of 10, at least its minimum of 2. A plan or job whose saves would not fit that
way, or would take over :data:`OVERHEAD_LIMIT` of the wall time, is warned about in one
line with the numbers. Cheap to import: no torch.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
from dataclasses import dataclass
from pathlib import Path

from ...training.stopping import FSX_SAMPLE_WRITE_MB_S, checkpoint_bytes

#: Llama 3 (Dubey et al. 2024, "The Llama 3 Herd of Models", sec. 3.3.4): 419 unexpected
#: interruptions in a 54-day snapshot of pre-training on up to 16,384 H100s, 2,048 hosts
#: of 8. One host then fails every 2,048 x 54 x 24 / 419 hours: ~6,300 h. Assumed for a
#: trn2.48xlarge (AWS publishes no failure rate); ``--node-mtbf-hours`` states yours.
NODE_MTBF_H = 2048 * 54 * 24 / 419
NODE_MTBF_SOURCE = "assumed: one of Llama 3's 8-GPU hosts (419 interruptions in 54 days)"
#: the sample FSx's size (GiB): awsome-distributed-training's ParallelCluster template
FSX_SAMPLE_GIB = 1200
#: share of the free space the checkpoints may fill (the rest: metrics, logs, the NEFF
#: cache, other runs)
DISK_SHARE = 0.8
#: saves that block training longer than this share of the wall time are warned about
OVERHEAD_LIMIT = 0.10
#: torchtitan 0.3.0's checkpoint.keep_latest_k default and its least (its Config refuses 1)
TORCHTITAN_KEEP, TORCHTITAN_KEEP_MIN = 10, 2
#: the saves' mode where torchtitan supports it (every device: see the module docstring)
DEFAULT_ASYNC = "async"


def young_daly_s(cost_s: float, mtbf_s: float) -> float:
    """The checkpoint interval (seconds of work between saves) that loses least to saves
    and to the work a failure redoes: Daly's first order, M where C >= 2M."""
    if cost_s >= 2 * mtbf_s:
        return mtbf_s
    return math.sqrt(2 * cost_s * mtbf_s) - cost_s


@dataclass(frozen=True)
class Storage:
    """Where the checkpoints go: its write rate and free space, and where each came from."""

    write_mb_s: float
    write_source: str
    free_bytes: float
    free_source: str


def _free_here(out: str) -> tuple[float, str] | None:
    """Free space of ``out``'s file system as this machine sees it (its nearest existing
    folder), plus what the run's own checkpoints already take; None if nothing exists."""
    path = Path(os.path.abspath(out))
    while not path.exists() and path != path.parent:
        path = path.parent
    if not path.exists() or path == path.parent:
        return None
    free = shutil.disk_usage(path).free
    own = Path(out) / "checkpoint"
    if own.is_dir():  # the run's earlier checkpoints count as room (keep-k purges them)
        free += sum(f.stat().st_size for f in own.rglob("*") if f.is_file())
    return free, f"measured here: free space at {path}"


def storage_for(
    out: str, *, write_mb_s: float | None = None, free_gb: float | None = None,
    visible: bool = True,
) -> Storage:  # fmt: skip
    """The storage a job's ``out`` lies on, from what is stated, measured or assumed.
    ``visible``: the folder's path means the same here (a Slurm script written on the
    cluster), not only in the job's pods."""
    from ...training.save_log import measured_write_mb_s

    sample = f"AWS's sample FSx for Lustre ({FSX_SAMPLE_GIB:,} GiB at 250 MB/s/TiB)"
    if write_mb_s is not None:
        rate, rate_source = write_mb_s, "stated: --storage-mb-s"
    elif (found := measured_write_mb_s(out)) is not None:
        rate, rate_source = found[0], f"measured: this run's {found[1]} earlier save(s)"
    else:
        rate, rate_source = FSX_SAMPLE_WRITE_MB_S, sample
    if free_gb is not None:
        free, free_source = free_gb * 1e9, "stated: --storage-free-gb"
    elif visible and (here := _free_here(out)) is not None:
        free, free_source = here
    else:
        free, free_source = FSX_SAMPLE_GIB * 2**30, sample
    return Storage(rate, rate_source, free, free_source)


def measured_step_s(out: str) -> tuple[float, int] | None:
    """The median step time in run folder ``out``'s metrics.jsonl (and how many steps)."""
    from ...training.metrics_file import read_metrics

    path = Path(out) / "metrics.jsonl"
    if not path.is_file():
        return None
    times = [r["step_time_s"] for r in read_metrics(path) if r.get("step_time_s", 0) > 0]
    return (statistics.median(times), len(times)) if times else None


@dataclass(frozen=True)
class SaveRequest:
    """What a job's command line said about its saves (None: size it)."""

    interval: int | None = None
    keep: int | None = None
    mode: str | None = None
    write_mb_s: float | None = None
    free_gb: float | None = None
    node_mtbf_h: float | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> SaveRequest:
        return cls(_given(args.checkpoint_interval) or None, _given(args.keep_checkpoints),
                   _given(args.checkpoint_async), args.storage_mb_s, args.storage_free_gb,
                   args.node_mtbf_hours)  # fmt: skip


class _UnsetInt(int):
    """A job flag's default the user did not give: the spec's own value (so a spec, its
    checks and its flags see a plain default), told apart here to be sized to the job."""


class _UnsetStr(str):
    """As :class:`_UnsetInt`, for a text flag."""


def _given(value: object) -> object:
    return None if isinstance(value, (_UnsetInt, _UnsetStr)) else value


@dataclass(frozen=True)
class Saves:
    """A job's saves: how often, how many kept, what they cost, and why."""

    checkpoint_bytes: int
    storage: Storage
    step_s: float | None  # None: no estimate (a CPU job)
    step_source: str
    nodes: int
    node_mtbf_h: float
    mode: str  # torchtitan's checkpoint.async_mode
    interval: int  # steps
    interval_source: str
    keep: int
    keep_source: str

    @property
    def write_s(self) -> float:
        return self.checkpoint_bytes / (self.storage.write_mb_s * 1e6)

    @property
    def job_mtbf_s(self) -> float:
        return self.node_mtbf_h * 3600 / self.nodes

    @property
    def interval_s(self) -> float | None:
        return None if self.step_s is None else self.interval * self.step_s

    @property
    def overhead(self) -> float | None:
        """Share of the wall time saves block training: a synchronous save's whole write;
        an asynchronous one's only when the interval is shorter than the write (the next
        save waits for the last; the staging copy is not counted: not measured here)."""
        if self.interval_s is None:
            return None
        waits = max(0.0, self.write_s - self.interval_s)
        blocked = self.write_s if self.mode == "disabled" else waits
        return blocked / (self.interval_s + blocked)

    @property
    def sync_overhead(self) -> float | None:
        """What the same saves would block synchronously (the share async hides)."""
        if self.interval_s is None:
            return None
        return self.write_s / (self.interval_s + self.write_s)

    def cost_words(self) -> str:
        """The saves' cost in words ("" without a step time)."""
        if self.overhead is None or self.sync_overhead is None:
            return ""
        if self.mode == "disabled" or self.overhead > 0:
            return f"~{self.overhead:.1%} of the wall time"
        return (
            f"the write overlaps training (synchronous: ~{self.sync_overhead:.1%} of the "
            "wall time; the staging copy not counted)"
        )

    @property
    def disk_bytes(self) -> float:
        """The kept checkpoints and the one being written."""
        return (self.keep + 1) * self.checkpoint_bytes

    def warnings(self) -> list[str]:
        """One line per problem, with the numbers and the fix."""
        gb = self.checkpoint_bytes / 1e9
        lines = []
        if self.disk_bytes > self.storage.free_bytes * DISK_SHARE:
            lines.append(
                f"warning: saves would fill the disk: {self.keep} kept + 1 being written x "
                f"{gb:,.3g} GB = {self.disk_bytes / 1e9:,.0f} GB, over {DISK_SHARE:.0%} of "
                f"{self.storage.free_bytes / 1e9:,.0f} GB free ({self.storage.free_source}): "
                "free space, or a larger file system (--storage-free-gb states it)"
            )
        if self.overhead is not None and self.overhead > OVERHEAD_LIMIT:
            assert self.step_s is not None and self.interval_s is not None
            # the interval at which they would not: a synchronous save's write is at most
            # OVERHEAD_LIMIT of each cycle; an asynchronous one's fits inside the interval
            room = (1 - OVERHEAD_LIMIT) / OVERHEAD_LIMIT if self.mode == "disabled" else 1
            enough = math.ceil(room * self.write_s / self.step_s)
            fix = f"--checkpoint-interval {enough} or more"
            fix += ", --checkpoint-async async" if self.mode == "disabled" else ""
            lines.append(
                f"warning: saves would take {self.overhead:.0%} of the wall time: a "
                f"{self.write_s:,.0f} s {self.mode if self.mode != 'disabled' else 'sync'} "
                f"save ({gb:,.3g} GB at {self.storage.write_mb_s:,.0f} MB/s, "
                f"{self.storage.write_source}) every {self.interval} steps (~"
                f"{self.interval_s:,.0f} s at {self.step_s:.3g} s a step): {fix}, or faster "
                "storage"
            )
        return lines

    def describe(self) -> list[str]:
        """What the job file says about its saves (comment lines, without the '#')."""
        gb = self.checkpoint_bytes / 1e9
        every = f"every {self.interval} steps ({self.interval_source})"
        if self.interval_s is not None:
            every += f", ~{self.interval_s / 60:,.1f} min at {self.step_s:.3g} s a step"
        cost = f", {self.cost_words()}" if self.cost_words() else ""
        return [
            f"saves: {every}; keep {self.keep} ({self.keep_source}); {self.mode} "
            f"(torchtitan's checkpoint.async_mode){cost}",
            f"  a {gb:,.3g} GB checkpoint, ~{self.write_s:,.0f} s to write at "
            f"{self.storage.write_mb_s:,.0f} MB/s ({self.storage.write_source});",
            f"  {self.disk_bytes / 1e9:,.0f} GB on disk of {self.storage.free_bytes / 1e9:,.0f}"
            f" GB free ({self.storage.free_source});",
            f"  step time: {self.step_source}; mean time between failures "
            f"{self.job_mtbf_s / 3600:,.0f} h ({self.nodes} nodes x "
            f"{self.node_mtbf_h:,.0f} h: {NODE_MTBF_SOURCE if self.node_mtbf_h == NODE_MTBF_H else 'stated'})",  # noqa: E501
        ]

    def row(self, name: str) -> dict[str, object]:
        """One row of the save table (docs/several-nodes.md)."""
        return {
            "model": name,
            "checkpoint GB": float(f"{self.checkpoint_bytes / 1e9:.3g}"),
            "write s": round(self.write_s),
            "step s (est.)": None if self.step_s is None else round(self.step_s, 2),
            "interval steps": self.interval,
            "interval min": None if self.interval_s is None else round(self.interval_s / 60, 1),
            "keep": self.keep,
            "overhead (async)": "-" if self.overhead is None else f"{self.overhead:.1%}",
            "overhead if sync": "-" if self.sync_overhead is None else f"{self.sync_overhead:.1%}",
            "disk GB": round(self.disk_bytes / 1e9),
        }


def size_saves(
    parameters: int, storage: Storage, *, nodes: int, step: tuple[float, str] | None,
    interval: int | None = None, keep: int | None = None, mode: str | None = None,
    node_mtbf_h: float | None = None, fallback_interval: int = 100,
) -> Saves:  # fmt: skip
    """A job's saves, each default sized to it (``interval``, ``keep``, ``mode``: what the
    user gave, else None). ``step``: (seconds, where from), None without an estimate (the
    interval then falls back to ``fallback_interval`` and says so)."""
    nbytes = checkpoint_bytes(parameters)
    mtbf_h = node_mtbf_h or NODE_MTBF_H
    step_s, step_source = step if step else (None, "none for a CPU job")
    write_s = nbytes / (storage.write_mb_s * 1e6)
    if interval is not None:
        interval_source = "as given"
    elif step_s is None:
        interval, interval_source = fallback_interval, "the fixed default: no step time"
    else:
        optimum = young_daly_s(write_s, mtbf_h * 3600 / nodes)
        interval = max(1, math.ceil(max(optimum, write_s) / step_s))
        interval_source = f"Young/Daly: sqrt(2 x {write_s:,.0f} s x MTBF) - {write_s:,.0f} s"
    if keep is not None:
        keep_source = "as given"
    else:
        room = int(storage.free_bytes * DISK_SHARE // nbytes) - 1  # one more being written
        keep = min(TORCHTITAN_KEEP, max(TORCHTITAN_KEEP_MIN, room))
        keep_source = (
            f"what {DISK_SHARE:.0%} of the free space holds, 1 more being written"
            if room < TORCHTITAN_KEEP
            else "torchtitan's default; the disk holds more"
        )
    return Saves(nbytes, storage, step_s, step_source, nodes, mtbf_h, mode or DEFAULT_ASYNC,
                 interval, interval_source, keep, keep_source)  # fmt: skip


def add_save_flags(job: argparse.ArgumentParser) -> None:
    """What a job file's save sizing takes (``slurm``, ``k8s``); ``--checkpoint-interval``,
    ``--keep-checkpoints`` and ``--checkpoint-async`` left out are sized to the job (their
    defaults marked as not given: :class:`_UnsetInt`)."""
    from ...runs.arguments import _number
    from ...training.spec import RunSpec

    number = lambda t: _number(float, 0, t)  # noqa: E731
    names = ("checkpoint_interval", "keep_checkpoints", "checkpoint_async")
    spec_default = {f: RunSpec.__dataclass_fields__[f].default for f in names}  # train's
    job.set_defaults(
        checkpoint_interval=_UnsetInt(spec_default["checkpoint_interval"]),
        keep_checkpoints=_UnsetInt(spec_default["keep_checkpoints"]),
        checkpoint_async=_UnsetStr(spec_default["checkpoint_async"]),
    )
    job.add_argument("--storage-mb-s", type=number, default=None, metavar="MB_S",
                     help="the checkpoint storage's write rate (default: this run's earlier "
                     "saves, else AWS's sample FSx: 293 MB/s)")  # fmt: skip
    job.add_argument("--storage-free-gb", type=number, default=None, metavar="GB",
                     help="free space for checkpoints (default: measured where --out lies, "
                     "else the sample FSx's 1,200 GiB)")  # fmt: skip
    job.add_argument("--node-mtbf-hours", type=number, default=None, metavar="H",
                     help=f"a node's mean time between failures (default {NODE_MTBF_H:,.0f}: "
                     "Llama 3's hosts)")  # fmt: skip
