"""Pictures and numbers for the blockwise MoE lesson (notebook 02).

The NKI MoE kernel packs every (token, expert) pair the router chose into blocks of B
slots that each belong to one expert. The number of blocks is fixed by the token count
alone (so one compiled kernel serves every routing), which means room for the worst
routing: at small token counts most slots are padding, and the expert matmuls compute
on zeros.
"""

from __future__ import annotations

import torch

from ..model.moe_blockwise import blockwise_mapping, num_blocks


def padding_fraction(tokens: int, top_k: int, experts: int, block: int) -> float:
    """Share of the kernel's slots that hold padding instead of a (token, expert) pair."""
    slots = num_blocks(tokens, top_k, experts, block) * block
    return 1 - tokens * top_k / slots


def padding_rows(
    token_counts=(128, 512, 4096, 32768), top_k=8, experts=128, block=256
) -> list[dict[str, object]]:
    """Qwen3-30B-A3B's routing (top-8 of 128) in 256-slot blocks at several token counts."""
    rows = []
    for t in token_counts:
        n = num_blocks(t, top_k, experts, block)
        rows.append(
            {
                "tokens per call": t,
                "pairs (T x K)": t * top_k,
                "blocks": n,
                "slots (blocks x B)": n * block,
                "padding": f"{100 * padding_fraction(t, top_k, experts, block):.0f}%",
            }
        )
    return rows


def packing_figure(expert_ids: torch.Tensor, num_experts: int, block_size: int):
    """Blocks as rows, slots as cells: the token in each slot, padding in grey."""
    from matplotlib.colors import ListedColormap

    from .plots import NotebookFigure

    tokens, top_k = expert_ids.shape
    position_to_id, block_to_expert = blockwise_mapping(expert_ids, num_experts, block_size)
    grid = position_to_id.view(-1, block_size)
    tab = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1"]
    palette = ListedColormap([tab[t % len(tab)] for t in range(tokens)] + ["#d9d9d9"])
    fig = NotebookFigure(figsize=(max(6, 2.5 + 0.9 * block_size), 0.45 * len(grid) + 1.2), dpi=110)
    ax = fig.add_subplot()
    ax.imshow(grid.numpy(), cmap=palette, vmin=0, vmax=tokens, aspect="auto")
    for row in range(grid.shape[0]):
        for col in range(grid.shape[1]):
            token = int(grid[row, col])
            ax.text(col, row, "pad" if token == tokens else f"t{token}", ha="center", va="center")
    labels = [f"block {b}: expert {e}" for b, e in enumerate(block_to_expert.tolist())]
    ax.set_yticks(range(len(grid)), labels)
    ax.set_xticks(range(block_size), [f"slot {s}" for s in range(block_size)])
    share = padding_fraction(tokens, top_k, num_experts, block_size)
    ax.set_title(
        f"{tokens} tokens, top-{top_k} of {num_experts} experts, blocks of {block_size}:\n"
        f"{len(grid)} blocks, {share:.0%} of the slots are padding",
        fontsize="medium",
    )
    fig.tight_layout()
    return fig
