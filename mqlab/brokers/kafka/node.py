"""Kafka in KRaft mode: every node is broker and controller; node ``i`` has id ``i``.

Files: ``server.properties`` and ``cluster-id`` (derived from the lab id, the
same on every node, for ``kafka-storage.sh format``). Ports: ``kafka``,
``controller``. ``data_dir`` is ``log.dirs``.
"""

from __future__ import annotations

from typing import Any

from mqlab.brokers.nodeconf import Node, kafka_cluster_id, lines, props

#: the listener layout every node needs (an image's settings may repeat it)
KRAFT: dict[str, Any] = {
    "process.roles": "broker,controller",
    "controller.listener.names": "CONTROLLER",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    "inter.broker.listener.name": "PLAINTEXT",
}


def voters(node: Node) -> str:
    """``controller.quorum.voters``: ``id@address:port`` of every node."""
    return ",".join(f"{i}@{node.endpoint('controller', i)}" for i in range(node.nodes))


def render(node: Node) -> dict[str, str]:
    me = node.address
    s = KRAFT | node.config_settings()
    s |= {
        "node.id": node.index,
        "controller.quorum.voters": voters(node),
        "listeners": f"PLAINTEXT://{me}:{node.port('kafka')},"
        f"CONTROLLER://{me}:{node.port('controller')}",
        "advertised.listeners": f"PLAINTEXT://{me}:{node.port('kafka')}",
        "log.dirs": node.data_dir,
    }
    return {
        "server.properties": lines(props(s)),
        "cluster-id": kafka_cluster_id(node.lab_id) + "\n",
    }
