"""Pure logic of the PostgreSQL driver and launcher: names, SQL, user choice, backoff, watchdog."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psycopg
import pytest
from psycopg import pq

from mqlab.brokers.base import Delivery, Endpoints, NodeEndpoint
from mqlab.brokers.postgres import client as pg
from mqlab.brokers.postgres import receiver as recv
from mqlab.brokers.postgres.binaries import (
    ServerUser,
    cache_name,
    pick_server_user,
    unreachable_dir,
)
from mqlab.brokers.postgres.client import Watchdog
from mqlab.brokers.postgres.cluster import primary_conf, sync_standby_names
from mqlab.brokers.postgres.database import (
    MAX_IDENT,
    Settings,
    backoff,
    claim_sql,
    insert_prepared_sql,
    insert_sql,
    primary,
    schema_sql,
    table_name,
)
from mqlab.brokers.postgres.driver import PostgresDriver
from mqlab.brokers.postgres.receiver import deliveries_of, int8_array, numbered
from mqlab.errors import DriverError, ScenarioError
from mqlab.typed import build


@pytest.mark.parametrize("queue", ["jobs", "contract_0123abcd", "_x"])
def test_plain_queue_names_are_kept(queue: str) -> None:
    assert table_name(queue) == queue


@pytest.mark.parametrize("queue", ["Jobs", "my.queue", "9lives", "a-b", "", "x" * 80, "jobs;DROP"])
def test_other_queue_names_become_safe_distinct_identifiers(queue: str) -> None:
    name = table_name(queue)
    assert name[0].isalpha() or name[0] == "_"
    assert all(c.isalnum() or c == "_" for c in name) and name == name.lower()
    assert len(name + "_next_idx") <= MAX_IDENT
    assert table_name(queue) == name  # stable


def test_names_that_sanitize_alike_stay_apart() -> None:
    assert table_name("a.b") != table_name("a-b") != table_name("a_b")
    assert table_name("x" * 80) != table_name("x" * 81)


def test_insert_is_one_multi_row_statement() -> None:
    text = insert_sql("jobs", 3).as_string(None)
    assert text == 'INSERT INTO "jobs" (payload) VALUES (%s), (%s), (%s)'
    prepared = insert_prepared_sql('jo"bs', 3)  # the same, numbered, to prepare
    assert prepared == b'INSERT INTO "jo""bs" (payload) VALUES ($1), ($2), ($3)'


def test_claim_skips_locked_rows_and_pushes_next_delivery() -> None:
    text = " ".join(claim_sql("jobs").as_string(None).split())
    assert "FOR UPDATE SKIP LOCKED" in text
    # oldest first, through the next_delivery index (a plain LIMIT scans the heap and its
    # dead rows: test_cluster.py's plan test)
    assert "next_delivery <= now() ORDER BY next_delivery LIMIT %s" in text
    assert "SET next_delivery = now() + make_interval(secs => %s)" in text
    assert "deliveries = j.deliveries + 1" in text
    assert text.endswith("RETURNING j.id, j.payload, j.deliveries")


def test_schema_is_idempotent_sql() -> None:
    table, index = (s.as_string(None) for s in schema_sql("jobs"))
    assert table.startswith('CREATE TABLE IF NOT EXISTS "jobs"') and "payload BYTEA" in table
    assert index == 'CREATE INDEX IF NOT EXISTS "jobs_next_idx" ON "jobs" (next_delivery)'


def test_backoff_doubles_up_to_the_cap() -> None:
    steps = [0.0]
    for _ in range(8):
        steps.append(backoff(steps[-1], 0.1))
    assert steps[1] == 0.005 and steps[2] == 0.01
    assert max(steps) == 0.1 and steps[-1] == 0.1


def test_primary_is_the_node_marked_so() -> None:
    nodes = (
        NodeEndpoint(0, "h0", 1, {"role": "standby"}),
        NodeEndpoint(1, "h1", 2, {"role": "primary"}),
    )
    assert primary(Endpoints("postgres", nodes)).host == "h1"
    assert primary(Endpoints("postgres", (NodeEndpoint(0, "h0", 1),))).host == "h0"


def test_settings_validate_synchronous_commit(tmp_path: object) -> None:
    s = build(Settings, {"synchronous_commit": "remote_apply"}, "p.toml", "settings")  # type: ignore[arg-type]
    assert s.synchronous_commit == "remote_apply" and s.visibility_timeout_s == 30.0
    with pytest.raises(ScenarioError, match="synchronous_commit"):
        build(Settings, {"synchronous_commit": "always"}, "p.toml", "settings")  # type: ignore[arg-type]


def test_server_user_choice() -> None:
    assert pick_server_user(1000, {}) is None  # not root: run as ourselves
    assert pick_server_user(0, {"MQLAB_PG_USER": "pgrunner"}) == "pgrunner"
    assert pick_server_user(0, {}, exists=lambda name: name == "postgres") == "postgres"
    assert pick_server_user(0, {}, exists=lambda name: False) == "nobody"


def test_quorum_and_config() -> None:
    assert sync_standby_names(3) == "ANY 1 (s1, s2)"
    assert sync_standby_names(2) == "ANY 1 (s1)"
    assert sync_standby_names(1) == ""
    conf = primary_conf(3)
    assert "synchronous_standby_names = 'ANY 1 (s1, s2)'" in conf
    assert "synchronous_commit = remote_write" in conf
    assert "listen_addresses = '127.0.0.1'" in conf


def test_cache_name_is_a_safe_file_name() -> None:
    assert cache_name("18.6.3") == "mqlab-pginstall-18.6.3"
    assert "/" not in cache_name("1/../2")


class _SlowConn:
    """Stands in for a connection whose statement never returns until cancelled."""

    def __init__(self) -> None:
        self.cancelled = threading.Event()

    def cancel_safe(self, timeout: float = 0) -> None:
        self.cancelled.set()


def test_watchdog_cancels_after_the_deadline_only() -> None:
    conn = _SlowConn()
    dog = Watchdog(conn)  # type: ignore[arg-type]
    try:
        dog.arm(10)
        assert dog.disarm() is False and not conn.cancelled.is_set()
        dog.arm(0.05)
        assert conn.cancelled.wait(5)
        assert dog.disarm() is True
        dog.arm(10)  # re-armed: the flag is fresh
        assert dog.disarm() is False
    finally:
        dog.close()
    assert not dog.thread.is_alive()


def test_watchdog_disarmed_or_rearmed_before_its_deadline_never_cancels() -> None:
    """A statement that returned in time (disarm) or the next one (arm again, with the
    full timeout) is never cancelled by the earlier deadline; closing an armed watchdog
    ends its thread without cancelling."""
    conn = _SlowConn()
    dog = Watchdog(conn)  # type: ignore[arg-type]
    try:
        dog.arm(0.1)
        assert dog.disarm() is False
        # well past the 0.1 s deadline: nothing was cancelled
        assert not conn.cancelled.wait(0.5)
        dog.arm(0.1)
        dog.arm(30)  # the next statement: its own deadline replaces the 0.1 s one
        assert not conn.cancelled.wait(0.5)
        assert dog.disarm() is False
        dog.arm(30)  # armed while closing: the deadline is far off
    finally:
        dog.close()
    assert not dog.thread.is_alive() and not conn.cancelled.is_set()


def test_watchdog_wakes_its_thread_only_for_an_earlier_deadline() -> None:
    """A statement's arm() costs no thread switch while the watchdog already sleeps until an
    earlier deadline (each statement's deadline is later than the last one's); it wakes the
    thread when that sleeps without a deadline or past the new one, which then still fires."""
    conn = _SlowConn()
    dog = Watchdog(conn)  # type: ignore[arg-type]
    notified: list[int] = []
    try:
        dog.arm(30)

        def asleep_until_deadline() -> bool:
            with dog.cond:
                return dog.deadline is not None and dog.sleeping_until == dog.deadline

        deadline = time.monotonic() + 5
        while not asleep_until_deadline():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        real_notify = dog.cond.notify

        def counting_notify(n: int = 1) -> None:
            notified.append(n)
            real_notify(n)

        dog.cond.notify = counting_notify  # type: ignore[method-assign]
        for _ in range(100):  # statements that each return in time
            dog.arm(30)
            assert dog.disarm() is False
        assert notified == []
        dog.arm(0.05)  # earlier than the deadline it sleeps until: woken, and it fires
        assert notified == [1]
        assert conn.cancelled.wait(5)
        assert dog.disarm() is True
    finally:
        dog.close()
    assert not dog.thread.is_alive()


def test_unreachable_dir_finds_the_closed_ancestor(tmp_path: Path) -> None:
    stranger = ServerUser("stranger", uid=os.getuid() + 4242, gid=os.getgid() + 4242)
    # pytest's own tmp dirs are 0700: exactly the trap this guards against
    assert unreachable_dir(tmp_path, stranger) is not None
    base = Path(tempfile.mkdtemp())  # under the system temp dir (1777)
    try:
        base.chmod(0o755)
        closed = base / "closed"
        inner = closed / "open"
        inner.mkdir(parents=True)
        closed.chmod(0o700)
        assert unreachable_dir(inner, stranger) == closed
        owner = ServerUser("owner", uid=closed.stat().st_uid, gid=os.getgid() + 4242)
        assert unreachable_dir(inner, owner) is None
        closed.chmod(0o711)
        assert unreachable_dir(inner, stranger) is None
    finally:
        shutil.rmtree(base)


class _Cursor:
    """The one cursor a client keeps per connection: statements go through its connection."""

    description = None

    def __init__(self, conn: _FakeConn) -> None:
        self.conn = conn

    def execute(self, query: Any, params: Any = None) -> _Cursor:
        self.conn.execute(query, params)
        return self

    def fetchall(self) -> list[Any]:
        return []


class _FakeConn:
    """A connection that works until its server dies: the next statement fails and closes it
    (psycopg only learns of it then)."""

    def __init__(self) -> None:
        self.closed = self.dead = False
        self.executed: list[Any] = []
        self.queries: list[Any] = []

    def cursor(self, binary: bool = False) -> _Cursor:
        assert binary  # payloads go as BYTEA in binary, not as escaped text
        return _Cursor(self)

    def execute(self, query: Any, params: Any = None) -> None:
        if self.dead or self.closed:
            self.closed = True
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        self.queries.append(query)
        self.executed.append(params)

    def close(self) -> None:
        self.closed = True

    def cancel_safe(self, timeout: float = 0) -> None:
        pass

    @property
    def pgconn(self) -> _FakePGconn:
        return _FakePGconn(self)


class _FakePGconn:
    """libpq's side of a _FakeConn (psycopg.pq): a dead server gives a fatal result."""

    def __init__(self, conn: _FakeConn):
        self.conn = conn

    def _result(self) -> Any:
        if self.conn.dead or self.conn.closed:
            self.conn.closed = True
            return SimpleNamespace(
                status=pq.ExecStatus.FATAL_ERROR,
                error_message=b"server closed the connection unexpectedly\n",
                error_field=lambda field: None,
            )
        return SimpleNamespace(status=pq.ExecStatus.COMMAND_OK)

    def prepare(self, name: bytes, query: bytes) -> Any:
        result = self._result()
        if result.status == pq.ExecStatus.COMMAND_OK:
            self.conn.queries.append(query)
        return result

    def exec_prepared(
        self, name: bytes, params: Any, formats: Any = None, result_format: int = 0
    ) -> Any:
        assert formats == [1] * len(params) and result_format == 1  # binary both ways
        result = self._result()
        if result.status == pq.ExecStatus.COMMAND_OK:
            self.conn.executed.append(list(params))
        return result


