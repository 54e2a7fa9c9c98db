"""images/scripts/mqlab_node.py: user data -> node identity -> broker config files."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from mqlab.brokers.registry import self_hosted_brokers

SCRIPT = Path(__file__).resolve().parents[2] / "images" / "scripts" / "mqlab_node.py"
PEERS = ["10.0.1.10", "10.0.1.11", "10.0.1.12"]


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mqlab_node", SCRIPT)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


node_tool = load()


def user_data(broker: str = "kafka", index: int = 1, **extra: object) -> str:
    data = {"lab_id": "lab-7", "broker": broker, "index": index, "peers": PEERS, "role": "broker"}
    data.update(extra)
    return json.dumps(data)


def image(broker: str, settings: dict) -> dict:
    return {"broker": broker, "settings": settings, "data_dir": "/var/lib/mqlab"}


def test_parse_user_data_broker_node() -> None:
    node = node_tool.parse_user_data(user_data(), "kafka")
    assert node["index"] == 1 and node["self_ip"] == "10.0.1.11" and node["peers"] == PEERS
    env = node_tool.node_env(node)
    assert "MQLAB_INDEX=1\n" in env and "MQLAB_PEER_2=10.0.1.12\n" in env
    assert "MQLAB_PEERS=10.0.1.10 10.0.1.11 10.0.1.12\n" in env


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("not json", "not JSON"),
        (user_data(broker="nats"), "this image runs 'kafka'"),
        (user_data(index=3), "outside peers"),
        (user_data(index=-1), "index must be"),
        (user_data(peers=["10.0.1.10", "db.local"]), "not an IP address"),
        (user_data(role="worker"), "role must be"),
        (json.dumps({"lab_id": "x"}), "lacks 'broker'"),
    ],
)
def test_parse_user_data_rejects(text: str, problem: str) -> None:
    with pytest.raises(node_tool.UserDataError, match=problem):
        node_tool.parse_user_data(text, "kafka")


def test_client_nodes_accept_any_broker() -> None:
    node = node_tool.parse_user_data(user_data(broker="kafka", role="sender", index=0), "client")
    assert node["role"] == "sender"


def render(broker: str, settings: dict, index: int = 1) -> dict[str, str]:
    node = node_tool.parse_user_data(user_data(broker, index), broker)
    return node_tool.render(node, image(broker, settings))


def test_render_kafka_kraft() -> None:
    files = render("kafka", {"min.insync.replicas": 2, "default.replication.factor": 3})
    props = files["server.properties"].splitlines()
    assert "node.id=1" in props and "min.insync.replicas=2" in props
    assert "controller.quorum.voters=0@10.0.1.10:9093,1@10.0.1.11:9093,2@10.0.1.12:9093" in props
    assert "advertised.listeners=PLAINTEXT://10.0.1.11:9092" in props
    # every node derives the same cluster id from the lab id (22 chars, base64url)
    other = render("kafka", {}, index=2)
    assert files["cluster-id"] == other["cluster-id"] and len(files["cluster-id"].strip()) == 22


def test_render_postgres_primary_and_standby() -> None:
    settings = {
        "synchronous_standby_names": "ANY 1 (STANDBYS)",
        "synchronous_commit": "remote_write",
    }
    primary = render("postgres", settings, index=0)
    # one standby naming with local clusters (mqlab.brokers.postgres.node.standby_name)
    assert "synchronous_standby_names = 'ANY 1 (s1, s2)'" in primary["postgresql.conf"]
    assert "synchronous_commit = remote_write" in primary["postgresql.conf"]
    assert "listen_addresses = '10.0.1.10'" in primary["postgresql.conf"]
    assert primary["role"] == "primary\n" and primary["standbys"] == "s1\ns2\n"
    standby = render("postgres", settings, index=2)
    # primary_conninfo goes to postgresql.auto.conf (after pg_basebackup -R's own)
    assert "application_name=s2" in standby["standby.conf"]
    assert "primary_slot_name = 's2'" in standby["standby.conf"]
    assert "host=10.0.1.10 port=5432 user=replicator" in standby["standby.conf"]
    assert standby["role"] == "standby\n"
    assert "host replication all 10.0.1.12/32 trust" in standby["pg_hba.conf"]


def test_render_redis_replica_and_mqlab_keys_stay_out() -> None:
    files = render("redis", {"appendonly": True, "mqlab.replicas": 2})
    conf = files["redis.conf"]
    assert "appendonly yes" in conf and "replicaof 10.0.1.10 6379" in conf
    assert "bind 10.0.1.11" in conf and "replica-announce-ip 10.0.1.11" in conf
    assert "dir /var/lib/mqlab/redis" in conf
    assert "mqlab." not in conf and "replicas" not in conf


def test_render_nats_rabbitmq() -> None:
    nats = render("nats", {"jetstream.sync_interval": "always"})["nats.conf"]
    routes = ", ".join(f'"nats-route://{ip}:6222"' for ip in PEERS)
    assert f"routes: [{routes}]" in nats and "sync_interval: always" in nats
    rmq = render("rabbitmq", {"default_queue_type": "quorum"})
    assert "default_queue_type = quorum" in rmq["rabbitmq.conf"]
    assert (
        "cluster_formation.classic_config.nodes.3 = mqlab-rabbit2@10.0.1.12" in rmq["rabbitmq.conf"]
    )
    env = rmq["rabbitmq-env.conf"].splitlines()
    assert "NODENAME=mqlab-rabbit1@10.0.1.11" in env and "USE_LONGNAME=true" in env


@pytest.mark.parametrize("broker", self_hosted_brokers())
def test_every_self_hosted_broker_has_a_render_recipe(broker: str) -> None:
    settings = {
        "synchronous_standby_names": "ANY 1 (STANDBYS)",
        "jetstream.sync_interval": "always",
        "replSetName": "mqlab",
        "defaultWriteConcern": "majority",
    }
    files = render(broker, settings)
    assert files and all(isinstance(v, str) and v for v in files.values())
    assert any("10.0.1.11" in v or "10.0.1.12" in v for v in files.values())


# -- the brokers without a driver yet: each file's content, parsed where it can be --------
# the durability settings their images bake in (images/brokers/<broker>.nix)
ARTEMIS = {  # mqperf 2021's journal settings
    "persistence-enabled": True,
    "journal-type": "MAPPED",
    "journal-datasync": False,
    "journal-sync-transactional": False,
    "journal-sync-non-transactional": False,
}
EVENTSTORE = {
    "Insecure": True,
    "RunProjections": "None",
    "SkipDbVerify": False,
    "UnsafeDisableFlushToDisk": False,
}
MONGODB = {"replSetName": "mqlab", "defaultWriteConcern": "majority", "mqlab.members": 3}
PULSAR = {
    "managedLedgerDefaultEnsembleSize": 3,
    "managedLedgerDefaultWriteQuorum": 3,
    "managedLedgerDefaultAckQuorum": 2,
    "brokerDeduplicationEnabled": False,
    "allowAutoTopicCreation": False,
    "mqlab.replicas": 3,
}
ROCKETMQ = {  # images/brokers/rocketmq.nix
    "flushDiskType": "ASYNC_FLUSH",
    "autoCreateTopicEnable": False,
    "autoCreateSubscriptionGroup": True,
    "mqlab.dledger_peers": 3,
}


def properties(text: str) -> dict[str, str]:
    """A Java properties file of ``key=value`` lines (comments and blank lines skipped);
    a key given twice fails, since the broker would silently take one of them."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        assert sep, f"not key=value: {line!r}"
        assert key.strip() not in out, f"{key} twice"
        out[key.strip()] = value.strip()
    assert text.endswith("\n")
    return out


