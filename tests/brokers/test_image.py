"""The attach path for brokers whose images mqlab builds but whose launchers run locally
only (or do not exist): which class a lab picks, what clients get, how health is judged,
and what is refused."""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from mqlab.brokers import image, local, nodeconf, registry
from mqlab.brokers.cluster import LocalCluster
from mqlab.brokers.image import ImageCluster, attachable
from mqlab.errors import ClusterError

ROOT = Path(__file__).resolve().parents[2]
ADDRS = ["10.0.1.10", "10.0.1.11", "10.0.1.12"]


class FakeHost:
    """A lab host as the attach path uses it: its image file and its listening ports."""

    is_local = False

    def __init__(self, name: str, address: str, listens: set[int], info: dict[str, Any]):
        self.name, self.address, self.listens, self.info = name, address, listens, info
        self.root = PurePosixPath("/var/lib/mqlab-fleet")

    def listening(self, ports: list[int]) -> list[bool]:
        return [p in self.listens for p in ports]

    def run(self, cmd: list[str], check: bool = True, **_kw: Any) -> Any:
        class R:
            rc = 0
            out = json.dumps(self.info) if cmd[0] == "cat" else "10.0.1.1"

        return R()

    def forward(self, address: str, port: int) -> tuple[str, int]:
        return self.tunnel(address, port)

    def close(self) -> None:
        pass


def _hosts(broker: str, listens: list[set[int]] | None = None, **info: Any) -> list[Any]:
    info = {"broker": broker, "version": "9.9", **info}
    std = set(nodeconf.broker_ports(broker).values())
    return [
        FakeHost(f"broker-{i}", a, (listens[i] if listens else std), info)
        for i, a in enumerate(ADDRS)
    ]


def _cluster(tmp_path: Path, broker: str, hosts: list[Any] | None = None) -> ImageCluster:
    cls = local.attach_class(broker)
    assert issubclass(cls, ImageCluster), broker
    c = cls(tmp_path / broker, 3, hosts or _hosts(broker))
    c.reach = lambda a, p: ("127.0.0.1", 9)  # never used unless a test sets a listener
    return c


@pytest.fixture(autouse=True)
def _quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(image, "ANSWER_WAIT_S", 0.05)  # loopback servers answer at once


# -- which class a lab picks ------------------------------------------------------------
def test_images_attach_with_their_own_launcher_or_the_attach_path() -> None:
    for b in ("nats", "postgres", "redis", "rabbitmq"):
        assert local.attach_class(b) is local.cluster_class(b), b  # they run on hosts
    for b in ("kafka", "redpanda", "pulsar", "mongodb", "artemis", "rocketmq", "eventstore"):
        cls = local.attach_class(b)
        assert issubclass(cls, ImageCluster) and cls.broker == b, b
        assert cls.stand_in is None, b
    # local targets keep the stand-ins
    assert local.cluster_class("kafka").__name__ == "KafkaCluster"
    assert not local.cluster_class("artemis").runs_on_hosts  # the real one, local only
    # SQS has no image: its launcher stays, and refuses hosts in one line
    assert local.attach_class("sqs") is local.cluster_class("sqs")


def test_every_self_hosted_broker_can_be_attached_to() -> None:
    """Every broker with an image has an attach class whose ports are its standard ports,
    and the image's Nix module opens the port clients use."""
    for b in registry.self_hosted_brokers():
        cls = local.attach_class(b)
        assert cls.runs_on_hosts, b
        if not issubclass(cls, ImageCluster):
            continue
        std = nodeconf.broker_ports(b)
        spec = cls.spec
        names = [spec.client, *spec.running, *spec.node_ports]
        names += [spec.ready[0]] if spec.ready else []
        assert set(names) <= set(std), (b, names)
        nix = (ROOT / "images" / "brokers" / f"{b}.nix").read_text()
        opened = {int(p) for p in re.search(r"ports = \[([\d ]+)\]", nix)[1].split()}  # type: ignore[index]
        assert std[spec.client] in opened, (b, std[spec.client], opened)


def test_unknown_or_imageless_brokers_are_refused_in_one_line() -> None:
    with pytest.raises(ClusterError, match="unknown broker 'nope'"):
        local.attach_class("nope")
    with pytest.raises(ClusterError) as e:
        image.image_cluster("sqs")
    assert "\n" not in str(e.value) and "no broker image" in str(e.value)


def test_the_attach_path_runs_on_a_lab_only(tmp_path: Path) -> None:
    cls = local.attach_class("kafka")
    for hosts in (None, []):
        with pytest.raises(ClusterError) as e:
            cls(tmp_path, 3, hosts)
        assert "\n" not in str(e.value) and 'cluster.target = "aws"' in str(e.value)


