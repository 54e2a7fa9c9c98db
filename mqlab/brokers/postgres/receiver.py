"""The receiving side of PostgreSQL as a queue (see the driver's docstring): the claim and
the ack through libpq itself.

Both statements are prepared once per connection (``Client.exec``) and run with binary
parameters and binary rows: the claim's limit an int8, the visibility timeout a float8;
the ack's ids one int8 array. A row comes back as its id (int8), payload (the bytes as
stored) and delivery count (int4). psycopg's cursor layer (parameter adaptation, the
prepared-statement cache, row loaders) cost about as much client CPU per batch again
(bench/clients.py).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Sequence
from typing import Any

from psycopg import sql

from mqlab.brokers.base import Delivery, Endpoints, Receiver
from mqlab.brokers.postgres.client import Client
from mqlab.brokers.postgres.database import Settings, backoff, claim_sql

CLAIM_NAME = b"mqlab_claim"
ACK_NAME = b"mqlab_ack"
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


def int8_array(ids: Sequence[int]) -> bytes:
    """``ids`` as a one-dimensional ``bigint[]`` in PostgreSQL's binary format."""
    n = len(ids)
    items = struct.pack("!" + "iq" * n, *[v for i in ids for v in (8, i)])
    return _ARRAY_HEAD.pack(1, 0, INT8_OID, n, 1) + items


def deliveries_of(result: Any) -> list[Delivery]:
    """The claim's rows (id, payload, deliveries; binary) as deliveries: a row handed out
    before (``deliveries > 1``; the claim counted this delivery) is flagged redelivered."""
    get = result.get_value
    return [
        Delivery(get(i, 1), _INT8.unpack(get(i, 0))[0], get(i, 2) != _ONCE)
        for i in range(result.ntuples)
    ]


class PostgresReceiver(Receiver):
    def __init__(self, settings: Settings, endpoints: Endpoints, table: str):
        self.c = Client(settings, endpoints, table)
        self.claim = numbered(claim_sql(table), 2)
        self.delete = numbered(delete_sql(table), 1)
        self.visibility = _FLOAT8.pack(float(settings.visibility_timeout_s))
        self.poll_cap_s = settings.poll_interval_s

    def receive(self, max_messages: int, timeout_s: float) -> list[Delivery]:
        deadline = time.monotonic() + timeout_s
        params = (_INT8.pack(max_messages), self.visibility)
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
        if deliveries:
            ids = int8_array([d.handle for d in deliveries])
            self.c.exec(ACK_NAME, self.delete, (ids,), "ack")

    def close(self) -> None:
        self.c.close()
