"""The class plans: how long each notebook takes in class, and the 2-hour, 3-hour and
1-day workshops built from those times.

Why a module: a plan typed by hand drifts from the notebooks (the last one assumed
students read 180 words a minute and gave the instructor no time to talk, so its
questions slot was gone before the class began). Here a notebook's time in class is
arithmetic over the notebook as it is now, and the instructor's tables
(notebooks/INSTRUCTOR.md), the student page's (notebooks/README.md) and each notebook's
**In class** line are written from it; tests/core/project/test_course_plan.py checks
that all three say what this module computes, and that every plan keeps its questions
time. After changing a notebook's prose or a plan:

    python -m qwen3_trn_helpers.lessons.course_plan          # rewrite the tables and lines
    python -m qwen3_trn_helpers.lessons.course_plan --check  # exit 1 if any differs

A notebook's minutes in class: its prose (the References and the self-check left out)
at 130 words a minute, the slow end of the 130-150 a reader of technical prose manages
(the 150 end is shown beside it); 15 s to read and run each code cell; the instructor's
talking time for the block; and each exercise done in class, 4 minutes (predict, run,
compare), or its own time where it runs something long. The self-check, when it is done
in class, a minute a question. Each block's slot is that sum rounded up; the questions
slot takes what the plan's length leaves. The notebooks' compute hides behind the
reading when *Run All* starts as the block begins.
"""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
KIT = NOTEBOOKS / "INSTRUCTOR.md"
STUDENT_PAGE = NOTEBOOKS / "README.md"

#: words a minute: the slow and the fast reader (slots use the slow one)
WORDS_PER_MINUTE = (130, 150)
SECONDS_PER_CELL = 15
EXERCISE_MINUTES = 4
MINUTES_PER_QUESTION = 1


@dataclass(frozen=True)
class Block:
    """One row of a plan: a notebook (its stem) or a fixed block (break, questions...).

    ``exercises``: those done in class, as the notebook numbers them ("1", "predict" for
    a prediction the prose asks for); ``long`` gives an exercise its own minutes."""

    what: str
    talk: int = 0
    exercises: tuple[str, ...] = ()
    self_check: bool = False
    minutes: int = 0  # a fixed block's length
    note: str = ""
    long: tuple[tuple[str, int], ...] = ()

    @property
    def is_notebook(self) -> bool:
        return re.fullmatch(r"\d\d_\w+", self.what) is not None


@dataclass(frozen=True)
class ClassPlan:
    name: str
    length: int  # minutes
    least_questions: int
    blocks: tuple[Block, ...]
    before: tuple[str, ...] = ()  # notebooks done before class (homework ahead)
    after: tuple[str, ...] = ()  # notebooks left for homework


