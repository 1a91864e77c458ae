"""A test double of torch-neuronx (TorchNeuron): the contracts our trn2 code relies on,
executable on a CPU, failing where trn2 would. In tests only; users never get it.

It is a *double*, not an emulator: it computes nothing on a NeuronCore and says nothing
about whether trn2 works. It proves that our code honours the documented behaviour of
torch-neuronx, the Neuron runtime, the driver's sysfs tree and ``neuron-ls``, each rule
taken from a source named beside it (RULES below; docs/testing.md lists them).

How it is installed (:func:`install`) is how torch-neuronx is: a distribution on the
path whose entry points torch reads by itself. A ``fake_torch_neuronx-…dist-info`` in a
temporary folder carries

- ``[torch.backends]``: torch calls it when ``import torch`` runs
  (``torch/__init__.py``, ``_import_device_backends``; TORCH_DEVICE_BACKEND_AUTOLOAD),
  which is how torch-neuronx registers PrivateUse1 as ``neuron`` in every process;
- ``[torch_dynamo_backends] neuron = …``: how torch-neuronx registers its dynamo backend
  (its pyproject; torch/_dynamo/backends/registry.py ``_discover_entrypoint_backends``).

The folder goes on ``PYTHONPATH`` of the processes a test starts (torchrun's ranks
inherit it), so the code under test runs unmodified: no monkeypatching of our package,
nothing a user's process could load.
"""

from __future__ import annotations

#: (rule, source): what the double encodes. Kept here so docs/testing.md's list and the
#: double cannot drift apart unnoticed (tests/e2e/test_torch_neuronx_double.py compares them).
RULES: tuple[tuple[str, str], ...] = (
    (
        "The dynamo backend `neuron` is an entry point of group `torch_dynamo_backends`",
        "torch-neuronx pyproject; torch/_dynamo/backends/registry.py",
    ),
    (
        "The backend refuses a graph holding any ShapeEnv symbol: "
        '"torch-neuronx requires static shapes"',
        "torch-neuronx dynamo backend, preprocess_graph's dynamic-shape analysis; Neuron 2.33 "
        "torch.compile reference (dynamic shapes unsupported)",
    ),
    (
        "A compile failure raises (no eager fallback)",
        "Neuron 2.33: TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION defaults to 1",
    ),
    (
        "PrivateUse1 is renamed `neuron` at `import torch` (backend autoload)",
        "torch/__init__.py _import_device_backends; torch-neuronx's torch.backends entry point",
    ),
    (
        "torch.neuron.device_count() is the visible logical core count "
        "(NEURON_RT_VISIBLE_CORES, else every core at the LNC)",
        "torch-neuronx NeuronDevice.cpp (nrt_get_visible_vnc_count)",
    ),
    (
        "The `neuron` process group sets NEURON_RT_VISIBLE_CORES=LOCAL_RANK only while unset",
        "torch-neuronx distributed/backend.py _set_rt_visible_cores",
    ),
    (
        "Root communicator: a preset NEURON_RT_ROOT_COMM_ID is kept; else rank 0 picks a "
        "free port, shares it through the store, and every rank uses MASTER_ADDR:port",
        "torch-neuronx distributed/backend.py _set_root_comm_id",
    ),
    (
        "Rank 0 binds the root socket at that address: an address not on rank 0's node "
        "fails there, and peers dial it",
        "Neuron runtime guide (nrt-developer-guide: NEURON_RT_ROOT_COMM_ID, the root rank's "
        "address); torch-neuronx _neuron_runtime_setup's barrier",
    ),
    (
        "torchrun's c10d rendezvous ranks nodes in sorted order of their descriptors; "
        "MASTER_ADDR is rank 0's address, not the rendezvous host's",
        "torch/distributed/elastic/rendezvous/dynamic_rendezvous.py (sorted(state.participants))",
    ),
    (
        "sysfs: neuron{d}/neuron_core{c}/stats/memory_usage/device_mem/<category>/"
        "{present,peak}, per physical core (8 per trn2 chip); peaks persist until 0 is "
        "written",
        "aws-neuron-driver neuron_sysfs_metrics.c; Neuron sysfs user guide; torch-neuronx "
        "tests write 0 first",
    ),
    (
        "The driver's version is /sys/module/neuron/version",
        "aws-neuron-driver neuron_module.c MODULE_VERSION",
    ),
    (
        "`neuron-ls -j`/`--json-output` (2.33): a list, one object per chip, nc_count = "
        "logical cores (4 at LNC 2); 2.33 knows no --output-format",
        "Neuron 2.33 neuron-ls user guide",
    ),
    (
        "NEFF cache: <cache>/<hash>/<hash>.neff, default /tmp/neff_cache; a writer holds a "
        "lock that others wait on for TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT s (1200 default)",
        "torch-neuronx NEFF cache source; Neuron 2.33 compiler-artifacts page",
    ),
)
