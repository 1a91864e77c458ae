"""The planner checked, not only estimated: ``plan --verify`` and ``plan --measure``.

``verify`` builds the chosen layout at its real width on its real number of simulated
ranks with torchtitan's fake backend (the existing dry run, ops/dry_run.py) and puts
the sharded state rank 0 really holds beside the memory model's figure for it. It builds
``layers`` transformer blocks (1 by default: a 64 x 4-node layout of 36 blocks takes a
CPU many minutes), so the comparison is per block count, at the real widths, placements
and padding. MoE layouts build torchtitan's grouped_mm experts for it: the same
parameters as the blockwise ones without a CPU minute per layer of padded blocks.

``measure`` trains each of the top candidates for a few steps on this machine's device
and ranks them by measured tokens/s (torchtitan's own throughput); on a CPU at tiny
scale this tests the mechanism, on trn2 it replaces the cost model's assumptions.

``verify`` also runs one dense block's forward and backward per activation
checkpointing mode (ops/planner/activations.py: fake tensors, torch's MemTracker) and puts
what it keeps for the backward beside the estimate's per-layer activation term.
"""

from __future__ import annotations

import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...model.shapes import Qwen3Shape
from .activations import ActivationCheck, check_activations
from .layout import Candidate, LayoutPlan

#: how far the measured sharded state may be from the estimate: FSDP pads each
#: parameter's first dimension to a multiple of the ranks, which the estimate ignores
VERIFY_TOLERANCE = 0.02


@dataclass(frozen=True)
class Verification:
    layout: str
    layers: int
    world: int
    measured_state_gib: float  # rank 0's parameters + gradients + AdamW state
    estimated_state_gib: float  # training/memory.py for the same blocks
    build_s: float
    step_s: float
    activations: tuple[ActivationCheck, ...] = ()  # per AC mode; empty for MoE

    @property
    def relative_error(self) -> float:
        return abs(self.measured_state_gib / self.estimated_state_gib - 1)

    @property
    def agrees(self) -> bool:
        state = self.relative_error <= VERIFY_TOLERANCE
        return state and all(a.agrees for a in self.activations)

    def rows(self) -> list[dict[str, Any]]:
        return [
            {"": "layout (simulated ranks)", "value": f"{self.layout} ({self.world})"},
            {"": "blocks built", "value": self.layers},
            {"": "params+grads+AdamW per rank, measured GiB", "value": round(
                self.measured_state_gib, 4)},
            {"": "params+grads+AdamW per rank, estimated GiB", "value": round(
                self.estimated_state_gib, 4)},
            {"": "difference", "value": f"{100 * self.relative_error:.2f}% "
             f"(tolerance {100 * VERIFY_TOLERANCE:.0f}%)"},
            {"": "state agrees", "value": self.relative_error <= VERIFY_TOLERANCE},
            {"": "build / one step, s", "value": f"{self.build_s:.1f} / {self.step_s:.1f}"},
        ]  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return {
            "layout": self.layout,
            "layers": self.layers,
            "world": self.world,
            "measured_state_gib": self.measured_state_gib,
            "estimated_state_gib": self.estimated_state_gib,
            "relative_error": self.relative_error,
            "tolerance": VERIFY_TOLERANCE,
            "agrees": self.agrees,
            "build_s": self.build_s,
            "step_s": self.step_s,
            "activations": [a.to_json() for a in self.activations],
        }


def verify(candidate: Candidate, layers: int = 1, shape: Qwen3Shape | None = None) -> Verification:
    """Dry-run ``candidate`` (fake backend, ``layers`` blocks) and compare its state;
    with ``shape`` (dense), also one block's activations per checkpointing mode at the
    candidate's tokens per microbatch (seq_len x local batch, before TP's sharding)."""
    from ...model.variants import get_variant
    from ..dry_run import dry_run

    spec = candidate.spec.replace(device="auto")
    if get_variant(spec.variant).moe:
        spec = spec.replace(moe_impl="grouped_mm")
    report = dry_run(spec, layers=layers)
    return Verification(
        layout=report.layout,
        layers=report.layers,
        world=report.world_size,
        measured_state_gib=report.measured_state_gib,
        estimated_state_gib=report.estimated_state_gib,
        build_s=report.build_s,
        step_s=report.step_s,
        activations=tuple(check_activations(shape, candidate.seq_len * candidate.local_batch))
        if shape is not None and not shape.is_moe
        else (),
    )


