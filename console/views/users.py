"""User administration for admins: list, create, detail with effective permissions, and the changes
(roles, graph and gate assignments, deactivate/reactivate, password and OTP resets).

Every rule and every audit event lives in ``approvals.users``; these views translate form posts
into its services. Changes on the detail page are htmx posts that re-render the panel they change
(a plain form post redirects back, for browsers without script). A set-password link is shown once,
in the response that created it, and never stored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.models import User
from django.db import transaction
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from approvals import permissions, users
from approvals.errors import DomainError, InvalidInput
from console.forms import NUL_REFUSED, nul_fields
from console.middleware import form_text_checked
from console.views.common import HtmxHttpRequest, console_login_required, domain_errors, error_page
from lgplatform import crons
from runtime.registry import graph_is_external


def _actor(request: HtmxHttpRequest) -> User:
    return cast(User, request.user)  # @console_login_required


def _assignment_choices(user: User | None) -> list[dict[str, Any]]:
    """Per graph: whether the whole graph is assigned, and each known gate with its state."""
    held = set(users.user_assignments(user)) if user is not None else set()
    graphs = users.graphs_assignable(a.graph for a in held)
    rows = [
        {
            "graph": permissions.ALL_GRAPHS,
            "label": "Every graph",
            "whole": users.Assignment(permissions.ALL_GRAPHS) in held,
            "gates": [],
        }
    ]
    for graph in graphs:
        assigned_gates = [a.gate for a in held if a.graph == graph and a.gate]
        rows.append(
            {
                "graph": graph,
                "label": graph,
                "external": graph_is_external(graph),
                "whole": users.Assignment(graph) in held,
                "gates": [
                    {"name": gate, "value": f"{graph}:{gate}", "checked": gate in assigned_gates}
                    for gate in users.gates_assignable(graph, assigned_gates)
                ],
            }
        )
    return rows


def _detail_context(request: HtmxHttpRequest, user_id: int) -> dict[str, Any]:
    actor = _actor(request)
    subject = users.user_get(actor=actor, user_id=user_id)
    history = (
        permissions.audit_visible(actor)
        .filter(subject_type="user", subject_id=str(subject.pk), action__startswith="user.")
        .order_by("-id")[:20]
    )
    return {
        "subject": subject,
        "is_sso": users.user_is_sso(subject),
        "effective": users.user_effective_permissions(actor=actor, user_id=subject.pk),
        "roles": users.ASSIGNABLE_ROLES,
        "held_roles": users.user_roles(subject),
        "assignment_rows": _assignment_choices(subject),
        "credentials": users.user_credentials(subject),
        "history": history,
        "owned_crons": crons.owned_crons(actor, subject),  # runs started in their name (client.crons)
        "nav": "users",
    }


def _panel(request: HtmxHttpRequest, user_id: int, *, status: int = 200, **extra: Any) -> HttpResponse:
    """After a change: the detail panel for htmx, or post/redirect/get for a plain form."""
    if request.htmx:
        ctx = {**_detail_context(request, user_id), **extra}
        return render(request, "console/users/_panel.html", ctx, status=status)
    return redirect("console:user", user_id=user_id)


def _change(request: HtmxHttpRequest, user_id: int, change: Callable[[], str]) -> HttpResponse:
    """Run one service call; its message goes to the panel (htmx) or the redirected page."""
    try:
        done = change()
    except DomainError as exc:
        if not request.htmx:
            raise
        return _panel(request, user_id, status=exc.status, panel_error=exc)
    if request.htmx:
        return _panel(request, user_id, panel_done=done)
    messages.success(request, done)
    return _panel(request, user_id)


@require_GET
@console_login_required
@domain_errors
def user_list(request: HtmxHttpRequest) -> HttpResponse:
    query = request.GET.get("q", "").strip()[:150]
    state = request.GET.get("state", "")
    active = {"active": True, "inactive": False}.get(state)
    listed = users.users_list(actor=_actor(request), query=query, active=active)
    return render(
        request,
        "console/users/list.html",
        {"users": listed[:500], "q": query, "state": state if active is not None else "", "nav": "users"},
    )


@form_text_checked  # a NUL byte in a field: a form error next to it (nul_fields), not the API's JSON
@console_login_required
@domain_errors
def user_create(request: HtmxHttpRequest) -> HttpResponse:
    actor = _actor(request)
    users.require_admin(actor)
    if request.method not in ("GET", "POST"):
        return HttpResponse(status=405)
    data = request.POST if request.method == "POST" else request.GET
    errors: dict[str, str] = {}
    status = 200
    refused = nul_fields(data) if request.method == "POST" else []
    for name in refused:  # the form shows assignments as its graphs; anything else it has no field for above it
        where = "graphs" if name == "assign" else name.replace("\x00", "\\u0000")
        errors.setdefault(where, f"{where}: {NUL_REFUSED}")
        status = 422
    if request.method == "POST" and not refused:
        try:
            created = users.user_create(
                actor=actor,
                username=data.get("username", ""),
                email=data.get("email", ""),
                first_name=data.get("first_name", "").strip(),
                last_name=data.get("last_name", "").strip(),
                roles=data.getlist("roles"),
                assignments=[users.Assignment.parse(v) for v in data.getlist("assign")],
            )
            setup = users.user_password_reset(actor=actor, user_id=created.pk)
        except DomainError as exc:
            # The service numbers assignments (assignments[0].gate); the form shows them under its graphs.
            field = "graphs" if (exc.field or "").startswith("assignments") else exc.field or "__all__"
            errors[field] = exc.message
            status = exc.status
        else:
            # Created with no role, or no graph: it can sign in and do nothing; say so, not silently.
            no_role, no_graph = users.access_missing(created)
            return render(
                request,
                "console/users/created.html",
                {
                    "subject": created,
                    "link": _link(request, setup),
                    "setup": setup,
                    "new_account": True,
                    "no_role": no_role,
                    "no_graph": no_graph,
                    "nav": "users",
                },
            )
    held = set(data.getlist("assign"))
    rows = _assignment_choices(None)
    for row in rows:
        row["whole"] = row["graph"] in held
        for gate in row["gates"]:
            gate["checked"] = gate["value"] in held
    return render(
        request,
        "console/users/create.html",
        {
            "roles": users.ASSIGNABLE_ROLES,
            "held_roles": data.getlist("roles"),
            "assignment_rows": rows,
            "data": data,
            "errors": errors,
            "nav": "users",
        },
        status=status,
    )


def _link(request: HtmxHttpRequest, setup: users.PasswordSetup | None) -> str:
    if setup is None:
        return ""
    return request.build_absolute_uri(
        reverse("console:password-set", kwargs={"uidb64": setup.uidb64, "token": setup.token})
    )


@require_GET
@console_login_required
@domain_errors
def user_detail(request: HtmxHttpRequest, user_id: int) -> HttpResponse:
    return render(request, "console/users/detail.html", _detail_context(request, user_id))


@require_POST
@console_login_required
@domain_errors
def user_roles(request: HtmxHttpRequest, user_id: int) -> HttpResponse:
    roles = request.POST.getlist("roles")

    def change() -> str:
        users.user_roles_set(actor=_actor(request), user_id=user_id, roles=roles)
        return "Roles saved"

    return _change(request, user_id, change)


@require_POST
@console_login_required
@domain_errors
def user_assignments(request: HtmxHttpRequest, user_id: int) -> HttpResponse:
    wanted = [users.Assignment.parse(v) for v in request.POST.getlist("assign")]

    def change() -> str:
        users.user_assignments_set(actor=_actor(request), user_id=user_id, assignments=wanted)
        return "Graphs and gates saved"

    return _change(request, user_id, change)


@form_text_checked  # a NUL byte in the reason: refused in the panel, not the API's JSON
@require_POST
@console_login_required
@domain_errors
def user_deactivate(request: HtmxHttpRequest, user_id: int) -> HttpResponse:
    reason = request.POST.get("reason", "").strip()

    def change() -> str:
        if refused := nul_fields(request.POST):
            raise InvalidInput(NUL_REFUSED, field=refused[0])
        users.user_deactivate(actor=_actor(request), user_id=user_id, reason=reason)
        return "Deactivated: signed out everywhere, API tokens revoked"

    return _change(request, user_id, change)


@require_POST
@console_login_required
@domain_errors
def user_reactivate(request: HtmxHttpRequest, user_id: int) -> HttpResponse:
    def change() -> str:
        users.user_reactivate(actor=_actor(request), user_id=user_id)
        return "Reactivated: the user may sign in again (revoked API tokens stay revoked)"

    return _change(request, user_id, change)


@require_POST
@console_login_required
@domain_errors
def user_password(request: HtmxHttpRequest, user_id: int) -> HttpResponse:
    """Void the password and show a set-password link once (in this response only)."""
    try:
        setup = users.user_password_reset(actor=_actor(request), user_id=user_id)
    except DomainError as exc:
        return error_page(request, exc)
    ctx: dict[str, Any] = {"link": _link(request, setup), "setup": setup}
    if request.htmx:
        # The Credentials card's password line, re-read, out of band: it said "set" after the reset.
        subject = User.objects.get(pk=user_id)
        ctx.update(oob=True, credentials=users.user_credentials(subject))
        return render(request, "console/users/_password_link.html", ctx)
    return render(
        request, "console/users/password.html", {**ctx, "subject": User.objects.get(pk=user_id), "nav": "users"}
    )


@require_POST
@console_login_required
@domain_errors
def user_otp(request: HtmxHttpRequest, user_id: int) -> HttpResponse:
    def change() -> str:
        count = users.user_otp_reset(actor=_actor(request), user_id=user_id)
        return f"OTP reset: {count} device{'s' if count != 1 else ''} removed"

    return _change(request, user_id, change)


class PasswordSetView(auth_views.PasswordResetConfirmView):
    """Choose a password from a set-password link (Django checks the token and hides it from the
    address bar and Referer); the change goes through ``approvals.users`` and is audited."""

    template_name = "console/users/password_set.html"
    success_url = "/accounts/login/?password=set"
    post_reset_login = False

    def get_user(self, uidb64: str) -> Any:
        # Django's token outlives a deactivation (it hashes the password, not is_active): a deactivated
        # account's link reads as not valid (users.user_password_set_by_link refuses it too).
        user = super().get_user(uidb64)
        return user if user is not None and user.is_active else None

    def form_valid(self, form: Any) -> HttpResponse:
        try:
            with transaction.atomic():
                users.user_password_set_by_link(user=form.user, password=form.cleaned_data["new_password1"])
        except DomainError as exc:
            form.add_error("new_password1", exc.message)
            return self.form_invalid(form)
        del self.request.session[auth_views.INTERNAL_RESET_SESSION_TOKEN]
        # The sign-in page then asks only for the password just chosen.
        return redirect(f"{self.success_url}&{urlencode({'username': form.user.get_username()})}")


password_set = PasswordSetView.as_view()
