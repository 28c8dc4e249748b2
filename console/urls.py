from django.conf import settings
from django.urls import URLPattern, URLResolver, include, path

from approvals.platform_api import api as platform_api
from console.api import api
from console.views import audit, auth, decisions, inbox, relay, start, tasks, threads, users, webhooks
from console.views import run_cancel as run_cancel_views

console_patterns = [
    path("", inbox.inbox, name="inbox"),
    path("tasks/<uuid:task_id>/", tasks.task_detail, name="task"),
    path("tasks/<uuid:task_id>/live", tasks.task_live, name="task-live"),
    path("tasks/<uuid:task_id>/claim", tasks.task_claim, name="task-claim"),
    path("tasks/<uuid:task_id>/release", tasks.task_release, name="task-release"),
    path("tasks/<uuid:task_id>/decide", tasks.task_decide, name="task-decide"),
    path("threads/", threads.thread_list, name="threads"),
    path("threads/new", start.thread_start, name="thread-start"),
    path("threads/<uuid:thread_id>/", threads.thread_detail, name="thread"),
    path("threads/<uuid:thread_id>/live", threads.thread_live, name="thread-live"),
    path("threads/<uuid:thread_id>/retry", threads.thread_retry, name="thread-retry"),
    path("audit/", audit.audit, name="audit"),
    path("decisions/", decisions.decision_list, name="decisions"),
    path("decisions/<uuid:decision_id>/", decisions.decision_detail, name="decision"),
    path("webhooks/", webhooks.webhook_list, name="webhooks"),
    path("webhooks/endpoints", webhooks.endpoint_create, name="webhook-endpoint-create"),
    path("webhooks/endpoints/<slug:name>/rotate", webhooks.endpoint_rotate, name="webhook-endpoint-rotate"),
    path("webhooks/endpoints/<slug:name>/gates", webhooks.endpoint_gates, name="webhook-endpoint-gates"),
    path("webhooks/endpoints/<slug:name>/delete", webhooks.endpoint_delete, name="webhook-endpoint-delete"),
    path("webhooks/deliveries/<int:delivery_id>/retry", webhooks.delivery_retry, name="webhook-retry"),
    path("users/", users.user_list, name="users"),
    path("users/new", users.user_create, name="user-create"),
    path("users/<int:user_id>/", users.user_detail, name="user"),
    path("users/<int:user_id>/roles", users.user_roles, name="user-roles"),
    path("users/<int:user_id>/assignments", users.user_assignments, name="user-assignments"),
    path("users/<int:user_id>/deactivate", users.user_deactivate, name="user-deactivate"),
    path("users/<int:user_id>/reactivate", users.user_reactivate, name="user-reactivate"),
    path("users/<int:user_id>/password", users.user_password, name="user-password"),
    path("users/<int:user_id>/otp", users.user_otp, name="user-otp"),
    path("accounts/set-password/<uidb64>/<token>/", users.password_set, name="password-set"),
    path("accounts/login/", auth.login, name="login"),
    path("accounts/logout/", auth.logout, name="logout"),
    path("internal/live/", relay.live_relay, name="live-relay"),
    # Cancelling a running run (interrupt / rollback), from the thread page.
    path("threads/<uuid:thread_id>/cancel-run", run_cancel_views.thread_run_cancel, name="thread-run-cancel"),
]

# No /admin/: Django's admin would be a second door to users and permissions, outside the
# permission policy, OTP and the audit trail. User administration is /users/ (docs/users.md).
urlpatterns: list[URLPattern | URLResolver] = [
    path("api/", api.urls),
    path("lg/", platform_api.urls),
    path("", include((console_patterns, "console"))),
]

# /static/ is served by WhiteNoise (settings: --- static files ---); /health/live, /health/ready
# and /metrics by console.health.ProbeMiddleware, before host validation and the HTTPS redirect.

if settings.GATEHOUSE_OIDC_ENABLED:  # single sign-on (console/sso.py), only when configured
    from console import sso

    urlpatterns.append(path("oidc/", include((sso.urlpatterns, "oidc"))))
