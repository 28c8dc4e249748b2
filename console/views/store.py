"""The long-term memory browser: namespaces and items for roles that may read the store (read-only)."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from approvals import store
from approvals.errors import InvalidInput
from console.views.common import HtmxHttpRequest, console_login_required, domain_errors

PAGE = 50


@require_GET
@console_login_required
@domain_errors
def store_browser(request: HtmxHttpRequest) -> HttpResponse:
    raw = request.GET.get("ns", "")[:1000]
    namespace = raw.split(".") if raw else []
    try:
        offset = max(int(request.GET.get("offset", "0") or 0), 0)
    except ValueError:
        raise InvalidInput("offset must be a whole number", field="offset") from None
    namespaces = store.store_namespaces_list(user=request.user, prefix=namespace, limit=PAGE)
    items = (
        store.store_items_search(user=request.user, namespace_prefix=namespace, limit=PAGE, offset=offset)
        if namespace
        else []
    )
    ctx = {
        "nav": "store",
        "ns": raw,
        "crumbs": [(label, ".".join(namespace[: i + 1])) for i, label in enumerate(namespace)],
        "namespaces": [".".join(n) for n in namespaces],
        "items": items,
        "offset": offset,
        "next_offset": offset + PAGE if len(items) == PAGE else None,
    }
    return render(request, "console/store.html", ctx)
