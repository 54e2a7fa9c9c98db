"""RocketMQ 5 with a DLedger commit log: one broker group whose commit log is replicated
by Raft over every node, a name server on every node, and the gRPC proxy inside each
broker's process (the proxy's local mode), which is what clients connect to.

Files: ``namesrv.conf`` (the name server), ``broker.conf`` (the broker: its DLedger peers,
the name servers, its store), ``rmq-proxy.json`` (the proxy: its ports, the cluster).
Ports: ``namesrv``, ``broker`` (the broker's remoting port; RocketMQ also opens its
``broker_vip`` port, ``broker`` - 2), ``dledger``, ``proxy`` (gRPC), ``proxy_remoting``.
``data_dir`` is ``storePathRootDir`` (DLedger keeps its log under it).

Every node names the same group (``mqlab-broker``, peers ``n0``..``n2``); which node
leads it is Raft's choice, and the leader alone takes writes.
"""

from __future__ import annotations

import json

from mqlab.brokers.nodeconf import Node, lines, props

CLUSTER = "mqlab"
GROUP = "mqlab-broker"
PROXY_ROUTE_REFRESH_S = 2


def namesrv_addr(node: Node) -> str:
    return ";".join(node.endpoint("namesrv", i) for i in range(node.nodes))


def dledger_peers(node: Node) -> str:
    """``n0-host:port;n1-host:port;...``: every member of the Raft group by its id."""
    return ";".join(f"n{i}-{node.endpoint('dledger', i)}" for i in range(node.nodes))


def render(node: Node) -> dict[str, str]:
    broker = node.config_settings() | {
        "brokerClusterName": CLUSTER,
        "brokerName": GROUP,
        "brokerIP1": node.address,
        "listenPort": node.port("broker"),
        "namesrvAddr": namesrv_addr(node),
        "storePathRootDir": node.data_dir,
        "enableDLegerCommitLog": True,
        "dLegerGroup": GROUP,
        "dLegerPeers": dledger_peers(node),
        "dLegerSelfId": f"n{node.index}",
    }
    namesrv = {"listenPort": node.port("namesrv")}
    proxy = {
        "rocketMQClusterName": CLUSTER,
        "namesrvAddr": namesrv_addr(node),
        "grpcServerPort": node.port("proxy"),
        "remotingListenPort": node.port("proxy_remoting"),
        # the proxy's cached topic routes are refreshed this long after they were loaded
        # (ProxyConfig's default: 20 s, during which, after the group's leader changed, it
        # sends receives and acks to the old leader), as the local cluster's proxy
        "topicRouteServiceCacheRefreshSeconds": PROXY_ROUTE_REFRESH_S,
    }
    return {
        "namesrv.conf": lines(props(namesrv)),
        "broker.conf": lines(props(broker)),
        "rmq-proxy.json": json.dumps(proxy, indent=2, sort_keys=True) + "\n",
    }
