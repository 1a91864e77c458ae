"""Each notebook's self-check: 3 to 5 well-formed questions that test (the right answers
spread over the letters, no option given away by its length), asked after the exercises,
checked on the spot by widgets, and readable without a kernel (answers folded)."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from qwen3_trn_helpers.lessons.quiz import WIDGET_MIME, Question, SelfCheck
from qwen3_trn_helpers.lessons.quiz_questions import QUESTIONS, self_check

ROOT = Path(__file__).resolve().parents[3]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def test_every_notebook_has_three_to_five_questions():
    assert sorted(QUESTIONS) == [p.stem[:2] for p in NOTEBOOKS]
    for number, questions in QUESTIONS.items():
        assert 3 <= len(questions) <= 5, number
        for q in questions:
            assert len(set(q.options)) == len(q.options), q.prompt  # no duplicate options


ALL = [q for questions in QUESTIONS.values() for q in questions]


def _length(option: str) -> int:
    return len(option.replace("`", ""))  # as a radio label shows it


def test_the_right_answers_are_spread_over_the_letters():
    """Always choosing one letter scores at most 40% (it scored 91% when 20 of 22
    answers were b)."""
    letters = Counter(chr(97 + q.answer) for q in ALL)
    assert max(letters.values()) <= 0.4 * len(ALL), letters
    assert len(letters) == 3  # every letter is right somewhere


def test_the_right_answer_is_not_told_by_its_length():
    """Options of similar length, and the right one the longest no more often than
    chance would make it (it was in 14 of 22)."""
    for q in ALL:
        lengths = [_length(o) for o in q.options]
        assert min(lengths) >= 0.6 * max(lengths), q.options
    longest = [q for q in ALL if _length(q.options[q.answer]) == max(map(_length, q.options))]
    assert len(longest) <= 0.4 * len(ALL), [q.prompt for q in longest]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_notebook_asks_its_self_check_after_the_exercises(path: Path):
    """The exercises, then the self-check (its answers would settle some exercises), then
    the sources; the cell calls the helper with the notebook's own number (nbval
    executes it headless)."""
    cells = json.loads(path.read_text())["cells"]
    sources = ["".join(c["source"]) for c in cells]
    heading = sources.index(next(s for s in sources if s.startswith("## Self-check")))
    assert sources[heading - 1].startswith("## Exercises")
    assert re.search(rf'self_check\("{path.stem[:2]}"\)\s*$', sources[heading + 1])
    assert sources[heading + 2].startswith("## References") and heading + 3 == len(sources)


def test_a_choice_is_checked_at_once_with_its_reason():
    """The widget: choosing an option fills that question's feedback, right or wrong."""
    check = self_check("06")
    form = check.widget()
    _, prompt, choice, feedback = form.children[:4]
    assert "ATen operators" in prompt.value and feedback.value == ""
    first = check.questions[0]
    wrong, right = first.options[0], first.options[first.answer]
    choice.value = wrong
    assert "Not quite" in feedback.value and f"“{right}”" in feedback.value
    assert "method calls" in feedback.value  # the reasoning follows the verdict
    choice.value = right
    assert feedback.value.startswith("<p>Right.")
    # radio labels are plain text: no Markdown backticks (06's question 2 has `.item()`)
    labels = form.children[5]._options_labels
    assert any(".item()" in label for label in labels) and not any("`" in x for x in labels)


def test_the_static_form_folds_each_answer():
    """What a page without a kernel shows: every question, the answer in <details>."""
    check = self_check("03")
    page = check._repr_html_()
    assert page.count("<details><summary>Answer</summary>") == len(check.questions)
    assert "b) 690, e to the 6.54. Perplexity is e^loss" in page
    text = check.text()
    assert "Answer: b) 690, e to the 6.54." in text
    bundle = check._repr_mimebundle_()
    assert {"text/html", "text/plain"} <= set(bundle)
    assert WIDGET_MIME not in bundle or bundle[WIDGET_MIME]["model_id"]


def test_a_question_must_name_one_of_its_options():
    with pytest.raises(ValueError, match="no option"):
        Question("?", ("a", "b"), 2, "")
    with pytest.raises(ValueError, match="one of"):
        self_check("07")
    assert SelfCheck("t", ()).text() == "t"
