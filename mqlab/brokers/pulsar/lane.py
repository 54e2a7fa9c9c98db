"""A Pulsar sender's own connection for the compiled lanes (``mqlab._sendpath.Lanes``,
PROTO_PULSAR; the frames the lanes write and read are in mqlab/_pulsarwire.h): set up
here on a plain socket, then written and read by the compiled loop.

The handshake is the binary protocol's, as pulsar-client does it: CONNECT (answered by
CONNECTED), a LOOKUP of the topic on any broker of the cluster (answered by the broker
that owns the topic, or by a redirect to another broker to ask, followed; the lookup is
then repeated as ``authoritative``), a connection to the owner (the same one when it is
the broker asked), and PRODUCER (answered by PRODUCER_SUCCESS with the producer's name).
Non-batching, as the driver's pulsar-client producers: every message its own entry, so
every receipt confirms one persisted message. A PING during the handshake is answered.
Each connect starts its lookups at the next broker of the cluster in turn.

Field numbers and command types are PulsarApi.proto's (apache/pulsar,
pulsar-common/src/main/proto): a message of protobuf is written and read here with its
varints and length-delimited fields, the only wire types these commands use.
"""

from __future__ import annotations

import os
import socket
import struct
import urllib.parse
from importlib import metadata
from typing import Any

from mqlab.errors import DriverError

# BaseCommand types (each command in the BaseCommand field of the same number)
CONNECT, CONNECTED, PRODUCER, ERROR, PRODUCER_SUCCESS = 2, 3, 5, 14, 17
PING, PONG, LOOKUP, LOOKUP_RESPONSE = 18, 19, 23, 24
LOOKUP_REDIRECT, LOOKUP_CONNECT, LOOKUP_FAILED = 0, 1, 2
PROTOCOL_VERSION = 12  # the binary lookup, checksums, PING/PONG: all this lane uses
FRAME_MAX = 5 * 1024 * 1024 + 1024  # the broker's default maxMessageSize and headroom
LOOKUP_HOPS = 8  # redirects followed before giving up
PRODUCER_ID = 1  # the connection's one producer


def _version() -> str:
    try:
        return metadata.version("mqlab")
    except metadata.PackageNotFoundError:
        return "0"


def varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def field_int(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value)


def field_bytes(number: int, value: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(value)) + value


def command(kind: int, body: bytes) -> bytes:
    """A BaseCommand of type ``kind`` (its command: ``body``) in its frame."""
    cmd = field_int(1, kind) + field_bytes(kind, body)
    return struct.pack(">II", len(cmd) + 4, len(cmd)) + cmd


def fields(buf: bytes) -> dict[int, list[Any]]:
    """A protobuf message's fields: number -> its values (ints, or bytes when
    length-delimited); ValueError if it is malformed."""
    out: dict[int, list[Any]] = {}
    at = 0

    def read_varint() -> int:
        nonlocal at
        value, shift = 0, 0
        while True:
            if at >= len(buf) or shift > 63:
                raise ValueError("a truncated varint")
            b = buf[at]
            at += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7

    while at < len(buf):
        key = read_varint()
        number, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value = read_varint()
        elif wire == 2:
            size = read_varint()
            if at + size > len(buf):
                raise ValueError("a truncated field")
            value, at = buf[at : at + size], at + size
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, at = buf[at : at + size], at + size
        else:
            raise ValueError(f"wire type {wire}")
        out.setdefault(number, []).append(value)
    return out


def text(f: dict[int, list[Any]], number: int) -> str:
    values = f.get(number)
    return bytes(values[0]).decode(errors="replace") if values else ""


