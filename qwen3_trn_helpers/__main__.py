import sys

from .cli import main
from .training.ranks import launched_by_torchrun

code = main()
if launched_by_torchrun():
    # a rank: its process groups shut down in order, then out without interpreter
    # shutdown, where their threads aborted a rank that had finished (training/ranks.py)
    from .training.ranks import end_process_groups, leave

    try:
        if code == 0:  # (after a failure a peer may be gone: nothing to shut down with)
            end_process_groups(barrier=False)
    finally:
        leave(code)
sys.exit(code)
