"""The global batch and the learning rate a plan trains at, kept safe as nodes grow.

The batch: by default one node's (one sequence per rank of one node), the same number
of tokens per optimizer step at any node count, so that adding nodes makes the same
run faster instead of another run. Only where a job's data-parallel ranks cannot share
it (every data-parallel rank trains at least one sequence: ``world / tp`` of them)
does it grow, to the smallest batch the job allows; the plan says so, and
``--global-batch-tokens`` chooses any other.

The learning rate: a preset's recipe set its lr at the recipe's batch (its layout on
one node). For another batch AdamW's lr scales with the square root of the batch
(Malladi et al. 2022, "On the SDEs and Scaling Rules for Adaptive Gradient Algorithms",
NeurIPS), but only up to a model's critical batch, past which the best lr stops
growing (McCandlish et al. 2018, "An Empirical Model of Large-Batch Training"). So the
rule is capped at :func:`lr_cap`: the peak lr published for dense models of the size
trained with AdamW at 4M-token batches, never below the recipe's own.
"""

from __future__ import annotations

import math

from .models import PlannedModel

#: Llama 2 (Touvron et al. 2023, "Llama 2: Open Foundation and Fine-Tuned Chat Models",
#: Table 1: AdamW, 4M-token batches): peak lr 3.0e-4 for 7B and 13B, 1.5e-4 for 34B and
#: 70B. Llama 3's 8B kept 3e-4 (Dubey et al. 2024). Keyed by active parameters, the
#: count that sets an MoE's per-token compute.
PUBLISHED_PEAK_LR = ((13.5e9, 3.0e-4), (math.inf, 1.5e-4))
PUBLISHED_PEAK_LR_SOURCE = (
    "Llama 2's peak AdamW lr at 4M-token batches (Touvron et al. 2023, Table 1: 3.0e-4 "
    "to 13B, 1.5e-4 for 34B/70B)"
)


def recipe_batch_tokens(model: PlannedModel) -> int | None:
    """The batch a preset's lr was set for: its recipe's layout on one node."""
    if not model.preset:
        return None
    from ...model.presets import get_preset

    preset = get_preset(model.preset)
    return preset.world_size // max(preset.layout.tp, 1) * preset.seq_len


def default_batch_tokens(ranks_per_node: int, world: int, seq: int, tps: list[int]) -> int:
    """One node's batch (a sequence per rank of one node), or where the job's
    data-parallel ranks outnumber it even at its largest TP degree, the smallest batch
    they allow (a sequence per data-parallel rank)."""
    return max(ranks_per_node * seq, world // max(tps or [1]) * seq)


def batch_note(tokens: int, ranks_per_node: int, seq: int, nodes: int, asked: bool) -> str:
    """Where the plan's global batch came from, in words."""
    one_node = ranks_per_node * seq
    if asked:
        return f"{tokens:,} tokens per step, as asked (--global-batch-tokens)"
    if tokens == one_node:
        held = "held at any node count" if nodes == 1 else f"the same on {nodes} nodes as on one"
        return (
            f"{tokens:,} tokens per step: one node's ({ranks_per_node} ranks x {seq}), {held} "
            "(--global-batch-tokens for another)"
        )
    return (
        f"{tokens:,} tokens per step: one node's {one_node:,} cannot give each of this "
        f"job's data-parallel ranks a sequence, so the smallest batch {nodes} nodes allow "
        "(--global-batch-tokens for another)"
    )


def lr_cap(model: PlannedModel) -> float | None:
    """The most the square-root rule may raise a preset's lr to (None: no recipe)."""
    if not model.preset:
        return None
    from ...model.presets import get_preset

    published = next(lr for most, lr in PUBLISHED_PEAK_LR if model.active_parameters <= most)
    return max(get_preset(model.preset).lr, published)


def _rule(model: PlannedModel, global_batch_tokens: int) -> tuple[float, float, int] | None:
    """(the square-root rule's lr, the lr after the cap, the recipe's batch), or None."""
    reference = recipe_batch_tokens(model)
    if reference is None:
        return None
    from ...model.presets import get_preset

    rule = get_preset(model.preset).lr * math.sqrt(global_batch_tokens / reference)
    cap = lr_cap(model)
    assert cap is not None
    return float(f"{rule:.3g}"), float(f"{min(rule, cap):.3g}"), reference


def scaled_lr(model: PlannedModel, global_batch_tokens: int) -> float | None:
    """The preset's lr for this batch (the capped square-root rule), or None where that
    is the recipe's own (no ``--lr`` needed) or the model has no recipe."""
    found = _rule(model, global_batch_tokens)
    if found is None:
        return None
    from ...model.presets import get_preset

    lr = found[1]
    return None if lr == get_preset(model.preset).lr else lr


def lr_note(model: PlannedModel, global_batch_tokens: int) -> str:
    """The learning-rate rule and its cap, in words (empty: a model without a recipe)."""
    found = _rule(model, global_batch_tokens)
    if found is None:
        return ""
    from ...model.presets import get_preset

    rule, lr, reference = found
    recipe = get_preset(model.preset).lr
    where = "in the command" if lr != recipe else "the recipe's, no --lr needed"
    text = (
        f"{lr:g} ({where}): the square-root rule for Adam (Malladi et al. 2022) from the "
        f"recipe's {recipe:g} at its {reference:,}-token batch gives {rule:g} for this "
        f"{global_batch_tokens:,}-token one"
    )
    if rule > lr:
        text += (
            f"; capped at {lr:g}, {PUBLISHED_PEAK_LR_SOURCE}, never below the recipe's: past "
            "a model's critical batch the best lr stops growing (McCandlish et al. 2018)"
        )
    return text + "; a short run confirms it"
