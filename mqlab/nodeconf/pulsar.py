"""Pulsar: ZooKeeper, a bookie and a broker on every node.

Files: ``broker.conf``, ``bookkeeper.conf``, ``zookeeper.conf``, ``myid``.
Ports: ``broker``, ``http``, ``zk``, ``zk_peer``, ``zk_election``, ``bookie``.
``data_dir`` holds ``zookeeper/``, ``journal/`` and ``ledgers/``.
"""

from __future__ import annotations

from mqlab.nodeconf import Node, lines, props


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
        *servers,
    ]
    return {
        "broker.conf": lines(props(broker)),
        "bookkeeper.conf": lines(props(bookie)),
        "zookeeper.conf": lines(zookeeper),
        "myid": f"{node.index + 1}\n",
    }
