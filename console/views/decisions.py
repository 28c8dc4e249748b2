"""Decision history for auditors: who decided what, on which evidence, under which signature, and what followed.

Filters are plain GET parameters (bookmarkable, htmx-pushed); paging is by
keyset so the thousandth page costs what the first does. Everything sensitive
is read through ``approvals.gateway`` with the viewer's permissions.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django import forms
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from approvals import permissions
from approvals.errors import DomainError
from approvals.models import Outcome, SignatureMeaning
from console import selectors
from console.forms import WindowEdgeField
from console.views.common import HtmxHttpRequest, console_login_required, domain_errors

PAGE_SIZE = 50


class DecisionFilterForm(forms.Form):
    graph = forms.CharField(required=False, max_length=100)
    node = forms.CharField(required=False, max_length=200)
    outcome = forms.ChoiceField(required=False, choices=[("", "Any"), *Outcome.choices])
    meaning = forms.ChoiceField(required=False, choices=[("", "Any"), *SignatureMeaning.choices])
    actor = forms.CharField(required=False, max_length=300)
    # Read as the audit trail reads them: a bare date as until includes that day.
    since = WindowEdgeField(end=False, required=False)
    until = WindowEdgeField(end=True, required=False)
    cursor = forms.CharField(required=False, max_length=500)
    # Thread filter and webhook-decided filter (the team dashboard links here with them).
    thread = forms.UUIDField(required=False)
    via = forms.ChoiceField(required=False, choices=[("", "Anyone"), ("webhook", "A webhook"), ("person", "A person")])


@require_GET
@console_login_required
@domain_errors
def decision_list(request: HtmxHttpRequest) -> HttpResponse:
    permissions.require(request.user, "approvals.view_audit", "read the decision history")
    form = DecisionFilterForm(request.GET)
    page = selectors.Page(items=[], next_cursor=None)
    error = ""
    if form.is_valid():
        try:
            page = selectors.decisions_search(user=request.user, limit=PAGE_SIZE, **_filters(form.cleaned_data))
            selectors.decision_edits_summarise(user=request.user, decisions=page.items)
        except DomainError as exc:
            error = exc.message
    ctx = {
        "form": form,
        "page": page,
        "error": error,
        "nav": "decisions",
        "facets": selectors.decision_facets(user=request.user),
        "outcomes": Outcome.choices,
        "meanings": SignatureMeaning.choices,
        "first_page": not request.GET.get("cursor"),
    }
    if request.htmx and request.htmx.target == "decision-results":
        return render(request, "console/decisions_results.html", ctx)
    return render(request, "console/decisions.html", ctx)


def _filters(data: dict[str, Any]) -> dict[str, Any]:
    return {k: (v if v is not None else "") if k not in ("since", "until", "thread") else v for k, v in data.items()}


@require_GET
@console_login_required
@domain_errors
def decision_detail(request: HtmxHttpRequest, decision_id: UUID) -> HttpResponse:
    permissions.require(request.user, "approvals.view_audit", "read the decision history")
    evidence = selectors.decision_evidence(user=request.user, decision_id=decision_id)
    return render(request, "console/decisions_detail.html", {"e": evidence, "nav": "decisions"})
