"""The webhook correlation key is an indexed column of the task, copied from its gate when it opens."""

from __future__ import annotations

import importlib
import uuid

import pytest
from django.apps import apps as django_apps

from approvals.gate_policy import CORRELATION_KEY_MAX, gate_policy
from approvals.models import ApprovalTask
from tests.factories import loan_gate, task_make

pytestmark = pytest.mark.django_db

backfill = importlib.import_module("approvals.migrations.0020_task_correlation_key").backfill


@pytest.mark.parametrize(
    "key,stored",
    [
        ("KYC-1", "KYC-1"),
        (123, ""),  # a webhook body's key is matched as a string: a number in the payload never matched
        ("", ""),
        ("x" * CORRELATION_KEY_MAX, "x" * CORRELATION_KEY_MAX),
        ("x" * (CORRELATION_KEY_MAX + 1), ""),  # longer than the column: no callback names it
        (None, ""),
    ],
)
def test_the_column_holds_the_gates_string_key(key, stored):
    payload = {**loan_gate(), "correlation_key": key}
    assert gate_policy(payload).correlation_key_indexed == stored
    task = task_make(payload=payload)
    task.refresh_from_db()
    assert task.correlation_key == stored


def test_a_task_without_a_key_has_none():
    assert task_make(payload=loan_gate()).correlation_key == ""


def test_the_migration_copies_existing_keys_from_the_payload():
    key = f"K-{uuid.uuid4().hex[:8]}"
    task = task_make(payload={**loan_gate(), "correlation_key": key})
    ApprovalTask.objects.filter(pk=task.pk).update(correlation_key="")  # as a row from before the column
    backfill(django_apps, None)
    task.refresh_from_db()
    assert task.correlation_key == key


def test_a_callback_finds_its_task_through_the_column_only():
    """The lookup reads the column: a task whose column is empty is not found by its payload's key."""
    from tests.security.test_guards_webhooks import endpoint_make, send

    key = f"K-{uuid.uuid4().hex[:8]}"
    task = task_make(payload={**loan_gate(), "correlation_key": key})
    ApprovalTask.objects.filter(pk=task.pk).update(correlation_key="")
    outcome = send(endpoint_make(), {"correlation_key": key, "status": "verified"})
    assert outcome.http_status == 404 and outcome.body["error"]["code"] == "unknown_correlation"
    ApprovalTask.objects.filter(pk=task.pk).update(correlation_key=key)
    assert send(endpoint_make(), {"correlation_key": key, "status": "verified"}).http_status == 202