@dataclass(frozen=True)
class Measurement:
    candidate: Candidate
    steps: int
    tokens_per_s_per_rank: float  # measured: torchtitan's tps, median after the first step
    wall_s: float

    def row(self, rank: int) -> dict[str, Any]:
        c = self.candidate
        return {
            "#": rank,
            "layout": c.layout,
            "AC": c.activation_checkpoint,
            "local batch": c.local_batch,
            "estimated tokens/s/rank": round(c.estimate.tokens_per_s_per_rank),
            "measured tokens/s/rank": round(self.tokens_per_s_per_rank),
            "wall s": round(self.wall_s, 1),
        }


def measure(plan: LayoutPlan, top: int = 2, steps: int = 3) -> list[Measurement]:
    """Train each of the ``top`` candidates ``steps`` steps here; fastest measured first.

    The first step (compilation, warm-up) is left out of the rate when there are more.
    """
    from ...errors import ConfigError
    from ...runs.run import run

    if steps < 2:
        raise ConfigError(f"measure needs at least 2 steps (the first warms up), got {steps}")
    results = []
    with tempfile.TemporaryDirectory(prefix="qwen3-trn-plan-") as tmp:
        for i, candidate in enumerate(plan.candidates[:top]):
            spec = candidate.spec.replace(
                steps=steps, warmup_steps=1, out=str(Path(tmp) / f"candidate-{i + 1}")
            )
            result = run(spec, progress=False)
            rates = [m["tokens_per_s"] for m in result.metrics[1:] if m.get("tokens_per_s")]
            if not rates:
                raise ConfigError(
                    f"candidate {candidate.label()} reported no throughput in {steps} steps"
                )
            results.append(Measurement(candidate, steps, statistics.median(rates), result.wall_s))
    results.sort(key=lambda m: -m.tokens_per_s_per_rank)
    return results


def fitted_efficiency(rate_at, target: float, low: float = 1e-6, high: float = 1.0) -> float:
    """The efficiency at which ``rate_at(efficiency)`` (tokens/s, rising with it) equals
    ``target``: bisection, since communication does not scale with it."""
    if rate_at(high) <= target:
        return high
    for _ in range(60):
        mid = (low * high) ** 0.5
        low, high = (mid, high) if rate_at(mid) < target else (low, mid)
    return (low * high) ** 0.5


def calibrate(plan: LayoutPlan, measured: list[Measurement]) -> tuple[float, Path]:
    """The machine's efficiency that makes the estimate match what was measured (the
    median over the measured candidates), written where later plans find it."""
    from dataclasses import replace

    from .machines import write_calibration
    from .search import evaluate

    mode = "compiled" if plan.compiled else "eager"
    measured_machine = plan.machine
    fits = []
    for m in measured:
        c = m.candidate

        def rate_at(efficiency: float, c: Candidate = c) -> float:
            machine = replace(measured_machine, efficiency={mode: efficiency})
            again = evaluate(c.spec, machine, compiled=plan.compiled,
                             microbatches=c.microbatches)  # fmt: skip
            return again.estimate.tokens_per_s_per_rank

        fits.append(fitted_efficiency(rate_at, m.tokens_per_s_per_rank))
    efficiency = statistics.median(fits)
    detail = {
        "measured_on": [m.candidate.label() for m in measured],
        "measured_tokens_per_s_per_rank": [m.tokens_per_s_per_rank for m in measured],
        "model": plan.model.name,
        "seq_len": plan.seq_len,
    }
    return efficiency, write_calibration(plan.machine, plan.compiled, efficiency, detail)