AC = "{urn:activemq:core}"


def _artemis(index: int) -> ET.Element:
    files = render("artemis", ARTEMIS, index=index)
    assert set(files) == {"broker.xml"}
    root = ET.fromstring(files["broker.xml"])
    assert root.tag == "{urn:activemq}configuration"
    core = root.find(f"{AC}core")
    assert core is not None
    return core


def test_render_artemis_broker_xml() -> None:
    core = _artemis(1)
    text = {e.tag.removeprefix(AC): e.text for e in core if len(e) == 0}
    assert text == {
        "name": "mqlab-1",
        "paging-directory": "/var/lib/mqlab/artemis/paging",
        "bindings-directory": "/var/lib/mqlab/artemis/bindings",
        "journal-directory": "/var/lib/mqlab/artemis/journal",
        "large-messages-directory": "/var/lib/mqlab/artemis/large",
        "persistence-enabled": "true",
        "journal-type": "MAPPED",
        "journal-datasync": "false",
        "journal-sync-transactional": "false",
        "journal-sync-non-transactional": "false",
        "security-enabled": "false",
        "cluster-user": "mqlab",
        "cluster-password": text["cluster-password"],
    }
    # every node derives the same cluster password from the lab id
    assert _artemis(2).findtext(f"{AC}cluster-password") == text["cluster-password"]
    assert len(text["cluster-password"] or "") == 32
    connectors = {c.get("name"): c.text for c in core.iterfind(f"{AC}connectors/{AC}connector")}
    assert connectors == {
        "n0": "tcp://10.0.1.10:61616",
        "n1": "tcp://10.0.1.11:61616",
        "n2": "tcp://10.0.1.12:61616",
    }
    acceptors = [(a.get("name"), a.text) for a in core.iterfind(f"{AC}acceptors/{AC}acceptor")]
    assert acceptors == [("all", "tcp://10.0.1.11:61616")]  # its own address only
    (replication,) = core.iterfind(f"{AC}ha-policy/{AC}replication")
    # the pinned release (2.40.0) names the roles primary/backup (master/slave before 2.31)
    assert [(e.tag.removeprefix(AC), e.findtext(f"{AC}group-name")) for e in replication] == [
        ("backup", "mqlab")
    ]
    assert replication.findtext(f"{AC}backup/{AC}allow-failback") == "true"
    (cc,) = core.iterfind(f"{AC}cluster-connections/{AC}cluster-connection")
    assert cc.get("name") == "mqlab" and cc.findtext(f"{AC}connector-ref") == "n1"
    statics = [e.text for e in cc.iterfind(f"{AC}static-connectors/{AC}connector-ref")]
    assert statics == ["n0", "n2"]  # the other two nodes
    settings = {
        s.get("match"): {e.tag.removeprefix(AC): e.text for e in s}
        for s in core.iterfind(f"{AC}address-settings/{AC}address-setting")
    }
    # the driver's queues: anycast, kept when empty, never dead-lettered
    assert settings["#"]["default-queue-routing-type"] == "ANYCAST"
    assert settings["#"]["auto-delete-queues"] == "false"
    assert settings["#"]["max-delivery-attempts"] == "-1"
    # its management reply queues go when empty
    assert settings["mqlab.reply.#"]["auto-delete-queues"] == "true"


