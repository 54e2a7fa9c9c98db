"""MongoDB as a queue, as mqperf ran it: one collection, documents with a next-delivery time.

- collection: ``payload`` (binary), ``next_delivery`` (date), ``deliveries`` (a count),
  indexed on ``next_delivery``; named after the driver's ``queue``, in ``database``.
- send: one ``insert_many`` per batch with the profile's write concern (``w``, ``journal``:
  mqlab's profiles say ``majority`` and journaled); it returns once the server says the
  write concern is satisfied. ``next_delivery`` is the send time: due at once.
- receive: ``find_one_and_update`` of one document whose ``next_delivery`` has passed,
  pushing it to now + ``visibility_timeout_s`` and counting the delivery, repeated until
  the batch is full or nothing is due (mqperf's find-and-modify also claimed one document
  per call). Each call is atomic on the server: the filter is checked and the document
  changed in one step, so no two receivers can claim a document while its claim runs.
  Nothing due: poll again after 5 ms, 10 ms, ... up to ``poll_interval_s`` until
  ``timeout_s``. No sort: a real mongod walks the ``next_delivery`` index, oldest first.
- ack: ``delete_many`` by ``_id``, with the same write concern (mqperf deleted without
  acknowledgement; mqlab waits, so that ``remaining()`` right after an ack agrees).
- redelivery: a claim that ran out makes the document due again (at least once); a
  document claimed before (``deliveries > 1``) is flagged redelivered;
  ``redelivery_timeout_s`` is ``visibility_timeout_s``.
- remaining: the number of documents (acked ones are deleted), ``in_flight`` those whose
  ``next_delivery`` is still ahead (claimed, not acked); with ``identify`` the first bytes
  of each payload, oldest ``_id`` first, read without claiming anything.

Times are the clients' wall clocks (as in mqperf): a claim made on a host whose clock is
ahead lasts that much less for the others, and a sender's clock ahead of the receivers'
hides its messages for the difference (mqlab measures and reports clock offsets).

Failures: every call is bounded by ``op_timeout_s`` (pymongo's ``timeoutMS``: server
selection, retries and the wait for the write concern included) and then raises
DriverError; a write that timed out may still be applied (at least once). pymongo retries
a write once after a lost connection or a new primary (retryable writes: the server drops
the duplicate), and finds a new primary by itself after a failover.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo import MongoClient, ReturnDocument
from pymongo.errors import PyMongoError
from pymongo.write_concern import WriteConcern

from mqlab.brokers.base import (
    IDENTIFY_PREFIX_BYTES,
    Delivery,
    Driver,
    Endpoints,
    Receiver,
    Remaining,
    Sender,
)
from mqlab.errors import DriverError
from mqlab.typed import spec

LOG = logging.getLogger(__name__)
MAX_COLLECTION = 100  # well under MongoDB's 255-byte namespace limit (database + "." + name)
CLAIM_PROJECTION = {"payload": True, "deliveries": True}


@dataclass(frozen=True)
class Settings:
    database: str = spec("mqlab", help="the database holding the queue's collection")
    w: str = spec(
        "majority", help='write concern of sends, claims and acks: "majority" or a member count'
    )
    journal: bool = spec(True, help="j: the write is in the on-disk journal before it counts")
    visibility_timeout_s: float = spec(
        30.0, min=0.1, help="a claimed, unacked document is delivered again after this"
    )
    poll_interval_s: float = spec(0.1, min=0.001, help="longest sleep between empty polls")
    op_timeout_s: float = spec(30.0, min=0.1, help="a call not done by then fails")
    connect_timeout_s: float = spec(5.0, min=0.5)


def write_concern(settings: Settings) -> WriteConcern:
    """The profile's write concern: ``w`` as a member count if it is one, else a mode name."""
    w: int | str = int(settings.w) if settings.w.isdigit() else settings.w
    return WriteConcern(w=w, j=settings.journal)


