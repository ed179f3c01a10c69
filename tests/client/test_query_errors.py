"""dmq.client.query's failures are one line (QueryError), whatever goes wrong: no broker,
a bootstrap list that is not HOST:PORT, a broker that never answers."""

from __future__ import annotations

import socket
import threading

import pytest
from support.cli import closed_port

from dmq.client.query import QueryError, parse_bootstrap, query_records


def test_no_broker_is_one_line() -> None:
    port = closed_port()
    with pytest.raises(QueryError, match=rf"cannot reach the bootstrap broker at 127.0.0.1:{port}: connection refused"):
        query_records(f"127.0.0.1:{port}", "t", key=b"k")


def test_a_bad_bootstrap_list() -> None:
    assert parse_bootstrap("PLAINTEXT://a:1, [::1]:2") == [("a", 1), ("::1", 2)]
    with pytest.raises(QueryError, match="is not HOST:PORT"):
        parse_bootstrap("a:b")
    with pytest.raises(QueryError, match="max_records must be at least 1"):
        query_records("127.0.0.1:1", "t", key=b"k", max_records=0)


def test_a_broker_that_never_answers() -> None:
    """A peer that accepts and stays silent: the timeout, in one line."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    held: list[socket.socket] = []
    threading.Thread(target=lambda: held.append(server.accept()[0]), daemon=True).start()
    port = server.getsockname()[1]
    try:
        with pytest.raises(QueryError, match=r"did not answer within 0.5 s; is it overloaded or stopped\?"):
            query_records(f"127.0.0.1:{port}", "t", key=b"k", timeout=0.5)
    finally:
        for s in held:
            s.close()
        server.close()
