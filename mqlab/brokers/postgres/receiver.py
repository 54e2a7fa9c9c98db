"""The receiving side of PostgreSQL as a queue (see the driver's docstring): the claim, the
ack that claims the next batch in the same statement, and the release of what was claimed
ahead, all through libpq itself.

Each statement is prepared once per connection (``Client.exec``) and runs with binary
parameters and binary rows: the claim's limit an int8, the visibility timeout a float8;
the ack's ids one int8 array. A row comes back as its id (int8), payload (the bytes as
stored) and delivery count (int4). psycopg's cursor layer (parameter adaptation, the
prepared-statement cache, row loaders) cost about as much client CPU per batch again
(bench/clients.py).
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Sequence
from typing import Any

from psycopg import pq, sql

from mqlab import envelope
from mqlab.brokers.base import Delivery, Endpoints, Receiver
from mqlab.brokers.postgres.client import Client
from mqlab.brokers.postgres.database import Settings, backoff, claim_sql
from mqlab.errors import DriverError

LOG = logging.getLogger(__name__)

CLAIM_NAME = b"mqlab_claim"
ACK_NAME = b"mqlab_ack"
ACK_CLAIM_NAME = b"mqlab_ack_claim"
RELEASE_NAME = b"mqlab_release"
INT4_OID = 23
INT8_OID = 20
_INT8 = struct.Struct("!q")
_ONCE = b"\x00\x00\x00\x01"  # the delivery count 1 as a binary int4
_FLOAT8 = struct.Struct("!d")
_ARRAY_HEAD = struct.Struct("!iiiii")  # dimensions, has nulls, element type, length, lower bound


def numbered(query: sql.Composable, params: int) -> bytes:
    """``query``'s ``%s`` placeholders as libpq's ``$1``, ``$2``... (the table's name, a
    plain identifier, holds no ``%``)."""
    parts = query.as_bytes(None).split(b"%s")
    if len(parts) != params + 1:
        raise ValueError(f"expected {params} placeholders in {parts!r}")
    out = parts[0]
    for i, part in enumerate(parts[1:], 1):
        out += b"$%d" % i + part
    return out


def delete_sql(table: str) -> sql.Composed:
    """The ack: ``DELETE FROM t WHERE id = ANY(%s)`` (param: the ids)."""
    return sql.SQL("DELETE FROM {} WHERE id = ANY(%s)").format(sql.Identifier(table))


def ack_claim_sql(table: str) -> bytes:
    """The ack and the next claim in one statement, one transaction (params: the acked ids,
    limit, visibility_s): :func:`claim_sql` that also deletes the acked rows and never picks
    one of them (a row whose lease ran out could be ready again)."""
    return (
        sql.SQL("""WITH gone AS (DELETE FROM {t} WHERE id = ANY($1)),
picked AS (
    SELECT id FROM {t} WHERE next_delivery <= now() AND id <> ALL($1)
    ORDER BY next_delivery LIMIT $2 FOR UPDATE SKIP LOCKED)
UPDATE {t} AS j SET next_delivery = now() + make_interval(secs => $3),
    deliveries = j.deliveries + 1
FROM picked WHERE j.id = picked.id
RETURNING j.id, j.payload, j.deliveries""")
        .format(t=sql.Identifier(table))
        .as_bytes(None)
    )


def release_sql(table: str) -> bytes:
    """Rows claimed ahead and never handed out, ready again at once and their delivery not
    counted (params: ids, the delivery counts the claim returned): a row claimed since by
    another receiver (its lease ran out) has another count and stays as it is."""
    return (
        sql.SQL("""UPDATE {t} AS j SET next_delivery = now(), deliveries = j.deliveries - 1
FROM unnest($1::bigint[], $2::integer[]) AS h(id, n)
WHERE j.id = h.id AND j.deliveries = h.n""")
        .format(t=sql.Identifier(table))
        .as_bytes(None)
    )


def int8_array(ids: Sequence[int]) -> bytes:
    """``ids`` as a one-dimensional ``bigint[]`` in PostgreSQL's binary format."""
    n = len(ids)
    items = struct.pack("!" + "iq" * n, *[v for i in ids for v in (8, i)])
    return _ARRAY_HEAD.pack(1, 0, INT8_OID, n, 1) + items


def int4_array_of(cells: Sequence[bytes]) -> bytes:
    """Binary int4 values (as libpq returns them) as one ``integer[]``, binary."""
    items = b"".join(b"\x00\x00\x00\x04" + c for c in cells)
    return _ARRAY_HEAD.pack(1, 0, INT4_OID, len(cells), 1) + items


def deliveries_of(result: Any) -> list[Delivery]:
    """The claim's rows (id, payload, deliveries; binary) as deliveries: a row handed out
    before (``deliveries > 1``; the claim counted this delivery) is flagged redelivered."""
    get = result.get_value
    return [
        Delivery(get(i, 1), _INT8.unpack(get(i, 0))[0], get(i, 2) != _ONCE)
        for i in range(result.ntuples)
    ]