def test_a_failed_call_drops_the_connection_and_the_next_call_reconnects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    conns: list[_FakeConn] = []
    down = False

    def fake_connect(endpoints: Any, node: Any, settings: Any) -> _FakeConn:
        if down:
            raise DriverError("postgres: cannot connect to h:1: connection refused")
        conns.append(_FakeConn())
        return conns[-1]

    monkeypatch.setattr(pg, "connect", fake_connect)
    driver = PostgresDriver(Settings(), Endpoints("postgres", (NodeEndpoint(0, "h", 1),)), "jobs")
    sender, receiver = driver.sender(), driver.receiver()
    try:
        sender.send([b"a"])
        assert len(conns) == 2
        for c in conns:  # the server restarts: every open connection is gone for good
            c.dead = True
        down = True
        with pytest.raises(DriverError, match="insert failed"):
            sender.send([b"b"])
        with pytest.raises(DriverError, match="ack failed"):
            receiver.ack([Delivery(b"a", 1)])
        with pytest.raises(DriverError, match="cannot connect"):  # still down
            sender.send([b"b"])
        down = False
        sender.send([b"b"])  # back up: a new connection each
        receiver.ack([Delivery(b"a", 1)])
        assert len(conns) == 4 and not conns[2].closed and not conns[3].closed
        assert conns[2].executed == [[b"b"]] and conns[3].executed == [[int8_array([1])]]
        # the statements, composed once, are the driver's SQL as bytes, prepared on the
        # connection (the INSERT once per batch size)
        assert conns[2].queries == [insert_prepared_sql("jobs", 1)]
        assert conns[3].queries == [b'DELETE FROM "jobs" WHERE id = ANY($1)']
    finally:
        sender.close()
        receiver.close()
    assert all(c.closed for c in conns)


