"""The thread page's time travel: the branch tree, subgraph states, and the fork/replay forms (operators, CSRF).

In-process: runs are executed here by the worker's executor (dispatch recorded, not sent).
"""

from __future__ import annotations

import json
import re
from html import unescape
from typing import Any

import pytest
from django.db import transaction

from approvals.models import ApprovalTask, TaskStatus
from runtime import runs
from runtime.executor import run_execute
from runtime.models import Branch, Run, RunKind, RunStatus, Thread
from runtime.registry import graph_get
from tests.console.conftest import console_client
from tests.console.test_live import ORIGIN, Socket, _cookie, _received_until, loop  # noqa: F401  (fixture)
from tests.factories import thread_make

pytestmark = pytest.mark.usefixtures("live_db")


@pytest.fixture
def secret_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    """``secret`` is a sensitive path of the time-travel graphs, for this process's reads.

    Set here rather than in langgraph.json: redaction happens where state is read (this
    process), and the redaction canary plants every graph that declares sensitive paths,
    which these graphs' dedicated attacker tests make redundant.
    """
    for graph in ("travel_pay", "travel_nested"):
        monkeypatch.setattr(graph_get(graph), "sensitive_paths", ["secret"])


def _paused(graph: str, graph_input: dict[str, Any]) -> tuple[Thread, ApprovalTask]:
    thread = thread_make(graph=graph)
    with transaction.atomic():
        run = runs.run_enqueue(thread=thread, kind=RunKind.START, input=graph_input)
    run_execute(run_id=str(run.id))
    run.refresh_from_db()
    assert run.status == RunStatus.INTERRUPTED, run.error
    thread.refresh_from_db()
    [task] = ApprovalTask.objects.filter(thread=thread, status=TaskStatus.PENDING)
    return thread, task


def test_an_operator_forks_from_the_page_and_the_tree_shows_the_branch(dispatched, personas):
    thread, task = _paused("travel_pay", {"amount": 40})
    operator = console_client(personas["operator"], enforce_csrf=True)
    page = operator.get(f"/threads/{thread.pk}/", {"checkpoint": task.checkpoint_id})
    assert page.status_code == 200
    html = page.content.decode()
    assert f'action="/threads/{thread.pk}/fork"' in html and "Replay from here" in html
    token = page.cookies["csrftoken"].value if "csrftoken" in page.cookies else operator.cookies["csrftoken"].value
    response = operator.post(
        f"/threads/{thread.pk}/fork",
        {
            "checkpoint_id": task.checkpoint_id,
            "values": '{"amount": 41}',
            "reason": "fix the amount",
            "csrfmiddlewaretoken": token,
        },
    )
    assert response.status_code == 302, response.content[:300]
    branch = Branch.objects.get(thread=thread)
    assert branch.update_keys == ["amount"] and branch.reason == "fix the amount"
    tree = operator.get(f"/threads/{thread.pk}/").content.decode()
    assert f'data-branch="{branch.id}"' in tree and "fix the amount" in tree


def test_a_fork_form_without_a_csrf_token_is_refused(dispatched, personas):
    thread, task = _paused("travel_pay", {"amount": 40})
    operator = console_client(personas["operator"], enforce_csrf=True)
    response = operator.post(f"/threads/{thread.pk}/fork", {"checkpoint_id": task.checkpoint_id, "reason": "r"})
    assert response.status_code == 403
    assert not Branch.objects.filter(thread=thread).exists()


@pytest.mark.parametrize(
    ("form", "status", "says"),
    [
        ({"values": "{not json", "reason": "r"}, 422, "State changes (JSON): not valid JSON"),
        ({"values": "[1]", "reason": "r"}, 422, "State changes (JSON): must be a JSON object of state keys"),
        ({"reason": ""}, 422, "reason"),
    ],
)
def test_bad_fork_forms_are_refused_naming_the_field(dispatched, personas, form, status, says):
    thread, task = _paused("travel_pay", {"amount": 40})
    response = console_client(personas["operator"]).post(
        f"/threads/{thread.pk}/fork", {"checkpoint_id": task.checkpoint_id, **form}
    )
    assert response.status_code == status
    assert says in response.content.decode()
    assert not Branch.objects.filter(thread=thread).exists()