class PostgresReceiver(Receiver):
    """Claims with :func:`claim_sql`; an ack deletes its rows and claims the next batch
    (as many as the last receive asked for) in the same statement: one round trip and one
    commit per batch instead of two. The rows claimed ahead are what the next receive
    returns, if it comes within half the visibility timeout; else, or on close, they are
    released (ready again at once, their delivery not counted)."""

    def __init__(self, settings: Settings, endpoints: Endpoints, table: str):
        self.c = Client(settings, endpoints, table)
        self.claim = numbered(claim_sql(table), 2)
        self.delete = numbered(delete_sql(table), 1)
        self.ack_claim = ack_claim_sql(table)
        self.release = release_sql(table)
        self.visibility = _FLOAT8.pack(float(settings.visibility_timeout_s))
        self.hold_s = settings.visibility_timeout_s / 2  # hand out what was claimed ahead
        self.poll_cap_s = settings.poll_interval_s
        self.limit = b""  # the last receive's max_messages (int8): what an ack claims
        self.ahead: list[Delivery] = []  # claimed by an ack, not handed out yet
        self.ahead_counts: list[bytes] = []  # their delivery counts (binary int4)
        self.ahead_at = 0.0  # when the ack that claimed them was sent (monotonic)
        self.lane_clients: list[Client] = [self.c]  # in lanes: receive_connections of them

    def receive(self, max_messages: int, timeout_s: float) -> list[Delivery]:
        deadline = time.monotonic() + timeout_s
        params = (_INT8.pack(max_messages), self.visibility)
        self.limit = params[0]
        if self.ahead:
            if time.monotonic() - self.ahead_at < self.hold_s:
                out, self.ahead = self.ahead[:max_messages], self.ahead[max_messages:]
                del self.ahead_counts[:max_messages]
                return out
            self._release()
        sleep_s = 0.0
        while True:
            result = self.c.exec(CLAIM_NAME, self.claim, params, "receive")
            if result.ntuples:
                return deliveries_of(result)
            left = deadline - time.monotonic()
            if left <= 0:
                return []
            sleep_s = backoff(sleep_s, self.poll_cap_s)
            time.sleep(min(sleep_s, left))

    def ack(self, deliveries: Sequence[Delivery]) -> None:
        if not deliveries:
            return
        ids = int8_array([d.handle for d in deliveries])
        if not self.limit or self.ahead:
            self.c.exec(ACK_NAME, self.delete, (ids,), "ack")
            return
        sent_at = time.monotonic()
        params = (ids, self.limit, self.visibility)
        result = self.c.exec(ACK_CLAIM_NAME, self.ack_claim, params, "ack")
        self.ahead = deliveries_of(result)
        self.ahead_counts = [result.get_value(i, 2) for i in range(result.ntuples)]
        self.ahead_at = sent_at

    # -- in lanes (mqlab/_recvpath.c, the driver's receive_lanes): every receiver of a
    # worker driven from one thread; each batch the ack-and-claim statement written on a
    # connection's socket, acking that connection's last batch and claiming its next. A
    # receiver has ``receive_connections`` connections there, each with its own claim in
    # flight: the statement is a synchronously replicated commit, so one in flight held a
    # receiver to one commit's round trip per batch --
    def lane_sockets(self) -> list[int]:
        """Each lane connection's socket, connected, idle, the ack-and-claim prepared on
        it; rows held ahead released first (DriverError if any of that fails: the
        connections that failed are dropped)."""
        if self.ahead:
            self._release()
        while len(self.lane_clients) < self.c.settings.receive_connections:
            self.lane_clients.append(Client(self.c.settings, self.c.endpoints, self.c.table))
        fds = []
        for c in self.lane_clients:
            pg = c.prepare(ACK_CLAIM_NAME, self.ack_claim, "receive")
            if pg.ssl_in_use or pg.transaction_status != pq.TransactionStatus.IDLE:
                c._drop()
                raise DriverError("postgres: receive failed: the connection is not plain and idle")
            fds.append(int(pg.socket))
        return fds

    def lane_spec(self, max_messages: int) -> tuple[bytes, int, float, int, int, int]:
        s = self.c.settings
        return (
            ACK_CLAIM_NAME,
            max_messages,
            float(s.visibility_timeout_s),
            int(s.poll_interval_s * 1e9),
            int(s.commit_timeout_s * 1e9),
            envelope.HEADER_BYTES,
        )

    def lane_failure(self, k: int, status: int, message: str | None) -> DriverError:
        """The error lane connection ``k`` ended with (mqlab/_recvpath.c); it is dropped."""
        self.lane_clients[k]._drop()
        if status == 2:
            timeout = self.c.settings.commit_timeout_s
            return DriverError(f"postgres: receive not done within commit_timeout_s={timeout} s")
        return DriverError(f"postgres: receive failed: {message}")

    def _release(self) -> None:
        """Give back the rows claimed ahead (a failure raises DriverError: they are then
        delivered again once their lease runs out)."""
        ids = int8_array([d.handle for d in self.ahead])
        counts = int4_array_of(self.ahead_counts)
        self.ahead, self.ahead_counts = [], []
        self.c.exec(RELEASE_NAME, self.release, (ids, counts), "release")

    def close(self) -> None:
        try:
            if self.ahead:
                self._release()
        except DriverError as e:
            LOG.info("postgres: rows claimed ahead come again after their lease: %s", e)
        finally:
            for c in self.lane_clients:
                c.close()
