"""``Reporter``: how a run shows itself while it trains, one object from ``run()`` down.

A progress bar (tqdm.auto: a widget in a notebook, a line in a terminal), torchtitan's
own log (``verbose``), a label for the bar, a callback for each completed step (the
training panel's live plot) and, for the command line, the torchrun command it starts.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Reporter:
    progress: bool = True
    verbose: bool = False
    label: str | None = None
    on_step: Callable[[dict[str, Any]], None] | None = None
    echo_launch: bool = False  # print the exact torchrun command before starting it

    def quiet(self) -> Reporter:
        """The same callback, nothing shown (a rank other than 0)."""
        return replace(self, progress=False)

    def steps(
        self, total: int, desc: str, initial: int = 0
    ) -> tuple[Callable[[dict[str, Any]], None], Callable[[], None]]:
        """(called with each step's record, called at the end): the bar and ``on_step``."""
        bar = None
        if self.progress:
            from tqdm.auto import tqdm

            # tqdm's documented TQDM_DISABLE (the static site's build sets it): tqdm.notebook,
            # which tqdm.auto picks in a kernel, does not read TQDM_* variables (tqdm 4.70:
            # only tqdm.std's __init__ is wrapped by envwrap), so it is passed on here
            off = os.environ.get("TQDM_DISABLE", "").lower() in ("1", "true", "yes")
            bar = tqdm(total=total, initial=initial, desc=self.label or desc, unit="step",
                       disable=off)  # fmt: skip
        on_step = self.on_step

        def step_done(record: dict[str, Any]) -> None:
            if bar is not None:
                bar.set_postfix(loss=f"{record['loss']:.3f}")
                bar.update(1)
            if on_step is not None:
                on_step(record)

        return step_done, (bar.close if bar is not None else lambda: None)
