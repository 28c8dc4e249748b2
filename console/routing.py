"""Websocket routes. Importing this module marks the process as the web process (see ``console.live``)."""

from django.urls import path

from console import consumers, live

live.local_delivery_enable()

websocket_urlpatterns = [
    path("ws/inbox/", consumers.InboxConsumer.as_asgi()),
    path("ws/tasks/<uuid:task_id>/", consumers.TaskConsumer.as_asgi()),
    path("ws/threads/<uuid:thread_id>/", consumers.ThreadConsumer.as_asgi()),
    path("ws/bulk/<uuid:bulk_id>/", consumers.BulkConsumer.as_asgi()),  # bulk decisions (issue 14)
]