def test_render_artemis_node_0_is_the_replication_primary() -> None:
    core = _artemis(0)
    assert core.findtext(f"{AC}name") == "mqlab-0"
    (replication,) = core.iterfind(f"{AC}ha-policy/{AC}replication")
    assert [e.tag.removeprefix(AC) for e in replication] == ["primary"]
    # back after a failover, it looks for the live server instead of serving stale data
    assert replication.findtext(f"{AC}primary/{AC}check-for-active-server") == "true"
    (acceptor,) = core.iterfind(f"{AC}acceptors/{AC}acceptor")
    assert acceptor.text == "tcp://10.0.1.10:61616"
    cc = core.find(f"{AC}cluster-connections/{AC}cluster-connection")
    assert cc is not None
    statics = [e.text for e in cc.iterfind(f"{AC}static-connectors/{AC}connector-ref")]
    assert cc.findtext(f"{AC}connector-ref") == "n0" and statics == ["n1", "n2"]


def test_render_eventstore_conf() -> None:
    files = render("eventstore", EVENTSTORE, index=1)
    assert set(files) == {"eventstore.conf"}
    text = files["eventstore.conf"]
    assert text.startswith("---\n")
    assert yaml.safe_load(text) == {
        "Insecure": True,
        "RunProjections": "None",
        "SkipDbVerify": False,
        "UnsafeDisableFlushToDisk": False,
        "Db": "/var/lib/mqlab/eventstore",
        "Log": "/var/lib/mqlab/eventstore-log",
        "ClusterSize": 3,
        "NodePort": 2113,
        "ReplicationPort": 1112,
        "DiscoverViaDns": False,
        "GossipSeed": "10.0.1.10:2113,10.0.1.12:2113",  # the other two nodes
        "NodeIp": "10.0.1.11",
        "ReplicationIp": "10.0.1.11",
        "NodeHostAdvertiseAs": "10.0.1.11",
        "ReplicationHostAdvertiseAs": "10.0.1.11",
    }
    other = yaml.safe_load(render("eventstore", EVENTSTORE, index=0)["eventstore.conf"])
    assert other["GossipSeed"] == "10.0.1.11:2113,10.0.1.12:2113"
    assert other["NodeIp"] == other["NodeHostAdvertiseAs"] == "10.0.1.10"


