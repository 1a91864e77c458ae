"""torch-neuronx's refusals, as one line naming the problem and the fix.

torch-neuronx stops a run with its own words, raised deep inside torchtitan's trainer
(a device index, the runtime's start, the compiler); the user would read "unexpected
ValueError: Attempted to access device ..." with no hint of what to change. Each entry
below is one such message, from torch-neuronx's source, with what to do about it.
"""

from __future__ import annotations

#: (words torch-neuronx says, what it means here and the fix)
FAULTS: tuple[tuple[str, str], ...] = (
    (
        # NeuronDevice.cpp:204-207 (get_vnc_id), :198-201, :130-134; __init__.py:204
        "Attempted to access device that doesn't attach to this process",
        "after init_process_group each rank may use only neuron:LOCAL_RANK "
        "(torch-neuronx binds it there); NEURON_RT_VISIBLE_CORES must name nothing, or "
        "one core per rank set as the process group starts: unset it, and confine a run "
        "to a share of the trn2 with --neuron-cores FIRST-LAST",
    ),
    (
        "is out of range. Valid range is",
        "a rank asked for a NeuronCore it does not hold: each rank uses neuron:LOCAL_RANK "
        "once its process group starts; unset NEURON_RT_VISIBLE_CORES (or use "
        "--neuron-cores FIRST-LAST for a share of the trn2)",
    ),
    (
        # distributed/backend.py:293-295
        "Neuron runtime should not be initialized before the init_process_group",
        "something touched the neuron device (a tensor, get_device_properties) before "
        "the process group started, which starts the Neuron runtime on every core this "
        "process sees; torch-neuronx refuses that: start the process group first",
    ),
    (
        # distributed/backend.py:310-312
        "Attempted to have more than one device per process",
        "this rank sees several NeuronCores (NEURON_RT_VISIBLE_CORES names more than "
        "one), and torch-neuronx allows one per process in a process group: unset "
        "NEURON_RT_VISIBLE_CORES, or use --neuron-cores FIRST-LAST",
    ),
    (
        # NeuronCompiler.cpp:157-159, :178-190 (execvp through PATH, exit 127)
        "Command failed (neuronx-cc compilation) with exit code 127",
        "torch-neuronx could not run neuronx-cc: it is not on this process's PATH. "
        "Activate the Neuron venv (or start Jupyter from the activated venv); "
        "scripts/setup.sh, run from the Neuron venv, links neuronx-cc into .venv/bin",
    ),
    (
        # FileLock.cpp:90-94: another user's lock file in the shared lock folder
        "Failed to open lock file",
        "torch-neuronx could not open its compile lock, most likely another user's in "
        "the node's shared /tmp/local_cache: set TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR to a "
        "folder of your own (the runs qwen3-trn starts get one)",
    ),
)


def neuron_fault(error: BaseException) -> str | None:
    """One line for an error torch-neuronx raised (anywhere in its chain), or None."""
    seen, chain = set(), error
    while chain is not None and id(chain) not in seen:
        seen.add(id(chain))
        text = str(chain)
        for words, fix in FAULTS:
            if words in text:
                said = next((ln.strip() for ln in text.splitlines() if words in ln), words)
                return f"torch-neuronx: {said[:300]}: {fix}"
        chain = chain.__cause__ or chain.__context__
    return None
