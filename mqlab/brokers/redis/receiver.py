"""The Redis receiver: reads ahead into a local buffer, reclaims idle entries with XAUTOCLAIM,
and writes acks without waiting for their replies (module docstring of
``mqlab.brokers.redis.driver``)."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Sequence
from typing import Any

import redis

from mqlab.brokers.base import (
    Delivery,
    Receiver,
)
from mqlab.brokers.held import Held
from mqlab.brokers.redis.streams import FIELD, RedisLink, Settings, close_client, read_plan
from mqlab.brokers.redis.wire import Calls, Wire
from mqlab.errors import DriverError

LOG = logging.getLogger(__name__)

HOLD_FRACTION = 0.5  # an entry read ahead and held longer than this part of the visibility
# timeout is not handed out (XAUTOCLAIM may give it to another receiver soon)


REFILL_PAUSE_S = 0.005  # after a read ahead that found too little, none for this long


class RedisReceiver(Receiver):
    """Reads ahead into a local buffer (``prefetch`` > 0; module docstring).

    With ``prefetch`` > 0 every command goes over one connection (``Wire``): acks are
    written without waiting for their replies, which are read with the next read; a
    ``receive`` served from the buffer with nothing due makes no system call. With
    ``prefetch = 0`` (the behaviour before prefetch) each ``receive`` reads at most its
    batch and each ``ack`` waits for XACK (and XDEL)."""

    def __init__(self, driver: RedisLink, name: str):
        self.driver = driver
        self.name = name
        self.r = driver.connect()
        s: Settings = driver.settings
        self.keys = driver.keys
        self.group = driver.group
        self.prefetch = s.prefetch
        self.io: Calls | Wire = Wire(self.r) if s.prefetch else Calls(self.r)
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

    # -- in lanes (RedisDriver.receive_lanes) ---------------------------------------------
    def lane_prelude(self, max_messages: int) -> tuple[list[Delivery], int, DriverError | None]:
        """What the compiled loop does not do, through this Python path: the own pending
        entries (at the start and after a failure), and every ``reclaim_interval_s`` the
        entries idle past the visibility timeout; each read is acked at once (its XACK
        count summed), and the connection left with no reply unread. The deliveries, the
        entries acked, and the failure that stopped it."""
        assert isinstance(self.io, Wire)  # in lanes only with prefetch > 0
        out: list[Delivery] = []
        acked = 0
        try:
            while True:
                got: list[Delivery] = []
                if self.backlog:
                    got = self._read_backlog(max_messages)
                elif time.monotonic() - self.last_reclaim >= self.reclaim_interval:
                    got = self._reclaim(max_messages)
                if not got:
                    break
                out += got
                replies = self.io.run(self._ack_commands([d.handle for d in got]))
                acked += sum(
                    int(n) for n in replies[:: 2 if self.driver.settings.delete_on_ack else 1]
                )
            self.io.settle()
        except redis.RedisError as e:
            self.lane_failure(3, str(e))
            return out, acked, DriverError(f"redis: receive failed: {e}")
        return out, acked, None

    def lane_conn(self) -> tuple[int, bytes]:
        """This receiver's connection for the compiled loop (its socket, no reply due) and
        its consumer name."""
        assert isinstance(self.io, Wire)
        try:
            conn = self.io._conn()
            if conn._sock is None:
                conn.connect()
        except redis.RedisError as e:
            self.lane_failure(3, str(e))
            raise DriverError(f"redis: receive failed: {e}") from e
        fd = conn._sock.fileno()
        os.set_blocking(fd, False)  # as redis-py's timeout sets it: the loop never blocks
        return fd, self.name.encode()

    def lane_failure(self, status: int, message: str | None) -> DriverError:
        """The connection is dropped; the own pending entries (read, maybe not acked) are
        read again first, flagged redelivered."""
        if isinstance(self.io, Wire):
            self.io.reset()
        self.backlog = {k: b"0" for k in self.keys}
        self.held.drop()
        what = {1: "an error reply", 2: "no reply in time", 3: "the connection failed"}
        return DriverError(
            f"redis: receive failed ({what.get(status, 'a reply out of step')}): {message}"
        )

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
            if isinstance(self.io, Wire):
                with contextlib.suppress(Exception):
                    self.io.close()
            with contextlib.suppress(Exception):
                close_client(self.r)
            self.driver.release_name(self.name)
