"""The half-message checker polls with CheckTransactions v1 (answers naming their
transaction's start time) and falls back to v0 against a coordinator that closes the
connection on v1, as a broker from before v1 does with a version it does not know."""

from __future__ import annotations

import datetime
import socket
import struct
import threading
from types import SimpleNamespace
from typing import Any

from kio.schema.errors import ErrorCode

from dmq.client.transactions import _Checker
from dmq.protocol.codec import decode_request, encode_response, make, peek_header, response_module
from dmq.protocol.extensions import CHECK_TRANSACTIONS_KEY, CheckTransactionsResponse

NO_THROTTLE = datetime.timedelta(0)


class OldCoordinator:
    """A broker that knows CheckTransactions v0 only: it answers FindCoordinator with
    itself and closes the connection on any later version."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.polls: list[tuple[int, Any]] = []  # (version, request)
        self.closed_on: list[int] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        with conn:
            while True:
                head = conn.recv(4, socket.MSG_WAITALL)
                if len(head) < 4:
                    return
                frame = conn.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
                key, version, corr = peek_header(frame)
                if key == CHECK_TRANSACTIONS_KEY and version > 0:
                    self.closed_on.append(version)
                    return
                _, request = decode_request(frame, key, version)
                if key == 10:
                    schema = response_module(10, version)
                    response = make(schema.FindCoordinatorResponse, throttle_time=NO_THROTTLE, coordinators=(
                        make(schema.Coordinator, key=request.coordinator_keys[0], node_id=1, host="127.0.0.1",
                             port=self.port, error_code=ErrorCode.none, error_message=None),))
                else:
                    self.polls.append((version, request))
                    response = make(CheckTransactionsResponse, throttle_time=NO_THROTTLE,
                                    error_code=ErrorCode.none, transactions=())
                data = encode_response(corr, key, response)
                assert isinstance(data, bytes)  # no records in these responses
                conn.sendall(data)

    def close(self) -> None:
        self.server.close()


def test_a_coordinator_without_v1_is_polled_with_v0_and_gets_the_answers() -> None:
    old = OldCoordinator()
    producer = SimpleNamespace(group="orders", bootstrap=[("127.0.0.1", old.port)],
                               transactional_id="__dmq_half/orders/me")
    checker = _Checker(producer, lambda m: 0, 100, 1000, {})  # type: ignore[arg-type, return-value]
    checker.answers = [("__dmq_half/orders/gone", 7, 0, 1_795_000_000_000, 1)]
    try:
        try:
            checker._poll()
            raise AssertionError("the v1 poll was answered")
        except ConnectionError:
            checker._disconnect()  # as the checker's loop does on a failed poll
        assert old.closed_on == [1] and checker.answers  # nothing answered yet: kept
        assert checker._poll() == []
        version, request = old.polls[-1]
        assert version == 0
        assert [(a.transactional_id, a.producer_id, a.producer_epoch, a.resolution) for a in request.answers] == \
            [("__dmq_half/orders/gone", 7, 0, 1)]
        assert checker.answers == []
        checker._poll()  # and stays on v0
        assert old.closed_on == [1] and old.polls[-1][0] == 0
    finally:
        checker._disconnect()
        old.close()
