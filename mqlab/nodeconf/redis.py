"""Redis: ``redis.conf`` for node 0 (the primary) or a replica (``replicaof`` node 0).

Ports: ``client``. ``data_dir`` is the node's ``dir`` (AOF and RDB files).
"""

from __future__ import annotations

from typing import Any

from mqlab.nodeconf import Node, lines

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


def _value(v: object) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    return str(v)


def replicaof(node: Node) -> str | None:
    """``<primary address> <primary port>`` for a replica, None for the primary."""
    return None if node.index == 0 else f"{node.addresses[0]} {node.port('client', 0)}"


def render(node: Node) -> dict[str, str]:
    conf: dict[str, Any] = {
        "bind": node.address,
        "port": node.port("client"),
        "dir": node.data_dir,
    }
    conf |= node.config_settings() or LOCAL_SETTINGS
    conf.setdefault("protected-mode", False)  # peers and clients come over the network
    primary = replicaof(node)
    if primary is not None:
        conf["replicaof"] = primary
        if not node.loopback:
            conf["replica-announce-ip"] = node.address
    return {
        "redis.conf": lines(["# written by mqlab", *(f"{k} {_value(v)}" for k, v in conf.items())])
    }
