"""A layout the planner weighed, and their order: :class:`Candidate` (one layout, its
memory and step-time estimates), :class:`LayoutPlan` (what ``plan`` found for a model
on N nodes), and the ranking: fastest first, a tie (closer than ``TIE``) going to HSDP,
then to less memory; ``why_slower`` says in words what one candidate loses to another."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...training.memory import MemoryEstimate
from ...training.spec import RunSpec
from .cost import StepEstimate
from .machines import PLANNER_MARGIN, Machine
from .models import PlannedModel

#: two estimates closer than this are a tie: the model is not finer than that. Its
#: layouts of one model on one machine share the compute term and differ in their
#: collectives, and on published runs it predicts how those scale (torchtitan's 8B at
#: 128 GPUs from the fit at 8: tests/ops/planner/backtest.py) to within 2.5%; a test
#: holds this above every such held-out error. A tie goes to more HSDP replicas (their
#: FSDP rings stay shorter, so the least certain term, the network's per-step latency,
#: which Neuron does not publish, weighs least), then to less memory.
TIE = 0.03


@dataclass(frozen=True)
class Candidate:
    """One layout, with its memory and step estimates."""

    layout: str
    tp: int
    fsdp: int
    dp_replicate: int
    memory: MemoryEstimate
    estimate: StepEstimate
    world: int
    activation_checkpoint: str
    local_batch: int
    seq_len: int
    limit_gib: float  # what the planner lets a rank use (PLANNER_MARGIN of usable)
    spec: RunSpec | None = None  # the run that trains it (a preset on trn2 or this CPU)
    nodes: int = 1

    @property
    def nodes_per_replica(self) -> int:
        """Nodes one model replica (one FSDP group of TP groups) spans."""
        return max(self.nodes // self.dp_replicate, 1)

    def sharding_words(self) -> str:
        """Where its FSDP runs, in words: inside a node, or over how many nodes."""
        span = self.nodes_per_replica
        where = "inside a node" if span == 1 else f"over {span} nodes"
        if self.dp_replicate == 1:
            return f"one copy sharded {where}"
        return f"{self.dp_replicate} replicas, each sharded {where}"

    @property
    def fits(self) -> bool:
        return self.memory.total_gib <= self.limit_gib

    @property
    def microbatches(self) -> int:
        return self.estimate.microbatches

    @property
    def tokens_per_s(self) -> float:
        """Estimated tokens per second of the whole job."""
        return self.estimate.tokens_per_s_per_rank * self.world

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step: local batch x data-parallel ranks x microbatches."""
        return self.local_batch * self.world // self.tp * self.microbatches

    def label(self) -> str:
        accumulate = f", {self.microbatches} microbatches" if self.microbatches > 1 else ""
        return (
            f"{self.layout}, AC {self.activation_checkpoint}, local batch "
            f"{self.local_batch}{accumulate}"
        )

    def row(self, rank: int) -> dict[str, Any]:
        return {
            "#": rank,
            "layout": self.layout,
            "AC": self.activation_checkpoint,
            "local batch": self.local_batch,
            "micro- batches": self.microbatches,
            "global batch": self.global_batch,
            "GiB/rank": round(self.memory.total_gib, 1),
            **self.estimate.row(),
            "tokens/s/rank": round(self.estimate.tokens_per_s_per_rank),
            "tokens/s": round(self.tokens_per_s),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "layout": self.layout,
            "tp": self.tp,
            "fsdp": self.fsdp,
            "dp_replicate": self.dp_replicate,
            "cp": 1,
            "pp": 1,
            "ep": 1,
            "activation_checkpoint": self.activation_checkpoint,
            "local_batch": self.local_batch,
            "microbatches": self.microbatches,
            "global_batch": self.global_batch,
            "global_batch_tokens": self.global_batch * self.seq_len,
            "memory_gib_per_rank": self.memory.total_gib,
            "memory_limit_gib": self.limit_gib,
            "fits": self.fits,
            "memory": self.memory.row(),
            "estimate": self.estimate.to_json(),
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_rank": self.estimate.tokens_per_s_per_rank,
            "argv": self.spec.to_argv() if self.spec else None,
        }


