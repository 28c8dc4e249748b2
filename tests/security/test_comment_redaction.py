"""A comment cannot quote a redacted value to someone who may not see it — on any surface.

The attacker's view: a reviewer allowed to see sensitive fields (an approver)
quotes a task's date of birth and document number verbatim — at the start,
in the middle, in another letter case, next to punctuation, twice, in a
question and its answer, in an edit and in an edited-away first version, on
the task and on the thread. Readers without "view sensitive" (a reviewer, an
operator, an auditor without it) then read every surface the conversation
reaches: the console pages, the htmx responses, the API (reads and the
responses of their own writes), the websockets (on connect and pushed live)
and the audit trail (API, console page, exports). The value must appear on
none of them, and the mask must (the conversation is shown, masked); a reader
with the permission sees the value (so the test is known to reach it).
"""

from __future__ import annotations

import io
import json
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.core.management import CommandError, call_command
from django.test import Client

from approvals import comments
from approvals.models import AuditEvent
from approvals.redaction import TEXT_MASK
from approvals.tokens import token_issue
from console import live
from tests.approvals.guards import user_make
from tests.conftest import ApiClient, Persona, scaled
from tests.console.test_live import ORIGIN, Socket, loop  # noqa: F401 - the module's event loop fixture
from tests.factories import task_make

pytestmark = pytest.mark.usefixtures("live_db")


@dataclass
class World:
    task: Any
    dob: str
    docno: str
    question: Any

    @property
    def thread_id(self) -> Any:
        return self.task.thread_id

    @property
    def secrets(self) -> tuple[str, str]:
        return (self.dob, self.docno)


@dataclass
class Reader:
    name: str
    user: User
    token: str

    @property
    def api(self) -> ApiClient:
        return ApiClient(self.token)

    @property
    def console(self) -> Client:
        client = Client()
        client.force_login(self.user)
        return client


def _audit_reader() -> Reader:
    """An auditor without "view sensitive": reads the trail and exports it, masked."""
    user = User.objects.create_user(f"comment-audit-reader-{uuid.uuid4().hex[:6]}")
    user.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_audit", "view_all_graphs", "view_approvaltask", "view_thread"])
    )
    return Reader("audit_reader", user, token_issue(user=user))


def _reader(persona: Persona) -> Reader:
    return Reader(persona.role or "", persona.user, persona.token)


@pytest.fixture(scope="module")
def world(personas: dict[str, Persona], django_db_blocker: Any) -> Iterator[World]:
    with django_db_blocker.unblock():
        tag = uuid.uuid4().hex[:10]
        dob, docno = f"dob{tag}", f"Doc{tag}x"  # unique, so any hit is this test's value
        task = task_make(
            graph="kyc_onboarding",
            node="compliance_review",
            payload={
                "title": "KYC",
                "applicant": {"name": "Ada", "date_of_birth": dob},
                "documents": [{"number": docno}],
            },
        )
        approver, admin = personas["approver"].user, personas["admin"].user
        comments.comment_post(actor=approver, task=task, body=f"{dob} is the date of birth on file")
        comments.comment_post(actor=approver, task=task, body=f"DOB={dob.upper()}; doc:{docno}!\nsecond line {dob}")
        question = comments.comment_post(
            actor=approver, task=task, body=f"Is {docno} valid? ({docno.lower()})", kind="question"
        )
        comments.comment_post(actor=admin, task=task, body=f"Yes: {docno} checks out", kind="answer", reply_to=question)
        drafted = comments.comment_post(actor=approver, task=task, body=f"first draft quoting {dob}")
        comments.comment_edit(actor=approver, comment=drafted, body="clean now")
        clean = comments.comment_post(actor=approver, task=task, body="nothing to see")
        comments.comment_edit(actor=approver, comment=clean, body=f"now quoting {docno} in an edit")
        comments.comment_post(actor=approver, thread=task.thread, body=f"on the thread: {dob}")
        yield World(task, dob, docno, question)


def _leaks(body: str, world: World) -> list[str]:
    low = body.lower()
    return [s for s in world.secrets if s.lower() in low]


def _masked(body: str) -> bool:
    return TEXT_MASK in body or json.dumps(TEXT_MASK)[1:-1] in body  # JSON may escape it


BLIND = ("reviewer", "operator", "audit_reader")


@pytest.fixture(scope="module")
def readers(personas: dict[str, Persona], django_db_blocker: Any) -> dict[str, Reader]:
    with django_db_blocker.unblock():
        out = {name: _reader(personas[name]) for name in ("reviewer", "operator", "approver", "auditor")}
        out["audit_reader"] = _audit_reader()
        return out


