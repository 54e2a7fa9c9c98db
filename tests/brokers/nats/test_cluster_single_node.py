"""A one-node local NATS cluster (``nodes = 1``, e.g. Treat's single-server commit-log
tests): JetStream runs standalone (no cluster block, so no meta leader to wait for),
the cluster reports healthy, and a one-replica stream works as a queue on it."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from mqlab import envelope
from mqlab.brokers.nats.cluster import NatsCluster
from mqlab.brokers.nats.driver import NatsDriver, NatsSettings

pytestmark = pytest.mark.integration


@pytest.mark.timeout(120)
def test_one_node_comes_up_standalone_and_serves_a_stream(tmp_path: Path) -> None:
    cluster = NatsCluster(tmp_path / "cluster", 1)
    cluster.start()
    try:
        conf = Path(cluster.node_dir(0), "nats.conf").read_text()
        assert "jetstream {" in conf and "cluster {" not in conf
        health = cluster.health()
        assert health["healthy"] and health["leader"] == "mqlab-n0", health
        driver = NatsDriver(
            NatsSettings(replicas=1), cluster.endpoints(), f"one_{uuid.uuid4().hex[:8]}"
        )
        driver.setup()
        try:
            assert cluster.leader(driver) == 0
            sent = envelope.encode_batch(
                1, 0, 20, time.time_ns(), envelope.PayloadPool(100, seed=1)
            )
            s, r = driver.sender(), driver.receiver()
            try:
                s.send(sent)
                got: list[bytes] = []
                deadline = time.monotonic() + 15
                while len(got) < 20 and time.monotonic() < deadline:
                    batch = r.receive(10, 0.5)
                    r.ack(batch)
                    got += [d.payload for d in batch]
            finally:
                s.close()
                r.close()
            assert sorted(got) == sorted(sent)
            assert driver.remaining().count == 0
        finally:
            driver.teardown()
            driver.close()
    finally:
        cluster.stop()
    assert not any(cluster.alive())
