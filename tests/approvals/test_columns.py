"""Inbox columns per gate: parsed once (bad config names its key), sorted and filtered in the database,
shown redacted, and never sortable or filterable by a value the viewer may not see. Plus previous pages."""

from __future__ import annotations

import json
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest

from approvals.columns import Column, ColumnError, PayloadValue, cells_for, columns_parse
from approvals.errors import InvalidInput
from approvals.inbox_filter import InboxFilter
from approvals.redaction import MASK
from approvals.selectors import cursor_pack
from console.selectors import Page, inbox_list
from runtime.registry import GraphRegistryError, graph_get, graphs_read
from tests.console.conftest import console_client
from tests.factories import task_make

ROOT = Path(__file__).resolve().parent.parent.parent

COLUMNS = [
    {"key": "amount", "path": "/amount", "label": "Amount", "type": "money", "currency": "EUR"},
    {"key": "risk", "path": "/details/risk_score", "type": "risk", "scale": [0, 100]},
    {"key": "country", "path": "/country"},
]


def _inbox(user: Any, *, graph: str = "", node: str = "", columns: dict[str, str] | None = None, **paging: Any) -> Page:
    """The inbox's list, filtered by gate and columns (the page's ``InboxFilter``)."""
    return inbox_list(user=user, filter=InboxFilter(graph=graph, node=node, columns=columns or {}), **paging)


# --- parsing ----------------------------------------------------------------------------------------


def test_a_declaration_parses_into_typed_columns():
    amount, risk, country = columns_parse(COLUMNS, where="x")
    assert amount == Column("amount", ("amount",), "Amount", "money", None, "EUR")
    assert risk.scale == (0.0, 100.0) and risk.pointer == "/details/risk_score" and risk.label == "Risk"
    assert country.type == "text" and not country.numeric


@pytest.mark.parametrize(
    "raw,field",
    [
        ({"key": "a"}, "x"),
        ([{"key": "Amount", "path": "/a"}], "x[0].key"),
        ([{"key": "a", "path": "amount"}], "x[0].path"),
        ([{"key": "a", "path": "/a//b"}], "x[0].path"),
        ([{"key": "a", "path": "/a", "type": "percent"}], "x[0].type"),
        ([{"key": "a", "path": "/a", "type": "risk", "scale": [100, 0]}], "x[0].scale"),
        ([{"key": "a", "path": "/a", "scale": [0, 1]}], "x[0].scale"),
        ([{"key": "a", "path": "/a", "colour": "red"}], "x[0].colour"),
        ([{"key": "a", "path": "/a"}, {"key": "a", "path": "/b"}], "x[1].key"),
        ([{"key": "a", "path": "/a", "currency": "EUR"}], "x[0].currency"),
        ([{"key": f"k{i}", "path": "/a"} for i in range(9)], "x"),
    ],
)
def test_a_bad_declaration_names_the_field(raw, field):
    with pytest.raises(ColumnError) as bad:
        columns_parse(raw, where="x")
    assert bad.value.field == field


def test_bad_columns_in_langgraph_json_stop_start_up_naming_the_key(tmp_path):
    config = {
        "graphs": {"loan_approval": str(ROOT / "demo" / "graphs" / "loan_approval.py") + ":make_graph"},
        "gatehouse": {"columns": {"loan_approval": {"human_review": [{"key": "risk", "path": "/r", "type": "x"}]}}},
    }
    path = tmp_path / "langgraph.json"
    path.write_text(json.dumps(config))
    with pytest.raises(GraphRegistryError, match=r"gatehouse\.columns\.loan_approval\.human_review\[0\]\.type"):
        graphs_read(path)
    config["gatehouse"]["columns"]["loan_approval"]["human_review"][0]["type"] = "risk"
    path.write_text(json.dumps(config))
    entries = graphs_read(path)
    assert entries["loan_approval"].options["columns"]["human_review"][0].type == "risk"


