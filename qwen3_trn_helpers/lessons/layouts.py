"""The layout planner beside AWS's recipes (notebook 05's "Which layout? The planner").

AWS chose its trn2 layouts by hand: TP 4 x FSDP 16 with selective checkpointing for
Qwen3-4B, FSDP 64 with full checkpointing for Qwen3-30B-A3B, each at local batch 1 with
no gradient accumulation (a step's batch: one sequence per data-parallel rank, 16 for
the 4B and 64 for the 30B-A3B); the ``4b`` and ``30b-a3b`` presets are those recipes.
Across nodes AWS published none, and the presets' own rule is one replica of the
one-node layout per node (HSDP). Here each recipe is put through the planner's memory
and cost models beside the layout the planner picks for the same model, nodes and
global batch (the recipe's own, so neither side accumulates gradients to match the
other), with the reason for any difference.
"""

from __future__ import annotations

from typing import Any

#: (preset, nodes) of the rows: AWS's two one-node recipes, the presets' HSDP rule on 2
#: nodes, and both models on 16 nodes (where every layout the planner picks is HSDP)
ANCHORS = (("4b", 1), ("30b-a3b", 1), ("30b-a3b", 2), ("4b", 16), ("30b-a3b", 16))


class Anchors(list):
    """The rows (a list of dicts, for a table), and behind each the two layouts it
    compares: ``choices[i]`` is (the recipe's Candidate, the planner's or None), so a
    notebook can assert what the prose says about them."""

    def __init__(self) -> None:
        super().__init__()
        self.choices: list[tuple[Any, Any]] = []


def planner_anchors(anchors: tuple[tuple[str, int], ...] = ANCHORS) -> Anchors:
    """One row per anchor: the recipe's layout and the planner's, each with its estimates,
    both at the recipe's global batch (AWS's local batch 1 on every data-parallel rank,
    once per node)."""
    from ..errors import ConfigError
    from ..model.presets import get_preset
    from ..ops.planner.batch import recipe_batch_tokens
    from ..ops.planner.layout import why_slower
    from ..ops.planner.machines import get_machine
    from ..ops.planner.models import load_model
    from ..ops.planner.search import evaluate, plan_layouts
    from ..training.spec import RunSpec

    rows = Anchors()
    machine = get_machine("trn2")
    for preset, nodes in anchors:
        model = load_model(preset)
        batch_tokens = recipe_batch_tokens(model) * nodes
        try:
            result = plan_layouts(preset, nodes, machine=machine, global_batch_tokens=batch_tokens)
        except ConfigError as e:  # nothing fits the planner's headroom
            result, nothing = None, str(e)
        # the recipe: the preset's own layout at local batch 1, replicated per node
        recipe_spec = RunSpec(preset=preset, nproc=machine.ranks_per_node, nnodes=nodes,
                              out=f"runs/{preset}-{nodes}n")  # fmt: skip
        recipe = evaluate(recipe_spec, machine)
        assert recipe.global_batch * get_preset(preset).seq_len == batch_tokens
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
                "model": model.name,
                "nodes": nodes,
                "global batch": recipe.global_batch,
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
        rows.choices.append((recipe, best))
    return rows
