"""What ``qwen3-trn plan`` is asked: its flags (one parser) and the values they carry
(:class:`PlanRequest`). report.py takes the values, not an argparse namespace, so a
lesson or a test asks for a plan the way the command line does, without a parser.

The flags that mean what ``train``'s mean (``--nnodes``, ``--seq-len``, ``--corpus``)
come from the same generator as train's (runs/arguments.py, one flag per RunSpec
field); the rest are the planner's own (a search, not a run: ``--local-batch-size``
left out tries 1, 2, 4 and 8). ``--nodes``, the planner's spelling before it took
train's, is kept as an alias (its help says so) so that older commands still run.
Cheap to import: the parser needs nothing heavy.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields
from typing import Any

from ...runs.arguments import _number, add_spec_arguments


@dataclass(frozen=True)
class PlanRequest:
    """One ``plan`` invocation's values (the flags' names, the flags' defaults)."""

    model: str
    nnodes: int = 1
    machine: str | None = None  # a key of machines.MACHINES (default: by --device)
    layout: str | None = None  # evaluate this one layout instead of searching
    compile: bool = False
    global_batch_tokens: int | None = None  # default: one node's, held as nodes grow
    seq_len: int | None = None
    local_batch_size: int | None = None  # default: try 1, 2, 4, 8
    device: str = "neuron"
    nproc: int | None = None  # a CPU plan's ranks
    corpus: str | None = None  # what the printed command trains on (default: the preset's)
    top: int = 5
    json: bool = False
    verify: bool = False
    verify_layers: int = 1
    measure: bool = False
    measure_top: int = 2
    steps: int = 3

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> PlanRequest:
        return cls(**{f.name: getattr(args, f.name) for f in fields(cls)})


def add_plan_parser(sub: Any, debug: argparse.ArgumentParser) -> None:
    """``qwen3-trn plan``: the layout planner's flags."""
    positive = lambda t: _number(int, 1, t)  # noqa: E731
    plan = sub.add_parser(
        "plan",
        parents=[debug],
        help="which layout for a Qwen3 on N trn2 nodes: every one that fits in memory, "
        "ranked by an estimated step time, and the command that trains the best",
    )
    plan.add_argument("--model", required=True,
                      help="Qwen3-0.6B, -1.7B, -4B, -8B, -14B, -32B, -30B-A3B, -235B-A22B, "
                      "a preset name, or a Hugging Face config.json (Qwen3, Qwen3-MoE, "
                      "Llama, Mixtral)")  # fmt: skip
    add_spec_arguments(plan, ("nnodes", "seq_len", "corpus"))
    # the planner's spelling before --nnodes (kept: older commands and notes still run)
    plan.add_argument("--nodes", dest="nnodes", type=positive, default=argparse.SUPPRESS,
                      metavar="N", help="the old spelling of --nnodes, kept so that older "
                      "commands still run")  # fmt: skip
    from .machines import MACHINES

    plan.add_argument("--machine", choices=tuple(MACHINES), default=None,
                      help="what to plan for (default: trn2, or cpu with --device cpu): "
                      + "; ".join(f"{k}: {v}" for k, v in MACHINES.items()))  # fmt: skip
    plan.add_argument("--layout", default=None,
                      help="evaluate this one layout instead of searching: fsdp=N,tp=N,"
                      "dp_replicate=N,cp=1,pp=1,ep=1,ac=none|selective|full,local_batch=N",
                      )  # fmt: skip
    plan.add_argument("--compile", action="store_true",
                      help="estimate a torch.compile'd run (its own fitted efficiency)",
                      )  # fmt: skip
    plan.add_argument("--global-batch-tokens", type=positive, default=None,
                      help="tokens per optimizer step, held fixed (gradient accumulation "
                      "makes it up; default: one node's, one sequence per rank, held as "
                      "nodes grow, larger only where the data-parallel ranks need it)")  # fmt: skip
    plan.add_argument("--local-batch-size", type=positive, default=None,
                      help="fix the local batch (default: try 1, 2, 4, 8)")  # fmt: skip
    plan.add_argument("--device", choices=("neuron", "cpu"), default="neuron",
                      help="plan for trn2 nodes (default) or for this CPU's ranks "
                      "(the mechanism, where there is no Trainium)")  # fmt: skip
    plan.add_argument("--nproc", type=positive, default=None, help="--device cpu: ranks")
    plan.add_argument("--top", type=positive, default=5, help="rows shown (default 5)")
    plan.add_argument("--json", action="store_true", help="one JSON object instead of tables")
    plan.add_argument("--verify", action="store_true",
                      help="dry-run the best layout at full width with torchtitan's fake "
                      "backend and compare its sharded state with the estimate")  # fmt: skip
    plan.add_argument("--verify-layers", type=positive, default=1,
                      help="blocks the --verify dry run builds (default 1)")  # fmt: skip
    plan.add_argument("--measure", action="store_true",
                      help="train the top candidates a few steps on this machine's device "
                      "and rank them by measured tokens/s")  # fmt: skip
    plan.add_argument("--measure-top", type=positive, default=2,
                      help="candidates --measure trains (default 2)")  # fmt: skip
    plan.add_argument("--steps", type=positive, default=3,
                      help="steps per measured candidate (default 3; the first warms up)",
                      )  # fmt: skip
