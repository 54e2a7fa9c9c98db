"""The Redis sender: XADDs (and the WAIT) of a batch in one write (module docstring of
``mqlab.brokers.redis.driver``), written straight into RESP for the workers' batches, and
all of a worker's lanes in one compiled call where ``mqlab._sendpath`` is built."""

from __future__ import annotations

import array
import functools
import logging
import os
import struct
import types
from collections.abc import Sequence
from typing import Any, NamedTuple

import redis

from mqlab import envelope
from mqlab.brokers import compiled
from mqlab.brokers.base import Lane, Sender
from mqlab.brokers.redis.streams import FIELD, RedisLink, close_client
from mqlab.brokers.redis.wire import SendWire, resp, resp_head
from mqlab.errors import DriverError

LOG = logging.getLogger(__name__)

FRAMED_BUDGET_BYTES = 8 << 20  # a sender's XADD templates (envelope.Framed), all keys


_sendpath: types.ModuleType | None = compiled.module  # else the Python send path


SPEC = struct.Struct("<qqIIII")  # _sendpath.redis_batch's spec, before the trailer
ST_WAIT_SHORT = 5  # _sendpath.Lanes (Redis): WAIT's count below the replicas asked for


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


class RedisSender(Sender):
    """A batch is one write of its XADDs (and the WAIT) on the sender's own connection,
    then their replies read in order (:class:`SendWire`); the workers' batches are
    written straight into RESP (``send_stamped``)."""

    def __init__(self, driver: RedisLink):
        if _sendpath is None:
            _warn_python_path()
        self.r = driver.connect()
        self.wire = SendWire(self.r, driver.settings.socket_timeout_s)
        self.keys = driver.keys
        self.next_key = int.from_bytes(os.urandom(2), "big") % len(self.keys)
        self.wait = driver.settings.wait_replicas
        self.wait_timeout_ms = driver.settings.wait_timeout_ms
        # each key's XADD up to its message, in RESP (the protocol's bytes); the WAIT
        self.heads = {k: resp_head(b"XADD", k, b"*", FIELD) for k in self.keys}
        self.wait_command = resp(b"WAIT", b"%d" % self.wait, b"%d" % self.wait_timeout_ms)
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

    # -- lanes (mqlab._sendpath.Lanes): each batch's XADDs (to the sender's next stream key
    # in turn) and the WAIT written and sent at once, the replies read as they come --
    lane_proto = _sendpath.REDIS if _sendpath is not None else None

    def lane_timeout_ns(self) -> int:
        return int(self.wire.timeout_s * 1e9)

    def lane_connected(self) -> bool:
        return self.wire.sock is not None

    def lane_connect(self) -> None:
        try:
            self.wire.connected()
        except redis.RedisError as e:
            raise DriverError(f"redis: send failed: {e}") from e

    def lane_args(
        self, sender: int, pool: envelope.PayloadPool
    ) -> tuple[int, tuple[Any, ...], int, int]:
        fd = self.wire.fd if self.wire.sock is not None else -1
        if fd < 0:
            raise DriverError("redis: send failed: not connected")
        if self.run_spec is None or self.run_spec[7] != sender or self.run_pool is not pool:
            self.run_spec, self.run_pool = self._run_spec(sender, pool), pool
        return fd, self.run_spec, self.next_key, 0

    def lane_outcome(self, status: int, integer: int, message: str | None) -> Exception | None:
        return self._outcome(status, integer, message)

    def lane_ran(self, done: int, failed: int) -> None:
        self.next_key = (self.next_key + done + failed) % len(self.keys)
        if failed > 1:  # replies of batches behind the failed one are unread
            self.wire.reset()

    def _outcome(self, status: int, integer: int, message: str | None) -> Exception | None:
        """The failure a compiled call's ``status`` says (None: none)."""
        if status == 0:
            return None
        if status == ST_WAIT_SHORT:
            return self._wait_short(integer)
        self.wire.reset()  # a failover (READONLY) or a lost connection: reconnect next
        return DriverError(f"redis: send failed: {self.wire.failure(status, message)}")

    def _run_spec(self, sender: int, pool: envelope.PayloadPool) -> tuple[Any, ...]:
        """The fixed arguments of a Redis lane (``mqlab._sendpath.Lanes``) for this sender
        and payload pool."""
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
