"""Solutions to the exercises of 04_scaling_to_trn2 (tested by tests/test_solutions.py)."""

import dataclasses

from qwen3_trn_helpers.lessons.scaling import torchtitan_command, trn2_plan


def exercise_1() -> dict[int, dict[str, float]]:
    """Memory per core of the 4B at TP 2, 4, 8. Activations, logits and the gathered
    layer shrink with TP; parameters, gradients and AdamW do not (TP x FSDP = 64 always
    shards them 64 ways). TP must divide the 8 key/value heads, so 8 is the limit."""
    plan = trn2_plan("native")
    return {tp: dataclasses.replace(plan, tp=tp).memory().row() for tp in (2, 4, 8)}


def exercise_2() -> tuple[str, float, bool]:
    """The 4B on 128 ranks at LNC 1: TP 4 x FSDP 32, and it fits in 12 GiB per core."""
    plan = trn2_plan("native", nproc=128)
    memory = plan.memory(lnc=1)
    return plan.layout, memory.total_gib, memory.fits


def exercise_3() -> str:
    """torchtitan's entry point for the 30B-A3B config: 20 steps at sequence length 2048."""
    return torchtitan_command(
        "qwen3_trn_30b_a3b_nki_moe", 64, "--training.steps", "20", "--training.seq_len", "2048"
    )