def test_the_sqlite_expression_reads_numbers_and_text_and_ignores_the_wrong_type():
    """The suite runs PostgreSQL; the embedded mode runs SQLite: its SQL is checked here on a real SQLite."""

    class Compiler:
        def compile(self, expression):
            return "payload", []

    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (id INTEGER, payload TEXT)")
    rows = [(1, {"amount": 30}), (2, {"amount": 5.5}), (3, {"amount": "a lot"}), (4, {}), (5, {"amount": 100})]
    db.executemany("INSERT INTO t VALUES (?, ?)", [(i, json.dumps(p)) for i, p in rows])
    [amount] = columns_parse([{"key": "amount", "path": "/amount", "type": "number"}], where="x")
    sql, params = PayloadValue(amount).as_sqlite(Compiler(), None)
    sql = sql.replace("%s", "?")  # Django's SQLite backend does the same
    ordered = db.execute(f"SELECT id, {sql} AS v FROM t ORDER BY v IS NULL, v, id", params).fetchall()
    assert ordered == [(2, 5.5), (1, 30), (5, 100), (3, None), (4, None)]
    [text] = columns_parse([{"key": "amount", "path": "/amount"}], where="x")
    sql, params = PayloadValue(text).as_sqlite(Compiler(), None)
    sql = sql.replace("%s", "?")
    assert db.execute(f"SELECT {sql} FROM t WHERE id = 3", params).fetchone() == ("a lot",)


# --- the inbox: sorted and filtered in the database (PostgreSQL here) -------------------------------------


def _gate_tasks(gate: str, values: list[tuple[object, object, str]], graph: str = "loan_approval"):
    out = []
    for amount, risk, country in values:
        payload = {"title": f"{gate} {amount}", "amount": amount, "details": {"risk_score": risk}, "country": country}
        payload["columns"] = COLUMNS
        out.append(task_make(graph=graph, node=gate, payload=payload, title=f"{gate} {amount}"))
    return out


@pytest.mark.usefixtures("live_db")
def test_columns_sort_and_filter_server_side_and_page_both_ways(personas):
    approver = personas["approver"].user
    gate = f"gate_{uuid.uuid4().hex[:6]}"
    tasks = _gate_tasks(
        gate, [(500, 10, "FR"), (20000, 72, "DE"), (1500, 40, "de"), ("n/a", None, "GB"), (9000, 90, "IT")]
    )
    common = {"user": approver, "graph": "loan_approval", "node": gate}

    page = _inbox(**common, sort="col:amount")
    assert [t.payload["amount"] for t in page.items] == [500, 1500, 9000, 20000, "n/a"]  # not a number: last
    page = _inbox(**common, sort="-col:risk")
    assert [t.payload["details"]["risk_score"] for t in page.items] == [90, 72, 40, 10, None]
    page = _inbox(**common, sort="col:amount", columns={"amount": ">=1500", "country": "DE"})
    assert [t.payload["amount"] for t in page.items] == [1500, 20000]
    page = _inbox(**common, sort="col:amount", columns={"risk": "30..80"})
    assert [t.payload["amount"] for t in page.items] == [1500, 20000]

    first = _inbox(**common, sort="col:amount", limit=2)
    second = _inbox(**common, sort="col:amount", limit=2, cursor=first.next_cursor)
    third = _inbox(**common, sort="col:amount", limit=2, cursor=second.next_cursor)
    assert [t.payload["amount"] for t in second.items] == [9000, 20000] and third.next_cursor is None
    assert [t.payload["amount"] for t in third.items] == ["n/a"]
    back = _inbox(**common, sort="col:amount", limit=2, before=third.prev_cursor)
    assert [t.pk for t in back.items] == [t.pk for t in second.items]
    start = _inbox(**common, sort="col:amount", limit=2, before=back.prev_cursor)
    assert [t.pk for t in start.items] == [t.pk for t in first.items] and start.prev_cursor is None

    cells = cells_for(user=approver, tasks=tasks[:2], columns=page.columns)
    assert [c.text for c in cells[tasks[1].pk]] == ["20,000.00 EUR", "72 / 100", "DE"]
    assert cells[tasks[1].pk][1].fraction == pytest.approx(0.72)


