"""``tokens_seen`` stays right across a resume at another data-parallel size (issue 51).

torchtitan 0.3.0's trainer saves its own rank's ``ntokens_seen`` (DCP keeps one rank's
copy of a plain value), restores it on every rank (``trainer.py``: ``load_state_dict``)
and sums every rank's count at each step: 2 ranks then 1 gave 3072, then 1792. Each
checkpoint now records the count over every rank beside its shards, and the first rank
of the loss mesh holds it after a load. (The real 2 -> 1 resume: tests/e2e/test_multinode.py
``test_resume_on_another_rank_count``.)
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from qwen3_trn_helpers.training.checkpoint import Qwen3TrnCheckpointManager
from qwen3_trn_helpers.training.checkpoint_files import read_run_settings, record_run_settings
from qwen3_trn_helpers.training.run_scope import _RunScope


class _TorchtitansState:
    """torchtitan's Trainer.load_state_dict (0.3.0): the step and this rank's count."""

    def load_state_dict(self, state_dict):
        self.step = state_dict["step"]
        self.ntokens_seen = state_dict["ntokens_seen"]


class _Trainer(_RunScope, _TorchtitansState):
    pass


def _loaded(step_dir, *, local_rank: int | None, saved_local: int = 1536) -> _Trainer:
    """A trainer after loading ``step_dir``'s train state, as rank ``local_rank`` of its
    loss mesh (None: one data-parallel rank, no loss mesh)."""
    trainer = _Trainer.__new__(_Trainer)
    manager = Qwen3TrnCheckpointManager.__new__(Qwen3TrnCheckpointManager)
    manager.loading_from = step_dir
    mesh = None if local_rank is None else SimpleNamespace(get_local_rank=lambda: local_rank)
    trainer.checkpointer = manager
    trainer.parallel_dims = SimpleNamespace(
        dp_cp_enabled=mesh is not None, get_optional_mesh=lambda name: mesh
    )
    trainer.metrics_processor = SimpleNamespace(tokens_seen=None)
    trainer.load_state_dict({"step": 6, "ntokens_seen": saved_local})
    return trainer


def test_each_checkpoint_records_the_count_over_every_rank(tmp_path):
    record_run_settings(tmp_path, {"lr": 8e-4, "--seed": 0}, tokens_seen=3072)
    assert read_run_settings(tmp_path)["tokens_seen"] == 3072


@pytest.mark.parametrize("ranks_now", [1, 2, 4])
def test_the_count_after_a_load_sums_to_the_recorded_one_at_any_size(tmp_path, ranks_now):
    """Saved by 2 ranks at 3072 (1536 each): after the load, the ranks' counts add up to
    3072 however many there are now, so the next step's sum is 3072 + its tokens."""
    record_run_settings(tmp_path, {"lr": 8e-4}, tokens_seen=3072)
    ranks = [None] if ranks_now == 1 else list(range(ranks_now))
    counts = [_loaded(tmp_path, local_rank=r).ntokens_seen for r in ranks]
    assert sum(counts) == 3072 and counts[0] == 3072
    assert _loaded(tmp_path, local_rank=ranks[0]).metrics_processor.tokens_seen == 3072


def test_an_older_checkpoint_keeps_torchtitans_own_count(tmp_path):
    record_run_settings(tmp_path, {"lr": 8e-4})  # (no count: an older qwen3-trn's)
    assert _loaded(tmp_path, local_rank=1, saved_local=1536).ntokens_seen == 1536
