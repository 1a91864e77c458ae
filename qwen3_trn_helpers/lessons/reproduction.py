"""The seed experiment: 10 steps at local batch 1, from published weights and from random.

AWS trained Qwen3-4B-Instruct-2507 on a trn2.48xlarge (64 logical NeuronCores, TP 4 x
FSDP 16, sequence length 4096, C4 text) and saw step-1 loss 6.54 from the published
weights and 12.43 from random initialisation. ``reproduce()`` runs both 10-step runs for
a variant with everything but the initial weights identical, and lines them up with
those two numbers. On trn2 that is AWS's setup (the variant's full-size preset on 64
ranks, C4); on a CPU the small preset, the embedded corpus and the locally made
"published" checkpoint, so the comparison there is about the *shape* of the result
(pretrained far below random, random near ln V), not the exact values.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..device import Device, as_device
from ..model.shapes import VOCAB_SIZE
from ..training.metrics_file import strict_json
from ..training.plan import on_trn2, plan_run
from ..training.spec import RunSpec

#: Step-1 losses AWS reported (trn2.48xlarge, 10 steps, local batch size 1).
AWS_STEP1 = {"pretrained": 6.54, "random": 12.43}
INITS = ("pretrained", "random")
LN_VOCAB = math.log(VOCAB_SIZE)


#: the ranks a trn2 reproduction takes when the spec names none: unset, a trn2.48xlarge's
#: whole world for the full-size preset (64); a smaller number (a trn2.3xlarge's 4, or CI's
#: rehearsal of the notebooks on the torch-neuronx test double, 2) takes the variant's
#: small preset on that many ranks (docs: the notebooks on a smaller trn2)
TRN2_RANKS_VAR = "QWEN3_TRN_TRN2_RANKS"


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
        from .plots import loss_figure

        return loss_figure(
            {f"{self.variant}, {init}": self.runs[init].metrics for init in INITS},
            reference={f"AWS step 1, {init}": AWS_STEP1[init] for init in INITS},
            ln_vocab=LN_VOCAB,
            title=f"{len(self.runs['random'].metrics)} steps, local batch 1: published "
            "weights vs random init "
            f"({self.variant}, {self.device_type})",
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "variant": self.variant,
            "device": self.device_type,
            "nproc": self.nproc,
            "wall_s": round(self.wall_s, 1),
            "aws_step1": AWS_STEP1,
            "summary": self.summary_rows(),
            "steps": self.step_rows(),
            "runs": {init: str(r.out) for init, r in self.runs.items()},
        }


def reproduce(spec: RunSpec | None = None, *, progress: bool = True, **params: Any):
    """Run both 10-step runs and write summary.json and reproduce.png into ``spec.out``."""
    from ..device import resolve_device
    from ..errors import RunFolderError
    from ..runs.run import make_spec, run

    spec = spec or make_spec(**params)
    device_type = resolve_device(spec.device)
    specs = reproduction_specs(spec, device_type)
    out = Path(specs["random"].out).parent
    if (out / "summary.json").exists() and not spec.overwrite:
        raise RunFolderError(f"{out} already holds a reproduction; pass --overwrite")
    started = time.perf_counter()
    runs = {
        init: run(s, progress=progress, label=f"{s.variant}, {init}") for init, s in specs.items()
    }
    rep = Reproduction(
        variant=spec.variant,
        device_type=device_type,
        runs=runs,
        out=out,
        wall_s=time.perf_counter() - started,
        nproc=specs["random"].nproc,
    )
    rep.figure_path = out / "reproduce.png"
    rep.figure().savefig(rep.figure_path)
    (out / "summary.json").write_text(strict_json(rep.to_json(), indent=2))
    return rep
