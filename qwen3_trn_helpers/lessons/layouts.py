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
    from ..errors import ConfigError
    from ..model.presets import get_preset
    from ..ops.planner.layout import why_slower
    from ..ops.planner.machines import get_machine
    from ..ops.planner.models import load_model
    from ..ops.planner.search import evaluate, plan_layouts
    from ..training.spec import RunSpec

    rows = []
    machine = get_machine("trn2")
    for preset, nodes in anchors:
        try:
            result = plan_layouts(preset, nodes, machine=machine)
        except ConfigError as e:  # nothing fits the planner's headroom
            result, nothing = None, str(e)
        # the recipe: the preset's own layout, and the preset rule across nodes (HSDP),
        # at the plan's global batch (one sequence per rank: accumulation for TP)
        tp = max(get_preset(preset).layout.tp, 1)
        recipe_spec = RunSpec(preset=preset, nproc=machine.ranks_per_node, nnodes=nodes,
                              global_batch_size=nodes * machine.ranks_per_node if tp > 1
                              else None, out=f"runs/{preset}-{nodes}n")  # fmt: skip
        recipe = evaluate(recipe_spec, machine, microbatches=tp)
        memory = recipe.memory
        best = result.best if result else None
        if best is None:
            why = f"nothing fits the planner's headroom: {nothing.split(': ', 1)[-1]}"
        elif not recipe.fits:
            why = (
                f"the recipe needs {memory.total_gib:.1f} GiB per rank: over the "
                f"planner's limit of {recipe.limit_gib:.1f}"
            )
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
                "model": load_model(preset).name,
                "nodes": nodes,
                "recipe": "AWS's" if nodes == 1 else "preset rule: AWS's 1-node layout, HSDP",
                "recipe's layout": recipe.label(),
                "recipe GiB/rank": round(memory.total_gib, 1),
                "recipe tokens/s (est.)": round(recipe.tokens_per_s),
                "planner's layout": best.label() if best else "-",
                "planner GiB/rank": round(best.memory.total_gib, 1) if best else "-",
                "planner tokens/s (est.)": round(best.tokens_per_s) if best else "-",
                "why they differ": why,
            }
        )
    return rows
