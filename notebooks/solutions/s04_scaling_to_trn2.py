"""Solutions to the exercises of 04_scaling_to_trn2."""

from qwen3_trn_helpers.scaling import Topology, memory_per_core


def exercise_1() -> tuple[str, float]:
    """128 ranks at TP 4 leave FSDP 32; each rank is one physical core with 96/8 GiB."""
    t = Topology(lnc=1)
    return f"TP 4 x FSDP {t.logical_cores // 4}", t.hbm_gib_per_logical_core


def exercise_2(limit_gib: float = 24.0) -> int:
    """Longest multiple of 1024 that fits the 4B preset without activation checkpointing."""
    best = 0
    for seq in range(1024, 40960 + 1, 1024):
        if memory_per_core("4b", seq_len=seq).total_gib <= limit_gib:
            best = seq
    return best
