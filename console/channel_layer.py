"""The Redis pub/sub channel layer, told what to do when it loses Redis.

``channels_redis.pubsub`` (4.3) keeps one subscriber connection per shard and reads it in a loop
(``RedisSingleShardConnection._do_receiving``). When Redis goes away that loop logs
``Unexpected exception in receive task`` at ERROR with a traceback and tries again a second later,
every second of the outage, and nobody else hears of it: the consumers' subscriptions are dead, the
browsers' sockets to daphne stay open, and the pages keep saying "live" while their events are lost.

This layer keeps the library's naming, sharding, serialisation and publishing; on its shards:

* the first failure of an outage is one WARNING (``live updates paused: …``), its end one INFO
  (``live updates resumed: …``); the attempts in between are DEBUG. Each failure is a connection
  attempt, once a second at most.
* every consumer of this process whose channel or groups live on the lost shard receives
  ``{"type": BUS_LOST}``: ``console.consumers.LiveConsumer`` closes its socket with 4503, and the page
  says so and reconnects; a fresh connect re-renders it, which is how it catches up. The shard then
  forgets its subscriptions (the connection that held them is gone), so a consumer leaving during the
  outage unsubscribes nothing, and a reconnect subscribes afresh.
* a subscription that cannot be made (a page connecting during the outage) raises one of
  ``BUS_ERRORS``, leaving nothing behind and logging nothing: the consumer refuses the socket, and the
  page's socket retries with its backoff; the readiness check reports its own failure. The outage is
  logged when subscriptions are lost: when live pages stop hearing.
* an outage is one per host and process, whichever event loop meets it: the readiness check's
  channel-layer probe runs on a loop (and a layer) of its own per probe.
* a subscriber connection silent for ``KEEPALIVE_SECONDS`` is pinged, and lost when the PONG has not
  come back ``KEEPALIVE_SECONDS`` later: a link that drops packets raises nothing, and the library's
  loop waited on it for ever.
* while the shard is down and nothing is subscribed, the loop pings Redis once a second, so the end
  of the outage is logged when it ends, not when the next page happens to connect.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from channels_redis.pubsub import RedisPubSubChannelLayer, RedisPubSubLoopLayer, RedisSingleShardConnection
from channels_redis.utils import _close_redis, _wrap_close
from redis.exceptions import RedisError

from runtime.retry import exception_text

log = logging.getLogger(__name__)

BUS_LOST = "live.bus_lost"  # the message type a consumer receives when its subscription was lost
RETRY_SECONDS = 1.0  # between two connection attempts of a shard that lost Redis
# A link that drops packets (a partition, a dead NAT entry) fails nothing: the subscriber would wait for ever.
# A connection silent this long is pinged, and lost when the PONG has not come back this long after.
KEEPALIVE_SECONDS = 5.0
# What losing Redis raises: redis-py's ConnectionError/TimeoutError, or the socket's own error. A subscription
# that cannot be made raises one of these (kept as the driver raised it: the readiness check names it).
BUS_ERRORS = (RedisError, OSError)


class PubSubChannelLayer(RedisPubSubChannelLayer):
    """``channels_redis.pubsub.RedisPubSubChannelLayer`` whose per-loop layers use ``_Shard`` (module doc)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.outages: dict[str, float] = {}  # host → monotonic time of the outage's first failure

    def _get_layer(self) -> RedisPubSubLoopLayer:
        # The library's own method, building this module's loop layer.
        loop = asyncio.get_running_loop()
        try:
            layer: RedisPubSubLoopLayer = self._layers[loop]
        except KeyError:
            layer = _LoopLayer(*self._args, **self._kwargs, channel_layer=self)
            self._layers[loop] = layer
            _wrap_close(self, loop)
        return layer


class _LoopLayer(RedisPubSubLoopLayer):
    _shards: list[_Shard]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._shards = [_Shard(shard.host, self) for shard in self._shards]

    async def _subscribe_to_channel(self, channel: str) -> None:
        try:
            await super()._subscribe_to_channel(channel)
        except BUS_ERRORS:
            self.channels.pop(channel, None)  # the library keeps the queue of a channel it never subscribed
            raise

    async def group_add(self, group: str, channel: str) -> None:
        try:
            await super().group_add(group, channel)
        except BUS_ERRORS:
            # ...and the membership: nothing would ever discard it, the consumer never having joined.
            members = self.groups.get(self._get_group_channel_name(group))
            if members is not None:
                members.discard(channel)
                if not members:
                    del self.groups[self._get_group_channel_name(group)]
            raise

    def channels_on(self, shard: _Shard) -> set[str]:
        """This loop's channels that hear something through ``shard``: their own, or a group's."""
        heard = {name for name in self.channels if self._get_shard(name) is shard}
        for group, members in self.groups.items():
            if self._get_shard(group) is shard:
                heard |= members
        return heard & set(self.channels)