def _surfaces(reader: Reader, world: World) -> dict[str, tuple[int, str]]:
    """Every surface that shows the conversation or its audit rows, as (status, body)."""
    api, console = reader.api, reader.console
    thread, task = world.thread_id, world.task.pk
    out: dict[str, tuple[int, str]] = {}
    for name, response in {
        "api task comments": api.get(f"/api/tasks/{task}/comments"),
        "api thread comments": api.get(f"/api/threads/{thread}/comments"),
        "api audit": api.get("/api/audit", thread=str(thread), limit=1000),
        "api audit export jsonl": api.get("/api/audit/export", thread=str(thread), format="jsonl"),
        "api audit export csv": api.get("/api/audit/export", thread=str(thread), format="csv"),
        "console task": console.get(f"/tasks/{task}/"),
        "console thread": console.get(f"/threads/{thread}/"),
        "console audit": console.get("/audit/", {"thread": str(thread)}),
        "console audit comments": console.get("/audit/", {"thread": str(thread), "action": "comment."}),
    }.items():
        content = b"".join(response.streaming_content) if response.streaming else response.content
        out[name] = (response.status_code, content.decode())
    for fmt in ("jsonl", "csv"):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "export"
            try:
                call_command(
                    "audit_export",
                    user=reader.user.username,
                    output=str(path),
                    thread=str(thread),
                    format=fmt,
                    no_progress=True,
                    stderr=io.StringIO(),
                )
                out[f"export command {fmt}"] = (200, path.read_text(encoding="utf-8"))
            except CommandError:  # a role without the trail is refused: nothing to leak
                out[f"export command {fmt}"] = (403, "")
    return out


@pytest.mark.parametrize("name", BLIND)
def test_no_surface_gives_a_blind_reader_a_quoted_redacted_value(readers, world, name):
    surfaces = _surfaces(readers[name], world)
    leaks = {surface: _leaks(body, world) for surface, (_, body) in surfaces.items() if _leaks(body, world)}
    assert leaks == {}, f"{name} received a redacted value quoted in a comment"
    errors = {surface: status for surface, (status, _) in surfaces.items() if status >= 500}
    assert errors == {}
    # The conversation was shown, masked (not merely hidden): every reader sees the comments.
    for surface in ("api task comments", "api thread comments", "console task", "console thread"):
        status, body = surfaces[surface]
        assert status == 200 and _masked(body), surface
    if name == "audit_reader":  # reads the trail: its comment rows are there, masked
        for surface in ("api audit", "api audit export jsonl", "export command jsonl", "console audit comments"):
            status, body = surfaces[surface]
            assert status == 200 and _masked(body), surface


def test_the_api_masks_every_version_for_a_blind_reader(readers, world):
    listing = readers["reviewer"].api.get(f"/api/tasks/{world.task.pk}/comments").json()
    bodies = [v["body"] for c in listing for v in c["history"]] + [c["body"] for c in listing]
    assert len(listing) == 6 and all(not _leaks(b, world) for b in bodies)
    assert listing[0]["body"] == f"{TEXT_MASK} is the date of birth on file"
    assert listing[1]["body"] == f"DOB={TEXT_MASK}; doc:{TEXT_MASK}!\nsecond line {TEXT_MASK}"
    assert listing[2]["body"] == f"Is {TEXT_MASK} valid? ({TEXT_MASK})"
    assert [v["body"] for v in listing[4]["history"]] == [f"first draft quoting {TEXT_MASK}", "clean now"]


def test_a_reader_who_may_see_the_values_reads_them_and_the_reveal_is_audited(readers, world):
    before = AuditEvent.objects.filter(thread_id=world.thread_id, action="sensitive.revealed").count()
    body = readers["approver"].api.get(f"/api/tasks/{world.task.pk}/comments").content.decode()
    assert world.dob in body and world.docno in body
    assert AuditEvent.objects.filter(thread_id=world.thread_id, action="sensitive.revealed").count() == before + 1
    export = readers["auditor"].api.get("/api/audit/export", thread=str(world.thread_id))
    assert world.dob in b"".join(export.streaming_content).decode()