def test_a_reviewer_sees_the_tree_and_subgraph_states_but_no_forms(dispatched, personas, secret_masked):
    thread, _ = _paused("travel_nested", {"secret": "hidden-value", "amount": 2})
    html = console_client(personas["reviewer"]).get(f"/threads/{thread.pk}/").content.decode()
    assert "Subgraph states at this checkpoint" in html and "child:" in html
    assert "Fork from here" not in html and "Replay from here" not in html
    assert "hidden-value" not in html  # the subgraph's sensitive state is masked
    shown = console_client(personas["approver"]).get(f"/threads/{thread.pk}/").content.decode()
    assert "hidden-value" in shown


@pytest.mark.parametrize(
    ("graph", "placeholder"),
    [
        ("travel_pay", {"amount": 1}),
        ("kyc_onboarding", {"tier": "basic"}),  # no amount field: the hint names one it has
        ("no_such_graph", {"field": "new value"}),
    ],
)
def test_the_fork_hint_names_a_field_of_the_graphs_state(graph, placeholder):
    from console.page_context import fork_placeholder

    assert json.loads(fork_placeholder(graph)) == placeholder


def test_the_fork_form_shows_the_graphs_hint(dispatched, personas):
    thread, _ = _paused("travel_pay", {"amount": 40})
    html = console_client(personas["operator"]).get(f"/threads/{thread.pk}/").content.decode()
    assert 'placeholder="{&quot;amount&quot;: 1}"' in html and "15000" not in html


def test_replay_and_fork_are_disabled_while_a_run_is_in_progress(dispatched, personas):
    thread, _ = _paused("travel_pay", {"amount": 40})
    operator = console_client(personas["operator"])
    idle = operator.get(f"/threads/{thread.pk}/").content.decode()
    assert 'id="time-travel-busy"' not in idle and "disabled" not in idle.split('id="time-travel"', 1)[1]
    run = Run.objects.create(thread=thread, kind=RunKind.START, status=RunStatus.RUNNING)
    try:
        busy = operator.get(f"/threads/{thread.pk}/").content.decode().split('id="time-travel"', 1)[1]
    finally:
        # Never claimed (no lease): no worker or sweeper would ever end it, and the live tests' settle waited on it.
        Run.objects.filter(pk=run.pk).update(status=RunStatus.CANCELLED)
    assert "A run is in progress" in busy
    assert busy.count('disabled aria-describedby="time-travel-busy"') == 2  # Replay and Fork


@pytest.mark.parametrize("htmx", [True, False])
@pytest.mark.parametrize(
    ("values", "status", "says"),
    [
        ("{not json", 422, "State changes (JSON): not valid JSON — Expecting property name"),
        ('{"amount": "lots"}', 422, "values.amount"),  # the state schema's refusal names the key
    ],
)
def test_a_refused_fork_shows_the_form_again_with_the_message_and_what_was_typed(
    dispatched, personas, htmx, values, status, says
):
    thread, task = _paused("travel_pay", {"amount": 40})
    headers = {"HX-Request": "true", "HX-Target": "time-travel"} if htmx else {}
    form = {"checkpoint_id": task.checkpoint_id, "values": values, "as_node": "", "reason": "fix it", "run": "on"}
    response = console_client(personas["operator"]).post(f"/threads/{thread.pk}/fork", form, headers=headers)
    assert response.status_code == status
    html = response.content.decode()
    if htmx:
        assert html.lstrip().startswith('<section id="time-travel"') and "<html" not in html
    else:
        assert "<html" in html and 'id="time-travel"' in html  # the whole thread page, not a bare message
    error = html.split('id="fork-values-error">', 1)[1].split("</p>", 1)[0]
    assert says in error
    typed = html.split('id="fork-values"', 1)[1].split("</textarea>", 1)[0]
    assert typed.endswith(">" + values.replace('"', "&quot;"))
    assert 'value="fix it"' in html and 'name="run" checked' in html
    assert not Branch.objects.filter(thread=thread).exists()


