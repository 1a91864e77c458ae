"""On trn2 the notebook helpers that build a trainer run in a child process; the same
path, forced on a CPU, returns what the in-process call returns."""

import pytest

from qwen3_trn_helpers.lessons.logits_parity import parity
from qwen3_trn_helpers.runs.child import isolated, kernel_holds_no_neuroncore
from qwen3_trn_helpers.training import patches

pytestmark = pytest.mark.slow


def test_only_a_process_that_sees_neuron_isolates():
    assert isolated(None) is False  # this machine has no Trainium
    assert isolated(True) and not isolated(False)
    assert kernel_holds_no_neuroncore()


def test_a_child_returns_what_the_kernel_computes_under_the_kernels_patches(
    tiny_hf_checkpoint,
):
    """One child process (a trainer import costs seconds): its result is the in-process
    one, and a patch the kernel disabled is disabled in the child too."""
    with patches.disabled("hf_backend_rope_init"):
        here = parity(tiny_hf_checkpoint, seq_len=32, isolate=False).max_abs_diff
        child = parity(tiny_hf_checkpoint, seq_len=32, isolate=True).max_abs_diff
    assert here["native vs transformers"] <= 1e-4
    assert not here["transformers_v5 vs transformers"] <= 1e-3  # NaN counts as broken
    assert child.keys() == here.keys()
    for pair, diff in here.items():
        if diff <= 1e-3:  # the same numbers
            assert child[pair] == pytest.approx(diff, abs=1e-6), pair
        else:  # broken the same way (uninitialised rotary tables: any value, or NaN)
            assert not child[pair] <= 1e-3, pair
