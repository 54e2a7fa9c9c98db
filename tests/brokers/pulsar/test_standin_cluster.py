"""The local Pulsar API stand-in (pulsar-lite): one process on loopback ports only, a health
check that stores and serves a message, data kept across a restart, and `mqlab cluster
up|status|down pulsar`."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from mqlab import envelope
from mqlab.brokers.pulsar.cluster import PulsarCluster
from mqlab.brokers.pulsar.driver import PulsarDriver, Settings
from mqlab.hosts import process
from tests.brokers.group_procs import in_groups

pytestmark = pytest.mark.integration


def listening(pid: int) -> set[tuple[str, int]]:
    """(address, port) of the TCP sockets process ``pid`` listens on (IPv4 and IPv6)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().name
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = set()
    for table, width in (("tcp", 8), ("tcp6", 32)):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                continue
            hex_addr, hex_port = fields[1].split(":")
            if width == 8:
                address = ".".join(str(int(hex_addr[i : i + 2], 16)) for i in (6, 4, 2, 0))
            else:
                address = "::" if int(hex_addr, 16) == 0 else hex_addr
            found.add((address, int(hex_port, 16)))
    return found


def test_pulsar_lite_serves_on_loopback_ports_only(tmp_path: Path) -> None:
    c = PulsarCluster(tmp_path / "cluster", nodes=3)  # always one node
    c.start()
    try:
        assert c.nodes == 1
        health = c.health()
        assert health["healthy"] and health["nodes"][0]["probe"] == "ok"
        (rec,) = c.procs.values()
        ports = {c.ports["broker"][0], c.ports["metrics"][0]}
        # the metrics page too: pulsar-lite's default would be 0.0.0.0:8080
        assert listening(rec.pid) == {("127.0.0.1", p) for p in ports}
        ep = c.endpoints()
        assert ep.extra["stand_in"] is True
        assert [(n.host, n.port) for n in ep.nodes] == [("127.0.0.1", c.ports["broker"][0])]
        assert c.server_versions()[0].startswith("pulsar-lite ")
        assert "stand-in" in c.server_versions()[0]
        assert (tmp_path / "cluster" / "n0" / "db.rocksdb").is_dir()  # next to --db-path
    finally:
        c.stop()
    assert not process.is_alive(rec) and in_groups({rec.pgid}) == []
    assert not (tmp_path / "cluster").exists()


def test_pulsar_lite_keeps_messages_across_a_restart(tmp_path: Path) -> None:
    """Killed and started again on its data: what was confirmed is still there and comes
    once. Its counters start again from 0, so remaining() falls back to the backlog gauge
    (at least the true count), which it has once a consumer subscribed again."""
    c = PulsarCluster(tmp_path / "cluster")
    c.start()
    try:
        s = Settings(ensemble_size=1, write_quorum=1, ack_quorum=1, operation_timeout_s=5)
        driver = PulsarDriver(s, c.endpoints(), "restart")
        driver.setup()
        sender = driver.sender()
        sent = envelope.encode_batch(3, 0, 8, time.time_ns(), envelope.PayloadPool(64, seed=2))
        sender.send(sent)
        sender.close()
        assert driver.remaining().count == 8
        c.kill_node(0)
        c.restart_node(0)
        deadline = time.monotonic() + 20
        while not c.health()["healthy"]:
            assert time.monotonic() < deadline, "pulsar-lite did not come back"
            time.sleep(0.2)
        r = driver.receiver()  # a restarted pulsar-lite loads the subscription now
        # its backlog gauge, after a restart: refreshed every 5 s, so asked until it is
        deadline = time.monotonic() + 15
        held = driver.remaining()
        while held.count < 8 and time.monotonic() < deadline:
            time.sleep(0.5)
            held = driver.remaining()
        assert held.count >= 8 and held.in_flight is not None
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < 8 and time.monotonic() < deadline:
            batch = r.receive(10, 0.5)
            r.ack(batch)
            got += [d.payload for d in batch]
        assert sorted(got) == sorted(sent)
        assert r.receive(10, 0.5) == []
        r.close()
        assert driver.remaining().count == 0  # all acked in order: the gauge is exact too
        driver.teardown()
    finally:
        c.stop()
