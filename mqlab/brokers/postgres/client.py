"""One connection to the primary per sender or receiver, and the watchdog that bounds
each of its statements by ``commit_timeout_s`` (see the driver's docstring)."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg import pq

from mqlab.brokers.base import Endpoints
from mqlab.brokers.postgres.database import (
    INSERT_NAME,
    Settings,
    connect,
    insert_prepared_sql,
    primary,
    succeeded,
)
from mqlab.errors import DriverError

LOG = logging.getLogger(__name__)
T = TypeVar("T")

_DONE = (int(pq.ExecStatus.TUPLES_OK), int(pq.ExecStatus.COMMAND_OK))


def returned(result: Any) -> Any:
    """A libpq result that succeeded (rows or none); else raises as :func:`succeeded`."""
    if result.status in _DONE:
        return result
    succeeded(result)
    return result


class Watchdog:
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


class Client:
    """One connection to the primary, opened again on the next call after a failed one."""

    def __init__(self, settings: Settings, endpoints: Endpoints, table: str):
        self.settings = settings
        self.endpoints = endpoints
        self.table = table
        self.conn: psycopg.Connection[Any] | None = None
        self.cur: psycopg.Cursor[Any] | None = None  # one per connection, used by every call
        self.prepared: set[int] = set()  # batch sizes whose INSERT this connection prepared
        self.statements: set[bytes] = set()  # names of the statements it prepared (exec)
        self.generation = 0  # connections made: lanes prepare their INSERTs on each anew
        self.watchdog = Watchdog(None)
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
        self.statements = set()
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

    def exec(self, name: bytes, query: bytes, params: Sequence[bytes], what: str) -> Any:
        """The libpq result of ``query`` (numbered parameters) prepared once per connection
        as ``name``, executed with ``params`` in binary, its rows in binary (``psycopg.pq``:
        no cursor layer, the interpreter lock let go while libpq waits). Failures as
        ``run``."""
        pg = self.prepare(name, query, what)
        formats = [1] * len(params)
        return self._watched(what, lambda: returned(pg.exec_prepared(name, params, formats, 1)))

    def prepare(self, name: bytes, query: bytes, what: str) -> Any:
        """The connection's libpq handle (connecting first if needed), ``query`` prepared
        on it as ``name`` once per connection. Failures as ``run``."""
        try:
            self._cursor()
        except psycopg.Error as e:
            self._drop()
            raise DriverError(f"postgres: {what} failed: {e}") from e
        assert self.conn is not None
        pg = self.conn.pgconn
        if name not in self.statements:
            self._watched(what, lambda: succeeded(pg.prepare(name, query)))
            self.statements.add(name)
        return pg

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
