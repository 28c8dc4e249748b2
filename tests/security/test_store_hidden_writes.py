"""Nobody changes in the memory store what they cannot see.

tests/graphs/langgraph.json marks ``income`` sensitive in the namespace ``applicants``: an operator may
write there but sees ``income`` masked, an admin sees it. A PUT replaced the whole value and only a value
holding the mask text was refused, so an operator could erase ``income`` (leave it out), overwrite it, or
delete the item holding it. Now a masked writer's put keeps what they left out, refuses any value of
theirs at a hidden location (422 naming it), and their delete of an item holding hidden values is a 403;
a refused write writes and audits nothing. Writers who see the values are unaffected.
"""

from __future__ import annotations

import json
import random
import threading
import uuid
from typing import Any

import pytest
from django.db import connection, connections
from django.test import Client

import approvals.store as store_service
from approvals.models import AuditAction, AuditEvent
from approvals.redaction import MASK
from runtime.store import store_get
from tests.conftest import Persona, scaled, wait_for

pytestmark = pytest.mark.usefixtures("live_db")


def _call(persona: Persona, method: str, body: dict[str, Any]) -> Any:
    send = getattr(Client(), method.lower())
    return send(
        "/lg/store/items",
        json.dumps(body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {persona.token}"},
    )


def _error(response: Any) -> dict[str, Any]:
    return response.json()["error"]


@pytest.fixture
def applicant() -> dict[str, Any]:
    """An applicant's loan item whose income (sensitive in ``applicants``) is a canary."""
    namespace = ("applicants", f"Eve-{uuid.uuid4().hex[:8]}")
    income = random.randint(10**8, 10**9)
    store_get().put(namespace, "L-10", {"outcome": "declined", "amount": 1000, "income": income})
    return {"namespace": list(namespace), "income": income}


def _stored(applicant: dict[str, Any], key: str = "L-10") -> dict[str, Any] | None:
    item = store_get().get(tuple(applicant["namespace"]), key)
    return None if item is None else item.value


def _audited(applicant: dict[str, Any]) -> int:
    return AuditEvent.objects.filter(
        action__in=[AuditAction.STORE_ITEM_PUT, AuditAction.STORE_ITEM_DELETED],
        details__namespace=applicant["namespace"],
    ).count()


def test_a_put_that_leaves_a_hidden_field_out_keeps_it(personas, applicant):
    body = {"namespace": applicant["namespace"], "key": "L-10", "value": {"outcome": "approved", "amount": 1000}}
    response = _call(personas["operator"], "PUT", body)
    assert response.status_code == 204, response.content
    assert _stored(applicant) == {"outcome": "approved", "amount": 1000, "income": applicant["income"]}
    [event] = AuditEvent.objects.filter(action=AuditAction.STORE_ITEM_PUT, details__namespace=applicant["namespace"])
    assert event.details["value"] == {"outcome": "approved", "amount": 1000, "income": MASK}


def test_the_masked_value_sent_back_as_read_keeps_the_hidden_field(personas, applicant):
    query = {"namespace": ".".join(applicant["namespace"]), "key": "L-10"}
    seen = Client().get("/lg/store/items", query, headers={"Authorization": f"Bearer {personas['operator'].token}"})
    value = {**seen.json()["value"], "outcome": "approved"}
    assert value["income"] == MASK
    response = _call(personas["operator"], "PUT", {"namespace": applicant["namespace"], "key": "L-10", "value": value})
    assert response.status_code == 204, response.content
    assert _stored(applicant) == {"outcome": "approved", "amount": 1000, "income": applicant["income"]}


@pytest.mark.parametrize(
    "income",
    [
        pytest.param(lambda real: 999999, id="another-value"),
        pytest.param(lambda real: real, id="the-stored-value-itself"),  # else each put is a guess answered
        pytest.param(lambda real: None, id="null"),
        pytest.param(lambda real: {"nested": MASK}, id="an-object-holding-the-mask"),
    ],
)
def test_a_put_that_sets_a_hidden_field_is_a_422_naming_it_and_changes_nothing(personas, applicant, income):
    value = {"outcome": "approved", "amount": 1000, "income": income(applicant["income"])}
    response = _call(personas["operator"], "PUT", {"namespace": applicant["namespace"], "key": "L-10", "value": value})
    assert response.status_code == 422, response.content
    assert _error(response)["field"] == "value.income"
    assert "redacted for you" in _error(response)["message"]
    assert str(applicant["income"]) not in response.content.decode()
    assert _stored(applicant) == {"outcome": "declined", "amount": 1000, "income": applicant["income"]}
    assert _audited(applicant) == 0


def test_a_put_that_plants_a_hidden_field_where_none_was_is_refused(personas, applicant):
    planted = [("L-11", {"outcome": "approved", "income": 5}), ("L-12", {"outcome": "approved", "income": MASK})]
    for key, value in planted:
        body = {"namespace": applicant["namespace"], "key": key, "value": value}
        response = _call(personas["operator"], "PUT", body)
        assert response.status_code == 422, response.content
        assert _error(response)["field"] == "value.income"
        assert _stored(applicant, key) is None
    assert _audited(applicant) == 0


def test_a_put_that_drops_a_nested_hidden_field_with_its_parent_is_refused(personas, applicant):
    namespace = tuple(applicant["namespace"])
    store_get().put(namespace, "H-1", {"history": [{"year": 2024, "income": 1}, {"year": 2025, "income": 2}]})
    for value, field in [
        ({"history": [{"year": 2024}]}, "value.history[1].income"),  # the list cut short
        ({"history": "none"}, "value.history[0].income"),  # the parent replaced by a scalar
    ]:
        response = _call(personas["operator"], "PUT", {"namespace": list(namespace), "key": "H-1", "value": value})
        assert response.status_code == 422, response.content
        assert _error(response)["field"] == field
    # Left out where it stands, the hidden values are kept.
    kept = {"history": [{"year": 2023}, {"year": 2025}]}
    response = _call(personas["operator"], "PUT", {"namespace": list(namespace), "key": "H-1", "value": kept})
    assert response.status_code == 204, response.content
    assert _stored(applicant, "H-1") == {"history": [{"year": 2023, "income": 1}, {"year": 2025, "income": 2}]}


def test_the_mask_anywhere_but_a_hidden_field_is_still_refused(personas, applicant):
    value = {"outcome": MASK, "amount": 1000}
    response = _call(personas["operator"], "PUT", {"namespace": applicant["namespace"], "key": "L-10", "value": value})
    assert response.status_code == 422 and _error(response)["field"] == "value"
    assert _stored(applicant)["outcome"] == "declined"
    assert _audited(applicant) == 0


def test_a_delete_of_an_item_holding_hidden_values_is_a_403(personas, applicant):
    response = _call(personas["operator"], "DELETE", {"namespace": applicant["namespace"], "key": "L-10"})
    assert response.status_code == 403, response.content
    assert _error(response)["field"] == "key" and "income" in _error(response)["message"]
    assert _stored(applicant) == {"outcome": "declined", "amount": 1000, "income": applicant["income"]}
    assert _audited(applicant) == 0


def test_a_masked_writer_still_deletes_what_holds_nothing_hidden(personas, applicant):
    namespace = tuple(applicant["namespace"])
    store_get().put(namespace, "N-1", {"note": "no income here"})
    for key in ("N-1", "never-stored"):
        response = _call(personas["operator"], "DELETE", {"namespace": list(namespace), "key": key})
        assert response.status_code == 204, response.content
    assert _stored(applicant, "N-1") is None


def test_a_writer_who_sees_the_values_may_change_and_delete_them(personas, applicant):
    admin, namespace = personas["admin"], applicant["namespace"]
    response = _call(admin, "PUT", {"namespace": namespace, "key": "L-10", "value": {"outcome": "approved"}})
    assert response.status_code == 204 and _stored(applicant) == {"outcome": "approved"}
    value = {"outcome": "approved", "income": 999999}
    response = _call(admin, "PUT", {"namespace": namespace, "key": "L-10", "value": value})
    assert response.status_code == 204 and _stored(applicant) == value
    response = _call(admin, "DELETE", {"namespace": namespace, "key": "L-10"})
    assert response.status_code == 204 and _stored(applicant) is None
    # Their writes are audited, masked for everyone.
    events = AuditEvent.objects.filter(details__namespace=namespace).order_by("id")
    assert [e.action for e in events] == [
        AuditAction.STORE_ITEM_PUT,
        AuditAction.STORE_ITEM_PUT,
        AuditAction.STORE_ITEM_DELETED,
    ]
    assert events[1].details["value"] == {"outcome": "approved", "income": MASK}


class _PausedAfterRead:
    """The process's store, with a masked writer's read of the stored value held until ``go``: the
    moment between judging a put against the stored value and writing it."""

    def __init__(self) -> None:
        self.inner = store_get()
        self.read, self.go = threading.Event(), threading.Event()

    def get(self, *args: Any, **kwargs: Any) -> Any:
        found = self.inner.get(*args, **kwargs)
        self.read.set()
        assert self.go.wait(scaled(20)), "never let go"
        return found

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _waiting_for_an_item_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND classid = %s",
            [store_service._ITEM_LOCK_CLASS],
        )
        return bool(cursor.fetchone()[0])