class _Shard(RedisSingleShardConnection):
    channel_layer: _LoopLayer
    _redis: Any  # the library's, untyped: a redis.asyncio.Redis, or None until used
    _pubsub: Any
    _subscribed_to: set[str]

    def __init__(self, host: dict[str, Any], channel_layer: _LoopLayer) -> None:
        super().__init__(host, channel_layer)
        self._where = _where(host)
        self._outages: dict[str, float] = channel_layer.channel_layer.outages  # shared by the layer's loops
        self._heard_at = 0.0  # loop time the subscriber connection last answered
        self._pinged_at: float | None = None  # loop time of a PING not answered yet

    async def subscribe(self, channel: str) -> None:
        # A subscription that cannot be made is the caller's failure to report (a page's socket is refused, the
        # readiness check names it): not logged here. Subscriptions it held are the receive loop's to lose.
        await super().subscribe(channel)
        self._back()

    async def unsubscribe(self, channel: str) -> None:
        try:
            await super().unsubscribe(channel)
        except BUS_ERRORS as exc:
            # The subscription went with the connection; the library raised from a consumer's disconnect.
            await self._lost(exc)

    async def _do_receiving(self) -> None:
        while True:
            try:
                if self._pubsub is not None and self._pubsub.subscribed:
                    message = await self._pubsub.get_message(ignore_subscribe_messages=True, timeout=0.1)
                    self._back()
                    self._receive_message(message)
                    await self._keepalive(heard=message is not None)
                elif self._where in self._outages:
                    async with self._lock:
                        self._ensure_redis()
                        await self._redis.ping()
                    self._back()
                else:
                    await asyncio.sleep(0.1)
            except (asyncio.CancelledError, GeneratorExit):
                raise
            except Exception as exc:  # noqa: BLE001 - a dead loop would leave every page deaf for good
                await self._lost(exc)
                await asyncio.sleep(RETRY_SECONDS)

    async def _keepalive(self, *, heard: bool) -> None:
        now = asyncio.get_running_loop().time()
        if heard or not self._heard_at:
            self._heard_at, self._pinged_at = now, None
        elif self._pinged_at is not None and now - self._pinged_at > KEEPALIVE_SECONDS:
            raise ConnectionError(f"no answer to PING in {KEEPALIVE_SECONDS:g} s")
        elif self._pinged_at is None and now - self._heard_at > KEEPALIVE_SECONDS:
            self._pinged_at = now
            await self._pubsub.ping()  # its PONG is read as a message, which counts as heard

    async def _lost(self, exc: BaseException) -> None:
        """Redis is unreachable: log it once per outage, tell this shard's consumers, forget the connection."""
        if self._where not in self._outages:
            self._outages[self._where] = time.monotonic()
            log.warning(
                "live updates paused: the channel layer lost Redis at %s (%s); open pages are told and reconnect",
                self._where,
                exception_text(exc),
            )
        else:
            log.debug("channel layer: Redis at %s still unreachable (%s)", self._where, exception_text(exc))
        lost = self.channel_layer.channel_layer.serialize({"type": BUS_LOST})
        for name in self.channel_layer.channels_on(self):
            self.channel_layer.channels[name].put_nowait(lost)
        async with self._lock:
            redis, self._redis, self._pubsub = self._redis, None, None
            self._subscribed_to = set()
            self._heard_at, self._pinged_at = 0.0, None
        if redis is not None:
            with contextlib.suppress(Exception):  # its connections are broken: closing may fail too
                await _close_redis(redis)

    def _back(self) -> None:
        since = self._outages.pop(self._where, None)
        if since is None:
            return
        log.info(
            "live updates resumed: the channel layer reached Redis at %s again after %.1f s",
            self._where,
            time.monotonic() - since,
        )


def _where(host: dict[str, Any]) -> str:
    """The shard's host for a log line, without a password that its URL may carry."""
    from urllib.parse import urlsplit

    address = host.get("address")
    if isinstance(address, str):
        parts = urlsplit(address)
        return f"{parts.hostname}:{parts.port or 6379}"
    return str(host.get("master_name") or host.get("host") or "?")
