"""The local ActiveMQ Artemis stand-in: 3 ActiveMQ 5 brokers (Debian activemq) in shared-store
master/slave. Each node listens on loopback only and has its own config and log over one
shared store. A killed master is replaced by a slave that serves every confirmed message,
while the driver's open sender and receiver carry on. `mqlab cluster up|status|down
artemis` works."""

from __future__ import annotations

import ipaddress
import time
from pathlib import Path

import pytest

from mqlab import envelope
from mqlab.brokers.artemis.cluster import ArtemisCluster
from mqlab.brokers.artemis.driver import ArtemisDriver, Settings
from mqlab.brokers.base import Delivery
from mqlab.errors import DriverError
from mqlab.hosts import process
from tests.brokers.group_procs import in_groups

pytestmark = pytest.mark.integration


def listening(pid: int) -> set[tuple[str, int]]:
    """(address, port) of the TCP sockets process ``pid`` listens on; an IPv4-mapped IPv6
    address (how a JVM binds 127.0.0.1) as its IPv4 form."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().name
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                continue
            hex_addr, hex_port = fields[1].split(":")
            raw = bytes.fromhex(hex_addr)
            # /proc prints the address as 32-bit words in host (little-endian) order
            packed = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            addr = ipaddress.ip_address(packed)
            if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped:
                addr = addr.ipv4_mapped
            found.add((str(addr), int(hex_port, 16)))
    return found


def _messages(first: int, n: int) -> list[bytes]:
    pool = envelope.PayloadPool(200, seed=3)
    return envelope.encode_batch(5, first, n, time.time_ns(), pool)


def _seqs(deliveries: list[Delivery]) -> set[int]:
    return {envelope.decode(d.payload)[1] for d in deliveries}


def test_three_brokers_on_loopback_one_serving_each_with_its_own_config(tmp_path: Path) -> None:
    c = ArtemisCluster(tmp_path / "cluster")
    c.start()
    try:
        health = c.health()
        assert health["healthy"] and health["master"] == 0 and health["probe"] == "ok"
        assert [n["role"] for n in health["nodes"]] == ["master", "slave", "slave"]
        recs = [c.procs[i] for i in range(3)]
        assert len({r.pgid for r in recs}) == 3  # a process group each
        # the master listens on its STOMP port on 127.0.0.1 and nowhere else; the waiting
        # slaves listen on nothing (no JMX, no console)
        assert listening(recs[0].pid) == {("127.0.0.1", c.ports["stomp"][0])}
        assert listening(recs[1].pid) == set() and listening(recs[2].pid) == set()
        for i in range(3):
            d = tmp_path / "cluster" / f"n{i}"
            assert f"stomp://127.0.0.1:{c.ports['stomp'][i]}" in (d / "activemq.xml").read_text()
            assert (d / "activemq.log").stat().st_size > 0
        assert "slave mode" in (tmp_path / "cluster" / "n1" / "activemq.log").read_text()
        assert (c.kahadb / "lock").is_file()  # the one store the master has locked
        ep = c.endpoints()
        assert ep.extra["stand_in"] is True
        assert [(n.host, n.port) for n in ep.nodes] == [("127.0.0.1", p) for p in c.ports["stomp"]]
        assert c.server_versions()[0].startswith("ActiveMQ 5.")
        driver = ArtemisDriver(Settings(), ep, "versions")
        [served] = driver.server_versions()  # only the master answers
        assert served.startswith("ActiveMQ/5.") and served.endswith(f":{c.ports['stomp'][0]})")
    finally:
        c.stop()
    assert not any(process.is_alive(r) for r in recs)
    assert in_groups({r.pgid for r in recs}) == []
    assert not (tmp_path / "cluster").exists()


def test_a_killed_master_is_replaced_by_a_slave_serving_every_confirmed_message(
    tmp_path: Path,
) -> None:
    c = ArtemisCluster(tmp_path / "cluster")
    c.start()
    try:
        s = Settings(receipt_timeout_s=10.0, connect_timeout_s=30.0, heartbeat_s=2.0)
        driver = ArtemisDriver(s, c.endpoints(), "failover")
        driver.setup()
        sender, receiver = driver.sender(), driver.receiver()
        first = _messages(0, 40)
        for i in range(0, 40, 10):
            sender.send(first[i : i + 10])
        taken: list[Delivery] = []
        deadline = time.monotonic() + 15
        while len(taken) < 10 and time.monotonic() < deadline:
            taken += receiver.receive(10 - len(taken), 0.5)
        assert len(taken) == 10
        receiver.ack(taken[:5])  # confirmed by their receipt before the kill
        assert driver.remaining().count == 35

        old = c.leader(driver)
        assert old == 0
        c.kill_node(old)
        killed = time.monotonic()
        deadline = killed + 30
        while len(c.serving()) != 1:
            assert time.monotonic() < deadline, "no slave took over"
            time.sleep(0.1)
        new = c.leader(driver)
        took_over_s = time.monotonic() - killed
        assert new != old and c.probe(new) == (True, "ok")
        print(f"failover: node {new} serves {took_over_s:.2f} s after node {old} was killed")

        # the open sender carries on through the new master: a send under way when the
        # connection went fails; the next one connects to whichever node serves
        second = _messages(40, 20)
        deadline = time.monotonic() + 30
        while True:
            try:
                sender.send(second)
                break
            except DriverError:
                assert time.monotonic() < deadline, "the sender never reached the new master"
        # deliveries of the lost connection cannot be acked: their messages come again
        with pytest.raises(DriverError, match="connection since lost"):
            receiver.ack(taken[5:])
        want = set(range(5, 60))  # every confirmed message not acked before the kill
        got: list[Delivery] = []
        deadline = time.monotonic() + 30
        while not want <= _seqs(got):
            assert time.monotonic() < deadline, f"never came: {sorted(want - _seqs(got))}"
            try:
                batch = receiver.receive(10, 0.5)
            except DriverError:  # the receiver's connection went with the master
                continue
            receiver.ack(batch)
            got += batch
        assert _seqs(got) <= set(range(60))
        # acked with a receipt before the kill: ActiveMQ 5 may deliver them again (at least
        # once), which the run would count as duplicates, not as losses
        print(f"failover: {len(_seqs(got) & set(range(5)))} of 5 acked messages came again")
        deadline = time.monotonic() + 10
        while (rem := driver.remaining()).count != 0:
            assert time.monotonic() < deadline, rem
            time.sleep(0.2)
        assert rem.in_flight == 0

        # the old master comes back as a slave waiting for the lock
        c.restart_node(old)
        deadline = time.monotonic() + 30
        while not (h := c.health())["healthy"]:
            assert time.monotonic() < deadline, h
            time.sleep(0.2)
        assert h["master"] == new and h["nodes"][old]["role"] == "slave"
        sender.close()
        receiver.close()
    finally:
        c.stop()
