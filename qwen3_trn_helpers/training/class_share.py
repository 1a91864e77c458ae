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
