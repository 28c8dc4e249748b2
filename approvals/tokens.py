"""API tokens: random secrets shown once, stored only as SHA-256 digests."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from approvals.audit import audit_record
from approvals.models import ApiToken

TOKEN_PREFIX = "gh_"


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@transaction.atomic
def token_issue(
    *, user: User, name: str = "", expires_at: datetime | None = None, actor: User | None = None
) -> str:
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user, name=name, prefix=secret[:10], digest=_digest(secret), expires_at=expires_at
    )
    audit_record(
        actor=actor,
        actor_label=None if actor else "cli",
        action="token.issued",
        subject_type="token",
        subject_id=token.pk,
        details={
            "user": user.get_username(),
            "name": name,
            "prefix": token.prefix,
            "expires_at": expires_at.isoformat() if expires_at else None,
        },
    )
    return secret


def token_authenticate(secret: str) -> User | None:
    if not secret.startswith(TOKEN_PREFIX):
        return None
    token = ApiToken.objects.select_related("user").filter(digest=_digest(secret)).first()
    now = timezone.now()
    if token is None or token.revoked_at or (token.expires_at and token.expires_at <= now):
        return None
    if not token.user.is_active:
        return None
    # Record use, but at most once a minute per token: no write per request.
    if token.last_used_at is None or token.last_used_at < now - timedelta(minutes=1):
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token.user  # type: ignore[no-any-return]
