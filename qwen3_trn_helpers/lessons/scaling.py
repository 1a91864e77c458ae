"""Scaling out on a trn2.48xlarge: plans, memory per core, MFU and the launch commands.

Everything here is resolved for device ``"neuron"`` on any machine (``plan_run(...,
device_type="neuron")``): the same code decides what a trn2 runs, so a CPU can show and
test it. Nothing pretends to compute on a NeuronCore.
"""

from __future__ import annotations

from ..model.presets import PRESETS
from ..model.shapes import Qwen3Shape
from ..model.variants import VARIANTS
from ..runs.launch import shell_command, torchrun_command
from ..training.plan import Plan, plan_run
from ..training.spec import RunSpec
from ..trn2 import DEFAULT_LNC, TRN2, Topology


def trn2_plan(variant: str, preset: str | None = None, **params) -> Plan:
    """What a trn2.48xlarge would run: the variant's full-size preset on its 64 ranks."""
    name = preset or VARIANTS[variant].trn2_preset
    world = params.pop("nproc", PRESETS[name].world_size)
    spec = RunSpec(variant=variant, preset=name, nproc=world, out="runs/trn2", **params)
    return plan_run(spec, device_type="neuron")


def params_and_flops_per_token(shape: Qwen3Shape, seq_len: int) -> tuple[int, int]:
    """torchtitan's own count (``get_nparams_and_flops``) on a meta-device model.

    FLOPs per token = 6 x (parameters a token passes through, embeddings excluded) +
    12 x layers x heads x head_dim x seq_len for attention: forward and backward.
    """
    import torch

    from ..model.variants import native_model_config

    config = native_model_config(shape)
    with torch.device("meta"):
        model = config.build()
    return config.get_nparams_and_flops(model, seq_len)


def tokens_per_s_for_mfu(mfu: float, flops_per_token: float, topology: Topology = TRN2) -> float:
    return mfu / 100 * topology.peak_tflops_per_core * 1e12 / flops_per_token


#: what every trn2 command line starts with (the logical-core size, set explicitly)
_LNC = f"NEURON_LOGICAL_NC_CONFIG={DEFAULT_LNC} "


def trn2_launch_spec(variant: str = "native", init: str = "pretrained", steps: int = 10):
    """The spec of one of AWS's two runs, as ``reproduce`` builds it for trn2."""
    from .reproduction import reproduction_specs

    base = RunSpec(variant=variant, steps=steps, out=f"runs/trn2-{variant}")
    return reproduction_specs(base, "neuron")[init]


def trn2_launch_command(variant: str = "native", init: str = "pretrained", steps: int = 10) -> str:
    """``qwen3-trn train`` for the AWS setup: it resolves the weights once, then torchrun."""
    spec = trn2_launch_spec(variant, init, steps)
    return _LNC + shell_command(["qwen3-trn", "train", *spec.to_argv()])


def trn2_torchrun_command(variant: str = "native", steps: int = 10) -> str:
    """The torchrun line that command starts (for a random-init run, nothing to fetch)."""
    plan = plan_run(trn2_launch_spec(variant, "random", steps), device_type="neuron")
    return _LNC + shell_command(torchrun_command(plan, python="python"))


def torchtitan_command(config: str, nproc: int = 64, *overrides: str) -> str:
    """torchtitan's own entry point on our registry, as torchtitan's docs launch it."""
    cmd = ["torchrun", f"--nproc_per_node={nproc}", "-m", "torchtitan.train",
           "--module", "qwen3_trn_helpers", "--config", config, *overrides]  # fmt: skip
    return _LNC + shell_command(cmd)


def mesh_figure(plan: Plan, topology: Topology = TRN2):
    """The plan's device mesh: one cell per rank, FSDP groups as rows, TP groups as
    columns, coloured by the Trainium2 chip each rank's logical core sits on."""
    import numpy as np
    from matplotlib import colormaps

    from .plots import NotebookFigure

    tp, fsdp = plan.tp, plan.fsdp
    ranks = np.arange(plan.world_size).reshape(fsdp, tp)  # tp innermost, as torchtitan
    chips = ranks // topology.cores_per_chip
    fig = NotebookFigure(figsize=(2.2 + 0.55 * tp * (2 if tp < 4 else 1), 0.32 * fsdp + 1.4),
                         dpi=110, layout="constrained")  # fmt: skip
    ax = fig.add_subplot()
    ax.imshow(chips, cmap=colormaps["tab20"], aspect="auto", vmin=0, vmax=19)
    for (row, col), rank in np.ndenumerate(ranks):
        ax.text(col, row, f"r{rank}\nchip {chips[row, col]}", ha="center", va="center",
                fontsize=6.5)  # fmt: skip
    ax.set_xticks(range(tp), [f"TP {c}" for c in range(tp)])
    ax.set_yticks(range(fsdp), [f"FSDP {r}" for r in range(fsdp)], fontsize=7)
    ax.set_title(
        f"{plan.preset.name}: {plan.world_size} ranks = TP {tp} x FSDP {fsdp}\n"
        f"(LNC {topology.lnc}: {topology.cores_per_chip} logical cores per chip)",
        fontsize="medium",
    )
    return fig


