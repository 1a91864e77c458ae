"""The seed experiment: 10 steps at local batch 1, from published weights and from random.

AWS trained Qwen3-4B-Instruct-2507 on a trn2.48xlarge (64 logical NeuronCores) and saw
step-1 loss 6.54 from the published weights and 12.43 from random initialisation.
``reproduce()`` runs both 10-step runs for a variant and lines them up with those two
numbers. On trn2 it uses the AWS setup (the 4B/30B-A3B preset on 64 NeuronCores through
torchrun); on a CPU the tiny preset and the locally made "published" checkpoint, so the
comparison there is about the *shape* of the result (pretrained far below random,
random near ln(vocab)), not the exact values.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Step-1 losses AWS reported (trn2.48xlarge, 10 steps, local batch size 1).
AWS_STEP1 = {"pretrained": 6.54, "random": 12.43}
INITS = ("pretrained", "random")
LN_VOCAB = math.log(151936)


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
                    "step-10 loss": round(self.runs[init].losses[-1], 3),
                }
            )
        return rows

    def figure(self):
        from .plots import loss_figure

        return loss_figure(
            {f"{self.variant}, {init}": self.runs[init].metrics for init in INITS},
            reference={f"AWS step 1, {init}": AWS_STEP1[init] for init in INITS},
            ln_vocab=LN_VOCAB,
            title=f"10 steps, local batch 1: published weights vs random init "
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


def reproduce(
    variant: str = "native",
    *,
    steps: int = 10,
    out: str | Path | None = None,
    device: str = "auto",
    nproc: int | None = None,
    overwrite: bool = False,
    progress: bool = True,
) -> Reproduction:
    """Run both 10-step runs and write summary.json and reproduce.png into ``out``."""
    from .device import resolve_device
    from .train import prepare_out_dir, run
    from .variants import check_variant, default_preset, get_preset

    check_variant(variant)
    device_type = resolve_device(device)
    nproc = nproc or (64 if device_type == "neuron" else 1)
    out = prepare_out_dir(out, overwrite)
    if (out / "summary.json").exists() and not overwrite:
        from .errors import RunFolderError

        raise RunFolderError(f"{out} already holds a reproduction; pass --overwrite")
    started = time.perf_counter()
    runs = {}
    for init in INITS:
        kwargs = dict(steps=steps, local_batch_size=1, device=device, overwrite=overwrite)
        if nproc > 1:
            from .launch import launch
            from .published import resolve_pretrained

            init_arg = init
            if init == "pretrained":  # download/make once here, not once per rank
                preset = get_preset(default_preset(variant, device_type))
                init_arg = str(resolve_pretrained(variant, preset, device_type))
            runs[init] = launch(nproc, out / init, variant=variant, init=init_arg, **kwargs)
        else:
            runs[init] = run(variant, init=init, out=out / init, progress=progress, **kwargs)
    rep = Reproduction(
        variant=variant,
        device_type=device_type,
        runs=runs,
        out=out,
        wall_s=time.perf_counter() - started,
        nproc=nproc,
    )
    rep.figure_path = out / "reproduce.png"
    rep.figure().savefig(rep.figure_path)
    (out / "summary.json").write_text(json.dumps(rep.to_json(), indent=2))
    return rep
