from django.urls import path

websocket_urlpatterns: list[path] = []  # type: ignore[valid-type]