MEMORY_TERMS = ("params", "grads", "AdamW", "FSDP buffers", "kernel copies", "kernel saved",
                "kernel grads", "activations", "logits", "scores", "Neuron runtime")  # fmt: skip
#: one colour per term, never shared (matplotlib's default cycle has 10 for 11 terms):
#: the Okabe-Ito palette (distinguishable with colour-vision deficiencies) and four more
TERM_COLOURS = dict(zip(MEMORY_TERMS, (
    "#0072B2", "#56B4E9", "#009E73", "#E69F00", "#CC79A7", "#F0E442", "#D55E00",
    "#999999", "#882255", "#000000", "#44AA99"), strict=True))  # fmt: skip


def _wrapped(label: str, width: int = 14) -> str:
    """A bar label broken into lines of at most ``width`` characters, so neighbouring
    labels never overlap however many bars there are."""
    import textwrap

    return "\n".join(
        line for part in label.split("\n") for line in textwrap.wrap(part, width) or [""]
    )


def memory_figure(estimates: dict, measured: dict | None = None):
    """Stacked bars of per-core memory (training/memory.py terms) against the HBM line.

    ``measured`` maps a label to the dry run's measured params + grads + AdamW (GiB),
    drawn as a marker beside the estimate of those three terms.
    """
    from .plots import NotebookFigure

    fig = NotebookFigure(figsize=(10, 4.8), dpi=110, layout="constrained")
    ax = fig.add_subplot()
    labels = list(estimates)
    positions = range(len(labels))
    bottoms = [0.0] * len(labels)
    for term in MEMORY_TERMS:
        values = [estimates[label].row()[term] for label in labels]
        if not any(values):
            continue
        ax.bar(positions, values, bottom=bottoms, label=term, width=0.55,
               color=TERM_COLOURS[term], edgecolor="white", linewidth=0.5)  # fmt: skip
        bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
    hbm = next(iter(estimates.values())).hbm_gib
    ax.axhline(hbm, color="black", linestyle="--", linewidth=1,
               label=f"HBM per logical core ({hbm:.0f} GiB)")  # fmt: skip
    usable = next(iter(estimates.values())).usable_gib
    ax.axhline(usable, color="black", linestyle=":", linewidth=1,
               label=f"a plan may use 90% ({usable:.1f} GiB)")  # fmt: skip
    for i, label in enumerate(labels):
        if measured and label in measured:
            ax.plot([i + 0.36], [measured[label]], marker="<", color="black", markersize=8,
                    linestyle="none", label="measured params+grads+AdamW (dry run)"
                    if i == 0 else None)  # fmt: skip
    ax.set_xticks(list(positions), [_wrapped(label) for label in labels], fontsize=8)
    ax.set_ylabel("GiB per logical NeuronCore")
    ax.set_title("Memory per core on a trn2.48xlarge (estimate; measured where marked)")
    top = min(max(max(bottoms), hbm), 2 * hbm) * 1.08  # a plan far over HBM is clipped
    for i, total in enumerate(bottoms):
        if total > top:
            ax.text(i, top * 0.97, f"{total:.0f} GiB", ha="center", va="top", fontsize=7)
    ax.set_ylim(0, top)
    handles, names = ax.get_legend_handles_labels()
    terms = [i for i, n in enumerate(names) if n in TERM_COLOURS][::-1]  # as stacked: top first
    order = [i for i, n in enumerate(names) if n not in TERM_COLOURS] + terms
    ax.legend([handles[i] for i in order], [names[i] for i in order], fontsize="x-small",
              loc="upper left", bbox_to_anchor=(1.01, 1.0))  # fmt: skip
    return fig
