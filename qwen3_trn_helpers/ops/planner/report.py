"""What ``qwen3-trn plan`` prints: the ranked table, the checks asked for, the command."""

from __future__ import annotations

import os
from typing import Any

from ...errors import ConfigError
from .machines import CPU_MACHINE, default_machine_key
from .request import PlanRequest

#: the most ranks a CPU plan may start per core (gloo ranks beyond that only wait)
CPU_RANKS_PER_CORE = 1


def check_arguments(args: PlanRequest, machine_key: str) -> None:
    """Refuse what this machine or the model cannot have, in one line naming the limit."""
    if args.nproc is not None and machine_key != CPU_MACHINE:
        raise ConfigError(
            "--nproc sets a CPU plan's ranks; a trn2 plan has one rank per logical core "
            "(64 at LNC 2): drop --nproc, or plan --machine cpu"
        )
    if machine_key == CPU_MACHINE and args.nproc is not None:
        cores = os.cpu_count() or 1
        if args.nproc > cores * CPU_RANKS_PER_CORE:
            raise ConfigError(
                f"--nproc {args.nproc} is more ranks than this machine's {cores} CPU cores; "
                f"give --nproc {cores} or fewer"
            )
    if args.measure and args.nnodes > 1:
        raise ConfigError(
            "plan --measure trains the candidates on this machine only: time them with "
            "--nnodes 1 (the layout inside a node), or run the printed slurm command"
        )
    if args.measure and machine_key in ("trn2", "trn2u"):
        from ...device import resolve

        here = resolve()
        if not here.is_trn2:
            raise ConfigError(
                f"plan --measure trains the candidates on this machine, which has no "
                f"NeuronCores ({here}); run it on a trn2 node, or measure a CPU plan here "
                "(--machine cpu --model tiny)"
            )
    if args.measure and machine_key not in ("trn2", "trn2u", "cpu"):
        raise ConfigError(
            f"plan --measure trains with this package, which runs on trn2 or a CPU, not "
            f"{machine_key}: measure --machine cpu here or trn2 on a trn2 node"
        )


def plan_command(args: PlanRequest) -> tuple[str, bool]:
    """The output of ``qwen3-trn plan`` and whether its checks passed."""
    from ...tables import Table
    from ...training.metrics_file import strict_json
    from .activations import ACTIVATION_TOLERANCE
    from .checks import calibrate, measure, verify
    from .given import plan_given_layout
    from .models import load_model
    from .search import plan_layouts

    machine_key = args.machine or default_machine_key(args.device)
    check_arguments(args, machine_key)
    model = load_model(args.model)
    if args.verify and args.verify_layers > model.shape.n_layers:
        raise ConfigError(
            f"--verify-layers {args.verify_layers} is more than {model.name}'s "
            f"{model.shape.n_layers} layers; give {model.shape.n_layers} or fewer"
        )
    if (args.verify or args.measure) and (
        model.preset is None or machine_key not in ("trn2", "trn2u", "cpu")
    ):
        raise ConfigError(
            "--verify and --measure build or train the layout with this package, which "
            "trains its Qwen3 presets on trn2 or a CPU: give a Qwen3 name and --machine "
            "trn2 or cpu"
        )
    if args.layout is not None:
        _, machine, c = plan_given_layout(
            model, args.layout, nodes=args.nnodes, machine=machine_key, seq_len=args.seq_len,
            compiled=args.compile, global_batch_tokens=args.global_batch_tokens,
            nproc=args.nproc,
        )  # fmt: skip
        data = {
            "model": model.name,
            "parameters": model.parameters,
            "active_parameters": model.active_parameters,
            "machine": machine.name,
            "nodes": args.nnodes,
            "ranks_per_node": machine.ranks_per_node,
            "ranks": args.nnodes * machine.ranks_per_node,
            "compiled": args.compile,
            "calibration": machine.calibrated,
            "constants": machine.constants(),
            **c.to_json(),
        }
        if args.json:
            return strict_json(data, indent=2), True
        text = [
            f"{model.describe()} on {args.nnodes} x {machine.name} = "
            f"{data['ranks']} ranks ({args.nnodes} nodes x {machine.ranks_per_node}), "
            f"seq {c.seq_len}, {'compiled' if args.compile else 'eager'}: {c.label()}",
            str(Table([c.row(1)])),
            f"memory: {c.memory.total_gib:.1f} GiB per rank, limit {c.limit_gib:.1f}"
            + ("" if c.fits else ": OVER the planner's margin"),
            str(Table([c.memory.row()])),
            "cost-model constants:",
            str(Table(machine.constants())),
        ]
        return "\n".join(text), True
    plan = plan_layouts(
        model,
        args.nnodes,
        seq_len=args.seq_len,
        local_batch=args.local_batch_size,
        machine=machine_key,
        nproc=args.nproc,
        compiled=args.compile,
        global_batch_tokens=args.global_batch_tokens,
        corpus=args.corpus,
    )
    ok = True
    data: dict[str, Any] = plan.to_json(args.top)
    text = [plan.render(args.top)]
    if args.verify:
        check = verify(plan.best, layers=args.verify_layers, shape=model.shape)
        ok = ok and check.agrees
        data["verify"] = check.to_json()
        text += ["", "verify: the best layout, dry-run with torchtitan's fake backend:"]
        text.append(str(Table(check.rows())))
        if check.activations:
            text += ["", "verify: one block's activations per AC mode (fake tensors, MemTracker), "
                     f"tolerance {100 * ACTIVATION_TOLERANCE:.0f}%:"]  # fmt: skip
            text.append(str(Table([a.row() for a in check.activations])))
    if args.measure:
        measured = measure(plan, top=args.measure_top, steps=args.steps)
        data["measure"] = [
            {**m.candidate.to_json(), "measured_tokens_per_s_per_rank": m.tokens_per_s_per_rank}
            for m in measured
        ]
        text += ["", f"measure: {args.steps} steps each on this machine, fastest first:"]
        text.append(str(Table([m.row(i + 1) for i, m in enumerate(measured)])))
        fastest = measured[0].candidate
        if fastest is not plan.best:
            text.append(f"measured fastest differs from the estimate's: {fastest.label()}")
        efficiency, path = calibrate(plan, measured)
        data["calibration_written"] = {"path": str(path), "efficiency": efficiency}
        text.append(
            f"calibration: measured efficiency {efficiency:.4f} (was "
            f"{plan.machine.mfu_efficiency(plan.compiled):.4f}) written to {path}; later "
            f"plans on {plan.machine.key} use it"
        )
        text += ["", *plan.commands(fastest)]
    if args.json:
        return strict_json(data, indent=2), ok
    return "\n".join(text), ok
