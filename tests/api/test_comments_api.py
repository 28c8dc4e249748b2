"""The comment API: shapes, and bad input refused with a 4xx naming the field, nothing written."""

from __future__ import annotations

import uuid

import pytest

from approvals.comments import BODY_MAX_CHARS, comment_post
from approvals.models import Comment
from tests.factories import task_make

pytestmark = pytest.mark.usefixtures("live_db")


def test_a_question_and_its_answer_over_the_api(personas):
    task = task_make()
    reviewer, reviewer2 = personas["reviewer"].client, personas["reviewer2"].client
    asked = reviewer.post(
        f"/api/tasks/{task.pk}/comments", {"body": f"@{personas['reviewer2'].username} income?", "kind": "question"}
    )
    assert asked.status_code == 201, asked.content
    question = asked.json()
    assert (question["kind"], question["waiting_for_answer"], question["mentions"]) == (
        "question",
        True,
        [personas["reviewer2"].username],
    )
    answered = reviewer2.post(
        f"/api/tasks/{task.pk}/comments", {"body": "Verified.", "kind": "answer", "reply_to": question["id"]}
    )
    assert answered.status_code == 201, answered.content
    assert answered.json()["reply_to"] == question["id"]
    listing = reviewer.get(f"/api/tasks/{task.pk}/comments").json()
    assert [(c["kind"], c["waiting_for_answer"]) for c in listing] == [("question", False), ("answer", False)]
    edited = reviewer.post(f"/api/comments/{question['id']}/versions", {"body": "income? (edited)"})
    assert edited.status_code == 201 and edited.json()["version"] == 2
    assert [v["body"] for v in edited.json()["history"]] == [
        f"@{personas['reviewer2'].username} income?",
        "income? (edited)",
    ]
    on_thread = reviewer.get(f"/api/threads/{task.thread_id}/comments").json()
    assert [c["id"] for c in on_thread] == [question["id"], answered.json()["id"]]


@pytest.mark.parametrize(
    "body,status,field",
    [
        ({}, 422, "body"),
        ({"body": 42}, 422, "body"),
        ({"body": ""}, 422, "body"),
        ({"body": "x" * (BODY_MAX_CHARS + 1)}, 422, "body"),
        ({"body": "hi", "kind": "shout"}, 422, "kind"),
        ({"body": "hi", "kind": "answer"}, 422, "reply_to"),
        ({"body": "hi", "reply_to": "not-a-uuid"}, 422, "reply_to"),
        ({"body": "hi", "reply_to": str(uuid.uuid4())}, 404, "reply_to"),
    ],
    ids=["missing", "not-text", "empty", "too-long", "kind", "answer-alone", "reply-not-uuid", "reply-unknown"],
)
def test_bad_input_is_refused_naming_the_field(personas, body, status, field):
    task = task_make()
    response = personas["reviewer"].client.post(f"/api/tasks/{task.pk}/comments", body)
    assert response.status_code == status, response.content
    assert response.json()["error"]["field"] == field
    assert not Comment.objects.filter(task=task).exists()


def test_malformed_json_is_a_400_naming_the_body(personas):
    task = task_make()
    response = personas["reviewer"].client.post(f"/api/tasks/{task.pk}/comments", raw="{not json")
    assert response.status_code == 400 and response.json()["error"]["field"] == "body"


def test_a_reply_to_a_comment_the_caller_may_not_see_is_not_found(personas):
    kyc = task_make(graph="kyc_onboarding", node="compliance_review")
    hidden = comment_post(actor=personas["admin"].user, task=kyc, body="kyc only")
    loan = task_make()
    response = personas["loan_reviewer"].client.post(
        f"/api/tasks/{loan.pk}/comments", {"body": "hi", "reply_to": str(hidden.pk)}
    )
    assert response.status_code == 404 and response.json()["error"]["field"] == "reply_to"


def test_editing_an_unknown_comment_is_a_404_naming_it(personas):
    response = personas["reviewer"].client.post(f"/api/comments/{uuid.uuid4()}/versions", {"body": "x"})
    assert response.status_code == 404 and response.json()["error"]["field"] == "comment_id"


def test_a_read_only_token_may_read_but_not_post(personas):
    from approvals.tokens import token_issue
    from tests.conftest import ApiClient

    task = task_make()
    client = ApiClient(token_issue(user=personas["reviewer"].user, actions=["read"]))
    assert client.get(f"/api/tasks/{task.pk}/comments").status_code == 200
    assert client.post(f"/api/tasks/{task.pk}/comments", {"body": "hi"}).status_code == 403
