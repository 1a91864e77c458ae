"""Shared fixtures (the offline environment is set by the root conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _release_memory_after_each_test():
    """Each xdist worker runs dozens of trainings, HF models and parity checks in one
    process; without trimming, freed memory stays mapped and a worker reaches ~11 GiB
    (one was killed for memory on a 24 GiB machine). See release_freed_memory."""
    yield
    from qwen3_trn_helpers.training.trainer import release_freed_memory

    release_freed_memory()


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
