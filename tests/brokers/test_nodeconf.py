"""mqlab.brokers.nodeconf: one rendering of every broker's node configuration.

The local references below are today's launcher output, copied literally from
mqlab/brokers/{nats,redis,postgres,rabbitmq}.py (``_prepare``/``_base_backup``)
before the launchers were switched to mqlab.brokers.nodeconf: rendering with every node
on 127.0.0.1, per-node ports and ``settings={}`` must give exactly that.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mqlab.brokers import nodeconf
from mqlab.brokers.nats import node as nats
from mqlab.brokers.nodeconf import Node
from mqlab.brokers.postgres import node as postgres
from mqlab.brokers.rabbitmq import node as rabbitmq
from mqlab.brokers.redis import node as redis

ROOT = Path(__file__).resolve().parents[2]
LOCAL = ("127.0.0.1",) * 3
HOSTS = ("10.0.1.10", "10.0.1.11", "10.0.1.12")
WORKDIR = Path("/tmp/mqlab-cluster-x")


def local(broker: str, index: int, ports: dict[str, list[int]], data_dir: str) -> Node:
    return Node(
        broker=broker,
        index=index,
        addresses=LOCAL,
        ports={k: tuple(v) for k, v in ports.items()},
        data_dir=data_dir,
        lab_id="local-test",
        settings={},
    )


def host(broker: str, index: int, settings: dict | None = None) -> Node:
    return Node(
        broker=broker,
        index=index,
        addresses=HOSTS,
        ports=nodeconf.standard_ports(broker, 3),
        data_dir=f"/var/lib/mqlab/{broker}",
        lab_id="lab-7",
        settings=settings or {},
    )


# -- NATS ------------------------------------------------------------------------
NATS_PORTS = {
    "client": [4101, 4102, 4103],
    "cluster": [4201, 4202, 4203],
    "http": [4301, 4302, 4303],
}


def nats_today(i: int) -> str:
    """mqlab/brokers/nats/cluster.py NatsCluster._prepare, verbatim."""
    ports = NATS_PORTS
    node_dir = WORKDIR / f"n{i}"
    routes = ", ".join(f'"nats-route://127.0.0.1:{p}"' for p in ports["cluster"])
    return f"""# written by mqlab
server_name: "mqlab-n{i}"
listen: "127.0.0.1:{ports["client"][i]}"
http: "127.0.0.1:{ports["http"][i]}"
max_payload: 8MB
jetstream {{
  store_dir: "{node_dir / "js"}"
  max_memory_store: 256MB
  max_file_store: 20GB
}}
cluster {{
  name: "mqlab"
  listen: "127.0.0.1:{ports["cluster"][i]}"
  routes: [{routes}]
}}
"""


@pytest.mark.parametrize("i", range(3))
def test_nats_local_is_what_the_launcher_writes(i: int) -> None:
    node = local("nats", i, NATS_PORTS, str(WORKDIR / f"n{i}" / "js"))
    assert nodeconf.render(node) == {"nats.conf": nats_today(i)}


def test_nats_hosts_bind_own_address_and_route_to_peers() -> None:
    conf = nodeconf.render(host("nats", 1, {"jetstream.sync_interval": "always"}))["nats.conf"]
    assert 'listen: "10.0.1.11:4222"' in conf and 'http: "10.0.1.11:8222"' in conf
    assert 'listen: "10.0.1.11:6222"' in conf and "0.0.0.0" not in conf
    assert "sync_interval: always" in conf and 'store_dir: "/var/lib/mqlab/nats"' in conf
    assert nats.routes(host("nats", 1)) == [f"nats-route://{ip}:6222" for ip in HOSTS]


# -- Redis -----------------------------------------------------------------------
REDIS_PORTS = {"client": [6401, 6402, 6403], "sentinel": [26401, 26402, 26403]}


def redis_today(i: int) -> str:
    """mqlab/brokers/redis/cluster.py RedisCluster._prepare, verbatim."""
    d = WORKDIR / f"n{i}"
    ports = REDIS_PORTS
    lines = [
        "# written by mqlab",
        "bind 127.0.0.1",
        f"port {ports['client'][i]}",
        f"dir {d}",
        "daemonize no",
        'save ""',
        "appendonly yes",
        "appendfsync everysec",
        "repl-diskless-sync yes",
        "repl-diskless-sync-delay 0",
        "protected-mode no",
        "maxmemory-policy noeviction",
    ]
    if i > 0:
        lines.append(f"replicaof 127.0.0.1 {ports['client'][0]}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("i", range(3))
def test_redis_local_is_what_the_launcher_writes(i: int) -> None:
    node = local("redis", i, REDIS_PORTS, str(WORKDIR / f"n{i}"))
    files = nodeconf.render(node)
    assert sorted(files) == ["redis.conf", "sentinel.conf"]  # sentinel.conf: test_redis_sentinel
    assert files["redis.conf"] == redis_today(i)


def test_redis_hosts_replicate_primary_and_announce_own_address() -> None:
    settings = {"appendonly": True, "appendfsync": "always", "mqlab.replicas": 2}
    primary = nodeconf.render(host("redis", 0, settings))["redis.conf"].splitlines()
    assert "bind 10.0.1.10" in primary and "port 6379" in primary
    assert not any(x.startswith("replicaof") for x in primary)
    # once Sentinel fails over, the primary may become a replica: it announces itself too
    assert "replica-announce-ip 10.0.1.10" in primary
    replica = nodeconf.render(host("redis", 2, settings))["redis.conf"].splitlines()
    assert "bind 10.0.1.12" in replica and "replicaof 10.0.1.10 6379" in replica
    assert "replica-announce-ip 10.0.1.12" in replica and "appendfsync always" in replica
    assert "protected-mode no" in replica and not any("mqlab." in x for x in replica)
    assert redis.replicaof(host("redis", 2)) == "10.0.1.10 6379"
    assert redis.replicaof(host("redis", 0)) is None


# -- PostgreSQL ------------------------------------------------------------------
PG_PORTS = {"pg": [5501, 5502, 5503]}


def pg_primary_conf_today(nodes: int) -> str:
    """mqlab/brokers/postgres/cluster.py primary_conf + sync_standby_names, verbatim."""
    names = [f"s{i}" for i in range(1, nodes)]
    sync = f"ANY 1 ({', '.join(names)})" if names else ""
    return f"""