def test_a_refused_replay_shows_its_message_beside_the_reason(dispatched, personas):
    thread, task = _paused("travel_pay", {"amount": 40})
    response = console_client(personas["operator"]).post(
        f"/threads/{thread.pk}/replay",
        {"checkpoint_id": task.checkpoint_id, "reason": " "},
        headers={"HX-Request": "true"},
    )
    assert response.status_code == 422
    html = response.content.decode()
    assert "reason" in html.split('id="replay-reason-error">', 1)[1].split("</p>", 1)[0]


def test_a_successful_htmx_fork_sends_the_browser_to_the_thread_page(dispatched, personas):
    thread, task = _paused("travel_pay", {"amount": 40})
    response = console_client(personas["operator"]).post(
        f"/threads/{thread.pk}/fork",
        {"checkpoint_id": task.checkpoint_id, "values": '{"amount": 41}', "reason": "r"},
        headers={"HX-Request": "true"},
    )
    assert response.status_code == 200 and response["HX-Redirect"] == f"/threads/{thread.pk}/"


def test_the_branch_tree_indents_with_classes_not_inline_styles(dispatched, personas):
    thread, task = _paused("travel_pay", {"amount": 40})
    operator = console_client(personas["operator"])
    for reason in ("one", "two"):
        operator.post(
            f"/threads/{thread.pk}/fork",
            {"checkpoint_id": task.checkpoint_id, "values": '{"amount": 41}', "reason": reason},
        )
    html = operator.get(f"/threads/{thread.pk}/", {"checkpoint": task.checkpoint_id}).content.decode()
    tree = html.split('id="time-travel"', 1)[1]
    assert 'class="branch depth-1"' in tree and "style=" not in tree
    assert tree.count('maxlength="4000"') == 2 and 'maxlength="2000"' not in tree


def _paid(amount: int) -> tuple[Thread, ApprovalTask]:
    """A thread approved at its gate that then paid: (thread, the gate's task, whose checkpoint precedes ``pay``)."""
    thread, task = _paused("travel_pay", {"amount": amount})
    with transaction.atomic():
        run = runs.run_enqueue(
            thread=thread,
            kind=RunKind.RESUME,
            command={"resume": {task.interrupt_id: {"decision": "approve"}}, "checkpoint_id": task.checkpoint_id},
        )
    run_execute(run_id=str(run.id))
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    thread.refresh_from_db()
    return thread, task


def _attr(html: str, form_id: str, name: str) -> str:
    tag = html.split(f'id="{form_id}"', 1)[1].split(">", 1)[0]
    return unescape(tag.split(f'{name}="', 1)[1].split('"', 1)[0])


def test_replay_asks_first_naming_the_actions_it_performs_again(dispatched, personas):
    """Replaying from before the payment paid a second time, with nothing asked."""
    thread, task = _paid(77)
    html = console_client(personas["operator"]).get(f"/threads/{thread.pk}/", {"checkpoint": task.checkpoint_id})
    question = _attr(html.content.decode(), "replay-form", "hx-confirm")
    assert question.startswith("Replay from this checkpoint?")
    assert "performed again, as new actions" in question and "• pay done" in question and '"paid": 77' in question
    fork_question = _attr(html.content.decode(), "fork-form", "data-confirm-run")
    assert "• pay done" in fork_question


def test_replay_from_the_end_asks_plainly(dispatched, personas):
    thread, _ = _paid(77)
    html = console_client(personas["operator"]).get(f"/threads/{thread.pk}/").content.decode()
    assert _attr(html, "replay-form", "hx-confirm") == (
        "Replay from this checkpoint? The steps after it run again on a new branch."
    )


def test_the_replay_question_masks_a_sensitive_result(dispatched, personas, monkeypatch):
    thread, task = _paid(77)
    monkeypatch.setattr(graph_get("travel_pay"), "sensitive_paths", ["paid"])
    html = console_client(personas["operator"]).get(f"/threads/{thread.pk}/", {"checkpoint": task.checkpoint_id})
    question = _attr(html.content.decode(), "replay-form", "hx-confirm")
    # The result carries its idempotency key, a uuid in which "77" may well appear: the value is checked.
    assert "• pay done" in question and '"paid": 77' not in question and "redacted" in question


