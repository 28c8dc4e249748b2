"""The broker's Redis transport keeps one client per channel, and still moves messages as kombu's does.

Real Redis (the suite's database); nothing of kombu or redis-py is replaced.
"""

from __future__ import annotations

import uuid

import redis
from django.conf import settings
from kombu import Connection

from console.redis_transport import Transport
from tests.conftest import scaled


def _connection() -> Connection:
    return Connection(settings.CELERY_BROKER_URL, transport=Transport)


def test_production_settings_use_it_for_a_redis_broker():
    assert settings.CELERY_BROKER_URL.startswith("redis://")
    assert settings.CELERY_BROKER_TRANSPORT == "console.redis_transport:Transport"


def test_a_channel_sends_its_commands_through_one_client_until_its_pool_changes(monkeypatch):
    built: list[redis.Redis] = []
    original = redis.Redis.__init__

    def counted(self, *args, **kwargs):
        built.append(self)
        original(self, *args, **kwargs)

    queue = f"transport-test-{uuid.uuid4().hex[:8]}"
    with _connection() as conn:
        channel = conn.default_channel
        simple = conn.SimpleQueue(queue, channel=channel)
        try:
            monkeypatch.setattr(redis.Redis, "__init__", counted)
            for i in range(5):
                simple.put({"n": i})
            got = []
            for _ in range(5):
                message = simple.get(timeout=scaled(5))
                got.append(message.payload["n"])
                message.ack()
            assert sorted(got) == [0, 1, 2, 3, 4]
            assert len(built) <= 1  # kombu's own channel builds one per command: 20 here
            kept = channel._create_client()
            assert channel._create_client() is kept

            channel._pool = None  # the pool rebuilt (as after a reconnect): a client on the new one
            fresh = channel._create_client()
            assert fresh is not kept and fresh.connection_pool is channel.pool
        finally:
            monkeypatch.undo()
            simple.queue.delete()
            simple.close()


def test_the_workers_and_webs_broker_connections_give_up_connecting_after_a_bound():
    """A broker host dropping packets held each dispatch (in the web request that queued it) for ~135 s."""
    from console.celery import app

    with app.connection_for_write() as conn:
        kwargs = conn.default_channel.client.connection_pool.connection_kwargs
    assert kwargs["socket_connect_timeout"] == settings.CELERY_BROKER_TRANSPORT_OPTIONS["socket_connect_timeout"] == 3
