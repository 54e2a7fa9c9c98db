"""Kafka's Fetch request (version 4, the oldest Kafka 4 still serves: KIP-896), written and
read for the receivers in lanes (``mqlab.brokers.kafka.lanes``): each receiver fetches
the partitions the group assigned it from their leaders on connections of its own; the
record sets are read in C (``mqlab._recvpath.kafka_records``, mqlab/_kafkarecords.h).

A request is an i32 size, then the header (i16 API key 1, i16 version 4, i32
correlation id, i16-length client id) and the body: i32 replica id (-1: a consumer), i32
max wait ms, i32 min bytes, i32 max bytes, i8 isolation level (0: read uncommitted), the
topics (i32 count; each an i16-length name and its partitions: i32 count, each i32
partition, i64 fetch offset, i32 max bytes). The answer: i32 size, i32 correlation id,
i32 throttle ms, the topics (each its name and partitions: i32 partition, i16 error, i64
high watermark, i64 last stable offset, the aborted transactions (i32 count, -1 null;
i64 producer id, i64 first offset each), i32-length records, -1 null). All big endian.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass

from mqlab.errors import DriverError

FETCH, VERSION = 1, 4
CLIENT_ID = b"mqlab"
ANSWER_MAX = 256 * 1024 * 1024
# errors after which the partition's leader is looked up again
LEADER_ERRORS = {
    3: "UNKNOWN_TOPIC_OR_PARTITION",
    5: "LEADER_NOT_AVAILABLE",
    6: "NOT_LEADER_OR_FOLLOWER",
    74: "FENCED_LEADER_EPOCH",
    75: "UNKNOWN_LEADER_EPOCH",
}
OFFSET_OUT_OF_RANGE = 1


def fetch_request(
    correlation: int,
    topic: bytes,
    partitions: Sequence[tuple[int, int]],
    max_wait_ms: int,
    partition_max_bytes: int,
    max_bytes: int,
) -> bytes:
    """A Fetch of ``partitions`` ((partition, offset) each) of ``topic``, in its frame."""
    parts = b"".join(struct.pack(">iqi", p, o, partition_max_bytes) for p, o in partitions)
    body = (
        struct.pack(">hhih", FETCH, VERSION, correlation, len(CLIENT_ID))
        + CLIENT_ID
        + struct.pack(">iiiibi", -1, max_wait_ms, 1, max_bytes, 0, 1)
        + struct.pack(">h", len(topic))
        + topic
        + struct.pack(">i", len(partitions))
        + parts
    )
    return struct.pack(">i", len(body)) + body


@dataclass(frozen=True)
class PartitionData:
    partition: int
    error: int
    high_watermark: int
    records: memoryview


def parse_answer(answer: bytes, correlation: int) -> list[PartitionData]:
    """The partitions of a Fetch answer (without its size field); DriverError if it is
    not the answer to ``correlation`` or is malformed."""
    view = memoryview(answer)
    try:
        got, _throttle, topics = struct.unpack_from(">iii", view, 0)
        if got != correlation:
            raise DriverError(f"kafka fetch: answer {got} where {correlation} was due")
        at = 12
        out = []
        for _ in range(topics):
            (name_len,) = struct.unpack_from(">h", view, at)
            at += 2 + name_len
            (count,) = struct.unpack_from(">i", view, at)
            at += 4
            for _ in range(count):
                p, error, high, _stable, aborted = struct.unpack_from(">ihqqi", view, at)
                at += 26 + 16 * max(aborted, 0)
                (size,) = struct.unpack_from(">i", view, at)
                at += 4
                records = view[at : at + max(size, 0)]
                if len(records) != max(size, 0):
                    raise DriverError("kafka fetch: an answer cut short")
                at += max(size, 0)
                out.append(PartitionData(p, error, high, records))
        return out
    except struct.error as e:
        raise DriverError(f"kafka fetch: a malformed answer: {e}") from None


class BrokerConn:
    """A receiver's connection to one broker: one Fetch in flight at a time, its answer
    read as bytes come (:meth:`read`) without blocking the other connections. It is
    connected without blocking either: until the socket is writable (``connecting``;
    :meth:`connected` then says whether it worked), by ``connect_due_ns`` at the latest,
    a broker that cannot be reached holds only the partitions it leads."""

    def __init__(self, host: str, port: int, timeout_s: float):
        self.address = (host, port)
        try:
            family, kind, proto, _name, where = socket.getaddrinfo(
                host, port, type=socket.SOCK_STREAM
            )[0]
        except OSError as e:
            raise DriverError(f"kafka fetch: cannot resolve {host}:{port}: {e}") from e
        self.sock = socket.socket(family, kind, proto)
        self.sock.setblocking(False)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        err = self.sock.connect_ex(where)
        if err not in (0, errno.EINPROGRESS):
            self.sock.close()
            raise DriverError(f"kafka fetch: cannot connect to {host}:{port}: {os.strerror(err)}")
        self.connecting = err != 0
        self.connect_due_ns = time.monotonic_ns() + int(timeout_s * 1e9)
        self.correlation = 0
        self.pending: list[tuple[int, int]] | None = None  # the fetch in flight's partitions
        self.buf = bytearray()
        self.due_ns = 0

    def connected(self) -> None:
        """Once the socket of a connection being made is writable: connected, or
        DriverError with the reason."""
        err = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            raise DriverError(
                f"kafka fetch: cannot connect to {self.address[0]}:{self.address[1]}: "
                f"{os.strerror(err)}"
            )
        self.connecting = False

    def send(self, request: bytes) -> None:
        self.sock.setblocking(True)
        try:
            self.sock.sendall(request)
        finally:
            self.sock.setblocking(False)

    def read(self) -> bytes | None:
        """The answer in flight once whole, else None (bytes kept); DriverError if the
        broker closed the connection or sent more than an answer."""
        while True:
            try:
                data = self.sock.recv(1 << 20)
            except BlockingIOError:
                break
            if not data:
                raise DriverError(f"kafka fetch: {self.address} closed the connection")
            self.buf += data
            if len(data) < 1 << 20:
                break
        if len(self.buf) < 4:
            return None
        (size,) = struct.unpack_from(">i", self.buf, 0)
        if not 4 <= size <= ANSWER_MAX:
            raise DriverError(f"kafka fetch: an answer of {size} bytes")
        if len(self.buf) < 4 + size:
            return None
        if len(self.buf) > 4 + size:
            raise DriverError("kafka fetch: bytes after the answer in flight")
        answer = bytes(self.buf[4:])
        self.buf.clear()
        return answer

    def close(self) -> None:
        self.sock.close()