def test_a_replay_whose_question_missed_an_action_is_refused_and_asked_again(dispatched, personas):
    """The page asked before the payment was recorded: its "yes" does not cover paying again."""
    thread, task = _paid(77)
    sent = len(dispatched)
    response = console_client(personas["operator"]).post(
        f"/threads/{thread.pk}/replay",
        {"checkpoint_id": task.checkpoint_id, "reason": "again", "redo": ""},
        headers={"HX-Request": "true"},
    )
    assert response.status_code == 409
    html = response.content.decode()
    assert "read the question again" in html and "• pay done" in _attr(html, "replay-form", "hx-confirm")
    assert not Branch.objects.filter(thread=thread).exists() and len(dispatched) == sent
    seen = html.split('name="redo" value="', 1)[1].split('"', 1)[0]
    again = console_client(personas["operator"]).post(
        f"/threads/{thread.pk}/replay",
        {"checkpoint_id": task.checkpoint_id, "reason": "again", "redo": seen},
        headers={"HX-Request": "true"},
    )
    assert again.status_code == 200 and Branch.objects.filter(thread=thread).count() == 1


def _replayed(personas: dict[str, Any]) -> tuple[Thread, ApprovalTask, Branch]:
    """A thread that paid on its first line, replayed by the operator from its gate's checkpoint (the page's
    form, as a browser posts it) and run: paused at the gate again on the branch."""
    thread, task = _paid(77)
    operator = console_client(personas["operator"])
    response = operator.post(f"/threads/{thread.pk}/replay", {"checkpoint_id": task.checkpoint_id, "reason": "again"})
    assert response.status_code == 302, response.content.decode()[-2000:]
    branch = Branch.objects.get(thread=thread)
    run_execute(run_id=str(branch.run_id))
    thread.refresh_from_db()
    assert thread.status == "interrupted" and thread.checkpoint_id != task.checkpoint_id
    return thread, task, branch


def _tree(html: str) -> str:
    return html.split('id="branch-tree"', 1)[1].split("</ul>", 1)[0]


def _text(html: str) -> str:
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def test_the_branch_tree_says_what_each_line_is_and_marks_the_current_one(dispatched, personas):
    """It read "↳ Replay … ebd55493… from 1f1f0d40-003… · run interrupted", the current line unmarked."""
    thread, task, branch = _replayed(personas)
    html = console_client(personas["operator"]).get(f"/threads/{thread.pk}/").content.decode()
    tree = _tree(html)
    (first_attrs, first), (row_attrs, row) = re.findall(r"<li([^>]*)>(.*?)</li>", tree, re.S)
    assert "aria-current" not in first_attrs and "current" not in _text(first)
    when = f"{branch.created_at:%Y-%m-%d %H:%M} UTC"
    who = personas["operator"].username
    assert _text(row).startswith(
        f"↳ Replay from …{task.checkpoint_id[-8:]} by {who}, {when} · waiting for a decision current"
    ), _text(row)
    assert 'aria-current="true"' in row_attrs
    assert f'href="?checkpoint={task.checkpoint_id}"' in row and f'title="Checkpoint {task.checkpoint_id}"' in row
    assert "run interrupted" not in tree and "Replay …" not in _text(tree)


def test_a_thread_without_branches_marks_its_first_line_current(dispatched, personas):
    thread, _ = _paused("travel_pay", {"amount": 40})
    tree = _tree(console_client(personas["operator"]).get(f"/threads/{thread.pk}/").content.decode())
    [(attrs, first)] = re.findall(r"<li([^>]*)>(.*?)</li>", tree, re.S)
    assert 'aria-current="true"' in attrs
    assert _text(first) == "First line the thread as it ran · waiting for a decision current"


def _actions(html: str) -> list[str]:
    listed = html.split("<h3>Actions performed</h3>", 1)[1].split("</ul>", 1)[0]
    return [_text(item) for item in re.findall(r"<li[^>]*>(.*?)</li>", listed, re.S)]


