"""A rung's body in this process: ``python -m qwen3_trn_helpers.ops.smoke RUNG`` (the ladder's
child; torchrun's ranks for the collectives rung)."""

from __future__ import annotations

import sys

from .launching_rungs import rung_compile, rung_spmd_backends
from .rungs import (
    rung_collectives,
    rung_environment,
    rung_nki_moe_kernel,
    rung_registration,
)

RUNG_BODIES = {
    "environment": rung_environment,
    "registration": rung_registration,
    "collectives": rung_collectives,
    "nki_moe_kernel": rung_nki_moe_kernel,
    "spmd_backends": rung_spmd_backends,
    "compile": rung_compile,
}


def climb_here(name: str) -> int:
    """Run one rung's body in this process; its exit status (a body says fail with
    ``sys.exit(1)``, skip with ``sys.exit(SKIP)``)."""
    try:
        RUNG_BODIES[name]()
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return 0


if __name__ == "__main__":
    code = climb_here(sys.argv[1])
    if sys.argv[1] == "collectives":  # its process group's threads must not meet exit
        from ...training.ranks import leave

        leave(code)
    sys.exit(code)