@dataclass
class LayoutPlan:
    """The planner's answer: the ranked candidates and what was left out, and why."""

    model: PlannedModel
    nodes: int
    seq_len: int
    machine: Machine
    compiled: bool
    global_batch_tokens: int
    candidates: list[Candidate]  # fitting, fastest first
    rejected: int  # layouts over the memory limit
    considered: int
    larger_batch: int = 0  # layouts whose one microbatch is already over the global batch
    excluded: list[str] = field(default_factory=list)
    lr_note: str = ""
    batch_note: str = ""  # where the global batch came from (ops/planner/batch.py)
    free_gib: float | None = None  # a CPU plan: this machine's free memory

    @property
    def best(self) -> Candidate:
        return self.candidates[0]

    @property
    def ranks(self) -> int:
        return self.nodes * self.machine.ranks_per_node

    def commands(self, candidate: Candidate | None = None) -> list[str]:
        """The commands that train ``candidate`` (the best), each runnable as printed:
        ``train`` on one node; on several trn2 nodes a Slurm script, after the ``data
        prepare`` that puts a hub corpus on shared storage (a job's ranks do not stream
        it: ops/jobs/plan.py refuses that); none for a model or machine this package does
        not train."""
        import shlex

        c = candidate or self.best
        if c.spec is None:
            return [
                "(no command: this package trains its Qwen3 presets on trn2 or a CPU; "
                f"{self.model.name} on {self.machine.key} is an estimate only)"
            ]
        if self.nodes == 1 or not self.machine.device.is_trn2:
            return [shlex.join(["qwen3-trn", "train", *c.spec.to_argv()])]
        from ...data.corpus import is_local
        from ...model.presets import get_preset

        spec, first = c.spec, []
        corpus = spec.corpus or get_preset(spec.preset).corpus
        if not is_local(corpus):  # the hub's: prepared once, on storage every node sees
            folder = f"{spec.out}-data"
            tokens = spec.steps * self.global_batch_tokens
            first = [shlex.join(["qwen3-trn", "data", "prepare", "--corpus", corpus,
                                 "--out", folder, "--max-tokens", str(tokens)])]  # fmt: skip
            spec = spec.replace(corpus=folder)
        argv = spec.to_argv()
        if "--steps" not in argv:  # a job file states its length
            argv = ["--steps", str(spec.steps), *argv]
        return [*first, shlex.join(["qwen3-trn", "slurm", *argv])]

    def command(self, candidate: Candidate | None = None) -> str:
        """The last of :meth:`commands`: the one that trains."""
        return self.commands(candidate)[-1]

    def saves(self):
        """The best layout's saves, sized as a job file sizes them (ops/jobs/saves.py)
        on the storage the job files assume (a Slurm script sizes them again where its
        --out lies)."""
        from ..jobs.saves import size_saves, storage_for

        c = self.best
        return size_saves(
            self.model.parameters, storage_for("", visible=False), nodes=self.nodes,
            step=(c.estimate.step_s, "the estimate above"),
        )  # fmt: skip

    def saves_lines(self) -> list[str]:
        """What the plan says of its saves: one line, then a warning line per problem."""
        saves = self.saves()
        cost = f", {saves.cost_words()}" if saves.cost_words() else ""
        line = (
            f"saves: every {saves.interval} steps (~{saves.interval_s / 60:,.0f} min, "
            f"Young/Daly at a {saves.job_mtbf_s / 3600:,.0f} h mean time between failures), "
            f"keep {saves.keep}, {saves.mode}{cost}; {saves.checkpoint_bytes / 1e9:,.3g} GB "
            f"each, {saves.disk_bytes / 1e9:,.0f} GB on disk ({saves.storage.free_source}); "
            "the job file sizes them again where --out lies"
        )
        return [line, *saves.warnings()]

    def runner_up_reason(self) -> str:
        """Why the second candidate lost, term by term."""
        if len(self.candidates) < 2:
            return "no runner-up: only one layout fits"
        return "runner-up " + why_slower(self.candidates[0], self.candidates[1])

    def fit_text(self, c: Candidate) -> str:
        """How it fits: of the HBM a plan may use, or of this CPU's free memory."""
        if self.free_gib is not None:
            return (
                f"{c.memory.total_gib:.1f} GiB per rank x {c.world} of this machine's "
                f"{self.free_gib:.1f} GiB free (what a CPU run may use); the planner's "
                f"margin: {PLANNER_MARGIN:.0%} of it"
            )
        return (
            f"{c.memory.total_gib:.1f} GiB per rank, limit {c.limit_gib:.1f} "
            f"({PLANNER_MARGIN:.0%} of the {c.memory.usable_gib:.1f} usable)"
        )

    def header(self) -> str:
        calibrated = (
            f"; efficiency measured on this machine ({self.machine.calibrated})"
            if self.machine.calibrated
            else ""
        )
        return (
            f"{self.model.describe()} on {self.nodes} x {self.machine.name} = {self.ranks} "
            f"ranks ({self.nodes} nodes x {self.machine.ranks_per_node}), seq {self.seq_len}, "
            f"global batch {self.global_batch_tokens:,} tokens, "
            f"{'compiled' if self.compiled else 'eager'}{calibrated}: {self.considered} "
            f"layouts, {self.rejected} over {PLANNER_MARGIN:.0%} of usable memory, "
            f"{self.larger_batch} over the global batch, {len(self.candidates)} fit"
        )

    def rows(self, top: int) -> list[dict[str, Any]]:
        return [c.row(i + 1) for i, c in enumerate(self.candidates[:top])]

    def to_json(self, top: int) -> dict[str, Any]:
        return {
            "model": self.model.name,
            "preset": self.model.preset,
            "parameters": self.model.parameters,
            "active_parameters": self.model.active_parameters,
            "nodes": self.nodes,
            "ranks_per_node": self.machine.ranks_per_node,
            "ranks": self.ranks,
            "seq_len": self.seq_len,
            "global_batch_tokens": self.global_batch_tokens,
            "compiled": self.compiled,
            "machine": self.machine.name,
            "calibration": self.machine.calibrated,
            "constants": self.machine.constants(),
            "considered": self.considered,
            "rejected_memory": self.rejected,
            "rejected_batch": self.larger_batch,
            "excluded": self.excluded,
            "lr": self.lr_note,
            "global_batch": self.batch_note,
            "candidates": [c.to_json() for c in self.candidates[:top]],
            "command": self.command(),
            "commands": self.commands(),
            "runner_up": self.runner_up_reason(),
            "saves": self.saves_lines(),
        }

    def render(self, top: int) -> str:
        from ...tables import Table

        lines = [
            self.header(),
            "",
            str(Table(self.rows(top))),
            "",
            "cost-model constants:",
            str(Table(self.machine.constants())),
            "",
            *[f"not considered: {why}" for why in self.excluded],
            f"best: {self.best.label()} ({self.fit_text(self.best)})",
            f"why not the runner-up: {self.runner_up_reason()}",
            *([f"global batch: {self.batch_note}"] if self.batch_note else []),
            *([f"lr: {self.lr_note}"] if self.lr_note else []),
            *self.saves_lines(),
            "",
            *self.commands(),
        ]
        return "\n".join(lines)