def test_render_eventstore_per_node_ports_and_a_single_node() -> None:
    from mqlab.brokers import nodeconf

    ports = {"node": (21131, 21132, 21133), "replication": (11121, 11122, 11123)}
    node = nodeconf.Node("eventstore", 2, ("127.0.0.1",) * 3, ports, "/tmp/es/n2")
    conf = yaml.safe_load(nodeconf.render(node)["eventstore.conf"])
    assert (conf["NodePort"], conf["ReplicationPort"]) == (21133, 11123)
    assert conf["GossipSeed"] == "127.0.0.1:21131,127.0.0.1:21132"  # the others' node ports
    assert conf["Db"] == "/tmp/es/n2" and conf["Log"] == "/tmp/es/n2-log"
    one = nodeconf.Node(
        "eventstore", 0, ("10.0.1.10",), {"node": (2113,), "replication": (1112,)}, "/d"
    )
    single = yaml.safe_load(nodeconf.render(one)["eventstore.conf"])
    assert single["ClusterSize"] == 1 and "GossipSeed" not in single


INIT_JS = (
    'rs.initiate({_id: "mqlab", writeConcernMajorityJournalDefault: true, members: ['
    '{_id: 0, host: "10.0.1.10:27017"}, {_id: 1, host: "10.0.1.11:27017"}, '
    '{_id: 2, host: "10.0.1.12:27017"}]});\n'
    'db.adminCommand({setDefaultRWConcern: 1, defaultWriteConcern: {w: "majority", j: true}});\n'
)


def test_render_mongodb_conf_and_replica_set_init() -> None:
    files = render("mongodb", MONGODB, index=1)
    assert set(files) == {"mongod.conf", "init.js"}
    assert yaml.safe_load(files["mongod.conf"]) == {
        "storage": {"dbPath": "/var/lib/mqlab/mongodb"},
        "net": {"bindIp": "127.0.0.1,10.0.1.11", "port": 27017},
        "replication": {"replSetName": "mqlab"},
    }
    assert files["init.js"] == INIT_JS  # every member, majority, journaled
    assert "mqlab.members" not in "".join(files.values())
    named = render("mongodb", {"replSetName": "rs7"}, index=0)
    assert yaml.safe_load(named["mongod.conf"])["replication"] == {"replSetName": "rs7"}
    assert named["init.js"].startswith('rs.initiate({_id: "rs7", ')


def test_render_mongodb_numeric_write_concern_stays_a_number() -> None:
    init = render("mongodb", {"defaultWriteConcern": 2}, index=0)["init.js"]
    assert "defaultWriteConcern: {w: 2, j: true}" in init