class _Conn:
    """One connection's handshake reads: whole frames, never a byte past the last one
    asked for (what follows is the compiled reader's)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock

    def _exactly(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            data = self.sock.recv(n - len(buf))
            if not data:
                raise DriverError("the broker closed the connection")
            buf += data
        return bytes(buf)

    def next(self) -> tuple[int, dict[int, list[Any]]]:
        """The next command but PINGs (answered) and PONGs: (type, its fields)."""
        while True:
            (total,) = struct.unpack(">I", self._exactly(4))
            if total < 4 or total > FRAME_MAX:
                raise DriverError(f"a frame of {total} bytes")
            frame = self._exactly(total)
            (size,) = struct.unpack(">I", frame[:4])
            try:
                base = fields(frame[4 : 4 + size])
                kind = int(base[1][0])
                body = fields(bytes(base[kind][0])) if kind in base else {}
            except (ValueError, KeyError, IndexError) as e:
                raise DriverError(f"a malformed frame from the broker: {e}") from e
            if kind == PING:
                self.sock.sendall(command(PONG, b""))
            elif kind != PONG:
                return kind, body

    def ask(self, kind: int, body: bytes, answer: int) -> dict[int, list[Any]]:
        """Send a command; the fields of its answer of type ``answer`` (ERROR: DriverError)."""
        self.sock.sendall(command(kind, body))
        got, f = self.next()
        if got == ERROR:
            raise DriverError(f"the broker said error {f.get(2, ['?'])[0]}: {text(f, 3)}")
        if got != answer:
            raise DriverError(f"command type {got} where {answer} was due")
        return f


def service_address(url: str) -> tuple[str, int]:
    """(host, port) of a ``pulsar://host:port`` URL."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "pulsar" or not parts.hostname or parts.port is None:
        raise DriverError(f"a broker service URL mqlab cannot use: {url!r}")
    return parts.hostname, parts.port


class LaneConn:
    """One sender's connection with its producer: ``sock`` (None until :meth:`connect`),
    ``producer_name`` and ``generation`` (one more per connect: the compiled lane's
    sequence ids and reader start afresh on a new one)."""

    def __init__(self, endpoints: Any, topic: str, timeout_s: float):
        self.nodes = [(n.host, n.port) for n in endpoints.nodes]
        self.next_node = int.from_bytes(os.urandom(2), "big") % len(self.nodes)
        self.topic = topic
        self.timeout_s = timeout_s
        self.sock: socket.socket | None = None
        self.producer_name = b""
        self.generation = 0

    def connect(self) -> None:
        """Look the topic up, starting at the next broker in turn, and make a producer on
        its owner; DriverError naming what failed at each broker if none serves it."""
        self.close()
        why = []
        for _ in self.nodes:
            host, port = self.nodes[self.next_node]
            self.next_node = (self.next_node + 1) % len(self.nodes)
            try:
                self.sock, self.producer_name = self._producer(host, port)
                self.generation += 1
                return
            except (OSError, DriverError) as e:
                why.append(f"{host}:{port}: {e}")
        raise DriverError(f"pulsar: cannot make a producer on {self.topic}: {'; '.join(why)}")

    def _connect(self, host: str, port: int) -> tuple[socket.socket, _Conn]:
        sock = socket.create_connection((host, port), timeout=self.timeout_s)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Conn(sock)
            conn.ask(
                CONNECT,
                field_bytes(1, f"mqlab {_version()}".encode()) + field_int(4, PROTOCOL_VERSION),
                CONNECTED,
            )
            return sock, conn
        except BaseException:
            sock.close()
            raise

    def _producer(self, host: str, port: int) -> tuple[socket.socket, bytes]:
        sock, conn = self._connect(host, port)
        try:
            authoritative = False
            for request in range(1, LOOKUP_HOPS + 1):
                f = conn.ask(
                    LOOKUP,
                    field_bytes(1, self.topic.encode())
                    + field_int(2, request)
                    + field_int(3, int(authoritative)),
                    LOOKUP_RESPONSE,
                )
                response = f.get(3, [LOOKUP_FAILED])[0]
                if response == LOOKUP_FAILED:
                    raise DriverError(f"lookup failed (error {f.get(6, ['?'])[0]}): {text(f, 7)}")
                owner = service_address(text(f, 1))
                authoritative = bool(f.get(5, [0])[0])
                if owner != (host, port):  # the owner, or the broker to ask next
                    sock.close()
                    host, port = owner
                    sock, conn = self._connect(host, port)
                if response == LOOKUP_CONNECT:
                    break
            else:
                raise DriverError(f"more than {LOOKUP_HOPS} lookup redirects")
            f = conn.ask(
                PRODUCER,
                field_bytes(1, self.topic.encode())
                + field_int(2, PRODUCER_ID)
                + field_int(3, LOOKUP_HOPS + 1),
                PRODUCER_SUCCESS,
            )
            name = bytes(f.get(2, [b""])[0])
            if not name or len(name) > 127:
                raise DriverError(f"a producer name mqlab cannot use: {name!r}")
            sock.settimeout(None)
            sock.setblocking(False)
            return sock, name
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