NB = Block
PLANS = (
    ClassPlan(
        "2-hour",
        120,
        10,
        (
            NB("01_device_registration", talk=3, exercises=("1",)),
            NB("02_three_variants", talk=3, exercises=("1",)),
            Block("break", minutes=5),
            NB("03_ten_step_run", talk=3, exercises=("2",)),
            NB("04_scaling_to_trn2", talk=3),
            Block("questions"),
            Block("wrap-up", minutes=3, note="the homework: 05, 06, the other exercises"),
        ),
        before=("00_preflight",),
        after=("05_several_nodes", "06_graph_capture"),
    ),
    ClassPlan(
        "3-hour",
        180,
        15,
        (
            NB("00_preflight", talk=3, exercises=("1",)),
            NB("01_device_registration", talk=3, exercises=("1", "2")),
            NB("02_three_variants", talk=3, exercises=("1", "3")),
            Block("break", minutes=10),
            NB("03_ten_step_run", talk=3, exercises=("2",)),
            NB("04_scaling_to_trn2", talk=3, exercises=("3",)),
            NB("05_several_nodes", talk=3, exercises=("1",)),
            Block("questions"),
            Block("wrap-up", minutes=3, note="the homework: 06, the other exercises"),
        ),
        after=("06_graph_capture",),
    ),
    ClassPlan(
        "1-day",
        420,
        30,
        (
            NB("00_preflight", talk=5, exercises=("1", "2"), self_check=True),
            NB("01_device_registration", talk=5, exercises=("1", "2"), self_check=True),
            Block("break", minutes=15),
            NB(
                "02_three_variants",
                talk=5,
                exercises=("1", "2", "3"),
                self_check=True,
                long=(("2", 8),),
            ),  # fmt: skip
            Block("questions", minutes=10, note="the morning's"),
            Block("lunch", minutes=60, note="on trn2: the instructor starts 03's 64-rank runs"),
            NB("03_ten_step_run", talk=5, exercises=("1", "2", "3"), self_check=True),
            NB("04_scaling_to_trn2", talk=5, exercises=("1", "2", "3"), self_check=True),
            Block("break", minutes=15),
            NB("05_several_nodes", talk=5, exercises=("1", "2"), self_check=True),
            NB(
                "06_graph_capture", talk=5, exercises=("1", "2"), self_check=True, long=(("2", 8),)
            ),  # fmt: skip
            Block(
                "trn2",
                minutes=30,
                note="with a trn2: 03's 64-rank results, the smoke ladder, neuron-top; "
                "without one: catch-up",
            ),  # fmt: skip
            Block("questions"),
            Block("wrap-up", minutes=10),
        ),
    ),
)


# -------------------------------------------------------------- what a notebook takes


@dataclass(frozen=True)
class Reading:
    """What a student reads in class of one notebook."""

    words: int  # prose, the References and the self-check left out
    cells: int  # code cells before the self-check
    questions: int  # the self-check's

    def minutes(self, words_per_minute: int = WORDS_PER_MINUTE[0]) -> float:
        return self.words / words_per_minute + self.cells * SECONDS_PER_CELL / 60


def reading(path: Path) -> Reading:
    """Prose words and code cells a student reads in class, and the self-check's size."""
    from .quiz_questions import QUESTIONS

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
    return Reading(words, cells, len(QUESTIONS[path.stem[:2]]))


def notebooks() -> dict[str, Reading]:
    return {p.stem: reading(p) for p in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))}


@dataclass(frozen=True)
class Slot:
    """A block with its start and length, and for a notebook what fills it."""

    block: Block
    start: int
    minutes: int
    read: float = 0.0  # at 130 words a minute, code cells included
    read_fast: float = 0.0  # at 150
    exercise_minutes: int = 0
    check_minutes: int = 0


def exercise_minutes(block: Block) -> int:
    longer = dict(block.long)
    return sum(longer.get(e, EXERCISE_MINUTES) for e in block.exercises)


def slots(plan: ClassPlan, books: dict[str, Reading] | None = None) -> list[Slot]:
    """The plan laid out: each notebook's slot its need rounded up, fixed blocks as
    given, and the questions block without a length taking what is left."""
    books = books or notebooks()
    sized: list[tuple[Block, int, float, float, int, int]] = []
    for block in plan.blocks:
        if block.is_notebook:
            r = books[block.what]
            check = r.questions * MINUTES_PER_QUESTION if block.self_check else 0
            work = exercise_minutes(block)
            need = r.minutes() + block.talk + work + check
            sized.append((block, math.ceil(need), r.minutes(), r.minutes(WORDS_PER_MINUTE[1]),
                          work, check))  # fmt: skip
        else:
            sized.append((block, block.minutes, 0.0, 0.0, 0, 0))
    open_ended = [i for i, (b, m, *_) in enumerate(sized) if b.what == "questions" and not m]
    if len(open_ended) != 1:
        raise ValueError(f"{plan.name}: one questions block must take what is left")
    left = plan.length - sum(m for _, m, *_ in sized)
    i = open_ended[0]
    sized[i] = (sized[i][0], left, *sized[i][2:])
    out, start = [], 0
    for block, minutes, read, fast, work, check in sized:
        out.append(Slot(block, start, minutes, read, fast, work, check))
        start += minutes
    return out


