"""On trn2 the notebook helpers that build a trainer run in a child process; the same
path, forced on a CPU, returns what the in-process call returns."""

import pytest

from qwen3_trn_helpers.lessons.init_loss import measure_init
from qwen3_trn_helpers.lessons.logits_parity import parity
from qwen3_trn_helpers.model.shapes import TINY
from qwen3_trn_helpers.runs.child import isolated, kernel_holds_no_neuroncore
from qwen3_trn_helpers.training import patches

pytestmark = pytest.mark.slow


def test_only_a_process_that_sees_neuron_isolates():
    assert isolated(None) is False  # this machine has no Trainium
    assert isolated(True) and not isolated(False)
    assert kernel_holds_no_neuroncore()


def test_child_result_equals_the_in_process_one():
    here = measure_init("native", TINY, isolate=False)
    child = measure_init("native", TINY, isolate=True)
    assert child == pytest.approx(here, abs=1e-6)


def test_a_disabled_patch_reaches_the_child(tiny_hf_checkpoint):
    with patches.disabled("hf_backend_rope_init"):
        report = parity(tiny_hf_checkpoint, seq_len=32, isolate=True).max_abs_diff
    assert report["native vs transformers"] <= 1e-4
    assert not report["transformers_v5 vs transformers"] <= 1e-3  # NaN counts as broken
