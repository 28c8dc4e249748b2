"""Live pages while Redis, which carries their events, is away (the channel layer: console/channel_layer.py).

Redis is reached through a proxy the test cuts (tests/faults/proxy.py): the machine's Redis is shared and
is never stopped. Events are still published straight to Redis (``console.live``'s publisher): what the
outage cuts is the web process's subscription, as when the web process loses its link to Redis.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from channels.layers import get_channel_layer
from django.conf import settings
from django.test import override_settings
from django.utils.module_loading import import_string

from console import consumers, live
from tests.conftest import scaled, wait_for
from tests.console.test_live import ORIGIN, Socket, _cookie, _emit, _sockets_closed, loop  # noqa: F401 (fixtures)
from tests.factories import task_make
from tests.faults.proxy import CuttableProxy, PausableProxy

pytestmark = pytest.mark.usefixtures("live_db")


@pytest.fixture
def proxy() -> Iterator[CuttableProxy]:
    parts = urlsplit(settings.REDIS_URL)
    proxy = CuttableProxy((parts.hostname or "127.0.0.1", parts.port or 6379))
    yield proxy
    proxy.close()


def _layers_through(proxy: CuttableProxy | PausableProxy) -> dict[str, Any]:
    """``settings.CHANNEL_LAYERS`` (its backend and prefix), with Redis reached through ``proxy``."""
    config = settings.CHANNEL_LAYERS["default"]
    path = urlsplit(settings.REDIS_URL).path or "/0"
    hosts = [f"redis://127.0.0.1:{proxy.port}{path}"]
    return {"default": {**config, "CONFIG": {**config.get("CONFIG", {}), "hosts": hosts}}}


async def _until(predicate: Callable[[], Any], *, timeout: float, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + scaled(timeout)
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {scaled(timeout)}s waiting for {what}")
        await asyncio.sleep(0.05)


def _layer_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    """What the channel layer (and the Redis driver under it) logged at INFO and above."""
    names = ("channels_redis", "console.channel_layer", "redis")
    return [
        (r.levelname, r.getMessage()) for r in caplog.records if r.levelno >= logging.INFO and r.name.startswith(names)
    ]


def test_a_redis_outage_under_the_channel_layer_is_one_warning_and_its_end_one_info(proxy, caplog):
    """channels_redis's receive loop logged ERROR with a traceback about once a second of an outage (each
    reconnection attempt): one WARNING when it starts, one INFO when it ends (docs/operations.md)."""
    caplog.set_level(logging.INFO)
    config = _layers_through(proxy)["default"]
    layer = import_string(config["BACKEND"])(**config["CONFIG"])
    group = f"outage-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        channel = await layer.new_channel()
        await layer.group_add(group, channel)
        assert _layer_lines(caplog) == []

        # Redis restarting: connections are accepted, then reset. Three attempts to reconnect, one line.
        proxy.cut("reset")
        await _until(lambda: proxy.resets >= 3, timeout=10, what="the layer to try Redis three times")
        lines = _layer_lines(caplog)
        assert [level for level, _ in lines] == ["WARNING"], lines
        assert "live updates paused" in lines[0][1] and f":{proxy.port}" in lines[0][1]

        proxy.restore()
        await _until(lambda: len(_layer_lines(caplog)) > 1, timeout=10, what="the outage's end to be logged")
        lines = _layer_lines(caplog)
        assert [level for level, _ in lines] == ["WARNING", "INFO"], lines
        assert "live updates resumed" in lines[1][1]

        # The layer works again: a new subscription hears the group.
        again = await layer.new_channel()
        await layer.group_add(group, again)
        await layer.group_send(group, {"type": "test.hello"})
        assert (await asyncio.wait_for(layer.receive(again), scaled(5)))["type"] == "test.hello"
        await layer.flush()

    asyncio.run(scenario())


def test_a_consumer_s_channel_is_told_when_its_subscription_is_lost(proxy):
    config = _layers_through(proxy)["default"]
    layer = import_string(config["BACKEND"])(**config["CONFIG"])

    async def scenario() -> None:
        channel = await layer.new_channel()
        await layer.group_add(f"lost-{uuid.uuid4().hex[:8]}", channel)
        proxy.cut("refuse")
        message = await asyncio.wait_for(layer.receive(channel), scaled(5))
        assert message == {"type": "live.bus_lost"}
        await layer.flush()

    asyncio.run(scenario())


def test_a_link_that_drops_everything_is_lost_after_an_unanswered_ping(caplog, monkeypatch):
    """A partition fails nothing: the subscriber connection stayed open and silent, its pages "live" and deaf.
    Pinged when silent, it is lost when the PONG does not come back."""
    from console import channel_layer

    monkeypatch.setattr(channel_layer, "KEEPALIVE_SECONDS", 0.3)
    caplog.set_level(logging.INFO)
    parts = urlsplit(settings.REDIS_URL)
    proxy = PausableProxy((parts.hostname or "127.0.0.1", parts.port or 6379))
    config = _layers_through(proxy)["default"]
    layer = import_string(config["BACKEND"])(**config["CONFIG"])

    async def scenario() -> None:
        channel = await layer.new_channel()
        await layer.group_add(f"silent-{uuid.uuid4().hex[:8]}", channel)
        proxy.pause()
        assert await asyncio.wait_for(layer.receive(channel), scaled(5)) == {"type": "live.bus_lost"}
        assert [level for level, _ in _layer_lines(caplog)] == ["WARNING"]
        proxy.resume()
        await _until(lambda: len(_layer_lines(caplog)) > 1, timeout=15, what="the outage's end to be logged")
        assert [level for level, _ in _layer_lines(caplog)] == ["WARNING", "INFO"]
        await layer.flush()

    try:
        asyncio.run(scenario())
    finally:
        proxy.close()


def _on(event_loop: asyncio.AbstractEventLoop, call: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run_coroutine_threadsafe(call(), event_loop).result(scaled(10))


def test_an_open_page_is_told_when_redis_goes_and_catches_up_when_it_is_back(personas, loop, proxy):  # noqa: F811
    """The inbox's socket stayed open and "live" through a Redis outage while its events were lost: it is
    closed with 4503 (the page says live updates paused and reconnects); a page connecting meanwhile is
    refused cleanly (no error, no hang); once Redis is back a page connects, catches up and hears events."""
    live._publisher_get()  # publishes straight to Redis, as it did before the layer was redirected
    marker = uuid.uuid4().hex[:8]
    path = f"/ws/inbox/?q={marker}"
    headers = [ORIGIN, _cookie(personas["loan_reviewer"])]
    with override_settings(CHANNEL_LAYERS=_layers_through(proxy)):
        socket = Socket(loop, path, headers)
        assert socket.connect()[0]
        assert 'id="inbox-results"' in socket.receive()

        proxy.cut("refuse")
        closed = socket.output()  # within 5 s (scaled): the layer reads its connection every 0.1 s
        assert closed == {"type": "websocket.close", "code": consumers.CLOSE_BUS_LOST}

        # A page that (re)connects now is refused, promptly and without an error (a path no page opens too).
        assert Socket(loop, path, headers).connect() == (False, consumers.CLOSE_BUS_LOST)
        assert Socket(loop, "/ws/nope/", headers).connect() == (False, consumers.CLOSE_BUS_LOST)

        loan = task_make(metadata={"case": marker})  # opened during the outage: its event is lost
        live.publisher_flush()
        proxy.restore()

        def reconnected() -> Socket | None:
            page = Socket(loop, path, headers)
            if page.connect()[0]:
                return page
            page.close()
            return None

        page = wait_for(reconnected, timeout=10, interval=0.2, what="a page to connect once Redis is back")
        assert f'data-task-id="{loan.pk}"' in page.receive()  # the render on connect catches up
        later = task_make(metadata={"case": marker})
        _emit("loan_approval", later.thread_id)
        update = page.receive()
        while f'data-task-id="{later.pk}"' not in update:  # the task's own events may come first
            update = page.receive()
        page.close()
        _on(loop, get_channel_layer().flush)


def test_a_redis_outage_under_the_publisher_is_one_warning_and_its_end_one_info(proxy, caplog):
    """The publisher (in every web and worker process) logged a WARNING with its exception for every batch it
    could not send, for as long as Redis was away: one WARNING when events are first lost, one INFO counting
    them once they are delivered again."""
    caplog.set_level(logging.INFO, logger="console.live")
    event = {"type": "live.event", "action": "task.opened", "graph": "outage", "thread": str(uuid.uuid4())}

    def lines() -> list[tuple[str, str]]:
        return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "console.live"]

    with override_settings(CHANNEL_LAYERS=_layers_through(proxy)):
        publisher = live._Publisher()
        publisher.put(event)
        assert publisher.flush(scaled(5))  # the thread has built its layer, through the proxy
    try:
        assert lines() == []
        proxy.cut("refuse")
        for _ in range(4):  # four batches lost, each flushed on its own
            publisher.put(event)
            assert publisher.flush(scaled(15))
        assert [level for level, _ in lines()] == ["WARNING"], lines()
        assert "live events not delivered" in lines()[0][1]

        proxy.restore()
        publisher.put(event)
        assert publisher.flush(scaled(15))
        assert [level for level, _ in lines()] == ["WARNING", "INFO"], lines()
        assert "live events delivered again" in lines()[1][1] and "4 live events were lost" in lines()[1][1]
    finally:
        publisher.close(scaled(5))
