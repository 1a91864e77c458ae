"""A layout the user gives (``plan --layout fsdp=8,tp=1,ac=selective,local_batch=2``):
parsed, checked and priced by the same estimates as the ones ``plan`` searches."""

from __future__ import annotations

from typing import Any

from ...errors import ConfigError
from ...training.spec import ACTIVATION_CHECKPOINTING, RunSpec
from .layout import Candidate
from .machines import Machine, get_machine
from .models import PlannedModel, load_model
from .search import (
    CP_EXCLUDED,
    EP_EXCLUDED,
    PP_EXCLUDED,
    check_nodes,
    check_seq_len,
    default_seq_len,
    evaluate,
    evaluate_layout,
    tp_excluded,
)

LAYOUT_KEYS = ("fsdp", "tp", "dp_replicate", "cp", "pp", "ep", "ac", "local_batch")


def parse_layout(text: str) -> dict[str, Any]:
    """``fsdp=8,tp=1,ac=selective,local_batch=2`` -> its values (missing: defaults)."""
    values: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq or key not in LAYOUT_KEYS:
            raise ConfigError(
                f"--layout {part!r}: give KEY=VALUE pairs, KEY one of {', '.join(LAYOUT_KEYS)}"
            )
        if key == "ac":
            if value not in ACTIVATION_CHECKPOINTING:
                choices = "|".join(ACTIVATION_CHECKPOINTING)
                raise ConfigError(f"--layout ac={value!r}: one of {choices}")
            values[key] = value
            continue
        if not value.isdigit() or int(value) < 1:
            raise ConfigError(f"--layout {key}={value!r}: a positive integer")
        values[key] = int(value)
    return values


def plan_given_layout(
    model: str | PlannedModel,
    layout: str,
    *,
    nodes: int = 1,
    machine: Machine | str = "trn2",
    seq_len: int | None = None,
    compiled: bool = False,
    global_batch_tokens: int | None = None,
    nproc: int | None = None,
) -> tuple[PlannedModel, Machine, Candidate]:
    """One given layout evaluated (``--layout``), fitting or not: the backtest's entry."""
    planned = model if isinstance(model, PlannedModel) else load_model(model)
    if isinstance(machine, str):
        machine = get_machine(machine, nproc=nproc)
    nodes = check_nodes(nodes, machine)
    values = parse_layout(layout)
    for key, why in (("pp", PP_EXCLUDED), ("cp", CP_EXCLUDED), ("ep", EP_EXCLUDED)):
        if values.get(key, 1) > 1:
            raise ConfigError(f"--layout {key}={values[key]}: {why}")
    world = nodes * machine.ranks_per_node
    tp, replicas = values.get("tp", 1), values.get("dp_replicate", 1)
    if tp > machine.ranks_per_chip:
        raise ConfigError(f"--layout tp={tp}: {tp_excluded(machine)}")
    fsdp = values.get("fsdp", world // (tp * replicas))
    if tp * replicas * fsdp != world:
        raise ConfigError(
            f"--layout: tp {tp} x dp_replicate {replicas} x fsdp {fsdp} = "
            f"{tp * replicas * fsdp} ranks, but {nodes} node(s) of {machine.key} have "
            f"{world}: make the product {world}"
        )
    seq = check_seq_len(seq_len or default_seq_len(planned), planned)
    lb = values.get("local_batch", 1)
    micro = 1
    if global_batch_tokens:
        per_microbatch = lb * (world // tp) * seq
        if global_batch_tokens % per_microbatch:
            raise ConfigError(
                f"--global-batch-tokens {global_batch_tokens} is not a multiple of this "
                f"layout's microbatch ({per_microbatch} tokens)"
            )
        micro = global_batch_tokens // per_microbatch
    ac = values.get("ac", "selective")
    if planned.preset is not None and (machine.device.is_trn2 or machine.device.is_cpu):
        spec = RunSpec(
            preset=planned.preset, nproc=machine.ranks_per_node, nnodes=nodes, tp=tp,
            dp_replicate=replicas, activation_checkpoint=ac, local_batch_size=lb,
            global_batch_size=(global_batch_tokens // seq) if micro > 1 else None,
            seq_len=seq, device=machine.device_type, out=f"runs/{planned.preset}-{nodes}n",
        ).validate()  # fmt: skip
        return planned, machine, evaluate(spec, machine, compiled=compiled, microbatches=micro)
    candidate = evaluate_layout(
        planned, machine, nodes=nodes, tp=tp, dp_replicate=replicas, activation_checkpoint=ac,
        local_batch=lb, seq_len=seq, microbatches=micro, compiled=compiled,
    )  # fmt: skip
    return planned, machine, candidate
