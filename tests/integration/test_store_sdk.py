"""The official ``langgraph_sdk`` ``client.store`` against a live Gatehouse, and the worked example:
the loan graph (run by the session's Celery worker) remembers each applicant's outcomes across threads."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from approvals.models import AuditAction, AuditEvent
from approvals.redaction import MASK
from runtime.models import StoreOperation
from tests.conftest import loan_input
from tests.console.conftest import console_client
from tests.integration.test_platform_sdk import _sync_client, server  # noqa: F401 - the live daphne fixture

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]


def test_the_loan_graph_shows_an_applicants_previous_outcome_from_another_thread(server, personas):  # noqa: F811
    op = _sync_client(server, personas["operator"].token)
    applicant = f"A-{uuid.uuid4().hex[:8]}"

    first = op.threads.create()
    declined = loan_input(amount=40000, income=40000, applicant_id=applicant)  # risk > 0.8: declined
    done = op.runs.wait(first["thread_id"], "loan_approval", input=declined)
    assert done["status"] == "declined"

    second = op.threads.create()
    paused = op.runs.wait(second["thread_id"], "loan_approval", input=loan_input(amount=15000, applicant_id=applicant))
    [interrupt] = paused["__interrupt__"]
    assert interrupt["value"]["details"]["previous_outcome"] == {
        "loan_id": declined["loan_id"],
        "outcome": "declined",
        "amount": 40000,
    }

    # What the runs did with the store is recorded per thread, and the write audited.
    reads = StoreOperation.objects.filter(thread_id=second["thread_id"]).values_list("op", "namespace", "hits")
    assert ("search", f"applicants.{applicant}", 1) in list(reads)
    [write] = AuditEvent.objects.filter(action=AuditAction.STORE_ITEM_PUT, thread_id=first["thread_id"])
    assert write.actor_label.startswith("worker:") and write.details["value"]["income"] == MASK

    # The thread page lists them for a reviewer of the graph.
    page = console_client(personas["loan_reviewer"]).get(f"/threads/{second['thread_id']}/")
    assert page.status_code == 200 and f"applicants.{applicant}".encode() in page.content

    # client.store reads what the graph wrote, masked for a reviewer, in full for an auditor.
    reviewer = _sync_client(server, personas["reviewer"].token)
    [item] = reviewer.store.search_items(["applicants", applicant])["items"]
    assert item["key"] == declined["loan_id"] and item["value"]["income"] == MASK
    auditor = _sync_client(server, personas["auditor"].token)
    assert auditor.store.get_item(["applicants", applicant], key=declined["loan_id"])["value"]["income"] == 40000


def test_client_store_puts_gets_searches_lists_and_deletes_unchanged(server, personas):  # noqa: F811
    op = _sync_client(server, personas["operator"].token)
    label = f"sdk-{uuid.uuid4().hex[:8]}"
    op.store.put_item([label, "notes"], "n1", {"text": "first", "n": 1})
    op.store.put_item([label, "notes"], "n2", {"text": "second", "n": 2})
    op.store.put_item([label, "other"], "x", {"text": "elsewhere"})

    item = op.store.get_item([label, "notes"], key="n1")
    assert item["namespace"] == [label, "notes"] and item["key"] == "n1" and item["value"] == {"text": "first", "n": 1}
    assert {"created_at", "updated_at"} <= set(item)
    assert op.store.get_item([label, "notes"], key="missing") is None

    found = op.store.search_items([label], filter={"n": 2})["items"]
    assert [i["key"] for i in found] == ["n2"]
    assert len(op.store.search_items([label], limit=2)["items"]) == 2
    namespaces = op.store.list_namespaces(prefix=[label])["namespaces"]
    assert sorted(namespaces) == [[label, "notes"], [label, "other"]]
    assert op.store.list_namespaces(prefix=[label], max_depth=1)["namespaces"] == [[label]]

    op.store.delete_item([label, "notes"], key="n1")
    assert op.store.get_item([label, "notes"], key="n1") is None
    actions = AuditEvent.objects.filter(details__namespace=[label, "notes"]).values_list("action", flat=True)
    assert sorted(actions) == sorted([AuditAction.STORE_ITEM_PUT] * 2 + [AuditAction.STORE_ITEM_DELETED])

    # A reviewer reads but may not write; the SDK raises on the 403.
    reviewer = _sync_client(server, personas["reviewer"].token)
    assert reviewer.store.get_item([label, "notes"], key="n2")["value"]["n"] == 2
    with pytest.raises(httpx.HTTPStatusError) as refused:
        reviewer.store.put_item([label, "notes"], "n3", {"text": "no"})
    assert refused.value.response.status_code == 403
    assert op.store.get_item([label, "notes"], key="n3") is None


def test_the_async_client_store_works_too(server, personas):  # noqa: F811
    import asyncio

    from tests.integration.test_platform_sdk import _async_client

    label = f"sdk-async-{uuid.uuid4().hex[:8]}"

    async def flow() -> Any:
        client = _async_client(server, personas["admin"].token)
        await client.store.put_item([label], "k", {"v": 1})
        return await client.store.get_item([label], key="k")

    assert asyncio.run(flow())["value"] == {"v": 1}
