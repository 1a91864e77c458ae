"""Solutions to the exercises of 05_several_nodes
(tested by tests/core/lessons/test_solutions.py)."""

from qwen3_trn_helpers.lessons import trn2_plan


def exercise_1(nnodes: int = 4) -> dict:
    """The 4B on four trn2.48xlarge: 256 ranks, 4 replicas of the one-node layout.

    HSDP adds the replica axis outermost and leaves each node's TP 4 x FSDP 16 as it
    was, so every rank holds exactly what it held on one node and its memory does not
    change; what grows is the gradient average across nodes, once a step over EFA."""
    plan = trn2_plan("native", nnodes=nnodes)
    return {
        "ranks": plan.world_size,
        "layout": str(plan.layout),
        "replicas": plan.dp_replicate,
        "total GiB": plan.memory().total_gib,
        "one node GiB": trn2_plan("native").memory().total_gib,
    }


def exercise_2(died_at: int = 900, every: int = 250, finer: int = 50, steps: int = 1000) -> dict:
    """A job checkpointing every ``every`` steps dies at step ``died_at``.

    ``--resume auto`` continues after the newest complete checkpoint, the last multiple
    of ``every`` before the failure, so every step since it is computed again; a finer
    interval loses fewer steps (at most ``finer - 1``) but pauses to save more often."""
    resumes_after = (died_at - 1) // every * every
    return {
        "resumes after step": resumes_after,
        "computed twice": died_at - resumes_after,
        "saves": steps // every,
        "at most lost, finer": finer - 1,
        "saves, finer": steps // finer,
    }
