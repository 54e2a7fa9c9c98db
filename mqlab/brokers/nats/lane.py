"""A NATS sender's own connection for the compiled lanes (``mqlab._sendpath.Lanes``,
PROTO_NATS; the frames it writes and reads are in mqlab/_sendpath.c): set up here on a
plain socket, then written and read by the compiled loop.

The handshake is nats-py's: the server's INFO, then CONNECT (verbose off, headers and
no_responders on, so that a publish no JetStream server took comes back as a 503 as it
does to nats-py), SUB to the connection's reply inbox ``_INBOX.<random>.>``, and a
PING answered by PONG (the server has the subscription before the first publish). Each
connect goes to the next node of the cluster in turn (any node: JetStream replies come
back through the cluster's routes)."""

from __future__ import annotations

import json
import os
import socket
from importlib import metadata
from typing import Any

from mqlab.errors import DriverError

HANDSHAKE_LINE_MAX = 1 << 20  # the server's INFO is far smaller


def _version() -> str:
    try:
        return metadata.version("mqlab")
    except metadata.PackageNotFoundError:
        return "0"


class LaneConn:
    """One sender's connection: ``sock`` (None until :meth:`connect`), its reply
    ``inbox`` and ``generation`` (one more per connect: the compiled reader starts
    afresh on a new one)."""

    def __init__(self, endpoints: Any, timeout_s: float, name: str):
        self.nodes = [(n.host, n.port) for n in endpoints.nodes]
        self.next_node = int.from_bytes(os.urandom(2), "big") % len(self.nodes)
        self.timeout_s = timeout_s
        self.name = name
        self.sock: socket.socket | None = None
        self.inbox = b""
        self.generation = 0

    def connect(self) -> None:
        """Connect to the next node that answers (each tried once); DriverError naming
        every node's failure if none does."""
        self.close()
        why = []
        for _ in self.nodes:
            host, port = self.nodes[self.next_node]
            self.next_node = (self.next_node + 1) % len(self.nodes)
            try:
                self.sock = self._handshake(host, port)
                self.generation += 1
                return
            except (OSError, DriverError, ValueError) as e:
                why.append(f"{host}:{port}: {e}")
        raise DriverError(f"nats: cannot connect a sender: {'; '.join(why)}")

    def _handshake(self, host: str, port: int) -> socket.socket:
        sock = socket.create_connection((host, port), timeout=self.timeout_s)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            lines = _Lines(sock)
            op, info = lines.next()
            if op != b"INFO":
                raise DriverError(f"the server did not begin with INFO: {op!r}")
            server = json.loads(info)
            if server.get("tls_required") or server.get("auth_required"):
                raise DriverError("the server asks for TLS or credentials (not supported)")
            self.inbox = b"_INBOX." + os.urandom(11).hex().encode()
            connect = {
                "verbose": False,
                "pedantic": False,
                "tls_required": False,
                "name": self.name,
                "lang": "python3",
                "version": _version(),
                "protocol": 1,
                "headers": True,
                "no_responders": True,
            }
            sock.sendall(
                b"CONNECT %s\r\nSUB %s.> 1\r\nPING\r\n"
                % (json.dumps(connect, separators=(",", ":")).encode(), self.inbox)
            )
            ponged = False
            while not ponged or lines.buf:  # the compiled reader starts at a line's start
                op, rest = lines.next()
                if op == b"PONG":
                    ponged = True
                elif op == b"PING":
                    sock.sendall(b"PONG\r\n")
                elif op == b"-ERR":
                    raise DriverError(f"the server said -ERR {rest.decode(errors='replace')}")
                elif op not in (b"+OK", b"INFO"):
                    raise DriverError(f"unexpected {op!r} before PONG")
            sock.settimeout(None)
            sock.setblocking(False)
            return sock
        except BaseException:
            sock.close()
            raise

    @property
    def fd(self) -> int:
        return self.sock.fileno() if self.sock is not None else -1

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


class _Lines:
    """The server's protocol lines during the handshake, read off the socket without
    reading past the last whole line it sent."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buf = b""

    def next(self) -> tuple[bytes, bytes]:
        """The next line: (its operation, upper case; the rest)."""
        while b"\r\n" not in self.buf:
            if len(self.buf) > HANDSHAKE_LINE_MAX:
                raise DriverError("a line too long")
            data = self.sock.recv(65536)
            if not data:
                raise DriverError("the server closed the connection")
            self.buf += data
        line, self.buf = self.buf.split(b"\r\n", 1)
        op, _, rest = line.partition(b" ")
        return op.upper(), rest
