"""Per-step metrics: torchtitan's MetricsProcessor, plus a JSON line per completed step.

We time nothing ourselves: torchtitan's ``MetricsProcessor`` measures loss, grad norm,
throughput, step time and memory, and hands them to its loggers (TensorBoard, W&B)
through the ``BaseLogger`` interface. :class:`Qwen3TrnMetrics` is that processor with
one more logger, which appends each step to ``DUMP_FOLDER/metrics.jsonl`` and flushes
it at once, so an interrupted run leaves a valid file holding every completed step.
Because it is part of the trainer config, torchtitan's own entry point
(``python -m torchtitan.train --module qwen3_trn_helpers ...``) writes the same file.

On trn2 it also corrects two readings torchtitan 0.3.0 gets wrong there:

- memory: torch-neuronx's ``memory_stats()`` is nested (``active_bytes: {current,
  peak, ...}``; ``reserved_bytes`` is "currently always 0"), while torchtitan reads flat
  CUDA keys (``active_bytes.all.peak``) and would log -1 B; each rank reads its own
  device's statistics (torch-neuronx keys them by device index);
- MFU: torchtitan's peak for every trn2 device is 2 x 79 TFLOPS whatever the logical
  core size; we use 79 TFLOPS x LNC (``trn2.Topology.peak_tflops_per_core``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchtitan.components.metrics import (
    BaseLogger,
    DeviceMemoryMonitor,
    DeviceMemStats,
    LoggerContainer,
    MetricsProcessor,
)

from ..errors import TrainingError
from .metrics_file import keep_steps_before, strict_json, to_record, write_all, write_failed


class JsonlMetricsLogger(BaseLogger):
    """A torchtitan metrics logger that appends each step to a JSON-lines file.

    At its first step it drops the file's lines for that step and later ones: a fresh
    run (step 1) starts an empty file, and a run resumed from a checkpoint keeps the
    steps before it without repeating the ones it trains again.
    """

    def __init__(self, path: Path, with_mfu: bool = True):
        self.path = Path(path)
        self.with_mfu = with_mfu
        self.on_step: Callable[[dict[str, Any]], None] | None = None
        #: why a memory reading is left out (the rank's memory monitor's note), if any
        self.memory_note: Callable[[], str | None] = lambda: None
        self._fd: int | None = None

    def _open(self, first_step: int) -> None:
        keep_steps_before(self.path, first_step)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def log(self, metrics: dict[str, Any], step: int) -> None:
        if "loss_metrics/global_avg_loss" not in metrics:
            return  # validation metrics have their own keys; not a training step
        if self._fd is None:
            self._open(step)
        record = to_record(step, metrics, self.with_mfu)
        note = self.memory_note()
        if note:  # a reading left out (null) says why, on the line that lacks it
            record["memory_note"] = note
        self._append((strict_json(record) + "\n").encode("utf-8"), step)
        if self.on_step is not None:
            self.on_step(record)

    def _append(self, line: bytes, step: int) -> None:
        """One line, whole and synced, or none: a write that fails part-way (a full
        disk) is cut back off, so the file keeps every step before ``step`` intact."""
        assert self._fd is not None
        size = os.fstat(self._fd).st_size
        try:
            write_all(self._fd, line)
            os.fsync(self._fd)
        except OSError as e:
            try:
                os.ftruncate(self._fd, size)  # (frees space: works on a full disk)
            except OSError:
                pass  # a torn last line is passed over by every reader
            kept = f"it holds every step before step {step}" if step > 1 else "no step done"
            raise TrainingError(write_failed(self.path, e, kept), step=step) from None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def neuron_memory_peaks(stats: dict[str, Any]) -> tuple[int, int]:
    """(peak active bytes, peak held bytes) from torch-neuronx's nested memory_stats().

    torch-neuronx reports ``{"allocated_bytes": {"current", "peak", ...},
    "reserved_bytes": {...}, "active_bytes": {...}, "num_ooms": ...}``; reserved is
    always 0 today, so the memory a run holds is the allocated peak.
    """
    active = int(stats.get("active_bytes", {}).get("peak", -1))
    held = max(
        int(stats.get("reserved_bytes", {}).get("peak", 0)),
        int(stats.get("allocated_bytes", {}).get("peak", -1)),
    )
    return active, held


class NeuronMemoryMonitor(DeviceMemoryMonitor):
    """torchtitan's memory monitor, reading torch-neuronx's nested statistics, and
    trusting none of torch-neuronx's answers to divide by or to stop a run for.

    torchtitan's monitor divides every reading by ``get_device_properties(device)
    .total_memory``. torch-neuronx hands the PyTorch index straight to the runtime
    (NeuronBindings.cpp:389) while the runtime numbers a process's cores from 0, and on
    failure reports ``total_memory = 0`` (:393-400): after ``init_process_group`` every
    rank but local rank 0 reads 0 for its own ``neuron:LOCAL_RANK`` (inferred from the
    source), and torchtitan's percentage divided by it at step 1. Here a capacity of 0,
    or any call that raises, leaves the affected readings NaN (null in metrics.jsonl)
    and says why in :attr:`note`; the run goes on.
    """

    def __init__(self, device: str) -> None:  # (torchtitan's own, each call guarded)
        import torch
        from torchtitan.tools.utils import device_module

        self.device = torch.device(device)
        self.note: str | None = None
        self.device_name = str(self.device)
        self.device_index = self.device.index or 0
        try:
            capacity = int(device_module.get_device_properties(self.device).total_memory)
        except Exception as e:  # an index torch-neuronx refuses, a runtime error
            capacity = 0
            self.note = f"{device}: get_device_properties failed ({_said(e)})"
        if capacity <= 0 and self.note is None:
            self.note = (
                f"{device}: torch-neuronx reported total_memory {capacity} (it asks the "
                "Neuron runtime by PyTorch index, NeuronBindings.cpp:389)"
            )
        self.device_capacity = capacity if capacity > 0 else None
        self.device_capacity_gib = self._to_gib(capacity) if capacity > 0 else math.nan
        if self.note:
            self.note += "; memory percentages are left out"
        try:
            device_module.reset_peak_memory_stats(self.device)
        except Exception as e:
            self.note = _joined(self.note, f"reset_peak_memory_stats failed ({_said(e)})")

    def _to_pct(self, memory: float) -> float:
        if self.device_capacity is None or not math.isfinite(memory):
            return math.nan
        return 100 * memory / self.device_capacity

    def get_peak_stats(self) -> DeviceMemStats:
        from torchtitan.tools.utils import device_module

        try:
            stats = device_module.memory_stats(self.device)
            active, held = neuron_memory_peaks(stats)
        except Exception as e:  # the statistics are a reading; the step stands
            said = f"{self.device}: memory_stats failed ({_said(e)}); memory_gib is null"
            if self.note is None or said not in self.note:
                self.note = _joined(self.note, said)
            return DeviceMemStats(math.nan, math.nan, math.nan, math.nan, 0, 0)
        return DeviceMemStats(
            self._to_gib(active),
            self._to_pct(active),
            self._to_gib(held),
            self._to_pct(held),
            int(stats.get("num_alloc_retries", 0)),
            int(stats.get("num_ooms", 0)),
        )

    def reset_peak_stats(self) -> None:
        from torchtitan.tools.utils import device_module

        try:
            device_module.reset_peak_memory_stats(self.device)
        except Exception:  # the next reading is then a peak over more steps; said once
            pass


def _said(error: BaseException) -> str:
    """An exception as a short phrase for a note (its first line)."""
    first = next((ln.strip() for ln in str(error).splitlines() if ln.strip()), "")
    return f"{type(error).__name__}: {first[:200]}"


def _joined(note: str | None, more: str) -> str:
    return more if note is None else f"{note}; {more}"


def rank_memory_monitor(device_type: str) -> NeuronMemoryMonitor:
    """The memory monitor for this rank's own device (``neuron:LOCAL_RANK``).

    Why: torch-neuronx keys its allocator statistics by the PyTorch device index, and
    each rank trains on the device torchtitan's trainer made current
    (``set_device(get_local_device())``, before the metrics processor is built). A
    monitor fixed at ``neuron:0`` reads device 0's allocator, which only rank 0 uses:
    every other rank would log 0 GiB.
    """
    from torchtitan.tools.utils import device_module

    return NeuronMemoryMonitor(f"{device_type}:{device_module.current_device()}")


class Qwen3TrnMetrics(MetricsProcessor):
    """torchtitan's MetricsProcessor + metrics.jsonl (+ trn2 memory and MFU readings)."""

    @dataclass(kw_only=True, slots=True)
    class Config(MetricsProcessor.Config):
        jsonl_file: str = "metrics.jsonl"
        """File in the dump folder that gets one JSON line per step ('' for none)."""

    def __init__(self, config: Config, *, parallel_dims, dump_folder: str = "./outputs", **kw):
        super().__init__(config, parallel_dims=parallel_dims, dump_folder=dump_folder, **kw)
        import torch.distributed as dist
        from torchtitan.tools.utils import device_type

        from ..device import as_device

        here = as_device(device_type)  # the device torchtitan chose
        if here.is_trn2:
            from ..trn2 import Topology, lnc_from_env

            self.device_memory_monitor = rank_memory_monitor(device_type)
            if self.device_memory_monitor.note:
                from torchtitan.tools.logging import logger

                logger.warning(f"memory readings: {self.device_memory_monitor.note}")
            self.gpu_peak_flops = Topology(lnc_from_env()).peak_tflops_per_core * 1e12
        self.jsonl: JsonlMetricsLogger | None = None
        #: tokens every rank together has trained, as the last logged step counted them
        #: (every rank logs: torchtitan sums the ranks' counts on each)
        self.tokens_seen: int | None = None
        rank0 = not dist.is_initialized() or dist.get_rank() == 0
        if config.jsonl_file and rank0 and not parallel_dims.pp_enabled:
            Path(dump_folder).mkdir(parents=True, exist_ok=True)
            # MFU needs the chip's peak FLOPs, which torchtitan knows for Trainium and
            # GPUs; on a CPU it would divide by an A100's, so it is left out there.
            self.jsonl = JsonlMetricsLogger(
                Path(dump_folder) / config.jsonl_file, with_mfu=here.is_trn2 or here.is_cuda
            )
            monitor = self.device_memory_monitor
            self.jsonl.memory_note = lambda: getattr(monitor, "note", None)
            container = LoggerContainer()
            container.add_logger(self.logger)
            container.add_logger(self.jsonl)
            self.logger = container

    def log(
        self,
        step: int,
        global_avg_loss: float,
        global_max_loss: float,
        grad_norm: float,
        extra_metrics: dict[str, Any] | None = None,
    ) -> None:
        """torchtitan's log; the step's token count over every rank is kept for the
        checkpoint (training/checkpoint.py ``tokens_seen``)."""
        seen = (extra_metrics or {}).get("n_tokens_seen")
        if seen is not None:
            self.tokens_seen = int(seen)
        super().log(step, global_avg_loss, global_max_loss, grad_norm, extra_metrics)
