"""Console writes: decide with this session's proof of sign-in.

Claims are a domain concept (``approvals.claims``), checked by ``task_decide`` itself.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib.auth.models import User

from approvals import services
from approvals.models import Decision
from approvals.payloads import DecisionRequest


def task_decide_checked(
    *,
    actor: User,
    task_id: Any,
    request: DecisionRequest,
    authenticated_at: datetime | None,
    password: str = "",
) -> Decision:
    """Decide from the console: signed with this session's proof time (or the re-entered password).

    ``authenticated_at`` is the session's own (``approvals.security.request_proof_at``), never
    the user's last sign-in anywhere: a login in another browser must not refresh this one.
    Not wrapped in a transaction of its own: ``task_decide`` audits policy
    refusals in a separate transaction, which an outer one would roll back.
    """
    signer = services.Signer(authenticated_at=authenticated_at, password=password or None, via="session")
    return services.task_decide(actor=actor, task_id=task_id, request=request, signer=signer)