def _per_k_tokens(c: Candidate) -> dict[str, float]:
    """Milliseconds per 1,000 of a rank's tokens, by term of the step estimate."""
    e = c.estimate
    k = 1000 / (e.tokens_per_rank / e.tp)
    return {
        "compute": 1e3 * e.compute_s * k,
        "recompute": 1e3 * e.recompute_s * k,
        "exposed FSDP/HSDP": 1e3 * e.exposed_s * k,
        "TP collectives": 1e3 * e.tp_s * k,
    }


def ties(a: Candidate, b: Candidate) -> bool:
    return abs(a.tokens_per_s - b.tokens_per_s) <= TIE * max(a.tokens_per_s, b.tokens_per_s)


def why_slower(a: Candidate, b: Candidate) -> str:
    """One sentence: why ``b`` ranks below ``a`` (the term that grew most, or the tie rule)."""
    ta, tb = _per_k_tokens(a), _per_k_tokens(b)
    if ties(a, b):
        if a.dp_replicate > b.dp_replicate:
            rule = (
                f"more HSDP replicas go first ({a.sharding_words()}, against "
                f"{b.sharding_words()}): shorter FSDP rings"
            )
        elif a.memory.total_gib < b.memory.total_gib:
            rule = (
                f"it needs more memory ({b.memory.total_gib:.1f} vs "
                f"{a.memory.total_gib:.1f} GiB per rank)"
            )
        else:
            rule = f"its estimate is {100 * (1 - b.tokens_per_s / a.tokens_per_s):.1f}% lower"
        return (
            f"({b.label()}) ties on the estimate (within {TIE:.0%}, finer than the model "
            f"can tell); {rule}"
        )
    worst = max(ta, key=lambda t: tb[t] - ta[t])
    slower = 100 * (1 - b.tokens_per_s / a.tokens_per_s)
    return (
        f"({b.label()}) is {slower:.0f}% slower: per 1,000 tokens of a rank it spends "
        f"{tb[worst]:.2f} ms on {worst} against {ta[worst]:.2f} ms ("
        + ", ".join(f"{t} {tb[t]:.2f} vs {ta[t]:.2f}" for t in ta)
        + " ms)"
    )


def rank_candidates(candidates: list[Candidate]) -> list[Candidate]:
    """Fastest first; among ties (within :data:`TIE` of the fastest of their group) more
    HSDP replicas first, then less memory."""
    by_speed = sorted(candidates, key=lambda c: -c.tokens_per_s)
    ranked: list[Candidate] = []
    while by_speed:
        lead = by_speed[0]
        group = [c for c in by_speed if ties(lead, c)]
        group.sort(key=lambda c: (-c.dp_replicate, c.memory.total_gib, -c.tokens_per_s))
        ranked += group
        by_speed = [c for c in by_speed if c not in group]
    return ranked
