"""TCP proxies between a process under test and PostgreSQL or Redis, for the network's faults.

``PausableProxy`` holds every byte (a partition, a saturated link, a stalled NAT: queries are sent, nothing
comes back, and after ``resume()`` what was held arrives late, in order). ``CuttableProxy`` ends every
connection at once (the service went away: both ends see it) and refuses or resets new ones until
``restore()``. Killing connections server-side (``pg_terminate_backend``) is a third fault, not one of these.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading


class _Relay:
    """Accepts on 127.0.0.1:``port`` and relays each connection to ``upstream``, a pump thread per direction."""

    def __init__(self, upstream: tuple[str, int], name: str) -> None:
        self.upstream = upstream
        self.name = name
        self.port = 0
        self.lock = threading.Lock()
        self.sockets: list[socket.socket] = []
        self.listener: socket.socket | None = None

    def _listen(self) -> None:
        """Listen on ``self.port`` (any free port the first time) and accept in a thread of its own."""
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        listener.settimeout(0.2)
        self.port = int(listener.getsockname()[1])
        self.listener = listener  # before the thread starts: it accepts while this is its listener
        threading.Thread(target=self._accept, args=(listener,), name=self.name, daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while self._accepting(listener):
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._admit(client)

    def _accepting(self, listener: socket.socket) -> bool:
        raise NotImplementedError

    def _admit(self, client: socket.socket) -> None:
        self._relay(client)

    def _forwarding(self) -> bool:
        raise NotImplementedError

    def _relay(self, client: socket.socket) -> None:
        try:
            server = socket.create_connection(self.upstream)
        except OSError:
            client.close()
            return
        with self.lock:
            # Checked under the lock that a cut takes: a cut between the accept and here would not see this
            # pair, which then carried a checkout through the outage (seen on a loaded machine).
            if not self._forwarding():
                for sock in (client, server):
                    with contextlib.suppress(OSError):
                        sock.close()
                return
            self.sockets += [client, server]
        for src, dst in ((client, server), (server, client)):
            threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                if not self._deliver(dst, data):
                    break
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

    def _deliver(self, dst: socket.socket, data: bytes) -> bool:
        dst.sendall(data)
        return True

    def _drop_connections(self) -> None:
        with self.lock:
            sockets, self.sockets = self.sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes the pumps' recv (a close alone does not): peers see it now
            with contextlib.suppress(OSError):
                sock.close()


class PausableProxy(_Relay):
    """``pause()``: from then on nothing passes in either direction, connections stay open; ``resume()``
    delivers what was held, late, never lost."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        super().__init__(upstream, "pausable-proxy")
        self.flowing = threading.Event()
        self.flowing.set()
        self.closed = threading.Event()
        self._listen()

    def pause(self) -> None:
        self.flowing.clear()

    def resume(self) -> None:
        self.flowing.set()

    def close(self) -> None:
        with self.lock:
            self.closed.set()
        self.flowing.set()
        with contextlib.suppress(OSError):
            self.listener.close()
        self._drop_connections()

    def _accepting(self, listener: socket.socket) -> bool:
        return not self.closed.is_set()

    def _admit(self, client: socket.socket) -> None:
        self.flowing.wait()  # a connection made while paused is held too
        self._relay(client)

    def _forwarding(self) -> bool:
        return not self.closed.is_set()

    def _deliver(self, dst: socket.socket, data: bytes) -> bool:
        self.flowing.wait()  # held here while paused
        if self.closed.is_set():
            return False
        dst.sendall(data)
        return True


class CuttableProxy(_Relay):
    """``cut()`` ends every open connection at once, as a service going away does, and from then on refuses
    new ones (``mode="refuse"``: nothing listens on the port) or accepts and resets them at once
    (``"reset"``: a host whose service is restarting; counted in ``resets``). ``restore()`` forwards again,
    on the same port.

    ``"reset"`` keeps the port bound through the outage. ``"refuse"`` frees it, and another process binding
    any free port may take it meanwhile (then ``restore()`` fails to bind, loudly): use ``"refuse"`` only
    where a refused connect is the fault under test."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        super().__init__(upstream, "cuttable-proxy")
        self.mode: str | None = None  # None: forwarding
        self.resets = 0
        self._listen()

    def cut(self, mode: str = "reset") -> None:
        if mode not in ("refuse", "reset"):
            raise ValueError(mode)
        with self.lock:
            self.mode = mode
        if mode == "refuse":
            self._unlisten()
        self._drop_connections()

    def restore(self) -> None:
        if self.mode == "refuse":
            self._listen()
        with self.lock:
            self.mode = None

    def close(self) -> None:
        with self.lock:
            self.mode = "closed"
        self._unlisten()
        self._drop_connections()

    def _unlisten(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # a listening socket stops listening at once
        with contextlib.suppress(OSError):
            self.listener.close()

    def _accepting(self, listener: socket.socket) -> bool:
        return self.listener is listener and self.mode != "closed"

    def _admit(self, client: socket.socket) -> None:
        if self._forwarding():
            self._relay(client)
            return
        if self.mode == "reset":
            self.resets += 1
        # SO_LINGER 0: the close is a reset, not an orderly end.
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()

    def _forwarding(self) -> bool:
        return self.mode is None
