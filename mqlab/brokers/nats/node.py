"""NATS with JetStream: ``nats.conf`` for one node of a cluster routed to every node.

Ports: ``client``, ``cluster`` (routes), ``http`` (monitoring). ``data_dir`` is
the JetStream store directory. Settings ``jetstream.*`` go into the ``jetstream``
block, ``cluster.*`` into the ``cluster`` block, the rest at top level.
"""

from __future__ import annotations

import json
from typing import Any

from mqlab.brokers.nodeconf import Node, NodeConfError

#: what local clusters run with (settings={}); images bring their own settings
LOCAL_SETTINGS: dict[str, Any] = {
    "max_payload": "8MB",
    "jetstream.max_memory_store": "256MB",
    "jetstream.max_file_store": "20GB",
}
CLUSTER_NAME = "mqlab"


def server_name(index: int) -> str:
    return f"mqlab-n{index}"


def routes(node: Node) -> list[str]:
    """Every node's route URL (its own included: NATS ignores a route to itself)."""
    return [f"nats-route://{node.endpoint('cluster', i)}" for i in range(node.nodes)]


def _value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def render(node: Node) -> dict[str, str]:
    settings = node.config_settings() or LOCAL_SETTINGS
    blocks: dict[str, dict[str, Any]] = {"": {}, "jetstream": {}, "cluster": {}}
    for key, value in settings.items():
        block, _, name = key.rpartition(".")
        if block not in blocks:
            raise NodeConfError(f"nats: setting {key!r} is not top-level, jetstream.* or cluster.*")
        blocks[block][name] = value
    top = "".join(f"{k}: {_value(v)}\n" for k, v in blocks[""].items())
    js = "".join(f"  {k}: {_value(v)}\n" for k, v in blocks["jetstream"].items())
    cluster = "".join(f"  {k}: {_value(v)}\n" for k, v in blocks["cluster"].items())
    route_list = ", ".join(json.dumps(r) for r in routes(node))
    me = node.address
    conf = f"""# written by mqlab
server_name: "{server_name(node.index)}"
listen: "{me}:{node.port("client")}"
http: "{me}:{node.port("http")}"
{top}jetstream {{
  store_dir: {json.dumps(node.data_dir)}
{js}}}
"""
    if node.nodes > 1:  # one node runs JetStream standalone: a cluster of one elects no leader
        conf += f"""cluster {{
  name: "{CLUSTER_NAME}"
  listen: "{me}:{node.port("cluster")}"
{cluster}  routes: [{route_list}]
}}
"""
    return {"nats.conf": conf}
