"""Authentication events: audited, and the sign-in time kept for electronic signatures."""

from __future__ import annotations

from typing import Any

from axes.signals import user_locked_out
from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed
from django.db import transaction
from django.dispatch import receiver
from django.http import HttpRequest
from django.utils import timezone

from approvals.audit import audit_record

SESSION_AUTH_AT = "gatehouse_authenticated_at"


def _client(request: HttpRequest | None) -> dict[str, Any]:
    if request is None:
        return {}
    return {"ip": request.META.get("REMOTE_ADDR", ""), "user_agent": request.META.get("HTTP_USER_AGENT", "")[:200]}


@receiver(user_logged_in)
def on_logged_in(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    if request is not None and hasattr(request, "session"):
        request.session[SESSION_AUTH_AT] = timezone.now().isoformat()
    with transaction.atomic():
        audit_record(actor=user, action="auth.login", subject_type="user", subject_id=user.pk, details=_client(request))


@receiver(user_logged_out)
def on_logged_out(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    if user is None:
        return
    with transaction.atomic():
        audit_record(
            actor=user, action="auth.logout", subject_type="user", subject_id=user.pk, details=_client(request)
        )


@receiver(user_locked_out)
def on_locked_out(sender: Any, request: HttpRequest | None, username: str | None = None, **kwargs: Any) -> None:
    with transaction.atomic():
        audit_record(
            actor=None,
            actor_label=f"anonymous:{(username or '')[:150]}",
            action="auth.locked_out",
            subject_type="user",
            subject_id=(username or "")[:150],
            details=_client(request),
        )


@receiver(user_login_failed)
def on_login_failed(
    sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **kwargs: Any
) -> None:
    username = str(credentials.get("username", ""))[:150]
    with transaction.atomic():
        audit_record(
            actor=None,
            actor_label=f"anonymous:{username}",
            action="auth.login_failed",
            subject_type="user",
            subject_id=username,
            details=_client(request),
        )
