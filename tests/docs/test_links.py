"""The README is the front door (at most 200 lines), every relative link of the README and the
manual resolves, and pages outside the benchmarks carry no dated measurement log."""

from __future__ import annotations

import re
from pathlib import Path

from tests.docs.conftest import DOCS, ROOT

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
# a calendar date not part of a timestamp: "measured 2026-12-04" is history, "2026-11-30T20:46Z" an example
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b(?!T)")


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def _links(path: Path):
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)  # code blocks are not links,
    text = re.sub(r"`[^`\n]*`", "", text)  # nor code spans (a pattern like [a-z](...) in a CRD)
    for m in LINK.finditer(text):
        yield m.group(1)


def test_the_readme_is_at_most_200_lines():
    n = len((ROOT / "README.md").read_text().splitlines())
    assert n <= 200, f"README.md has {n} lines; move detail into a docs/ page and link it"


def test_every_relative_link_in_the_readme_and_the_manual_resolves():
    broken = []
    for page in _pages():
        for target in _links(page):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue
            path = target.split("#", 1)[0]
            if not (page.parent / path).resolve().exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken


def test_the_link_check_would_catch_a_broken_link(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("[ok](p.md) [gone](missing.md#x) ![img](img/none.png) `[a-z]([-a-z])`\n```\n[in code](nowhere.md)\n```\n")
    targets = [t for t in _links(page) if not (page.parent / t.split("#")[0]).exists()]
    assert targets == ["missing.md#x", "img/none.png"]


def test_no_dated_measurement_log_outside_the_benchmark_pages():
    dated = []
    for page in _pages():
        rel = page.relative_to(ROOT).as_posix()
        if rel.startswith(("docs/benchmarks/", "docs/reference/")):
            continue
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        dated += [f"{rel}: {m.group(0)}" for m in DATE.finditer(text)]
    assert not dated, f"dates belong on benchmark pages (or in git history): {dated}"
