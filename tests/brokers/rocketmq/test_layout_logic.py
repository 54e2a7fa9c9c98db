"""RocketMQ's broker layouts chosen by a profile, without a server: what each profile asks
the launcher to start, the configuration files of the controller-mode layout, the health
of that layout from what the controller answers, and the run's cluster pool keeping one
cluster per layout (the real clusters: test_controller.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mqlab.brokers.rocketmq import cluster as rc
from mqlab.brokers.rocketmq import layout
from mqlab.brokers.rocketmq import node as rmqconf
from mqlab.brokers.rocketmq.driver import Settings
from mqlab.errors import ScenarioError
from mqlab.hosts.local import LocalHost
from mqlab.scenario.load import load_profile
from tests.brokers.rocketmq.test_cluster_logic import _cluster

ROOT = Path(__file__).resolve().parents[3]
PROFILES = ROOT / "scenarios" / "profiles"
SYNCFLUSH = {"replication": "all_in_sync", "flush": "sync"}
ASYNC = {"replication": "async", "flush": "async"}


@pytest.mark.parametrize(
    ("profile", "server"),
    [
        ("rocketmq-sync", {}),  # the DLedger group every launcher and image runs
        ("rocketmq-dledger", {}),
        ("rocketmq-syncflush", SYNCFLUSH),
        ("rocketmq-async", ASYNC),
    ],
)
def test_each_profile_names_the_layout_its_servers_start_with(
    profile: str, server: dict[str, str]
) -> None:
    p = load_profile(PROFILES / f"{profile}.toml")
    assert rc.RocketmqCluster.server_config(p.settings) == server


def test_a_sync_flush_on_a_dledger_group_is_refused_with_the_field_and_the_fix(
    tmp_path: Path,
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('format_version = 1\nbroker = "rocketmq"\n[settings]\nflush = "sync"\n')
    with pytest.raises(ScenarioError) as e:
        load_profile(bad)
    text = str(e.value)
    assert "bad.toml" in text and "flush" in text and 'replication = "all_in_sync"' in text
    assert "\n" not in text
    assert Settings(replication="all_in_sync", flush="sync").server() == SYNCFLUSH


@pytest.mark.parametrize(
    ("server", "all_ack", "min_in_sync", "flush"),
    [(SYNCFLUSH, "true", 2, "SYNC_FLUSH"), (ASYNC, "false", 1, "ASYNC_FLUSH")],
)
def test_a_controller_mode_broker_has_no_dledger_and_its_own_ha_port(
    tmp_path: Path, server: dict[str, str], all_ack: str, min_in_sync: int, flush: str
) -> None:
    c = _cluster(tmp_path, server)
    conf = rc.broker_conf(c, 2)
    assert not {k for k in conf if k.lower().startswith(("dleger", "enabledleger"))}
    assert conf["enableControllerMode"] is True and conf["brokerId"] == -1
    assert conf["brokerRole"] == "SLAVE"  # until the controller elects it
    # the controllers answer on their DLedger ports, not the name servers'
    assert conf["controllerAddr"] == "127.0.0.1:20081;127.0.0.1:20082;127.0.0.1:20083"
    assert conf["haListenPort"] == 20032 and conf["listenPort"] == "20031"
    assert conf["brokerName"] == rmqconf.GROUP
    assert conf["namesrvAddr"] == "127.0.0.1:20051;127.0.0.1:20052;127.0.0.1:20053"
    assert str(conf["allAckInSyncStateSet"]).lower() == all_ack
    assert conf["inSyncReplicas"] == 1 and conf["minInSyncReplicas"] == min_in_sync
    assert conf["flushDiskType"] == flush
    assert conf["mappedFileSizeCommitLog"] == rc.COMMIT_LOG_FILE  # sized as the DLedger one
    # the DLedger layout keeps its Raft group and never flushes per message
    dledger = rc.broker_conf(_cluster(tmp_path, {}), 2)
    assert dledger["enableDLegerCommitLog"] == "true" and dledger["flushDiskType"] == "ASYNC_FLUSH"
    assert "enableControllerMode" not in dledger


def test_every_name_server_embeds_one_of_three_controllers(tmp_path: Path) -> None:
    peers = ["127.0.0.1:20081", "127.0.0.1:20082", "127.0.0.1:20083"]
    conf = layout.namesrv_settings(peers, 1, "/d/controller")
    assert conf["enableControllerInNamesrv"] is True
    assert conf["controllerDLegerPeers"] == (
        "c0-127.0.0.1:20081;c1-127.0.0.1:20082;c2-127.0.0.1:20083"
    )
    assert conf["controllerDLegerSelfId"] == "c1" and conf["controllerStorePath"] == "/d/controller"
    c = _cluster(tmp_path, ASYNC)
    assert c.namesrv_nodes() == [0, 1, 2]
    assert c.controller_addr() == ";".join(peers)
    assert rc.broker_conf(c, 0)["namesrvAddr"] == "127.0.0.1:20051;127.0.0.1:20052;127.0.0.1:20053"
    ends = c.endpoints().nodes
    assert [(n.extra["namesrv_host"], n.extra["namesrv"]) for n in ends] == [
        ("127.0.0.1", 20051 + i) for i in range(3)
    ]
    assert _cluster(tmp_path, {}).namesrv_nodes() == [0]  # the DLedger layout: one


def _health(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    state: dict[str, Any] | Exception,
) -> dict[str, Any]:
    c = _cluster(tmp_path, SYNCFLUSH)
    group = {0: "127.0.0.1:20021", 2: "127.0.0.1:20011", 3: "127.0.0.1:20031"}
    monkeypatch.setattr(c, "group", lambda: group)
    monkeypatch.setattr(c, "alive", lambda: [True] * 3)
    monkeypatch.setattr(rc.process, "port_open", lambda h, p: True)
    monkeypatch.setattr(
        rc.admin,
        "runtime_info",
        lambda b, t: {"commitLogMaxOffset": "700", "brokerVersionDesc": "V5_4_0"},
    )
    asked: list[tuple[str, int]] = []

    def sync_state(controller: tuple[str, int], g: str, _t: float) -> dict[str, Any]:
        asked.append(controller)
        assert g == rmqconf.GROUP
        if isinstance(state, Exception):
            raise state
        return state

    monkeypatch.setattr(rc.admin, "sync_state", sync_state)
    h = c.health()
    assert asked[0] == ("127.0.0.1", 20081)  # then the others, while one does not answer
    return h


def _replicas(*ports: int, dead: int | None = None) -> list[dict[str, Any]]:
    return [{"address": f"127.0.0.1:{p}", "alive": p != dead} for p in ports]


def test_controller_mode_is_healthy_once_every_broker_is_in_the_sync_state_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = {"master": "127.0.0.1:20021", "in_sync": _replicas(20021, 20011, 20031)}
    h = _health(tmp_path, monkeypatch, state)
    assert h["healthy"] and h["leader"] == 1 and h["sync_state_set"] == [0, 1, 2]


@pytest.mark.parametrize(
    "state",
    [
        {"master": "127.0.0.1:20021", "in_sync": _replicas(20021, 20011)},  # one not in sync
        {"master": "127.0.0.1:20021", "in_sync": _replicas(20021, 20011, 20031, dead=20031)},
        {"master": "127.0.0.1:20011", "in_sync": _replicas(20021, 20011, 20031)},  # two masters
        rc.DriverError("the controller does not answer"),
    ],
)
def test_controller_mode_is_not_healthy_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, state: Any
) -> None:
    h = _health(tmp_path, monkeypatch, state)
    assert not h["healthy"] and h["in_sync"] == [0, 1, 2]  # the offsets alone would pass


def test_the_cluster_remembers_its_layout_across_a_load(tmp_path: Path) -> None:
    c = _cluster(tmp_path, ASYNC)
    c.workdir.mkdir(parents=True)
    c.save_state()
    again = rc.RocketmqCluster.load(c.workdir)
    assert again.server == ASYNC and again.layout().startswith("controller mode")
    assert "the master alone" in again.layout() and "ASYNC_FLUSH" in again.layout()
    assert rc.RocketmqCluster(tmp_path / "d").layout() == "DLedger broker group"


class LabHost(LocalHost):
    """A lab's broker host as the launcher sees it (not this machine's loopback): its own
    address and root, files written under the test's directory."""

    is_local = False


