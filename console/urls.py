from django.conf import settings
from django.urls import URLPattern, URLResolver, include, path

from console.api import api
from console.views import (
    assets,  # /favicon.ico
    audit,
    auth,
    bulk,
    decisions,
    handoffs,
    inbox,
    relay,
    start,
    tasks,
    threads,
    users,
    webhooks,
)
from console.views import comments as comment_views  # Conversation (comments)
from console.views import crons as cron_views  # crons: Delete
from console.views import dashboard as dashboard_views  # team dashboard
from console.views import run_cancel as run_cancel_views
from console.views import store as store_views  # long-term memory store browser
from console.views import time_travel as time_travel_views
from lgplatform.api import api as platform_api

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
    path("webhooks/endpoints/<int:endpoint_id>/rotate", webhooks.endpoint_rotate, name="webhook-endpoint-rotate"),
    path("webhooks/endpoints/<int:endpoint_id>/gates", webhooks.endpoint_gates, name="webhook-endpoint-gates"),
    path("webhooks/endpoints/<int:endpoint_id>/delete", webhooks.endpoint_delete, name="webhook-endpoint-delete"),
    path("webhooks/subscriptions", webhooks.subscription_new, name="webhook-subscription-create"),
    path(
        "webhooks/subscriptions/<int:subscription_id>/deactivate",
        webhooks.subscription_stop,
        name="webhook-subscription-deactivate",
    ),
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
    # hand-offs: reassign, delegate, out-of-office
    path("tasks/<uuid:task_id>/reassign", handoffs.task_reassign, name="task-reassign"),
    path("tasks/<uuid:task_id>/delegate", handoffs.task_delegate, name="task-delegate"),
    path("settings/away", handoffs.away, name="away"),
    # Conversation (comments)
    path("tasks/<uuid:task_id>/comments", comment_views.task_comment, name="task-comment"),
    path("threads/<uuid:thread_id>/comments", comment_views.thread_comment, name="thread-comment"),
    path("comments/<uuid:comment_id>/versions", comment_views.comment_version, name="comment-version"),
    path("dashboard/", dashboard_views.dashboard_page, name="dashboard"),  # team dashboard
    # time travel: fork or replay from a past checkpoint (operators)
    path("threads/<uuid:thread_id>/fork", time_travel_views.thread_fork, name="thread-fork"),
    path("threads/<uuid:thread_id>/replay", time_travel_views.thread_replay, name="thread-replay"),
    # Long-term memory store browser (docs/memory-store.md)
    path("store/", store_views.store_browser, name="store"),
    # Bulk decisions (issue 14)
    path("bulk/", bulk.bulk_start, name="bulk-start"),
    path("bulk/<uuid:bulk_id>/", bulk.bulk_detail, name="bulk"),
    # Crons (client.crons): deleted by the owner or a user administrator, from a thread's or a user's page.
    path("crons/<uuid:cron_id>/delete", cron_views.cron_delete, name="cron-delete"),
    # Cancelling a running run (interrupt / rollback), from the thread page.
    path("threads/<uuid:thread_id>/cancel-run", run_cancel_views.thread_run_cancel, name="thread-run-cancel"),
]

# No /admin/: Django's admin would be a second door to users and permissions, outside the
# permission policy, OTP and the audit trail. User administration is /users/ (docs/users.md).
urlpatterns: list[URLPattern | URLResolver] = [
    path("api/", api.urls),
    path("lg/", platform_api.urls),
    path("", include((console_patterns, "console"))),
    path("favicon.ico", assets.favicon),
]

# A session deleted while its request ran is a sign-out, not a bad request (console/views/errors.py).
handler400 = "console.views.errors.bad_request"

# /static/ is served by WhiteNoise (settings: --- static files ---); /health/live, /health/ready
# and /metrics by console.probes.ProbeMiddleware, before host validation and the HTTPS redirect.

if settings.GATEHOUSE_OIDC_ENABLED:  # single sign-on (console/sso.py), only when configured
    from console import sso

    urlpatterns.append(path("oidc/", include((sso.urlpatterns, "oidc"))))
