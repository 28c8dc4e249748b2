"""Long-term memory: who may read and write which namespace, and what a reader without "view sensitive"
can learn of a masked field (nothing) — through /lg/store, the console and the audit trail.

tests/graphs/langgraph.json: ``gatehouse.store.namespaces.applicants`` = graphs ["loan_approval"],
sensitive_paths ["income"]. Namespaces without a rule are for principals who see every graph.
"""

from __future__ import annotations

import json
import random
import uuid
from typing import Any

import pytest
from django.test import Client

from approvals.models import AuditAction, AuditEvent
from approvals.redaction import MASK
from approvals.store import NAMESPACE_DEPTH_MAX
from approvals.tokens import token_issue
from runtime.store import store_get
from tests.conftest import Persona
from tests.console.conftest import console_client

pytestmark = pytest.mark.usefixtures("live_db")

ROLES = ("anonymous", "outsider", "reviewer", "loan_reviewer", "auditor", "operator", "admin")


def _headers(persona: Persona | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {persona.token}"} if persona else {}


def _call(persona: Persona | None, method: str, path: str, body: Any = None, **query: Any) -> Any:
    client = Client()
    if method == "GET":
        return client.get(path, query, headers=_headers(persona))
    send = getattr(client, method.lower())
    return send(path, json.dumps(body or {}), content_type="application/json", headers=_headers(persona))


@pytest.fixture
def seeded() -> dict[str, Any]:
    """An applicant's item (income is sensitive there) and an item in a namespace without a rule."""
    applicant = f"A-{uuid.uuid4().hex[:8]}"
    canary = random.randint(10**8, 10**9)
    store = store_get()
    store.put(("applicants", applicant), "L-1", {"outcome": "declined", "amount": 1000, "income": canary})
    misc = f"misc-{uuid.uuid4().hex[:8]}"
    store.put((misc,), "note", {"text": "ops only"})
    return {"applicant": applicant, "canary": canary, "misc": misc}


def _persona(personas: dict[str, Persona], role: str) -> Persona | None:
    return None if role == "anonymous" else personas[role]


# (what, status per role: anonymous, outsider, reviewer, loan_reviewer, auditor, operator, admin)
MATRIX = [
    ("put applicants", (401, 403, 403, 403, 403, 204, 204)),
    ("put misc", (401, 403, 403, 403, 403, 204, 204)),
    ("get applicants", (401, 403, 200, 200, 200, 200, 200)),
    ("get misc", (401, 403, 200, 403, 200, 200, 200)),
    ("delete applicants", (401, 403, 403, 403, 403, 204, 204)),
    ("delete misc", (401, 403, 403, 403, 403, 204, 204)),
    ("search applicants", (401, 403, 200, 200, 200, 200, 200)),
    ("search misc", (401, 403, 200, 403, 200, 200, 200)),
    ("search everything", (401, 403, 200, 200, 200, 200, 200)),
    ("namespaces", (401, 403, 200, 200, 200, 200, 200)),
]


@pytest.mark.parametrize(
    "what,role,expected",
    [pytest.param(w, r, s[i], id=f"{w} {r}") for w, s in MATRIX for i, r in enumerate(ROLES)],
)
def test_each_role_gets_the_status_the_store_matrix_gives(personas, seeded, what, role, expected):
    persona = _persona(personas, role)
    verb, _, where = what.partition(" ")
    namespace = {"applicants": ["applicants", seeded["applicant"]], "misc": [seeded["misc"]], "everything": []}.get(
        where, []
    )
    if verb == "put":
        response = _call(persona, "PUT", "/lg/store/items", {"namespace": namespace, "key": "k", "value": {"a": 1}})
    elif verb == "get":
        response = _call(persona, "GET", "/lg/store/items", namespace=".".join(namespace), key="L-1")
    elif verb == "delete":
        response = _call(persona, "DELETE", "/lg/store/items", {"namespace": namespace, "key": "nothing"})
    elif verb == "search":
        response = _call(persona, "POST", "/lg/store/items/search", {"namespace_prefix": namespace})
    else:
        response = _call(persona, "POST", "/lg/store/namespaces", {})
    assert response.status_code == expected, response.content


def test_a_refused_write_writes_nothing_and_audits_nothing(personas, seeded):
    namespace = ["applicants", seeded["applicant"]]
    response = _call(
        personas["reviewer"], "PUT", "/lg/store/items", {"namespace": namespace, "key": "L-1", "value": {"x": 1}}
    )
    assert response.status_code == 403
    assert store_get().get(tuple(namespace), "L-1").value["outcome"] == "declined"
    assert not AuditEvent.objects.filter(
        action=AuditAction.STORE_ITEM_PUT, subject_id__startswith=f"applicants.{seeded['applicant']}"
    ).exists()


def test_a_token_scoped_to_reading_cannot_write(personas, seeded):
    read_only = token_issue(user=personas["operator"].user, actions=["read"])
    response = Client().put(
        "/lg/store/items",
        json.dumps({"namespace": [seeded["misc"]], "key": "k", "value": {"a": 1}}),
        content_type="application/json",
        headers={"Authorization": f"Bearer {read_only}"},
    )
    assert response.status_code == 403
    assert store_get().get((seeded["misc"],), "k") is None


def test_a_reader_without_view_sensitive_gets_the_field_masked_and_others_get_it(personas, seeded):
    query = {"namespace": f"applicants.{seeded['applicant']}", "key": "L-1"}
    masked = _call(personas["reviewer"], "GET", "/lg/store/items", **query)
    assert masked.json()["value"] == {"outcome": "declined", "amount": 1000, "income": MASK}
    assert str(seeded["canary"]).encode() not in masked.content
    shown = _call(personas["auditor"], "GET", "/lg/store/items", **query)
    assert shown.json()["value"]["income"] == seeded["canary"]


@pytest.mark.parametrize(
    "wanted",
    [
        pytest.param(lambda c: {"income": c}, id="equal-to-the-real-value"),
        pytest.param(lambda c: {"income": {"$gt": 0}}, id="range"),
        pytest.param(lambda c: {"income": {"$eq": c}}, id="operator-eq"),
        pytest.param(lambda c: {"income": {"$ne": c + 1}}, id="operator-ne"),
    ],
)
def test_a_filter_cannot_probe_a_masked_field(personas, seeded, wanted):
    for prefix in (["applicants", seeded["applicant"]], []):
        body = {"namespace_prefix": prefix, "filter": wanted(seeded["canary"]), "limit": 100}
        response = _call(personas["reviewer"], "POST", "/lg/store/items/search", body)
        assert response.status_code == 200
        assert [i for i in response.json()["items"] if i["namespace"][-1] == seeded["applicant"]] == []
    # The same filters do find it for a reader who sees the field (the test can fail).
    body = {"namespace_prefix": ["applicants", seeded["applicant"]], "filter": {"income": seeded["canary"]}}
    assert len(_call(personas["auditor"], "POST", "/lg/store/items/search", body).json()["items"]) == 1


def test_a_filter_on_the_mask_itself_matches_what_the_reader_sees(personas, seeded):
    body = {"namespace_prefix": ["applicants", seeded["applicant"]], "filter": {"income": MASK, "outcome": "declined"}}
    [item] = _call(personas["reviewer"], "POST", "/lg/store/items/search", body).json()["items"]
    assert item["value"]["income"] == MASK


def test_a_path_shaped_filter_key_is_refused_for_a_masked_reader(personas, seeded):
    body = {"namespace_prefix": ["applicants", seeded["applicant"]], "filter": {"x.income": seeded["canary"]}}
    response = _call(personas["reviewer"], "POST", "/lg/store/items/search", body)
    assert response.status_code == 422
    assert response.json()["error"]["field"] == "filter.x.income"


def test_a_semantic_query_over_masked_fields_is_refused(personas, seeded, monkeypatch):
    import runtime.store as store_module

    config = store_module.store_config()
    with_index = store_module.StoreConfig(index={"dims": 8}, namespaces=config.namespaces)
    monkeypatch.setattr(store_module, "_config", with_index)
    body = {"namespace_prefix": ["applicants", seeded["applicant"]], "query": "high income"}
    response = _call(personas["reviewer"], "POST", "/lg/store/items/search", body)
    assert response.status_code == 403 and response.json()["error"]["field"] == "query"


def test_a_masked_value_sent_back_never_overwrites_the_real_one(personas, seeded):
    namespace = ["applicants", seeded["applicant"]]
    seen = _call(personas["reviewer"], "GET", "/lg/store/items", namespace=".".join(namespace), key="L-1").json()
    # From a writer who may see the value, the mask is refused; from one who sees it masked, it is the
    # field left alone and keeps the stored value (tests/security/test_store_hidden_writes.py).
    body = {"namespace": namespace, "key": "L-1", "value": seen["value"]}
    response = _call(personas["admin"], "PUT", "/lg/store/items", body)
    assert response.status_code == 422 and response.json()["error"]["field"] == "value"
    assert _call(personas["operator"], "PUT", "/lg/store/items", body).status_code == 204
    assert store_get().get(tuple(namespace), "L-1").value["income"] == seeded["canary"]


def test_the_audit_row_of_a_write_never_holds_a_sensitive_value(personas, seeded):
    # Written by an admin, who sees income: the audit row masks it all the same.
    namespace = ["applicants", seeded["applicant"]]
    value = {"outcome": "approved", "income": seeded["canary"] + 1}
    body = {"namespace": namespace, "key": "L-2", "value": value}
    response = _call(personas["admin"], "PUT", "/lg/store/items", body)
    assert response.status_code == 204
    [event] = AuditEvent.objects.filter(
        action=AuditAction.STORE_ITEM_PUT, details__key="L-2", details__namespace=namespace
    )
    assert event.actor_id == personas["admin"].user.pk and event.graph == "loan_approval"
    assert event.details["value"] == {"outcome": "approved", "income": MASK}
    assert str(seeded["canary"] + 1) not in json.dumps(event.details)
    response = _call(personas["admin"], "DELETE", "/lg/store/items", {"namespace": namespace, "key": "L-2"})
    assert response.status_code == 204
    assert AuditEvent.objects.filter(action=AuditAction.STORE_ITEM_DELETED, details__key="L-2").count() == 1
    assert store_get().get(tuple(namespace), "L-2") is None


def test_a_graph_scoped_reader_never_sees_other_namespaces(personas, seeded):
    loan_reviewer = personas["loan_reviewer"]
    found = _call(loan_reviewer, "POST", "/lg/store/items/search", {"namespace_prefix": [], "limit": 1000}).json()
    assert all(item["namespace"][0] == "applicants" for item in found["items"])
    namespaces = _call(loan_reviewer, "POST", "/lg/store/namespaces", {"limit": 1000}).json()["namespaces"]
    assert namespaces and all(ns[0] == "applicants" for ns in namespaces)
    admin_sees = _call(personas["admin"], "POST", "/lg/store/namespaces", {"prefix": [seeded["misc"]]}).json()
    assert admin_sees["namespaces"] == [[seeded["misc"]]]
    hidden = _call(loan_reviewer, "POST", "/lg/store/namespaces", {"prefix": [seeded["misc"]]})
    assert hidden.status_code == 403


@pytest.mark.parametrize(
    "body,field",
    [
        ({"namespace": ["a.b"], "key": "k", "value": {}}, "namespace[0]"),
        ({"namespace": ["langgraph"], "key": "k", "value": {}}, "namespace[0]"),
        ({"namespace": [], "key": "k", "value": {}}, "namespace"),
        ({"namespace": ["ok", ""], "key": "k", "value": {}}, "namespace[1]"),
        ({"namespace": ["ok"], "key": "", "value": {}}, "key"),
        ({"namespace": ["ok"], "key": "k", "value": [1]}, "value"),
        ({"namespace": ["ok"], "key": "k", "value": {}, "ttl": -1}, "ttl"),
        ({"namespace": ["ok"], "key": "k", "value": {}, "index": [1]}, "index"),
    ],
)
def test_bad_store_input_is_a_422_naming_the_field(personas, body, field):
    response = _call(personas["admin"], "PUT", "/lg/store/items", body)
    assert response.status_code == 422, response.content
    assert response.json()["error"]["field"].startswith(field)


DEEP = ["applicants", *["x"] * 499]


@pytest.mark.parametrize(
    "method,path,body,field",
    [
        ("PUT", "/lg/store/items", {"namespace": DEEP, "key": "k", "value": {}}, "namespace"),
        ("DELETE", "/lg/store/items", {"namespace": DEEP, "key": "k"}, "namespace"),
        ("POST", "/lg/store/items/search", {"namespace_prefix": DEEP}, "namespace_prefix"),
        ("POST", "/lg/store/namespaces", {"prefix": DEEP}, "prefix"),
        ("POST", "/lg/store/namespaces", {"suffix": DEEP}, "suffix"),
        (
            "PUT",
            "/lg/store/items",
            {"namespace": ["ok"] * (NAMESPACE_DEPTH_MAX + 1), "key": "k", "value": {}},
            "namespace",
        ),
    ],
)
def test_a_namespace_deeper_than_the_limit_is_refused_naming_it(personas, method, path, body, field):
    """A put of 500 labels was stored (204) and listed back by list_namespaces."""
    response = _call(personas["admin"], method, path, body)
    assert response.status_code == 422, response.content
    error = response.json()["error"]
    assert error["field"] == field and f"at most {NAMESPACE_DEPTH_MAX} labels" in error["message"], error
    listed = _call(personas["admin"], "POST", "/lg/store/namespaces", {"prefix": ["applicants", "x"], "limit": 1000})
    assert listed.json()["namespaces"] == []


def test_a_namespace_of_the_limit_s_depth_is_stored_and_read_back(personas):
    namespace = [f"deep-{uuid.uuid4().hex[:8]}", *["x"] * (NAMESPACE_DEPTH_MAX - 1)]
    put = _call(personas["admin"], "PUT", "/lg/store/items", {"namespace": namespace, "key": "k", "value": {"a": 1}})
    assert put.status_code == 204, put.content
    got = _call(personas["admin"], "GET", "/lg/store/items", namespace=".".join(namespace), key="k")
    assert got.json()["value"] == {"a": 1}
    deeper = _call(personas["admin"], "GET", "/lg/store/items", namespace=".".join([*namespace, "y"]), key="k")
    assert deeper.status_code == 422 and deeper.json()["error"]["field"] == "namespace"


def test_the_console_store_browser_masks_for_reviewers(personas, seeded):
    ns = f"applicants.{seeded['applicant']}"
    page = console_client(personas["reviewer"]).get("/store/", {"ns": ns})
    assert page.status_code == 200
    assert b"L-1" in page.content and str(seeded["canary"]).encode() not in page.content
    assert MASK.encode() in page.content
    full = console_client(personas["auditor"]).get("/store/", {"ns": ns})
    assert str(seeded["canary"]).encode() in full.content
    refused = console_client(personas["loan_reviewer"]).get("/store/", {"ns": seeded["misc"]})
    assert refused.status_code == 403


@pytest.mark.parametrize(
    "body,field",
    [
        ({"namespace_prefix": ["ok"], "filter": {"n": {"$regex": ".*"}}}, "filter"),
        ({"namespace_prefix": ["ok"], "filter": "income"}, "filter"),
        ({"namespace_prefix": ["ok"], "limit": 0}, "limit"),
        ({"namespace_prefix": ["a.b"]}, "namespace_prefix[0]"),
    ],
)
def test_bad_search_input_is_a_422_naming_the_field(personas, body, field):
    response = _call(personas["admin"], "POST", "/lg/store/items/search", body)
    assert response.status_code == 422, response.content
    assert response.json()["error"]["field"].startswith(field)


def test_a_ttl_past_what_a_date_holds_is_a_422(personas):
    body = {"namespace": ["ok"], "key": "k", "value": {}, "ttl": 1e300}
    response = _call(personas["admin"], "PUT", "/lg/store/items", body)
    assert response.status_code == 422 and response.json()["error"]["field"] == "ttl"


@pytest.mark.parametrize("offset", ["99999999999999999999999", "100001"])
def test_a_page_beyond_what_the_store_can_be_asked_for_is_refused_naming_it(personas, seeded, offset):
    # The console's store browser passed any offset on to the database's LIMIT (limit + offset), where
    # one past a bigint was a 500 (found by tests/api/malformed_walk.py); the API's schema bounded it.
    ns = f"applicants.{seeded['applicant']}"
    page = console_client(personas["auditor"]).get("/store/", {"ns": ns, "offset": offset})
    assert page.status_code == 422 and b"offset" in page.content, page.content[:300]
    body = {"namespace_prefix": ["applicants"], "offset": int(offset)}
    search = _call(personas["auditor"], "POST", "/lg/store/items/search", body)
    assert search.status_code == 422 and search.json()["error"]["field"] == "offset", search.content