def questions_minutes(plan: ClassPlan, books: dict[str, Reading] | None = None) -> int:
    return sum(s.minutes for s in slots(plan, books) if s.block.what == "questions")


# -------------------------------------------------------------------------- the words


def _exercises(block: Block) -> str:
    names = list(block.exercises)
    if not names:
        return "its exercises as homework"
    if all(n.isdigit() for n in names):
        numbers = [int(n) for n in names]
        head = "exercise" if len(names) == 1 else "exercises"
        if len(numbers) >= 3 and numbers == list(range(numbers[0], numbers[-1] + 1)):
            return f"{head} {numbers[0]} to {numbers[-1]}"
        return f"{head} {_join(names)}"
    return _join([n if n.isdigit() else f'the "{n}" prediction' for n in names])


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def in_class(stem: str, plan: ClassPlan, books: dict[str, Reading] | None = None) -> str:
    """What a plan gives notebook ``stem``: "23 minutes, exercise 1", or homework."""
    for s in slots(plan, books):
        if s.block.what == stem:
            said = f"{s.minutes} minutes, {_exercises(s.block)}"
            return said + (" and the self-check" if s.block.self_check else "")
    books = books or notebooks()
    alone = math.ceil(books[stem].minutes() + EXERCISE_MINUTES)
    when = "before the workshop" if stem in plan.before else "homework"
    return f"{when} (about {alone} minutes)"


def in_class_line(stem: str, books: dict[str, Reading] | None = None) -> str:
    """The **In class** line of a notebook's header."""
    parts = [f"{plan.name} workshop: {in_class(stem, plan, books)}" for plan in PLANS]
    return (
        f"**In class.** {'; '.join(parts)} (the plans: `notebooks/README.md`). The "
        "self-check comes after the exercises."
    )


def _clock(minutes: int) -> str:
    return f"{minutes // 60}:{minutes % 60:02d}"


def plan_table(plan: ClassPlan, books: dict[str, Reading] | None = None) -> str:
    """The instructor's table of one plan (Markdown)."""
    head = (
        "| time | block | in class | reading, 130-150 wpm (min) | instructor (min) | "
        "exercises, self-check (min) | slot (min) |\n|---|---|---|---|---|---|---|"
    )
    rows = [head]
    for s in slots(plan, books):
        b = s.block
        if b.is_notebook:
            work = f"{s.exercise_minutes}" + (f" + {s.check_minutes}" if s.check_minutes else "")
            what = _exercises(b) + (" and the self-check" if b.self_check else "")
            rows.append(f"| {_clock(s.start)} | `{b.what}` | {what} | {s.read:.1f}-"
                        f"{s.read_fast:.1f} | {b.talk} | {work} | {s.minutes} |")  # fmt: skip
        else:
            rows.append(f"| {_clock(s.start)} | {b.what} | {b.note} | | | | {s.minutes} |")
    return "\n".join(rows)


def student_table(books: dict[str, Reading] | None = None) -> str:
    """The student page's table: each notebook in each plan."""
    books = books or notebooks()
    head = "| notebook | " + " | ".join(p.name for p in PLANS) + " |"
    rows = [head, "|---" * (len(PLANS) + 1) + "|"]
    for stem in books:
        rows.append(f"| `{stem}` | " + " | ".join(in_class(stem, p, books) for p in PLANS) + " |")
    return "\n".join(rows)


