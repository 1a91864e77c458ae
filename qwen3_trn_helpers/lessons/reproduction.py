"""The seed experiment: 10 steps at local batch 1, from published weights and from random.

AWS trained Qwen3-4B-Instruct-2507 on a trn2.48xlarge (64 logical NeuronCores, TP 4 x
FSDP 16, sequence length 4096, C4 text) and saw step-1 loss 6.54 from the published
weights and 12.43 from random initialisation. ``reproduce()`` runs both 10-step runs for
a variant with everything but the initial weights identical, and lines them up with
those two numbers. On trn2 that is AWS's setup (the variant's full-size preset on 64
ranks, C4); on a CPU the small preset, the embedded corpus and the locally made
"published" checkpoint, so the comparison there is about the *shape* of the result
(pretrained far below random, random near ln V), not the exact values.

``scripts/setup.sh`` ends with this experiment (``qwen3-trn reproduce --brief``), so its
figure, with both curves, AWS's two step-1 losses and the gap at step 1, is the first
result a new user sees; notebook 03 draws the same figure with :meth:`Reproduction.figure`.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..device import Device, as_device
from ..model.shapes import VOCAB_SIZE
from ..training.metrics_file import strict_json, write_atomically
from ..training.plan import on_trn2, plan_run
from ..training.spec import RunSpec

#: Step-1 losses AWS reported (trn2.48xlarge, 10 steps, local batch size 1).
AWS_STEP1 = {"pretrained": 6.54, "random": 12.43}
INITS = ("pretrained", "random")
#: what each init is called on the figure and the terminal
INIT_NAMES = {"pretrained": "published weights", "random": "random init"}
#: where AWS's two numbers come from, for the figure and the terminal
AWS_RUN = "Qwen3-4B, trn2"
LN_VOCAB = math.log(VOCAB_SIZE)


#: the ranks a trn2 reproduction takes when the spec names none: unset, a trn2.48xlarge's
#: whole world for the full-size preset (64); a smaller number (a trn2.3xlarge's 4, or CI's
#: rehearsal of the notebooks on the torch-neuronx test double, 2) takes the variant's
#: small preset on that many ranks (docs: the notebooks on a smaller trn2)
TRN2_RANKS_VAR = "QWEN3_TRN_TRN2_RANKS"


def step1_gap(step1: Mapping[str, float]) -> float:
    """Random init's step-1 loss minus the published weights': the experiment's result
    in one number (nats/token), for AWS's run and for ours alike."""
    return step1["random"] - step1["pretrained"]


def where_it_ran(device_type: str, nproc: int) -> str:
    """The machine in a title's words: "CPU", "trn2, 64 ranks", "GPU"."""
    name = {"neuron": "trn2", "cuda": "GPU"}.get(device_type, device_type.upper())
    return name if nproc <= 1 else f"{name}, {nproc} ranks"


