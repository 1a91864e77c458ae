"""What ``qwen3-trn plan`` prints: the ranked table, the checks asked for, the command."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import ConfigError


def plan_command(args: argparse.Namespace) -> tuple[str, bool]:
    """The output of ``qwen3-trn plan`` and whether its checks passed."""
    from ..lessons.tables import Table
    from ..training.metrics_file import strict_json
    from .checks import measure, verify
    from .search import plan_layouts

    if args.nproc is not None and args.device != "cpu":
        raise ConfigError(
            "--nproc sets a CPU plan's ranks; a trn2 plan has one rank per logical core "
            "(64 at LNC 2): drop --nproc, or plan --device cpu"
        )
    if args.measure and args.nodes > 1:
        raise ConfigError(
            "plan --measure trains the candidates on this machine only: time them with "
            "--nodes 1 (the layout inside a node), or run the printed slurm command"
        )
    if args.measure and args.device == "neuron":
        from ..device import resolve_device

        here = resolve_device("auto")
        if here != "neuron":
            raise ConfigError(
                f"plan --measure trains the candidates on this machine, which has no "
                f"NeuronCores ({here}); run it on a trn2 node, or measure a CPU plan here "
                "(--device cpu --model tiny)"
            )
    plan = plan_layouts(
        args.model,
        args.nodes,
        seq_len=args.seq_len,
        local_batch=args.local_batch_size,
        device=args.device,
        nproc=args.nproc,
    )
    ok = True
    data: dict[str, Any] = plan.to_json(args.top)
    text = [plan.render(args.top)]
    if args.verify:
        check = verify(plan.best, layers=args.verify_layers)
        ok = ok and check.agrees
        data["verify"] = check.to_json()
        text += ["", "verify: the best layout, dry-run with torchtitan's fake backend:"]
        text.append(str(Table(check.rows())))
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
        text += ["", plan.command(fastest)]
    if args.json:
        return strict_json(data, indent=2), ok
    return "\n".join(text), ok
