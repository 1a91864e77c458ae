"""``qwen3-trn plan``: every layout of a Qwen3 on N nodes, those that fit, fastest first.

A layout is what torchtitan's ParallelismConfig and the run's settings decide: tensor
parallel degree (inside a chip), FSDP inside a node, HSDP replicas or FSDP across nodes,
activation checkpointing and local batch. Each candidate is a :class:`RunSpec` planned by
the same ``plan_run`` a training run uses, so its memory estimate is the one ``train``
checks (training/memory.py: every term) and its command trains exactly it. Those over
90% of HBM are dropped; the rest are ranked by the step-time model (planner/cost.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from ..model.family import FAMILY, find_model
from ..model.presets import get_preset
from ..training.memory import MemoryEstimate
from ..training.spec import ACTIVATION_CHECKPOINTING, RunSpec
from .cost import Machine, StepEstimate, estimate_step

LOCAL_BATCHES = (1, 2, 4, 8)
TP_DEGREES = (1, 2, 4, 8)

#: Why no candidate has expert parallelism (read from the code, not assumed)
EP_EXCLUDED = (
    "EP excluded: torchtitan 0.3.0's expert parallelism shards the experts over ranks and "
    "moves tokens to them all-to-all in RoutedExperts' token dispatcher; this package's "
    "BlockwiseRoutedExperts (model/moe_blockwise.py, what nki_moe runs) replaces that "
    "forward, never calls the dispatcher and computes all E experts on each rank (EP 1), "
    "as the NKI kernel is built for"
)
MOE_TP_EXCLUDED = (
    "TP not enumerated for MoE: the blockwise experts compute on each expert weight's local "
    "tensor and have not been tested with TP-sharded experts (AWS's 30B-A3B recipe: FSDP only)"
)


@dataclass(frozen=True)
class Candidate:
    """One layout that fits, with its memory and step estimates."""

    spec: RunSpec
    layout: str
    tp: int
    fsdp: int
    dp_replicate: int
    memory: MemoryEstimate
    estimate: StepEstimate
    world: int
    activation_checkpoint: str

    @property
    def local_batch(self) -> int:
        return self.spec.local_batch_size

    @property
    def tokens_per_s(self) -> float:
        """Estimated tokens per second of the whole job."""
        return self.estimate.tokens_per_s_per_rank * self.world

    @property
    def global_batch(self) -> int:
        """Sequences per step: local batch x data-parallel ranks (TP groups share theirs)."""
        return self.local_batch * self.world // self.tp

    def label(self) -> str:
        return f"{self.layout}, AC {self.activation_checkpoint}, local batch {self.local_batch}"

    def row(self, rank: int) -> dict[str, Any]:
        return {
            "#": rank,
            "layout": self.layout,
            "AC": self.activation_checkpoint,
            "local batch": self.local_batch,
            "global batch": self.global_batch,
            "GiB/rank": round(self.memory.total_gib, 1),
            **self.estimate.row(),
            "tokens/s": round(self.tokens_per_s),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "layout": self.layout,
            "tp": self.tp,
            "fsdp": self.fsdp,
            "dp_replicate": self.dp_replicate,
            "ep": 1,
            "activation_checkpoint": self.activation_checkpoint,
            "local_batch": self.local_batch,
            "global_batch": self.global_batch,
            "memory": self.memory.row(),
            "estimate": self.estimate.row(),
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_rank": self.estimate.tokens_per_s_per_rank,
            "argv": self.spec.to_argv(),
        }


@dataclass
class LayoutPlan:
    """The planner's answer: the ranked candidates and what was left out, and why."""

    model: str
    preset: str
    nodes: int
    seq_len: int
    machine: Machine
    candidates: list[Candidate]  # fitting, fastest first
    rejected: int  # layouts over the memory limit
    considered: int
    excluded: list[str] = field(default_factory=list)
    free_gib: float | None = None  # a CPU plan: this machine's free memory

    @property
    def best(self) -> Candidate:
        return self.candidates[0]

    def command(self, candidate: Candidate | None = None) -> str:
        """The command that trains ``candidate`` (the best): train on one node, a Slurm
        script for several."""
        import shlex

        c = candidate or self.best
        verb = "train" if self.nodes == 1 or self.machine.device_type != "neuron" else "slurm"
        argv = c.spec.to_argv()
        if verb == "slurm" and "--steps" not in argv:  # a job file states its length
            argv = ["--steps", str(c.spec.steps), *argv]
        return shlex.join(["qwen3-trn", verb, *argv])

    def runner_up_reason(self) -> str:
        """Why the second candidate lost, term by term."""
        if len(self.candidates) < 2:
            return "no runner-up: only one layout fits"
        return "runner-up " + why_slower(self.candidates[0], self.candidates[1])

    def fit_text(self, c: Candidate) -> str:
        """How it fits: of the HBM a plan may use, or of this CPU's free memory."""
        if self.free_gib is not None:
            return (
                f"{c.memory.total_gib:.1f} GiB per rank x {c.spec.nproc} of this machine's "
                f"{self.free_gib:.1f} GiB free; a plan may use 90%"
            )
        return f"{c.memory.total_gib:.1f} of {c.memory.usable_gib:.1f} usable GiB per rank"

    def rows(self, top: int) -> list[dict[str, Any]]:
        return [c.row(i + 1) for i, c in enumerate(self.candidates[:top])]

    def to_json(self, top: int) -> dict[str, Any]:
        return {
            "model": self.model,
            "preset": self.preset,
            "nodes": self.nodes,
            "seq_len": self.seq_len,
            "machine": self.machine.name,
            "constants": self.machine.constants(),
            "considered": self.considered,
            "rejected_memory": self.rejected,
            "excluded": self.excluded,
            "candidates": [c.to_json() for c in self.candidates[:top]],
            "command": self.command(),
            "runner_up": self.runner_up_reason(),
        }

    def render(self, top: int) -> str:
        from ..lessons.tables import Table

        lines = [
            f"{self.model} on {self.nodes} x {self.machine.name}, seq {self.seq_len}: "
            f"{self.considered} layouts, {self.rejected} over 90% of memory, "
            f"{len(self.candidates)} fit",
            "",
            str(Table(self.rows(top))),
            "",
            "cost-model constants:",
            str(Table(self.machine.constants())),
            "",
            *[f"not considered: {why}" for why in self.excluded],
            f"best: {self.best.label()} ({self.fit_text(self.best)})",
            f"why not the runner-up: {self.runner_up_reason()}",
            "",
            self.command(),
        ]
        return "\n".join(lines)


