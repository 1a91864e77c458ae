"""The self-check that closes each notebook: a few questions, checked on the spot.

In Jupyter each question is a set of ipywidgets radio buttons; choosing an option shows
at once whether it is right and the reasoning behind the answer. The same object
carries a static form (HTML with each answer folded in a ``<details>``, and plain text),
so a page built without a kernel (the student site, GitHub) still reads as questions
whose answers a reader unfolds, and a headless run (nbval) executes the cell without
anyone clicking. The questions live in ``quiz_questions.py``, one list per notebook.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import Any

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def _html(text: str) -> str:
    """Escaped text with Markdown's `code` spans as <code>, as the notebook's prose."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


@dataclass(frozen=True)
class Question:
    """One multiple-choice question: the options, the right one's index, and why."""

    prompt: str
    options: tuple[str, ...]
    answer: int
    why: str

    def __post_init__(self) -> None:
        if len(self.options) < 2 or not 0 <= self.answer < len(self.options):
            raise ValueError(f"question {self.prompt[:40]!r}: answer {self.answer} is no option")

    def solution(self) -> str:
        """The answer as a page without a kernel shows it: the letter, the option, why."""
        return f"{chr(97 + self.answer)}) {self.options[self.answer]}. {self.why}"

    def verdict(self, choice: str | None) -> str:
        """What a student reads after choosing ``choice``: right or not, then why."""
        if choice is None:
            return ""
        right = self.options[self.answer]
        head = "Right." if choice == right else f"Not quite: the answer is “{right}”."
        return f"{head} {self.why}"


@dataclass(frozen=True)
class SelfCheck:
    """A notebook's questions; displays as widgets in Jupyter, as folded answers elsewhere."""

    title: str
    questions: tuple[Question, ...]

    def text(self) -> str:
        """Plain text: the questions, options lettered, each answer and its reason after."""
        out = [self.title]
        for i, q in enumerate(self.questions, 1):
            out.append(f"{i}. {q.prompt}")
            out += [f"   {chr(97 + j)}) {o}" for j, o in enumerate(q.options)]
            out.append(f"   Answer: {q.solution()}")
        return "\n".join(out)

    def _repr_html_(self) -> str:
        """Static HTML: each question with its options, the answer folded (``<details>``)."""
        parts = [f'<div class="self-check"><p><strong>{html.escape(self.title)}</strong></p><ol>']
        for q in self.questions:
            options = "".join(f"<li>{_html(o)}</li>" for o in q.options)
            parts.append(
                f"<li><p>{_html(q.prompt)}</p><ol type='a'>{options}</ol>"
                f"<details><summary>Answer</summary><p>{_html(q.solution())}"
                "</p></details></li>"
            )
        parts.append("</ol></div>")
        return "".join(parts)

    def widget(self) -> Any:
        """The live form: one radio group per question, its verdict shown on a choice."""
        import ipywidgets as w

        rows = [w.HTML(f"<strong>{html.escape(self.title)}</strong>")]
        for i, q in enumerate(self.questions, 1):
            # a radio label is plain text: Markdown's `code` marks would show as backticks
            labels = [(option.replace("`", ""), option) for option in q.options]
            choice = w.RadioButtons(options=labels, value=None, layout=w.Layout(width="auto"))
            feedback = w.HTML("")

            def show(change: dict, q: Question = q, feedback: w.HTML = feedback) -> None:
                feedback.value = f"<p>{_html(q.verdict(change['new']))}</p>"

            choice.observe(show, names="value")
            rows += [w.HTML(f"<p>{i}. {_html(q.prompt)}</p>"), choice, feedback]
        return w.VBox(rows)

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        """The widget for Jupyter, with the static HTML and text beside it: a front end
        without the widget's state (a static page) shows those instead of a blank."""
        bundle = {"text/html": self._repr_html_(), "text/plain": self.text()}
        try:
            view = self.widget()._repr_mimebundle_(**kwargs) or {}
        except ImportError:  # ipywidgets missing: the static form is the whole answer
            view = {}
        if WIDGET_MIME in view:
            bundle[WIDGET_MIME] = view[WIDGET_MIME]
        return bundle
