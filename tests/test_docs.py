"""The documentation a newcomer follows: no placeholder left in it, and every link lands somewhere.

The security page once linked "#audit-trail" to a section reading "To be completed by the audit-trail
work": the link worked and the page promised nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
PLACEHOLDER = re.compile(r"to be (completed|written|done)|\bTODO\b|\bTBD\b|\bFIXME\b|lorem ipsum", re.IGNORECASE)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)


def _prose(page: Path) -> str:
    return FENCE.sub("", page.read_text(encoding="utf-8"))  # code blocks may say anything


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors for the page's headings: lower case, punctuation dropped, spaces to hyphens."""
    seen: dict[str, int] = {}
    anchors = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", _prose(page), re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.replace("`", "").strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_page_is_a_placeholder(page):
    found = [line for line in _prose(page).splitlines() if PLACEHOLDER.search(line)]
    assert found == [], f"{page.name} promises what it does not say"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_lands_on_a_file_and_a_heading_that_exist(page):
    broken = []
    for target in LINK.findall(_prose(page)):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto: — the outside world
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        missing_heading = bool(anchor) and linked.suffix == ".md" and anchor not in _anchors(linked)
        if not linked.exists() or missing_heading:
            broken.append(target)
    assert broken == [], f"{page.name} links nowhere"