def reading_table(books: dict[str, Reading] | None = None) -> str:
    """The instructor's per-notebook reading estimate."""
    books = books or notebooks()
    rows = [
        "| notebook | prose words | code cells | self-check questions | reading + cells, "
        "130 wpm (min) | at 150 wpm (min) |",
        "|---|---|---|---|---|---|",
    ]
    for stem, r in books.items():
        rows.append(f"| `{stem}` | {r.words:,} | {r.cells} | {r.questions} | "
                    f"{r.minutes():.1f} | {r.minutes(WORDS_PER_MINUTE[1]):.1f} |")  # fmt: skip
    total = sum(r.words for r in books.values())
    rows.append(f"| all | {total:,} | {sum(r.cells for r in books.values())} | "
                f"{sum(r.questions for r in books.values())} | "
                f"{sum(r.minutes() for r in books.values()):.1f} | "
                f"{sum(r.minutes(WORDS_PER_MINUTE[1]) for r in books.values()):.1f} |")  # fmt: skip
    return "\n".join(rows)


# ------------------------------------------------------------------ writing the files

MARK = "<!-- {name}: written by python -m qwen3_trn_helpers.lessons.course_plan -->"
END = "<!-- end of {name} -->"


def sections(books: dict[str, Reading] | None = None) -> dict[Path, dict[str, str]]:
    """Every generated part, by file and name."""
    from .trn2_day import instance_hours_table

    books = books or notebooks()
    lengths = {p.name: p.length for p in PLANS}
    kit = {"reading": reading_table(books)}
    kit.update({f"{p.name} plan": plan_table(p, books) for p in PLANS})
    kit["trn2 hours"] = instance_hours_table(lengths, NOTEBOOKS)
    return {KIT: kit, STUDENT_PAGE: {"class plans": student_table(books)}}


def _replace(text: str, name: str, body: str, where: Path) -> str:
    begin, end = MARK.format(name=name), END.format(name=name)
    if begin not in text or end not in text:
        raise SystemExit(f"error: {where} has no markers for {name!r} ({begin} ... {end})")
    head, rest = text.split(begin, 1)
    return f"{head}{begin}\n{body}\n{end}{rest.split(end, 1)[1]}"


def differences(books: dict[str, Reading] | None = None) -> list[str]:
    """What differs between the files and this module: a table or a header's line."""
    books = books or notebooks()
    found = []
    for path, parts in sections(books).items():
        text = path.read_text()
        for name, body in parts.items():
            if _replace(text, name, body, path) != text:
                found.append(f"{path.relative_to(ROOT)}: {name}")
    for stem in books:
        header = "".join(
            json.loads((NOTEBOOKS / f"{stem}.ipynb").read_text())["cells"][0]["source"]
        )
        if in_class_line(stem, books) not in header:
            found.append(f"notebooks/{stem}.ipynb: its **In class** line")
    return found


def write() -> None:
    """Rewrite every generated part. The headers first: their **In class** lines are
    prose a student reads, so the minutes are computed again until they hold still."""
    for _ in range(4):
        books = notebooks()
        _write_headers(books)
        if notebooks() == books:
            break
    else:
        raise SystemExit("error: the In class lines do not settle; shorten them")
    for path, parts in sections(books).items():
        text = path.read_text()
        for name, body in parts.items():
            text = _replace(text, name, body, path)
        path.write_text(text)


def _write_headers(books: dict[str, Reading]) -> None:
    line = re.compile(r"\*\*In class\.\*\*.*?(?=\n\n)", re.S)
    for stem in books:
        path = NOTEBOOKS / f"{stem}.ipynb"
        nb = json.loads(path.read_text())
        header = "".join(nb["cells"][0]["source"])
        if not line.search(header):
            raise SystemExit(f"error: {path} has no **In class.** paragraph in its header")
        new = line.sub(lambda _, stem=stem: in_class_line(stem, books), header, count=1)
        lines = new.split("\n")
        nb["cells"][0]["source"] = [x + "\n" for x in lines[:-1]] + [lines[-1]]
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--check"]:
        found = differences()
        for line in found:
            print(f"differs: {line}")
        return 1 if found else 0
    if argv:
        print("usage: python -m qwen3_trn_helpers.lessons.course_plan [--check]", file=sys.stderr)
        return 2
    write()
    print(
        "wrote the plans and the trn2 hours into notebooks/INSTRUCTOR.md, the class plans "
        "into notebooks/README.md, and each notebook's In class line"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
