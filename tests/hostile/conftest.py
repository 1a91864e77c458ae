"""The probe's shared inputs (a checkpoint, a checkpointed run, a prepared corpus, a
wheelhouse), each built once per worker on first use (tests/hostile.py)."""

from __future__ import annotations

import pytest
from hostile import Fixtures


@pytest.fixture(scope="session")
def hostile_fixtures(tmp_path_factory) -> Fixtures:
    return Fixtures(tmp_path_factory.mktemp("hostile-fixtures"))
