"""The queue's table in PostgreSQL: the profile's settings, the table's name and schema, the
statements the driver runs on it, and the connection to the primary."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import pq, sql

from mqlab.brokers.base import (
    IDENTIFY_PREFIX_BYTES,
    Endpoints,
)
from mqlab.errors import DriverError
from mqlab.typed import spec

MAX_IDENT = 63  # PostgreSQL truncates identifiers longer than this
SYNC_CHOICES = ("on", "remote_apply", "remote_write", "local", "off")
INSERT_NAME = b"mqlab_insert_"  # + the batch size: the prepared INSERT of that many rows


@dataclass(frozen=True)
class Settings:
    replicas: int = spec(3, min=1, max=15, help="nodes the data lives on (primary + standbys)")
    synchronous_commit: str = spec(
        "remote_write",
        choices=SYNC_CHOICES,
        help="SET per session; the cluster's quorum decides who confirms",
    )
    visibility_timeout_s: float = spec(
        30.0, min=0.1, help="unacked rows are delivered again after this"
    )
    poll_interval_s: float = spec(0.1, min=0.001, help="longest sleep between empty polls")
    commit_timeout_s: float = spec(30.0, min=0.1, help="a statement not confirmed by then fails")
    receive_connections: int = spec(
        2,
        min=1,
        max=8,
        help="connections of a receiver in lanes, each with its own claim in flight",
    )
    connect_timeout_s: float = spec(5.0, min=1.0)


def table_name(queue: str) -> str:
    """``queue`` itself if it is a plain identifier, else a sanitized name plus a hash of it.

    Short enough that ``<table>_next_idx`` stays within PostgreSQL's 63-byte limit.
    """
    limit = MAX_IDENT - len("_next_idx")
    if re.fullmatch(r"[a-z_][a-z0-9_]*", queue) and len(queue) <= limit:
        return queue
    name = re.sub(r"[^a-z0-9_]", "_", queue.lower())
    if not name or name[0].isdigit():
        name = "q_" + name
    digest = hashlib.sha1(queue.encode()).hexdigest()[:8]
    return f"{name[: limit - 9]}_{digest}"


def insert_sql(table: str, n: int) -> sql.Composed:
    """``INSERT INTO t (payload) VALUES (%s), (%s), ...`` for ``n`` rows."""
    rows = sql.SQL(", ").join([sql.SQL("(%s)")] * n)
    return sql.SQL("INSERT INTO {} (payload) VALUES ").format(sql.Identifier(table)) + rows


def insert_prepared_sql(table: str, n: int) -> bytes:
    """:func:`insert_sql` with libpq's numbered parameters ($1 ... $n), to prepare."""
    rows = sql.SQL(", ").join([sql.SQL(f"(${i})") for i in range(1, n + 1)])
    query = sql.SQL("INSERT INTO {} (payload) VALUES ").format(sql.Identifier(table)) + rows
    return query.as_bytes(None)


def succeeded(result: Any) -> list[tuple[Any, ...]]:
    """Nothing, for a libpq result of a command that succeeded; else raises the psycopg
    error its SQLSTATE names (as a cursor would: QueryCanceled for a cancel)."""
    if result.status == pq.ExecStatus.COMMAND_OK:
        return []
    state = result.error_field(pq.DiagnosticField.SQLSTATE)
    message = (result.error_message or b"").decode(errors="replace").strip()
    try:
        cls = psycopg.errors.lookup(state.decode()) if state else psycopg.OperationalError
    except KeyError:
        cls = psycopg.Error
    raise cls(message or pq.ExecStatus(result.status).name)


def claim_sql(table: str) -> sql.Composed:
    """Params: (limit, visibility_s). Returns (id, payload, deliveries) of the claimed rows."""
    return sql.SQL("""WITH picked AS (
    SELECT id FROM {t} WHERE next_delivery <= now() ORDER BY next_delivery
    LIMIT %s FOR UPDATE SKIP LOCKED)
UPDATE {t} AS j SET next_delivery = now() + make_interval(secs => %s),
    deliveries = j.deliveries + 1
FROM picked WHERE j.id = picked.id
RETURNING j.id, j.payload, j.deliveries""").format(t=sql.Identifier(table))


def schema_sql(table: str) -> list[sql.Composed]:
    t, idx = sql.Identifier(table), sql.Identifier(f"{table}_next_idx")
    return [
        sql.SQL("""CREATE TABLE IF NOT EXISTS {} (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    payload BYTEA NOT NULL,
    next_delivery TIMESTAMPTZ NOT NULL DEFAULT now(),
    deliveries INTEGER NOT NULL DEFAULT 0)""").format(t),
        sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (next_delivery)").format(idx, t),
    ]


def remaining_sql(table: str) -> tuple[sql.Composed, sql.Composed]:
    """(count and in-flight count; the first bytes of up to %s rows, oldest first)."""
    t = sql.Identifier(table)
    count = sql.SQL(
        "SELECT count(*), count(*) FILTER (WHERE next_delivery > now()) FROM {}"
    ).format(t)
    heads = sql.SQL("SELECT substring(payload FROM 1 FOR {}) FROM {} ORDER BY id LIMIT %s").format(
        sql.Literal(IDENTIFY_PREFIX_BYTES), t
    )
    return count, heads


def backoff(previous_s: float, cap_s: float) -> float:
    """The next sleep between empty polls: doubling from 5 ms up to ``cap_s``."""
    return min(cap_s, max(0.005, previous_s * 2))


def primary(endpoints: Endpoints) -> Any:
    for n in endpoints.nodes:
        if n.extra.get("role") == "primary":
            return n
    if not endpoints.nodes:
        raise DriverError("postgres: the endpoints list no node")
    return endpoints.nodes[0]


def connect(endpoints: Endpoints, node: Any, settings: Settings) -> psycopg.Connection[Any]:
    kw: dict[str, Any] = {
        "host": node.host,
        "port": node.port,
        "autocommit": True,
        "application_name": "mqlab",
        "user": node.extra.get("user", endpoints.extra.get("user", "postgres")),
        "dbname": node.extra.get("dbname", endpoints.extra.get("dbname", "postgres")),
        "connect_timeout": max(1, round(settings.connect_timeout_s)),
    }
    password = node.extra.get("password", endpoints.extra.get("password"))
    if password:
        kw["password"] = password
    try:
        conn = psycopg.connect(**kw)
    except psycopg.Error as e:
        raise DriverError(f"postgres: cannot connect to {node.host}:{node.port}: {e}") from e
    try:
        conn.execute(
            "SELECT set_config('synchronous_commit', %s, false)", (settings.synchronous_commit,)
        )
    except psycopg.Error as e:
        conn.close()
        raise DriverError(f"postgres: cannot connect to {node.host}:{node.port}: {e}") from e
    return conn
