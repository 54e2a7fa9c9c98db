"""PostgreSQL as a queue, as mqperf ran it: one table, ``FOR UPDATE SKIP LOCKED``.

- table: ``id``, ``payload BYTEA``, ``next_delivery`` (+ a delivery count), indexed
  on ``next_delivery``; named after the driver's ``queue``.
- send: one multi-row INSERT per batch, its own transaction; the commit returns
  once the synchronous standby quorum confirmed (per ``synchronous_commit``).
- receive: one statement, one transaction: pick up to N rows whose
  ``next_delivery`` has passed, oldest first (``ORDER BY next_delivery``: the planner
  reads them from the index; without it, it scanned the heap and every dead row a
  queue's deletes leave, hundreds of pages per claim), ``FOR UPDATE SKIP LOCKED``, and
  push their ``next_delivery`` to now() + visibility timeout; nothing there: poll with a
  short backoff until ``timeout_s``.
- ack: DELETE by id (``id = ANY`` of the batch's ids), and in the same statement
  (one transaction, one commit) the claim of the next batch, as many rows as the last
  receive asked for, none of the acked ones: what the next receive returns, if it
  comes within half the visibility timeout; else, and on close, those rows are
  released (ready again at once, the claim not counted). An ack with rows still held
  ahead, or before any receive, only deletes.
- all through libpq itself (``receiver.py``): prepared once per connection, binary
  parameters and rows, no cursor layer; the sender's INSERT likewise (``client.py``).
- a worker's receivers in lanes (``receive_lanes``, where ``mqlab._recvpath`` is built and
  connections are not TLS): all driven from one thread in C (mqlab/_recvpath.c), each
  batch the same ack-and-claim statement written on its connection's socket as soon as
  the last batch's reply is read (that batch's rows are recorded by then); only each
  row's header is kept. A receiver there has ``receive_connections`` (2) connections, each
  with its own claim in flight; a statement a deadlock between them rolled back is sent
  again. Every call ends with each connection's last batch acked (the statement with
  limit 0); a connection that fails is dropped, its last batch unacked.
- redelivery: a row handed out before (``deliveries > 1``) is flagged
  redelivered; ``redelivery_timeout_s`` is ``visibility_timeout_s``.
- remaining: ``count(*)`` of the table (acked rows are deleted), ``in_flight``
  the rows whose ``next_delivery`` is still ahead (claimed, not acked: handed out or
  held ahead by an open receiver); with
  ``identify`` the rows' first bytes, all read in one snapshot.

A receive that finds nothing polls again after 5 ms, 10 ms, ... up to
``poll_interval_s``: a message arriving during the call is returned within about
``poll_interval_s``. (LISTEN/NOTIFY would wake receivers at once, but a commit
that notifies holds one cluster-wide lock until it is done, the wait for the
synchronous standbys included: it would serialize the senders being measured.)

With every synchronous standby gone a commit waits forever, and
``statement_timeout`` does not end that wait; a watchdog thread cancels the
statement after ``commit_timeout_s`` and the call raises DriverError (the row
may then be committed locally but not replicated).

A broker restart: a call that fails drops its connection (a server killed or
restarted leaves it closed for good) and raises DriverError; the next call opens a
new one to the primary (``connect_timeout_s``), so a sender or receiver whose worker
retries comes back once the primary accepts connections again. What that means for
the queue: rows whose claim committed but whose reply was lost stay hidden until
their visibility timeout and are then delivered again (flagged redelivered), as are
rows held ahead by a receiver that could not release them; an insert that failed may
still have committed (delivered though counted failed: at least once); an ack is a
DELETE by id, so an ack repeated or sent over a new connection deletes the row at
most once, and an ack for a row no longer there (already acked) deletes nothing. An
ack whose lease ran out still deletes the row, even if another receiver now holds it
(that receiver's own ack then deletes nothing).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from mqlab import envelope
from mqlab.brokers import compiled
from mqlab.brokers.base import (
    Driver,
    Endpoints,
    LaneReceipt,
    Receiver,
    Remaining,
    Sender,
    merged,
)
from mqlab.brokers.postgres.client import Client
from mqlab.brokers.postgres.database import (
    Settings,
    connect,
    insert_prepared_sql,
    primary,
    remaining_sql,
    schema_sql,
    table_name,
)
from mqlab.brokers.postgres.receiver import PostgresReceiver
from mqlab.errors import DriverError

LOG = logging.getLogger(__name__)


_sendpath: Any = compiled.module  # None where the install did not build it
# the INSERTs a lane prepares itself (Parse), apart from those libpq prepared
LANE_INSERT_NAME = b"mqlab_lane_insert_"


class PostgresSender(Sender):
    def __init__(self, driver: PostgresDriver):
        self.c = Client(driver.settings, driver.endpoints, driver.table)
        self.lane_spec: tuple[Any, ...] | None = None  # a lane's run spec, for lane_pool
        self.lane_pool: envelope.PayloadPool | None = None

    def send(self, batch: Sequence[bytes]) -> None:
        if batch:
            self.c.insert(batch)

    # -- lanes (mqlab._sendpath.Lanes): each batch the INSERT of its size in the extended
    # query protocol on the connection's socket (Parse the first time a connection sends
    # that size, then Bind, Execute, Sync), done once ReadyForQuery says its transaction
    # committed; a batch with no reply within commit_timeout_s fails and its connection is
    # dropped (the next batch connects again) --
    lane_proto = _sendpath.PG if _sendpath is not None else None

    def lane_timeout_ns(self) -> int:
        return int(self.c.settings.commit_timeout_s * 1e9)

    def lane_connected(self) -> bool:
        return self.c.connected()

    def lane_connect(self) -> None:
        self.c.connect()

    def lane_args(
        self, sender: int, pool: envelope.PayloadPool
    ) -> tuple[int, tuple[Any, ...], int, int]:
        fd = self.c.lane_socket()
        if self.lane_spec is None or self.lane_spec[6] != sender or self.lane_pool is not pool:
            pads = b"".join(pool._pads)
            magic, version = envelope.MAGIC, envelope.VERSION
            sql_head = insert_prepared_sql(self.c.table, 1).rsplit(b"(", 1)[0]
            self.lane_spec = (
                LANE_INSERT_NAME,
                sql_head,
                pads,
                len(pool._pads),
                magic,
                version,
                sender,
            )
            self.lane_pool = pool
        return fd, self.lane_spec, 0, self.c.generation

    def lane_outcome(self, status: int, integer: int, message: str | None) -> Exception | None:
        return self.c.lane_failure(status, message) if status else None

    def close(self) -> None:
        self.c.close()


class PostgresDriver(Driver):
    name = "postgres"
    Settings = Settings
    client_libraries = ("psycopg", "psycopg-binary")
    identifies_remaining = True

    def __init__(self, settings: Any, endpoints: Endpoints, queue: str):
        super().__init__(settings, endpoints, queue)
        self.table = table_name(queue)
        self._plain: bool | None = None  # the primary's connections are not TLS

    def _admin(self, statements: Sequence[Any]) -> list[Any]:
        conn = connect(self.endpoints, primary(self.endpoints), self.settings)
        try:
            out = []
            for st in statements:
                cur = conn.execute(st)
                out.append(cur.fetchall() if cur.description else None)
            return out
        except psycopg.Error as e:
            raise DriverError(f"postgres: setup of table {self.table} failed: {e}") from e
        finally:
            conn.close()

    def setup(self) -> None:
        replicas: int = self.settings.replicas
        results = self._admin([*schema_sql(self.table), "SELECT count(*) FROM pg_stat_replication"])
        standbys = results[-1][0][0]
        if standbys < replicas - 1:
            LOG.warning(
                "postgres: %d standbys streaming, the profile wants %d replicas", standbys, replicas
            )

    def teardown(self) -> None:
        self._admin([sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(self.table))])

    @property
    def redelivery_timeout_s(self) -> float:
        return float(self.settings.visibility_timeout_s)

    def remaining(self, identify: bool = False) -> Remaining:
        """Rows left in the table (ready + claimed); ``in_flight``: the claimed ones."""
        count_sql, heads_sql = remaining_sql(self.table)
        conn = connect(self.endpoints, primary(self.endpoints), self.settings)
        try:
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ  # one snapshot
            with conn.transaction():
                row = conn.execute(count_sql).fetchone()
                heads = None
                if identify:
                    rows = conn.execute(heads_sql, (self.identify_cap,)).fetchall()
                    heads = [bytes(r[0]) for r in rows]
        except psycopg.Error as e:
            raise DriverError(f"postgres: cannot count the rows of {self.table}: {e}") from e
        finally:
            conn.close()
        assert row is not None
        return Remaining(int(row[0]), heads, int(row[1]))

    def receives_in_lanes(self) -> bool:
        """Where ``mqlab._recvpath`` is built and the connections are not TLS."""
        return compiled.recv_module is not None and self.sends_in_lanes()

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
        """Every receiver's connections (``receive_connections`` each) connected and the
        statement prepared on them, then all driven by ``mqlab._recvpath.pg_receive``
        (mqlab/_recvpath.c) until ``until_ns``, each connection a lane of its own; a
        receiver gets what its connections got, in one receipt (:func:`merged`). A receiver
        that cannot connect gets nothing and its error."""
        assert compiled.recv_module is not None
        out: list[LaneReceipt | None] = [None] * len(receivers)
        going: list[tuple[int, PostgresReceiver, int]] = []  # (index, receiver, lanes)
        fds: list[int] = []
        for i, r in enumerate(receivers):
            assert isinstance(r, PostgresReceiver)
            try:
                mine = r.lane_sockets()
            except DriverError as e:
                out[i] = LaneReceipt(b"", b"", b"", b"", 0, 0, 0, e)
                continue
            fds += mine
            going.append((i, r, len(mine)))
        if going:
            spec = going[0][1].lane_spec(max_messages)
            got = compiled.recv_module.pg_receive(fds, spec, until_ns, wall_offset_ns, wake_fd)
            at = 0
            for i, r, n in going:
                rows, at = got[at : at + n], at + n
                parts = []
                for k, row in enumerate(rows):
                    headers, recv_ns, lens, flagged, received, short, acked, status, msg = row[:9]
                    if row[9]:
                        LOG.info(
                            "postgres: %d receive statements sent again after a deadlock", row[9]
                        )
                    error = r.lane_failure(k, status, msg) if status else None
                    parts.append(
                        LaneReceipt(headers, recv_ns, lens, flagged, received, short, acked, error)
                    )
                out[i] = merged(parts)
        return [o for o in out if o is not None]

    def sends_in_lanes(self) -> bool:
        """Where ``mqlab._sendpath`` is built and the primary's connections are not TLS
        (asked once; no answer: not in lanes, and the senders' own connections will say
        why)."""
        if compiled.module is None:
            return False
        if self._plain is None:
            try:
                conn = connect(self.endpoints, primary(self.endpoints), self.settings)
            except DriverError:
                return False
            try:
                self._plain = not conn.pgconn.ssl_in_use
            finally:
                conn.close()
        return self._plain

    def sender(self) -> Sender:
        return PostgresSender(self)

    def receiver(self) -> Receiver:
        return PostgresReceiver(self.settings, self.endpoints, self.table)

    def server_versions(self) -> list[str]:
        versions = []
        for node in self.endpoints.nodes:
            try:
                conn = connect(self.endpoints, node, self.settings)
            except DriverError:
                LOG.debug("no version from %s:%s", node.host, node.port)
                continue
            try:
                row = conn.execute("SHOW server_version").fetchone()
                versions.append(f"PostgreSQL {row[0] if row else '?'}")
            finally:
                conn.close()
        return versions


DRIVER = PostgresDriver