def test_a_replayed_thread_labels_the_original_line_s_payment(dispatched, personas):
    """The replay waited for a decision while its status card listed "pay done … 77", with nothing saying the
    payment had been made on the line it left."""
    thread, _, _ = _replayed(personas)
    [paid] = _actions(console_client(personas["operator"]).get(f"/threads/{thread.pk}/").content.decode())
    assert paid.startswith("pay done") and paid.endswith("on the original line"), paid


def test_the_replays_task_page_labels_the_original_line_s_payment_too(dispatched, personas):
    """The thread page said where the payment was made; the task the replay waits at listed it unlabelled."""
    thread, _, _ = _replayed(personas)
    waiting = ApprovalTask.objects.get(thread=thread, status="pending")
    html = console_client(personas["operator"]).get(f"/tasks/{waiting.pk}/").content.decode()
    [paid] = _actions(html)
    assert paid.startswith("pay done") and "on the original line" in paid, paid


def test_a_payment_before_the_branch_point_is_said_to_be_before_the_branch(dispatched, personas):
    thread, _ = _paid(77)
    head = thread.checkpoint_id  # after the payment
    operator = console_client(personas["operator"])
    response = operator.post(
        f"/threads/{thread.pk}/fork", {"checkpoint_id": head, "values": '{"decision": "noted"}', "reason": "note"}
    )
    assert response.status_code == 302
    [paid] = _actions(operator.get(f"/threads/{thread.pk}/").content.decode())
    assert paid.startswith("pay done") and paid.endswith("before this branch"), paid


def test_an_unbranched_thread_s_actions_carry_no_line(dispatched, personas):
    thread, _ = _paid(77)
    [paid] = _actions(console_client(personas["operator"]).get(f"/threads/{thread.pk}/").content.decode())
    assert "line" not in paid and "branch" not in paid, paid


def _hidden(html: str, form_id: str, name: str) -> str:
    form = html.split(f'id="{form_id}"', 1)[1].split("</form>", 1)[0]
    return unescape(form.split(f'name="{name}" value="', 1)[1].split('"', 1)[0])


def test_after_a_replay_the_live_page_s_travel_forms_target_the_state_it_shows(dispatched, personas, loop):  # noqa: F811
    """Replayed from the gate's checkpoint: the page landed on, once the run had paused on the branch, showed
    its head as the current state, but both forms (and "A new branch from …") still named the old line's
    checkpoint, so "Replay/Fork from here" would not have started from the state shown."""
    thread, task = _paid(77)
    operator = console_client(personas["operator"])
    old_head = thread.checkpoint_id
    response = operator.post(f"/threads/{thread.pk}/replay", {"checkpoint_id": task.checkpoint_id, "reason": "again"})
    page = operator.get(response["Location"]).content.decode()  # where the replay sends the browser
    assert _hidden(page, "replay-form", "checkpoint_id") == old_head  # the state it shows until the run goes
    path = unescape(page.split('ws-connect="', 1)[1].split('"', 1)[0])
    socket = Socket(loop, path, [ORIGIN, _cookie(personas["operator"])])
    assert socket.connect()[0]
    assert 'id="time-travel-forms"' not in socket.receive()  # nothing moved yet: what was typed stays

    run_execute(run_id=str(Branch.objects.get(thread=thread).run_id))
    thread.refresh_from_db()
    head = thread.checkpoint_id
    assert head != old_head
    pushed = _received_until(socket, lambda html: 'id="time-travel-forms"' in html, "the travel forms")
    assert f">{head}</code>" in pushed.split('id="checkpoint-view"', 1)[1].split("</section>", 1)[0]
    forms = pushed.split('id="time-travel-forms"', 1)[1]
    assert _hidden(forms, "replay-form", "checkpoint_id") == head
    assert _hidden(forms, "fork-form", "checkpoint_id") == head
    assert f"A new branch from <code>{head}</code>" in forms
    assert old_head not in forms
    # What a person typed survives the push; the forms carry no token of their own (the page's header does).
    assert 'id="replay-reason" hx-preserve' in forms and 'id="fork-values" hx-preserve' in forms
    assert "csrfmiddlewaretoken" not in forms
    socket.close()