def test_placeholders_become_numbered_parameters_in_order() -> None:
    claim = numbered(claim_sql("jobs"), 2)
    assert b"%s" not in claim and claim.index(b"LIMIT $1") < claim.index(b"secs => $2")
    with pytest.raises(ValueError, match="placeholders"):
        numbered(claim_sql("jobs"), 1)


def test_ids_go_as_a_binary_bigint_array() -> None:
    # PostgreSQL's array_send: dimensions 1, no nulls, element oid 20 (int8), length,
    # lower bound 1, then each element's length (8) and its big-endian value
    head = (1).to_bytes(4, "big") + (0).to_bytes(4, "big") + (20).to_bytes(4, "big")
    item = [(8).to_bytes(4, "big") + v.to_bytes(8, "big", signed=True) for v in (7, -2, 2**40)]
    dims = (3).to_bytes(4, "big") + (1).to_bytes(4, "big")
    assert int8_array([7, -2, 2**40]) == head + dims + b"".join(item)


def test_claimed_rows_become_deliveries_flagged_when_handed_out_before() -> None:
    rows = [(5, b"p5", 1), (9, b"p9", 2), (2**40, b"", 7)]
    cells = [(i.to_bytes(8, "big"), p, n.to_bytes(4, "big")) for i, p, n in rows]
    result = SimpleNamespace(ntuples=len(rows), get_value=lambda r, c: cells[r][c])
    got = deliveries_of(result)
    assert got == [Delivery(b"p5", 5, False), Delivery(b"p9", 9, True), Delivery(b"", 2**40, True)]


