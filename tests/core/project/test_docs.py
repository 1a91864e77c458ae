"""The README and the docs/ pages: short, linked, and true to the files they name.

README.md is what a newcomer reads first, so it stays at most 250 lines; the reference
text lives in docs/, which the course site builds (site/reference.md, scripts/build_site.sh).
Here, without building anything: every relative link of the README and of the pages
reaches a file and a heading, the README's map and the full layout in
docs/architecture.md name only paths that exist and every module there is, and the
README's verb list is the command line's. (The site's own check, tests/e2e/test_site.py,
builds the pages and follows every link in a browser.)
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PACKAGE = ROOT / "qwen3_trn_helpers"
PAGES = sorted(DOCS.glob("*.md"))
#: a name in a map's tree: a folder (``name/``) or a file with one of these endings
NAME = re.compile(r"[\w.-]+(/|\.(py|md|sh|ipynb|json|toml|yml))")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
LINK = re.compile(r"\[[^\]]*\]\(([^()\s]+)\)")


def test_the_readme_is_at_most_250_lines():
    assert len(README.read_text().splitlines()) <= 250


def test_the_readme_names_the_main_job_first_then_ci_s_test_command():
    text = README.read_text()
    assert "scripts/setup.sh" in text and "scripts/test.sh" in text
    assert text.index("scripts/setup.sh") < text.index("scripts/test.sh")
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^scripts/test\.sh$", ci, re.M), ".ci/run no longer runs scripts/test.sh"


def _without_code(text: str) -> str:
    """Markdown with its fenced blocks and inline code spans blanked out."""
    return re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))


def _slug(title: str) -> str:
    """A heading's anchor as GitHub and myst-parser (github_slugify) make it."""
    title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title).replace("`", "").replace("*", "")
    return re.sub(r"[^\w\u4e00-\u9fff\- ]", "", title.lower().replace(" ", "-"))


def _anchors(page: Path, deepest: int = 6) -> set[str]:
    """The anchors of a page's headings down to level ``deepest`` (duplicates numbered)."""
    seen: dict[str, int] = {}
    found = set()
    headings = re.findall(r"^(#{1,6})\s+(.+?)\s*$", FENCE.sub("", page.read_text()), re.M)
    for hashes, title in headings:
        slug = _slug(title)
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        if len(hashes) <= deepest:
            found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def _relative_links(page: Path) -> list[str]:
    links = LINK.findall(_without_code(page.read_text()))
    return [t for t in links if not re.match(r"[a-z]+:", t)]


def test_every_relative_link_reaches_a_file_and_a_heading():
    """README.md and docs/*.md. A page under docs/ links only to docs/ pages (the site
    holds only those) and to headings the site gives an anchor (h1-h3, conf.py's
    myst_heading_anchors)."""
    broken = []
    for page in [README, *PAGES]:
        in_docs = page.parent == DOCS
        for target in _relative_links(page):
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(ROOT)}: {target}"
            if in_docs and (file.parent != DOCS or file.suffix != ".md"):
                broken.append(f"{where} (a docs page links only to docs pages)")
            elif not file.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and file.suffix == ".md":
                if anchor not in _anchors(file, deepest=3 if file.parent == DOCS else 6):
                    broken.append(f"{where} (no such heading)")
    assert not broken, "\n".join(broken)


def test_the_readme_links_every_docs_page_and_the_site_builds_each():
    linked = {t.partition("#")[0] for t in _relative_links(README)}
    assert {f"docs/{p.name}" for p in PAGES} <= linked
    contents = FENCE.search((ROOT / "site" / "reference.md").read_text(), 0)
    entries = [ln.strip() for ln in contents.group(0).splitlines()[1:-1]]
    entries = [e for e in entries if e and not e.startswith(":")]
    assert sorted(entries) == sorted(f"docs/{p.stem}" for p in PAGES)


def _block_after(page: Path, heading: str) -> str:
    """The first fenced block after a heading, without its fences."""
    text = page.read_text()
    start = text.index(f"\n{heading}\n")
    block = FENCE.search(text, start)
    assert block, f"no code block after {heading!r} in {page.name}"
    return "\n".join(block.group(0).splitlines()[1:-1])


def named_paths(tree: str) -> list[str]:
    """The paths a map names. A line is its names, then what they hold; a folder's
    contents follow it on its line or on the lines indented below it."""
    folders: list[tuple[int, str]] = []  # (indent, path) of the open folders
    named = []
    for line in tree.splitlines():
        words = line.split()
        names = []
        for word in words:
            if not NAME.fullmatch(word):
                break
            names.append(word)
        if not names:
            continue
        indent = len(line) - len(line.lstrip(" "))
        while folders and folders[-1][0] >= indent:
            folders.pop()
        base = folders[-1][1] if folders else ""
        named.append(base + names[0])
        if names[0].endswith("/"):
            folders.append((indent, base + names[0]))
            base += names[0]
        named += [base + name for name in names[1:]]
    return named


def test_the_tree_reader_nests_folders_by_line_and_indent():
    tree = "a/   what a holds\n  b.py  c/ d.py\n  e/  f.py   the e's\n    g.py\nh/\n"
    expected = ["a/", "a/b.py", "a/c/", "a/d.py", "a/e/", "a/e/f.py", "a/e/g.py", "h/"]
    assert named_paths(tree) == expected


def _missing(paths: list[str]) -> list[str]:
    return [p for p in paths if not (ROOT / p).is_dir() if p.endswith("/")] + [
        p for p in paths if not p.endswith("/") and not (ROOT / p).is_file()
    ]


def _top_level() -> set[str]:
    """The package's own top level: its modules and its subpackages."""
    return {p.name for p in PACKAGE.glob("*.py")} | {
        f"{p.name}/" for p in PACKAGE.iterdir() if (p / "__init__.py").exists()
    }


def test_the_readme_map_names_what_exists_and_every_top_level_module():
    paths = named_paths(_block_after(README, "## Map"))
    assert not _missing(paths), f"the README's map names what does not exist: {_missing(paths)}"
    named = {p.removeprefix("qwen3_trn_helpers/") for p in paths}
    assert not _top_level() - named, f"the README's map leaves out {sorted(_top_level() - named)}"


def test_the_full_layout_names_what_exists_and_every_module():
    paths = named_paths(_block_after(DOCS / "architecture.md", "## The layout in full"))
    assert not _missing(paths), f"docs/architecture.md names what does not exist: {_missing(paths)}"
    files = [p.relative_to(ROOT) for p in PACKAGE.rglob("*.py")]
    modules = {str(p) for p in files if p.name != "__init__.py" or p.parent == Path(PACKAGE.name)}
    modules |= {f"{p.parent}/" for p in files if p.name == "__init__.py"}
    left_out = sorted(modules - set(paths))
    assert not left_out, f"docs/architecture.md's layout leaves out {left_out}"


def test_the_readme_lists_every_verb_once():
    from qwen3_trn_helpers.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    lines = _block_after(README, "## The command line").splitlines()
    verbs = [ln.split()[1] for ln in lines if ln.startswith("qwen3-trn ")]
    assert sorted(verbs) == sorted(sub.choices), "one README line per qwen3-trn verb"


def test_the_readme_table_lists_every_notebook():
    notebooks = sorted(p.stem for p in (ROOT / "notebooks").glob("0*.ipynb"))
    table = re.findall(r"^\| `(0\d_\w+)` \|", README.read_text(), re.M)
    assert table == notebooks
