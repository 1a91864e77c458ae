"""A student's share of a trn2 used by a class: the NeuronCores a run takes from it.

Read in planning (``plan_run``), so a bad share, or a run with more ranks than the
share holds, fails in one line before anything launches; the launch then confines its
ranks to the cores the plan holds (``Plan.neuron_cores``).
"""

from __future__ import annotations

import os

from ..errors import ConfigError
from .spec import RunSpec

#: a student's share of a trn2 used by a class (e.g. "8-15"), for runs that name none
CLASS_SLICE_ENV = "QWEN3_TRN_NEURON_CORES"


def with_class_slice(spec: RunSpec, environ: dict[str, str] | None = None) -> RunSpec:
    """``spec`` with ``neuron_cores`` taken from the student's slice, when it names none.

    A class sharing one trn2 gives each student a slice of NeuronCores once, in their
    environment (``QWEN3_TRN_NEURON_CORES=8-15``); every run the notebooks start (one
    rank, two ranks) then takes the first ``nproc`` cores of it, and a run that needs
    more ranks than the slice holds is refused before it starts, naming the slice.
    """
    environ = os.environ if environ is None else environ
    share = environ.get(CLASS_SLICE_ENV)
    if spec.neuron_cores is not None or not share:
        return spec
    from ..trn2 import core_slice

    try:
        cores = core_slice(share)
    except ValueError as e:
        raise ConfigError(f"{CLASS_SLICE_ENV}: {e}") from None
    if spec.nproc > len(cores):
        raise ConfigError(
            f"this run starts {spec.nproc} ranks but your share of the trn2 "
            f"({CLASS_SLICE_ENV}={share}) holds {len(cores)} NeuronCores: run it with "
            f"--nproc {len(cores)} or less, or on a trn2 of your own"
        )
    # (replace() checks the new spec, as every RunSpec is checked when made)
    return spec.replace(neuron_cores=f"{cores.start}-{cores.start + spec.nproc - 1}")


#: the NeuronCore one rank of a class's share takes, set in the rank by the launch
#: (runs/neuron_cores.py) and claimed by the rank itself as its process group starts
RANK_CORE_ENV = "QWEN3_TRN_RANK_NEURON_CORE"


def claim_rank_core(environ: dict[str, str] | None = None) -> str | None:
    """Right before ``init_process_group``: ``NEURON_RT_VISIBLE_CORES`` = this rank's core.

    Why then, not when the rank starts: before the process group, torch-neuronx counts
    the visible cores as devices (NeuronDevice.cpp:228-236), so a rank that sees one
    core is given ``neuron:0`` by torchtitan (tools/utils.py:89: one device means index
    0) and ``set_device(LOCAL_RANK)`` would be refused; the process group then binds the
    rank to ``neuron:LOCAL_RANK`` (distributed/backend.py:303), and a tensor on
    ``neuron:0`` fails on every rank but the first ("Attempted to access device that
    doesn't attach to this process", NeuronDevice.cpp:204-207). With nothing named
    before, the rank sees the whole instance, takes ``neuron:LOCAL_RANK``; the runtime
    reads the variable when the process group starts it (backend.py:216-218, :307),
    so the rank still holds its own core only. Returns the core, or None without one.
    """
    environ = os.environ if environ is None else environ
    core = environ.pop(RANK_CORE_ENV, None)
    if core:
        environ["NEURON_RT_VISIBLE_CORES"] = core
    return core