def test_a_reader_who_may_see_the_values_reading_comments_on_the_audit_trail_is_audited_on_every_surface(
    readers, world
):
    """An outside tester, as an auditor, read a date of birth quoted in a comment on the audit page, the audit
    API and both export formats: none of those readings wrote a ``sensitive.revealed`` event."""
    api, console = readers["auditor"].api, readers["auditor"].console
    thread = str(world.thread_id)
    readings = {
        "api audit": lambda: api.get("/api/audit", thread=thread, action="comment."),
        "console audit": lambda: console.get("/audit/", {"thread": thread, "action": "comment."}),
        "export jsonl": lambda: api.get("/api/audit/export", thread=thread, action="comment.posted", format="jsonl"),
        "export csv": lambda: api.get("/api/audit/export", thread=thread, action="comment.posted", format="csv"),
    }
    for surface, read in readings.items():
        last = AuditEvent.objects.order_by("-id").values_list("id", flat=True).first()
        response = read()
        body = (b"".join(response.streaming_content) if response.streaming else response.content).decode()
        assert world.dob in body, surface
        revealed = AuditEvent.objects.filter(
            id__gt=last, action="sensitive.revealed", actor_id=readers["auditor"].user.pk
        )
        assert any("comment.body" in e.details.get("paths", []) for e in revealed), surface


def _kyc_task(dob: str) -> Any:
    payload = {"title": "KYC", "applicant": {"name": "Ada", "date_of_birth": dob}}
    return task_make(graph="kyc_onboarding", node="compliance_review", payload=payload)


def test_a_blind_authors_guesses_answer_as_written_so_masking_tells_them_nothing(readers):
    """Masking a blind author's own words by value was an oracle: a comment of ~360 guessed dates came back
    with one of them masked, the date of birth. Someone who never saw the value cannot quote it, so their
    text is shown as written on every surface: a right guess reads exactly like a wrong one."""
    tag = uuid.uuid4().hex[:10]
    dob, wrong = f"dob{tag}", f"dob{tag[::-1]}x"
    task = _kyc_task(dob)
    reviewer = readers["reviewer"]
    for guess in (dob, wrong):
        htmx = console_client_for(reviewer).post(
            f"/tasks/{task.pk}/comments", {"body": f"is it {guess}?"}, headers={"HX-Request": "true"}
        )
        assert htmx.status_code == 201 and f"is it {guess}?" in htmx.content.decode()
        assert not _masked(htmx.content.decode())
    posted = reviewer.api.post(f"/api/threads/{task.thread_id}/comments", {"body": f"thread guess {dob}"})
    assert posted.status_code == 201 and posted.json()["body"] == f"thread guess {dob}"
    edited = reviewer.api.post(f"/api/comments/{posted.json()['id']}/versions", {"body": f"v2 {wrong} {dob}"})
    assert [v["body"] for v in edited.json()["history"]] == [f"thread guess {dob}", f"v2 {wrong} {dob}"]
    expected = {f"is it {dob}?", f"is it {wrong}?"}
    for name in BLIND:  # the other blind readers, the trail's reader included, read the same words
        listing = readers[name].api.get(f"/api/tasks/{task.pk}/comments").json()
        assert {c["body"] for c in listing} == expected, name
    trail = readers["audit_reader"].api.get("/api/audit", thread=str(task.thread_id)).json()
    bodies = {e["details"]["body"] for e in trail if e["action"].startswith("comment.")}
    assert bodies == {*expected, f"thread guess {dob}", f"v2 {wrong} {dob}"}
    refused = console_client_for(reviewer).post(
        f"/tasks/{task.pk}/comments", {"body": "", "kind": "question"}, headers={"HX-Request": "true"}
    )
    assert refused.status_code == 422 and not _masked(refused.content.decode())  # the same words again


def test_a_quote_stays_masked_after_its_author_loses_the_permission(readers):
    """Whether a text is masked is decided by what its author could see when writing it, not now: an
    approver's quote must not reach blind readers once the approver is made a reviewer."""
    dob = f"dob{uuid.uuid4().hex[:10]}"
    task = _kyc_task(dob)
    author = user_make("approver", "*")
    comments.comment_post(actor=author, task=task, body=f"on file: {dob}")
    author.groups.set([Group.objects.get(name="reviewer")])
    for name in BLIND:
        listing = readers[name].api.get(f"/api/tasks/{task.pk}/comments").json()
        assert [c["body"] for c in listing] == [f"on file: {TEXT_MASK}"], name
    trail = readers["audit_reader"].api.get("/api/audit", thread=str(task.thread_id), action="comment.posted").json()
    assert [e["details"]["body"] for e in trail] == [f"on file: {TEXT_MASK}"]


