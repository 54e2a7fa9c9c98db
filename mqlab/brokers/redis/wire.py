"""The hand-written RESP layer of the Redis driver: a sender's connection whose batches are
one write and as few reads as their replies take (``SendWire``, compiled where
``mqlab._sendpath`` is built), and a receiver's calls, either through redis-py
(``Calls``) or pipelined on one connection with replies read later (``Wire``)."""

from __future__ import annotations

import logging
import socket
import struct
from collections import deque
from collections.abc import Sequence
from typing import Any

import hiredis
import redis

from mqlab.brokers import compiled

LOG = logging.getLogger(__name__)

_redis_batch: Any = compiled.module.redis_batch if compiled.module is not None else None


class SendWire:
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


def bulk(arg: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(arg), arg)


def resp_head(*args: bytes) -> bytes:
    """A RESP command of ``len(args) + 1`` arguments up to its last one (the caller
    appends that as a bulk string)."""
    return b"*%d\r\n" % (len(args) + 1) + b"".join(bulk(a) for a in args)


def resp(*args: bytes) -> bytes:
    """A whole RESP command."""
    return b"*%d\r\n" % len(args) + b"".join(bulk(a) for a in args)


class Calls:
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


class Wire:
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
