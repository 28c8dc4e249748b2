"""Checking an exported JSON Lines file against the live trail: what ``--verify`` cannot prove offline.

The file alone proves each unmasked row's hash and, for a whole-trail export, the links. It cannot prove a
masked row's fields (its hash covers values the file does not hold) nor its trailer (anyone can rewrite
``count``, ``last_id`` and ``head_hash`` after removing the newest rows: no key signs it). With the
database (``audit_export --verify FILE --against-db``):

- every row must be the stored event of its id: same chain, links and hash, the same fields, and the same
  details except where the file shows the mask;
- the trailer must be one the trail recorded: the ``audit.exported`` event every export writes holds its
  filters, count, first and last id and head hash, in the hash chain (and under the anchors);
- the rows must be every event that export's principal could see with its filters between its first and
  last id: none removed, none added.

Run it where the trail is intact (``audit_verify`` says so): it trusts the database.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from django.contrib.auth.models import User

from approvals.audit import event_fields
from approvals.audit_filters import FILTERS, audit_filters_parse
from approvals.errors import DomainError
from approvals.exports.stream import HASHED, audit_export_queryset
from approvals.models import AuditAction, AuditEvent
from approvals.redaction import MASK


def _shown_as(shown: Any, stored: Any) -> bool:
    """Whether ``shown`` (an exported value) is ``stored`` with some values replaced by the mask."""
    if shown == MASK:
        return True
    if isinstance(shown, dict) and isinstance(stored, dict):
        return shown.keys() == stored.keys() and all(_shown_as(shown[k], stored[k]) for k in shown)
    if isinstance(shown, list) and isinstance(stored, list):
        return len(shown) == len(stored) and all(_shown_as(a, b) for a, b in zip(shown, stored, strict=True))
    return bool(shown == stored)


def _row_findings(row: dict[str, Any], event: AuditEvent | None) -> list[str]:
    if event is None:
        return [f"event {row['id']}: not in the trail"]
    stored = event_fields(event)
    wrong = [key for key in HASHED if key in row and key != "details" and row[key] != stored[key]]
    # A masked reader's export withholds the chain hashes (gateway.audit_hashes_withheld): nothing to compare.
    wrong += [
        key
        for key in ("chain", "prev_hash", "hash")
        if key in row and row[key] != getattr(event, key) and not (row["masked"] and row[key] == MASK)
    ]
    same_details = (
        _shown_as(row["details"], stored["details"]) if row["masked"] else row["details"] == stored["details"]
    )
    if not same_details:
        wrong.append("details")
    return [f"event {row['id']}: {', '.join(wrong)} differ from the trail"] if wrong else []


def export_check_against_trail(lines: Iterable[str | bytes]) -> list[str]:
    """The findings of checking an export (already ``export_verify``-ed) against the database; none: it is a
    true copy of an export the trail recorded, whole."""
    rows: list[dict[str, Any]] = []
    trailer: dict[str, Any] = {}
    for raw in lines:
        text = raw.decode() if isinstance(raw, bytes) else raw
        if text.strip():
            data = json.loads(text)
            if set(data) == {"export"}:
                trailer = data["export"]
            else:
                rows.append(data)
    findings: list[str] = []
    stored = AuditEvent.objects.in_bulk([row["id"] for row in rows])
    for row in rows:
        findings += _row_findings(row, stored.get(row["id"]))
    recorded = (
        AuditEvent.objects.filter(action=AuditAction.AUDIT_EXPORTED, details__complete=True)
        .filter(**{f"details__{key}": trailer.get(key) for key in ("count", "first_id", "last_id", "head_hash")})
        .filter(details__filters=trailer.get("filters") or {})
        .select_related("actor")
        .order_by("id")
        .first()
    )
    if recorded is None:
        findings.append(
            "trailer: the trail records no export with these filters, count, first_id, last_id and head_hash "
            "(rows removed and the trailer rewritten?)"
        )
        return findings
    if trailer.get("first_id") is None:
        return findings
    principal = recorded.actor or User(username="manage.py", is_active=True, is_superuser=True)
    try:
        filters = audit_filters_parse(**{k: v for k, v in (trailer.get("filters") or {}).items() if k in FILTERS})
    except DomainError as exc:
        return [*findings, f"trailer: filters {exc.message}"]
    expected = list(
        audit_export_queryset(user=principal, filters=filters)
        .filter(id__gte=trailer["first_id"], id__lte=trailer["last_id"])
        .values_list("id", flat=True)
    )
    ids = [row["id"] for row in rows]
    if ids != expected:
        missing, extra = sorted(set(expected) - set(ids)), sorted(set(ids) - set(expected))
        findings.append(
            f"rows: the export recorded as event {recorded.id} had {len(expected)} events; the file lacks "
            f"{missing[:10]} and has {extra[:10]} it should not"
        )
    return findings
