"""The planner against published runs: torchtitan's Llama 3.1 H100 benchmarks, replayed.

Source: pytorch/torchtitan ``benchmarks/llama3_h100_202412_torchtitan.md`` (end of 2024,
torchtitan 9dec370): Grand Teton hosts, 8 H100 96 GB HBM2e per host at 500 W, NVLink
inside, 400 Gb/s RDMA per GPU between hosts; tokens/s per GPU read at step 90, memory
the peak reserved. Every bf16 row is here: Tables 1 and 3 (Llama 3.1 8B, FSDP, local
batch 2, selective activation checkpointing, sequence 8,192: torchtitan's llama3_8b
default then), eager and with torch.compile. Every other row of that page uses Float8
(Tables 2, 4, 5, 6), which the cost model does not price, so none is replayed.

The machine's efficiency is fitted once per mode, on :data:`FITTED_ON` (the 8-GPU row);
the 128-GPU rows, and every memory figure, are predictions. No published torchtitan
training throughput on trn2 was found in AWS's Neuron docs (the archived training
benchmarks there are Trn1's, NxD Training, which ended with Neuron 2.30), so no trn2 row.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from qwen3_trn_helpers.ops.planner.given import plan_given_layout
from qwen3_trn_helpers.ops.planner.machines import get_machine
from qwen3_trn_helpers.ops.planner.models import from_config_json

SOURCE = "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md"
#: the goal: every row within this relative error, throughput and memory
GOAL = 0.20


@dataclass(frozen=True)
class PublishedRow:
    table: str
    model: str  # folder of tests/data holding its config.json
    nodes: int  # hosts of 8 GPUs
    layout: str  # --layout
    compiled: bool
    tokens_per_s_per_gpu: float
    memory_gib: float


#: seq 8192; global batch = local batch 2 x GPUs (no accumulation)
ROWS = (
    PublishedRow("Table 1: FSDP", "llama3.1-8b", 1, "fsdp=8,ac=selective,local_batch=2", False,
                 5762, 82.4),
    PublishedRow("Table 1: FSDP + torch.compile", "llama3.1-8b", 1,
                 "fsdp=8,ac=selective,local_batch=2", True, 6667, 77.0),
    PublishedRow("Table 3: FSDP", "llama3.1-8b", 16, "fsdp=128,ac=selective,local_batch=2",
                 False, 5605, 67.0),
    PublishedRow("Table 3: FSDP + torch.compile", "llama3.1-8b", 16,
                 "fsdp=128,ac=selective,local_batch=2", True, 6514, 62.0),
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
    def memory_error(self) -> float:
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
            "published GiB": r.memory_gib,
            "memory error": f"{100 * self.memory_error:+.1f}%",
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