def shown(path: Path) -> str:
    """``path`` as the terminal shows it: relative to the working folder when inside it
    (setup's ``runs/first-run/...``), else whole."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def reproduction_specs(spec: RunSpec, device: Device | str) -> dict[str, RunSpec]:
    """Both runs of the experiment: the same spec but for ``init``.

    On trn2 a full-size preset is launched on its world size (64 ranks) unless ``nproc``
    or :data:`TRN2_RANKS_VAR` says otherwise; the preset is written out so both runs
    resolve to the same layout, sequence length, checkpointing and data.
    """
    base = spec.replace(local_batch_size=1, init="random")
    ranks = spec.nproc if spec.nproc > 1 else _trn2_ranks()
    if as_device(device).is_trn2 and spec.preset is None and ranks is not None:
        # fewer ranks than the full-size preset's world: the small preset, as plan_run
        # gives any run of fewer ranks (training/plan.py resolve_preset)
        base = base.replace(nproc=ranks)
        base = base.replace(preset=plan_run(base, device_type=device).preset.name)
    elif as_device(device).is_trn2:
        base = on_trn2(base)
    else:  # the preset this machine runs, written out
        base = base.replace(preset=plan_run(base, device_type=device).preset.name)
    out = Path(spec.out or f"runs/reproduce-{time.strftime('%Y%m%d-%H%M%S')}")
    return {
        init: base.replace(init=init, out=str(out / init), overwrite=spec.overwrite)
        for init in INITS
    }


def _trn2_ranks() -> int | None:
    """:data:`TRN2_RANKS_VAR`, checked (None when unset)."""
    import os

    ranks = os.environ.get(TRN2_RANKS_VAR, "").strip()
    if not ranks:
        return None
    if not ranks.isdigit() or not 1 <= int(ranks) <= 64:
        from ..errors import ConfigError

        raise ConfigError(f"{TRN2_RANKS_VAR}={ranks!r}: give a number of ranks from 1 to 64")
    return int(ranks)


@dataclass
class Reproduction:
    variant: str
    device_type: str
    runs: dict[str, Any]  # init -> RunResult
    out: Path
    wall_s: float = 0.0
    nproc: int = 1
    figure_path: Path | None = field(default=None)
    #: the inits whose finished run an earlier call left in ``out`` (picked up, not rerun)
    kept: tuple[str, ...] = ()

    @property
    def preset(self) -> str:
        """The preset both runs trained (written out by :func:`reproduction_specs`)."""
        return self.runs["random"].spec.preset or "default preset"

    @property
    def steps(self) -> int:
        return len(self.runs["random"].metrics)

    def step1(self) -> dict[str, float]:
        """Each run's step-1 loss (nats/token): a property of its initial weights."""
        return {init: self.runs[init].losses[0] for init in INITS}

    def gap(self) -> float:
        """Random init's step-1 loss minus the published weights' (AWS: 5.89)."""
        return step1_gap(self.step1())

    def title(self) -> str:
        """What the figure shows and where it ran."""
        where = where_it_ran(self.device_type, self.nproc)
        return (
            f"Qwen3 {self.variant} ({self.preset}, {where}): published weights vs "
            f"random init, {self.steps} step{'s' if self.steps != 1 else ''}"
        )

    def gap_line(self) -> str:
        """The line under the figure: the gap at step 1 here and in AWS's run."""
        ours, aws = self.step1(), AWS_STEP1
        return (
            f"gap at step 1: {self.gap():.2f} nats here ({ours['random']:.2f} - "
            f"{ours['pretrained']:.2f}); {step1_gap(aws):.2f} in AWS's run "
            f"({aws['random']} - {aws['pretrained']}; {AWS_RUN})"
        )

    def curve_names(self) -> dict[str, str]:
        """Each run's name on the figure, saying where its published weights came from:
        the hub, or (a small preset has none) the checkpoint this package made."""
        from ..model.presets import PRESETS

        preset = PRESETS.get(self.preset)
        source = preset.hub_id if preset and preset.hub_id else f"local {self.preset} checkpoint"
        return {"pretrained": f"{INIT_NAMES['pretrained']} ({source})", "random": "random init"}

    def brief_lines(self) -> list[str]:
        """What ``qwen3-trn reproduce --brief`` (setup's main job) prints: the two step-1
        losses, the gap against AWS's, and where the figure and metrics are."""
        ours, aws = self.step1(), AWS_STEP1
        where = f"{self.preset}, {where_it_ran(self.device_type, self.nproc)}"
        out = shown(self.out)
        return [
            f"step-1 loss: published weights {ours['pretrained']:.2f}, random init "
            f"{ours['random']:.2f} nats ({where}); AWS: {aws['pretrained']} and "
            f"{aws['random']} ({AWS_RUN})",
            f"gap at step 1: {self.gap():.2f} nats here, {step1_gap(aws):.2f} in AWS's run",
            f"figure: {shown(self.figure_path or self.out / 'reproduce.png')}  metrics: "
            f"{out}/summary.json and {{pretrained,random}}/metrics.jsonl",
        ]

    def step_rows(self) -> list[dict[str, object]]:
        """step | loss pretrained | loss random | AWS (step 1 only)."""
        pre, rnd = self.runs["pretrained"].metrics, self.runs["random"].metrics
        rows = []
        for a, b in zip(pre, rnd, strict=False):
            rows.append(
                {
                    "step": a["step"],
                    "loss pretrained": round(a["loss"], 3),
                    "loss random": round(b["loss"], 3),
                    "AWS pretrained": AWS_STEP1["pretrained"] if a["step"] == 1 else "",
                    "AWS random": AWS_STEP1["random"] if a["step"] == 1 else "",
                }
            )
        return rows

    def summary_rows(self) -> list[dict[str, object]]:
        """Step-1 loss of each run against AWS's, with the deviation."""
        rows = []
        for init in INITS:
            first = self.runs[init].losses[0]
            rows.append(
                {
                    "init": init,
                    "step-1 loss": round(first, 3),
                    "AWS step 1": AWS_STEP1[init],
                    "deviation": round(first - AWS_STEP1[init], 3),
                    # the last step trained (10 unless --steps said otherwise)
                    f"step-{self.runs[init].metrics[-1]['step']} loss": round(
                        self.runs[init].losses[-1], 3
                    ),
                }
            )
        return rows

    def figure(self):
        """Both loss curves, AWS's two step-1 losses as stars in the curves' colours,
        ln V, the title and the gap line: setup's figure and notebook 03's."""
        from .plots import loss_figure

        return loss_figure(
            {self.curve_names()[init]: self.runs[init].metrics for init in INITS},
            reference={
                f"AWS step 1, {INIT_NAMES[init]} ({AWS_STEP1[init]})": AWS_STEP1[init]
                for init in INITS
            },
            ln_vocab=LN_VOCAB,
            title=self.title(),
            caption=self.gap_line(),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "variant": self.variant,
            "device": self.device_type,
            "nproc": self.nproc,
            "preset": self.preset,
            "wall_s": round(self.wall_s, 1),
            "aws_step1": AWS_STEP1,
            "gap_step1": {"here": round(self.gap(), 3), "aws": round(step1_gap(AWS_STEP1), 3)},
            "summary": self.summary_rows(),
            "steps": self.step_rows(),
            "runs": {init: str(r.out) for init, r in self.runs.items()},
            "kept": list(self.kept),
        }