def props_of(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def test_on_a_labs_hosts_every_node_gets_the_standard_ports_and_its_own_name_server(
    tmp_path: Path,
) -> None:
    """The controller layout on three lab hosts (no server started): each broker and name
    server on its host's address and RocketMQ's standard ports, every broker naming all
    three name servers and controllers, the proxy beside node 0; the endpoints name each
    broker's and name server's host for the driver's admin calls."""
    hosts = [LabHost(f"broker-{i}", f"10.0.3.{10 + i}", tmp_path / f"h{i}") for i in range(3)]
    c = rc.RocketmqCluster(tmp_path / "c", 3, hosts, server=SYNCFLUSH)
    c._prepare(lambda _m: None)
    std = {"broker": 10911, "namesrv": 9876, "controller": 9878, "proxy": 8081}
    assert all(c.ports[k] == [v] * 3 for k, v in std.items()), c.ports
    names = ";".join(f"10.0.3.{10 + i}:9876" for i in range(3))
    controllers = ";".join(f"10.0.3.{10 + i}:9878" for i in range(3))
    for i in range(3):
        d = Path(str(c.node_dir(i)))
        assert str(d).startswith(str(tmp_path / f"h{i}")), d
        broker = props_of(d / "broker.conf")
        assert broker["brokerIP1"] == f"10.0.3.{10 + i}" and broker["listenPort"] == "10911"
        assert broker["haListenPort"] == "10912" and broker["namesrvAddr"] == names
        assert broker["controllerAddr"] == controllers
        namesrv = props_of(d / "namesrv.conf")
        assert namesrv["listenPort"] == "9876" and namesrv["controllerDLegerSelfId"] == f"c{i}"
        assert namesrv["controllerDLegerPeers"].split(";")[i] == f"c{i}-10.0.3.{10 + i}:9878"
    proxy = (Path(str(c.node_dir(0))) / "rmq-proxy.json").read_text()
    assert f'"namesrvAddr": "{names}"' in proxy
    assert not (Path(str(c.node_dir(1))) / "rmq-proxy.json").exists()
    ends = c.endpoints().nodes
    assert [(n.host, n.port) for n in ends] == [("10.0.3.10", 8081)] * 3  # the one proxy
    assert [n.extra["broker_host"] for n in ends] == [f"10.0.3.{10 + i}" for i in range(3)]
    assert [n.extra["namesrv_host"] for n in ends] == [f"10.0.3.{10 + i}" for i in range(3)]