# -- what clients get -----------------------------------------------------------------------
def test_endpoints_are_the_standard_client_ports(tmp_path: Path) -> None:
    want = {
        "kafka": 9092,
        "redpanda": 9092,
        "pulsar": 6650,
        "mongodb": 27017,
        "artemis": 61616,  # STOMP on Artemis' one acceptor
        "rocketmq": 8081,  # the gRPC proxy
        "eventstore": 2113,
    }
    for b, port in want.items():
        eps = _cluster(tmp_path, b).endpoints()
        assert eps.broker == b
        assert [(n.index, n.host, n.port) for n in eps.nodes] == [
            (i, a, port) for i, a in enumerate(ADDRS)
        ], b


def test_endpoint_extras_the_drivers_read(tmp_path: Path) -> None:
    pulsar = _cluster(tmp_path, "pulsar").endpoints()
    assert pulsar.extra["admin_urls"] == [f"http://{a}:8080" for a in ADDRS]
    rocket = _cluster(tmp_path, "rocketmq").endpoints()
    assert [n.extra for n in rocket.nodes] == [{"broker": 10911, "namesrv": 9876}] * 3
    # the replica set's name: the image's baked-in setting, once attached
    hosts = _hosts("mongodb", settings={"replSetName": "rs-lab"})
    mongo = _cluster(tmp_path, "mongodb", hosts)
    assert mongo.endpoints().extra == {"replica_set": "mqlab"}  # nodeconf's default
    mongo.image = [h.info for h in hosts]
    assert mongo.endpoints().extra == {"replica_set": "rs-lab"}
    assert _cluster(tmp_path, "kafka").endpoints().extra == {}


def test_follows_advertised_where_clients_go_on_to_advertised_addresses() -> None:
    follows = {b for b in attachable() if local.attach_class(b).follows_advertised}
    assert follows == {"kafka", "redpanda", "pulsar", "mongodb", "rocketmq", "eventstore"}
    assert not LocalCluster.follows_advertised


