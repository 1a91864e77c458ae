"""``qwen3-trn smoke``: the ladder a trn2 user runs first, one rung per child process.

Each rung checks one layer of the stack, in the order things break on a new machine:

1. ``environment``: neuron-ls, torch-neuronx / neuronx-cc / nki versions, triton
   (torchtitan imports it unconditionally), nki-library's MoE kernels importable;
2. ``registration``: PrivateUse1 is named ``neuron``, the device count at the
   configured LNC, ``torch.accelerator``, the process-group backend, torchtitan's device;
3. ``collectives``: 2 ranks, an all_reduce and one FSDP2 step on the device (with
   ``--nnodes N --nproc P --rdzv-endpoint HOST:PORT``, run on every node: every rank of
   every node, the fabric between the nodes with each node's bus bandwidth against a
   floor (ops/fabric.py), and only this rung);
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

The package: ``ladder.py`` climbs the rungs (one child process each) and writes
``smoke.json``; ``rungs.py`` and ``launching_rungs.py`` are the bodies the children run
(``python -m qwen3_trn_helpers.ops.smoke RUNG``, ``__main__.py``); ``checks.py`` reads a
training rung's run folder back; ``device_memory.py`` reads the Neuron driver's
device-memory counters around the 64-rank rung.
"""

from .checks import TrainingCheck, check_training_run, full_size_flags, training_memory
from .device_memory import (
    SYSFS_ROOT,
    device_memory_after_rung,
    device_memory_before_rung,
    device_memory_peaks,
    device_memory_totals,
    neuron_driver_version,
    reset_device_memory_peaks,
)
from .ladder import ACROSS_FIX, Ladder, Rung, expectation, run_ladder
from .launching_rungs import (
    COMPILE_RUNG_SEQ_LEN,
    compile_step_command,
    count_neffs,
    spmd_backend_command,
    summarize_backends,
)
from .rungs import SKIP, expected_device_count

__all__ = [
    "ACROSS_FIX",
    "COMPILE_RUNG_SEQ_LEN",
    "SKIP",
    "SYSFS_ROOT",
    "Ladder",
    "Rung",
    "TrainingCheck",
    "check_training_run",
    "compile_step_command",
    "count_neffs",
    "device_memory_after_rung",
    "device_memory_before_rung",
    "device_memory_peaks",
    "device_memory_totals",
    "expectation",
    "expected_device_count",
    "full_size_flags",
    "neuron_driver_version",
    "reset_device_memory_peaks",
    "run_ladder",
    "spmd_backend_command",
    "summarize_backends",
    "training_memory",
]
