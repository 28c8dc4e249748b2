"""API tokens: random secrets shown once, stored only as SHA-256 digests."""

from __future__ import annotations

import functools
import hashlib
import secrets
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db import connection, transaction
from django.utils import timezone

from approvals.audit import audit_record
from approvals.models import ApiToken, AuditAction
from approvals.permissions import TOKEN_ACTIONS, TOKEN_SCOPE_ATTR, access_keep, access_sql
from runtime import rows
from runtime.registry import graph_external_valid, graph_names

TOKEN_ACTION_NAMES = set(TOKEN_ACTIONS.values()) | {"admin"}

TOKEN_DAYS_MAX = 3650  # the longest a token may be issued for: ten years (beyond, rotate it)
TOKEN_PREFIX = "gh_"  # noqa: S105 - the public prefix of every token


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def token_graphs_check(graphs: list[str]) -> list[str]:
    """Refuse graphs that are neither registered nor an external engine's ("external:<source>",
    docs/external-tasks.md): a token limited to such a graph sees nothing, silently. As user_create
    refuses such an assignment; "*" is no wildcard here (a token without graphs has them all)."""
    registered = set(graph_names())
    strangers = sorted(g for g in set(graphs) - registered if not graph_external_valid(g))
    if strangers:
        raise ValueError(
            f"unknown graph {strangers[0]!r} (registered: {', '.join(sorted(registered)) or 'none'}); "
            "a token without graphs has every graph its user may see"
        )
    return graphs


@transaction.atomic
def token_issue(
    *,
    user: User,
    name: str = "",
    expires_at: datetime | None = None,
    actor: User | None = None,
    graphs: list[str] | None = None,
    actions: list[str] | None = None,
) -> str:
    """A new token for ``user``, optionally narrowed to some graphs and actions; the secret is returned once."""
    if not user.is_active:
        # It would answer 401 now and come alive with a reactivation that revoked every other token.
        raise ValueError(f"user {user.get_username()!r} is deactivated: reactivate them first")
    unknown = set(actions or []) - TOKEN_ACTION_NAMES
    if unknown:
        raise ValueError(f"unknown token actions {sorted(unknown)}; choose from {sorted(TOKEN_ACTION_NAMES)}")
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user,
        name=name,
        prefix=secret[:10],
        digest=_digest(secret),
        expires_at=expires_at,
        graphs=list(graphs or []),
        actions=list(actions or []),
    )
    audit_record(
        actor=actor,
        actor_label=None if actor else "cli",
        action=AuditAction.TOKEN_ISSUED,
        subject_type="token",
        subject_id=token.pk,
        details={
            "user": user.get_username(),
            "name": name,
            "prefix": token.prefix,
            "expires_at": expires_at.isoformat() if expires_at else None,
            "graphs": list(graphs or []),
            "actions": list(actions or []),
        },
    )
    return secret


@transaction.atomic
def token_revoke(*, prefix: str, actor: User | None = None) -> int:
    """Revoke every live token whose shown prefix is ``prefix``; returns how many."""
    tokens = list(ApiToken.objects.select_for_update().filter(prefix=prefix, revoked_at__isnull=True))
    now = timezone.now()
    for token in tokens:
        token.revoked_at = now
        token.save(update_fields=["revoked_at"])
        audit_record(
            actor=actor,
            actor_label=None if actor else "cli",
            action=AuditAction.TOKEN_REVOKED,
            subject_type="token",
            subject_id=token.pk,
            details={"user": token.user.get_username(), "prefix": token.prefix},
        )
    return len(tokens)


def token_authenticate(secret: str) -> User | None:
    if not secret.startswith(TOKEN_PREFIX):
        return None
    token, granted = _token_by_digest(_digest(secret))
    now = timezone.now()
    if token is None or token.revoked_at or (token.expires_at and token.expires_at <= now):
        return None
    if not token.user.is_active:
        return None
    user = token.user
    if granted is not None and not user.is_superuser:
        access_keep(user, granted)  # read with the token: the request's checks make no statement of their own
    if token.graphs or token.actions:
        setattr(user, TOKEN_SCOPE_ATTR, (list(token.graphs), list(token.actions)))
    # Record use, but at most once a minute per token: no write per request.
    if token.last_used_at is None or token.last_used_at < now - timedelta(minutes=1):
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return user


def _token_by_digest(digest: str) -> tuple[ApiToken | None, list[Any] | None]:
    """The token with ``digest`` and its user, in one statement: what
    ``ApiToken.objects.select_related("user").filter(digest=...)`` reads, written out once per process
    (every API request authenticates here; composing and compiling the queryset took ~0.5 ms of CPU).

    On PostgreSQL the same statement reads what the user may do (``permissions.access_sql``: its
    permissions and graph assignments, as one array), which every request then checks: one round
    trip where there were two. (token, that access; None where it was not read)."""
    with rows.fixed_cursor() as cursor:
        cursor.execute(_token_sql(connection.vendor), [digest])
        row = cursor.fetchone()
    if row is None:
        return None, None
    if connection.vendor != "postgresql":
        return rows.model_and_related(ApiToken, "user", User, row), None
    return rows.model_and_related(ApiToken, "user", User, row[:-1]), row[-1] or []


@functools.cache
def _token_sql(vendor: str) -> str:
    q = connection.ops.quote_name
    tokens, users = q(ApiToken._meta.db_table), q(User._meta.db_table)
    user_key, token_user = q(str(User._meta.pk.column)), q(str(ApiToken._meta.get_field("user").column))
    digest = q(str(ApiToken._meta.get_field("digest").column))
    access = ""
    if vendor == "postgresql":
        granted = access_sql(f"u.{user_key}")  # the user's permissions and assignments: fixed text, no value
        access = f", (SELECT array_agg(ARRAY[a.kind, a.first, a.second]) FROM ({granted}) a(kind, first, second))"  # noqa: S608
    return (
        f"SELECT {rows.columns(ApiToken, 't')}, {rows.columns(User, 'u')}{access} "  # noqa: S608 - names from the models
        f"FROM {tokens} t INNER JOIN {users} u ON u.{user_key} = t.{token_user} WHERE t.{digest} = %s"
    )