def test_render_pulsar_broker_bookie_and_zookeeper() -> None:
    files = render("pulsar", PULSAR, index=2)
    assert set(files) == {"broker.conf", "bookkeeper.conf", "zookeeper.conf", "myid"}
    # node 0 alone registers the cluster in ZooKeeper (initialize-cluster-metadata)
    first = render("pulsar", PULSAR, index=0)
    assert set(first) - set(files) == {"cluster-metadata.args"}
    args = first["cluster-metadata.args"].splitlines()
    assert dict(zip(args[::2], args[1::2], strict=True)) == {
        "--cluster": "mqlab",
        "--metadata-store": "zk:10.0.1.10:2181,10.0.1.11:2181,10.0.1.12:2181",
        "--configuration-metadata-store": "zk:10.0.1.10:2181,10.0.1.11:2181,10.0.1.12:2181",
        "--web-service-url": "http://10.0.1.10:8080,10.0.1.11:8080,10.0.1.12:8080",
        "--broker-service-url": "pulsar://10.0.1.10:6650,10.0.1.11:6650,10.0.1.12:6650",
    }
    zk = "10.0.1.10:2181,10.0.1.11:2181,10.0.1.12:2181"
    assert properties(files["broker.conf"]) == {
        "managedLedgerDefaultEnsembleSize": "3",
        "managedLedgerDefaultWriteQuorum": "3",
        "managedLedgerDefaultAckQuorum": "2",
        "brokerDeduplicationEnabled": "false",
        "allowAutoTopicCreation": "false",
        "metadataStoreUrl": f"zk:{zk}",
        "configurationMetadataStoreUrl": f"zk:{zk}",
        "advertisedAddress": "10.0.1.12",
        "brokerServicePort": "6650",
        "webServicePort": "8080",
        "clusterName": "mqlab",
    }
    assert properties(files["bookkeeper.conf"]) == {
        "metadataServiceUri": "zk://10.0.1.10:2181;10.0.1.11:2181;10.0.1.12:2181/ledgers",
        "advertisedAddress": "10.0.1.12",
        "bookiePort": "3181",
        "journalDirectories": "/var/lib/mqlab/pulsar/journal",
        "ledgerDirectories": "/var/lib/mqlab/pulsar/ledgers",
        "journalSyncData": "true",
    }
    zookeeper = {
        "dataDir": "/var/lib/mqlab/pulsar/zookeeper",
        "clientPort": "2181",
        "initLimit": "10",
        "syncLimit": "5",
        "admin.enableServer": "false",  # its admin server would take the broker's 8080
        "server.1": "10.0.1.10:2888:3888",
        "server.2": "10.0.1.11:2888:3888",
        "server.3": "10.0.1.12:2888:3888",
    }
    assert properties(files["zookeeper.conf"]) == zookeeper
    assert files["myid"] == "3\n"  # ZooKeeper ids count from 1: server.3 is this node
    # every node: the same ensemble, its own id
    for i in range(3):
        node = render("pulsar", PULSAR, index=i)
        assert properties(node["zookeeper.conf"]) == zookeeper
        assert node["myid"] == f"{i + 1}\n"
        assert properties(node["broker.conf"])["advertisedAddress"] == PEERS[i]


