"""Redis Streams: one consumer group over N stream keys (redis-py with hiredis).

- send: XADD every message of the batch in one pipeline, rotating over the
  stream keys; with ``wait_replicas > 0`` the same pipeline ends with
  ``WAIT n timeout`` and the send fails unless n replicas acknowledged it
  (synchronous replication). With 0 the send returns once the primary has it
  (asynchronous replication: mqperf's setup).
- receive: a new receiver first re-reads its own pending entries (XREADGROUP
  from id 0; receiver names of closed receivers are reused, so a restarted
  consumer gets its unacked entries back at once), then every
  ``reclaim_interval_s`` takes over entries idle longer than
  ``visibility_timeout_s`` (XAUTOCLAIM), otherwise reads new entries (``>``).
  With ``prefetch`` > 0 (the default) a read asks for up to ``prefetch`` entries (at
  least the receive batch) into a local buffer, and ``receive`` hands them out from
  there, reading again (without blocking) once the buffer is half empty, and blocking
  for new entries only when it is empty. Entries read are pending for this consumer,
  hidden from the others; one held longer than half of ``visibility_timeout_s`` is not
  handed out but left to XAUTOCLAIM (XAUTOCLAIM could otherwise hand it to another
  receiver while this one hands it out), and ``close`` leaves the ones never handed
  out pending: a receiver reusing the name re-reads them at once, any other one takes
  them with XAUTOCLAIM after ``visibility_timeout_s``.
- ack: XACK (and XDEL, so streams do not grow), one command per key for the whole
  call. With ``prefetch`` > 0 every command of a receiver goes over one connection,
  and ``ack`` returning means the acks were written to it, in the order of
  ``deliveries``, without waiting for the replies: Redis runs them before anything the
  receiver sends later (a receiver's later reads never see its acked entries); their
  replies are read before the next read's reply, and by ``close`` (an error reply is
  logged: that entry comes again). An ack lost with a connection means its entry
  comes again (at least once). A delivery this receiver did not hand out, or acked
  already, is not acked (``DriverError``, after acking the others): an entry still
  held cannot be acked.
- ``prefetch = 0`` is the behaviour before prefetch: each ``receive`` reads at most
  its batch, and ``ack`` waits for the replies of XACK and XDEL (one pipeline).
- redelivery: entries re-read from the own backlog or taken over by XAUTOCLAIM
  are flagged redelivered; ``redelivery_timeout_s`` is ``visibility_timeout_s``
  plus ``reclaim_interval_s`` (XAUTOCLAIM only runs that often).
- remaining: with ``delete_on_ack`` the streams hold exactly what is left, so
  XLEN summed over the keys (ready plus pending entries); otherwise the group's
  pending entries plus the entries it has not read yet (XINFO GROUPS lag).
  ``in_flight`` is the group's pending count (XPENDING). ``identify`` reads the
  entries with XRANGE (and the pending ones by id), which consumes nothing.
- failover: when the endpoints name Redis Sentinels (``extra``: ``sentinels``, a list
  of ``[host, port]``, and ``master``, the name they monitor), every client asks them
  for the primary whenever it connects (redis-py's ``Sentinel.master_for``), so after a
  failover the next call goes to the new primary. Calls are not retried by redis-py
  then: a send, receive or ack that fails during the failover raises (the worker counts
  it and tries again), and a receiver whose call failed re-reads its own pending
  entries from the primary it reaches next (they may have been delivered by the old
  one, or acked there without the ack reaching the new one). Without sentinels the
  driver talks to the node whose role is ``primary``. A node whose endpoint carries
  ``address`` (``host:port``, as the sentinels name it) is reached at the endpoint's
  own host and port when the sentinels name it (the same, unless the coordinator
  reaches the nodes through tunnels).
"""

from __future__ import annotations

import array
import contextlib
import functools
import itertools
import logging
import os
import socket
import struct
import threading
import time
import types
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import hiredis
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel, SentinelConnectionPool

from mqlab import envelope
from mqlab.brokers import compiled
from mqlab.brokers.base import (
    IDENTIFY_PREFIX_BYTES,
    Delivery,
    Driver,
    Lane,
    Receiver,
    Remaining,
    Sender,
    send_compiled_lanes,
)
from mqlab.brokers.held import Held
from mqlab.errors import DriverError
from mqlab.typed import spec

LOG = logging.getLogger(__name__)
FIELD = b"m"
PAGE = 10_000  # entries per XRANGE / XPENDING call in remaining()
HOLD_FRACTION = 0.5  # an entry read ahead and held longer than this part of the visibility
# timeout is not handed out (XAUTOCLAIM may give it to another receiver soon)
FRAMED_BUDGET_BYTES = 8 << 20  # a sender's XADD templates (envelope.Framed), all keys
REFILL_PAUSE_S = 0.005  # after a read ahead that found too little, none for this long

