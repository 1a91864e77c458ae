"""A CPU run keeps freed memory in the heap while it trains (training/host_memory.py).

Measured in a new process each: whether glibc reuses a freed block depends on what the
heap already holds, and a test worker's heap holds the freed memory of earlier tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from qwen3_trn_helpers.training import host_memory

pytestmark = pytest.mark.skipif(host_memory._glibc() is None, reason="glibc's malloc only")

BLOCK = 64 * 2**20  # over glibc's largest mmap threshold (32 MiB): mmapped by default

#: minor page faults of 4 same-sized blocks, each freed before the next (a training
#: step's logits, allocated again by the next step), after 10 such blocks: torch asks
#: for each block aligned, so glibc reaches the state in which it reuses one after a few
MEASURE = """
import json, resource, sys, torch
from qwen3_trn_helpers.training import host_memory

def faults(block):
    for _ in range(10):
        torch.ones(block // 4)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(4):
        torch.ones(block // 4)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

block = int(sys.argv[1])
result = {"default": faults(block)}
with host_memory.keep_freed_memory_while_training() as kept:
    result["kept"], result["in_run"] = kept, faults(block)
host_memory.release_freed_memory()
result["after"] = faults(4 * block)  # larger than any block the heap kept for reuse
print(json.dumps(result))
"""


def measure(**environment: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.pop("GLIBC_TUNABLES", None)
    out = subprocess.run(
        [sys.executable, "-c", MEASURE, str(BLOCK)], env={**env, **environment},
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    return json.loads(out.splitlines()[-1])


def test_a_freed_block_is_reused_without_faulting_its_pages_again():
    pages = BLOCK // os.sysconf("SC_PAGE_SIZE")
    faults = measure()
    assert faults["default"] > 3 * pages  # glibc: each block mmapped, its pages faulted anew
    assert faults["kept"] and faults["in_run"] < pages // 10
    assert faults["after"] > 3 * 4 * pages  # glibc's defaults again after the run


@pytest.mark.parametrize(
    "environment",
    [{"MALLOC_ARENA_MAX": "2"}, {"GLIBC_TUNABLES": "glibc.malloc.mmap_max=8"}],
)
def test_the_users_own_malloc_tuning_wins(monkeypatch, environment):
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with host_memory.keep_freed_memory_while_training() as kept:
        assert not kept


def test_an_accelerator_run_leaves_the_host_heap_alone():
    with host_memory.keep_freed_memory_while_training(enabled=False) as kept:
        assert not kept