@pytest.fixture(scope="module")
def quoted_world(readers: dict[str, Reader], django_db_blocker: Any) -> Iterator[World]:
    """An approver compares two applicants: comments on one thread's task and on the other thread quote the
    other applicant's date of birth and document number, values the commented thread never carried."""
    with django_db_blocker.unblock():
        tag = uuid.uuid4().hex[:10]
        dob, docno = f"odob{tag}", f"ODoc{tag}x"
        other = task_make(
            graph="kyc_onboarding",
            node="compliance_review",
            payload={
                "title": "KYC",
                "applicant": {"name": "Bo", "date_of_birth": dob},
                "documents": [{"number": docno}],
            },
        )
        here = _kyc_task(f"dob{uuid.uuid4().hex[:10]}")
        approver = readers["approver"]
        shown = approver.api.get(f"/api/tasks/{other.pk}").content.decode()  # the approver reads the other case
        assert dob in shown and docno in shown
        comments.comment_post(actor=approver.user, task=here, body=f"the other applicant: born {dob}, doc {docno}")
        comments.comment_post(actor=approver.user, thread=here.thread, body=f"compare {docno.upper()}")
        drafted = comments.comment_post(actor=approver.user, task=here, body="draft")
        comments.comment_edit(actor=approver.user, comment=drafted, body=f"edited to quote {dob}")
        yield World(here, dob, docno, None)


@pytest.mark.parametrize("name", BLIND)
def test_no_surface_gives_a_blind_reader_another_threads_redacted_value_quoted_in_a_comment(
    readers, quoted_world, name
):
    """An outside QA's find: an admin's comment quoting another thread's date of birth and passport number
    was shown in clear to every reviewer of this thread, on every surface, the exports included."""
    surfaces = _surfaces(readers[name], quoted_world)
    leaks = {surface: _leaks(body, quoted_world) for surface, (_, body) in surfaces.items()}
    assert {surface: found for surface, found in leaks.items() if found} == {}
    for surface in ("api task comments", "api thread comments", "console task", "console thread"):
        status, body = surfaces[surface]
        assert status == 200 and _masked(body), surface


def test_a_reader_who_may_see_another_threads_quoted_values_reads_them_and_each_thread_audits_it(readers, quoted_world):
    other_thread = AuditEvent.objects.filter(
        action="comment.posted", thread_id=quoted_world.thread_id, details__quoted_threads__isnull=False
    ).values_list("details__quoted_threads", flat=True)
    [[quoted]] = {tuple(q) for q in other_thread}
    before = AuditEvent.objects.filter(thread_id=quoted, action="sensitive.revealed").count()
    body = readers["auditor"].api.get(f"/api/tasks/{quoted_world.task.pk}/comments").content.decode()
    assert quoted_world.dob in body and quoted_world.docno in body
    assert AuditEvent.objects.filter(thread_id=quoted, action="sensitive.revealed").count() == before + 1


def console_client_for(reader: Reader) -> Client:
    client = Client()
    client.force_login(reader.user)
    return client


def _socket_cookie(reader: Reader) -> tuple[bytes, bytes]:
    client = reader.console
    return (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())


@pytest.mark.parametrize("where", ["task", "thread"])
def test_websockets_push_the_conversation_masked_on_connect_and_live(readers, world, personas, loop, where):  # noqa: F811
    path = f"/ws/tasks/{world.task.pk}/" if where == "task" else f"/ws/threads/{world.thread_id}/"
    socket = Socket(loop, path, [ORIGIN, _socket_cookie(readers["reviewer"])])
    connected, _ = socket.connect()
    assert connected
    try:
        first = socket.receive()
        assert 'id="comments-list"' in first and TEXT_MASK in first and not _leaks(first, world)
        marker = f"live-{uuid.uuid4().hex[:8]}"
        comments.comment_post(
            actor=personas["approver"].user, task=world.task, body=f"{marker} quotes {world.dob} live"
        )
        pushed = ""
        for _ in range(20):  # other events may render first; the one with the marker must come
            pushed = socket.receive(timeout=scaled(10))
            if marker in pushed:
                break
        assert marker in pushed, "the new comment was not pushed"
        assert f"{marker} quotes {TEXT_MASK} live" in pushed and not _leaks(pushed, world)
    finally:
        socket.close()


def test_the_live_event_itself_carries_no_text(world, personas):
    comment = comments.comment_post(actor=personas["approver"].user, task=world.task, body=f"event {world.dob}")
    event = AuditEvent.objects.get(action="comment.posted", subject_id=str(comment.pk))
    assert world.dob not in json.dumps(live.event_from_audit(event))
