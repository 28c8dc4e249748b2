"""``make run`` checks its ports before it starts anything (console.embedded.port_free), as the servers
will bind them: stopping it and starting it again at once works, while a port someone listens on is
refused. Before, the check bound without SO_REUSEADDR, and a connection the stopped server had
closed (its side waits in TIME_WAIT on the port for a minute) made it say "port 8000 is in use"."""

from __future__ import annotations

import socket

from console.embedded import port_free


def _listener() -> socket.socket:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as daphne's and the bank's
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    return listener


def test_a_port_the_last_run_closed_connections_on_is_free_to_start_on() -> None:
    listener = _listener()
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    served, _ = listener.accept()
    served.close()  # the server closes first (as a stopping one does): its side waits in TIME_WAIT
    assert client.recv(1) == b""
    client.close()
    listener.close()
    assert port_free(port)


def test_a_port_someone_listens_on_is_in_use() -> None:
    with _listener() as listener:
        assert not port_free(listener.getsockname()[1])
