"""A loopback TCP proxy in the test process whose link can be cut (connections closed, new ones refused)."""

from __future__ import annotations

import socket
import threading

from support.broker import free_port


class TcpProxy:
    """Forwards 127.0.0.1:<port> to ``target``; ``cut()`` drops every connection and refuses new ones."""

    def __init__(self, target_host: str, target_port: int, port: int | None = None) -> None:
        self.target = (target_host, target_port)
        self.port = port or free_port()
        self._cut = threading.Event()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None
        # When set, connections accepted from now on forward this many length-prefixed frames
        # from the client (ZooKeeper's and Kafka's framing), and drop on the next one.
        self.drop_after_client_frames: int | None = None
        # When set, connections accepted from now on are held open and never answered (a
        # server that accepted the TCP connection but does not serve yet).
        self.hold_new = False
        self._held: list[socket.socket] = []

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> TcpProxy:
        self._listen()
        return self

    def _listen(self) -> None:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port))
        s.listen(64)
        s.settimeout(0.2)
        self._listener = s
        self._thread = threading.Thread(target=self._accept, args=(s,), daemon=True)
        self._thread.start()

    def _accept(self, listener: socket.socket) -> None:
        while not self._closed.is_set() and not self._cut.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self.hold_new:
                with self._lock:
                    self._held.append(client)
                continue
            try:
                upstream = socket.create_connection(self.target, 2)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets.update((client, upstream))
            limit = self.drop_after_client_frames
            threading.Thread(target=self._pipe, args=(client, upstream, limit), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, frame_limit: int | None = None) -> None:
        try:
            src.settimeout(None)
            pending = b""  # bytes of a frame not yet whole (counted only with a frame_limit)
            frames = 0
            while True:
                data = src.recv(65536)
                if not data or self._cut.is_set():
                    break
                if frame_limit is not None:
                    pending += data
                    forward = 0
                    while len(pending) - forward >= 4:
                        size = 4 + int.from_bytes(pending[forward:forward + 4], "big")
                        if frames == frame_limit:
                            if forward:
                                dst.sendall(pending[:forward])
                            return  # the frame after the limit: drop the connection
                        if len(pending) - forward < size:
                            break
                        forward += size
                        frames += 1
                    if forward:
                        dst.sendall(pending[:forward])
                    pending = pending[forward:]
                    continue
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.close()
                except OSError:
                    pass

    def _drop_all(self) -> None:
        with self._lock:
            socks, self._sockets = self._sockets, set()
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                s.close()
            except OSError:
                pass

    def reset(self) -> None:
        """Close every proxied connection; new ones are still accepted."""
        self._drop_all()

    def cut(self) -> None:
        """Close every proxied connection and stop listening: new connections are refused."""
        self._cut.set()
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        if self._thread is not None:
            self._thread.join(2)
        self._drop_all()

    def heal(self) -> None:
        if not self._cut.is_set():
            return
        self._cut.clear()
        self._listen()

    def close(self) -> None:
        self._closed.set()
        self.cut()
        with self._lock:
            held, self._held = self._held, []
        for s in held:
            s.close()
