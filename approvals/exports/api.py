"""``GET /api/audit/export``: the audit trail as a streamed CSV or JSON Lines download."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any, Literal

from asgiref.sync import sync_to_async
from django.http import HttpRequest, StreamingHttpResponse
from ninja import Query, Router, Schema

from approvals import permissions
from approvals.api_common import params_unknown_refuse
from approvals.audit_filters import audit_filters_parse
from approvals.exports.stream import AuditExport

router = Router(tags=["audit"])

_DONE = object()


class ExportQuery(Schema):
    format: Literal["jsonl", "csv"] = "jsonl"
    # Plain strings: the console's filter form sends empty fields, which mean "any".
    graph: str | None = None
    thread: str | None = None
    actor: str | None = None
    action: str | None = None
    since: str | None = None
    until: str | None = None


# What the export takes: its query's names, and the console audit page's (empty) ``before`` its export links
# carry along with the page's filters.
EXPORT_PARAMS = frozenset(ExportQuery.model_fields)


def _next_or_done(iterator: Iterator[str]) -> object:
    return next(iterator, _DONE)


class SyncOrAsyncStreamingResponse(StreamingHttpResponse):
    """Streams a synchronous generator under WSGI (and the test client) *and* under ASGI.

    Django serves a sync iterator under ASGI by consuming it into a list first
    (``StreamingHttpResponse.__aiter__``), which would hold the whole export in
    memory. Here each chunk is pulled in the request's thread-sensitive worker
    thread, the thread whose database connection owns the server-side cursor.
    """

    def __init__(self, content: Iterator[str], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._source = content

    async def __aiter__(self) -> AsyncIterator[bytes]:
        pull = sync_to_async(_next_or_done, thread_sensitive=True)
        try:
            while True:
                part = await pull(self._source)
                if part is _DONE:
                    return
                yield self.make_bytes(part)
        finally:
            close = getattr(self._source, "close", None)
            if close is not None:  # an abandoned download: end the transaction in its own thread
                await sync_to_async(close, thread_sensitive=True)()


@router.get("/audit/export")
def audit_export(request: HttpRequest, query: Query[ExportQuery]) -> StreamingHttpResponse:
    """Stream the audit events you may see, oldest first, with their chain hashes.

    Filters as on the console's audit page (`action` ending in `.` matches a
    prefix; `since`/`until` are ISO 8601, UTC when no offset is given, and a
    bare date is the whole day: `until=2026-12-06` includes that day).
    Sensitive paths are masked unless you may view sensitive fields. The JSONL
    variant ends with a trailer line `{"export": {"count", "first_id",
    "last_id", "head_hash", "chained", ...}}`; check a file with
    `manage.py audit_export --verify FILE`.
    """
    user = request.auth  # type: ignore[attr-defined]
    permissions.require(user, "approvals.view_audit", "export the audit trail")
    params_unknown_refuse(request, EXPORT_PARAMS, what="the export", empty_allowed=frozenset({"before"}))
    filters = audit_filters_parse(
        graph=query.graph,
        thread=query.thread,
        actor=query.actor,
        action=query.action,
        since=query.since,
        until=query.until,
    )
    export = AuditExport(user=user, filters=filters, format=query.format)
    response = SyncOrAsyncStreamingResponse(export.chunks(), content_type=export.content_type)
    response["Content-Disposition"] = f'attachment; filename="{export.filename}"'
    response["Cache-Control"] = "no-store"
    response["X-Accel-Buffering"] = "no"  # a proxy must not buffer a million rows either
    return response
