"""Which NeuronCores a process sees: a class's share of a trn2, and each rank's core.

The Neuron runtime reads ``NEURON_RT_VISIBLE_CORES`` when it starts and reserves the
cores it names; torch-neuronx fills it from LOCAL_RANK only while it is unset. Every
child this package starts on trn2 (torchrun's ranks, a lesson's one-process child,
torchtitan's own entry point) gets its environment from here, so a student given
``QWEN3_TRN_NEURON_CORES=8-15`` stays inside those eight cores whatever they run.
"""

from __future__ import annotations

import os
import sys

from ..errors import ConfigError

# a student's share of a trn2 is read in planning (training/class_share.py), and the
# launch takes the cores the plan holds; its names stay importable from here
from ..training.class_share import CLASS_SLICE_ENV as CLASS_SLICE_ENV
from ..training.class_share import with_class_slice as with_class_slice
from ..training.spec import RunSpec
from ..trn2 import DEFAULT_LNC


def one_process_share_environment(env: dict[str, str]) -> dict[str, str]:
    """``env`` for one training process started without torchrun, in a student's share.

    torchtitan's own entry point run as a plain child (notebook 02) has no LOCAL_RANK
    for torch-neuronx to place it by, and the Neuron runtime would reserve every core
    it sees; with a share it gets the share's first core, as a one-rank launch does.
    """
    share = env.get(CLASS_SLICE_ENV)
    if not share:
        return env
    from ..trn2 import core_slice

    try:
        first = core_slice(share).start
    except ValueError as e:
        raise ConfigError(f"{CLASS_SLICE_ENV}: {e}") from None
    return {**env, "NEURON_RT_VISIBLE_CORES": str(first)}


def confine_rank_to_its_core(spec: RunSpec, environ: dict[str, str] | None = None) -> str:
    """In a rank torchrun started: ``NEURON_RT_VISIBLE_CORES`` = the slice's first + LOCAL_RANK.

    torchrun gives every rank the same environment, so a per-rank value can only be set
    inside the rank. The Neuron runtime reads the variable when it starts (the Neuron
    runtime configuration guide: each process reserves the cores it names), and
    torch-neuronx fills it with LOCAL_RANK only while it is unset; so this runs first
    thing in the rank, before torch (which autoloads torch-neuronx) is imported. With
    ``--neuron-cores 8-15`` rank i gets core 8 + i: the same one-core-per-rank layout
    torch-neuronx makes by default, moved to the class member's slice. Returns the core.
    """
    environ = os.environ if environ is None else environ
    from ..training.ranks import rank_place
    from ..trn2 import rank_visible_core

    spec.core_slice()  # the slice must hold exactly this node's ranks
    core = rank_visible_core(spec.neuron_cores, rank_place(environ).local_rank)
    environ["NEURON_RT_VISIBLE_CORES"] = core
    return core


def neuron_rank_environment(env: dict[str, str], neuron_cores: str | None = None) -> dict[str, str]:
    """What every Neuron rank needs, for training launches and the smoke ladder alike.

    - The logical-core size is set explicitly: NKI kernels default to LNC 1 while the
      compiler defaults to LNC 2 (a compile error when they differ).
    - NEURON_RT_VISIBLE_CORES is removed: torch-neuronx gives each rank its own core
      (NEURON_RT_VISIBLE_CORES = LOCAL_RANK) when the process group starts, but only if
      the variable is unset; a value such as "0-63" inherited from a shell would give
      every rank all 64 cores and fail its one-device-per-process check. With
      ``neuron_cores`` (``--neuron-cores 8-15``) each rank sets its own core from its
      LOCAL_RANK (:func:`confine_rank_to_its_core`).
    - The NEFF cache's lock timeout covers a full-size first compile (1200 s by
      default in torch-neuronx; training/compile.py), unless the user set one.
    - The compiled-graph (NEFF) cache folder is set, unless the user or a multi-node
      job script (shared storage, the same folder on every node) already did: the
      package cache's, so every launch on this node reuses what earlier ones compiled
      (training/compile.py).
    """
    from ..device import DEVICES
    from ..training.compile import (
        NEFF_CACHE_LOCK_TIMEOUT_S,
        NEFF_CACHE_LOCK_TIMEOUT_VAR,
        use_package_caches,
    )

    env = dict(env)
    env.setdefault("NEURON_LOGICAL_NC_CONFIG", str(DEFAULT_LNC))
    env.setdefault(NEFF_CACHE_LOCK_TIMEOUT_VAR, str(NEFF_CACHE_LOCK_TIMEOUT_S))
    use_package_caches(DEVICES["neuron"], env)
    visible = env.pop("NEURON_RT_VISIBLE_CORES", None)
    if visible:
        where = (
            f"rank i takes core {neuron_cores.partition('-')[0]}+i of --neuron-cores {neuron_cores}"
            if neuron_cores
            else "torch-neuronx gives rank i core i itself (--neuron-cores FIRST-LAST "
            "confines a run to a slice)"
        )
        print(
            f"note: NEURON_RT_VISIBLE_CORES={visible} is not passed to the ranks; {where}",
            file=sys.stderr,
        )
    return env


def share_torchrun_prefix(nproc: int, env: dict[str, str] | None = None) -> list[str]:
    """torchrun flags that start each rank inside the class's share, or [] without one.

    For a torchrun whose ranks are not ``qwen3-trn train`` (the smoke ladder's raw
    collectives, torchtitan's own entry point): torchrun gives every rank the same
    environment, so each rank sets its own core in a one-line shell before Python
    starts (torchrun's ``--no-python``): the share's first core + LOCAL_RANK, the
    layout :func:`confine_rank_to_its_core` makes for our own ranks. Put it where
    torchrun expects its script; the caller's ``-m module args`` follow as the
    interpreter's arguments.
    """
    env = os.environ if env is None else env
    share = env.get(CLASS_SLICE_ENV)
    if not share:
        return []
    from ..trn2 import core_slice

    try:
        cores = core_slice(share)
    except ValueError as e:
        raise ConfigError(f"{CLASS_SLICE_ENV}: {e}") from None
    if nproc > len(cores):
        raise ConfigError(
            f"this step starts {nproc} ranks but your share of the trn2 ({CLASS_SLICE_ENV}="
            f"{share}) holds {len(cores)} NeuronCores: ask for a share of {nproc} or more"
        )
    line = f'export NEURON_RT_VISIBLE_CORES=$(( {cores.start} + LOCAL_RANK )); exec "$@"'
    return ["--no-python", "bash", "-c", line, "rank", sys.executable]