class _Rows:
    """A libpq result of claimed rows (id, payload, deliveries), binary."""

    def __init__(self, rows: list[tuple[int, bytes, int]]) -> None:
        self.cells = [(i.to_bytes(8, "big"), p, n.to_bytes(4, "big")) for i, p, n in rows]
        self.ntuples = len(rows)

    def get_value(self, row: int, col: int) -> bytes:
        return self.cells[row][col]


class _FakeClient:
    """Records each prepared statement's name and params; answers from ``results``."""

    def __init__(self, *args: Any) -> None:
        self.calls: list[tuple[bytes, tuple[bytes, ...]]] = []
        self.results: list[_Rows] = []
        self.closed = False

    def exec(self, name: bytes, query: bytes, params: Any, what: str) -> _Rows:
        self.calls.append((name, tuple(params)))
        return self.results.pop(0) if self.results else _Rows([])

    def close(self) -> None:
        self.closed = True


def _receiver(monkeypatch: pytest.MonkeyPatch, visibility_s: float = 30.0) -> Any:
    monkeypatch.setattr(recv, "Client", _FakeClient)
    settings = Settings(visibility_timeout_s=visibility_s)
    return recv.PostgresReceiver(settings, Endpoints("postgres", ()), "jobs")


def test_an_ack_claims_the_next_batch_in_the_same_statement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    r = _receiver(monkeypatch)
    c = r.c
    c.results = [_Rows([(1, b"a", 1), (2, b"b", 1)]), _Rows([(3, b"c", 1), (4, b"d", 2)])]
    first = r.receive(2, 0.1)
    assert [d.handle for d in first] == [1, 2]
    r.ack(first)  # deletes 1 and 2, claims 3 and 4
    assert c.calls[1] == (
        recv.ACK_CLAIM_NAME,
        (int8_array([1, 2]), (2).to_bytes(8, "big"), r.visibility),
    )
    assert r.receive(1, 0.1) == [Delivery(b"c", 3, False)]  # from what the ack claimed
    assert r.receive(5, 0.1) == [Delivery(b"d", 4, True)]
    assert len(c.calls) == 2  # no statement for either
    r.ack([Delivery(b"c", 3)])  # nothing held ahead: it claims again
    assert c.calls[2][0] == recv.ACK_CLAIM_NAME
    r.close()
    assert c.closed and len(c.calls) == 3  # it claimed nothing: nothing to give back


