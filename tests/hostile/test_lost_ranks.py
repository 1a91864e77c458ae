"""One process of a two-rank run lost to a signal while the command was not (issue 51):
a rank SIGKILLed inside a save, a rank sent SIGTERM inside a step, torchrun SIGKILLed, a
rank stopped (SIGSTOP: the others wait out the 100 s collective timeout). The terminal
and run.json say the same line, naming the rank (or torchrun), its node and the signal.
The rows and the checks: signal_cases.py."""

from __future__ import annotations

import pytest
from signal_cases import LOST_CASES, check_lost_case

pytestmark = [pytest.mark.slow, pytest.mark.long]


@pytest.mark.parametrize("case", LOST_CASES, ids=lambda c: c.name)
def test_a_lost_rank_is_named_the_same_on_the_terminal_and_in_run_json(case, tmp_path):
    check_lost_case(case, tmp_path)
