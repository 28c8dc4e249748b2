"""kombu's Redis transport, keeping one client per channel instead of building one per command.

kombu's Redis channel builds a new ``redis.Redis`` around its connection pool for every
synchronous command it sends (``Channel.conn_or_acquire``): every task sent, every
acknowledgement, every QoS bookkeeping step. Building one costs ~0.2 ms of CPU (the response
callbacks table it copies), a third of a ``send_task`` on this machine, paid by the web process
on each run it dispatches and by the worker on each message it takes. A ``redis.Redis`` is safe
to share between threads (each command takes a connection from the pool), so the channel keeps
the one it built, for as long as its pool is the same.

Selected in ``console/settings.py`` (``CELERY_BROKER_TRANSPORT``) for ``redis://`` and
``rediss://`` broker URLs; measured in round 21 of docs/performance.md.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis


class Channel(redis.Channel):
    _kept_client: Any = None

    def _create_client(self, asynchronous: bool = False) -> Any:
        if asynchronous:  # the event loop's clients are cached by kombu already (``client``, ``subclient``)
            return super()._create_client(asynchronous=True)  # type: ignore[no-untyped-call]
        kept = self._kept_client
        if kept is None or kept.connection_pool is not self.pool:
            kept = self._kept_client = super()._create_client()  # type: ignore[no-untyped-call]
        return kept


class Transport(redis.Transport):
    Channel = Channel