_sendpath: types.ModuleType | None = compiled.module  # else the Python send path
SEND_PATH = compiled.SEND_PATH
_redis_batch: Any = _sendpath.redis_batch if _sendpath is not None else None
_redis_lanes: Any = _sendpath.redis_lanes if _sendpath is not None else None
SPEC = struct.Struct("<qqIIII")  # _sendpath.redis_batch's spec, before the trailer
ST_WAIT_SHORT = 5  # _sendpath.redis_lanes: WAIT's count below the replicas asked for


@functools.cache
def _warn_python_path() -> None:
    LOG.warning(
        "redis: mqlab._sendpath is not built (scripts/bootstrap builds it with a C "
        "compiler): sending through Python, which costs more client CPU per message"
    )


class _Stamped(NamedTuple):
    """A sender's stamped batches to one stream key: their templates and the compiled
    call's spec (with the WAIT as its trailer, if any)."""

    framed: envelope.Framed
    spec: bytes
    sender: int


@dataclass(frozen=True)
class Settings:
    streams: int = spec(1, min=1, max=10_000, help="stream keys the queue is sharded over")
    wait_replicas: int = spec(
        0, min=0, max=10, help="WAIT for this many replicas after each send; 0: async"
    )
    wait_timeout_ms: int = spec(5000, min=1, help="WAIT timeout; fewer acks then fail the send")
    visibility_timeout_s: float = spec(
        30.0, min=0.1, help="idle time before XAUTOCLAIM takes an entry"
    )
    reclaim_interval_s: float = spec(5.0, min=0.05, help="how often a receiver runs XAUTOCLAIM")
    delete_on_ack: bool = spec(True, help="XDEL acked entries so streams do not grow")
    prefetch: int = spec(
        256,
        min=0,
        max=65_536,
        help="entries per receiver read ahead of receive() into a local buffer (at least the "
        "receive batch); acks are then written without waiting for their replies; "
        "0: each receive() reads at most its batch and each ack() waits, as before prefetch",
    )
    socket_timeout_s: float = spec(30.0, min=1.0)


def read_plan(keys: Sequence[bytes], start: int, max_messages: int) -> tuple[list[bytes], int]:
    """Keys to read from and a per-key COUNT so that at most ``max_messages`` come back."""
    k = min(len(keys), max_messages)
    chosen = [keys[(start + i) % len(keys)] for i in range(k)]
    return chosen, max_messages // k


def scan(
    r: redis.Redis, key: bytes, start: bytes, keep: int, count_all: bool
) -> tuple[int, list[bytes]]:
    """Entries of ``key`` from ``start`` on: how many (all of them if ``count_all``, else at
    least until ``keep`` are kept) and the headers of the first ``keep``."""
    n = 0
    kept: list[bytes] = []
    while True:
        page: Any = r.xrange(key, min=start, max=b"+", count=PAGE)
        for _entry_id, fields in page:
            n += 1
            if len(kept) < keep:
                kept.append(bytes(fields.get(FIELD, b""))[:IDENTIFY_PREFIX_BYTES])
        if len(page) < PAGE or (not count_all and len(kept) >= keep):
            return n, kept
        start = b"(" + page[-1][0]


class _Sentinel(Sentinel):
    """redis-py's Sentinel, with the primary it names reached where the endpoints say."""

    def __init__(self, sentinels: Any, reach: dict[tuple[str, int], tuple[str, int]], **kw: Any):
        super().__init__(sentinels, **kw)
        self.reach = reach

    def discover_master(self, service_name: str) -> tuple[str, int]:
        host, port = super().discover_master(service_name)
        return self.reach.get((str(host), int(port)), (host, port))


def close_client(r: redis.Redis) -> None:
    """Close ``r`` and, for a client of the primary the sentinels name, its sentinel clients."""
    pool = r.connection_pool
    try:
        r.close()
    finally:
        if isinstance(pool, SentinelConnectionPool):
            pool.sentinel_manager.close()


def key_names(queue: str, streams: int) -> list[bytes]:
    if streams == 1:
        return [queue.encode()]
    return [f"{queue}:{i}".encode() for i in range(streams)]


