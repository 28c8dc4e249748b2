"""Rows read by fixed SQL become the same models the ORM loads (runtime.rows).

The claim, the thread read and the token lookup read their rows with written-out SQL; every
field of what ``model_from_row`` builds must equal the ORM's own instance — JSON parsed, dates,
UUIDs and booleans as the ORM converts them on this database (PostgreSQL here, SQLite in
the embedded suite's runs of the same code paths).
"""

from __future__ import annotations

import uuid

import django.core.exceptions
import django.db
import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from approvals.models import ApiToken
from approvals.tokens import _digest, _token_by_digest, token_issue
from runtime import rows, runs
from runtime.models import Run, RunKind, RunStatus, StoreOperation, Thread, ThreadStatus
from tests.factories import thread_make

pytestmark = pytest.mark.django_db


def _fields(instance):
    return {f.attname: getattr(instance, f.attname) for f in type(instance)._meta.concrete_fields}


def _read(model, pk):
    q = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {rows.columns(model)} FROM {q(model._meta.db_table)} WHERE {q(model._meta.pk.column)} = %s",
            [model._meta.pk.get_db_prep_value(pk, connection)],
        )
        return rows.model_from_row(model, cursor.fetchone())


def test_a_thread_read_by_fixed_sql_equals_the_orms():
    thread = thread_make(graph="loan_approval", metadata={"k": "v"})
    Thread.objects.filter(pk=thread.pk).update(values={"amount": 5, "nested": {"a": [1, None]}})
    loaded = _read(Thread, thread.pk)
    assert _fields(loaded) == _fields(Thread.objects.get(pk=thread.pk))
    assert loaded.values == {"amount": 5, "nested": {"a": [1, None]}}  # parsed, not text
    assert loaded._state.adding is False and loaded._state.db == "default"


def test_a_token_and_its_user_read_in_one_statement_equal_the_orms():
    user = User.objects.create_user("rows-token-user", email="r@example.com")
    secret = token_issue(user=user, name="rows", graphs=["loan_approval"], actions=["read"])
    token, _ = _token_by_digest(_digest(secret))
    assert token is not None
    orm = ApiToken.objects.select_related("user").get(digest=_digest(secret))
    assert _fields(token) == _fields(orm)
    assert _fields(token.user) == _fields(orm.user)
    assert token.graphs == ["loan_approval"] and token.actions == ["read"]
    assert _token_by_digest(_digest(secret + "x")) == (None, None)


def test_columns_and_width_describe_the_same_row():
    assert rows.width(Thread) == len(rows.columns(Thread).split(", "))
    assert rows.columns(Thread, "t").startswith("t.")


# --- fixed SQL is prepared on PostgreSQL (runtime.postgresql's prepared_cursor) ---------------------------------


def _prepared(marker: str) -> list[tuple[str, int]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT statement, generic_plans + custom_plans FROM pg_prepared_statements WHERE statement LIKE %s",
            [f"%{marker}%"],
        )
        return cursor.fetchall()


def test_a_fixed_statement_is_prepared_once_and_reused_with_new_values():
    marker = f"fixed_{uuid.uuid4().hex[:8]}"
    for value in (1, 2, 3):
        with rows.fixed_cursor() as cursor:
            cursor.execute(f"SELECT %s::int AS {marker}", [value])
            assert cursor.fetchone() == (value,)
    assert _prepared(marker) == [(f"SELECT $1::int AS {marker}", 3)]


def test_djangos_own_cursors_are_not_prepared():
    marker = f"orm_{uuid.uuid4().hex[:8]}"
    for value in (1, 2, 3, 4, 5, 6):
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT %s::int AS {marker}", [value])
    assert _prepared(marker) == []


def test_a_fixed_statement_is_seen_and_wrapped_as_djangos_own():
    """Query counts (``CaptureQueriesContext``) see it, and its errors are Django's, as any cursor's."""
    with CaptureQueriesContext(connection) as captured, rows.fixed_cursor() as cursor:
        cursor.execute("SELECT %s::int", [7])
    assert [q["sql"] for q in captured.captured_queries] == ["SELECT 7::int"]
    with pytest.raises(django.db.ProgrammingError), transaction.atomic(), rows.fixed_cursor() as cursor:
        cursor.execute("SELECT no_such_column FROM auth_user")


def test_preparing_can_be_turned_off_for_a_pooler_that_cannot_carry_it():
    from runtime.postgresql.base import DatabaseWrapper

    def threshold(**options):
        base = {k: v for k, v in connection.settings_dict["OPTIONS"].items() if k != "prepare_threshold"}
        settings = {**connection.settings_dict, "OPTIONS": {**base, **options}}
        return DatabaseWrapper(settings, alias="prepare-check").get_connection_params()["prepare_threshold"]

    assert threshold() == 0  # Django's default (None) would refuse even an explicit prepare
    assert threshold(prepare_threshold=None) is None


def test_the_active_webhook_subscriptions_read_by_fixed_sql_equal_the_orms():
    from approvals.models import WebhookSubscription
    from approvals.outbound.outbox import subscriptions_active

    graph = f"g-{uuid.uuid4().hex[:8]}"
    made = {
        name: WebhookSubscription.objects.create(
            url=f"https://example.org/{name}", graph=g, event_types=["task.opened"], secret="s", active=active
        )
        for name, g, active in (
            ("named", graph, True),
            ("any", "*", True),
            ("inactive", graph, False),
            ("other", f"{graph}-x", True),
        )
    }
    read = {s.pk: s for s in subscriptions_active(graph)}
    orm = {s.pk: s for s in WebhookSubscription.objects.filter(active=True, graph__in=[graph, "*"])}
    assert read.keys() == orm.keys() and {made["named"].pk, made["any"].pk} <= read.keys()
    assert not {made["inactive"].pk, made["other"].pk} & read.keys()
    for pk, subscription in read.items():
        assert _fields(subscription) == _fields(orm[pk])
    assert read[made["named"].pk].event_types == ["task.opened"]  # JSON parsed


