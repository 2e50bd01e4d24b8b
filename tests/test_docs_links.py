"""Every link in README.md and docs/*.md resolves, and every path pyproject.toml names exists.

Markdown is parsed with markdown-it-py (CommonMark plus tables), so links inside code blocks
and code spans are not links, as on GitHub. A relative link must name an existing file or
folder (relative to the linking file); a ``#fragment`` must match the GitHub slug of a
heading in the target page (or the same page).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
PATH_SUFFIXES = {".md", ".py", ".csv", ".json", ".yaml", ".yml", ".txt", ".png", ".toml"}
# A path-like word: two or more slash-separated parts, or one file name with a suffix.
PATH_WORD = re.compile(r"(?<![\w./:-])(?:[\w*.-]+/)*[\w*.-]+(?![\w/:-])")


def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark").enable("table")


def _walk(tokens: list[Token]) -> Iterator[Token]:
    for token in tokens:
        yield token
        if token.children:
            yield from _walk(token.children)


def github_slug(text: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to hyphens."""
    kept = (
        ch
        for ch in text.strip().lower()
        if ch.isalnum() or ch in "-_ " or unicodedata.category(ch).startswith("M")
    )
    return "".join(kept).replace(" ", "-")


def heading_slugs(page: Path) -> set[str]:
    """The anchors GitHub gives the headings of ``page`` (repeats get -1, -2, ...)."""
    tokens = _parser().parse(page.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    slugs = set()
    for i, token in enumerate(tokens):
        if token.type != "heading_open":
            continue
        inline = tokens[i + 1]
        text = "".join(
            child.content
            for child in inline.children or []
            if child.type in ("text", "code_inline")
        )
        base = github_slug(text)
        count = seen.get(base, 0)
        seen[base] = count + 1
        slugs.add(base if count == 0 else f"{base}-{count}")
    return slugs


def link_targets(page: Path) -> list[str]:
    """Every link and image target of ``page``, in order."""
    tokens = _parser().parse(page.read_text(encoding="utf-8"))
    targets = []
    for token in _walk(tokens):
        if token.type == "link_open":
            targets.append(str(token.attrGet("href")))
        elif token.type == "image":
            targets.append(str(token.attrGet("src")))
    return targets


def broken_links(page: Path) -> list[str]:
    """Targets of ``page`` that name a missing path or a heading that is not there."""
    broken = []
    for target in link_targets(page):
        parts = urlsplit(target)
        if parts.scheme or parts.netloc:
            continue  # external: not checked here
        path = unquote(parts.path)
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif parts.fragment and (dest.suffix != ".md" or parts.fragment not in heading_slugs(dest)):
            broken.append(f"{target}: no heading with anchor #{parts.fragment}")
    return broken


def missing_pyproject_paths(pyproject: Path) -> list[str]:
    """Repository paths named in ``pyproject`` (values and comments) that do not exist.

    A word counts as a path when it ends in a file suffix or starts with a top-level entry
    of the repository; under ``[tool.setuptools.package-data]`` it is relative to the
    package's folder.
    """
    root = pyproject.parent
    top = {entry.name for entry in root.iterdir()}
    missing = []
    section = ""
    for line in pyproject.read_text(encoding="utf-8").splitlines():
        if line.startswith("["):
            section = line.strip()
        package = re.match(r'\s*"([\w.]+)"\s*=', line)
        for word in PATH_WORD.findall(line):
            name = word.rstrip(".")
            first = name.split("/")[0]
            if "/" not in name and Path(name).suffix not in PATH_SUFFIXES:
                continue
            if Path(name).suffix not in PATH_SUFFIXES and first not in top:
                continue  # prose like "torchvision/torchaudio"
            base = root
            if section == "[tool.setuptools.package-data]" and package:
                base = root.joinpath(*package.group(1).split("."))
            if not any(base.glob(name)):
                missing.append(f"{name} (line: {line.strip()})")
    return missing


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_of_a_page_resolves(page: Path) -> None:
    assert broken_links(page) == []


def test_every_path_pyproject_names_exists() -> None:
    assert missing_pyproject_paths(REPO / "pyproject.toml") == []


def test_the_checks_find_a_missing_file_a_missing_anchor_and_a_missing_path(
    tmp_path: Path,
) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.md").write_text("# Other page\n\n## A `code` heading (x)\n")
    page = tmp_path / "docs" / "a.md"
    page.write_text(
        "# Title\n\n## Same name\n\n## Same name\n\n"
        "[ok](b.md#a-code-heading-x) [ok](#same-name-1) [ok](https://example.com/x.md)\n"
        "[gone](c.md) [bad anchor](b.md#nope) [bad local](#title-2)\n\n"
        "| table | [in a cell](missing.md) |\n| --- | --- |\n\n"
        "    [in code](not-checked.md)\n"
    )
    assert broken_links(page) == [
        "c.md: no such file",
        "b.md#nope: no heading with anchor #nope",
        "#title-2: no heading with anchor #title-2",
        "missing.md: no such file",
    ]
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        "# see docs/b.md and docs/gone.md; builds of torchvision/torchaudio are prose\n"
        '[tool.setuptools.package-data]\n"pkg.sub" = ["data/*.csv"]\n'
    )
    assert missing_pyproject_paths(pyproject) == [
        "docs/gone.md (line: # see docs/b.md and docs/gone.md; builds of "
        "torchvision/torchaudio are prose)",
        'data/*.csv (line: "pkg.sub" = ["data/*.csv"])',
    ]
