"""Pulsar: ZooKeeper, a bookie and a broker on every node.

Files: ``broker.conf``, ``bookkeeper.conf``, ``zookeeper.conf``, ``myid``; node 0 also
``cluster-metadata.args``, the arguments of ``pulsar initialize-cluster-metadata`` (run
once, before the brokers can serve: it registers the cluster and BookKeeper's ledger
layout in ZooKeeper). Ports: ``broker``, ``http``, ``zk``, ``zk_peer``, ``zk_election``,
``bookie``. ``data_dir`` holds ``zookeeper/``, ``journal/`` and ``ledgers/``.
ZooKeeper's own admin server is off: it would take port 8080, the broker's ``http``.
"""

from __future__ import annotations

from mqlab.brokers.nodeconf import Node, lines, props


def zookeepers(node: Node) -> str:
    return ",".join(node.endpoint("zk", i) for i in range(node.nodes))


def render(node: Node) -> dict[str, str]:
    zk, me, data = zookeepers(node), node.address, node.data_dir
    broker = node.config_settings() | {
        "metadataStoreUrl": f"zk:{zk}",
        "configurationMetadataStoreUrl": f"zk:{zk}",
        "advertisedAddress": me,
        "brokerServicePort": node.port("broker"),
        "webServicePort": node.port("http"),
        "clusterName": "mqlab",
    }
    bookie = {
        "metadataServiceUri": f"zk://{zk.replace(',', ';')}/ledgers",
        "advertisedAddress": me,
        "bookiePort": node.port("bookie"),
        "journalDirectories": f"{data}/journal",
        "ledgerDirectories": f"{data}/ledgers",
        "journalSyncData": True,
    }
    servers = [
        f"server.{i + 1}={node.addresses[i]}:{node.port('zk_peer', i)}:"
        f"{node.port('zk_election', i)}"
        for i in range(node.nodes)
    ]
    zookeeper = [
        f"dataDir={data}/zookeeper",
        f"clientPort={node.port('zk')}",
        "initLimit=10",
        "syncLimit=5",
        "admin.enableServer=false",
        *servers,
    ]
    files = {
        "broker.conf": lines(props(broker)),
        "bookkeeper.conf": lines(props(bookie)),
        "zookeeper.conf": lines(zookeeper),
        "myid": f"{node.index + 1}\n",
    }
    if node.index == 0:
        files["cluster-metadata.args"] = lines(cluster_metadata_args(node))
    return files


def cluster_metadata_args(node: Node) -> list[str]:
    """``pulsar initialize-cluster-metadata`` arguments, one per line."""
    zk = zookeepers(node)
    web = ",".join(node.endpoint("http", i) for i in range(node.nodes))
    service = ",".join(node.endpoint("broker", i) for i in range(node.nodes))
    return [
        "--cluster",
        "mqlab",
        "--metadata-store",
        f"zk:{zk}",
        "--configuration-metadata-store",
        f"zk:{zk}",
        "--web-service-url",
        f"http://{web}",
        "--broker-service-url",
        f"pulsar://{service}",
    ]
