"""The trn2 day in instance-hours: the rehearsal and a class, from the package's own times.

What an instructor books and pays for is the hours a trn2.48xlarge runs. No part of
this course has been timed on a trn2 yet, so every number here says what it is:

* a **limit**: the smoke ladder stops each rung at its timeout (ops/smoke/ladder.py), so
  the ladder cannot take longer than the sum; the true time is less;
* an **estimate**: a notebook's header gives its expected time on trn2, from the compile
  and run times the notebooks' text reasons about, not from a clock;
* an **allowance**: time set aside for what the package does not time (setup's install
  and the 8 GB download depend on the instance's network);
* a **plan**: a class lasts as long as its plan (course_plan.py, which writes this
  module's table into the kit).

The rate is not in the package: AWS states it per region, and the instructor's kit
(notebooks/INSTRUCTOR.md, "The trn2 day") says where. Multiply it by these hours.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

#: what setup's install, the assets and the 4B's download may take on the instance
#: (not timed on a trn2: an allowance, hours)
SETUP_ALLOWANCE_H = 0.5
#: before a class: boot, a check that no process holds a core, and notebook 03's two
#: 64-rank runs, which the instructor starts before the class (an allowance, hours)
BEFORE_CLASS_H = 0.5


@dataclass(frozen=True)
class Part:
    what: str
    hours: float
    kind: str  # limit, estimate, allowance or plan
    source: str


def ladder_limit_hours(full_size: bool) -> float:
    """The smoke ladder's rungs' timeouts, summed (a rung that hangs is stopped there)."""
    from ..ops.smoke.ladder import _rungs

    return sum(r.timeout_s for r in _rungs(full_size)) / 3600


def notebook_trn2_minutes(folder: Path) -> dict[str, float]:
    """Each notebook header's expected time on trn2, in minutes ("under a minute" is 1)."""
    out = {}
    for path in sorted(folder.glob("[0-9][0-9]_*.ipynb")):
        header = "".join(json.loads(path.read_text())["cells"][0]["source"])
        row = next(line for line in header.splitlines() if line.startswith("| Expected time"))
        trn2 = row.strip("|").split("|")[2]
        if "under a minute" in trn2:
            out[path.stem] = 1.0
            continue
        found = re.search(r"(\d+) minutes?", trn2)
        if found is None:
            raise ValueError(f"{path.name}: no trn2 time in its header's row {row!r}")
        out[path.stem] = float(found[1])
    return out


def rehearsal(notebooks: Path) -> list[Part]:
    """The day before: setup, the whole ladder (the 64-rank rung included), and every
    notebook (in folder ``notebooks``) run once."""
    minutes = notebook_trn2_minutes(notebooks)
    return [
        Part("setup.sh, assets --published, assets --download 4b", SETUP_ALLOWANCE_H,
             "allowance", "not timed on a trn2 (the network sets the download's time)"),
        Part("qwen3-trn smoke, every rung (the 64-rank one too)", ladder_limit_hours(True),
             "limit", "the sum of the rungs' timeouts (ops/smoke/ladder.py)"),
        Part("Run All of notebooks 00 to 06, one at a time", sum(minutes.values()) / 60,
             "estimate", "the notebooks' headers ("
             + ", ".join(f"{stem[:2]}: {m:g} min" for stem, m in minutes.items()) + ")"),
    ]  # fmt: skip


def class_day(plan_name: str, minutes: int) -> list[Part]:
    """A class of one plan (``minutes`` long): the half hour before it, and the plan."""
    return [
        Part("before the class: boot, free cores, 03's 64-rank runs", BEFORE_CLASS_H,
             "allowance", "03's header: about 15 minutes for its two 64-rank runs"),
        Part(f"the {plan_name} workshop", minutes / 60, "plan",
             "notebooks/INSTRUCTOR.md, the plan's table"),
    ]  # fmt: skip


def instance_hours_table(plans: Mapping[str, int], notebooks: Path) -> str:
    """The kit's table: each part, its hours and what kind of number it is; the rehearsal
    and each plan's class (``plans``: name -> minutes) summed and rounded up to the hour
    (what to book)."""
    rows = ["| for | part | hours | kind | from |", "|---|---|---|---|---|"]
    books = [("rehearsal", rehearsal(notebooks))]
    books += [(f"{name} class", class_day(name, minutes)) for name, minutes in plans.items()]
    for name, parts in books:
        for part in parts:
            rows.append(f"| {name} | {part.what} | {part.hours:.2f} | {part.kind} | "
                        f"{part.source} |")  # fmt: skip
        total = sum(p.hours for p in parts)
        rows.append(f"| **{name}** | **in all** | **{total:.2f}** | | book {math.ceil(total)} "
                    "instance-hours |")  # fmt: skip
    return "\n".join(rows)
