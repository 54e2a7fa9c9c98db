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
- receivers in lanes (``receive_lanes``, where ``mqlab._recvpath`` is built and
  ``prefetch`` > 0: a worker's receivers then run from one thread): each call first
  reads a receiver's own pending entries (at its start and after a failure) and, every
  ``reclaim_interval_s``, takes over idle ones, through the Python path above, acking
  each read at once; then mqlab/_recvpath.c drives every receiver's connection: rounds
  of the last read's XACK and XDEL followed by an XREADGROUP of ``prefetch`` new entries
  (BLOCKing after one that found nothing), each read recorded as a batch and acked in
  the next round, all acked before the call returns. A failed connection is dropped and
  its receiver reads its own pending entries again first.
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

import itertools
import logging
import os
import socket
import threading
from collections.abc import Sequence
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel

from mqlab import clock, envelope
from mqlab.brokers import compiled
from mqlab.brokers.base import (
    IDENTIFY_PREFIX_BYTES,
    Driver,
    LaneReceipt,
    Receiver,
    Remaining,
    Sender,
    merged,
    receipt_of,
)
from mqlab.brokers.redis.receiver import RedisReceiver
from mqlab.brokers.redis.sender import RedisSender
from mqlab.brokers.redis.streams import FIELD, Settings, close_client, key_names
from mqlab.errors import DriverError

LOG = logging.getLogger(__name__)


PAGE = 10_000  # entries per XRANGE / XPENDING call in remaining()
# receivers in lanes: a read that follows one that found nothing blocks this long at most
# (new entries end it at once; the compiled loop returns at its cut no later)
LANE_BLOCK_NS = 50_000_000


SEND_PATH = compiled.SEND_PATH


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
        return compiled.module is not None

    def sender(self) -> Sender:
        return RedisSender(self)

    def receives_in_lanes(self) -> bool:
        """Where ``mqlab._recvpath`` is built and receivers read ahead (``prefetch`` > 0):
        a worker's receivers are driven from one thread (:meth:`receive_lanes`)."""
        module = compiled.recv_module
        return (
            module is not None and hasattr(module, "redis_receive") and self.settings.prefetch > 0
        )

    def receive_path(self) -> str:
        return "compiled-lanes" if self.receives_in_lanes() else "python"

    def receive_lanes(
        self,
        receivers: Sequence[Receiver],
        max_messages: int,
        until_ns: int,
        wall_offset_ns: int,
        wake_fd: int,
    ) -> list[LaneReceipt]:
        """Each receiver's own pending entries (after its start or a failure) and, every
        ``reclaim_interval_s``, the idle ones it takes over go through its Python path
        (read, acked; :meth:`RedisReceiver.lane_prelude`); then every receiver's
        connection is driven by ``mqlab._recvpath.redis_receive`` (mqlab/_recvpath.c)
        until ``until_ns``: new entries read ahead (``prefetch`` a read), recorded, and
        acked (XACK, and XDEL) with the next read. A receiver whose connection fails gets
        what it had and the error; its entries read but not acked come again (its own
        pending entries are read again first)."""
        module = compiled.recv_module
        assert module is not None
        s: Settings = self.settings
        out: list[LaneReceipt] = []
        conns: list[tuple[int, bytes]] = []
        going: list[tuple[int, RedisReceiver, LaneReceipt]] = []
        for i, r in enumerate(receivers):
            assert isinstance(r, RedisReceiver)
            pre, acked, error = r.lane_prelude(max_messages)
            first = receipt_of(pre, clock.wall_ns(), acked, error)
            out.append(first)
            if error is None:
                try:
                    conns.append(r.lane_conn())
                except DriverError as e:
                    out[i] = first._replace(error=e)
                    continue
                going.append((i, r, first))
        if conns:
            spec = (
                self.group.encode(),
                tuple(self.keys),
                FIELD,
                max(s.prefetch, max_messages),
                s.delete_on_ack,
                LANE_BLOCK_NS,
                int(s.socket_timeout_s * 1e9),
                envelope.HEADER_BYTES,
            )
            got = module.redis_receive(conns, spec, until_ns, wall_offset_ns, wake_fd)
            for (i, r, first), row in zip(going, got, strict=True):
                headers, recv_ns, lens, flagged, received, short, acked, status, msg = row
                error = r.lane_failure(status, msg) if status else None
                part = LaneReceipt(headers, recv_ns, lens, flagged, received, short, acked, error)
                out[i] = merged([first, part])
        return out

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