# written by mqlab
listen_addresses = '127.0.0.1'
max_connections = 300
wal_level = replica
max_wal_senders = {nodes + 4}
max_replication_slots = {nodes + 4}
hot_standby = on
synchronous_standby_names = '{sync}'
synchronous_commit = remote_write
fsync = on
"""


PG_HBA_TODAY = """# written by mqlab: trust, loopback only
local all all trust
local replication all trust
host all all 127.0.0.1/32 trust
host replication all 127.0.0.1/32 trust
"""


def pg_standby_today(index: int) -> str:
    """mqlab/brokers/postgres/cluster.py PostgresCluster._base_backup (auto.conf), verbatim."""
    slot = f"s{index}"
    conninfo = f"host=127.0.0.1 port={PG_PORTS['pg'][0]} user=postgres application_name={slot}"
    return (
        f"# mqlab: the standby's name in synchronous_standby_names\n"
        f"primary_conninfo = '{conninfo}'\nprimary_slot_name = '{slot}'\n"
    )


def pg_local(i: int, nodes: int = 3) -> Node:
    return Node(
        broker="postgres",
        index=i,
        addresses=("127.0.0.1",) * nodes,
        ports={"pg": tuple(PG_PORTS["pg"][:nodes])},
        data_dir=str(WORKDIR / "data" / f"n{i}"),
    )


@pytest.mark.parametrize("nodes", [1, 2, 3])
def test_postgres_local_primary_is_what_the_launcher_writes(nodes: int) -> None:
    files = nodeconf.render(pg_local(0, nodes))
    assert files["postgresql.conf"] == pg_primary_conf_today(nodes)
    assert files["pg_hba.conf"] == PG_HBA_TODAY
    assert postgres.hba(LOCAL) == PG_HBA_TODAY
    assert postgres.sync_standby_names(nodes) == pg_primary_conf_today(nodes).split("'")[3]


@pytest.mark.parametrize("i", [1, 2])
def test_postgres_local_standby_is_what_the_launcher_writes(i: int) -> None:
    node = pg_local(i)
    assert postgres.standby_name(i) == f"s{i}"  # pg_basebackup -S
    assert postgres.standby_settings(node) == pg_standby_today(i)
    assert nodeconf.render(node)["standby.conf"] == pg_standby_today(i)


def _conf(text: str) -> dict[str, str]:
    pairs = (line.split(" = ", 1) for line in text.splitlines() if " = " in line)
    return {k: v.strip("'") for k, v in pairs}


@pytest.mark.parametrize("where", ["local", "hosts"])
def test_postgres_standby_names_agree(where: str) -> None:
    """The primary waits for exactly the names the standbys connect with, on their slots."""
    settings = {"synchronous_standby_names": "ANY 1 (STANDBYS)", "fsync": "on"}
    nodes = [pg_local(i) if where == "local" else host("postgres", i, settings) for i in range(3)]
    files = [nodeconf.render(n) for n in nodes]
    sync = _conf(files[0]["postgresql.conf"])["synchronous_standby_names"]
    listed = sync.removeprefix("ANY 1 (").removesuffix(")").split(", ")
    apps, slots = [], []
    for f in files[1:]:
        conf = _conf(f["standby.conf"])
        info = dict(kv.split("=", 1) for kv in conf["primary_conninfo"].split())
        apps.append(info["application_name"])
        slots.append(conf["primary_slot_name"])
        assert info["host"] == nodes[0].addresses[0] and info["port"] == str(nodes[0].port("pg"))
    assert listed == apps == slots == files[0]["standbys"].split() == ["s1", "s2"]


def test_postgres_hosts_listen_on_own_address_and_trust_the_peers() -> None:
    settings = {
        "synchronous_standby_names": "ANY 1 (STANDBYS)",
        "wal_keep_size": "1GB",
        "max_wal_senders": 10,
    }
    files = nodeconf.render(host("postgres", 1, settings))
    conf = files["postgresql.conf"]
    assert "listen_addresses = '10.0.1.11'" in conf and "wal_keep_size = '1GB'" in conf
    assert "max_wal_senders = 10" in conf and "max_connections" not in conf  # image's own set
    assert "user=replicator" in files["standby.conf"]
    hba = files["pg_hba.conf"].splitlines()
    assert "local all all peer" in hba
    assert [x for x in hba if x.startswith("host replication")] == [
        f"host replication all {ip}/32 trust" for ip in HOSTS
    ]


def test_postgres_values_are_quoted_as_postgresql_reads_them() -> None:
    assert postgres.conf_value("remote_write") == "remote_write"
    assert postgres.conf_value(300) == "300" and postgres.conf_value(True) == "on"
    assert postgres.conf_value("ANY 1 (s1)") == "'ANY 1 (s1)'"
    assert postgres.conf_value("it's") == "'it''s'" and postgres.conf_value("") == "''"


# -- RabbitMQ --------------------------------------------------------------------
RMQ_PORTS = {"amqp": [5701, 5702, 5703], "dist": [5801, 5802, 5803]}


def rmq_conf_today(i: int, nodes: int = 3) -> str:
    """What the launcher writes for node ``i``."""

    def node_name(index: int) -> str:
        return f"mqlab-rabbit{index}@localhost"

    seeds = [0] if i == 0 else list(range(nodes))  # node 0 forms the cluster, others join
    peers = "\n".join(
        f"cluster_formation.classic_config.nodes.{n + 1} = {node_name(j)}"
        for n, j in enumerate(seeds)
    )
    return f"""# written by mqlab
