"""Pure logic of the MongoDB driver: names, write concern, URIs, the claim, and the receive
loop on a scripted collection. The real server's behaviour is the contract suite's
(tests/brokers/test_contract.py, target ``mongodb``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from mqlab.brokers.base import Delivery, Endpoints, NodeEndpoint
from mqlab.brokers.mongodb import driver as mg
from mqlab.errors import DriverError, ScenarioError
from mqlab.typed import build

# -- names, write concern, addresses ------------------------------------------------------


@pytest.mark.parametrize("queue", ["jobs", "contract_0123abcd", "mqlab_2026_123", "a.b-c"])
def test_plain_queue_names_are_kept(queue: str) -> None:
    assert mg.collection_name(queue) == queue


@pytest.mark.parametrize("queue", ["", "$cmd", "system.users", "a b", "x" * 200, "nul\0l"])
def test_other_queue_names_become_safe_distinct_collection_names(queue: str) -> None:
    name = mg.collection_name(queue)
    assert name.startswith("q_") and len(name) <= mg.MAX_COLLECTION
    assert all(c.isalnum() or c == "_" for c in name)
    assert mg.collection_name(queue) == name  # stable


def test_names_that_sanitize_alike_stay_apart() -> None:
    assert mg.collection_name("a b") != mg.collection_name("a$b")
    assert mg.collection_name("x" * 200) != mg.collection_name("x" * 201)


def test_write_concern_is_majority_and_journaled_by_default() -> None:
    wc = mg.write_concern(mg.Settings())
    assert wc.document == {"w": "majority", "j": True}
    assert mg.write_concern(mg.Settings(w="2", journal=False)).document == {"w": 2, "j": False}


def test_settings_come_from_a_profile_table(tmp_path: Path) -> None:
    s = build(mg.Settings, {"w": "majority", "visibility_timeout_s": 10}, tmp_path / "p.toml")
    assert s.visibility_timeout_s == 10.0 and s.journal is True and s.database == "mqlab"
    with pytest.raises(ScenarioError):
        build(mg.Settings, {"visibility_timeout_s": 0}, tmp_path / "p.toml")


def _endpoints(n: int, **extra: Any) -> Endpoints:
    nodes = tuple(NodeEndpoint(i, f"10.0.0.{i}", 27017) for i in range(n))
    return Endpoints("mongodb", nodes, extra)


def test_uri_names_the_replica_set_or_connects_directly_to_one_node() -> None:
    assert mg.client_uri(_endpoints(3, replica_set="mqlab")) == (
        "mongodb://10.0.0.0:27017,10.0.0.1:27017,10.0.0.2:27017/?replicaSet=mqlab"
    )
    assert mg.client_uri(_endpoints(1)) == "mongodb://10.0.0.0:27017/?directConnection=true"
    seeds = "mongodb://10.0.0.0:27017,10.0.0.1:27017,10.0.0.2:27017/"
    assert mg.client_uri(_endpoints(3)) == seeds  # the client discovers the replica set
    with pytest.raises(DriverError, match="no node"):
        mg.client_uri(_endpoints(0))


def test_the_claim_takes_a_due_document_and_hides_it_for_the_visibility_timeout() -> None:
    now = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
    assert mg.due_filter(now) == {"next_delivery": {"$lte": now}}
    assert mg.claim_update(now, 2.5) == {
        "$set": {"next_delivery": now + timedelta(seconds=2.5)},
        "$inc": {"deliveries": 1},
    }
    docs = mg.new_documents([b"a", b"b"], now)
    assert docs == [
        {"payload": b"a", "next_delivery": now, "deliveries": 0},
        {"payload": b"b", "next_delivery": now, "deliveries": 0},
    ]


def test_backoff_doubles_up_to_the_cap() -> None:
    s, seen = 0.0, []
    for _ in range(8):
        s = mg.backoff(s, 0.1)
        seen.append(s)
    assert seen[:4] == [0.005, 0.01, 0.02, 0.04] and seen[-1] == 0.1


# -- the receive loop, on a scripted collection -------------------------------------------


class _Collection:
    """find_one_and_update hands out the queued documents one per call, then None."""

    def __init__(self, docs: list[dict[str, Any]]):
        self.docs = list(docs)
        self.calls = 0
        self.deleted: list[Any] = []

    def find_one_and_update(self, flt: Any, update: Any, **kw: Any) -> dict[str, Any] | None:
        self.calls += 1
        assert set(flt) == {"next_delivery"} and set(update) == {"$set", "$inc"}
        assert kw["projection"] == mg.CLAIM_PROJECTION
        return self.docs.pop(0) if self.docs else None

    def delete_many(self, flt: Any) -> None:
        self.deleted += flt["_id"]["$in"]


def _receiver(coll: _Collection) -> mg.MongoReceiver:
    r = mg.MongoReceiver.__new__(mg.MongoReceiver)  # no server: only the loop is tested
    r.c = type("C", (), {"coll": coll, "close": lambda self: None})()
    r.visibility_s, r.poll_cap_s = 2.0, 0.01
    return r


def test_receive_claims_up_to_the_batch_and_flags_earlier_deliveries() -> None:
    docs = [{"_id": i, "payload": bytes([i]), "deliveries": 1 + (i == 2)} for i in range(5)]
    coll = _Collection(docs)
    r = _receiver(coll)
    got = r.receive(3, 1.0)
    assert [(d.payload, d.handle, d.redelivered) for d in got] == [
        (b"\x00", 0, False),
        (b"\x01", 1, False),
        (b"\x02", 2, True),
    ]
    assert coll.calls == 3  # a full batch asks no more
    rest = r.receive(10, 1.0)
    assert [d.handle for d in rest] == [3, 4] and coll.calls == 6  # stops at the first miss
    r.ack(got + rest)
    assert coll.deleted == [0, 1, 2, 3, 4]


def test_receive_with_nothing_due_polls_until_its_timeout() -> None:
    coll = _Collection([])
    got = _receiver(coll).receive(10, 0.05)
    assert got == [] and coll.calls >= 2


def test_ack_of_nothing_writes_nothing() -> None:
    coll = _Collection([])
    _receiver(coll).ack([])
    assert coll.deleted == []
    _receiver(coll).ack([Delivery(b"x", 7)])
    assert coll.deleted == [7]
