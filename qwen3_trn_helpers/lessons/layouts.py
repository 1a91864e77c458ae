"""The layout planner beside AWS's recipes (notebook 04's "let a planner choose").

AWS chose its trn2 layouts by hand: TP 4 x FSDP 16 with selective checkpointing for
Qwen3-4B, FSDP 64 with full checkpointing for Qwen3-30B-A3B, and one replica per node
(HSDP) across nodes; the ``4b`` and ``30b-a3b`` presets are those recipes. Here each is
put through the planner's memory and cost models beside the layout the planner picks
for the same model and nodes, with the reason for any difference.
"""

from __future__ import annotations

from typing import Any

#: (preset, nodes) of the recipes AWS published layouts for
ANCHORS = (("4b", 1), ("30b-a3b", 1), ("30b-a3b", 2))


def planner_anchors(anchors: tuple[tuple[str, int], ...] = ANCHORS) -> list[dict[str, Any]]:
    """One row per anchor: the recipe's layout and the planner's, each with its estimates.

    The recipe is AWS's published layout on one node; across nodes AWS published none,
    and the row shows the presets' own rule (one replica of the one-node layout per
    node, HSDP), labelled as such rather than as AWS's."""
    from ..planner.search import evaluate, plan_layouts, why_slower
    from ..training.spec import RunSpec

    rows = []
    for preset, nodes in anchors:
        result = plan_layouts(preset, nodes)
        # the recipe: the preset's own layout, and the preset rule across nodes (HSDP)
        recipe_spec = RunSpec(preset=preset, nproc=result.machine.ranks_per_node,
                              nnodes=nodes, out=f"runs/{preset}-{nodes}n")  # fmt: skip
        recipe, memory = evaluate(recipe_spec, result.machine)
        best = result.best
        if recipe is None:
            why = f"the recipe needs {memory.total_gib:.1f} GiB per rank: over the limit"
        elif (recipe.layout, recipe.activation_checkpoint, recipe.local_batch) == (
            best.layout,
            best.activation_checkpoint,
            best.local_batch,
        ):
            why = "the same layout"
        else:
            why = "the recipe " + why_slower(best, recipe)
        rows.append(
            {
                "model": result.model,
                "nodes": nodes,
                "recipe": "AWS's" if nodes == 1 else "preset rule: AWS's 1-node layout, HSDP",
                "recipe's layout": recipe.label() if recipe else "-",
                "recipe GiB/rank": round(memory.total_gib, 1),
                "recipe tokens/s (est.)": round(recipe.tokens_per_s) if recipe else "-",
                "planner's layout": best.label(),
                "planner GiB/rank": round(best.memory.total_gib, 1),
                "planner tokens/s (est.)": round(best.tokens_per_s),
                "why they differ": why,
            }
        )
    return rows
