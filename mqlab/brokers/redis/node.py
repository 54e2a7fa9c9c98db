"""Redis: ``redis.conf`` for the primary or a replica, and ``sentinel.conf`` for the
Redis Sentinel beside every node.

Ports: ``client`` (the server) and ``sentinel``. ``data_dir`` is the node's ``dir``
(AOF and RDB files) and the sentinel's (it rewrites its own config file there).

Node 0 starts as the primary and nodes 1.. replicate it. Once Sentinel has failed the
primary over, another node is the primary: ``redis_conf(node, primary)`` renders a node
as a replica of whichever node leads now (the launcher's restart uses it), ``render``
renders the starting layout.
"""

from __future__ import annotations

import hashlib
from typing import Any

from mqlab.brokers.nodeconf import Node, NodeConfError, lines

#: what local clusters run with (settings={}): AOF, fsync every second (Redis'
#: default and mqperf's setup), diskless replication, no eviction
LOCAL_SETTINGS: dict[str, Any] = {
    "daemonize": False,
    "save": '""',
    "appendonly": True,
    "appendfsync": "everysec",
    "repl-diskless-sync": True,
    "repl-diskless-sync-delay": 0,
    "protected-mode": False,
    "maxmemory-policy": "noeviction",
}

#: the name the sentinels monitor the primary under (clients ask for it)
MASTER_NAME = "mqlab"
#: a primary that has not answered for this long is down for a sentinel
DOWN_AFTER_MS = 2000
#: a failover that has not finished after this long is given up (and tried again after
#: twice this long); also the time the replicas get to follow a new primary
FAILOVER_TIMEOUT_MS = 5000
#: replicas re-synced with a new primary at a time
PARALLEL_SYNCS = 1


def _value(v: object) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    return str(v)


def quorum(node: Node) -> int:
    """Sentinels that must agree the primary is down: a majority of the nodes."""
    return node.nodes // 2 + 1


def replicaof(node: Node, primary: int = 0) -> str | None:
    """``<primary address> <primary port>`` for a replica, None for the primary."""
    if node.index == primary:
        return None
    return f"{node.addresses[primary]} {node.port('client', primary)}"


def redis_conf(node: Node, primary: int = 0) -> str:
    """``redis.conf`` of ``node`` while node ``primary`` is the primary."""
    if not 0 <= primary < node.nodes:
        raise NodeConfError(f"primary {primary} is outside the cluster ({node.nodes} nodes)")
    conf: dict[str, Any] = {
        "bind": node.address,
        "port": node.port("client"),
        "dir": node.data_dir,
    }
    conf |= node.config_settings() or LOCAL_SETTINGS
    conf.setdefault("protected-mode", False)  # peers and clients come over the network
    if not node.loopback:  # any node may become a replica once Sentinel fails over
        conf["replica-announce-ip"] = node.address
    upstream = replicaof(node, primary)
    if upstream is not None:
        conf["replicaof"] = upstream
    return lines(["# written by mqlab", *(f"{k} {_value(v)}" for k, v in conf.items())])


def sentinel_id(node: Node, index: int) -> str:
    """The run id of the sentinel on node ``index``'s host (40 hex digits), derived from the
    lab and its address, so every sentinel can be told the others' from the start."""
    where = f"{node.lab_id}:{node.addresses[index]}:{node.port('sentinel', index)}"
    return hashlib.sha1(f"mqlab-sentinel:{where}".encode()).hexdigest()  # noqa: S324 - an id


def sentinel_conf(node: Node) -> str:
    """``sentinel.conf`` of the sentinel on ``node``'s host: it monitors node 0, the
    starting primary, and knows the replicas and the other sentinels from the start
    (left to themselves, sentinels learn of each other from hello messages every 2 s)."""
    name = MASTER_NAME
    known = [
        f"sentinel known-replica {name} {node.addresses[i]} {node.port('client', i)}"
        for i in range(1, node.nodes)
    ] + [
        f"sentinel known-sentinel {name} {node.addresses[i]} {node.port('sentinel', i)} "
        f"{sentinel_id(node, i)}"
        for i in range(node.nodes)
        if i != node.index
    ]
    return lines(
        [
            "# written by mqlab; Redis Sentinel rewrites this file (its state) as it runs",
            f"bind {node.address}",
            f"port {node.port('sentinel')}",
            f"dir {node.data_dir}",
            "daemonize no",
            "protected-mode no",
            f"sentinel announce-ip {node.address}",
            f"sentinel announce-port {node.port('sentinel')}",
            f"sentinel monitor {name} {node.addresses[0]} {node.port('client', 0)} {quorum(node)}",
            f"sentinel down-after-milliseconds {name} {DOWN_AFTER_MS}",
            f"sentinel failover-timeout {name} {FAILOVER_TIMEOUT_MS}",
            f"sentinel parallel-syncs {name} {PARALLEL_SYNCS}",
            f"sentinel myid {sentinel_id(node, node.index)}",
            *known,
        ]
    )


def render(node: Node) -> dict[str, str]:
    return {"redis.conf": redis_conf(node), "sentinel.conf": sentinel_conf(node)}
