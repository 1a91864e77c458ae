"""The planner against published runs: every bf16 torchtitan row on H100, replayed.

The hosts: Meta's Grand Teton, 8 H100 96 GB HBM2e per host at 500 W, NVLink inside, 400
Gb/s RDMA per GPU between hosts (the same hardware paragraph on each page below);
tokens/s per GPU as torchtitan logs them (a TP group shares its tokens), memory the
peak reserved. Sequence 8,192 throughout (torchtitan's llama3 configs of the time).

- pytorch/torchtitan ``benchmarks/llama3_h100_202412_torchtitan.md`` (torchtitan
  9dec370, 2024-12): Tables 1 and 3, Llama 3.1 8B, FSDP on 8 and 128 GPUs, local batch 2,
  selective AC, eager and compiled. Its Tables 2, 4, 5 and 6 use Float8, which the cost
  model does not price.
- ``docs/performance.md`` as of torchtitan 3faaa1a (2024-08-23, "Fix the performance
  number for 405B"): Llama 3.1 405B on 128 of the same H100s ("HBM2e based lower TDP SXM
  H100(95GB)", its footnote 1), FSDP 16 x TP 8, full AC, local batch 2, "Optimizations:
  None": 109 tokens/s per GPU. None means the config before #554 turned compile, async
  TP and Float8 on (train_configs/llama3_405b.toml, compile = false): eager.
- ``benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md`` (torchtitan 820504e, 2025-06),
  the "Vanilla TP" bf16 column: Llama 3 70B on 256 H100s, FSDP 32 x TP 8, torch.compile,
  full AC, local batch 16: 597.3; Llama 3 8B on 64 H100s, FSDP 8 x TP 8, torch.compile,
  per-op selective AC, local batch 12: 4,378. Its async-TP column (collectives overlapped
  by micro-pipelining, which the cost model does not price) and its Float8 rows are not
  replayed.

Not replayed either: docs/performance.md's A100 rows (64 A100s; the hosts' network is
not stated, and there is no A100 machine here) and the H200 benchmark (Float8).

The machine's efficiency is fitted once per mode, on :data:`FITTED_ON` (the 8-GPU FSDP
rows); every other row, and every memory figure, is a prediction. The TP rows test the
collectives inside a node, priced at NCCL's own ring bandwidth for Hopper NVLink
(ops/planner/machines.py, ``H100_RING_GB_S``: derived, not fitted). No published
torchtitan training throughput on trn2 was found in AWS's Neuron docs (the archived
training benchmarks there are Trn1's, NxD Training, which ended with Neuron 2.30), so no
trn2 row.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from qwen3_trn_helpers.ops.planner.given import plan_given_layout
from qwen3_trn_helpers.ops.planner.machines import get_machine
from qwen3_trn_helpers.ops.planner.models import from_config_json

SOURCE = "pytorch/torchtitan benchmarks/ and docs/performance.md (the module docstring)"
#: the goal: every row within this relative error, throughput and (where published) memory
GOAL = 0.15


@dataclass(frozen=True)
class PublishedRow:
    table: str
    model: str  # folder of tests/data holding its config.json
    nodes: int  # hosts of 8 GPUs
    layout: str  # --layout
    compiled: bool
    tokens_per_s_per_gpu: float
    memory_gib: float | None  # None: the page gives none


#: seq 8192; global batch = local batch x data-parallel ranks (no accumulation)
ROWS = (
    PublishedRow("Table 1: FSDP", "llama3.1-8b", 1, "fsdp=8,ac=selective,local_batch=2", False,
                 5762, 82.4),
    PublishedRow("Table 1: FSDP + torch.compile", "llama3.1-8b", 1,
                 "fsdp=8,ac=selective,local_batch=2", True, 6667, 77.0),
    PublishedRow("Table 3: FSDP", "llama3.1-8b", 16, "fsdp=128,ac=selective,local_batch=2",
                 False, 5605, 67.0),
    PublishedRow("Table 3: FSDP + torch.compile", "llama3.1-8b", 16,
                 "fsdp=128,ac=selective,local_batch=2", True, 6514, 62.0),
    PublishedRow("performance.md: 405B, 2D", "llama3.1-405b", 16,
                 "fsdp=16,tp=8,ac=full,local_batch=2", False, 109, None),
    PublishedRow("asyncTP: 70B, vanilla TP", "llama3.1-70b", 32,
                 "fsdp=32,tp=8,ac=full,local_batch=16", True, 597.3, None),
    PublishedRow("asyncTP: 8B, vanilla TP", "llama3.1-8b", 8,
                 "fsdp=8,tp=8,ac=selective,local_batch=12", True, 4378, None),
)  # fmt: skip
#: the rows the efficiency is fitted on, one per mode (cost.H100_EFFICIENCY)
FITTED_ON = {"eager": ROWS[0], "compiled": ROWS[1]}
SEQ_LEN = 8192
MACHINE = "h100-96gb"


@dataclass(frozen=True)
class Replay:
    row: PublishedRow
    predicted_tokens_per_s: float
    predicted_memory_gib: float

    @property
    def throughput_error(self) -> float:
        return self.predicted_tokens_per_s / self.row.tokens_per_s_per_gpu - 1

    @property
    def memory_error(self) -> float | None:
        if self.row.memory_gib is None:
            return None
        return self.predicted_memory_gib / self.row.memory_gib - 1

    @property
    def fitted(self) -> bool:
        return self.row in FITTED_ON.values()

    def to_row(self) -> dict[str, object]:
        r = self.row
        return {
            "row": r.table + (" (fitted)" if self.fitted else ""),
            "GPUs": 8 * r.nodes,
            "tokens/s/GPU predicted": round(self.predicted_tokens_per_s),
            "published": r.tokens_per_s_per_gpu,
            "error": f"{100 * self.throughput_error:+.1f}%",
            "memory GiB predicted": round(self.predicted_memory_gib, 1),
            "published GiB": r.memory_gib if r.memory_gib is not None else "-",
            "memory error": "-"
            if self.memory_error is None
            else f"{100 * self.memory_error:+.1f}%",
        }


def replay(row: PublishedRow, configs: Path, efficiency: dict[str, float] | None = None) -> Replay:
    """One published row through ``plan --layout`` (its model's config.json in ``configs``)."""
    from dataclasses import replace

    machine = get_machine(MACHINE)
    if efficiency is not None:
        machine = replace(machine, efficiency=efficiency)
    model = from_config_json(configs / row.model / "config.json")
    _, _, c = plan_given_layout(
        model, row.layout, nodes=row.nodes, machine=machine, seq_len=SEQ_LEN,
        compiled=row.compiled,
    )  # fmt: skip
    return Replay(row, c.estimate.tokens_per_s_per_rank, c.memory.total_gib)


def backtest(configs: Path) -> list[Replay]:
    """Every published bf16 row replayed."""
    return [replay(row, configs) for row in ROWS]


def fit_efficiency(mode: str, configs: Path) -> float:
    """The efficiency that reproduces :data:`FITTED_ON`'s row of ``mode`` exactly."""
    from qwen3_trn_helpers.ops.planner.checks import fitted_efficiency

    row = FITTED_ON[mode]
    return fitted_efficiency(
        lambda e: replay(row, configs, {mode: e, "eager": e}).predicted_tokens_per_s,
        row.tokens_per_s_per_gpu,
    )