def test_a_masked_put_never_reverts_a_hidden_value_written_while_it_was_judged(personas, applicant, monkeypatch):
    """The operator's put read income, then an admin wrote a new one: the operator's put, which kept the
    income it read, wrote the old one back over the admin's. People's writes to an item now take turns."""
    if connection.vendor != "postgresql":
        pytest.skip("the item lock is PostgreSQL's; SQLite serialises writers")
    paused = _PausedAfterRead()
    monkeypatch.setattr(store_service, "store_get", lambda: paused)
    admin_value = {"outcome": "admin", "amount": 1, "income": applicant["income"] + 1}
    answers: dict[str, int] = {}

    def put(who: str, value: dict[str, Any]) -> None:
        try:
            body = {"namespace": applicant["namespace"], "key": "L-10", "value": value}
            answers[who] = _call(personas[who], "PUT", body).status_code
        finally:
            connections.close_all()

    operator = threading.Thread(target=put, args=("operator", {"outcome": "approved", "amount": 1000}))
    admin = threading.Thread(target=put, args=("admin", admin_value))
    operator.start()
    try:
        assert paused.read.wait(scaled(20)), "the operator's put never read the stored value"
        admin.start()
        wait_for(lambda: not admin.is_alive() or _waiting_for_an_item_lock(), what="the admin's put to wait or end")
    finally:
        paused.go.set()
        operator.join(scaled(20))
        if admin.ident is not None:  # started
            admin.join(scaled(20))
    assert answers == {"operator": 204, "admin": 204}
    assert _stored(applicant) == admin_value