# -- health -----------------------------------------------------------------------------
@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP server that accepts and waits for the client to speak (as Kafka does)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    conns: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conns.append(srv.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield srv.getsockname()[1]
    srv.close()
    for c in conns:
        c.close()


#: how long a check waits for the closer to close (it returns as soon as it has)
CLOSER_WAIT_S = 30.0


@pytest.fixture
def closer() -> Iterator[int]:
    """A TCP server that closes every connection at once (a tunnel whose far end refused)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)

    def accept() -> None:
        while True:
            try:
                srv.accept()[0].close()
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield srv.getsockname()[1]
    srv.close()


def _refused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_answers_tells_a_server_from_a_tunnel_that_closes(listener: int, closer: int) -> None:
    assert image.answers("127.0.0.1", listener)
    # the closer's thread closes the connection whenever it is scheduled: on a loaded
    # machine that can be later than the default half second, which then reads as "open"
    assert not image.answers("127.0.0.1", closer, wait_s=CLOSER_WAIT_S)
    assert not image.answers("127.0.0.1", _refused_port())


def test_health_needs_every_node_listening_and_answering(tmp_path: Path, listener: int) -> None:
    c = _cluster(tmp_path, "kafka")
    reached: list[tuple[str, int]] = []

    def reach(a: str, p: int) -> tuple[str, int]:
        reached.append((a, p))
        return "127.0.0.1", listener

    c.reach = reach
    h = c.health()
    assert h["healthy"], h
    assert reached == [(a, 9092) for a in ADDRS]  # through the coordinator's reach
    assert [n["host"] for n in h["nodes"]] == ["broker-0", "broker-1", "broker-2"]
    assert c.alive() == [True] * 3
    # a node whose host does not listen on the client port: unhealthy, not alive
    c.hosts[1].listens = {9093}
    h = c.health()
    assert not h["healthy"] and not h["nodes"][1]["answers"], h
    assert c.alive() == [True, False, True]


def test_health_fails_when_the_node_does_not_answer(
    tmp_path: Path, closer: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(image, "ANSWER_WAIT_S", CLOSER_WAIT_S)  # as above: a slow closer
    c = _cluster(tmp_path, "mongodb")
    c.reach = lambda a, p: ("127.0.0.1", closer)
    h = c.health()
    assert not h["healthy"] and not any(n["answers"] for n in h["nodes"]), h


class _Ready(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        type(self).paths.append(self.path)  # type: ignore[attr-defined]
        self.send_response(type(self).status)
        self.end_headers()

    def log_message(self, *_a: Any) -> None:
        pass


@pytest.fixture
def ready_server() -> Iterator[tuple[int, type[_Ready]]]:
    handler = type("Ready", (_Ready,), {"status": 200, "paths": []})
    srv = HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv.server_address[1], handler  # type: ignore[misc]
    srv.shutdown()
    srv.server_close()


def test_health_asks_the_broker_own_readiness(
    tmp_path: Path, ready_server: tuple[int, Any]
) -> None:
    port, handler = ready_server
    c = _cluster(tmp_path, "eventstore")
    c.reach = lambda a, p: ("127.0.0.1", port)
    h = c.health()
    assert h["healthy"] and all(n["ready"] for n in h["nodes"]), h
    assert handler.paths == ["/health/live"] * 3
    handler.status = 503
    h = c.health()
    assert not h["healthy"] and [n["ready"] for n in h["nodes"]] == [False] * 3, h
    # Redpanda's admin API and Pulsar's broker API are asked on their own ports
    handler.status = 200
    rp = _cluster(tmp_path, "redpanda")
    seen: list[int] = []
    rp.reach = lambda a, p: (seen.append(p), ("127.0.0.1", port))[1]  # type: ignore[func-returns-value]
    assert rp.health()["healthy"]
    assert seen == [9092, 9644] * 3 and handler.paths[-1] == "/v1/status/ready"


def test_artemis_is_healthy_with_one_live_server_and_running_backups(
    tmp_path: Path, listener: int
) -> None:
    """Artemis' backups open no acceptor until they take over: the live server answers on
    the STOMP port, the backups run (their console listens)."""
    live, backup = {61616, 8161}, {8161}
    c = _cluster(tmp_path, "artemis", _hosts("artemis", [live, backup, backup]))
    c.reach = lambda a, p: ("127.0.0.1", listener)
    h = c.health()
    assert h["healthy"], h
    assert [n["answers"] for n in h["nodes"]] == [True, False, False]
    assert c.alive() == [True] * 3
    c.hosts[2].listens = set()  # a backup that is down
    assert not c.health()["healthy"]
    assert c.alive() == [True, True, False]


# -- attaching, versions, faults, stop --------------------------------------------------------
def test_attach_checks_the_image_and_takes_versions_from_it(tmp_path: Path, listener: int) -> None:
    c = _cluster(tmp_path, "rocketmq")
    c.reach = lambda a, p: ("127.0.0.1", listener)
    c.start()
    assert c.server_versions() == c.attached_versions() == ["rocketmq 9.9"]
    assert c.leader(None) == 0
    c.stop()  # leaves the image's nodes alone: nothing to stop, no host touched
    assert not (tmp_path / "rocketmq").exists()
    other = _cluster(tmp_path, "kafka", _hosts("redpanda"))
    with pytest.raises(ClusterError, match="broker-0: its image runs 'redpanda', not kafka"):
        other.start()


def test_process_faults_are_refused_in_one_line_on_attached_clusters(tmp_path: Path) -> None:
    c = _cluster(tmp_path, "kafka")
    calls = [
        ("kill_node", lambda: c.kill_node(0)),
        ("pause_node", lambda: c.pause_node(0)),
        ("resume_node", lambda: c.resume_node(0)),
        ("crash_all", c.crash_all),
        ("restart_node", lambda: c.restart_node(0)),
    ]
    for name, call in calls:
        with pytest.raises(ClusterError) as e:
            call()
        msg = str(e.value)
        assert msg.startswith(f"{name}: the lab's images run the kafka nodes"), msg
        assert "\n" not in msg and "partition, netem or power_loss" in msg


def test_every_port_a_node_runs_must_listen(tmp_path: Path, listener: int) -> None:
    """RocketMQ: the proxy answers, but a node whose name server does not listen is not
    healthy; it still runs (alive) while one of its ports listens."""
    c = _cluster(tmp_path, "rocketmq")
    c.reach = lambda a, p: ("127.0.0.1", listener)
    assert c.health()["healthy"]
    c.hosts[0].listens = {8081}
    h = c.health()
    assert not h["healthy"] and h["nodes"][0]["listening"] == {"proxy": True, "namesrv": False}
    assert c.alive() == [True] * 3


def test_the_run_attaches_to_an_aws_lab_with_the_attach_class(
    tmp_path: Path, listener: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """run.ClusterPool on a placement whose images run the brokers: the attach class,
    attached, through the placement's tunnels; closing the pool leaves the nodes alone."""
    from mqlab.labs.placement import Placement
    from mqlab.run.context import Observer
    from mqlab.run.pool import ClusterPool
    from mqlab.scenario.load import load_scenario

    monkeypatch.setenv("MQLAB_STATE_DIR", str(tmp_path / "state"))
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(k, "x")
    [s] = load_scenario(ROOT / "scenarios" / "aws" / "rocketmq-short-aws.toml")
    brokers = _hosts("rocketmq")
    tunnels: list[tuple[str, int]] = []
    for h in brokers:
        h.tunnel = lambda a, p: (tunnels.append((a, p)), ("127.0.0.1", listener))[1]
    clients = [
        FakeHost("sender-0", "10.0.1.20", set(), {}),
        FakeHost("receiver-0", "10.0.1.30", set(), {}),
    ]
    placement = Placement("aws", "lab", brokers, clients[:1], clients[1:])
    pool = ClusterPool(Observer())
    cluster, reused = pool.get(s, placement)
    assert type(cluster).__name__ == "RocketmqImageCluster" and cluster.attached and not reused
    assert tunnels == [(a, 8081) for a in ADDRS]
    assert cluster.attached_versions() == ["rocketmq 9.9"]
    assert pool.get(s, placement) == (cluster, False)  # the same lab: the same cluster
    pool.close()
