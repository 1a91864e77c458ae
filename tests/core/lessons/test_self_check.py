"""Each notebook's self-check: 3 to 5 well-formed questions, checked on the spot by
widgets, and readable without a kernel (answers folded in the static HTML)."""

from __future__ import annotations

import json
import re
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


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_notebook_ends_with_its_self_check(path: Path):
    """The self-check comes last before the exercises and the sources, and calls the
    helper with the notebook's own number (nbval executes it headless)."""
    cells = json.loads(path.read_text())["cells"]
    sources = ["".join(c["source"]) for c in cells]
    heading = sources.index(next(s for s in sources if s.startswith("## Self-check")))
    assert sources[heading + 2].startswith("## Exercises")
    assert re.search(rf'self_check\("{path.stem[:2]}"\)\s*$', sources[heading + 1])


def test_a_choice_is_checked_at_once_with_its_reason():
    """The widget: choosing an option fills that question's feedback, right or wrong."""
    check = self_check("06")
    form = check.widget()
    _, prompt, choice, feedback = form.children[:4]
    assert "ATen operators" in prompt.value and feedback.value == ""
    choice.value = "5"
    assert "Not quite" in feedback.value and "“7”" in feedback.value
    assert "method calls" in feedback.value  # the reasoning follows the verdict
    choice.value = "7"
    assert feedback.value.startswith("<p>Right.")
    # radio labels are plain text: no Markdown backticks (06's question 2 has `.item()`)
    labels = form.children[5]._options_labels
    assert any(".item()" in label for label in labels) and not any("`" in x for x in labels)


def test_the_static_form_folds_each_answer():
    """What a page without a kernel shows: every question, the answer in <details>."""
    check = self_check("03")
    page = check._repr_html_()
    assert page.count("<details><summary>Answer</summary>") == len(check.questions)
    assert "b) 690. Perplexity is e^loss" in page
    text = check.text()
    assert "Answer: b) 690." in text
    bundle = check._repr_mimebundle_()
    assert {"text/html", "text/plain"} <= set(bundle)
    assert WIDGET_MIME not in bundle or bundle[WIDGET_MIME]["model_id"]


def test_a_question_must_name_one_of_its_options():
    with pytest.raises(ValueError, match="no option"):
        Question("?", ("a", "b"), 2, "")
    with pytest.raises(ValueError, match="one of"):
        self_check("07")
    assert SelfCheck("t", ()).text() == "t"
