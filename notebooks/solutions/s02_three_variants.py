"""Solutions to the exercises of 02_three_variants
(tested by tests/core/lessons/test_solutions.py)."""

from pathlib import Path

from qwen3_trn_helpers import PRESETS, RunSpec, patches, plan_run, run, trainer_config
from qwen3_trn_helpers.lessons import lr_schedule, padding_fraction, parity


def exercise_1(checkpoint: Path):
    """The parity check with the rope patch switched off.

    native vs transformers still agree (to fp32 rounding); both comparisons that
    involve transformers_v5 fail: its rotary inv_freq was never initialised, so every
    position past the first is rotated wrongly (uninitialised memory: by nothing if it
    happens to hold zeros, by garbage otherwise). A loss is a poor detector here: the
    tiny pretrained model uses positions so little that its loss barely moves, which is
    why the parity check compares logits.
    """
    with patches.disabled("hf_backend_rope_init"):
        return parity(checkpoint)


def exercise_2(workdir: Path, rounds: int = 2) -> dict[str, float]:
    """Fastest step time of the two expert implementations, and why they barely differ.

    The runs alternate (blockwise, grouped_mm, blockwise, grouped_mm, ...) and each
    implementation keeps its fastest step after step 1 over all its runs: on a shared
    machine another process slows whichever run it overlaps, so a median of one run each
    can put either implementation first; alternating spreads that load over both, and the
    minimum is the time least disturbed by it.

    256 tokens x top-2 = 512 pairs in blocks of 64 over 8 experts: 15 blocks, 960 slots,
    47% padding, which the blockwise reference computes and grouped_mm does not. But the
    padded slots cost 448 x 3 x 128 x 64 x 2 = 22 MFLOP per layer (88 MFLOP over 4
    layers), while the 151,936-way output layer costs 256 x 128 x 151,936 x 2 = 10
    GFLOP: the padding adds under 1% of that. So at this size the two run within noise of
    each other (scripts/bench_steps.py: 930 vs 919 ms). At Qwen3-30B-A3B's 128 experts
    and short sequences, padding is most of the expert work (the table in section 6).
    """
    seen: dict[str, list[float]] = {"blockwise": [], "grouped_mm": []}
    for i in range(rounds):
        for impl in seen:
            result = run(
                "nki_moe", moe_impl=impl, steps=6, out=workdir / f"{impl}-{i}", progress=False
            )
            # leave out step 1, which also pays for one-time work (on trn2: compilation)
            seen[impl] += [m["step_time_s"] for m in result.metrics[1:]]
    times = {impl: min(steps) for impl, steps in seen.items()}
    cost = padding_cost()
    times["padding"] = cost["padding"]
    times["padding_flops_share"] = cost["padding_flops"] / cost["output_flops"]
    return times


def padding_cost(tokens: int = 256, block: int = 64) -> dict[str, float]:
    """The arithmetic behind exercise 2 for the tiny_moe preset (no run needed): slots,
    pairs, the share of padding, and the FLOPs of the padded slots against the output
    layer's (the answer key quotes these numbers)."""
    shape = PRESETS["tiny_moe"].shape
    pairs = tokens * shape.top_k
    padding = padding_fraction(tokens=tokens, top_k=shape.top_k, experts=shape.n_experts,
                               block=block)  # fmt: skip
    slots = round(pairs / (1 - padding))
    padded = slots - pairs
    return {
        "pairs": pairs,
        "slots": slots,
        "padding": padding,
        "padding_flops": shape.n_layers * padded * 3 * shape.dim * shape.moe_hidden_dim * 2,
        "output_flops": tokens * shape.dim * shape.vocab_size * 2,
    }


def exercise_3() -> int:
    """The step with the peak learning rate for warm-up 5: step 5, the last warm-up step.

    decay_ratio 0.8 asks for 16 decay steps; 5 + 16 > 20, so torchtitan trims the decay
    to 15 (the warning it prints) and the peak holds for steps 5 and 6."""
    spec = RunSpec(steps=20, warmup_steps=5, lr=3e-4)
    rates = lr_schedule(trainer_config(plan_run(spec), "runs/unused"))
    return rates.index(max(rates)) + 1


def schedule_facts() -> tuple[int, list[int], int, int]:
    """Exercise 3's schedule in numbers: the peak step, every step at the peak rate, the
    decay steps decay_ratio 0.8 asks for (0.8 x 20) and the ones torchtitan keeps (what
    is left after warm-up)."""
    spec = RunSpec(steps=20, warmup_steps=5, lr=3e-4)
    config = trainer_config(plan_run(spec), "runs/unused")
    rates = lr_schedule(config)
    peak = [i + 1 for i, r in enumerate(rates) if r == max(rates)]
    asked = round(config.lr_scheduler.decay_ratio * spec.steps)
    return peak[0], peak, asked, spec.steps - spec.warmup_steps
