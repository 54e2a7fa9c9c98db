"""RocketMQ's remoting protocol for sending and receiving: what the broker's own Java
client speaks, on mqlab's own connections, straight to the broker group's master (the
DLedger leader) as the name server lists it. Frames as in ``admin.py``; the receive
side's decoding and ack bodies (``decode_messages``, ``popped``, ``batch_ack_body`` and
the rest) are in ``popping.py``.

- send: SEND_BATCH_MESSAGE (320) with SendMessageRequestHeaderV2 (short field names:
  ``a`` producer group, ``b`` topic, ``c`` default topic, ``d`` its queues, ``e`` queue id,
  ``f`` sysFlag, ``g`` born time, ``h`` flag, ``i`` the batch's properties, ``j``
  reconsume times, ``k`` unit mode, ``m`` batch, ``n`` broker name). ``m=true`` makes the
  broker store the body's messages each as its own entry of the queue, in one append to
  the DLedger group. The body is each message as the Java client's
  ``MessageDecoder.encodeMessage`` lays it out (big-endian): total size, magic 0, body CRC
  0 (the broker computes both), flag, body length and body, properties length (int16) and
  properties (``name\\x01value\\x02`` each). Every message gets a ``UNIQ_KEY``; the batch's
  properties (``WAIT=true``: answer once stored as the broker's durability says) are the
  broker's to copy into each. Codes 0, 10, 11 and 12 (SUCCESS, FLUSH_DISK_TIMEOUT,
  SLAVE_NOT_AVAILABLE, FLUSH_SLAVE_TIMEOUT) are what the Java client counts as sent; mqlab
  counts only SUCCESS (the others did not meet the profile's durability).
- receive: POP_MESSAGE (200050) on queue -1 (every queue of the topic, and the group's
  retry topic where the broker puts back what was not acked in time), ``initMode`` 0
  (a new group starts at each queue's first message). The reply's body is the stored
  messages as ``MessageDecoder.decode`` reads them (``decode_messages``); its header's
  ``popTime``, ``invisibleTime``, ``reviveQid`` and ``startOffsetInfo`` give each
  message's receipt (the Java client's ``POP_CK``: ``ckQueueOffset popTime invisibleTime
  reviveQid retryFlag brokerName queueId queueOffset``, ``popped``). Codes 19 and 210
  (PULL_NOT_FOUND, POLLING_TIMEOUT): none.
- ack: one BATCH_ACK_MESSAGE (200151) per batch, as the Java client's batch ack: a JSON
  body with an entry per checkpoint and a bit per message (``batch_ack_body``), one
  answer for all of them. SUCCESS: acked; anything else: the messages come again once
  their invisible time ends.

Fields and codes as in RocketMQ 5.x's RequestCode, ResponseCode, the request and
response headers named above, ``MessageDecoder``, ``ExtraInfoUtil`` and
``MQClientAPIImpl.processPopResponse`` (apache/rocketmq).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass

from mqlab.brokers.rocketmq import admin
from mqlab.errors import DriverError

SEND_BATCH_MESSAGE = 320
POP_MESSAGE = 200050
BATCH_ACK_MESSAGE = 200151
SUCCESS = 0
SYSTEM_BUSY = 2
FLUSH_DISK_TIMEOUT = 10
SLAVE_NOT_AVAILABLE = 11
FLUSH_SLAVE_TIMEOUT = 12
# refusals from a broker that is still the master: its connection is kept (any other
# refusal, or a broken connection, sends the client to the name server for the master)
MASTER_STILL = (SYSTEM_BUSY, FLUSH_DISK_TIMEOUT, SLAVE_NOT_AVAILABLE, FLUSH_SLAVE_TIMEOUT)
PULL_NOT_FOUND = 19
POLLING_FULL = 209
POLLING_TIMEOUT = 210
NOTHING_POPPED = (PULL_NOT_FOUND, POLLING_TIMEOUT)
VERSION = 473  # MQVersion V5_3_0: name servers and brokers answer in standard JSON
DEFAULT_TOPIC_QUEUES = "4"
# bytes asked of each recv: below glibc's mmap threshold (128 KiB), so the buffer is not
# mapped and unmapped per call (1 MiB cost ~10 us a message here, 2026-11-29)
RECV_CHUNK = 65536
PRODUCER_GROUP = "mqlab-producers"
MAGIC_V1 = -626843481  # MessageDecoder's stored-message magic codes
MAGIC_V2 = -626843477  # (a topic longer than 127 bytes: its length in 2 bytes)
SYSFLAG_COMPRESSED = 0x1
SYSFLAG_BORN_V6 = 0x10
SYSFLAG_STORE_V6 = 0x20
RETRY_PREFIX = "%RETRY%"
NAME_VALUE = "\x01"
PROPERTY_END = "\x02"
BATCH_PROPERTIES = f"WAIT{NAME_VALUE}true{PROPERTY_END}"


def frame(code: int, ext: dict[str, str], opaque: int, body: bytes = b"") -> bytes:
    """One request frame (``admin.encode``'s, with this module's version)."""
    return admin.encode(code, ext, opaque, body, VERSION)


@dataclass(frozen=True)
class Answer:
    code: int
    remark: str
    ext: dict[str, str]
    body: bytes


def read_answer(payload: bytes) -> tuple[int, Answer]:
    """A response frame without its length field: (its opaque, the answer)."""
    (mark,) = struct.unpack_from(">i", payload)
    kind, size = (mark >> 24) & 0xFF, mark & 0xFFFFFF
    if kind != admin.JSON_SERIALIZATION or 4 + size > len(payload):
        raise DriverError(f"rocketmq: unreadable response (header type {kind}, {size} bytes)")
    try:
        h = json.loads(payload[4 : 4 + size])
    except ValueError as e:
        raise DriverError(f"rocketmq: unreadable response header: {e}") from None
    if not int(h.get("flag", 0)) & admin.RESPONSE_FLAG:
        raise DriverError(f"rocketmq: a request (code {h.get('code')}) where a response was due")
    ext = h.get("extFields") or {}
    return int(h.get("opaque", -1)), Answer(
        int(h.get("code", -1)), str(h.get("remark") or ""), ext, payload[4 + size :]
    )


class Connection:
    """One TCP connection to a broker: requests written in turn, each answer matched to
    its request by opaque. Not thread-safe (a sender or receiver owns one)."""

    def __init__(self, address: tuple[str, int], timeout_s: float):
        self.address = address
        try:
            self.sock = socket.create_connection(address, timeout=timeout_s)
        except OSError as e:
            raise DriverError(f"rocketmq: cannot connect to {address[0]}:{address[1]}: {e}") from e
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.opaque = 0
        self.buf = bytearray()
        self.early: dict[int, Answer] = {}

    def next_opaque(self) -> int:
        self.opaque = (self.opaque + 1) & 0x7FFFFFFF
        return self.opaque

    def write(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError as e:
            raise DriverError(f"rocketmq: {self.where()}: {e}") from e

    def where(self) -> str:
        return f"{self.address[0]}:{self.address[1]}"

    def answer(self, opaque: int, timeout_s: float) -> Answer:
        """The answer to request ``opaque``, at most ``timeout_s`` from now (answers to
        other requests read meanwhile are kept for their turn)."""
        if opaque in self.early:
            return self.early.pop(opaque)
        deadline = time.monotonic() + timeout_s
        while True:
            got = self._frame()
            while got is not None:
                op, ans = read_answer(got)
                if op == opaque:
                    return ans
                self.early[op] = ans
                got = self._frame()
            left = deadline - time.monotonic()
            if left <= 0:
                raise DriverError(f"rocketmq: {self.where()} did not answer in {timeout_s:g} s")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(RECV_CHUNK)
            except TimeoutError:
                raise DriverError(
                    f"rocketmq: {self.where()} did not answer in {timeout_s:g} s"
                ) from None
            except OSError as e:
                raise DriverError(f"rocketmq: {self.where()}: {e}") from e
            if not chunk:
                raise DriverError(f"rocketmq: {self.where()} closed the connection")
            self.buf += chunk

    def buffered(self) -> None:
        """The answers already read whole (behind the one a caller waited for) kept for
        their turn, so that ``early`` holds every answer that came."""
        got = self._frame()
        while got is not None:
            op, ans = read_answer(got)
            self.early[op] = ans
            got = self._frame()

    def _frame(self) -> bytes | None:
        """The next whole frame in the buffer (without its length), or None."""
        if len(self.buf) < 4:
            return None
        (n,) = struct.unpack_from(">i", self.buf)
        if not 4 <= n <= admin.MAX_FRAME:
            raise DriverError(f"rocketmq: {self.where()}: frame length {n} out of range")
        if len(self.buf) < 4 + n:
            return None
        out = bytes(self.buf[4 : 4 + n])
        del self.buf[: 4 + n]
        return out

    def call(self, code: int, ext: dict[str, str], timeout_s: float, body: bytes = b"") -> Answer:
        op = self.next_opaque()
        self.write(frame(code, ext, op, body))
        return self.answer(op, timeout_s)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


# -- send ------------------------------------------------------------------------------
class UniqueIds:
    """Message ids unique across processes and runs: a random prefix of this producer and
    a counter (the Java client's UNIQ_KEY is 32 hex digits too)."""

    def __init__(self) -> None:
        self.prefix = os.urandom(8).hex().upper()
        self.n = 0

    def take(self, count: int) -> list[str]:
        start = self.n
        self.n += count
        return [f"{self.prefix}{i & 0xFFFFFFFFFFFFFFFF:016X}" for i in range(start, start + count)]


def encode_batch(payloads: Sequence[bytes], ids: Sequence[str]) -> bytes:
    """A batch's body: each message as ``MessageDecoder.encodeMessage`` lays it out."""
    parts = []
    for body, uid in zip(payloads, ids, strict=True):
        props = f"UNIQ_KEY{NAME_VALUE}{uid}{PROPERTY_END}".encode()
        size = 4 + 4 + 4 + 4 + 4 + len(body) + 2 + len(props)
        parts.append(struct.pack(">iiiii", size, 0, 0, 0, len(body)))
        parts.append(body)
        parts.append(struct.pack(">h", len(props)))
        parts.append(props)
    return b"".join(parts)


def send_header(topic: str, queue_id: int, broker_name: str) -> dict[str, str]:
    return {
        "a": PRODUCER_GROUP,
        "b": topic,
        "c": admin.DEFAULT_TOPIC,
        "d": DEFAULT_TOPIC_QUEUES,
        "e": str(queue_id),
        "f": "0",
        "g": str(int(time.time() * 1000)),
        "h": "0",
        "i": BATCH_PROPERTIES,
        "j": "0",
        "k": "false",
        "m": "true",
        "n": broker_name,
    }
