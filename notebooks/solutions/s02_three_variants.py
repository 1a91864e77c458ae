"""Solutions to the exercises of 02_three_variants."""

from dataclasses import replace
from pathlib import Path

from qwen3_trn_helpers.hf_checkpoint import make_random_hf_checkpoint
from qwen3_trn_helpers.moe_blockwise import num_blocks
from qwen3_trn_helpers.parity import ParityReport, parity
from qwen3_trn_helpers.variants import TINY


def exercise_1(seq_len: int = 4096, top_k: int = 8, experts: int = 128, block: int = 256):
    """Blocks for one 4096-token sample, and the most padding slots that can occur."""
    pairs = seq_len * top_k
    blocks = num_blocks(seq_len, top_k, experts, block)
    return blocks, blocks * block - pairs


def exercise_2(workdir: str | Path) -> ParityReport:
    """Parity holds for any rope_theta: all three paths read it from config.json. The
    2507 weights were trained with 5e6, so running them with 1e6 would be a different
    (wrong) function, which is why the package checks rope_theta against the preset."""
    ckpt = make_random_hf_checkpoint(replace(TINY, rope_theta=1e6), Path(workdir) / "r1e6")
    return parity(ckpt)
