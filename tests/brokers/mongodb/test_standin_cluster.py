"""The MongoDB wire stand-in: mongoeco under the Python >= 3.13 of its own venv, started,
probed and stopped by mqlab; and what it accepts of the profiles' write concern.

Needs a Python >= 3.13 interpreter on this machine (found as mqlab.brokers.mongodb.cluster says,
or ``$MQLAB_PYTHON313``): without one these tests fail with the launcher's one-line
message, they are never skipped."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.errors import OperationFailure
from pymongo.write_concern import WriteConcern

from mqlab import envelope
from mqlab.brokers.mongodb.cluster import MONGOECO_VERSION, MongoCluster
from mqlab.brokers.mongodb.driver import MongoDriver, Settings
from mqlab.hosts import process
from tests.brokers.group_procs import in_groups

pytestmark = pytest.mark.integration


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[MongoCluster]:
    c = MongoCluster(tmp_path / "cluster", nodes=3)  # always one node
    c.start()
    try:
        yield c
    finally:
        c.stop()


def _client(c: MongoCluster) -> Any:
    return MongoClient(
        f"mongodb://127.0.0.1:{c.port}/?directConnection=true", serverSelectionTimeoutMS=5000
    )


def test_mongoeco_serves_as_one_stand_in_node_and_stops_with_its_group(tmp_path: Path) -> None:
    c = MongoCluster(tmp_path / "cluster", nodes=3)
    c.start()
    records = list(c.procs.values())
    try:
        assert c.nodes == 1 and c.health()["healthy"]
        ep = c.endpoints()
        assert [n.port for n in ep.nodes] == c.ports["mongo"]
        assert ep.extra["stand_in"] is True
        version = c.server_versions()[0]
        assert version.startswith(f"mongoeco {MONGOECO_VERSION} ") and "stand-in" in version
        # the server runs on the stand-in venv's interpreter, not on mqlab's own
        assert "mongoeco-" in c.extra["python"] and Path(c.extra["python"]).is_file()
    finally:
        c.stop()
    assert not [r.pid for r in records if process.is_alive(r)]
    assert in_groups({r.pgid for r in records}) == []


def test_majority_and_journal_are_accepted_and_w2_is_refused(standin: MongoCluster) -> None:
    """What the stand-in profile says: a standalone's answers, no replica set."""
    client = _client(standin)
    try:
        db = client["mqlab_wc"]
        majority = db.get_collection("t", write_concern=WriteConcern(w="majority", j=True))
        assert majority.insert_many([{"n": 1}, {"n": 2}]).acknowledged
        assert majority.count_documents({}) == 2
        with pytest.raises(OperationFailure, match="replicated"):
            db.get_collection("t", write_concern=WriteConcern(w=2)).insert_one({"n": 3})
        assert "setName" not in client.admin.command("hello")  # no replica set
        db.drop_collection("t")
    finally:
        client.close()


def test_a_claim_is_handed_to_one_of_many_concurrent_receivers(standin: MongoCluster) -> None:
    """find_one_and_update on the stand-in is atomic: 4 receivers in threads, each claim
    once; every message once (the contract suite checks 2 receivers in turn)."""
    driver = MongoDriver(Settings(visibility_timeout_s=60), standin.endpoints(), "claims")
    driver.setup()
    try:
        s = driver.sender()
        pool = envelope.PayloadPool(64, seed=3)
        for i in range(0, 200, 10):
            s.send(envelope.encode_batch(1, i, 10, 0, pool))
        s.close()
        got: list[list[int]] = [[] for _ in range(4)]

        def take(k: int) -> None:
            r = driver.receiver()
            try:
                while batch := r.receive(5, 0.2):
                    got[k] += [envelope.decode(d.payload)[1] for d in batch]
            finally:
                r.close()

        threads = [threading.Thread(target=take, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        seqs = [q for g in got for q in g]
        assert sorted(seqs) == list(range(200))  # each once, none twice
        assert driver.remaining().in_flight == 200  # claimed, never acked
    finally:
        driver.teardown()
        driver.close()