def _per_k_tokens(c: Candidate) -> dict[str, float]:
    """Milliseconds per 1,000 of a rank's tokens, by term of the step estimate."""
    e = c.estimate
    k = 1000 / (e.tokens_per_rank / e.tp)
    busy = e.compute_s + e.recompute_s
    exposed = max(e.overlapped_comm_s - busy, 0) + e.exposed_comm_s
    return {
        "compute": 1e3 * e.compute_s * k,
        "recompute": 1e3 * e.recompute_s * k,
        "exposed FSDP/HSDP": 1e3 * exposed * k,
        "TP collectives": 1e3 * e.tp_s * k,
    }


def why_slower(a: Candidate, b: Candidate) -> str:
    """One sentence: why ``b`` is estimated slower than ``a`` (the term that grew most)."""
    ta, tb = _per_k_tokens(a), _per_k_tokens(b)
    if b.tokens_per_s >= a.tokens_per_s * (1 - 1e-9):
        return (
            f"({b.label()}) ties on the estimate; it ranks lower for needing more memory "
            f"({b.memory.total_gib:.1f} vs {a.memory.total_gib:.1f} GiB per rank)"
        )
    worst = max(ta, key=lambda t: tb[t] - ta[t])
    slower = 100 * (1 - b.tokens_per_s / a.tokens_per_s)
    return (
        f"({b.label()}) is {slower:.0f}% slower: per 1,000 tokens of a rank it spends "
        f"{tb[worst]:.2f} ms on {worst} against {ta[worst]:.2f} ms ("
        + ", ".join(f"{t} {tb[t]:.2f} vs {ta[t]:.2f}" for t in ta)
        + " ms)"
    )


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def machine_for(device: str, nproc: int | None) -> Machine:
    """The machine a plan is for: a trn2.48xlarge at this LNC, or this CPU."""
    from .cost import cpu_machine, trn2_machine

    if device == "neuron":
        from ..trn2 import lnc_from_env

        return trn2_machine(lnc_from_env())
    if device == "cpu":
        from ..lessons.preflight import cpu_matmul_peak

        return cpu_machine(nproc or 1, cpu_matmul_peak())
    raise ConfigError(f"plan targets 'neuron' (trn2) or 'cpu', not {device!r}")


