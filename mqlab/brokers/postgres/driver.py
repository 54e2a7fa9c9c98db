"""PostgreSQL as a queue, as mqperf ran it: one table, ``FOR UPDATE SKIP LOCKED``.

- table: ``id``, ``payload BYTEA``, ``next_delivery`` (+ a delivery count), indexed
  on ``next_delivery``; named after the driver's ``queue``.
- send: one multi-row INSERT per batch, its own transaction; the commit returns
  once the synchronous standby quorum confirmed (per ``synchronous_commit``).
- receive: one statement, one transaction: pick up to N rows whose
  ``next_delivery`` has passed ``FOR UPDATE SKIP LOCKED`` and push their
  ``next_delivery`` to now() + visibility timeout; nothing there: poll with a
  short backoff until ``timeout_s``.
- ack: DELETE by id.
- redelivery: a row handed out before (``deliveries > 1``) is flagged
  redelivered; ``redelivery_timeout_s`` is ``visibility_timeout_s``.
- remaining: ``count(*)`` of the table (acked rows are deleted), ``in_flight``
  the rows whose ``next_delivery`` is still ahead (claimed, not acked); with
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
restarted leaves it closed for good) and raises DriverError; the next call opens
a new one to the primary (``connect_timeout_s``), so a sender or receiver whose
worker retries comes back once the primary accepts connections again. What that
means for the queue: rows whose claim committed but whose reply was lost stay
hidden until their visibility timeout and are then delivered again (flagged
redelivered); an insert that failed may still have committed (delivered though
counted failed: at least once); an ack is a DELETE by id, so an ack repeated or
sent over a new connection deletes the row at most once, and an ack for a row no
longer there (already acked) deletes nothing. An ack whose lease ran out still
deletes the row, even if another receiver now holds it (that receiver's own ack
then deletes nothing).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg import pq, sql

from mqlab import envelope
from mqlab.brokers import compiled
from mqlab.brokers.base import (
    Delivery,
    Driver,
    Endpoints,
    Receiver,
    Remaining,
    Sender,
)
from mqlab.brokers.postgres.database import (
    INSERT_NAME,
    Settings,
    backoff,
    claim_sql,
    connect,
    insert_prepared_sql,
    primary,
    remaining_sql,
    schema_sql,
    succeeded,
    table_name,
)
from mqlab.errors import DriverError

LOG = logging.getLogger(__name__)
T = TypeVar("T")


_sendpath: Any = compiled.module  # None where the install did not build it
# the INSERTs a lane prepares itself (Parse), apart from those libpq prepared
LANE_INSERT_NAME = b"mqlab_lane_insert_"


class _Watchdog:
    """Cancels the connection's running statement once its deadline passes (a thread per client).

    ``arm`` wakes the thread only when it would otherwise sleep past the new deadline (it
    sleeps without one, or until a later one): a deadline that moves later, as each
    statement's does, is seen when the thread wakes for the earlier one. So a statement
    costs no thread switch, only the lock.
    """

    def __init__(self, conn: psycopg.Connection[Any] | None):
        self.conn = conn
        self.cond = threading.Condition()
        self.deadline: float | None = None
        self.fired = False
        self.closed = False
        self.sleeping_until = math.inf  # when the thread wakes by itself (inf: never)
        self.thread = threading.Thread(target=self._loop, name="mqlab-pg-watchdog", daemon=True)
        self.thread.start()

    def watch(self, conn: psycopg.Connection[Any] | None) -> None:
        """Watch ``conn`` from now on (a new connection after a reconnect, or none)."""
        with self.cond:
            self.conn, self.deadline, self.fired = conn, None, False

    def arm(self, timeout_s: float) -> None:
        with self.cond:
            self.deadline, self.fired = time.monotonic() + timeout_s, False
            if self.deadline < self.sleeping_until:
                self.cond.notify()

    def disarm(self) -> bool:
        """Stop watching; True if the statement was cancelled."""
        with self.cond:
            self.deadline = None
            return self.fired

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify()
        self.thread.join(timeout=5)

    def _loop(self) -> None:
        with self.cond:
            while not self.closed:
                if self.deadline is None:
                    self.sleeping_until = math.inf
                    self.cond.wait()
                    continue
                left = self.deadline - time.monotonic()
                if left > 0:
                    self.sleeping_until = self.deadline
                    self.cond.wait(left)
                    continue
                self.deadline, self.fired = None, True
                if self.conn is None:
                    continue
                try:  # under the lock: disarm() cannot return before the cancel was sent
                    self.conn.cancel_safe(timeout=5)
                except Exception as e:  # noqa: BLE001 - report via the statement's own failure
                    LOG.warning("postgres: cancel failed: %s", e)


class _Client:
    """One connection to the primary, opened again on the next call after a failed one."""

    def __init__(self, driver: PostgresDriver):
        self.settings: Settings = driver.settings
        self.endpoints = driver.endpoints
        self.table = driver.table
        self.conn: psycopg.Connection[Any] | None = None
        self.cur: psycopg.Cursor[Any] | None = None  # one per connection, used by every call
        self.prepared: set[int] = set()  # batch sizes whose INSERT this connection prepared
        self.generation = 0  # connections made: lanes prepare their INSERTs on each anew
        self.watchdog = _Watchdog(None)
        try:
            self._cursor()  # a wrong address or password fails here, at once
        except DriverError:
            self.watchdog.close()
            raise

    def _cursor(self) -> psycopg.Cursor[Any]:
        if self.conn is None or self.conn.closed or self.cur is None:
            self._drop()
            conn = connect(self.endpoints, primary(self.endpoints), self.settings)
            self.watchdog.watch(conn)
            self.conn, self.cur = conn, conn.cursor(binary=True)
            self.generation += 1
        return self.cur

    def _drop(self) -> None:
        """Forget the connection (after a failed call: it may be closed or broken)."""
        conn, self.conn, self.cur = self.conn, None, None
        self.prepared = set()
        self.watchdog.watch(None)
        if conn is not None:
            try:
                conn.close()
            except Exception as e:  # noqa: BLE001 - it is going away anyway
                LOG.debug("postgres: closing a failed connection: %s", e)

    def run(self, query: Any, params: Sequence[Any], what: str) -> list[tuple[Any, ...]]:
        """Execute one statement (its own transaction), bounded by ``commit_timeout_s``.

        A failure drops the connection: the next call connects again."""
        cur = self._cursor()

        def call() -> list[tuple[Any, ...]]:
            cur.execute(query, params)
            return cur.fetchall() if cur.description else []

        return self._watched(what, call)

    def insert(self, params: Sequence[bytes]) -> None:
        """A batch's multi-row INSERT through libpq itself (``psycopg.pq``): prepared once
        per connection and batch size, its payloads sent as binary parameters, the
        interpreter lock let go while libpq waits. What it does on the server is what
        ``run`` of :func:`insert_sql` does; psycopg's cursor layer around it costs about
        as much client CPU again per batch (bench/clients.py). Failures as ``run``."""
        n = len(params)
        pg = self._prepared((n,))
        name = INSERT_NAME + b"%d" % n
        self._watched("insert", lambda: succeeded(pg.exec_prepared(name, params, [1] * n, 1)))

    def _prepared(self, sizes: Iterable[int]) -> Any:
        """The connection's libpq handle, the INSERT prepared for each batch size."""
        self._cursor()
        assert self.conn is not None
        pg = self.conn.pgconn
        for n in sizes:
            if n not in self.prepared:
                query = insert_prepared_sql(self.table, n)
                name = INSERT_NAME + b"%d" % n
                self._watched("insert", lambda: succeeded(pg.prepare(name, query)))  # noqa: B023
                self.prepared.add(n)
        return pg

    def lane_socket(self) -> int:
        """The connection's socket for a ``mqlab._sendpath.Lanes`` lane (connected and
        idle); not on a TLS connection, whose bytes only libpq writes."""
        if self.conn is None or self.conn.closed or self.cur is None:
            raise DriverError("postgres: insert failed: not connected")
        pg = self.conn.pgconn
        if pg.ssl_in_use:
            self._drop()
            raise DriverError("postgres: insert failed: a TLS connection cannot send in lanes")
        if pg.transaction_status != pq.TransactionStatus.IDLE:
            self._drop()
            raise DriverError("postgres: insert failed: the connection was not idle")
        return int(pg.socket)

    def connected(self) -> bool:
        return self.conn is not None and not self.conn.closed and self.cur is not None

    def connect(self) -> None:
        """Connect now, if not connected (DriverError if that fails)."""
        try:
            self._cursor()
        except psycopg.Error as e:
            self._drop()
            raise DriverError(f"postgres: insert failed: {e}") from e

    def lane_failure(self, status: int, message: str | None) -> DriverError:
        """The error of a batch a PostgreSQL lane failed (see mqlab/_sendpath.c); the
        connection is dropped, the next call connects again."""
        self._drop()
        timeout = self.settings.commit_timeout_s
        if status == 2:
            return DriverError(
                f"postgres: insert not done within commit_timeout_s={timeout} s "
                "(are the synchronous standbys up?)"
            )
        if status == 3:
            return DriverError(f"postgres: insert failed: {message}")
        if status == 4:
            return DriverError(f"postgres: insert failed: {message}: the connection is dropped")
        return DriverError(f"postgres: insert failed: {message}")

    def _watched(self, what: str, call: Callable[[], T]) -> T:
        """``call()`` with the watchdog armed for ``commit_timeout_s``; a failure drops
        the connection and raises DriverError, a cancel by the watchdog with the commit
        timeout's message."""
        timeout = self.settings.commit_timeout_s
        self.watchdog.arm(timeout)
        try:
            out = call()
        except psycopg.errors.QueryCanceled as e:
            self.watchdog.disarm()
            self._drop()
            raise DriverError(
                f"postgres: {what} not done within commit_timeout_s={timeout} s "
                "(are the synchronous standbys up?)"
            ) from e
        except psycopg.Error as e:
            self.watchdog.disarm()
            self._drop()
            raise DriverError(f"postgres: {what} failed: {e}") from e
        if self.watchdog.disarm():
            self._drop()
            raise DriverError(
                f"postgres: {what} committed locally but not confirmed by the standby "
                f"quorum within commit_timeout_s={timeout} s"
            )
        return out

    def close(self) -> None:
        self.watchdog.close()
        self._drop()