#: spec fields a kept run may differ in: where it is written and how a call treats it
_NOT_SETTINGS = ("out", "overwrite", "resume")


def kept_run(spec: RunSpec) -> Any | None:
    """The run ``spec`` asks for, when ``spec.out`` holds it finished with the same
    settings (a call cut short earlier: reproduce picks up there); None when there is
    nothing to keep (no run, or one that did not finish: it is run again in its place).

    A run of other settings there is refused, never replaced without ``--overwrite``.
    """
    from ..errors import RunFolderError
    from ..runs.folder import RunResult, read_run_record
    from ..training.metrics_file import strict_json

    out = Path(spec.out)
    saved, _problem = read_run_record(out)
    if saved is None:  # no run.json (nothing ran), or not one a run of ours could keep
        return None
    wanted = json.loads(strict_json(asdict(spec)))
    differences = [
        f"{key} {saved['spec'].get(key)!r} -> {value!r}"
        for key, value in wanted.items()
        if key not in _NOT_SETTINGS and saved["spec"].get(key) != value
    ]
    finished = saved.get("status") == "completed"
    if differences:
        raise RunFolderError(
            f"{out} holds a{' finished' if finished else 'nother'} run with other settings "
            f"({'; '.join(differences[:3])}); pass --overwrite to replace it, or a new --out"
        )
    if not finished:
        return None
    result = RunResult.from_folder(out)
    if len(result.metrics) != spec.steps:  # metrics.jsonl cut or edited: train it again
        return None
    return result


def reproduce(spec: RunSpec | None = None, *, progress: bool = True, **params: Any):
    """Run both 10-step runs and write summary.json and reproduce.png into ``spec.out``.

    A run that an earlier call left finished in ``spec.out`` with the same settings is
    kept (setup run again after an interruption picks up there); ``overwrite`` runs both
    anew. Ctrl-C names what is kept; a figure or summary the disk cannot take is one error.
    """
    from ..device import resolve_device
    from ..runs.run import make_spec, run

    spec = spec or make_spec(**params)
    device_type = resolve_device(spec.device)
    specs = reproduction_specs(spec, device_type)
    out = Path(specs["random"].out).parent
    kept = {} if spec.overwrite else {init: kept_run(s) for init, s in specs.items()}
    kept = {init: r for init, r in kept.items() if r is not None}
    for init in kept:
        print(
            f"kept: {shown(kept[init].out)} (finished earlier with these settings; "
            "--overwrite runs it again)",
            file=sys.stderr,
            flush=True,
        )
    started = time.perf_counter()
    runs: dict[str, Any] = dict(kept)
    try:
        for init, s in specs.items():
            if init not in runs:  # (a run cut short earlier, same settings: ours to replace)
                again = s.replace(overwrite=True) if not spec.overwrite else s
                runs[init] = run(again, progress=progress, label=f"{s.variant}, {init}")
    except KeyboardInterrupt as e:
        done = [shown(runs[i].out) for i in INITS if i in runs]
        picks_up = (
            f"{' and '.join(done)} finished and {'are' if len(done) > 1 else 'is'} kept"
            if done
            else "no run finished yet"
        ) + "; the same command again picks up there"
        from ..errors import Interrupted, Terminated

        held = e.held if isinstance(e, Interrupted) else None  # (a launch's folder)
        stop = Terminated if isinstance(e, Terminated) else Interrupted
        raise stop(*e.args, held=f"{held}; {picks_up}" if held else picks_up) from None
    rep = Reproduction(
        variant=spec.variant,
        device_type=device_type,
        runs={init: runs[init] for init in INITS},
        out=out,
        wall_s=time.perf_counter() - started,
        nproc=specs["random"].nproc,
        kept=tuple(kept),
    )
    rep.figure_path = out / "reproduce.png"
    _save_figure(rep)
    write_atomically(out / "summary.json", strict_json(rep.to_json(), indent=2))
    return rep


def _save_figure(rep: Reproduction) -> None:
    """reproduce.png whole, or not there at all and one error line (a full disk)."""
    from ..errors import RunFolderError
    from ..training.metrics_file import write_failed

    path = rep.figure_path
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        rep.figure().savefig(tmp, format="png")
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise RunFolderError(
            write_failed(path, e, "both runs finished and are kept with their metrics")
        ) from None