@pytest.mark.usefixtures("live_db")
@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"sort": "col:nope"}, "sort"),
        ({"columns": {"nope": "1"}}, "c.nope"),
        ({"columns": {"amount": "lots"}}, "c.amount"),
        ({"columns": {"amount": "1e999"}}, "c.amount"),
        ({"columns": {"amount": ">=\u0661"}}, "c.amount"),  # Arabic-Indic 1: float() read it as 1
        ({"columns": {"amount": "\uff11..\uff15"}}, "c.amount"),  # full-width digits
        ({"sort": "col:amount", "cursor": "garbage"}, "cursor"),
        ({"sort": "col:amount", "before": "garbage"}, "before"),
        # Well-formed page links whose sort value is not the column's kind (a hand-made or stale link).
        ({"sort": "col:amount", "cursor": cursor_pack(["col:amount", "lots", str(uuid.uuid4())])}, "cursor"),
        ({"sort": "col:amount", "before": cursor_pack(["col:amount", "lots", str(uuid.uuid4())])}, "before"),
        ({"sort": "col:country", "cursor": cursor_pack(["col:country", 5, str(uuid.uuid4())])}, "cursor"),
    ],
)
def test_bad_column_sorts_and_filters_name_the_field(personas, kwargs, field):
    gate = f"gate_{uuid.uuid4().hex[:6]}"
    _gate_tasks(gate, [(1, 1, "FR")])
    with pytest.raises(InvalidInput) as bad:
        _inbox(user=personas["approver"].user, graph="loan_approval", node=gate, **kwargs)
    assert bad.value.field == field


@pytest.mark.usefixtures("live_db")
def test_configured_columns_win_over_the_payloads(personas, monkeypatch):
    gate = f"gate_{uuid.uuid4().hex[:6]}"
    _gate_tasks(gate, [(1, 1, "FR")])
    configured = columns_parse([{"key": "where", "path": "/country", "label": "Where"}], where="x")
    monkeypatch.setitem(graph_get("loan_approval").options, "columns", {gate: configured})
    page = _inbox(user=personas["approver"].user, graph="loan_approval", node=gate)
    assert page.columns == configured


# --- redaction: a masked column shows masked and cannot be sorted or filtered to leak its order ----------


def _dob_tasks(gate: str) -> list:
    dobs = ["1990-05-01", "1961-01-30", "2001-12-24"]
    columns = [{"key": "dob", "path": "/applicant/date_of_birth", "label": "Born"}, {"key": "name", "path": "/name"}]
    return [
        task_make(
            graph="kyc_onboarding",
            node=gate,
            payload={"title": f"kyc {i}", "name": f"P{i}", "applicant": {"date_of_birth": dob}, "columns": columns},
        )
        for i, dob in enumerate(dobs)
    ]


@pytest.mark.usefixtures("live_db")
def test_sorting_or_filtering_by_a_redacted_column_is_refused(personas):
    """The attacker: a reviewer who may not see dates of birth sorts or filters by them to learn their order."""
    reviewer = personas["reviewer"].user
    gate = f"gate_{uuid.uuid4().hex[:6]}"
    tasks = _dob_tasks(gate)
    common = {"user": reviewer, "graph": "kyc_onboarding", "node": gate}
    for kwargs, field in [
        ({"sort": "col:dob"}, "sort"),
        ({"sort": "-col:dob"}, "sort"),
        ({"columns": {"dob": "19"}}, "c.dob"),
        ({"columns": {"dob": "1961"}}, "c.dob"),
    ]:
        with pytest.raises(InvalidInput) as refused:
            _inbox(**common, **kwargs)
        assert refused.value.field == field
    # Without the graph filter (every graph's sensitive paths apply) the same.
    with pytest.raises(InvalidInput):
        _inbox(user=reviewer, node=gate, sort="col:dob")
    page = _inbox(**common, sort="col:name")
    cells = cells_for(user=reviewer, tasks=page.items, columns=page.columns)
    assert all(cells[t.pk][0].masked and cells[t.pk][0].text == MASK for t in tasks)
    assert [cells[t.pk][1].text for t in page.items] == ["P0", "P1", "P2"]

    # An auditor who may see them sorts by them (and the read is audited as a reveal).
    auditor = personas["auditor"].user
    seen = _inbox(user=auditor, graph="kyc_onboarding", node=gate, sort="col:dob")
    assert [t.payload["applicant"]["date_of_birth"] for t in seen.items] == ["1961-01-30", "1990-05-01", "2001-12-24"]