def collection_name(queue: str) -> str:
    """``queue`` itself if it is a plain name, else a sanitized name plus a hash of it."""
    if (
        re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", queue)
        and len(queue) <= MAX_COLLECTION
        and not queue.startswith("system.")
    ):
        return queue
    name = re.sub(r"[^A-Za-z0-9_]", "_", queue) or "q"
    digest = hashlib.sha1(queue.encode()).hexdigest()[:8]
    return f"q_{name[: MAX_COLLECTION - 11]}_{digest}"


def client_uri(endpoints: Endpoints) -> str:
    """Every node in the seed list: with the replica set's name when the endpoints give one,
    else a direct connection to a single node, else the seeds alone (the client discovers
    the replica set and its primary from them). The client follows the primary."""
    if not endpoints.nodes:
        raise DriverError("mongodb: the endpoints list no node")
    hosts = ",".join(f"{n.host}:{n.port}" for n in endpoints.nodes)
    replica_set = endpoints.extra.get("replica_set")
    if replica_set:
        return f"mongodb://{hosts}/?replicaSet={replica_set}"
    if len(endpoints.nodes) == 1:
        return f"mongodb://{hosts}/?directConnection=true"
    return f"mongodb://{hosts}/"


def connect(endpoints: Endpoints, settings: Settings, uri: str | None = None) -> Any:
    """A client whose every call is bounded by ``op_timeout_s``; pinged, so that a wrong
    address fails here, at once."""
    client: Any = MongoClient(
        uri or client_uri(endpoints),
        appname="mqlab",
        timeoutMS=round(settings.op_timeout_s * 1000),
        serverSelectionTimeoutMS=round(settings.connect_timeout_s * 1000),
        connectTimeoutMS=round(settings.connect_timeout_s * 1000),
        tz_aware=True,
    )
    try:
        client.admin.command("ping")
    except PyMongoError as e:
        client.close()
        raise DriverError(f"mongodb: cannot connect to {uri or client_uri(endpoints)}: {e}") from e
    return client


def due_filter(now: datetime) -> dict[str, Any]:
    return {"next_delivery": {"$lte": now}}


def claim_update(now: datetime, visibility_s: float) -> dict[str, Any]:
    return {
        "$set": {"next_delivery": now + timedelta(seconds=visibility_s)},
        "$inc": {"deliveries": 1},
    }


def new_documents(batch: Sequence[bytes], now: datetime) -> list[dict[str, Any]]:
    return [{"payload": m, "next_delivery": now, "deliveries": 0} for m in batch]


def backoff(previous_s: float, cap_s: float) -> float:
    """The next sleep between empty polls: doubling from 5 ms up to ``cap_s``."""
    return min(cap_s, max(0.005, previous_s * 2))


def _now() -> datetime:
    return datetime.now(UTC)


class _Client:
    """One MongoClient (its own connection pool) per sender or receiver."""

    def __init__(self, driver: MongoDriver):
        self.client = connect(driver.endpoints, driver.settings)
        self.coll = self.client[driver.settings.database].get_collection(
            driver.collection, write_concern=write_concern(driver.settings)
        )

    def close(self) -> None:
        self.client.close()


class MongoSender(Sender):
    def __init__(self, driver: MongoDriver):
        self.c = _Client(driver)

    def send(self, batch: Sequence[bytes]) -> None:
        if not batch:
            return
        try:
            self.c.coll.insert_many(new_documents(batch, _now()), ordered=True)
        except PyMongoError as e:
            raise DriverError(f"mongodb: insert of {len(batch)} failed: {e}") from e

    def close(self) -> None:
        self.c.close()


