"""EventStoreDB: a cluster found by gossip seeds (every other node).

Ports: ``http`` (gossip and clients; ``tcp`` is left at its default). ``data_dir`` is ``Db``.
"""

from __future__ import annotations

from mqlab.nodeconf import Node, lines, yaml


def render(node: Node) -> dict[str, str]:
    me = node.address
    seeds = ",".join(node.endpoint("http", i) for i in range(node.nodes) if i != node.index)
    s = node.config_settings() | {
        "Db": node.data_dir,
        "ClusterSize": node.nodes,
        "HttpPort": node.port("http"),
        "DiscoverViaDns": False,
        "GossipSeed": seeds,
        "NodeIp": me,
        "ReplicationIp": me,
        "NodeHostAdvertiseAs": me,
        "ReplicationHostAdvertiseAs": me,
    }
    return {"eventstore.conf": "---\n" + lines(yaml(s))}
