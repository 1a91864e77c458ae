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

#: where the torch-neuronx sources cited below are: the public repository
#: parmoham-aws/test-repo-parmoham at commit 98154b8 (a torch-neuronx tree older than
#: SDK 2.33), paths under torch_neuronx/ (C++ under torch_neuronx/csrc/core/)
TORCH_NEURONX_SOURCE = "parmoham-aws/test-repo-parmoham@98154b8"

#: (rule, source, what our code does): what the double encodes, each rule with the
#: lines it is read from. Kept here so the documentation's table and the double cannot
#: drift apart unnoticed (tests/e2e/test_torch_neuronx_double.py compares them with
#: docs/testing.md).
RULES: tuple[tuple[str, str, str], ...] = (
    (
        "The dynamo backend `neuron` is an entry point of group `torch_dynamo_backends`",
        "torch-neuronx pyproject.toml:17-18; torch/_dynamo/backends/registry.py "
        "_discover_entrypoint_backends",
        "`--compile` on trn2 names backend `neuron` (training/compile.py)",
    ),
    (
        "The backend refuses a graph holding any ShapeEnv symbol: "
        '"torch-neuronx requires static shapes"',
        "neuron_dynamo_backend/fx/passes/dynamic_shape_analysis.py:60-77, :118",
        "compiled document attention is refused in planning; sizes stay static on "
        "neuron (training/compile.py static_shapes)",
    ),
    (
        "A compile failure raises (no eager fallback)",
        "neuron_dynamo_backend/backend.py:246-249 (execution failures fall back unless "
        "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION, :236-242; Neuron 2.33: 1 by default)",
        "a failed compiled step fails the run, its rung says so",
    ),
    (
        "PrivateUse1 is renamed `neuron` at `import torch` (backend autoload)",
        "torch-neuronx pyproject.toml:14-15, __init__.py:117-128; torch/__init__.py "
        "_import_device_backends",
        "device detection asks torch's registry, never imports torch_neuronx (device.py)",
    ),
    (
        "Before init_process_group, device_count() is the visible logical cores "
        "(NEURON_RT_VISIBLE_CORES, else every core at the LNC); after it, the local world "
        "size, and only neuron:LOCAL_RANK may hold memory: another index raises "
        '"Attempted to access device that doesn\'t attach to this process"',
        "NeuronDevice.cpp:189-211, :213-236; NeuronCachingAllocator.cpp:49-50; "
        "tests/distributed/device/test_multi_device_with_distributed.py:59-60, :185-188",
        "every rank trains on neuron:LOCAL_RANK; a class share's core is claimed as the "
        "process group starts (training/class_share.py claim_rank_core)",
    ),
    (
        "set_device(i) is refused outside 0..device_count()-1 and outside this process's "
        "own range (after init: LOCAL_RANK only)",
        "__init__.py:196-206; NeuronDevice.cpp:126-145",
        "torchtitan's set_device(neuron:LOCAL_RANK) before init; a refusal is one line "
        "with the fix (training/neuron_faults.py)",
    ),
    (
        "get_device_properties(i) takes the PyTorch index to the runtime unmapped; off "
        "this process's own core it reports total_memory 0 (the runtime numbers a "
        "process's cores from 0: inferred)",
        "__init__.py:209-238; NeuronBindings.cpp:376-404 (:389 the raw index, :393-400 "
        "total_memory = 0)",
        "the memory monitor divides by no 0: percentages NaN, memory_note in "
        "metrics.jsonl (training/metrics.py)",
    ),
    (
        'The runtime must not start before init_process_group ("Neuron runtime should '
        'not be initialized before the init_process_group."); a tensor on `neuron` or '
        "get_device_properties starts it",
        "distributed/backend.py:292-295, :307; __init__.py:235-236",
        "ranks make no neuron tensor before the process group; the kernel holds no core",
    ),
    (
        'One visible core per process in a process group ("Attempted to have more than '
        'one device per process in distributed setup")',
        "distributed/backend.py:309-312",
        "NEURON_RT_VISIBLE_CORES is never passed to ranks (runs/neuron_cores.py)",
    ),
    (
        "The `neuron` process group sets NEURON_RT_VISIBLE_CORES=LOCAL_RANK only while unset",
        "distributed/backend.py:205-219",
        "runs/neuron_cores.py removes an inherited value; a share names one core per rank",
    ),
    (
        "Root communicator: a preset NEURON_RT_ROOT_COMM_ID is kept; else rank 0 picks a "
        "free port, shares it through the store, and every rank uses MASTER_ADDR:port",
        "distributed/backend.py:270-289",
        "no job file pins NEURON_RT_ROOT_COMM_ID (ops/jobs)",
    ),
    (
        "The root address is rank 0's (documented); rank 0 binds it there, an address "
        "not on rank 0's node fails there, and peers dial it (inferred)",
        "aws-neuron-sdk neuron-runtime/guides/nrt-developer-guide.rst:1062-1064, "
        "tools/neuron-sys-tools/nccom-test.rst:329, archive/nxd-training/"
        "training-troubleshooting.rst:320-335; distributed/backend.py:314-315",
        "MASTER_ADDR stays torchrun's (rank 0's node)",
    ),
    (
        "torchrun's c10d rendezvous ranks nodes in sorted order of their descriptors; "
        "MASTER_ADDR is rank 0's address, not the rendezvous host's",
        "torch/distributed/elastic/rendezvous/dynamic_rendezvous.py (sorted(state.participants))",
        "(torch's own rule: the double runs torchrun itself)",
    ),
    (
        "The process-group backend `neuron` is registered at import for the device "
        "`neuron`; its class is a Python ProcessGroup subclass used as the group itself; "
        "PREMUL_SUM is applied to the inputs and sent as SUM; barrier is the default "
        "group's only. The double's collectives run on gloo over CPU copies",
        "distributed/backend.py:53-58, :65, :407-498, :1178-1201; distributed/utils.py:"
        "60-87; torch/distributed/distributed_c10d.py:2880-2884",
        "FSDP2 and TP run on `neuron` tensors through it; gloo-only fixes stay off on neuron",
    ),
    (
        "memory_stats(i) is nested ({current, peak, ...} per kind; reserved always 0), "
        "keyed by the PyTorch index",
        "memory.py:13-54; NeuronBindings.cpp:1239-1251",
        "training/metrics.py reads the nested keys of neuron:LOCAL_RANK",
    ),
    (
        "neuronx-cc is run through PATH (execvp) for every graph and every eager operator "
        'first run; not found: "Command failed (neuronx-cc compilation) with exit code 127"',
        "NeuronCompiler.cpp:29, :41, :157-159, :178-190, :235-256",
        "every Neuron child gets the venv's bin on PATH where setup linked neuronx-cc "
        "(trn2.with_neuron_compiler); the device report says where it is",
    ),
    (
        "sysfs: neuron{d}/neuron_core{c}/stats/memory_usage/device_mem/<category>/"
        "{present,peak}, per physical core (8 per trn2 chip); peaks persist until 0 is "
        "written",
        "aws-neuron-driver neuron_sysfs_metrics.c; Neuron sysfs user guide; torch-neuronx "
        "tests write 0 first",
        "the 64-rank rung resets and reads them; unreadable or moved: null with a reason",
    ),
    (
        "The driver's version is /sys/module/neuron/version",
        "aws-neuron-driver neuron_module.c MODULE_VERSION",
        "recorded beside the device-memory reading (ops/smoke/device_memory.py)",
    ),
    (
        "`neuron-ls -j`/`--json-output` (2.33): a list, one object per chip, nc_count = "
        "logical cores (4 at LNC 2); 2.33 knows no --output-format",
        "Neuron 2.33 neuron-ls user guide",
        "device.py tries the newer flag first; no answer is a reason, never a crash",
    ),
    (
        "NEFF cache: <cache>/<key[:2]>/<key[2:4]>/<key>.neff, default /tmp/neff_cache; the "
        "compile lock is <local>/locks/<key>.lock, <local> node-local (default "
        "/tmp/local_cache, shared by every user); a lock held past "
        "TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT s (1200 default) is broken as stale",
        "PersistentCacheBackend.cpp:22-28, :61-65; CompilationCache.cpp:41-58, :505-554, "
        ":617-621; FileLock.h:16; FileLock.cpp:49-66, :90-94, :141-167",
        "ranks wait 3600 s; each user's ranks get a lock folder of their own (training/compile.py)",
    ),
)
