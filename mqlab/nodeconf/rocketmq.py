"""RocketMQ with a DLedger commit log: one broker group replicated by Raft over every node.

Ports: ``namesrv``, ``broker``, ``dledger``. ``data_dir`` is ``storePathRootDir``.
"""

from __future__ import annotations

from mqlab.nodeconf import Node, lines, props


def render(node: Node) -> dict[str, str]:
    s = node.config_settings() | {
        "brokerClusterName": "mqlab",
        "brokerName": "mqlab-broker",
        "brokerIP1": node.address,
        "listenPort": node.port("broker"),
        "namesrvAddr": ";".join(node.endpoint("namesrv", i) for i in range(node.nodes)),
        "storePathRootDir": node.data_dir,
        "dLegerGroup": "mqlab-broker",
        "dLegerPeers": ";".join(f"n{i}-{node.endpoint('dledger', i)}" for i in range(node.nodes)),
        "dLegerSelfId": f"n{node.index}",
    }
    return {"broker.conf": lines(props(s))}