class PostgresSender(Sender):
    def __init__(self, driver: PostgresDriver):
        self.c = _Client(driver)
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


class PostgresReceiver(Receiver):
    def __init__(self, driver: PostgresDriver):
        self.c = _Client(driver)
        self.claim = claim_sql(driver.table).as_bytes(None)
        self.delete = (
            sql.SQL("DELETE FROM {} WHERE id = ANY(%s)")
            .format(sql.Identifier(driver.table))
            .as_bytes(None)
        )
        self.visibility_s = driver.settings.visibility_timeout_s
        self.poll_cap_s = driver.settings.poll_interval_s

    def receive(self, max_messages: int, timeout_s: float) -> list[Delivery]:
        deadline = time.monotonic() + timeout_s
        sleep_s = 0.0
        while True:
            rows = self.c.run(self.claim, (max_messages, self.visibility_s), "receive")
            if rows:
                return [
                    Delivery(bytes(payload), row_id, deliveries > 1)
                    for row_id, payload, deliveries in rows
                ]
            left = deadline - time.monotonic()
            if left <= 0:
                return []
            sleep_s = backoff(sleep_s, self.poll_cap_s)
            time.sleep(min(sleep_s, left))

    def ack(self, deliveries: Sequence[Delivery]) -> None:
        if deliveries:
            self.c.run(self.delete, ([d.handle for d in deliveries],), "ack")

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
        return PostgresReceiver(self)

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
