"""A TCP proxy the test can pause: the worker's connections to PostgreSQL hang instead of failing.

That is what a network partition, a saturated link or a stalled NAT does: the
worker's queries are sent, nothing comes back, and after ``resume()`` the bytes
held meanwhile are delivered, late, in order. Killing connections
(``pg_terminate_backend``) fails them at once, which is a different fault.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading


class PausableProxy:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.listener.settimeout(0.2)
        self.port = int(self.listener.getsockname()[1])
        self.flowing = threading.Event()
        self.flowing.set()
        self.closed = threading.Event()
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, name="pg-proxy", daemon=True).start()

    def pause(self) -> None:
        """From now on nothing passes in either direction (connections stay open)."""
        self.flowing.clear()

    def resume(self) -> None:
        self.flowing.set()

    def close(self) -> None:
        self.closed.set()
        self.flowing.set()
        with contextlib.suppress(OSError):
            self.listener.close()
        with self.lock:
            for sock in self.sockets:
                with contextlib.suppress(OSError):
                    sock.close()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.flowing.wait()
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.sockets += [client, server]
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                self.flowing.wait()  # held here while paused: delivered late, never lost
                if self.closed.is_set():
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)


class CuttableProxy:
    """A TCP proxy the test can cut, as Redis going away does: every open connection ends at once (both
    ends see it; ``socket.close`` from another thread does not wake a ``recv``, so nothing would have
    noticed), and every new one is refused (``mode="refuse"``: nothing listens on the port) or accepted and
    reset at once (``"reset"``: a host whose service is restarting, counted in ``resets``).
    ``restore()`` forwards again, on the same port."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.port = 0
        self.mode: str | None = None  # None: forwarding
        self.resets = 0
        self.lock = threading.Lock()
        self.sockets: list[socket.socket] = []
        self._listen()

    def cut(self, mode: str = "refuse") -> None:
        assert mode in ("refuse", "reset"), mode
        self.mode = mode
        if mode == "refuse":
            self._unlisten()
        self._drop_connections()

    def restore(self) -> None:
        if self.mode == "refuse":
            self._listen()
        self.mode = None

    def close(self) -> None:
        self.mode = "closed"
        self._unlisten()
        self._drop_connections()

    def _listen(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        listener.settimeout(0.2)
        self.port = int(listener.getsockname()[1])
        self.listener = listener
        threading.Thread(target=self._accept, args=(listener,), name="redis-proxy", daemon=True).start()

    def _unlisten(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # a listening socket stops listening at once
        with contextlib.suppress(OSError):
            self.listener.close()

    def _drop_connections(self) -> None:
        with self.lock:
            sockets, self.sockets = self.sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes the pumps' recv: the peers see the close now
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while self.listener is listener and self.mode != "closed":
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self.mode is not None:
                if self.mode == "reset":
                    self.resets += 1
                # SO_LINGER 0: the close is a reset, not an orderly end.
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                client.close()
                continue
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.sockets += [client, server]
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)
