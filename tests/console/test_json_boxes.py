"""Every console text box that takes JSON typed by a person: a refusal names the box as its label reads, is
tied to it (aria-invalid, aria-describedby), keeps what was typed, and is a 4xx whatever was typed.

The boxes: the start page's "Input (JSON object)" and "Metadata (JSON object)", the decision form's
"State patch (JSON object)" and an external task's "Your answer as JSON", and the fork form's
"State changes (JSON)". (A schema field shown as JSON says its own label: tests/console/test_schema_form.py.)
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from html import escape, unescape
from typing import Any

import pytest

from approvals.models import Decision
from runtime.models import Branch, Thread
from tests.console.conftest import console_client, console_decide
from tests.console.test_external_task_page import (
    engine,  # noqa: F401  (fixture)
    external_task,  # noqa: F401  (fixture)
)
from tests.console.test_time_travel_views import _paused
from tests.factories import task_make

pytestmark = pytest.mark.usefixtures("live_db")


@dataclass(frozen=True)
class Box:
    label: str
    textarea: str  # the textarea's id
    error: str  # its error's id


START_INPUT = Box("Input (JSON object)", "s-input-json", "s-input-json-error")
START_METADATA = Box("Metadata (JSON object)", "s-meta-json", "s-meta-json-error")
EDITS = Box("State patch (JSON object)", "f-edits-json", "f-edits-json-err")
ANSWER = Box("Your answer as JSON", "f-resume", "f-resume-err")
FORK = Box("State changes (JSON)", "fork-values", "fork-values-error")

DEEP = "[" * 10_000 + "]" * 10_000
# (typed, what the refusal says after the label), for a box that takes an object
REFUSED = [
    ("[", "not valid JSON — Expecting value at line 1, column 2"),
    ('{"a": 1,\n "b" 2}', "not valid JSON — Expecting ':' delimiter at line 2, column 6"),
    ("{'a': 1}", "not valid JSON — Expecting property name enclosed in double quotes at line 1, column 2"),
    ("null", "must be a JSON object"),
    ("[1, 2]", "must be a JSON object"),
    ('"text"', "must be a JSON object"),
    (DEEP, "nested deeper than 64 levels"),
    ('{"a": "x\\u0000y"}', "a: the text contains a NUL byte"),
    ('{"a": NaN}', "a: numbers must be finite"),
]
REFUSED_IDS = ["open-bracket", "missing-colon", "single-quotes", "null", "array", "string", "deep", "nul", "nan"]


def _post(box: Box, typed: str, personas: dict[str, Any], request: pytest.FixtureRequest) -> Any:
    """Post ``typed`` in ``box`` with an otherwise valid form; asserts nothing was started or decided."""
    if box in (START_INPUT, START_METADATA):
        before = Thread.objects.count()
        name = "input_json" if box is START_INPUT else "metadata_json"
        form = {"graph": "loan_approval", "input.applicant": "Ada", "input.amount": "100", name: typed}
        response = console_client(personas["operator"]).post("/threads/new", form)
        assert Thread.objects.count() == before
        return response
    if box is EDITS:
        task = task_make(metadata={"case": f"C-{uuid.uuid4().hex[:6]}"})
        response = console_decide(
            console_client(personas["reviewer"]), task, decision="approve", reason="r", edits_json=typed
        )
        assert not Decision.objects.filter(task=task).exists()
        return response
    if box is ANSWER:
        task = request.getfixturevalue("external_task")
        response = console_decide(console_client(personas["reviewer"]), task, decision="edit", reason="r", resume=typed)
        assert not Decision.objects.filter(task_id=task["id"]).exists()
        return response
    request.getfixturevalue("dispatched")
    thread, task = _paused("travel_pay", {"amount": 40})
    form = {"checkpoint_id": task.checkpoint_id, "values": typed, "reason": "fix it"}
    response = console_client(personas["operator"]).post(f"/threads/{thread.pk}/fork", form)
    assert not Branch.objects.filter(thread=thread).exists()
    return response


def _assert_refused_beside_the_box(response: Any, box: Box, typed: str, says: str) -> None:
    assert response.status_code == 422, response.content.decode()[:2000]
    html = response.content.decode()
    error = unescape(html.split(f'id="{box.error}"', 1)[1].split(">", 1)[1].split("</p>", 1)[0])
    assert error.startswith(f"{box.label}: {says}"), error
    textarea = html.split(f'<textarea id="{box.textarea}"', 1)[1].split("</textarea>", 1)[0]
    attributes, kept = textarea.split(">", 1)
    assert 'aria-invalid="true"' in attributes and f'aria-describedby="{box.error}"' in attributes
    assert kept in (escape(typed, quote=True), escape(typed, quote=True).replace("&#x27;", "&#39;"))
    label = re.search(rf'<label for="{box.textarea}">(.*?)</label>', html, re.S)
    assert label and unescape(label.group(1)).startswith(box.label)  # the error names the box as it reads


@pytest.mark.parametrize("box", [START_INPUT, START_METADATA, EDITS, FORK], ids=lambda b: b.textarea)
@pytest.mark.parametrize(("typed", "says"), REFUSED, ids=REFUSED_IDS)
def test_a_json_object_box_refuses_naming_itself_beside_itself(personas, request, box, typed, says):
    _assert_refused_beside_the_box(_post(box, typed, personas, request), box, typed, says)


@pytest.mark.parametrize(
    ("typed", "says"),
    [
        ("[", "not valid JSON — Expecting value at line 1, column 2"),
        ("null", "must be a JSON object matching the schema above, not null"),
        ("[1, 2]", "must be a JSON object matching the schema above, not an array"),
        (DEEP, "nested deeper than 64 levels"),
        ('{"limit": "x\\u0000"}', "limit: the text contains a NUL byte"),
    ],
    ids=["open-bracket", "null", "array", "deep", "nul"],
)
def test_an_external_tasks_answer_box_refuses_naming_itself_beside_itself(personas, request, typed, says):
    _assert_refused_beside_the_box(_post(ANSWER, typed, personas, request), ANSWER, typed, says)


@pytest.mark.parametrize("box", [START_INPUT, START_METADATA, EDITS, ANSWER, FORK], ids=lambda b: b.textarea)
def test_two_megabytes_in_a_json_box_is_refused_as_too_large_not_a_crash(personas, request, box):
    response = _post(box, '{"a": "' + "x" * 2_000_000 + '"}', personas, request)
    assert response.status_code == 413


@pytest.mark.parametrize("box", [START_INPUT, START_METADATA, EDITS, ANSWER, FORK], ids=lambda b: b.textarea)
def test_a_raw_nul_byte_in_a_json_box_is_named_by_its_label(personas, request, box):
    """The decision and fork forms answered a raw NUL with the API's JSON 422 naming the form's internal field
    (``edits_json``) in place of the page: now beside the box, as any other refusal of what was typed."""
    response = _post(box, '{"a": "x\x00"}', personas, request)
    assert response.status_code == 422
    assert response["Content-Type"].startswith("text/html"), response.content[:300]
    assert f"{box.label}: the text contains a NUL byte" in unescape(response.content.decode())


@pytest.mark.parametrize("form", ["decision", "fork"])
def test_a_raw_nul_byte_in_a_reason_is_refused_beside_it_and_changes_nothing(personas, request, form):
    if form == "decision":
        task = task_make(metadata={"case": f"C-{uuid.uuid4().hex[:6]}"})
        response = console_decide(console_client(personas["reviewer"]), task, decision="reject", reason="no\x00pe")
        assert not Decision.objects.filter(task=task).exists()
        error = 'id="f-reason-err"'
    else:
        request.getfixturevalue("dispatched")
        thread, task = _paused("travel_pay", {"amount": 40})
        fields = {"checkpoint_id": task.checkpoint_id, "values": '{"amount": 41}', "reason": "fix\x00it"}
        response = console_client(personas["operator"]).post(f"/threads/{thread.pk}/fork", fields)
        assert not Branch.objects.filter(thread=thread).exists()
        error = "the text contains a NUL byte"
    assert response.status_code == 422 and response["Content-Type"].startswith("text/html")
    html = unescape(response.content.decode())
    assert error in html and "the text contains a NUL byte" in html


def test_a_nul_byte_in_a_fork_form_from_someone_who_may_not_fork_is_their_refusal(personas, request):
    request.getfixturevalue("dispatched")
    thread, task = _paused("travel_pay", {"amount": 40})
    fields = {"checkpoint_id": task.checkpoint_id, "values": "{}", "reason": "x\x00"}
    response = console_client(personas["reviewer"]).post(f"/threads/{thread.pk}/fork", fields)
    assert response.status_code == 403, response.content[:300]
    assert not Branch.objects.filter(thread=thread).exists()


@pytest.mark.parametrize("typed", ["", "   \n "])
def test_a_blank_start_json_box_is_no_input_and_no_error(personas, typed):
    # Another field's refusal keeps anything from starting: the page says what is wrong, and nothing of the boxes.
    form = {"graph": "loan_approval", "input.amount": "many", "input_json": typed, "metadata_json": typed}
    response = console_client(personas["operator"]).post("/threads/new", form)
    html = response.content.decode()
    assert response.status_code == 422 and "Amount must be a whole number" in html
    assert START_INPUT.error not in html and START_METADATA.error not in html


@pytest.mark.parametrize("typed", ["", "   \n "])
def test_a_blank_state_patch_is_no_edit(personas, typed):
    task = task_make(metadata={"case": f"C-{uuid.uuid4().hex[:6]}"})
    response = console_decide(
        console_client(personas["reviewer"]), task, decision="reject", reason="r", edits_json=typed
    )
    assert response.status_code < 400, response.content.decode()[:2000]


@pytest.mark.parametrize("form", ["deactivate", "away"])
def test_a_raw_nul_byte_in_a_deactivation_reason_or_an_away_note_is_refused_on_the_page(personas, form):
    """An outside tester's NUL byte in the deactivation reason or the away note got the API's raw JSON in place of
    the page, even for htmx; now the page's own refusal, and nothing changes."""
    from django.contrib.auth.models import User

    from approvals.models import Away
    from tests.approvals.handoffs import person

    if form == "deactivate":
        target = person()
        client, url, fields = console_client(personas["admin"]), f"/users/{target.pk}/deactivate", {"reason": "x\x00"}
    else:
        colleague = person()
        client, url = console_client(personas["reviewer"]), "/settings/away"
        fields = {"delegate": colleague.username, "note": "back\x00soon"}
    for headers in ({}, {"HX-Request": "true"}):
        response = client.post(url, fields, headers=headers)
        assert response.status_code == 422, response.content[:300]
        assert response["Content-Type"].startswith("text/html"), response.content[:300]
        assert "the text contains a NUL byte" in unescape(response.content.decode())
    if form == "deactivate":
        assert User.objects.get(pk=target.pk).is_active
    else:
        assert not Away.objects.filter(user=personas["reviewer"].user).exists()
