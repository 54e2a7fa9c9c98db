"""RabbitMQ: nodes joined by classic-config peer discovery; quorum queues replicate.

Node names: ``mqlab-rabbit<i>@localhost`` (short names) when every node is on
127.0.0.1, else ``mqlab-rabbit<i>@<address>`` (long names: the node runs with
``RABBITMQ_USE_LONGNAME=true``, which ``env``/``rabbitmq-env.conf`` set).

Files: ``rabbitmq.conf``; ``rabbitmq-env.conf`` (this node's name, address and
ports; local clusters pass the same values as environment variables, ``env``);
``erlang.cookie`` (derived from the lab id, the same on every node).
Ports: ``amqp``, ``dist`` (Erlang distribution). ``data_dir`` is not written.
"""

from __future__ import annotations

from typing import Any

from mqlab.brokers.nodeconf import Node, is_loopback, lab_secret, lines

#: what local clusters run with (settings={}): patient discovery while nodes boot
LOCAL_SETTINGS: dict[str, Any] = {
    "cluster_formation.discovery_retry_limit": 60,
    "cluster_formation.discovery_retry_interval": 1000,
    "log.file.level": "info",
    "log.console": False,
}


def node_name(index: int, addresses: tuple[str, ...] | list[str]) -> str:
    if is_loopback(addresses):
        return f"mqlab-rabbit{index}@localhost"
    return f"mqlab-rabbit{index}@{addresses[index]}"


def uses_long_names(node: Node) -> bool:
    return not node.loopback


def _value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def env(node: Node) -> dict[str, str]:
    """This node's identity as RabbitMQ environment variables."""
    out = {
        "RABBITMQ_NODENAME": node_name(node.index, node.addresses),
        "RABBITMQ_NODE_IP_ADDRESS": node.address,
        "RABBITMQ_NODE_PORT": str(node.port("amqp")),
        "RABBITMQ_DIST_PORT": str(node.port("dist")),
    }
    if uses_long_names(node):
        out["RABBITMQ_USE_LONGNAME"] = "true"
    return out


def cookie(node: Node) -> str:
    return lab_secret(node.lab_id, "erlang-cookie")[:32]


def render(node: Node) -> dict[str, str]:
    conf: dict[str, Any] = {
        "listeners.tcp.1": node.endpoint("amqp", node.index),
        "loopback_users": "none",
        "cluster_formation.peer_discovery_backend": "classic_config",
    }
    # node 0 is the seed: it lists only itself and forms the cluster at once; the others
    # list every node and join it (node 0 listing peers that start after it would retry
    # discovery for retry_limit x interval, ~60 s, before booting alone)
    peers = [0] if node.index == 0 else range(node.nodes)
    conf |= {
        f"cluster_formation.classic_config.nodes.{n + 1}": node_name(i, node.addresses)
        for n, i in enumerate(peers)
    }
    conf |= node.config_settings() or LOCAL_SETTINGS
    return {
        "rabbitmq.conf": lines(
            ["# written by mqlab", *(f"{k} = {_value(v)}" for k, v in conf.items())]
        ),
        # rabbitmq-env.conf names the variables without their RABBITMQ_ prefix
        "rabbitmq-env.conf": lines(
            [
                "# written by mqlab",
                *(f"{k.removeprefix('RABBITMQ_')}={v}" for k, v in env(node).items()),
            ]
        ),
        "erlang.cookie": cookie(node),
    }