def test_a_task_and_its_thread_read_for_a_user_equal_the_orms(django_user_model):
    from approvals.errors import NotFound
    from approvals.models import ApprovalTask, GraphAssignment
    from approvals.permissions import task_get_for
    from approvals.roles import roles_ensure
    from tests.factories import task_make

    task = task_make(metadata={"case": "rows"})
    reviewer = django_user_model.objects.create_user(f"rows-{uuid.uuid4().hex[:8]}")
    reviewer.groups.add(roles_ensure()["reviewer"])
    GraphAssignment.objects.create(user=reviewer, graph=task.graph)
    orm = ApprovalTask.objects.select_related("thread").get(pk=task.pk)
    with transaction.atomic():
        for lock in (False, True):
            read = task_get_for(reviewer, task.pk, lock=lock)
            assert _fields(read) == _fields(orm) and _fields(read.thread) == _fields(orm.thread)
    GraphAssignment.objects.filter(user=reviewer).update(graph="kyc_onboarding")
    with pytest.raises(NotFound):
        task_get_for(django_user_model.objects.get(pk=reviewer.pk), task.pk)  # another graph's task
    with pytest.raises(django.core.exceptions.ValidationError):
        task_get_for(reviewer, "not-a-uuid")


def test_a_row_inserted_by_fixed_sql_is_the_row_the_orm_writes():
    thread = thread_make(graph="loan_approval")
    run = Run.objects.create(thread=thread, kind=RunKind.START, input={})
    mine = rows.row_insert(StoreOperation(thread=thread, run=run, op="put", namespace="a.b", key="k", hits=1))
    orms = StoreOperation.objects.create(thread=thread, run=run, op="put", namespace="a.b", key="k", hits=1)
    assert mine.pk is not None and orms.pk == mine.pk + 1  # the table's own sequence drew the key
    assert mine._state.adding is False and mine._state.db == "default"
    written = {k: v for k, v in _fields(StoreOperation.objects.get(pk=mine.pk)).items() if k not in ("id", "at")}
    assert written == {k: v for k, v in _fields(orms).items() if k not in ("id", "at")}
    assert StoreOperation.objects.get(pk=mine.pk).at == mine.at  # the auto_now_add value, as save() fills it
    assert _prepared('INSERT INTO "runtime_storeoperation"')  # prepared, as every fixed statement


def test_a_fixed_statements_value_is_the_orms_and_a_non_column_is_refused():
    thread = thread_make(graph="loan_approval")
    assert rows.db_value(Thread, "pk", str(thread.pk)) == Thread._meta.pk.get_db_prep_value(thread.pk, connection)
    assert rows.db_value(Run, "thread", thread.pk) == rows.db_value(Thread, "pk", thread.pk)  # as its target's key
    with pytest.raises(TypeError, match="runs"):
        rows.db_value(Thread, "runs", None)  # a reverse relation: no column to send a value for


def test_a_row_inserted_along_with_another_write_is_one_statement_and_returns_its_key():
    thread = thread_make(graph="loan_approval")
    run = Run.objects.create(thread=thread, kind=RunKind.START, input={})
    touch = ("UPDATE runtime_thread SET error = %s WHERE id = %s", ["touched", rows.db_value(Thread, "pk", thread.pk)])
    with CaptureQueriesContext(connection) as sent:
        mine = rows.row_insert(StoreOperation(thread=thread, run=run, op="put", namespace="a", key="k"), along=touch)
    assert len(sent) == 1 and sent[0]["sql"].startswith("WITH along_write AS (UPDATE runtime_thread")
    assert mine.pk is not None and StoreOperation.objects.get(pk=mine.pk).key == "k"  # the drawn key, RETURNING
    assert Thread.objects.get(pk=thread.pk).error == "touched"


def test_a_queued_run_marks_its_thread_busy_in_its_insert_and_a_second_one_is_thread_busy(monkeypatch):
    """One statement (a data-modifying WITH) inserts the run and marks the thread; the one-active-run
    index still refuses a second run, recognised by its name through that statement: ``ThreadBusy``."""
    monkeypatch.setattr(runs, "run_dispatch", lambda *, run_id: None)
    thread = thread_make(graph="loan_approval")
    Thread.objects.filter(pk=thread.pk).update(status=ThreadStatus.FAILED, error="the last run failed")
    with transaction.atomic(), CaptureQueriesContext(connection) as sent:
        run = runs.run_enqueue(thread=thread, kind=RunKind.RETRY)
    [statement] = [q["sql"] for q in sent if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))]
    assert statement.startswith("WITH along_write AS (UPDATE runtime_thread SET status")
    assert 'INSERT INTO "runtime_run"' in statement
    stored = Thread.objects.get(pk=thread.pk)
    assert (stored.status, stored.error) == (ThreadStatus.BUSY, "") and thread.status == ThreadStatus.BUSY
    assert Run.objects.get(pk=run.pk).status == RunStatus.QUEUED

    Thread.objects.filter(pk=thread.pk).update(status=ThreadStatus.FAILED, error="kept")
    with pytest.raises(runs.ThreadBusy), transaction.atomic():
        runs.run_enqueue(thread=thread, kind=RunKind.RETRY)
    stored = Thread.objects.get(pk=thread.pk)
    assert (stored.status, stored.error) == (ThreadStatus.FAILED, "kept")
    assert list(Run.objects.filter(thread=thread).values_list("pk", flat=True)) == [run.pk]
