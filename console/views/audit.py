"""The audit trail, filtered, newest first, for auditors and admins."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from approvals import gateway, permissions
from approvals.errors import DomainError
from console import selectors
from console.forms import AuditFilterForm
from console.views.common import HtmxHttpRequest, console_login_required, domain_errors


@require_GET
@console_login_required
@domain_errors
def audit(request: HtmxHttpRequest) -> HttpResponse:
    permissions.require(request.user, "approvals.view_audit", "read the audit trail")
    form = AuditFilterForm(request.GET)
    page = selectors.Page(items=[], next_cursor=None)
    error = ""
    if form.is_valid():
        data = form.cleaned_data
        try:
            page = selectors.audit_search(user=request.user, filters=form.filters, before_id=data["before"])
        except DomainError as exc:
            error = exc.message
    # Details are stored whole (they are hashed); the gateway masks them on the way out, and what it reveals
    # to a reader who may see it is audited once for the page.
    with gateway.reveals_gathered(request.user, reading="audit:page"):
        rows = list(zip(page.items, gateway.audit_details_many(request.user, page.items), strict=True))
    actions = selectors.audit_actions(user=request.user)
    names = selectors.audit_subject_names(events=page.items)
    ctx = {
        "form": form,
        "page": page,
        "rows": rows,
        "error": error,
        "actions": actions,
        "subject_names": names,
        # The export reads the same filter: an invalid one would answer a raw 422, so it is not offered.
        "exportable": form.is_valid() and not error,
        # A reader who sees values masked gets no chain hashes (gateway.audit_hashes_withheld): said by the links.
        "hashes_withheld": gateway.audit_hashes_withheld(request.user),
    }
    if request.htmx and request.htmx.target == "audit-results":
        return render(request, "console/partials/audit_results.html", ctx)
    return render(request, "console/audit.html", ctx)
