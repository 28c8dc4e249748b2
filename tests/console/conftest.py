"""Console fixtures: signed-in browsers-as-clients per persona, and the task page's decision form.

Tasks are made without a worker by ``tests.factories.task_make`` (through the services);
flows that must resume a thread use the real worker from ``tests/conftest.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from tests.conftest import Persona


def console_client(persona: Persona, *, enforce_csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=enforce_csrf)
    client.force_login(persona.user)
    return client


@pytest.fixture
def as_role(personas: dict[str, Persona]) -> Callable[[str], Client]:
    return lambda role: console_client(personas[role])


def console_decide(client: Client, task: Any, *, htmx: bool = True, **fields: Any) -> Any:
    """Submit the task page's decision form on ``task`` (a model or an API task dict) as ``client``.

    The form carries the checkpoint the page showed (``checkpoint_id``, overridable), as the console's does.
    """
    task_id, checkpoint = (
        (task["id"], task["checkpoint_id"]) if isinstance(task, dict) else (task.pk, task.checkpoint_id)
    )
    headers = {"HX-Request": "true"} if htmx else {}
    return client.post(f"/tasks/{task_id}/decide", {"checkpoint_id": checkpoint, **fields}, headers=headers)
