"""An open websocket stops pushing once its session no longer signs its reader in over HTTP: a password
changed since the session signed in (``manage.py changepassword``, an admin, a set-password link), or
the account deactivated. Django ends such a session on the next HTTP request (the session's hash of the
password, ``django.contrib.auth.get_user``); a socket opened before must not keep streaming the inbox.

Through the real ASGI application (``console.asgi``: its session and auth middleware, the consumer), with
the session cookie a browser would send.
"""

from __future__ import annotations

import asyncio
import getpass
import uuid
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from approvals.users import user_password_set_by_link
from console import consumers, live
from tests.approvals.handoffs import person
from tests.console import test_live
from tests.console.test_live import ORIGIN, Socket, _close, _opened, _signed_in
from tests.factories import task_make

# The live tests' fixtures: one event loop for the module's sockets, and every socket closed after each test.
loop = test_live.loop
_sockets_closed = test_live._sockets_closed

pytestmark = pytest.mark.usefixtures("live_db")

NEW_PASSWORD = "a-new-Passphrase-" + uuid.uuid4().hex[:6]


def _open_inbox(loop: asyncio.AbstractEventLoop, user: User) -> tuple[Socket, Client, str]:
    """The reader's inbox socket, narrowed to a case of its own (first render read, nothing pending)."""
    cookie, client = _signed_in(user)
    case = uuid.uuid4().hex[:8]
    assert live.publisher_flush()
    socket = Socket(loop, f"/ws/inbox/?q={case}", [ORIGIN, cookie])
    assert socket.connect()[0]
    assert 'id="inbox-results"' in socket.receive()
    socket.settle()
    return socket, client, case


def _closes_before_showing_a_new_task(socket: Socket, case: str) -> dict[str, Any]:
    """A task of the socket's case opens after the change: the socket closes without showing it."""
    task = task_make(metadata={"case": case})
    _opened(task)
    return _close(socket, unseen=str(task.pk))


def _http_sends_to_sign_in(client: Client) -> None:
    """The same cookie over HTTP: the inbox page sends it to the sign-in page (Django's own check)."""
    response = client.get("/")
    assert response.status_code == 302 and response.url.startswith("/accounts/login/"), response


def test_a_password_changed_with_manage_py_changepassword_stops_the_open_inbox(loop, monkeypatch):
    reader = person()
    socket, client, case = _open_inbox(loop, reader)
    monkeypatch.setattr(getpass, "getpass", lambda prompt="": NEW_PASSWORD)  # the terminal typing it twice
    call_command("changepassword", reader.username, stdout=None)
    assert _closes_before_showing_a_new_task(socket, case) == {"type": "websocket.close", "code": 4401}
    _http_sends_to_sign_in(client)


def test_an_admin_setting_the_password_closes_the_open_inbox_at_once(loop, personas):
    reader = person()
    socket, client, _ = _open_inbox(loop, reader)
    response = personas["admin"].client.post(f"/api/users/{reader.pk}/password", {"password": NEW_PASSWORD})
    assert response.status_code == 200, response.content
    # No event of the inbox's needed: the password change itself makes the socket check its reader.
    assert _close(socket) == {"type": "websocket.close", "code": consumers.CLOSE_UNAUTHENTICATED}
    _http_sends_to_sign_in(client)


def test_an_admin_voiding_the_password_closes_the_open_inbox(loop, personas):
    reader = person()
    socket, client, case = _open_inbox(loop, reader)
    response = personas["admin"].client.post(f"/api/users/{reader.pk}/password", {})  # a set-password link
    assert response.status_code == 200, response.content
    assert _closes_before_showing_a_new_task(socket, case) == {"type": "websocket.close", "code": 4401}
    _http_sends_to_sign_in(client)


def test_a_password_set_from_a_link_closes_the_sessions_signed_in_with_the_old_one(loop):
    reader = person()
    socket, client, case = _open_inbox(loop, reader)
    user_password_set_by_link(user=User.objects.get(pk=reader.pk), password=NEW_PASSWORD)
    assert _closes_before_showing_a_new_task(socket, case) == {"type": "websocket.close", "code": 4401}
    _http_sends_to_sign_in(client)


def test_a_reader_deactivated_by_an_admin_stops_the_open_inbox(loop, personas):
    reader = person()
    socket, client, _ = _open_inbox(loop, reader)
    response = personas["admin"].client.post(f"/api/users/{reader.pk}/deactivate", {"reason": "left"})
    assert response.status_code == 200, response.content
    assert _close(socket) == {"type": "websocket.close", "code": consumers.CLOSE_UNAUTHENTICATED}
    _http_sends_to_sign_in(client)


def test_a_reader_deactivated_in_the_database_stops_at_the_next_push(loop):
    reader = person()
    socket, _, case = _open_inbox(loop, reader)
    User.objects.filter(pk=reader.pk).update(is_active=False)  # no announcement: only the push's check
    assert _closes_before_showing_a_new_task(socket, case) == {"type": "websocket.close", "code": 4401}


def test_signing_in_again_with_the_new_password_streams_again(loop):
    reader = person()
    old, _, _ = _open_inbox(loop, reader)
    reader.set_password(NEW_PASSWORD)
    reader.save(update_fields=["password"])
    socket, _, case = _open_inbox(loop, reader)  # a new session, its hash of the new password
    task = task_make(metadata={"case": case})
    _opened(task)
    assert str(task.pk) in socket.receive()
    socket.close()
    old.close()
