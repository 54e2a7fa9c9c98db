"""EventStoreDB / KurrentDB: a cluster of ``ClusterSize`` nodes found by gossip seeds.

Ports: ``node`` (``NodePort``: HTTP, gRPC clients and gossip) and ``replication``
(``ReplicationPort``: the TCP replication between nodes); the option names are those of
EventStoreDB 23.10 and later (``HttpPort`` and ``IntTcpPort`` before). Every other node is
a gossip seed at its node port. ``data_dir`` is ``Db`` (the index lives under it); the
server's own logs go next to it, never into the package's directory. A write is
acknowledged once a majority of ``ClusterSize`` nodes has it: the server's fixed rule.
"""

from __future__ import annotations

from mqlab.brokers.nodeconf import Node, lines, yaml


def render(node: Node) -> dict[str, str]:
    me = node.address
    s = node.config_settings() | {
        "Db": node.data_dir,
        "Log": f"{node.data_dir}-log",
        "ClusterSize": node.nodes,
        "NodePort": node.port("node"),
        "ReplicationPort": node.port("replication"),
        "NodeIp": me,
        "ReplicationIp": me,
        "NodeHostAdvertiseAs": me,
        "ReplicationHostAdvertiseAs": me,
    }
    if node.nodes > 1:  # a single node has no one to gossip with
        others = [node.endpoint("node", i) for i in range(node.nodes) if i != node.index]
        s |= {"DiscoverViaDns": False, "GossipSeed": ",".join(others)}
    return {"eventstore.conf": "---\n" + lines(yaml(s))}