class MongoReceiver(Receiver):
    def __init__(self, driver: MongoDriver):
        self.c = _Client(driver)
        self.visibility_s: float = driver.settings.visibility_timeout_s
        self.poll_cap_s: float = driver.settings.poll_interval_s

    def _claim(self) -> dict[str, Any] | None:
        now = _now()
        try:
            doc: dict[str, Any] | None = self.c.coll.find_one_and_update(
                due_filter(now),
                claim_update(now, self.visibility_s),
                projection=CLAIM_PROJECTION,
                return_document=ReturnDocument.AFTER,
            )
        except PyMongoError as e:
            raise DriverError(f"mongodb: receive failed: {e}") from e
        return doc

    def receive(self, max_messages: int, timeout_s: float) -> list[Delivery]:
        deadline = time.monotonic() + timeout_s
        sleep_s = 0.0
        while True:
            out: list[Delivery] = []
            while len(out) < max_messages:
                doc = self._claim()
                if doc is None:
                    break
                out.append(Delivery(bytes(doc["payload"]), doc["_id"], doc["deliveries"] > 1))
            if out or max_messages <= 0:
                return out
            left = deadline - time.monotonic()
            if left <= 0:
                return []
            sleep_s = backoff(sleep_s, self.poll_cap_s)
            time.sleep(min(sleep_s, left))

    def ack(self, deliveries: Sequence[Delivery]) -> None:
        if not deliveries:
            return
        try:
            self.c.coll.delete_many({"_id": {"$in": [d.handle for d in deliveries]}})
        except PyMongoError as e:
            raise DriverError(f"mongodb: ack of {len(deliveries)} failed: {e}") from e

    def close(self) -> None:
        self.c.close()


class MongoDriver(Driver):
    name = "mongodb"
    Settings = Settings
    client_libraries = ("pymongo",)
    identifies_remaining = True

    def __init__(self, settings: Any, endpoints: Endpoints, queue: str):
        super().__init__(settings, endpoints, queue)
        self.collection = collection_name(queue)
        self._admin_client: Any = None

    def _coll(self) -> Any:
        if self._admin_client is None:
            self._admin_client = connect(self.endpoints, self.settings)
        s: Settings = self.settings
        return self._admin_client[s.database].get_collection(
            self.collection, write_concern=write_concern(s)
        )

    def setup(self) -> None:
        try:
            self._coll().create_index("next_delivery")
        except PyMongoError as e:
            raise DriverError(f"mongodb: setup of collection {self.collection} failed: {e}") from e

    def teardown(self) -> None:
        try:
            self._coll().drop()
        except PyMongoError as e:
            raise DriverError(f"mongodb: drop of collection {self.collection} failed: {e}") from e

    @property
    def redelivery_timeout_s(self) -> float:
        return float(self.settings.visibility_timeout_s)

    def remaining(self, identify: bool = False) -> Remaining:
        """Documents left (ready + claimed); ``in_flight``: the claimed ones."""
        coll = self._coll()
        try:
            count = coll.count_documents({})
            in_flight = coll.count_documents({"next_delivery": {"$gt": _now()}})
            heads = None
            if identify:
                cursor = coll.find({}, {"payload": True, "_id": False})
                heads = [
                    bytes(d["payload"][:IDENTIFY_PREFIX_BYTES])
                    for d in cursor.sort("_id", 1).limit(self.identify_cap)
                ]
        except PyMongoError as e:
            raise DriverError(f"mongodb: cannot count {self.collection}: {e}") from e
        return Remaining(count, heads, in_flight)

    def sender(self) -> Sender:
        return MongoSender(self)

    def receiver(self) -> Receiver:
        return MongoReceiver(self)

    def server_versions(self) -> list[str]:
        """What the launcher says the server is (a stand-in says so), else each node's
        ``buildInfo`` version, asked over a direct connection."""
        server = self.endpoints.extra.get("server")
        if server:
            return [str(server)]
        versions = []
        for n in self.endpoints.nodes:
            uri = f"mongodb://{n.host}:{n.port}/?directConnection=true"
            try:
                client = connect(self.endpoints, self.settings, uri)
            except DriverError:
                LOG.debug("no version from %s:%s", n.host, n.port)
                continue
            try:
                versions.append(f"MongoDB {client.admin.command('buildInfo')['version']}")
            except PyMongoError as e:
                LOG.debug("no version from %s:%s: %s", n.host, n.port, e)
            finally:
                client.close()
        return versions

    def close(self) -> None:
        if self._admin_client is not None:
            self._admin_client.close()
            self._admin_client = None


DRIVER = MongoDriver
