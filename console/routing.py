"""Websocket routes. Importing this module marks the process as the web process (see ``console.live``)."""

from django.urls import path, re_path

from console import consumers, live

live.local_delivery_enable()

websocket_urlpatterns = [
    path("ws/inbox/", consumers.InboxConsumer.as_asgi()),
    path("ws/tasks/<uuid:task_id>/", consumers.TaskConsumer.as_asgi()),
    path("ws/threads/", consumers.ThreadsConsumer.as_asgi()),  # the threads list
    path("ws/threads/<uuid:thread_id>/", consumers.ThreadConsumer.as_asgi()),
    path("ws/dashboard/", consumers.DashboardConsumer.as_asgi()),  # the team dashboard
    path("ws/bulk/<uuid:bulk_id>/", consumers.BulkConsumer.as_asgi()),  # bulk decisions (issue 14)
    # Any other path is refused like a page that does not exist (without it Channels' router
    # raised, and daphne answered the handshake with a 500 and logged a traceback).
    re_path(r"", consumers.NoSuchSocket.as_asgi()),
]