class RedisSender(Sender):
    """A batch is one write of its XADDs (and the WAIT) on the sender's own connection,
    then their replies read in order (:class:`_SendWire`); the workers' batches are
    written straight into RESP (``send_stamped``)."""

    def __init__(self, driver: RedisDriver):
        if _sendpath is None:
            _warn_python_path()
        self.r = driver.connect()
        self.wire = _SendWire(self.r, driver.settings.socket_timeout_s)
        self.keys = driver.keys
        self.next_key = int.from_bytes(os.urandom(2), "big") % len(self.keys)
        self.wait = driver.settings.wait_replicas
        self.wait_timeout_ms = driver.settings.wait_timeout_ms
        # each key's XADD up to its message, in RESP (the protocol's bytes); the WAIT
        self.heads = {k: _resp_head(b"XADD", k, b"*", FIELD) for k in self.keys}
        self.wait_command = _resp(b"WAIT", b"%d" % self.wait, b"%d" % self.wait_timeout_ms)
        self.stamped: dict[bytes, _Stamped] = {}  # key -> its batches' wire bytes
        self.run_spec: tuple[Any, ...] | None = None  # send_run's, for run_pool
        self.run_pool: envelope.PayloadPool | None = None

    def send(self, batch: Sequence[bytes]) -> None:
        key = self._key()
        head = self.heads[key]
        # the batch as one buffer of XADDs (and the WAIT): no per-command packing
        parts: list[bytes] = []
        for m in batch:
            parts += (head, b"$%d\r\n" % len(m), m, b"\r\n")
        self._run(b"".join(parts), len(batch))

    def send_stamped(
        self, sender: int, first_seq: int, n: int, sent_ns: int, pool: envelope.PayloadPool
    ) -> None:
        """The XADDs written straight into their RESP bytes (:class:`envelope.Framed`);
        where ``mqlab._sendpath`` is built, the headers are written, the batch sent and
        its replies read in one compiled call, without the interpreter lock."""
        key = self._key() if len(self.keys) > 1 else self.keys[0]
        st = self.stamped.get(key)
        if st is None or st.sender != sender or st.framed.pool is not pool:
            st = self.stamped[key] = self._stamped(key, sender, pool)
        if _sendpath is None:
            self._run(st.framed.batch(sender, first_seq, n, sent_ns), n)
            return
        try:
            count = self.wire.run_framed(
                st.framed.template(first_seq, n), st.spec, n, first_seq, sent_ns
            )
        except redis.RedisError as e:
            self.wire.reset()  # a failover (READONLY) or a lost connection: reconnect next
            raise DriverError(f"redis: send failed: {e}") from e
        if self.wait:
            self._check_wait(count)

    def send_run(
        self,
        sender: int,
        first_seq: int,
        sizes: array.array[int],
        until_ns: int,
        wall_offset_ns: int,
        pool: envelope.PayloadPool,
        records: array.array[int],
    ) -> tuple[int, Exception | None]:
        """Where ``mqlab._sendpath`` is built, :meth:`send_lanes` of this one sender."""
        if _sendpath is None:
            return super().send_run(
                sender, first_seq, sizes, until_ns, wall_offset_ns, pool, records
            )
        lane = Lane(self, sender, first_seq, sizes, records)
        return self.send_lanes([lane], until_ns, wall_offset_ns, pool)[0]

    @classmethod
    def send_lanes(
        cls,
        lanes: Sequence[Lane],
        until_ns: int,
        wall_offset_ns: int,
        pool: envelope.PayloadPool,
    ) -> list[tuple[int, Exception | None]]:
        """All the lanes' runs in one compiled call (``mqlab._sendpath.redis_lanes``), the
        thread out of the interpreter until they end: each batch's XADDs (to its sender's
        next stream key in turn) written and sent, the replies of all the lanes read as
        they come (``poll``), and each lane's next batch sent once its last one is in."""
        if _redis_lanes is None:
            raise NotImplementedError("mqlab._sendpath is not built: no lanes")

        def prepare(lane: Lane) -> tuple[int, tuple[Any, ...], int]:
            s = lane.client
            assert isinstance(s, RedisSender)
            try:
                fd = s.wire.connected()
            except redis.RedisError as e:
                raise DriverError(f"redis: send failed: {e}") from e
            if s.run_spec is None or s.run_spec[7] != lane.sender or s.run_pool is not pool:
                s.run_spec, s.run_pool = s._run_spec(lane.sender, pool), pool
            return fd, s.run_spec, s.next_key

        def outcome(lane: Lane, status: int, integer: int, message: str | None) -> Any:
            s = lane.client
            assert isinstance(s, RedisSender)
            return s._outcome(status, integer, message)

        first = lanes[0].client if lanes else None
        timeout_ns = int(first.wire.timeout_s * 1e9) if isinstance(first, RedisSender) else 0
        out = send_compiled_lanes(
            lanes, until_ns, wall_offset_ns, timeout_ns, _redis_lanes, prepare, outcome
        )
        for lane, (done, failure) in zip(lanes, out, strict=True):
            s = lane.client
            assert isinstance(s, RedisSender)
            s.next_key = (s.next_key + done + (failure is not None)) % len(s.keys)
        return out

    def _outcome(self, status: int, integer: int, message: str | None) -> Exception | None:
        """The failure a compiled call's ``status`` says (None: none)."""
        if status == 0:
            return None
        if status == ST_WAIT_SHORT:
            return self._wait_short(integer)
        self.wire.reset()  # a failover (READONLY) or a lost connection: reconnect next
        return DriverError(f"redis: send failed: {self.wire.failure(status, message)}")

    def _run_spec(self, sender: int, pool: envelope.PayloadPool) -> tuple[Any, ...]:
        """A lane's fixed arguments of ``redis_lanes`` for this sender and payload pool."""
        length = b"$%d\r\n" % pool.message_bytes
        return (
            tuple(self.heads[k] + length for k in self.keys),
            b"".join(pool._pads),
            len(pool._pads),
            b"\r\n",
            self.wait_command if self.wait else b"",
            envelope.MAGIC,
            envelope.VERSION,
            sender,
            self.wait,
        )

    def _stamped(self, key: bytes, sender: int, pool: envelope.PayloadPool) -> _Stamped:
        framed = envelope.Framed(
            pool,
            self.heads[key] + b"$%d\r\n" % pool.message_bytes,
            b"\r\n",
            budget_bytes=max(1, FRAMED_BUDGET_BYTES // len(self.keys)),
        )
        trailer = self.wait_command if self.wait else b""
        spec = SPEC.pack(
            framed.prefix_len,
            framed.frame,
            envelope.MAGIC,
            envelope.VERSION,
            sender,
            1 if trailer else 0,
        )
        return _Stamped(framed, spec + trailer, sender)

    def _key(self) -> bytes:
        key = self.keys[self.next_key]
        self.next_key = (self.next_key + 1) % len(self.keys)
        return key

    def _run(self, xadds: bytes | memoryview, n: int) -> None:
        """Write ``n`` XADDs (and the WAIT), read their replies; raise unless all held."""
        packed = b"".join((xadds, self.wait_command)) if self.wait else xadds
        try:
            results = self.wire.run(packed, n + (1 if self.wait else 0))
        except redis.RedisError as e:
            self.wire.reset()  # a failover (READONLY) or a lost connection: reconnect next
            raise DriverError(f"redis: send failed: {e}") from e
        if self.wait:
            self._check_wait(int(results[-1]))

    def _check_wait(self, acknowledged: int) -> None:
        if acknowledged < self.wait:
            raise self._wait_short(acknowledged)

    def _wait_short(self, acknowledged: int) -> DriverError:
        return DriverError(
            f"redis: WAIT {self.wait}: only {acknowledged} replicas acknowledged "
            f"within {self.wait_timeout_ms} ms"
        )

    def close(self) -> None:
        self.wire.close()
        close_client(self.r)


class _SendWire:
    """A sender's connection to the primary, its I/O done here: each batch is one
    ``sendall`` and as few ``recv`` as its replies take, parsed by hiredis. The socket
    blocks in the kernel (``SO_RCVTIMEO``/``SO_SNDTIMEO`` bound it) so that no ``poll``
    precedes each call, and the interpreter lock is let go twice per batch, not four
    times (redis-py's socket timeout polls before every send and receive)."""

    def __init__(self, r: redis.Redis, timeout_s: float):
        self.r = r
        self.timeout_s = timeout_s
        self.timeout = struct.pack("ll", int(timeout_s), int(timeout_s % 1 * 1e6))
        self.conn: Any = None
        self.sock: socket.socket | None = None
        self.fd = -1
        self.reader: Any = None

    def _connect(self) -> socket.socket:
        conn = self.r.connection_pool.get_connection()  # connected, authenticated
        sock: socket.socket | None = conn._sock
        if sock is None:
            raise redis.ConnectionError("the connection pool handed out no connected socket")
        sock.settimeout(None)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, self.timeout)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, self.timeout)
        self.conn, self.sock, self.fd = conn, sock, sock.fileno()
        self.reader = hiredis.Reader(
            replyError=redis.ResponseError, protocolError=redis.InvalidResponse
        )
        return sock

    def run(self, packed: bytes | memoryview, replies: int) -> list[Any]:
        """Write ``packed`` (``replies`` commands), read their replies; the first error
        reply raises once all are read (the connection stays in step)."""
        sock = self.sock or self._connect()
        reader = self.reader
        try:
            sock.sendall(packed)
            out: list[Any] = []
            while len(out) < replies:
                reply = reader.gets()
                if reply is False:
                    data = sock.recv(65536)
                    if not data:
                        raise redis.ConnectionError("connection closed by the server")
                    reader.feed(data)
                    continue
                out.append(reply)
        except redis.RedisError:
            self.reset()
            raise
        except BlockingIOError as e:  # SO_RCVTIMEO / SO_SNDTIMEO ran out
            self.reset()
            raise redis.TimeoutError(f"no reply within {self.timeout_s:g} s") from e
        except OSError as e:  # a lost connection
            self.reset()
            raise redis.ConnectionError(str(e)) from e
        for reply in out:
            if isinstance(reply, redis.ResponseError):
                raise reply
        return out

    def run_framed(
        self, template: memoryview, spec: bytes, n: int, first_seq: int, sent_ns: int
    ) -> int:
        """:meth:`run` in one compiled call (``mqlab._sendpath.redis_batch``: what
        ``spec`` holds) that writes the ``n`` messages' headers into ``template``,
        sends it and the trailer, and reads the replies without the interpreter lock;
        returns the last integer reply (WAIT's count; -1: none)."""
        status, integer, message = _redis_batch(
            self.connected(), template, spec, n, first_seq, sent_ns
        )
        if status == 0:
            return int(integer)
        self.reset()
        raise self.failure(status, message)

    def connected(self) -> int:
        """The connection's file descriptor (connected now if it was not)."""
        return self.fd if self.sock is not None else self._connect().fileno()

    def failure(self, status: int, message: str | None) -> redis.RedisError:
        """The error of a compiled call's failed ``status`` (see mqlab/_sendpath.c)."""
        if status == 1:
            return redis.ResponseError(message)
        if status == 2:
            return redis.TimeoutError(f"no reply within {self.timeout_s:g} s")
        if status == 3:
            return redis.ConnectionError(message)
        return redis.InvalidResponse(f"{message}: the connection is dropped")

    def reset(self) -> None:
        """Drop the connection; the next call connects again."""
        conn, self.conn, self.sock = self.conn, None, None
        if conn is not None:
            conn.disconnect()
            self.r.connection_pool.release(conn)

    def close(self) -> None:
        self.reset()


