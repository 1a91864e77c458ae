"""Solutions to the exercises of 04_scaling_to_trn2
(tested by tests/core/lessons/test_solutions.py)."""

from qwen3_trn_helpers.lessons import torchtitan_command, trn2_plan


def exercise_1() -> dict[int, dict[str, float]]:
    """Memory per core of the 4B at TP 2, 4, 8. Activations, logits and the gathered
    layer shrink with TP; parameters, gradients and AdamW do not (TP x FSDP = 64 always
    shards them 64 ways). TP must divide the 8 key/value heads, so 8 is the limit."""
    plan = trn2_plan("native")
    return {tp: plan.with_layout(tp=tp).memory().row() for tp in (2, 4, 8)}


def exercise_2() -> tuple[str, dict, dict]:
    """The 4B on 128 ranks at LNC 1: TP 4 x FSDP 32. The fp32 state halves per rank
    (sharded 128 ways), activations stay (TP is still 4), and it fits in 12 GiB."""
    plan = trn2_plan("native", nproc=128)
    return str(plan.layout), plan.memory(lnc=1).row(), trn2_plan("native").memory(lnc=2).row()


def exercise_3() -> tuple[str, str]:
    """torchtitan's entry point for the 30B-A3B config, 20 steps at sequence length 2048:
    written by hand, and as torchtitan_command builds it."""
    by_hand = (
        "NEURON_LOGICAL_NC_CONFIG=2 torchrun --nproc_per_node=64 -m torchtitan.train "
        "--module qwen3_trn_helpers --config qwen3_trn_30b_a3b_nki_moe "
        "--training.steps 20 --training.seq_len 2048"
    )
    generated = torchtitan_command(
        "qwen3_trn_30b_a3b_nki_moe", 64, "--training.steps", "20", "--training.seq_len", "2048"
    )
    return by_hand, generated
