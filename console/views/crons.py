"""A cron's Delete button, on its thread's page and its owner's user page (crons: lgplatform/crons.py)."""

from __future__ import annotations

from uuid import UUID

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from console.views.common import SignedInRequest, console_login_required, domain_errors, form_page
from lgplatform import crons


@require_POST
@console_login_required
@domain_errors
def cron_delete(request: SignedInRequest, cron_id: UUID) -> HttpResponse:
    """Its owner or a user administrator (``crons.cron_deletable``); back to the page the button was on."""
    crons.cron_delete(actor=request.user, cron_id=cron_id)
    messages.success(request, "Cron deleted: it starts no more runs")
    return redirect(form_page(request))
