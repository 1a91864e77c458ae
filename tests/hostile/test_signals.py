"""Signals to `qwen3-trn train` on one rank (training in the command itself): SIGINT,
SIGTERM and SIGKILL, at start-up, inside a step, inside a save and inside the first
compile (issue 50 item 4). After each: no process of the run left, run.json's status
true (or, after SIGKILL, the next command saying it is not), metrics.jsonl whole. The
rows and the checks: signal_cases.py."""

from __future__ import annotations

import pytest
from signal_cases import COMMAND_CASES, check_command_case

pytestmark = [pytest.mark.slow, pytest.mark.long]


@pytest.mark.parametrize("case", [c for c in COMMAND_CASES if c.ranks == 1], ids=lambda c: c.name)
def test_a_signal_to_the_command_leaves_a_true_record(case, tmp_path):
    check_command_case(case, tmp_path)
