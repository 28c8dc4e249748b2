"""A console date-and-time field shows what it was given: an outside reviewer opened ``/audit/?since=<junk>``
and saw the error about ``since`` next to an empty field. The value was rendered into an
``<input type="datetime-local">``, which a browser blanks when the value is not in its own format
(``YYYY-MM-DDTHH:MM[:SS]``): junk, but also a bare date or an offset the filter accepts and applies."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from tests.console.conftest import console_client

pytestmark = pytest.mark.usefixtures("live_db")


class _Inputs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.by_id: dict[str, dict[str, str]] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {name: value or "" for name, value in attrs}
        if tag == "input" and "id" in found:
            self.by_id[found["id"]] = found


def _input(html: str, input_id: str) -> dict[str, str]:
    parser = _Inputs()
    parser.feed(html)
    return parser.by_id[input_id]


# Every datetime-local filter in the console: the page, its input's id, the query parameter it sends.
FILTERS = [
    ("/audit/", "a-since", "since"),
    ("/audit/", "a-until", "until"),
    ("/decisions/", "d-since", "since"),
    ("/decisions/", "d-until", "until"),
]


@pytest.mark.parametrize(("path", "input_id", "name"), FILTERS)
def test_a_filter_value_the_browser_would_blank_is_shown_as_typed_next_to_its_error(personas, path, input_id, name):
    typed = 'yesterday "noon" <b>'
    page = console_client(personas["auditor"]).get(path, {name: typed})
    html = page.content.decode()
    field = _input(html, input_id)
    assert field["value"] == typed  # the parser unescapes: the page escaped it
    assert field["type"] == "text", field  # a datetime-local input would show it empty
    assert field.get("aria-invalid") == "true"
    assert "not an ISO 8601 date or date and time" in html


@pytest.mark.parametrize(("path", "input_id", "name"), FILTERS)
def test_a_filter_value_accepted_but_not_in_the_pickers_format_stays_visible(personas, path, input_id, name):
    """A bare date is a whole day (approvals.inputs.instant_parse) and is applied: a blanked field said no filter."""
    page = console_client(personas["auditor"]).get(path, {name: "2026-12-01"})
    field = _input(page.content.decode(), input_id)
    assert (field["type"], field["value"]) == ("text", "2026-12-01")
    assert "aria-invalid" not in field


@pytest.mark.parametrize(("path", "input_id", "name"), FILTERS)
@pytest.mark.parametrize("value", ["", "2026-12-01T09:30", "2026-12-01T09:30:15"])
def test_a_value_the_picker_can_hold_keeps_the_picker(personas, path, input_id, name, value):
    page = console_client(personas["auditor"]).get(path, {name: value} if value else {})
    field = _input(page.content.decode(), input_id)
    assert (field["type"], field["value"]) == ("datetime-local", value)


@pytest.mark.parametrize(("input_id", "name"), [("away-from", "starts_at"), ("away-until", "ends_at")])
def test_a_refused_away_date_is_shown_as_typed(personas, input_id, name):
    """Sent without the picker (a script, an old browser): the refusal named the field and blanked it."""
    client = console_client(personas["reviewer"])
    page = client.post("/settings/away", {"delegate": personas["reviewer2"].username, name: "next tuesday"})
    assert page.status_code == 422
    field = _input(page.content.decode(), input_id)
    assert (field["type"], field["value"]) == ("text", "next tuesday")
