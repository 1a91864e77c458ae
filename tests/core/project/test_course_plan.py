"""The instructor's plans (notebooks/README.md, "Timing") add up, leave time for
questions, and agree with what each notebook's header says and with the notebooks."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
KIT = ROOT / "notebooks" / "README.md"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
#: plan -> (its length, the least time kept for questions), in minutes
PLANS = {"2-hour": (120, 10), "3-hour": (180, 15)}
SLOT = re.compile(r"^\| (\d+):(\d\d) \| ([^|]+?) \|.*\((\d+)\) \|$")
IN_CLASS = re.compile(r"\*\*In class\.\*\* 2-hour workshop: (.+?); 3-hour workshop: (.+?) \(", re.S)
READING = re.compile(r"^\| `(\d\d_\w+)` \| ([\d,]+) \| (\d+) \| ([\d.]+) \|", re.M)


def plan(name: str) -> list[tuple[int, str, int]]:
    """(start minute, what, slot minutes) of each row of a plan's table."""
    text = KIT.read_text()
    start = text.index(f"**A {name} workshop**")
    rows = []
    for line in text[start:].splitlines()[1:]:
        if rows and not line.startswith("|"):
            break
        match = SLOT.match(line)
        if match:
            hours, minutes, what, slot = match.groups()
            rows.append((int(hours) * 60 + int(minutes), what.strip("` "), int(slot)))
    return rows


@pytest.mark.parametrize("name", PLANS)
def test_a_plan_adds_up_and_leaves_time_for_questions(name: str):
    length, questions = PLANS[name]
    rows = plan(name)
    assert rows and rows[0][0] == 0
    for (start, what, slot), (next_start, _, _) in zip(rows, rows[1:], strict=False):
        assert start + slot == next_start, f"{name}: {what} starts at {start} for {slot} min"
    assert rows[-1][0] + rows[-1][2] == length
    kept = sum(slot for _, what, slot in rows if what == "questions")
    assert kept >= questions, f"{name}: {kept} minutes for questions, at least {questions}"


def _header(path: Path) -> str:
    return "".join(json.loads(path.read_text())["cells"][0]["source"])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_notebooks_header_says_what_the_plans_give_it(path: Path):
    match = IN_CLASS.search(_header(path))
    assert match, f"{path.name}: no '**In class.** 2-hour workshop: ...; 3-hour ...' line"
    for name, said in zip(PLANS, match.groups(), strict=True):
        slots = [slot for _, what, slot in plan(name) if what == path.stem]
        if not slots:
            assert said.startswith("homework"), f"{path.name}: {name} plan has no slot for it"
            assert path.stem in KIT.read_text().split(f"**A {name} workshop**")[1].split("**A ")[0]
        else:
            assert said.startswith(f"{slots[0]} minutes"), f"{path.name}: {name} says {said!r}"


def reading(path: Path) -> tuple[int, int]:
    """Prose words and code cells a student reads in class: the References and the
    self-check (homework) left out."""
    words = cells = 0
    skipping = False
    for cell in json.loads(path.read_text())["cells"]:
        src = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            skipping = src.startswith(("## Self-check", "## References"))
            if not skipping:
                words += len(src.split())
        elif not skipping:
            cells += 1
    return words, cells


def test_the_kits_reading_estimates_are_the_notebooks():
    """180 words a minute plus 15 s a code cell, from the notebooks as they are."""
    rows = {stem: (w, c, m) for stem, w, c, m in READING.findall(KIT.read_text())}
    assert sorted(rows) == [p.stem for p in NOTEBOOKS]
    for path in NOTEBOOKS:
        words, cells = reading(path)
        w, c, minutes = rows[path.stem]
        assert (int(w.replace(",", "")), int(c)) == (words, cells), path.stem
        assert float(minutes) == round(words / 180 + cells / 4, 1), path.stem