def test_rows_claimed_ahead_are_released_on_close_and_once_held_too_long(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    r = _receiver(monkeypatch, visibility_s=30.0)
    c = r.c
    c.results = [_Rows([(1, b"a", 1)]), _Rows([(2, b"b", 1), (3, b"c", 4)])]
    r.ack(r.receive(3, 0.1))
    assert len(r.ahead) == 2
    r.ahead_at -= 15.0  # half the visibility timeout since the ack claimed them
    c.results = [_Rows([]), _Rows([(5, b"e", 1)])]  # the release's, then the claim's
    assert r.receive(3, 0.1) == [Delivery(b"e", 5, False)]  # claimed anew
    counts = recv.int4_array_of([(1).to_bytes(4, "big"), (4).to_bytes(4, "big")])
    assert c.calls[2] == (recv.RELEASE_NAME, (int8_array([2, 3]), counts))
    assert c.calls[3][0] == recv.CLAIM_NAME
    c.results = [_Rows([(6, b"f", 1)])]
    r.ack([Delivery(b"e", 5)])
    r.close()
    assert c.calls[-1] == (
        recv.RELEASE_NAME,
        (int8_array([6]), recv.int4_array_of([(1).to_bytes(4, "big")])),
    )
    assert c.closed


def test_the_combined_ack_claims_as_the_claim_does() -> None:
    combined = " ".join(recv.ack_claim_sql("jobs").decode().split())
    claim = " ".join(numbered(claim_sql("jobs"), 2).decode().split())
    gone = 'WITH gone AS (DELETE FROM "jobs" WHERE id = ANY($1)), picked AS ('
    assert combined.startswith(gone)
    plain = "WITH picked AS (" + combined.removeprefix(gone).replace(" AND id <> ALL($1)", "")
    assert plain == claim.replace("$1", "$2").replace("secs => $2", "secs => $3")


def test_receivers_run_a_thread_each_where_the_receive_extension_is_not_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from mqlab.brokers import compiled

    monkeypatch.setattr(compiled, "recv_module", None)
    d = PostgresDriver(Settings(), Endpoints("postgres", (NodeEndpoint(0, "127.0.0.1", 1),)), "q")
    assert d.receives_in_lanes() is False  # asked nothing of the server
    assert d.receive_path() == "python"