@pytest.mark.usefixtures("live_db")
def test_the_inbox_page_masks_a_redacted_column_and_refuses_its_sort(personas):
    gate = f"gate_{uuid.uuid4().hex[:6]}"
    rows = [f'data-task-id="{t.pk}"' for t in _dob_tasks(gate)]  # not "P1": a random CSRF token can hold that
    client = console_client(personas["reviewer"])
    html = client.get("/", {"graph": "kyc_onboarding", "node": gate}).content.decode()
    assert "(redacted)" in html and MASK in html and all(row in html for row in rows)
    assert not any(dob in html for dob in ("1990-05-01", "1961-01-30", "2001-12-24"))
    assert 'name="c.dob"' not in html and "col%3Adob" not in html
    refused = client.get("/", {"graph": "kyc_onboarding", "node": gate, "sort": "col:dob"}).content.decode()
    assert "is redacted for you" in refused and not any(row in refused for row in rows)
    shown = console_client(personas["auditor"]).get("/", {"graph": "kyc_onboarding", "node": gate, "sort": "col:dob"})
    assert "1961-01-30" in shown.content.decode()


# --- previous page, stable under inserts ---------------------------------------------------------------


@pytest.mark.usefixtures("live_db")
def test_the_previous_page_is_the_same_page_after_new_tasks_arrive(personas):
    approver = personas["approver"].user
    gate = f"gate_{uuid.uuid4().hex[:6]}"
    made = [task_make(node=gate, title=f"{gate} {i}") for i in range(5)]
    first = _inbox(user=approver, node=gate, limit=2)  # newest first
    second = _inbox(user=approver, node=gate, limit=2, cursor=first.next_cursor)
    for i in range(3):
        task_make(node=gate, title=f"{gate} new {i}")  # newer tasks land before the first page
    back = _inbox(user=approver, node=gate, limit=2, before=second.prev_cursor)
    assert [t.pk for t in back.items] == [t.pk for t in first.items]
    assert back.prev_cursor is not None  # the new tasks are a page further back
    newest = _inbox(user=approver, node=gate, limit=2, before=back.prev_cursor)
    assert len(newest.items) == 2 and all("new" in t.title for t in newest.items)
    assert {t.pk for t in first.items} == {made[4].pk, made[3].pk}

    client = console_client(personas["approver"])
    html = client.get("/", {"node": gate, "cursor": first.next_cursor}).content.decode()
    assert 'rel="prev"' in html and "before=" in html


@pytest.mark.usefixtures("live_db")
def test_the_filter_form_keeps_a_column_sort(personas):
    """Sorted by a column's header and then filtered, the inbox went back to newest first: the filter form's
    Sort menu had no option for the column's sort, so the form sent its first one (outside QA)."""
    import re

    gate = f"gate_{uuid.uuid4().hex[:6]}"
    _gate_tasks(gate, [(500, 10, "FR"), (20000, 72, "DE")])
    client = console_client(personas["approver"])
    for sort in ("-col:risk", "col:amount", "oldest"):
        html = client.get("/", {"graph": "loan_approval", "node": gate, "sort": sort}).content.decode()
        menu = html.split('<select id="f-sort" name="sort">', 1)[1].split("</select>", 1)[0]
        selected = re.findall(r'<option value="([^"]*)"[^>]*\bselected\b', menu)
        assert selected == [sort], (sort, selected)  # what the form sends when a filter is applied
