"""The RocketMQ launcher's own logic, without a server: broker ports with free neighbours,
each broker's configuration, and health from what the name server and brokers answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mqlab.brokers.rocketmq import cluster as rc
from mqlab.brokers.rocketmq import node as rmqconf


def test_broker_ports_leave_their_neighbours_free() -> None:
    ports = rc.broker_ports(3)
    assert len(set(ports)) == 3
    taken = [q for p in ports for q in range(p - 2, p + 2)]
    assert len(taken) == len(set(taken))  # no broker's VIP or HA port is another's


def _cluster(tmp_path: Path, server: dict[str, str] | None = None) -> rc.RocketmqCluster:
    """A cluster with fixed ports (none started); ``server``: its layout (layout.py)."""
    c = rc.RocketmqCluster(tmp_path / "c", server=server)
    c.ports = {
        "broker": [20011, 20021, 20031],
        "dledger": [20041, 20042, 20043],
        "namesrv": [20051, 20052, 20053],
        "proxy": [20061, 20062, 20063],
        "proxy_remoting": [20071, 20072, 20073],
        "controller": [20081, 20082, 20083],
    }
    return c


def test_each_broker_is_a_dledger_peer_sized_for_this_machine(tmp_path: Path) -> None:
    c = _cluster(tmp_path)
    conf = rc.broker_conf(c, 1)
    assert conf["enableDLegerCommitLog"] == "true"
    assert conf["dLegerGroup"] == conf["brokerName"] == rmqconf.GROUP
    assert conf["dLegerSelfId"] == "n1"
    assert conf["dLegerPeers"] == ";".join(f"n{i}-127.0.0.1:{20041 + i}" for i in range(3))
    assert conf["listenPort"] == "20021" and conf["namesrvAddr"] == "127.0.0.1:20051"
    assert conf["mappedFileSizeCommitLog"] == 64 * 1024 * 1024
    assert conf["storePathRootDir"] == str(c.node_dir(1) / "store")
    flags = rc.jvm(rc.HEAP, rc.DIRECT)
    assert "-Xmx512m" in flags and "-XX:MaxDirectMemorySize=512m" in flags
    assert "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED" in flags


def _health(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    group: dict[int, str],
    offsets: dict[int, int],
    proxy: bool = True,
) -> dict[str, Any]:
    c = _cluster(tmp_path)
    monkeypatch.setattr(c, "group", lambda: group)
    monkeypatch.setattr(c, "alive", lambda: [True] * 3)
    monkeypatch.setattr(rc.process, "port_open", lambda h, p: proxy)

    def runtime_info(broker: tuple[str, int], _t: float) -> dict[str, str]:
        i = [20011, 20021, 20031].index(broker[1])
        return {"commitLogMaxOffset": str(offsets[i]), "brokerVersionDesc": "V5_4_0"}

    monkeypatch.setattr(rc.admin, "runtime_info", runtime_info)
    return c.health()


GROUP = {1: "127.0.0.1:20011", 0: "127.0.0.1:20021", 2: "127.0.0.1:20031"}


def test_healthy_with_a_leader_two_followers_in_sync_and_the_proxy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = _health(tmp_path, monkeypatch, GROUP, {0: 500, 1: 500, 2: 500})
    assert h["healthy"] and h["leader"] == 1 and h["followers"] == [0, 2]
    assert h["in_sync"] == [0, 1, 2] and [n["broker_id"] for n in h["nodes"]] == [1, 0, 2]


@pytest.mark.parametrize(
    ("group", "offsets", "proxy"),
    [
        (GROUP, {0: 500, 1: 500, 2: 499}, True),  # a follower behind the leader
        ({k: v for k, v in GROUP.items() if k}, {0: 0, 1: 0, 2: 0}, True),  # no leader
        ({0: GROUP[0], 1: GROUP[1]}, {0: 0, 1: 0, 2: 0}, True),  # a broker not registered
        (GROUP, {0: 500, 1: 500, 2: 500}, False),  # the proxy does not listen
    ],
)
def test_not_healthy_otherwise(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    group: dict[int, str],
    offsets: dict[int, int],
    proxy: bool,
) -> None:
    assert not _health(tmp_path, monkeypatch, group, offsets, proxy)["healthy"]
