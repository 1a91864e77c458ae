"""Shared fixtures (the offline environment is set by the root conftest.py).

The tests live in folders by layer (``unit/<layer>/``) and end to end (``e2e/``); every
fixture here reaches all of them. The helpers beside this file (``fake_torch_neuronx``,
the job schemas, ``hostile``) are imported by name from any folder: this folder is put
on ``sys.path`` here, as pytest's default import mode would only put each test file's own
folder there.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

#: resident memory (bytes) a worker may gain over its last trim before the next one
TRIM_AFTER_GROWTH = 256 * 2**20
_rss_after_last_trim = [0]


def _resident_bytes() -> int:
    """This process's resident memory (Linux /proc; 0 elsewhere: no trims)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


@pytest.fixture(autouse=True)
def _release_memory_after_each_test():
    """Each xdist worker runs dozens of trainings, HF models and parity checks in one
    process; without trimming, freed memory stays mapped and a worker reaches ~11 GiB
    (one was killed for memory on a 24 GiB machine). See release_freed_memory.

    Only after a test that grew the worker: the trim's full garbage collection walks
    every object torch, transformers and torchtitan made (over half a million, 0.5-2 s
    on 2 cores), which after each of ~460 tests was minutes of the suite."""
    yield
    if _resident_bytes() - _rss_after_last_trim[0] < TRIM_AFTER_GROWTH:
        return
    from qwen3_trn_helpers.training.host_memory import release_freed_memory

    release_freed_memory()
    _rss_after_last_trim[0] = _resident_bytes()


@pytest.fixture(scope="session")
def tokenizer_dir():
    from qwen3_trn_helpers.assets import ensure_tokenizer

    return ensure_tokenizer()


@pytest.fixture(scope="session")
def ten_step_random(tmp_path_factory):
    """The walkthrough's run: native, tiny preset, 10 steps, batch 1, random init."""
    from qwen3_trn_helpers import run

    out = tmp_path_factory.mktemp("ten_step") / "run"
    return run("native", steps=10, init="random", out=str(out), progress=False)


@pytest.fixture(scope="session")
def tiny_hf_checkpoint(tmp_path_factory):
    """A random tiny Qwen3 saved by transformers (rope_theta 5e6, tied embeddings)."""
    from qwen3_trn_helpers.model.hf_checkpoint import make_random_hf_checkpoint
    from qwen3_trn_helpers.model.shapes import TINY

    return make_random_hf_checkpoint(TINY, tmp_path_factory.mktemp("hf") / "tiny", seed=1)


@pytest.fixture(scope="session")
def published_tiny():
    """The local "published" tiny checkpoint (cached; made once per cache)."""
    from qwen3_trn_helpers.model.presets import PRESETS
    from qwen3_trn_helpers.runs.weights import ensure_local_published

    return ensure_local_published(PRESETS["tiny"], progress=False)


@pytest.fixture(scope="session")
def published_tiny_moe():
    from qwen3_trn_helpers.model.presets import PRESETS
    from qwen3_trn_helpers.runs.weights import ensure_local_published

    return ensure_local_published(PRESETS["tiny_moe"], progress=False)


#: each hostile probe row's "surface|outcome" (tests/hostile.py), as reports arrive (on
#: xdist's controller too: a row records it as a user property, which travels with its
#: report)
_HOSTILE_OUTCOMES: list[str] = []


def pytest_runtest_logreport(report) -> None:
    if report.when == "call":
        _HOSTILE_OUTCOMES.extend(v for k, v in report.user_properties if k == "hostile")


def pytest_terminal_summary(terminalreporter) -> None:
    """The probe's counts by surface, comparable from round to round (issue 50)."""
    if not _HOSTILE_OUTCOMES or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    from hostile import counts_table

    terminalreporter.write_sep("=", f"hostile probe: {len(_HOSTILE_OUTCOMES)} rows")
    terminalreporter.write_line(counts_table(_HOSTILE_OUTCOMES))


@pytest.fixture
def tmpfs(tmp_path):
    """``tmpfs(size)``: a fresh tmpfs of ``size`` (mount's form, "40m") under tmp_path,
    unmounted after the test; root only, so the test is skipped where it cannot mount.
    A real full disk (ENOSPC), for the tests that a run must survive one."""
    import subprocess

    mounted: list[Path] = []

    def mount(size: str) -> Path:
        where = tmp_path / f"disk-{len(mounted)}"
        where.mkdir()
        try:
            done = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                capture_output=True, text=True,
            )  # fmt: skip
        except OSError as e:
            pytest.skip(f"mount: {e}")
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()})")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", str(where)], check=False)