def test_render_rocketmq_dledger_broker() -> None:
    files = render("rocketmq", ROCKETMQ, index=1)
    assert set(files) == {"namesrv.conf", "broker.conf", "rmq-proxy.json"}
    namesrvs = "10.0.1.10:9876;10.0.1.11:9876;10.0.1.12:9876"
    assert properties(files["broker.conf"]) == {
        "flushDiskType": "ASYNC_FLUSH",
        "autoCreateTopicEnable": "false",
        "autoCreateSubscriptionGroup": "true",
        "brokerClusterName": "mqlab",
        "brokerName": "mqlab-broker",
        "brokerIP1": "10.0.1.11",
        "listenPort": "10911",
        "namesrvAddr": namesrvs,
        "storePathRootDir": "/var/lib/mqlab/rocketmq",
        "enableDLegerCommitLog": "true",
        "dLegerGroup": "mqlab-broker",
        "dLegerPeers": "n0-10.0.1.10:40911;n1-10.0.1.11:40911;n2-10.0.1.12:40911",
        "dLegerSelfId": "n1",
    }
    assert properties(files["namesrv.conf"]) == {"listenPort": "9876"}
    assert json.loads(files["rmq-proxy.json"]) == {
        "rocketMQClusterName": "mqlab",
        "namesrvAddr": namesrvs,
        "grpcServerPort": 8081,
        "remotingListenPort": 8080,
        "topicRouteServiceCacheRefreshSeconds": 2,  # as the local cluster's proxy
    }
    for i in (0, 2):
        conf = properties(render("rocketmq", ROCKETMQ, index=i)["broker.conf"])
        assert (conf["dLegerSelfId"], conf["brokerIP1"]) == (f"n{i}", PEERS[i])
        assert conf["dLegerPeers"] == "n0-10.0.1.10:40911;n1-10.0.1.11:40911;n2-10.0.1.12:40911"


class _Imds(BaseHTTPRequestHandler):
    body = b""

    def do_PUT(self) -> None:  # noqa: N802
        assert self.path == "/latest/api/token"
        self._send(b"token-1")

    def do_GET(self) -> None:  # noqa: N802
        ok = (
            self.path == "/latest/user-data"
            and self.headers["X-aws-ec2-metadata-token"] == "token-1"
        )
        self._send(self.body if ok else b"", 200 if ok else 401)

    def _send(self, body: bytes, code: int = 200) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def imds() -> Iterator[str]:
    _Imds.body = user_data("nats", 2).encode()
    server = HTTPServer(("127.0.0.1", 0), _Imds)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_bootstrap_then_render_via_imdsv2(imds: str, tmp_path: Path) -> None:
    """The script as the image runs it: IMDSv2 user data -> files -> nats.conf."""
    run = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "bootstrap",
            "--broker",
            "nats",
            "--imds",
            imds,
            "--out",
            str(run),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    node = json.loads((run / "node.json").read_text())
    assert node["index"] == 2 and node["self_ip"] == "10.0.1.12"
    img = tmp_path / "broker.json"
    img.write_text(json.dumps(image("nats", {"jetstream.sync_interval": "always"})))
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "render",
            "--node",
            str(run / "node.json"),
            "--image",
            str(img),
            "--out",
            str(run / "conf"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert 'server_name: "mqlab-n2"' in (run / "conf" / "nats.conf").read_text()


def test_script_runs_as_shipped_next_to_nodeconf(tmp_path: Path) -> None:
    """images/base.nix's layout: mqlab_node.py with mqlab/brokers beside it (no
    mqlab/__init__.py), run by a bare Python (-S: no site-packages)."""
    tool = tmp_path / "tool"
    (tool / "mqlab").mkdir(parents=True)
    shutil.copy(SCRIPT, tool / "mqlab_node.py")
    shutil.copytree(
        SCRIPT.parents[2] / "mqlab" / "brokers",
        tool / "mqlab" / "brokers",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    (tmp_path / "node.json").write_text(
        json.dumps(node_tool.parse_user_data(user_data("redis", 1), "redis"))
    )
    (tmp_path / "broker.json").write_text(json.dumps(image("redis", {"appendonly": True})))
    proc = subprocess.run(
        [sys.executable, "-S", str(tool / "mqlab_node.py"), "render"]
        + ["--node", str(tmp_path / "node.json"), "--image", str(tmp_path / "broker.json")]
        + ["--out", str(tmp_path / "conf")],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "replicaof 10.0.1.10 6379" in (tmp_path / "conf" / "redis.conf").read_text()


def test_bootstrap_bad_user_data_is_one_line_exit_2(tmp_path: Path) -> None:
    ud = tmp_path / "ud.json"
    ud.write_text(user_data("redis", 0))
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "bootstrap",
            "--broker",
            "kafka",
            "--user-data-file",
            str(ud),
            "--out",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "this image runs 'kafka'" in proc.stderr