def plan_layouts(
    model: str,
    nodes: int = 1,
    *,
    seq_len: int | None = None,
    local_batch: int | None = None,
    device: str = "neuron",
    nproc: int | None = None,
    machine: Machine | None = None,
    out: str | None = None,
) -> LayoutPlan:
    """Every layout of ``model`` on ``nodes`` nodes that fits, fastest first.

    ``device`` "neuron" plans for trn2.48xlarge nodes (one rank per logical core);
    "cpu" for this machine (``nproc`` ranks, its memory, its measured matmul peak), so
    the mechanism runs where there is no Trainium.
    """
    preset = get_preset(find_model(model))
    name = next((m.name for m in FAMILY.values() if m.preset == preset.name), preset.name)
    if not isinstance(nodes, int) or nodes < 1:
        raise ConfigError(f"nodes must be a positive integer, got {nodes!r}")
    if device == "cpu" and nodes != 1:
        raise ConfigError("a CPU plan is for this machine: --nodes 1 (and --nproc N ranks)")
    machine = machine or machine_for(device, nproc)
    per_node = machine.ranks_per_node
    seq = seq_len or preset.seq_len
    moe = preset.shape.is_moe
    excluded = []
    tps = [t for t in TP_DEGREES if t <= machine.ranks_per_chip]
    if machine.device_type == "neuron" and machine.ranks_per_chip < max(TP_DEGREES):
        excluded.append(
            f"TP above {machine.ranks_per_chip} (one chip's ranks): its per-block "
            "collectives stay inside a chip (Neuron docs, training best practices: keep TP4 "
            "within a chip)"
        )
    if moe:
        tps = [1]
        excluded += [EP_EXCLUDED, MOE_TP_EXCLUDED]
    shape = preset.shape
    tps = [t for t in tps if shape.n_heads % t == 0 and shape.n_kv_heads % t == 0]
    world = nodes * per_node
    batches = (local_batch,) if local_batch else LOCAL_BATCHES
    free = None
    if machine.device_type == "cpu":
        from ..runs.run import available_memory_gib

        free = available_memory_gib()
    out = out or f"runs/{preset.name}-{nodes}n"
    candidates, rejected, considered = [], 0, 0
    closest: MemoryEstimate | None = None  # the smallest of those that do not fit
    for tp in tps:
        for replicas in _divisors(nodes) if machine.device_type == "neuron" else [1]:
            if (world // replicas) % tp:
                continue
            for ac in ACTIVATION_CHECKPOINTING:
                for lb in batches:
                    considered += 1
                    spec = RunSpec(
                        preset=preset.name,
                        nproc=per_node,
                        nnodes=nodes,
                        tp=tp,
                        dp_replicate=replicas,
                        activation_checkpoint=ac,
                        local_batch_size=lb,
                        seq_len=seq,
                        device=machine.device_type,
                        out=out,
                    ).validate()
                    candidate, memory = evaluate(spec, machine, free_gib=free)
                    if candidate is None:
                        rejected += 1
                        if closest is None or memory.total_gib < closest.total_gib:
                            closest = memory
                    else:
                        candidates.append(candidate)
    if not candidates:
        raise ConfigError(no_fit_message(name, nodes, seq, considered, closest, excluded))
    candidates.sort(key=lambda c: (-c.tokens_per_s, c.memory.total_gib))
    return LayoutPlan(
        model=name,
        preset=preset.name,
        nodes=nodes,
        seq_len=seq,
        machine=machine,
        candidates=candidates,
        rejected=rejected,
        considered=considered,
        excluded=excluded,
        free_gib=free,
    )


def no_fit_message(
    name: str,
    nodes: int,
    seq: int,
    considered: int,
    closest: MemoryEstimate | None,
    excluded: list[str],
) -> str:
    """Why nothing fits: the smallest layout's total and its largest term, and whether more
    nodes would help (sharded state shrinks with ranks; a gathered block does not)."""
    text = f"no layout of {name} fits {nodes} node(s) at seq_len {seq} ({considered} tried)"
    if closest is None:
        return text
    terms = {k: v for k, v in closest.row().items() if k not in _TOTALS}
    largest = max(terms, key=lambda k: terms[k])
    text += (
        f": the smallest needs {closest.total_gib:.1f} GiB per rank of "
        f"{closest.usable_gib:.1f} usable, {terms[largest]:.1f} GiB of it {largest}"
    )
    if largest == "FSDP buffers":
        text += (
            " (one block gathered in bf16, the next prefetched, and its gradients: it does "
            "not shrink with more nodes)"
        )
        if any(e.startswith("EP excluded") for e in excluded):
            text += (
                "; a model this size needs expert or tensor parallelism over its experts, "
                "which this package's blockwise experts do not support yet (they compute "
                "every expert on each rank: model/moe_blockwise.py)"
            )
        return text
    return text + "; plan more nodes (--nodes), a shorter --seq-len, or a smaller model"


_TOTALS = ("total GiB", "usable GiB (90%)", "HBM GiB")


def evaluate(
    spec: RunSpec, machine: Machine, *, free_gib: float | None = None
) -> tuple[Candidate | None, MemoryEstimate]:
    """``spec`` planned for ``machine``: a Candidate if it fits (None if not), its memory.

    Planned by ``plan_run`` for the target machine as a run there is (no files read),
    without its refusal, so that a layout over the limit still has its numbers. On a
    CPU (``free_gib``: this machine's free memory) every rank shares that memory.
    """
    from ..training.plan import memory_fit_problem, plan_run

    plan = plan_run(spec.replace(skip_memory_check=True), device_type=machine.device_type)
    memory = plan.memory()
    if memory_fit_problem(plan, free_gib):  # the rule train uses (HBM, or free memory)
        return None, memory
    estimate = estimate_step(
        plan.shape,
        machine,
        nnodes=spec.nnodes,
        tp=plan.tp,
        dp_replicate=plan.dp_replicate,
        activation_checkpoint=plan.activation_checkpoint,
        local_batch=spec.local_batch_size,
        seq_len=plan.seq_len,
        reduce_bytes=2 if plan.reduce_dtype == "bfloat16" else 4,
    )
    candidate = Candidate(
        spec=spec,
        layout=str(plan.layout),
        tp=plan.tp,
        fsdp=plan.fsdp,
        dp_replicate=plan.dp_replicate,
        memory=memory,
        estimate=estimate,
        world=spec.world,
        activation_checkpoint=plan.activation_checkpoint,
    )
    return candidate, memory
