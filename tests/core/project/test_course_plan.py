"""The class plans (notebooks/INSTRUCTOR.md's tables, the student page's, each notebook's
**In class** line) are what lessons/course_plan.py computes from the notebooks as they
are; every plan adds up to its length and keeps its questions time; the student page
holds no answer and points nowhere near the key."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from qwen3_trn_helpers.lessons import course_plan as cp

ROOT = Path(__file__).resolve().parents[3]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
PLANS = {plan.name: plan for plan in cp.PLANS}


def test_the_files_say_what_the_plans_compute():
    """Regenerate with `python -m qwen3_trn_helpers.lessons.course_plan` after changing a
    notebook's prose or a plan."""
    assert cp.differences() == []


@pytest.mark.parametrize("name", PLANS)
def test_a_plan_adds_up_and_keeps_time_for_questions(name):
    plan = PLANS[name]
    slots = cp.slots(plan)
    for slot, after in zip(slots, slots[1:], strict=False):
        assert slot.start + slot.minutes == after.start
    assert slots[0].start == 0 and slots[-1].start + slots[-1].minutes == plan.length
    assert cp.questions_minutes(plan) >= plan.least_questions
    # each notebook's slot holds what it needs: reading at 130 words a minute, the
    # cells, the instructor's talk, the exercises and a self-check done in class
    books = cp.notebooks()
    for slot in slots:
        if slot.block.is_notebook:
            need = books[slot.block.what].minutes(130) + slot.block.talk
            need += slot.exercise_minutes + slot.check_minutes
            assert need <= slot.minutes < need + 1, slot
    # every notebook is in class, before the workshop or homework, and named so
    taught = {s.block.what for s in slots if s.block.is_notebook}
    assert taught | set(plan.before) | set(plan.after) == {p.stem for p in NOTEBOOKS}


def test_the_plans_read_slowly_and_give_the_instructor_time():
    assert cp.WORDS_PER_MINUTE == (130, 150)
    for plan in cp.PLANS:
        assert all(b.talk >= 3 for b in plan.blocks if b.is_notebook), plan.name
    assert [p.length for p in cp.PLANS] == [120, 180, 420]  # 2 hours, 3 hours, a day


def test_the_reading_count_leaves_out_the_references_and_the_self_check(tmp_path):
    cells = [
        {"cell_type": "markdown", "source": ["# 00 · A\n", "one two three"]},
        {"cell_type": "code", "source": ["x = 1"]},
        {"cell_type": "markdown", "source": ["## Exercises\n", "four five"]},
        {"cell_type": "markdown", "source": ["## Self-check\n", "not these words"]},
        {"cell_type": "code", "source": ["self_check('00')"]},
        {"cell_type": "markdown", "source": ["## References\n", "nor these"]},
    ]
    path = tmp_path / "00_a.ipynb"
    path.write_text(json.dumps({"cells": cells}))
    r = cp.reading(path)
    assert (r.words, r.cells) == (11, 1)  # 7 words in the first cell, 4 in the exercises
    assert r.minutes(130) == pytest.approx(11 / 130 + 0.25)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_header_points_at_the_student_page(path: Path):
    header = "".join(json.loads(path.read_text())["cells"][0]["source"])
    line = re.search(r"\*\*In class\.\*\*[^\n]*", header)[0]
    assert "`notebooks/README.md`" in line and "INSTRUCTOR" not in line
    for name in PLANS:
        assert f"{name} workshop: " in line


def test_the_student_page_holds_no_answer():
    """notebooks/README.md is what students read: the plans, how to start, the glossary;
    never the key, the kit or a solution's path."""
    page = (ROOT / "notebooks" / "README.md").read_text()
    kit = (ROOT / "notebooks" / "INSTRUCTOR.md").read_text()
    assert "answer key" in kit and "Answers to the predictions" in kit
    for secret in ("answer key", "Answers to the predictions", "solutions/", "INSTRUCTOR",
                   "slots for 512 token-expert pairs"):  # fmt: skip
        assert secret not in page, secret
    assert len(page.splitlines()) <= 150


def test_the_readmes_reading_minutes_are_the_kits():
    readme = (ROOT / "README.md").read_text()
    for stem, r in cp.notebooks().items():
        row = re.search(rf"^\| `{stem}` \|.*\| ([\d.]+) \| [\d.]+ \|$", readme, re.M)
        assert row, f"README.md's course table has no row for {stem}"
        assert float(row[1]) == round(r.minutes(), 1), f"{stem}: copy the kit's reading table"


def test_the_trn2_day_counts_limits_estimates_and_plans():
    """The kit's instance-hours: the ladder's timeouts (limits), the headers' trn2 times
    (estimates), allowances and plans, each labelled; nothing claims a measurement."""
    from qwen3_trn_helpers.lessons import trn2_day
    from qwen3_trn_helpers.ops.smoke.ladder import _rungs

    minutes = trn2_day.notebook_trn2_minutes(cp.NOTEBOOKS)
    assert list(minutes) == [p.stem for p in NOTEBOOKS] and minutes["03_ten_step_run"] == 15
    parts = trn2_day.rehearsal(cp.NOTEBOOKS)
    assert [p.kind for p in parts] == ["allowance", "limit", "estimate"]
    assert parts[1].hours == sum(r.timeout_s for r in _rungs(True)) / 3600
    assert parts[2].hours == sum(minutes.values()) / 60
    assert sum(p.hours for p in trn2_day.class_day("1-day", 420)) == 7.5
    table = trn2_day.instance_hours_table({"2-hour": 120}, cp.NOTEBOOKS)
    assert "| **2-hour class** | **in all** | **2.50** | | book 3 instance-hours |" in table
    assert "measured" not in table