def _bulk(arg: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(arg), arg)


def _resp_head(*args: bytes) -> bytes:
    """A RESP command of ``len(args) + 1`` arguments up to its last one (the caller
    appends that as a bulk string)."""
    return b"*%d\r\n" % (len(args) + 1) + b"".join(_bulk(a) for a in args)


def _resp(*args: bytes) -> bytes:
    """A whole RESP command."""
    return b"*%d\r\n" % len(args) + b"".join(_bulk(a) for a in args)


class _Calls:
    """``prefetch = 0``: every command is a round trip of its own (redis-py's client)."""

    def __init__(self, r: redis.Redis):
        self.r = r

    def call(self, *args: Any, **options: Any) -> Any:
        return self.r.execute_command(*args, **options)

    def send(self, commands: Sequence[tuple[Any, ...]]) -> None:
        pipe = self.r.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        pipe.execute()

    def settle(self) -> None:
        pass

    def reset(self) -> None:
        pass


class _Wire:
    """One connection to the primary: ``send`` writes commands at once and leaves their
    replies to be read, in order, before the reply of the next ``call`` (or in
    ``settle``). Redis runs a connection's commands in the order written, so a command
    sent takes effect before anything written after it."""

    UNREAD_MAX = 10_000  # replies left unread before send reads them

    def __init__(self, r: redis.Redis):
        self.r = r
        self.conn: Any = None
        self.unread: deque[str] = deque()  # command names whose replies were not read yet

    def _conn(self) -> Any:
        if self.conn is None:  # the pool hands it out connected
            self.conn = self.r.connection_pool.get_connection()
        return self.conn

    def _write(self, commands: Sequence[tuple[Any, ...]]) -> None:
        conn = self._conn()
        try:
            conn.send_packed_command(conn.pack_commands(commands))
        except BaseException:
            self.reset()
            raise
        self.unread.extend(str(c[0]) for c in commands)

    def _read(self, options: dict[str, Any] | None = None) -> Any:
        """The reply of the oldest command not read yet (an error reply raises)."""
        name = self.unread.popleft()
        try:
            return self.r.parse_response(self.conn, name, **(options or {}))
        except redis.ResponseError:
            raise  # the connection is fine
        except BaseException:
            self.reset()
            raise

    def _read_sent(self) -> None:
        """Read the reply of a command only sent; an error reply is logged (an ack that
        failed: the entry is delivered again)."""
        name = self.unread[0]
        try:
            self._read()
        except redis.ResponseError as e:
            LOG.warning("redis: %s failed: %s", name, e)

    def send(self, commands: Sequence[tuple[Any, ...]]) -> None:
        self._write(commands)
        if len(self.unread) > self.UNREAD_MAX:
            self.settle()

    def settle(self) -> None:
        """Read every reply still unread."""
        while self.unread:
            self._read_sent()

    def run(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        """Write ``commands`` at once, then read every reply (earlier ones first); the
        first error reply raises once all are read (the connection stays in step)."""
        self.settle()
        self._write(commands)
        out, error = [], None
        for _ in commands:
            try:
                out.append(self._read())
            except redis.ResponseError as e:
                error = error or e
                out.append(e)
        if error is not None:
            raise error
        return out

    def call(self, *args: Any, **options: Any) -> Any:
        """Run one command and return its reply, reading the earlier replies first."""
        self._write([args])
        while len(self.unread) > 1:
            self._read_sent()
        return self._read(options)

    def reset(self) -> None:
        """Drop the connection (after a failure: replies still due are lost). The next
        command takes one from the pool, which connects it there: to the primary the
        sentinels name then, when they are followed."""
        self.unread.clear()
        if self.conn is not None:
            self.conn.disconnect()
            self.close()

    def close(self) -> None:
        if self.conn is not None:
            self.r.connection_pool.release(self.conn)
            self.conn = None


class RedisReceiver(Receiver):
    """Reads ahead into a local buffer (``prefetch`` > 0; module docstring).

    With ``prefetch`` > 0 every command goes over one connection (``_Wire``): acks are
    written without waiting for their replies, which are read with the next read; a
    ``receive`` served from the buffer with nothing due makes no system call. With
    ``prefetch = 0`` (the behaviour before prefetch) each ``receive`` reads at most its
    batch and each ``ack`` waits for XACK (and XDEL)."""

    def __init__(self, driver: RedisDriver, name: str):
        self.driver = driver
        self.name = name
        self.r = driver.connect()
        s: Settings = driver.settings
        self.keys = driver.keys
        self.group = driver.group
        self.prefetch = s.prefetch
        self.io: _Calls | _Wire = _Wire(self.r) if s.prefetch else _Calls(self.r)
        self.held = Held(s.visibility_timeout_s * HOLD_FRACTION)
        self.dry_until = 0.0  # no read ahead before this (the last one found too little)
        self.min_idle_ms = int(s.visibility_timeout_s * 1000)
        self.reclaim_interval = s.reclaim_interval_s
        self.last_reclaim = time.monotonic()
        self.max_block_ms = int((s.socket_timeout_s - 0.5) * 1000)
        self.backlog: dict[bytes, bytes] = {k: b"0" for k in self.keys}  # own pending, per key
        self.cursors: dict[bytes, bytes] = {k: b"0-0" for k in self.keys}
        self.rotate = 0

    def _deliveries(self, reply: Any, redelivered: bool) -> list[Delivery]:
        out = []
        stale: list[tuple[bytes, bytes]] = []
        for key, entries in reply or []:
            for entry_id, fields in entries:
                if not fields:  # deleted while pending: nothing to deliver, clear it
                    stale.append((key, entry_id))
                    continue
                out.append(Delivery(fields[FIELD], (key, entry_id), redelivered))
        if stale:
            self.io.send(self._ack_commands(stale))
        return out

    def _read_backlog(self, want: int) -> list[Delivery]:
        while self.backlog:
            key, last = next(iter(self.backlog.items()))
            reply: Any = self.io.call(
                "XREADGROUP", "GROUP", self.group, self.name, "COUNT", want, "STREAMS", key, last
            )
            entries = reply[0][1] if reply else []
            if not entries:
                del self.backlog[key]
                continue
            self.backlog[key] = entries[-1][0]
            got = self._deliveries(reply, True)
            if got:
                return got
        return []

    def _reclaim(self, want: int) -> list[Delivery]:
        self.last_reclaim = time.monotonic()
        out: list[Delivery] = []
        for key in self.keys:
            if len(out) >= want:
                break
            reply = self.io.call(
                "XAUTOCLAIM",
                key,
                self.group,
                self.name,
                self.min_idle_ms,
                self.cursors[key],
                "COUNT",
                want - len(out),
            )
            self.cursors[key] = reply[0]
            out += self._deliveries([(key, reply[1])], True)
            if reply[2:] and reply[2]:
                LOG.debug("redis: %d pending entries of %s were deleted", len(reply[2]), key)
        return out

    def _read(self, want: int, timeout_s: float | None) -> list[Delivery]:
        """Own pending entries first, then (every ``reclaim_interval_s``) entries idle past
        the visibility timeout, else new ones: at most ``want``; ``timeout_s`` None: no
        waiting for new ones."""
        if self.backlog:
            got = self._read_backlog(want)
            if got:
                return got
        if time.monotonic() - self.last_reclaim >= self.reclaim_interval:
            got = self._reclaim(want)
            if got:
                return got
        keys, count = read_plan(self.keys, self.rotate, want)
        self.rotate = (self.rotate + len(keys)) % len(self.keys)
        args: list[Any] = ["XREADGROUP", "GROUP", self.group, self.name, "COUNT", count]
        if timeout_s is not None:
            block = min(int(timeout_s * 1000), self.max_block_ms)
            if block > 0:
                args += ["BLOCK", block]
        reply = self.io.call(*args, "STREAMS", *keys, *[b">"] * len(keys))
        return self._deliveries(reply, False)

    def _wanted(self, max_messages: int, now: float) -> int:
        """How many entries to read now: the capacity (at least the batch) once the buffer
        is half empty, unless the last read ahead found too little a moment ago."""
        capacity = max(self.prefetch, max_messages)
        if not self.held:
            return capacity
        if len(self.held) > capacity // 2 or now < self.dry_until:
            return 0
        return capacity - len(self.held)

    def receive(self, max_messages: int, timeout_s: float) -> list[Delivery]:
        now = time.monotonic()
        if self.held and not (self.held.has_stale(now) or self._wanted(max_messages, now) > 0):
            return self.held.take(max_messages)  # nothing to read: no system call
        try:
            stale = self.held.stale(now)
            if stale:  # still pending: XAUTOCLAIM hands them out again
                LOG.info("redis: %d entries read ahead held too long, dropped", len(stale))
            want = self._wanted(max_messages, now)
            if want > 0:
                ahead = bool(self.held)
                got = self._read(want, None if ahead else timeout_s)
                if ahead and len(got) < want:
                    self.dry_until = now + REFILL_PAUSE_S
                self.held.add(got, time.monotonic())
        except redis.RedisError as e:
            self._after_failure()
            raise DriverError(f"redis: receive failed: {e}") from e
        return self.held.take(max_messages)

    def _after_failure(self) -> None:
        """Following sentinels, a failed call may mean a new primary: read the own pending
        entries from it again (it may hold deliveries whose reply or ack was lost); those
        held here come again that way."""
        if self.driver.sentinels:
            self.backlog = {k: b"0" for k in self.keys}
            self.held.drop()

    def _ack_commands(self, items: Sequence[tuple[bytes, bytes]]) -> list[tuple[Any, ...]]:
        by_key: dict[bytes, list[bytes]] = {}
        for key, entry_id in items:
            by_key.setdefault(key, []).append(entry_id)
        commands: list[tuple[Any, ...]] = []
        for key, ids in by_key.items():
            commands.append(("XACK", key, self.group, *ids))
            if self.driver.settings.delete_on_ack:
                commands.append(("XDEL", key, *ids))
        return commands

    def ack(self, deliveries: Sequence[Delivery]) -> None:
        ok, refused = self.held.acked(deliveries)
        if ok:
            try:
                self.io.send(self._ack_commands([d.handle for d in ok]))
            except redis.RedisError as e:
                self._after_failure()
                raise DriverError(f"redis: ack failed: {e}") from e
        if refused:
            raise DriverError(
                f"redis: {refused} of {len(deliveries)} deliveries were not handed out by "
                "this receiver or were acked already: not acked"
            )

    def close(self) -> None:
        try:
            self.io.settle()
        except redis.RedisError as e:  # closing anyway: unacked entries come again
            LOG.warning("redis: receiver closed without its acks confirmed: %s", e)
        finally:
            if isinstance(self.io, _Wire):
                with contextlib.suppress(Exception):
                    self.io.close()
            with contextlib.suppress(Exception):
                close_client(self.r)
            self.driver.release_name(self.name)


class RedisDriver(Driver):
    name = "redis"
    Settings = Settings
    client_libraries = ("redis", "hiredis")
    identifies_remaining = True

    def __init__(self, settings: Any, endpoints: Any, queue: str):
        super().__init__(settings, endpoints, queue)
        s: Settings = settings
        self.keys = key_names(queue, s.streams)
        self.group = "workers"
        self._lock = threading.Lock()
        self._free_names: list[str] = []
        self._counter = itertools.count()
        self._prefix = f"{socket.gethostname()}-{os.getpid()}"
        primaries = [n for n in endpoints.nodes if n.extra.get("role", "primary") == "primary"]
        self.primary = (primaries or list(endpoints.nodes))[0]
        extra = endpoints.extra or {}
        self.sentinels = [(str(h), int(p)) for h, p in extra.get("sentinels") or []]
        self.master_name = str(extra.get("master") or "mqlab")
        # a node as the sentinels name it -> where this process connects to it
        self.reach: dict[tuple[str, int], tuple[str, int]] = {}
        for n in endpoints.nodes:
            if n.extra.get("address"):
                host, _, port = str(n.extra["address"]).rpartition(":")
                self.reach[(host, int(port))] = (n.host, n.port)

    def connect(self, timeout_s: float | None = None) -> redis.Redis:
        """A client of the primary: the one the sentinels name at each connect when the
        endpoints have sentinels (close it with ``close_client``), else the ``primary``."""
        s: Settings = self.settings
        if not self.sentinels:
            return redis.Redis(
                host=self.primary.host,
                port=self.primary.port,
                socket_timeout=timeout_s or s.socket_timeout_s,
                socket_connect_timeout=5,
                health_check_interval=0,
            )
        # one Sentinel per client: its list of sentinels is reordered as it is asked,
        # which is not safe across threads
        manager = _Sentinel(
            self.sentinels,
            self.reach,
            # a sentinel that sees no other cannot be part of a majority: not asked
            min_other_sentinels=len(self.sentinels) // 2,
            sentinel_kwargs={
                "socket_timeout": 2,
                "socket_connect_timeout": 2,
                "retry": Retry(NoBackoff(), 0),
            },
        )
        client: redis.Redis = manager.master_for(
            self.master_name,
            socket_timeout=timeout_s or s.socket_timeout_s,
            socket_connect_timeout=5,
            health_check_interval=0,
            retry=Retry(NoBackoff(), 0),  # a failed call raises: no hidden retries
        )
        return client

    def _admin(self) -> redis.Redis:
        return self.connect(10)

    def setup(self) -> None:
        r = self._admin()
        try:
            for key in self.keys:
                try:
                    r.xgroup_create(key, self.group, id="0", mkstream=True)
                except redis.ResponseError as e:
                    if "BUSYGROUP" not in str(e):
                        raise
        except redis.RedisError as e:
            raise DriverError(f"redis: cannot create stream {self.keys[0]!r}: {e}") from e
        finally:
            close_client(r)

    def teardown(self) -> None:
        r = self._admin()
        try:
            for i in range(0, len(self.keys), 500):
                r.delete(*self.keys[i : i + 500])
        finally:
            close_client(r)

    @property
    def redelivery_timeout_s(self) -> float:
        s: Settings = self.settings
        return s.visibility_timeout_s + s.reclaim_interval_s

    def remaining(self, identify: bool = False) -> Remaining:
        """Entries left over the keys (see the module docstring); XPENDING as ``in_flight``."""
        keep = self.identify_cap if identify else 0
        count = in_flight = 0
        found: list[bytes] = []
        r = self._admin()
        try:
            for key in self.keys:
                group = self._group(r, key)
                if group is None:
                    continue  # no stream (or no group): nothing held
                pending = int(group["pending"])
                in_flight += pending
                if self.settings.delete_on_ack:  # acked entries are gone
                    count += int(r.xlen(key))
                    if keep > len(found):
                        found += scan(r, key, b"-", keep - len(found), False)[1]
                    continue
                count += pending
                found += self._pending(r, key, keep - len(found))
                lag = group.get("lag")  # entries the group has not read yet (None: unknown)
                if lag is None or keep > len(found):
                    unread_from = b"(" + group["last-delivered-id"]
                    n, got = scan(r, key, unread_from, keep - len(found), lag is None)
                    found += got
                    lag = n if lag is None else lag
                count += int(lag)
        except redis.RedisError as e:
            raise DriverError(f"redis: cannot read what {self.keys[0]!r} holds: {e}") from e
        finally:
            close_client(r)
        return Remaining(count, found if identify else None, in_flight)

    def _group(self, r: redis.Redis, key: bytes) -> dict[str, Any] | None:
        try:
            groups: Any = r.xinfo_groups(key)
        except redis.ResponseError:  # no such key
            return None
        names = (self.group, self.group.encode())
        return next((g for g in groups if g["name"] in names), None)

    def _pending(self, r: redis.Redis, key: bytes, keep: int) -> list[bytes]:
        """Headers of the group's pending entries of ``key`` (the first ``keep``)."""
        out: list[bytes] = []
        start: bytes = b"-"
        while len(out) < keep:
            want = min(PAGE, keep - len(out))
            page: Any = r.xpending_range(key, self.group, start, b"+", want)
            pipe = r.pipeline(transaction=False)
            for p in page:
                pipe.xrange(key, min=p["message_id"], max=p["message_id"])
            for entries in pipe.execute() if page else []:
                if entries:  # empty: deleted while pending
                    out.append(bytes(entries[0][1].get(FIELD, b""))[:IDENTIFY_PREFIX_BYTES])
            if len(page) < want:
                break
            start = b"(" + page[-1]["message_id"]
        return out

    def release_name(self, name: str) -> None:
        with self._lock:
            self._free_names.append(name)

    def send_path(self) -> str:
        return SEND_PATH

    def sends_in_lanes(self) -> bool:
        return _sendpath is not None

    def sender(self) -> Sender:
        return RedisSender(self)

    def receiver(self) -> Receiver:
        """Reuses a closed receiver's consumer name: it first gets that one's pending entries."""
        with self._lock:
            name = (
                self._free_names.pop(0)
                if self._free_names
                else f"{self._prefix}-{next(self._counter)}"
            )
        return RedisReceiver(self, name)

    def server_versions(self) -> list[str]:
        versions = []
        for node in self.endpoints.nodes:
            r = redis.Redis(
                host=node.host, port=node.port, socket_timeout=2, socket_connect_timeout=2
            )
            try:
                info = r.info("server")
                versions.append(f"redis {info.get('redis_version', '?')}")
            except (redis.RedisError, OSError):  # a node may be down; report what answers
                LOG.debug("no version from %s:%s", node.host, node.port)
            finally:
                r.close()
        return versions


DRIVER = RedisDriver
