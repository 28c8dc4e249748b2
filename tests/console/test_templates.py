"""The console's templates as files: mistakes Django's template engine renders silently."""

from __future__ import annotations

from pathlib import Path

import console

TEMPLATES = Path(console.__file__).parent / "templates"


def test_no_comment_tag_spans_lines() -> None:
    # Django's {# #} is single-line only: one left open renders as text on the page (the hand-offs
    # panel showed its own comment to reviewers). Longer comments use {% comment %}.
    templates = sorted(TEMPLATES.rglob("*.html"))
    assert len(templates) > 20
    open_comments = [
        f"{path.relative_to(TEMPLATES)}:{number}"
        for path in templates
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if line.count("{#") != line.count("#}")
    ]
    assert open_comments == []