listeners.tcp.1 = 127.0.0.1:{RMQ_PORTS["amqp"][i]}
loopback_users = none
cluster_formation.peer_discovery_backend = classic_config
{peers}
cluster_formation.discovery_retry_limit = 60
cluster_formation.discovery_retry_interval = 1000
log.file.level = info
log.console = false
"""


@pytest.mark.parametrize("i", range(3))
def test_rabbitmq_local_is_what_the_launcher_writes(i: int) -> None:
    node = local("rabbitmq", i, RMQ_PORTS, str(WORKDIR / f"n{i}"))
    files = nodeconf.render(node)
    assert files["rabbitmq.conf"] == rmq_conf_today(i)
    assert rabbitmq.node_name(i, LOCAL) == f"mqlab-rabbit{i}@localhost"
    assert not rabbitmq.uses_long_names(node)
    # the per-node environment RabbitmqCluster._env sets today
    assert rabbitmq.env(node) == {
        "RABBITMQ_NODENAME": f"mqlab-rabbit{i}@localhost",
        "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
        "RABBITMQ_NODE_PORT": str(RMQ_PORTS["amqp"][i]),
        "RABBITMQ_DIST_PORT": str(RMQ_PORTS["dist"][i]),
    }
    assert len(files["erlang.cookie"]) == 32


def test_rabbitmq_hosts_use_long_names_and_own_address() -> None:
    node = host("rabbitmq", 1, {"default_queue_type": "quorum"})
    files = nodeconf.render(node)
    conf = files["rabbitmq.conf"].splitlines()
    assert "listeners.tcp.1 = 10.0.1.11:5672" in conf and "default_queue_type = quorum" in conf
    assert [x for x in conf if ".classic_config.nodes." in x] == [
        f"cluster_formation.classic_config.nodes.{i + 1} = mqlab-rabbit{i}@{ip}"
        for i, ip in enumerate(HOSTS)
    ]
    seed = nodeconf.render(host("rabbitmq", 0))["rabbitmq.conf"].splitlines()
    assert [x for x in seed if ".classic_config.nodes." in x] == [
        f"cluster_formation.classic_config.nodes.1 = mqlab-rabbit0@{HOSTS[0]}"
    ]
    assert rabbitmq.uses_long_names(node)
    assert files["rabbitmq-env.conf"] == (
        "# written by mqlab\nNODENAME=mqlab-rabbit1@10.0.1.11\nNODE_IP_ADDRESS=10.0.1.11\n"
        "NODE_PORT=5672\nDIST_PORT=25672\nUSE_LONGNAME=true\n"
    )
    other = nodeconf.render(host("rabbitmq", 2))
    assert other["erlang.cookie"] == files["erlang.cookie"]  # the same lab, the same cookie


# -- every broker ----------------------------------------------------------------
HOST_SETTINGS = {
    "synchronous_standby_names": "ANY 1 (STANDBYS)",
    "jetstream.sync_interval": "always",
    "replSetName": "mqlab",
    "defaultWriteConcern": "majority",
}


@pytest.mark.parametrize("broker", nodeconf.brokers())
def test_every_broker_renders_own_address_and_peers(broker: str) -> None:
    settings = {k: v for k, v in HOST_SETTINGS.items() if broker in ("nats", "postgres")}
    files = nodeconf.render(host(broker, 1, settings))
    assert files and all(isinstance(v, str) and v for v in files.values())
    text = "".join(files.values())
    assert "10.0.1.11" in text and "10.0.1.10" in text and "0.0.0.0" not in text


@pytest.mark.parametrize("broker", nodeconf.brokers())
def test_every_broker_renders_on_loopback_with_per_node_ports(broker: str) -> None:
    base = nodeconf.standard_ports(broker, 3)
    ports = {name: tuple(20000 + 10 * k + i for i in range(3)) for k, name in enumerate(base)}
    node = Node(broker, 2, LOCAL, ports, f"/tmp/{broker}/n2")
    text = "".join(nodeconf.render(node).values())
    # the ports given, never the standard ones
    assert any(str(port) in text for p in ports.values() for port in p)
    assert not any(str(p[0]) in text for p in base.values())


def test_node_validates_index_and_ports() -> None:
    with pytest.raises(nodeconf.NodeConfError, match="outside the cluster"):
        Node("redis", 3, HOSTS, nodeconf.standard_ports("redis", 3), "/d")
    with pytest.raises(nodeconf.NodeConfError, match="lists 2 ports for 3 nodes"):
        Node("redis", 0, HOSTS, {"client": (1, 2)}, "/d")
    with pytest.raises(nodeconf.NodeConfError, match="no render recipe for broker 'sqs'"):
        nodeconf.render(Node("sqs", 0, HOSTS, {}, "/d"))
    with pytest.raises(nodeconf.NodeConfError, match="no render recipe"):
        nodeconf.standard_ports("sqs", 3)


def test_lab_values_are_derived_alike() -> None:
    assert nodeconf.lab_secret("lab-7", "x") == nodeconf.lab_secret("lab-7", "x")
    assert nodeconf.lab_secret("lab-7", "x") != nodeconf.lab_secret("lab-8", "x")
    assert len(nodeconf.kafka_cluster_id("lab-7")) == 22
    assert nodeconf.props({"b": [1, 2], "a": True}) == ["a=true", "b=1,2"]
    assert nodeconf.yaml({"b": "x", "a": 1}) == ["a: 1", 'b: "x"']


def test_the_package_needs_only_the_stdlib() -> None:
    """The images import it at boot with a bare Python: no site-packages, no other mqlab."""
    code = (
        "import json, sys\n"
        "from mqlab.brokers import nodeconf\n"
        "for b in nodeconf.brokers():\n"
        "    nodeconf.render(nodeconf.Node(b, 1, ('10.0.0.1', '10.0.0.2', '10.0.0.3'),\n"
        "        nodeconf.standard_ports(b, 3), '/d', 'lab',\n"
        "        {'synchronous_standby_names': 'ANY 1 (STANDBYS)'} if b == 'postgres' else {}))\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    env = {"PYTHONPATH": str(ROOT), "PATH": os.environ.get("PATH", "")}
    proc = subprocess.run(
        [sys.executable, "-S", "-c", code],
        env=env,
        cwd="/",
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    modules = json.loads(proc.stdout)
    foreign = [
        m
        for m in modules
        if m.split(".")[0] not in sys.stdlib_module_names
        and m not in ("mqlab", "mqlab.brokers", "mqlab.brokers.nodeconf", "__main__")
        and not (m.startswith("mqlab.brokers.") and m.count(".") == 2)
        and not (m.startswith("mqlab.brokers.") and m.endswith(".node"))
    ]
    assert foreign == []
    assert "mqlab.brokers.postgres.node" in modules and "site" not in modules
