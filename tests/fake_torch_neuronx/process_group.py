"""The ``neuron`` process-group backend, as torch-neuronx registers and builds it.

torch-neuronx registers the backend ``neuron`` for the device ``neuron`` when it is
imported (distributed/backend.py:53-58, :65: ``dist.Backend.register_backend("neuron",
_create_neuron_process_group, devices=["neuron"])``); the creator returns
``ProcessGroupNeuron``, a *Python subclass of* ``torch.distributed.ProcessGroup``
(:407), which torch then uses as the group itself (torch/distributed/distributed_c10d.py:
2880-2884: "If the type is a subclass of ProcessGroup then return this process group").
The first one built starts the Neuron runtime (:437-440, runtime.py). Its collectives are
Python methods (:506-1553) that lower each operation to an XLA collective compiled by
neuronx-cc and run on the NeuronCores; ``PREMUL_SUM`` is applied to the inputs and sent
as ``SUM`` (distributed/utils.py:60-87), ``AVG`` goes to the device as is (:39-40), and
``barrier`` exists for the default group only (backend.py:1178-1201). torch's functional
collectives (DTensor's, TP's) reach the same methods through ``PyProcessGroup``'s
overrides (torch/csrc/distributed/c10d/py/PyProcessGroup.hpp).

The double's ``ProcessGroupNeuron`` is that class with the same names and rules, whose
fabric is gloo: each collective copies its ``neuron`` tensors to the CPU, runs gloo's
collective on the copies, waits, and copies the results back into the ``neuron`` tensors
(``AVG``, which gloo lacks, as ``SUM`` then a division). So FSDP2 and TP run on ``neuron``
tensors through the ``neuron`` backend, as on trn2; what the fabric does (NeuronLink,
EFA, the XLA lowering, the asynchrony of ``async_op``) is not modelled: every collective
has finished when it returns.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

#: the first group's world size (backend.py:50, :437-440): set once the runtime started
_WORLD_SIZE: int | None = None

#: collectives this process ran on the neuron backend, by name (the record's)
RAN: Counter[str] = Counter()


def _cpu(t: torch.Tensor) -> torch.Tensor:
    """The values of ``t`` on the CPU (a copy for a ``neuron`` tensor), contiguous."""
    return (t.detach().to("cpu") if t.device.type == "neuron" else t.detach()).contiguous()


def _empty_like_cpu(t: torch.Tensor) -> torch.Tensor:
    return torch.empty(t.shape, dtype=t.dtype)


def _flat(groups: list[list[torch.Tensor]]) -> list[torch.Tensor]:
    return [t for group in groups for t in group]


class ProcessGroupNeuron(dist.ProcessGroup):
    """torch-neuronx's ``ProcessGroupNeuron`` (backend.py:407-1574), its collectives on gloo."""

    def __init__(self, store, rank: int, size: int, timeout) -> None:
        super().__init__(rank, size)
        global _WORLD_SIZE
        if _WORLD_SIZE is None:  # backend.py:437-440: the first group starts the runtime
            from .runtime import neuron_runtime_setup

            _WORLD_SIZE = size
            neuron_runtime_setup(rank, size, store)
        self._fabric = dist.ProcessGroupGloo(store, rank, size, timeout)
        self._group_name = "default"

    # --- what torch asks of a ProcessGroup subclass (backend.py:483-498) ---------------
    def getBackendName(self) -> str:  # noqa: N802
        return "neuron"

    def _set_group_name(self, name: str) -> None:
        self._group_name = name

    @property
    def group_name(self) -> str:
        return self._group_name

    def _get_backend(self, device) -> ProcessGroupNeuron:
        return self

    @property
    def _device_types(self) -> list[torch.device]:
        return [torch.device("neuron")]

    # --- the collectives ---------------------------------------------------------------
    def _ran(self, name: str, work, devices=(), results=(), divide: int | None = None):
        """Wait for gloo's ``work``, copy each CPU result back into its device tensor."""
        work.wait()
        for dev, cpu in zip(devices, results, strict=True):
            dev.copy_(cpu / divide if divide else cpu)
        RAN[name] += 1
        if RAN[name] == 1:
            _record()
        return work

    def _reduce_op(self, tensors: list[torch.Tensor], opts) -> tuple[list, int | None]:
        """PREMUL_SUM applied to the inputs, sent as SUM (utils.py:72-85); AVG as SUM and
        a division (gloo has no AVG; torch-neuronx sends AVG to the device, utils.py:39)."""
        op = opts.reduceOp
        if op == dist.ReduceOp.PREMUL_SUM:
            _, factor = op.__getstate__()
            opts.reduceOp = dist.ReduceOp.SUM
            return [t * factor for t in tensors], None
        if op == dist.ReduceOp.AVG:
            opts.reduceOp = dist.ReduceOp.SUM
            return tensors, self.size()
        return tensors, None

    def allreduce(self, tensors, opts=None):
        tensors = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
        opts = opts or dist.AllreduceOptions()
        sources, divide = self._reduce_op(tensors, opts)
        cpu = [_cpu(t).clone() for t in sources]
        return self._ran("allreduce", self._fabric.allreduce(cpu, opts), tensors, cpu, divide)

    def allreduce_coalesced(self, tensors, opts=None):
        opts = opts or dist.AllreduceCoalescedOptions()
        sources, divide = self._reduce_op(list(tensors), opts)
        cpu = [_cpu(t).clone() for t in sources]
        work = self._fabric.allreduce_coalesced(cpu, opts)
        return self._ran("allreduce_coalesced", work, tensors, cpu, divide)

    def all_gather_single(self, output, input, opts=None):
        cpu_out = _empty_like_cpu(output)
        work = self._fabric._allgather_base(cpu_out, _cpu(input), opts or dist.AllgatherOptions())
        return self._ran("all_gather_single", work, [output], [cpu_out])

    _allgather_base = all_gather_single

    def allgather(self, outputs, inputs, opts=None):
        cpu_outs = [[_empty_like_cpu(t) for t in group] for group in outputs]
        work = self._fabric.allgather(cpu_outs, [_cpu(t) for t in inputs],
                                      opts or dist.AllgatherOptions())  # fmt: skip
        return self._ran("allgather", work, _flat(outputs), _flat(cpu_outs))

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        cpu_outs = [_empty_like_cpu(t) for t in outputs]
        work = self._fabric.all_gather_single_coalesced(
            cpu_outs, [_cpu(t) for t in inputs], opts or dist.AllgatherOptions()
        )
        return self._ran("all_gather_single_coalesced", work, outputs, cpu_outs)

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def reduce_scatter_single(self, output, input, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        (source,), divide = self._reduce_op([input], opts)
        cpu_out = _empty_like_cpu(output)
        work = self._fabric._reduce_scatter_base(cpu_out, _cpu(source), opts)
        return self._ran("reduce_scatter_single", work, [output], [cpu_out], divide)

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter(self, outputs, inputs, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        flat, divide = self._reduce_op([t for group in inputs for t in group], opts)
        it = iter(flat)
        cpu_in = [[_cpu(next(it)) for _ in group] for group in inputs]
        cpu_outs = [_empty_like_cpu(t) for t in outputs]
        work = self._fabric.reduce_scatter(cpu_outs, cpu_in, opts)
        return self._ran("reduce_scatter", work, outputs, cpu_outs, divide)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        sources, divide = self._reduce_op(list(inputs), opts)
        cpu_outs = [_empty_like_cpu(t) for t in outputs]
        work = self._fabric.reduce_scatter_single_coalesced(
            cpu_outs, [_cpu(t) for t in sources], opts
        )
        return self._ran("reduce_scatter_single_coalesced", work, outputs, cpu_outs, divide)

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    def broadcast(self, tensors, opts=None):
        cpu = [_cpu(t).clone() for t in tensors]
        work = self._fabric.broadcast(cpu, opts or dist.BroadcastOptions())
        return self._ran("broadcast", work, tensors, cpu)

    def reduce(self, tensors, opts=None):
        opts = opts or dist.ReduceOptions()
        sources, divide = self._reduce_op(list(tensors), opts)
        cpu = [_cpu(t).clone() for t in sources]
        return self._ran("reduce", self._fabric.reduce(cpu, opts), tensors, cpu, divide)

    def alltoall(self, outputs, inputs, opts=None):
        cpu_outs = [_empty_like_cpu(t) for t in outputs]
        work = self._fabric.alltoall(cpu_outs, [_cpu(t) for t in inputs],
                                     opts or dist.AllToAllOptions())  # fmt: skip
        return self._ran("alltoall", work, outputs, cpu_outs)

    def all_to_all_single(self, output, input, output_splits, input_splits, opts=None):
        cpu_out = _empty_like_cpu(output)
        work = self._fabric.alltoall_base(cpu_out, _cpu(input), output_splits, input_splits,
                                          opts or dist.AllToAllOptions())  # fmt: skip
        return self._ran("all_to_all_single", work, [output], [cpu_out])

    alltoall_base = all_to_all_single

    def gather(self, outputs, inputs, opts=None):
        cpu_outs = [[_empty_like_cpu(t) for t in group] for group in outputs]
        work = self._fabric.gather(cpu_outs, [_cpu(t) for t in inputs],
                                   opts or dist.GatherOptions())  # fmt: skip
        return self._ran("gather", work, _flat(outputs), _flat(cpu_outs))

    def scatter(self, outputs, inputs, opts=None):
        cpu_outs = [_empty_like_cpu(t) for t in outputs]
        cpu_in = [[_cpu(t) for t in group] for group in inputs]
        work = self._fabric.scatter(cpu_outs, cpu_in, opts or dist.ScatterOptions())
        return self._ran("scatter", work, outputs, cpu_outs)

    def barrier(self, opts=None):
        if dist.get_world_size() != self.size():  # backend.py:1192-1195
            raise NotImplementedError(
                f"Barrier is implemented only for default group, called barrier on {self}"
            )
        return self._ran("barrier", self._fabric.barrier(opts or dist.BarrierOptions()))

    def monitored_barrier(self, *args: Any):  # backend.py:1558-1559
        raise NotImplementedError

    def recv_anysource(self, *args: Any):  # backend.py:1555-1556
        raise NotImplementedError


def create_neuron_process_group(store, rank: int, size: int, timeout) -> ProcessGroupNeuron:
    """The creator torch calls for ``init_process_group("neuron")`` and each new group
    on the backend (backend.py:53-54)."""
    return ProcessGroupNeuron(store, rank, size, timeout)


def _record() -> None:
    """Write what collectives ran into the record folder, as each first runs (a rank may
    leave with ``os._exit``, training/ranks.py ``leave``: no atexit)."""
    folder = os.environ.get("FAKE_TORCH_NEURONX_RECORD")
    if folder:
        rank = os.environ.get("RANK", "0")
        Path(folder, f"collectives_rank{rank}.json").write_text(json.dumps(RAN))
